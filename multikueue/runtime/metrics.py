"""Prometheus metrics on ``/metrics``: upstream Kueue's names and labels where the concept is the same, ``mkpy_*`` for ours.

Names. A metric that upstream Kueue (v0.19) also exports keeps its name, its
labels and their values (``kueue_*``, and upstream's MultiKueue family
``multikueue_*``), so upstream's documented queries and dashboards work
unchanged. Upstream's per-queue custom labels are not supported. What
upstream has no metric for is ours and carries the ``mkpy_`` prefix
("MultiKueue in Python"), never ``kueue_`` nor ``multikueue_``: a future
upstream metric of the same name could mean something else.

``replica_role`` is on every upstream-named metric, as upstream: ``leader`` or
``follower`` with leader election (``--leader-elect``), ``standalone``
without. Only the leader decides, so counters and histograms move only under
``leader``/``standalone``; the queue gauges are reported by the leader from
its cache and dropped when a replica stops leading (a follower's copy would
go stale), so ``sum by (cluster_queue)`` over all replicas is right.

When things are counted. Counters and histograms are updated where the
decisions are written (:mod:`multikueue.runtime.writer`, the scheduling
loop, the MultiKueue plan applier); per-queue gauges are refreshed from the
cache each time the queue status is synced (every half second while
leading), so a scrape never walks the cache.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)

#: ``replica_role`` values (upstream's roletracker).
ROLE_LEADER = "leader"
ROLE_FOLLOWER = "follower"
ROLE_STANDALONE = "standalone"

#: ``status`` values of ``kueue_pending_workloads`` (upstream's).
PENDING_ACTIVE = "active"
PENDING_INADMISSIBLE = "inadmissible"

#: ``status`` values of ``kueue_cluster_queue_status`` (upstream's).
CQ_PENDING = "pending"
CQ_ACTIVE = "active"
CQ_TERMINATING = "terminating"
CQ_STATUSES = (CQ_PENDING, CQ_ACTIVE, CQ_TERMINATING)

_CQ = ["cluster_queue", "replica_role"]
_CQ_PRIORITY = ["cluster_queue", "priority_class", "replica_role"]
_CQ_RESOURCE = ["cohort", "cluster_queue", "flavor", "resource", "replica_role"]
#: Upstream's wait-time buckets reach hours; ours start lower because admission here is sub-second.
_WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
#: Dispatch and status sync take a fraction of a second to a few seconds; minutes mean a worker is down.
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 300)

# --- upstream Kueue's metrics ---------------------------------------------------------------------

ADMITTED_WORKLOADS = Counter(
    "kueue_admitted_workloads_total", "The total number of admitted workloads per 'cluster_queue'",
    _CQ_PRIORITY, registry=REGISTRY,
)  # fmt: skip
QUOTA_RESERVED_WORKLOADS = Counter(
    "kueue_quota_reserved_workloads_total", "The total number of quota reserved workloads per 'cluster_queue'",
    _CQ_PRIORITY, registry=REGISTRY,
)  # fmt: skip
EVICTED_WORKLOADS = Counter(
    "kueue_evicted_workloads_total",
    "The number of evicted workloads per 'cluster_queue', 'reason' (Preempted, AdmissionCheck, Deactivated, ...) "
    "and 'underlying_cause' (e.g. AdmissionCheck for a Workload deactivated by a rejected check)",
    ["cluster_queue", "reason", "underlying_cause", "priority_class", "replica_role"],
    registry=REGISTRY,
)
PREEMPTED_WORKLOADS = Counter(
    "kueue_preempted_workloads_total",
    "The number of preempted workloads per 'preempting_cluster_queue' and 'reason' "
    "(InClusterQueue, InCohortReclamation, InCohortReclaimWhileBorrowing)",
    ["preempting_cluster_queue", "reason", "replica_role"],
    registry=REGISTRY,
)
QUOTA_RESERVED_WAIT = Histogram(
    "kueue_quota_reserved_wait_time_seconds",
    "The time between a workload was created or requeued until it got quota reservation, per 'cluster_queue'",
    _CQ_PRIORITY, buckets=_WAIT_BUCKETS, registry=REGISTRY,
)  # fmt: skip
ADMISSION_WAIT = Histogram(
    "kueue_admission_wait_time_seconds",
    "The time between a workload was created or requeued until admission, per 'cluster_queue'",
    _CQ_PRIORITY, buckets=_WAIT_BUCKETS, registry=REGISTRY,
)  # fmt: skip
PENDING_WORKLOADS = Gauge(
    "kueue_pending_workloads",
    "The number of pending workloads, per 'cluster_queue' and 'status' ('active': not tried since queued; "
    "'inadmissible': the scheduler said why it waits, its requests are invalid, or it is in requeue backoff)",
    ["cluster_queue", "status", "replica_role"],
    registry=REGISTRY,
)
RESERVING_WORKLOADS = Gauge(
    "kueue_reserving_active_workloads", "The number of Workloads that are reserving quota, per 'cluster_queue'",
    _CQ, registry=REGISTRY,
)  # fmt: skip
ADMITTED_ACTIVE_WORKLOADS = Gauge(
    "kueue_admitted_active_workloads", "The number of admitted Workloads that are active, per 'cluster_queue'",
    _CQ, registry=REGISTRY,
)  # fmt: skip
CLUSTER_QUEUE_STATUS = Gauge(
    "kueue_cluster_queue_status",
    "Reports 'cluster_queue' with its 'status' (with possible values 'pending', 'active' or 'terminating'). "
    "For a ClusterQueue, the metric only reports a value of 1 for one of the statuses.",
    ["cluster_queue", "status", "replica_role"],
    registry=REGISTRY,
)
CLUSTER_QUEUE_USAGE = Gauge(
    "kueue_cluster_queue_resource_usage",
    "Reports the cluster_queue's total resource usage (admitted Workloads) within all the flavors",
    _CQ_RESOURCE, registry=REGISTRY,
)  # fmt: skip
CLUSTER_QUEUE_RESERVATION = Gauge(
    "kueue_cluster_queue_resource_reservation",
    "Reports the cluster_queue's total resource reservation within all the flavors",
    _CQ_RESOURCE, registry=REGISTRY,
)  # fmt: skip
CLUSTER_QUEUE_NOMINAL_QUOTA = Gauge(
    "kueue_cluster_queue_nominal_quota", "Reports the cluster_queue's resource nominal quota within all the flavors",
    _CQ_RESOURCE, registry=REGISTRY,
)  # fmt: skip
CLUSTER_QUEUE_BORROWING_LIMIT = Gauge(
    "kueue_cluster_queue_borrowing_limit",
    "Reports the cluster_queue's resource borrowing limit within all the flavors. If borrowingLimit is unset, this metric reports +Inf.",
    _CQ_RESOURCE, registry=REGISTRY,
)  # fmt: skip
CLUSTER_QUEUE_LENDING_LIMIT = Gauge(
    "kueue_cluster_queue_lending_limit",
    "Reports the cluster_queue's resource lending limit within all the flavors. If lendingLimit is unset, this metric reports +Inf.",
    _CQ_RESOURCE, registry=REGISTRY,
)  # fmt: skip

# --- upstream's MultiKueue metrics ----------------------------------------------------------------

MULTIKUEUE_DISPATCHED = Counter(
    "multikueue_workloads_dispatched_total",
    "The total number of remote workloads created by the MultiKueue manager on a worker cluster, per 'cluster_queue' and 'cluster'.",
    ["cluster_queue", "cluster", "replica_role"],
    registry=REGISTRY,
)
MULTIKUEUE_ADMITTED = Counter(
    "multikueue_workloads_admitted_total",
    "The total number of remote workload admissions on a worker cluster, per 'cluster_queue' and 'cluster'. "
    "A workload may be counted more than once if it is evicted and re-admitted.",
    ["cluster_queue", "cluster", "replica_role"],
    registry=REGISTRY,
)

# --- ours (upstream has no such metric) -----------------------------------------------------------

SCHEDULING_CYCLE = Histogram(
    "mkpy_scheduling_cycle_seconds",
    "Duration of one scheduling cycle (decisions only, not the writes)",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1),
    registry=REGISTRY,
)
DISPATCH_LATENCY = Histogram(
    "mkpy_dispatch_latency_seconds",
    "MultiKueue dispatch latency: from the manager Workload's quota reservation to its job created on a worker, "
    "per 'cluster_queue' and worker 'cluster'",
    ["cluster_queue", "cluster"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
STATUS_SYNC_LATENCY = Histogram(
    "mkpy_status_sync_latency_seconds",
    "MultiKueue status-sync latency: from the job's last condition change on the worker (its finish; the worker's "
    "clock, whole seconds) to its final status written to the manager's job, per worker 'cluster'",
    ["cluster"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
#: Where the release delay is told apart: 100 ms is issue 16's target.
QUOTA_RELEASE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
QUOTA_RELEASE_DELAY = Histogram(
    "mkpy_quota_release_delay_seconds",
    "From a Workload event that ends its quota (Finished, quota reservation removed, deleted) read off the "
    "watch to that quota counted free in the scheduler's cache",
    buckets=QUOTA_RELEASE_BUCKETS,
    registry=REGISTRY,
)
WORKER_CLUSTER_ACTIVE = Gauge(
    "mkpy_worker_cluster_active",
    "1 when the manager is connected to the worker 'cluster' (its MultiKueueCluster is Active), else 0; "
    "reported by the leading manager only",
    ["cluster"],
    registry=REGISTRY,
)

CLUSTER_QUEUE_WEIGHTED_SHARE = Gauge(
    "kueue_cluster_queue_weighted_share",
    "Reports the ClusterQueue's weighted share under fair sharing: the largest ratio, among its resources, of usage "
    "above nominal quota to what the cohort can lend, divided by its weight (0 when within nominal quota, +Inf for "
    "a borrowing ClusterQueue of weight 0); reported only with fair sharing on",
    ["cluster_queue", "cohort", "replica_role"],
    registry=REGISTRY,
)

#: Gauges reported from the leader's cache: dropped when the role changes (the leader reports them again).
_QUEUE_GAUGES: tuple[Gauge, ...] = (
    CLUSTER_QUEUE_WEIGHTED_SHARE,
    PENDING_WORKLOADS,
    RESERVING_WORKLOADS,
    ADMITTED_ACTIVE_WORKLOADS,
    CLUSTER_QUEUE_STATUS,
    CLUSTER_QUEUE_USAGE,
    CLUSTER_QUEUE_RESERVATION,
    CLUSTER_QUEUE_NOMINAL_QUOTA,
    CLUSTER_QUEUE_BORROWING_LIMIT,
    CLUSTER_QUEUE_LENDING_LIMIT,
)

# --- replica role ---------------------------------------------------------------------------------

_role = ROLE_STANDALONE
#: Per ClusterQueue, the queue gauge series this process set for it (label values with the role) and their
#: values: a report sets only the values that changed and drops the series no longer reported.
_reported: dict[str, dict[tuple[Gauge, tuple[str, ...]], float]] = {}
#: Grows each time the queue gauges are cleared (a role change): reporters of changes only report all again.
_gauges_epoch = 0


def quota_release_summary(histogram: Histogram = QUOTA_RELEASE_DELAY) -> dict[str, Any]:
    """The quota release delays observed so far: how many, the share within 100 ms, and the bucket bounds
    (upper, in seconds) holding the median and the 99th percentile. Logged at stop, read by the benchmarks."""
    buckets: list[tuple[float, float]] = []
    count = 0.0
    for metric in histogram.collect():
        for sample in metric.samples:
            if sample.name.endswith("_bucket"):
                buckets.append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_count"):
                count = sample.value
    if not count:
        return {"count": 0}
    buckets.sort()

    def bound(share: float) -> float:
        return next(le for le, seen in buckets if seen >= share * count)

    within = next((seen for le, seen in buckets if le == 0.1), 0.0)
    return {"count": int(count), "within_100ms": round(within / count, 4), "p50_le": bound(0.5), "p99_le": bound(0.99)}


def replica_role() -> str:
    """The ``replica_role`` label value of this process now."""
    return _role


def set_replica_role(role: str) -> None:
    """Say what this replica is; a change drops the queue gauges reported under the previous role."""
    global _role, _gauges_epoch
    if role == _role:
        return
    _role = role
    for gauge in _QUEUE_GAUGES:
        gauge.clear()
    _reported.clear()
    _gauges_epoch += 1


T = TypeVar("T")


def leading(lead: Callable[[T], Awaitable[None]]) -> Callable[[T], Awaitable[None]]:
    """Wrap a leader-election ``lead`` callback: the role is ``leader`` while it runs, ``follower`` after."""

    async def wrapped(arg: T) -> None:
        set_replica_role(ROLE_LEADER)
        try:
            await lead(arg)
        finally:
            set_replica_role(ROLE_FOLLOWER)

    return wrapped


# --- Workload decisions ---------------------------------------------------------------------------


def split_reason(reason: str) -> tuple[str, str]:
    """Upstream's (``reason``, ``underlying_cause``) labels of an ``Evicted`` condition reason.

    Upstream writes compound reasons such as ``DeactivatedDueToAdmissionCheck``
    on the condition and counts them as ``reason="Deactivated"``,
    ``underlying_cause="AdmissionCheck"``.
    """
    head, sep, cause = reason.partition("DueTo")
    return (head, cause) if sep and head and cause else (reason, "")


def priority_class_of(wl: Any) -> str:
    """Upstream's ``priority_class`` label: the Workload's ``spec.priorityClassRef.name``, else empty."""
    ref = getattr(getattr(wl, "spec", None), "priority_class_ref", None)
    return str(getattr(ref, "name", "") or "")


def queued_since(wl: Any) -> datetime | None:
    """When the Workload was (last) queued: its ``Requeued`` condition's transition, else its creation (as upstream)."""
    for condition in (wl.status.conditions if wl.status else None) or ():
        if condition.type == "Requeued" and condition.last_transition_time is not None:
            return condition.last_transition_time
    return wl.metadata.creation_timestamp


