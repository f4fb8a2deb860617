"""Visible progress for long developer steps (a cold ``go build`` takes minutes).

The CLI logs only warnings by default, so a long step that merely logs at
INFO looks hung. :class:`Heartbeat` prints to stderr instead: what is being
done and how long it usually takes, then a line at least every
``interval`` seconds with the time elapsed, and the total at the end::

    --- building the control plane (Kubernetes v1.35.4): about 6 minutes cold on two cores, seconds when cached
        ... still building the control plane (Kubernetes v1.35.4): 30s elapsed (about 6 minutes cold on two cores)
        built the control plane (Kubernetes v1.35.4) in 5m12s

The ticks come from a daemon thread waiting on an :class:`threading.Event`
(set at the end, so the step is never held up by the interval); the clock
and the output are parameters, so tests run it with a short interval.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

__all__ = ["DEFAULT_INTERVAL", "Heartbeat", "format_seconds"]

#: Seconds between two "still building" lines.
DEFAULT_INTERVAL = 30.0


def format_seconds(seconds: float) -> str:
    """``45s``, ``5m12s``, ``1h02m``: short, for a progress line."""
    total = max(0, int(round(seconds)))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Heartbeat:
    """A context manager that says a step started, that it is still running, and how long it took.

    ``what`` names the step ("the control plane (Kubernetes v1.35.4)"),
    ``verb`` what is done to it ("building", past tense ``done``: "built"),
    ``estimate`` how long it usually takes ("about 6 minutes cold on two
    cores"). A step that raises ends with "... failed after 1m10s" instead.
    """

    def __init__(
        self,
        what: str,
        *,
        estimate: str | None = None,
        verb: str = "building",
        done: str = "built",
        interval: float = DEFAULT_INTERVAL,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.what = what
        self.estimate = estimate
        self.verb = verb
        self.done = done
        self.interval = interval
        self.out = out
        self.clock = clock
        self.started = 0.0
        self.elapsed = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- output ---------------------------------------------------------------

    def _say(self, line: str) -> None:
        out = self.out if self.out is not None else sys.stderr
        with self._lock:
            try:
                out.write(line + "\n")
                out.flush()
            except (OSError, ValueError):  # a closed stream: progress is best effort
                pass

    def start_line(self) -> str:
        about = f": {self.estimate}" if self.estimate else ""
        return f"--- {self.verb} {self.what}{about}"

    def tick_line(self, elapsed: float) -> str:
        about = f" ({self.estimate})" if self.estimate else ""
        return f"    ... still {self.verb} {self.what}: {format_seconds(elapsed)} elapsed{about}"

    def end_line(self, elapsed: float, failed: bool) -> str:
        if failed:
            return f"    {self.verb} {self.what} failed after {format_seconds(elapsed)}"
        return f"    {self.done} {self.what} in {format_seconds(elapsed)}"

    # -- lifecycle ------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._say(self.tick_line(self.clock() - self.started))

    def __enter__(self) -> "Heartbeat":
        self.started = self.clock()
        self._say(self.start_line())
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat: {self.what}", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.elapsed = self.clock() - self.started
        self._say(self.end_line(self.elapsed, failed=exc_type is not None))
