"""Faults injected into the local clusters' processes, for the fault suite (``-m faults``).

A fault here is what an operator or a machine does to a control plane:
kill a component (SIGKILL, as a crash or an OOM kill), restart it cleanly
(SIGTERM, as a rolling upgrade), or freeze it (SIGSTOP: the process keeps
its sockets open and answers nothing, as a VM paused or a node under
memory pressure). Each helper leaves the component running and ready again
when it returns, so a test's clean-up never depends on the fault's.

Only etcd and kube-apiserver are restarted as faults: they are what
MultiKueue talks to (directly, or underneath). kwok can be restarted too, as
the clean-up of a fault: its fake kubelets drop a pod's stage that failed
while etcd was away and never apply it again, where a real kubelet retries.
The controller processes have their own ``kill``/``start``
(:class:`multikueue.dev.controllers.ControllerProcess`).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

from multikueue.dev.binaries import ensure_binaries
from multikueue.dev.localcluster import LocalCluster
from multikueue.dev.process import ManagedProcess

#: The components this module can bring back, in start order.
RESTARTABLE = ("etcd", "kube-apiserver", "kwok")


def _component(cluster: LocalCluster, component: str) -> ManagedProcess:
    if component not in RESTARTABLE:
        raise ValueError(f"{component!r} cannot be restarted here; choose one of {', '.join(RESTARTABLE)}")
    for proc in cluster.processes:
        if proc.name.endswith("/" + component):
            return proc
    raise LookupError(f"{cluster.name}: no {component} process is running")


def _start(cluster: LocalCluster, component: str) -> None:
    binaries = ensure_binaries().binaries
    if component == "etcd":
        cluster.start_etcd(binaries)
        cluster.wait_etcd()
    elif component == "kwok":
        cluster.start_kwok(binaries)  # no health check of its own: it re-lists the pods as it starts
    else:
        cluster.start_apiserver(binaries)
        cluster.wait_apiserver()


#: How long a clean stop may take before SIGKILL, as a supervisor's grace period. The local
#: kube-apiserver's graceful shutdown can hang on open watches for longer than a worker may be
#: out of reach without losing its Jobs (workerLostTimeout), which is not the fault under test.
GRACE_SECONDS = 5.0


def restart(cluster: LocalCluster, component: str, *, kill: bool = False, down_for: float = 0.0) -> float:
    """Stop ``component`` (SIGKILL when ``kill``, else SIGTERM with :data:`GRACE_SECONDS`), wait
    ``down_for`` s, start it; return the seconds it was down.

    Returns once the component answers its health check again.
    """
    proc = _component(cluster, component)
    started = time.monotonic()
    if kill:
        proc.signal(signal.SIGKILL)
    proc.stop(timeout=GRACE_SECONDS)
    cluster.processes.remove(proc)
    time.sleep(down_for)
    _start(cluster, component)
    return time.monotonic() - started


@contextmanager
def frozen(cluster: LocalCluster, component: str) -> Iterator[None]:
    """``component`` stopped with SIGSTOP for the ``with`` block (its TCP sockets stay open), then resumed."""
    proc = _component(cluster, component)
    proc.signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.signal(signal.SIGCONT)