def _seconds_since(start: datetime | None, now: datetime | None = None) -> float | None:
    """Seconds from ``start`` to ``now`` (default: the exact time now, not :func:`utcnow`'s whole seconds)."""
    if start is None:
        return None
    return max(0.0, ((now or datetime.now(UTC)) - start).total_seconds())


def quota_reserved(wl: Any, cluster_queue: str, *, admitted: bool, now: datetime | None = None) -> None:
    """Count a quota reservation (and the admission, when no check is pending), else note it for dispatch latency."""
    labels = (cluster_queue, priority_class_of(wl), _role)
    QUOTA_RESERVED_WORKLOADS.labels(*labels).inc()
    waited = _seconds_since(queued_since(wl), now)
    if waited is not None:
        QUOTA_RESERVED_WAIT.labels(*labels).observe(waited)
    if admitted:
        workload_admitted(wl, cluster_queue, now=now)
    else:  # admission checks pending: perhaps MultiKueue's, which times the dispatch from here
        DISPATCH_CLOCK.reserved(wl.metadata.uid)


def workload_admitted(wl: Any, cluster_queue: str, *, now: datetime | None = None) -> None:
    """Count an admission (quota reserved and every check Ready) and its wait since queued."""
    labels = (cluster_queue, priority_class_of(wl), _role)
    ADMITTED_WORKLOADS.labels(*labels).inc()
    waited = _seconds_since(queued_since(wl), now)
    if waited is not None:
        ADMISSION_WAIT.labels(*labels).observe(waited)


