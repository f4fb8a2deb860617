"""Benchmark: what one scheduling cycle costs as the backlog of parked Workloads grows.

Pure, in-process (the scheduler and its cache, no API server): one
ClusterQueue whose quota a running Workload holds, and a backlog of N pending
Workloads that do not fit, all of one kind (priority and pod sets), as the
Workloads of one Job template; the first cycles park them. Then, for each of
``--events`` events, one more Workload of that kind arrives and a cycle runs,
as the controller's loop does after a watch event. Printed: the microseconds
of such a cycle at each backlog size, and its growth from the smallest backlog
to the largest.

The target (issue 16, "no per-event work that grows with the number of
Workloads"): a cycle after an unrelated event costs about the same whatever
the backlog, at most ``--max-growth`` times (default 2) the smallest one's
from 1,000 to 10,000 parked Workloads. Before stop 43 each cycle stepped over
every parked Workload of the queue (about 10x from 1,000 to 10,000). The run
exits 1 when the target is missed.

    python bench/cycle_cost.py
    python bench/cycle_cost.py --sizes 1000 3000 10000 30000 --events 500
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from multikueue.api.clusterqueue import ClusterQueue
from multikueue.api.localqueue import LocalQueue
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import Workload
from multikueue.core import Cache, lifecycle, schedule

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NAMESPACE = "team"


def _workload(name: str, cpu: int, priority: int, age: float) -> Workload:
    pod = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": str(cpu)}}}]}
    body: dict[str, Any] = {
        "metadata": {"namespace": NAMESPACE, "name": name, "creationTimestamp": (NOW - timedelta(seconds=age)).isoformat()},
        "spec": {"queueName": "lq", "priority": priority, "podSets": [{"name": "main", "count": 1, "template": {"spec": pod}}]},
    }
    return Workload.from_k8s(body)


def _cache() -> Cache:
    cache = Cache()
    cache.upsert_flavor(ResourceFlavor.from_k8s({"metadata": {"name": "default"}, "spec": {}}))
    cache.upsert_namespace(NAMESPACE, {"kubernetes.io/metadata.name": NAMESPACE})
    spec = {
        "namespaceSelector": {},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": 10}]}]}
        ],
    }
    cache.upsert_cluster_queue(ClusterQueue.from_k8s({"metadata": {"name": "cq"}, "spec": spec}))
    cache.upsert_local_queue(LocalQueue.from_k8s({"metadata": {"namespace": NAMESPACE, "name": "lq"}, "spec": {"clusterQueue": "cq"}}))
    return cache


def _confirm(cache: Cache, key: tuple[str, str], decision: Any) -> None:
    """What the watch brings back after the reservation write."""
    wl = cache.workload(key)
    assert wl is not None
    body = wl.to_k8s()
    body["status"] = {**body.get("status", {}), **lifecycle.reservation_status(wl, decision.admission, decision.admission_checks, NOW)}
    cache.upsert_workload(Workload.from_k8s(body))


def cycle_cost(backlog: int, events: int) -> tuple[float, float]:
    """Median and p90 microseconds of a cycle after one arrival, with ``backlog`` parked Workloads."""
    cache = _cache()
    cache.upsert_workload(_workload("running", 10, 1000, age=10_000))
    result = schedule(cache, NOW)
    _confirm(cache, ("team", "running"), result.admitted[0])
    for i in range(backlog):
        cache.upsert_workload(_workload(f"waiting-{i:06d}", 5, 100, age=5_000 - i * 0.01))
    for _ in range(3):  # the first cycles look at the backlog and park it
        result = schedule(cache, NOW)
        assert not result.admitted, "nothing fits: the running Workload holds the quota"
    took = []
    for i in range(events):
        cache.upsert_workload(_workload(f"arrived-{i:06d}", 5, 100, age=0))
        started = time.perf_counter()
        result = schedule(cache, NOW)
        took.append((time.perf_counter() - started) * 1e6)
        assert not result.admitted
    # What was timed is what the docstring says: the backlog and the arrivals all parked, nothing admitted.
    assert cache.is_parked((NAMESPACE, "waiting-000000"), "cq") and cache.is_parked((NAMESPACE, f"arrived-{events - 1:06d}"), "cq")
    took.sort()
    return statistics.median(took), took[int(len(took) * 0.9)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10000], help="backlogs of parked Workloads")
    parser.add_argument("--events", type=int, default=300, help="arrivals (each followed by a cycle) per backlog")
    parser.add_argument("--max-growth", type=float, default=2.0, help="target: largest backlog's median / smallest's")
    args = parser.parse_args()
    medians = {}
    print("| parked Workloads | cycle after an arrival, median (µs) | p90 (µs) |")
    print("| --- | --- | --- |")
    for size in sorted(args.sizes):
        median, p90 = cycle_cost(size, args.events)
        medians[size] = median
        print(f"| {size:,} | {median:,.0f} | {p90:,.0f} |", flush=True)
    smallest, largest = min(medians), max(medians)
    growth = medians[largest] / medians[smallest]
    met = growth <= args.max_growth
    print(
        f"\ngrowth from {smallest:,} to {largest:,} parked: {growth:.2f}x "
        f"(target at most {args.max_growth:g}x): {'met' if met else 'NOT MET'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
