"""Benchmark: what the MultiKueue manager keeps per worker copy of a Workload, with a target.

The manager watches every worker's Workloads of its origin and keeps each
copy: one per Workload per worker, so with ten workers and 10,000 Workloads
in flight, 100,000 copies. This is the term of the manager's memory that
grows fastest with the load (issue 16's goal: under 500 MB at 10,000).

It builds ``--copies`` copies of the kind ``bench/dispatch.py``'s Jobs leave
on a worker (a Job's pod template, the worker's admission, two conditions),
as distinct objects as a watch delivers them, then measures with tracemalloc
what stays allocated once the raw objects are dropped, for:

- ``RemoteCopy.from_k8s``: what the manager keeps;
- ``Workload.from_k8s``: the parsed Workload it kept before (for comparison).

It prints bytes per copy and the time per parse, and exits 1 when the kept
view costs more than ``--target-bytes`` (2,048 by default: 100,000 copies in
under 200 MB)::

    python bench/remote_copies.py
    python bench/remote_copies.py --copies 20000 --target-bytes 1024
"""

from __future__ import annotations

import argparse
import copy
import gc
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from multikueue.api import Workload
from multikueue.api.constants import API_VERSION, Labels
from multikueue.controllers.multikueue.remote_workload import RemoteCopy

TARGET_BYTES = 2048
AT = "2026-11-24T10:00:00Z"


def condition(kind: str, message: str) -> dict[str, Any]:
    return {"type": kind, "status": "True", "reason": kind, "message": message, "lastTransitionTime": AT, "observedGeneration": 1}


def worker_copy(index: int) -> dict[str, Any]:
    """A copy of a bench Job's Workload as the worker's apiserver sends it once admitted there."""
    name = f"job-bench-{index:05d}-1a2b3"
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "dispatch",
            "uid": f"6c1f0a3e-2f7b-4a7e-9c1d-{index:012d}",
            "resourceVersion": str(100000 + index),
            "generation": 1,
            "creationTimestamp": AT,
            "labels": {Labels.QUEUE_NAME: "user-queue", Labels.MULTIKUEUE_ORIGIN: "multikueue"},
            "annotations": {"kueue.x-k8s.io/job-min-parallelism": "1"},
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        },
        "spec": {
            "queueName": "user-queue",
            "priority": 0,
            "active": True,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "metadata": {"annotations": {"multikueue.x-k8s.io/run-for": "1s"}},
                        "spec": {
                            "restartPolicy": "Never",
                            "terminationGracePeriodSeconds": 30,
                            "dnsPolicy": "ClusterFirst",
                            "schedulerName": "default-scheduler",
                            "securityContext": {},
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "busybox:1.36",
                                    "command": ["sh", "-c", "sleep 1"],
                                    "resources": {"requests": {"cpu": "10m"}},
                                    "terminationMessagePath": "/dev/termination-log",
                                    "terminationMessagePolicy": "File",
                                    "imagePullPolicy": "IfNotPresent",
                                }
                            ],
                        },
                    },
                }
            ],
        },
        "status": {
            "conditions": [
                condition("QuotaReserved", "Quota reserved in ClusterQueue worker-cq"),
                condition("Admitted", "The workload is admitted"),
            ],
            "admission": {
                "clusterQueue": "worker-cq",
                "podSetAssignments": [{"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "10m"}, "count": 1}],
            },
            "resourceRequests": [{"name": "main", "resources": {"cpu": "10m"}}],
        },
    }


def measure(parse: Callable[[dict[str, Any]], object], copies: int) -> tuple[float, float]:
    """(bytes kept per copy, microseconds per parse)."""
    raw = [copy.deepcopy(worker_copy(i)) for i in range(copies)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    started = time.perf_counter()
    kept = [parse(obj) for obj in raw]
    elapsed = time.perf_counter() - started
    del raw
    gc.collect()
    grown = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    del kept
    return grown / copies, elapsed / copies * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=5000)
    parser.add_argument("--target-bytes", type=float, default=TARGET_BYTES, help="most bytes kept per copy")
    args = parser.parse_args()
    kept, parse_us = measure(RemoteCopy.from_k8s, args.copies)
    before, before_us = measure(Workload.from_k8s, args.copies)
    print(f"{args.copies} copies of a bench Job's Workload, as a worker sends them once admitted (parse times with tracemalloc on)")
    print(f"  RemoteCopy (kept now):     {kept:8.0f} B per copy, {parse_us:6.1f} us per parse")
    print(f"  Workload (kept before):    {before:8.0f} B per copy, {before_us:6.1f} us per parse")
    print(f"  at 10 workers x 10,000 Workloads: {kept * 100_000 / 2**20:.0f} MiB kept (was {before * 100_000 / 2**20:.0f} MiB)")
    if kept > args.target_bytes:
        print(f"FAIL: {kept:.0f} B per copy > target {args.target_bytes:g}")
        return 1
    print(f"PASS: {kept:.0f} B per copy <= target {args.target_bytes:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