def workload_evicted(wl: Any, cluster_queue: str, reason: str) -> None:
    """Count an eviction; ``reason`` is the ``Evicted`` condition's (compound reasons are split as upstream)."""
    head, cause = split_reason(reason)
    EVICTED_WORKLOADS.labels(cluster_queue, head, cause, priority_class_of(wl), _role).inc()


def workload_preempted(preempting_cluster_queue: str, reason: str) -> None:
    PREEMPTED_WORKLOADS.labels(preempting_cluster_queue, reason, _role).inc()


# --- MultiKueue -----------------------------------------------------------------------------------


class DispatchClock:
    """When this process reserved quota for a Workload, to time its dispatch to a worker.

    The reservation is written by the scheduler and the remote job created by
    the MultiKueue check, both in the leader: a monotonic time taken at the
    reservation is exact, where the ``QuotaReserved`` condition's timestamp
    has whole seconds. Entries go when the job is created; the oldest are
    dropped past ``limit`` (Workloads evicted or deleted before dispatch), and
    a Workload reserved by another process falls back to the condition.
    """

    def __init__(self, limit: int = 50_000) -> None:
        self.limit = limit
        self._reserved: OrderedDict[str, float] = OrderedDict()

    def reserved(self, uid: str | None) -> None:
        if not uid:
            return
        self._reserved[uid] = time.monotonic()
        self._reserved.move_to_end(uid)
        while len(self._reserved) > self.limit:
            self._reserved.popitem(last=False)

    def elapsed(self, uid: str | None, fallback: datetime | None, now: datetime | None = None) -> float | None:
        """Seconds since the reservation (popped), else since ``fallback``, else None."""
        started = self._reserved.pop(uid, None) if uid else None
        if started is not None:
            return max(0.0, time.monotonic() - started)
        return _seconds_since(fallback, now)

    def __len__(self) -> int:
        return len(self._reserved)


