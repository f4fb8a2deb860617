"""SIGTERM / SIGINT stop the controller within seconds, while it is busy, and lose no write it made (issue 16, item 6).

In upstream's scalability run the controller ignored SIGTERM and was killed
after 20 s. Here the real process (``multikueue run``, as in a Pod) admits a
stream of Workloads created directly, is signalled in the middle, and must
exit 0 within a few seconds; every Workload its log says it reserved quota for
must carry that reservation and ``Admitted`` on the API server. The process
is started with both signals blocked, as some supervisors leave them (the mask
is inherited): the controller must unblock them itself.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from kubernetes.client.rest import ApiException

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters

pytestmark = pytest.mark.integration

WORKLOADS = 400
#: Seconds the controller may take from the signal to its exit.
EXIT_SECONDS = 6.0


@pytest.fixture
def own_controller(
    integration_clusters: Clusters, integration_controller: ControllerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControllerProcess]:
    """The session's controller stopped, one of ours (logging every reservation) in its place; the session's back after."""
    integration_controller.stop()
    log = tmp_path_factory.mktemp("shutdown") / "controller.log"
    ours = ControllerProcess(
        "shutdown", integration_clusters.kubeconfigs[0], "manager", log, extra_args=("--controller-log-level", "DEBUG")
    )
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)  # the child inherits this thread's mask
    try:
        ours.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    try:
        yield ours
    finally:
        ours.stop()
        integration_controller.start()


def reserved_in_log(text: str, namespace: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if '"quota reserved"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        ns, _, name = str(record.get("workload", "")).partition("/")
        if ns == namespace:
            names.add(name)
    return names


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_busy_controller_within_seconds_without_losing_writes(
    integration_clusters: Clusters, own_controller: ControllerProcess, namespace: str, sig: signal.Signals
) -> None:
    ns = namespace
    k = o.Kueue(integration_clusters.manager)
    k.create(o.resource_flavor(f"default-{ns}"))
    k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": WORKLOADS}}))
    k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))

    stop_creating = threading.Event()

    def create(start: int) -> None:
        for i in range(start, WORKLOADS, 4):
            if stop_creating.is_set():
                return
            try:
                k.create(o.workload(ns, f"wl-{i:03d}", "user-queue", {"cpu": "1"}))
            except ApiException:
                return  # a test failure shows below; the creators only make the controller busy

    creators = [threading.Thread(target=create, args=(i,), daemon=True) for i in range(4)]
    for thread in creators:
        thread.start()
    try:
        o.wait_for(
            lambda: sum(o.is_true(w, "QuotaReserved") for w in k.list("Workload", ns)) >= 30,
            60,
            interval=0.05,
            what="admissions under way",
        )
        process = own_controller.process
        assert process is not None and process.popen is not None
        signalled = time.monotonic()
        process.signal(sig)
        try:
            code = process.popen.wait(timeout=EXIT_SECONDS)
        except Exception:
            pytest.fail(f"still running {EXIT_SECONDS} s after {sig.name}:\n{process.log_tail(40)}")
        took = time.monotonic() - signalled
        own_controller.process = None
    finally:
        stop_creating.set()
        for thread in creators:
            thread.join(timeout=30)

    logs = own_controller.logs()
    assert code == 0, f"exit status {code} after {sig.name}:\n{logs[-3000:]}"
    assert '"controller stopped"' in logs, logs[-3000:]
    reserved = reserved_in_log(logs, ns)
    assert reserved, "no reservation in the log before the signal"
    on_server = {w["metadata"]["name"]: w for w in k.list("Workload", ns)}
    lost = sorted(
        name
        for name in reserved
        if not (
            o.is_true(on_server.get(name), "QuotaReserved")
            and o.is_true(on_server.get(name), "Admitted")
        )
    )
    assert not lost, f"logged as reserved, not so on the server: {lost[:10]}"
    print(f"{sig.name}: exited in {took:.2f} s; {len(reserved)} reservations logged, all on the server")
