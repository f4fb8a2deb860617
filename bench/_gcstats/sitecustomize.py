"""Time the cyclic garbage collector in any Python process started with this directory on ``PYTHONPATH``
(never imported by the project).

With ``MULTIKUEUE_GC_STATS`` set to a file, every collection is timed through ``gc.callbacks`` and the
totals per generation (seconds, collections, longest pause, objects freed) and the process's CPU seconds
are written as JSON to that path with ``.PID`` appended, every 30 s and at exit. Why: a sampling profiler shows the collector's work
inside whatever frame allocates, not as its own line. Used for the thresholds in ``operator/app.py``::

    MULTIKUEUE_GC_STATS=/tmp/gc.json PYTHONPATH=bench/_gcstats:. python bench/churn_sim.py --generator G
    MULTIKUEUE_GC_STATS=/tmp/gc.json PYTHONPATH=$PWD/bench/_gcstats:$PWD python bench/scalability.py ...

(the scalability bench's processes inherit the environment; each Python process writes its own file, the
controller's is the one whose ``pid`` is the controller's).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import threading
import time
from typing import Any

_OUT = os.environ.get("MULTIKUEUE_GC_STATS")

if _OUT:
    _totals: dict[str, list[float]] = {"seconds": [0.0] * 3, "collections": [0] * 3, "longest": [0.0] * 3, "freed": [0] * 3}
    _started = [0.0]
    _cpu_at_start = time.process_time()

    def _timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            _started[0] = time.perf_counter()
            return
        generation, took = info["generation"], time.perf_counter() - _started[0]
        _totals["seconds"][generation] += took
        _totals["collections"][generation] += 1
        _totals["freed"][generation] += info["collected"]
        _totals["longest"][generation] = max(_totals["longest"][generation], took)

    def _write() -> None:
        figures = {**_totals, "process_cpu_seconds": time.process_time() - _cpu_at_start, "pid": os.getpid()}
        with open(f"{_OUT}.{os.getpid()}", "w") as out:
            json.dump(figures, out)

    def _every_30s() -> None:
        while True:
            time.sleep(30)
            _write()

    gc.callbacks.append(_timed)
    atexit.register(_write)
    threading.Thread(target=_every_30s, name="gc-stats", daemon=True).start()