DISPATCH_CLOCK = DispatchClock()


def _quota_reserved_at(wl: Any) -> datetime | None:
    for condition in (wl.status.conditions if wl.status else None) or ():
        if condition.type == "QuotaReserved" and condition.status == "True":
            return condition.last_transition_time
    return None


def _admitted_cluster_queue(wl: Any) -> str:
    return (wl.status.admission.cluster_queue if wl.status and wl.status.admission else "") or ""


def remote_workload_created(wl: Any, cluster: str) -> None:
    """A copy of ``wl`` was created on worker ``cluster`` (upstream's ``multikueue_workloads_dispatched_total``)."""
    MULTIKUEUE_DISPATCHED.labels(_admitted_cluster_queue(wl), cluster, _role).inc()


def remote_workload_admitted(wl: Any, cluster: str) -> None:
    """The check turned Ready for worker ``cluster`` (upstream's ``multikueue_workloads_admitted_total``)."""
    MULTIKUEUE_ADMITTED.labels(_admitted_cluster_queue(wl), cluster, _role).inc()


def remote_job_created(wl: Any, cluster: str, now: datetime | None = None) -> None:
    """The job of ``wl`` was created on worker ``cluster``: observe the dispatch latency."""
    elapsed = DISPATCH_CLOCK.elapsed(wl.metadata.uid, _quota_reserved_at(wl), now)
    if elapsed is not None:
        DISPATCH_LATENCY.labels(_admitted_cluster_queue(wl), cluster).observe(elapsed)


