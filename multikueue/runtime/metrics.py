"""Prometheus metrics on ``/metrics``, with upstream Kueue's names where the concept is the same.

Counters and histograms are updated where the decisions are written;
per-queue gauges are refreshed from the cache each time the queue status is
synced, so a scrape never walks the cache.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)

ADMITTED_WORKLOADS = Counter(
    "kueue_admitted_workloads_total",
    "Workloads admitted, per ClusterQueue",
    ["cluster_queue"],
    registry=REGISTRY,
)
QUOTA_RESERVED_WORKLOADS = Counter(
    "kueue_quota_reserved_workloads_total",
    "Workloads that got quota reserved, per ClusterQueue",
    ["cluster_queue"],
    registry=REGISTRY,
)
EVICTED_WORKLOADS = Counter(
    "kueue_evicted_workloads_total",
    "Workloads evicted, per reason",
    ["reason"],
    registry=REGISTRY,
)
PREEMPTED_WORKLOADS = Counter(
    "kueue_preempted_workloads_total",
    "Workloads preempted, per preempting ClusterQueue and preemption reason",
    ["preempting_cluster_queue", "reason"],
    registry=REGISTRY,
)
PENDING_WORKLOADS = Gauge(
    "kueue_pending_workloads",
    "Workloads waiting for quota, per ClusterQueue",
    ["cluster_queue"],
    registry=REGISTRY,
)
RESERVING_WORKLOADS = Gauge(
    "kueue_reserving_active_workloads",
    "Workloads holding quota, per ClusterQueue",
    ["cluster_queue"],
    registry=REGISTRY,
)
ADMISSION_WAIT = Histogram(
    "kueue_admission_wait_time_seconds",
    "Time from a Workload's creation to its quota reservation",
    ["cluster_queue"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
    registry=REGISTRY,
)
SCHEDULING_CYCLE = Histogram(
    "multikueue_scheduling_cycle_seconds",
    "Duration of one scheduling cycle (decisions only, not the writes)",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1),
    registry=REGISTRY,
)


def serve(port: int) -> None:
    """Serve ``/metrics`` on all interfaces (0 disables)."""
    if port:
        start_http_server(port, registry=REGISTRY)
