"""Let a bench be stopped with its clean-up: SIGTERM and SIGINT raise ``KeyboardInterrupt``.

Each bench takes its control planes down in a ``finally``. Two ways of
stopping one skipped it and left ``controlplane-*`` processes running: a
bench started in the background by a non-interactive shell (``python
bench/dispatch.py ... &``) inherits SIGINT ignored (POSIX has asynchronous
commands ignore it), so Ctrl-C or ``kill -INT`` did nothing; and Python's
default for SIGTERM ends the process on the spot, ``finally`` unrun.
A third came from CI: a process can also inherit SIGTERM *blocked* (the
signal mask survives fork and exec; the CI harness's own runner blocks it),
and a handler never runs for a blocked signal, so both are unblocked too.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import NoReturn


def _raise(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def interrupt_on_signals() -> None:
    """From now on SIGTERM and SIGINT raise ``KeyboardInterrupt`` in the main thread (call it there, first thing)."""
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        signal.signal(sig, _raise)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)