def last_condition_change(obj: Mapping[str, Any] | None) -> datetime | None:
    """The latest ``lastTransitionTime`` among ``status.conditions`` of a job object (any kind), or None."""
    latest: datetime | None = None
    for condition in ((obj or {}).get("status") or {}).get("conditions") or ():
        text = condition.get("lastTransitionTime") if isinstance(condition, Mapping) else None
        if not text:
            continue
        try:
            when = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
        except ValueError:
            continue
        latest = when if latest is None or when > latest else latest
    return latest


def remote_job_finished(remote_job: Mapping[str, Any] | None, cluster: str, now: datetime | None = None) -> None:
    """The final status of a worker's job reached the manager: observe the status-sync latency."""
    elapsed = _seconds_since(last_condition_change(remote_job), now)
    if elapsed is not None:
        STATUS_SYNC_LATENCY.labels(cluster).observe(elapsed)


def worker_cluster_state(cluster: str, active: bool | None) -> None:
    """Report whether the manager is connected to ``cluster``; ``None``: no longer known here (series dropped)."""
    if active is None:
        try:
            WORKER_CLUSTER_ACTIVE.remove(cluster)
        except KeyError:
            pass
        return
    WORKER_CLUSTER_ACTIVE.labels(cluster).set(1 if active else 0)


