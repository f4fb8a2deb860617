"""Heap dump on SIGUSR2 for ``bench/memory.py --heap-profile`` (never imported by the project).

``bench/memory.py`` puts this directory on the controller's ``PYTHONPATH``
and sets ``MULTIKUEUE_HEAP_DUMP`` to a file: SIGUSR1 then starts tracing
allocations (12 frames; started late, so start-up stays fast and only what is
allocated from then on, the growth, is traced), and SIGUSR2 writes the top
allocation sites still alive (grouped by line and by traceback) to that file.
The controller itself knows nothing of it.
"""

from __future__ import annotations

import os
import signal
import tracemalloc

_OUT = os.environ.get("MULTIKUEUE_HEAP_DUMP")


def _dump(_signum: int, _frame: object) -> None:
    assert _OUT is not None
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>")]
    )
    total = sum(stat.size for stat in snapshot.statistics("filename"))
    with open(_OUT + ".tmp", "w") as out:
        out.write(f"traced total: {total / 2**20:.1f} MiB\n\n== top lines ==\n")
        for stat in snapshot.statistics("lineno")[:60]:
            out.write(f"{stat.size / 2**20:8.2f} MiB {stat.count:9d} blocks  {stat.traceback[0]}\n")
        out.write("\n== top tracebacks ==\n")
        for stat in snapshot.statistics("traceback")[:40]:
            out.write(f"\n{stat.size / 2**20:8.2f} MiB {stat.count:9d} blocks\n")
            for line in stat.traceback.format(most_recent_first=True)[:24]:
                out.write(f"    {line}\n")
    os.replace(_OUT + ".tmp", _OUT)


def _start(_signum: int, _frame: object) -> None:
    tracemalloc.start(12)


if _OUT:
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _dump)
