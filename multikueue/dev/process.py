"""Starting, watching and stopping the local clusters' processes.

Processes run in their own session so they outlive ``multikueue dev clusters
up`` and can be stopped as a group by ``down`` from another invocation. Each
one is recorded with its command line so ``down`` never signals an unrelated
process that happens to reuse a pid.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from multikueue.dev.errors import DevEnvironmentError


@dataclass
class ManagedProcess:
    """One running component of a local cluster."""

    name: str
    pid: int
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def to_record(self) -> dict[str, object]:
        return {"name": self.name, "pid": self.pid, "argv": self.argv, "log": str(self.log)}

    @classmethod
    def from_record(cls, record: dict[str, object]) -> "ManagedProcess":
        return cls(
            name=str(record["name"]),
            pid=int(record["pid"]),  # type: ignore[arg-type]
            argv=[str(a) for a in record["argv"]],  # type: ignore[union-attr]
            log=Path(str(record["log"])),
        )

    def alive(self) -> bool:
        """True while this very process (not a pid reused by another) runs."""
        if self.popen is not None:
            return self.popen.poll() is None
        try:
            cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes()
        except OSError:
            return False
        if not cmdline:
            return False  # a zombie waiting for its parent
        return cmdline.split(b"\0")[0].decode(errors="replace") == self.argv[0]

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def signal(self, sig: int) -> None:
        if not self.alive():
            return
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            os.kill(self.pid, sig)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.alive():
            self.signal(signal.SIGKILL)
            deadline = time.monotonic() + 5
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
        if self.popen is not None:
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def spawn(name: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> ManagedProcess:
    """Start ``argv`` in a new session with output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    return ManagedProcess(name=name, pid=popen.pid, argv=argv, log=log, popen=popen)


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def check_ports_free(ports: dict[str, int]) -> None:
    """Fail with one message listing every port that is already taken."""
    busy = [f"{port} ({what})" for what, port in ports.items() if port_in_use(port)]
    if busy:
        raise DevEnvironmentError(
            "cannot start the local clusters: port(s) already in use on 127.0.0.1: "
            + ", ".join(busy)
            + ". Stop whatever listens there (`multikueue dev clusters down` if it is an earlier "
            "set) or choose other ports with --base-port."
        )


def wait_until(predicate, timeout: float, interval: float, describe: str, proc: ManagedProcess | None = None) -> None:  # type: ignore[no-untyped-def]
    """Poll ``predicate`` until it is true; fail clearly if the process dies or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if proc is not None and not proc.alive():
            raise DevEnvironmentError(
                f"{proc.name} exited while waiting for {describe}; last lines of {proc.log}:\n"
                f"{proc.log_tail()}"
            )
        if time.monotonic() > deadline:
            tail = f"; last lines of {proc.log}:\n{proc.log_tail()}" if proc else ""
            raise DevEnvironmentError(f"timed out after {timeout:.0f}s waiting for {describe}{tail}")
        time.sleep(interval)