# --- queue gauges ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One gauge value: which gauge, its label values (``replica_role`` last, filled in when reported), the value."""

    gauge: Gauge
    labels: tuple[str, ...]
    value: float


@dataclass(frozen=True)
class QuotaLine:
    """Quota and usage of one (flavor, resource) of a ClusterQueue; ``None`` limits mean unset."""

    flavor: str
    resource: str
    nominal: Decimal
    borrowing_limit: Decimal | None
    lending_limit: Decimal | None
    usage: Decimal
    reservation: Decimal


def cluster_queue_samples(
    name: str,
    *,
    cohort: str,
    status: str,
    pending_active: int,
    pending_inadmissible: int,
    reserving: int,
    admitted: int,
    quotas: Iterable[QuotaLine],
    weighted_share: float | None = None,
) -> list[Sample]:
    """Every queue gauge value of one ClusterQueue (upstream's series, without ``replica_role``)."""

    def limit(value: Decimal | None) -> float:
        return math.inf if value is None else float(value)

    samples = [
        Sample(PENDING_WORKLOADS, (name, PENDING_ACTIVE), pending_active),
        Sample(PENDING_WORKLOADS, (name, PENDING_INADMISSIBLE), pending_inadmissible),
        Sample(RESERVING_WORKLOADS, (name,), reserving),
        Sample(ADMITTED_ACTIVE_WORKLOADS, (name,), admitted),
        *(Sample(CLUSTER_QUEUE_STATUS, (name, s), 1 if s == status else 0) for s in CQ_STATUSES),
    ]
    if weighted_share is not None:
        samples.append(Sample(CLUSTER_QUEUE_WEIGHTED_SHARE, (name, cohort), weighted_share))
    for q in quotas:
        key = (cohort, name, q.flavor, q.resource)
        samples += [
            Sample(CLUSTER_QUEUE_NOMINAL_QUOTA, key, float(q.nominal)),
            Sample(CLUSTER_QUEUE_BORROWING_LIMIT, key, limit(q.borrowing_limit)),
            Sample(CLUSTER_QUEUE_LENDING_LIMIT, key, limit(q.lending_limit)),
            Sample(CLUSTER_QUEUE_USAGE, key, float(q.usage)),
            Sample(CLUSTER_QUEUE_RESERVATION, key, float(q.reservation)),
        ]
    return samples


def queue_gauges_epoch() -> int:
    """Grows when the queue gauges were cleared: a reporter that sends only what changed sends all again."""
    return _gauges_epoch


def report_queue_gauges(queue: str, samples: Sequence[Sample]) -> None:
    """Set the queue gauges of ClusterQueue ``queue`` to ``samples`` and drop its series no longer in them.

    Only values that changed are set (with 1,000 ClusterQueues, a dozen
    series each, setting every value every second was a tenth of the
    controller's CPU). Set first, then drop: a scrape in between sees the
    queue, never a gap (the HTTP server answers from its own thread).
    """
    before = _reported.get(queue, {})
    now: dict[tuple[Gauge, tuple[str, ...]], float] = {}
    for sample in samples:
        series = (sample.gauge, (*sample.labels, _role))
        now[series] = sample.value
        if before.get(series) != sample.value:
            sample.gauge.labels(*series[1]).set(sample.value)
    _drop(before.keys() - now.keys())
    _reported[queue] = now


def keep_queue_gauges(queues: Collection[str]) -> None:
    """Drop the queue gauges of every ClusterQueue not in ``queues`` (deleted ones)."""
    for queue in _reported.keys() - set(queues):
        _drop(_reported.pop(queue).keys())


def _drop(series: Iterable[tuple[Gauge, tuple[str, ...]]]) -> None:
    for gauge, labels in series:
        try:
            gauge.remove(*labels)
        except KeyError:
            pass


def serve(port: int) -> None:
    """Serve ``/metrics`` on all interfaces (0 disables)."""
    if port:
        start_http_server(port, registry=REGISTRY)
