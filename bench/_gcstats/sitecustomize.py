"""Time the cyclic garbage collector in any Python process started with this directory on ``PYTHONPATH``
(never imported by the project).

With ``MULTIKUEUE_GC_STATS`` set to a file, every collection is timed through ``gc.callbacks`` and the
totals per generation (wall seconds, the collecting thread's CPU seconds, collections, longest pause,
objects freed) and the process's CPU seconds
are written as JSON to that path with ``.PID`` appended, every 30 s and at exit. Why: a sampling profiler shows the collector's work
inside whatever frame allocates, not as its own line. Used for the thresholds in ``operator/app.py``::

    MULTIKUEUE_GC_STATS=/tmp/gc.json PYTHONPATH=bench/_gcstats:. python bench/churn_sim.py --generator G
    MULTIKUEUE_GC_STATS=/tmp/gc.json PYTHONPATH=$PWD/bench/_gcstats:$PWD python bench/scalability.py ...

(the scalability bench's processes inherit the environment; each Python process writes its own file, the
controller's is the one whose ``pid`` is the controller's).

With ``MULTIKUEUE_GC_CENSUS`` also set (to seconds, e.g. ``2``), the automatic collector is off and a thread
runs a full collection that often with ``gc.DEBUG_SAVEALL``, counts what it found unreachable, then frees it:
the totals under ``census`` name, for the objects that made reference cycles, their types and, for frames,
the function and line (a frame in a cycle is most often an exception's traceback or a coroutine). Why: to find
which code makes the cycles the collector spends its time on. Costs a full collection per period; for
diagnosis only, not for timing.

With ``MULTIKUEUE_GC_THRESHOLDS`` set (``700,10,10``), the process keeps those thresholds whatever it sets
itself (the controller sets its own in ``operator/app.py``): to time other thresholds in a real run.

With ``MULTIKUEUE_GC_PROBE`` set (to seconds), a thread that often counts the youngest generation's objects
and the references they hold, then collects it and times that (thread CPU): under ``probes``, the last 200
``[objects, references, seconds]``, to tell whether a young collection's cost follows its references.

With ``MULTIKUEUE_GC_YOUNG`` set (to seconds), a thread looks at the youngest generation that often and adds
up, per type, the objects in it and their lengths (for lists, tuples, dicts and sets; with the longest
seen): a young collection visits every reference its objects hold, so a few long young containers can cost
more than thousands of small objects. The sums are under ``young`` (``samples`` says how many looks they
add up).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import threading
import time
import types
from typing import Any

_OUT = os.environ.get("MULTIKUEUE_GC_STATS")

if _OUT:
    _totals: dict[str, list[float]] = {
        "seconds": [0.0] * 3, "cpu_seconds": [0.0] * 3, "collections": [0] * 3, "longest": [0.0] * 3, "freed": [0] * 3
    }
    _started = [0.0, 0.0]
    _cpu_at_start = time.process_time()

    def _timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            _started[0], _started[1] = time.perf_counter(), time.thread_time()
            return
        generation, took = info["generation"], time.perf_counter() - _started[0]
        _totals["seconds"][generation] += took
        _totals["cpu_seconds"][generation] += time.thread_time() - _started[1]
        _totals["collections"][generation] += 1
        _totals["freed"][generation] += info["collected"]
        _totals["longest"][generation] = max(_totals["longest"][generation], took)

    def _write() -> None:
        figures = {**_totals, "process_cpu_seconds": time.process_time() - _cpu_at_start, "pid": os.getpid()}
        if _census:
            figures["census"] = _write_census()
        if _probes:
            figures["probes"] = _probes[-200:]
        if _young:
            figures["young"] = dict(sorted(_young.items(), key=lambda item: -item[1][0] - item[1][1])[:80])
            figures["young"]["samples"] = _young["samples"]
        with open(f"{_OUT}.{os.getpid()}", "w") as out:
            json.dump(figures, out)

    def _every_30s() -> None:
        while True:
            time.sleep(30)
            _write()

    _census: dict[str, int] = {}
    _period = float(os.environ.get("MULTIKUEUE_GC_CENSUS") or 0)

    def _name(obj: object) -> str:
        if isinstance(obj, types.FrameType):
            code = obj.f_code
            return f"frame {os.path.basename(code.co_filename)}:{code.co_name}:{obj.f_lineno}"
        if isinstance(obj, BaseException):
            return f"exception {type(obj).__module__}.{type(obj).__qualname__}"
        return f"{type(obj).__module__}.{type(obj).__qualname__}"

    def _count_cycles() -> None:
        while True:
            time.sleep(_period)
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            gc.set_debug(0)
            found = list(gc.garbage)
            gc.garbage.clear()
            for obj in found:
                key = _name(obj)
                _census[key] = _census.get(key, 0) + 1
            found = obj = None
            gc.collect()

    def _write_census() -> dict[str, int]:
        return dict(sorted(_census.items(), key=lambda item: -item[1])[:80])

    _young: dict[str, list[int]] = {}
    _young_period = float(os.environ.get("MULTIKUEUE_GC_YOUNG") or 0)
    _sized = (list, tuple, dict, set, frozenset)

    def _look_at_young() -> None:
        while True:
            time.sleep(_young_period)
            young = gc.get_objects(generation=0)
            _young.setdefault("samples", [0, 0, 0])[0] += 1
            for obj in young:
                entry = _young.setdefault(f"{type(obj).__module__}.{type(obj).__qualname__}", [0, 0, 0])
                entry[0] += 1
                if isinstance(obj, _sized):
                    entry[1] += len(obj)
                    entry[2] = max(entry[2], len(obj))
            young = obj = None

    _probes: list[list[float]] = []
    _probe_period = float(os.environ.get("MULTIKUEUE_GC_PROBE") or 0)

    def _probe_young() -> None:
        while True:
            time.sleep(_probe_period)
            young = gc.get_objects(generation=0)
            refs = sum(len(gc.get_referents(obj)) for obj in young)
            count = len(young)
            young = None
            started = time.thread_time()
            gc.collect(0)
            _probes.append([count, refs, time.thread_time() - started])

    if _young_period:
        threading.Thread(target=_look_at_young, name="gc-young", daemon=True).start()
    if _probe_period:
        threading.Thread(target=_probe_young, name="gc-probe", daemon=True).start()
    _forced = os.environ.get("MULTIKUEUE_GC_THRESHOLDS")
    if _forced:
        _forced_values = tuple(int(value) for value in _forced.split(","))
        _set_threshold = gc.set_threshold
        _set_threshold(*_forced_values)
        gc.set_threshold = lambda *_ignored: _set_threshold(*_forced_values)  # type: ignore[assignment]

    if _period:
        gc.disable()
        threading.Thread(target=_count_cycles, name="gc-census", daemon=True).start()
    gc.callbacks.append(_timed)
    atexit.register(_write)
    threading.Thread(target=_every_30s, name="gc-stats", daemon=True).start()
