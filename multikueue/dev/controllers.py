"""Run this project's controller against the local clusters.

The controller runs as its own process (``multikueue run``), exactly as it
would in a Pod, so tests and the demo exercise the real entry point: kopf,
its watches and the JSON logs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

from multikueue.dev.process import ManagedProcess, spawn, wait_until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def probe(port: int, path: str = "/healthz") -> bool:
    """Whether the controller's health port answers 200 on ``path`` (``/healthz``: alive; ``/readyz``: cache synced)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class ControllerRun:
    """What every way of running the controller offers the tests besides start/stop: its log, its Lease name, restart."""

    log: Path

    def start(self, timeout: float = 60) -> "ControllerRun":
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def restart(self) -> "ControllerRun":
        self.stop()
        return self.start()

    def logs(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def identity(self) -> str | None:
        """This run's name in the leader-election Lease (``--leader-elect``), from its start-up log line."""
        return identity_in_log(self.logs())


@dataclass
class ControllerProcess(ControllerRun):
    """One ``multikueue run`` process and how to reach its probes."""

    name: str
    kubeconfig: Path
    role: str
    log: Path
    extra_args: tuple[str, ...] = ()
    #: Serve the Job admission webhooks (the API server reaches them on 127.0.0.1).
    webhooks: bool = False
    process: ManagedProcess | None = None
    health_port: int = 0
    metrics_port: int = 0
    webhook_port: int = 0

    def start(self, timeout: float = 60) -> "ControllerProcess":
        self.health_port = free_port()
        self.metrics_port = free_port()
        argv = [
            sys.executable,
            "-m",
            "multikueue.cli.main",
            "run",
            "--role",
            self.role,
            "--kubeconfig",
            str(self.kubeconfig),
            "--health-port",
            str(self.health_port),
            "--metrics-port",
            str(self.metrics_port),
            *self.extra_args,
        ]
        if os.environ.get("MULTIKUEUE_CONTROLLER_LOG_LEVEL"):  # e.g. DEBUG, to follow a flaky test's decisions
            argv += ["--controller-log-level", os.environ["MULTIKUEUE_CONTROLLER_LOG_LEVEL"]]
        if self.webhooks:
            self.webhook_port = self.webhook_port or free_port()
            argv += ["--webhook-port", str(self.webhook_port), "--webhook-host", "127.0.0.1"]
        self.process = spawn(f"{self.name}/controller", argv, self.log)
        # Ready: the cache has synced (a standby replica too); alive alone could still be listing.
        wait_until(lambda: probe(self.health_port, "/readyz"), timeout, 0.2, f"{self.name} controller /readyz", self.process)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=20)
            self.process = None

    def kill(self) -> None:
        """Stop abruptly (SIGKILL), as a crash or a node loss would."""
        if self.process is not None:
            self.process.signal(signal.SIGKILL)
            self.process.stop(timeout=5)
            self.process = None


    def ready(self) -> bool:
        """Whether /readyz answers 200 (the cache has synced)."""
        return self.process is not None and probe(self.health_port, "/readyz")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.alive()


@contextmanager
def in_place_of(session: ControllerProcess, name: str, log: Path, config_map: str) -> Iterator[ControllerProcess]:
    """A manager controller reading ConfigMap ``config_map``, serving the webhooks on ``session``'s port while it runs.

    For tests of Configuration settings the session's controller does not
    have: the session's controller is stopped first (two managers on one
    cluster would both act, and only one can own the webhook port the API
    server calls), then started again when the block ends, whatever happens.
    """
    port = session.webhook_port
    session.stop()
    ctl = ControllerProcess(name, session.kubeconfig, "manager", log, extra_args=("--config-map", config_map), webhooks=True,
                            webhook_port=port)  # fmt: skip
    try:
        ctl.start()
        yield ctl
    finally:
        ctl.stop()
        session.start()


def identity_in_log(text: str) -> str | None:
    """A controller's name in the leader-election Lease, from the last start-up line of its JSON log."""
    for line in reversed(text.splitlines()):
        if '"controller starting"' in line:
            try:
                return json.loads(line).get("identity")  # type: ignore[no-any-return]
            except ValueError:
                return None
    return None


def lease_holder(api: client.ApiClient, namespace: str, name: str) -> str | None:
    """The ``holderIdentity`` of Lease ``namespace/name`` (what ``kubectl get lease`` shows); None without a Lease."""
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(name, namespace, _request_timeout=5)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return lease.spec.holder_identity or None
