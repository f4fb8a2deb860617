"""The metrics' labels and values: upstream's label sets, role changes, stale series, latencies.

Each test reads the shared registry for label values unique to it (a fresh
ClusterQueue or cluster name), so tests do not see each other's series.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from multikueue.api.workload import Workload
from multikueue.runtime import metrics

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def value(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


def series(name: str, **match: str) -> list[dict[str, str]]:
    """Label sets of every sample called ``name`` whose labels include ``match``."""
    found = []
    for family in metrics.REGISTRY.collect():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in match.items()):
                found.append(dict(sample.labels))
    return found


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def standalone() -> Iterator[None]:
    metrics.set_replica_role(metrics.ROLE_STANDALONE)
    yield
    metrics.set_replica_role(metrics.ROLE_STANDALONE)


def workload(*, priority_class: str | None = None, requeued: datetime | None = None, reserved: datetime | None = None,
             cluster_queue: str = "", uid: str = "") -> Workload:  # fmt: skip
    conditions: list[dict[str, Any]] = []
    if requeued is not None:
        conditions.append({"type": "Requeued", "status": "True", "reason": "Preempted", "message": "",
                           "lastTransitionTime": requeued.strftime("%Y-%m-%dT%H:%M:%SZ")})  # fmt: skip
    if reserved is not None:
        conditions.append({"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "",
                           "lastTransitionTime": reserved.strftime("%Y-%m-%dT%H:%M:%SZ")})  # fmt: skip
    spec: dict[str, Any] = {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]}
    if priority_class is not None:
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": priority_class}
    status: dict[str, Any] = {"conditions": conditions}
    if cluster_queue:
        status["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": [{"name": "main", "count": 1}]}
    return Workload.from_k8s({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "ns", "uid": uid or str(uuid.uuid4()),
                     "creationTimestamp": (NOW - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")},
        "spec": spec, "status": status,
    })  # fmt: skip


# --- label values ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reason,expected",
    [
        ("DeactivatedDueToAdmissionCheck", ("Deactivated", "AdmissionCheck")),
        ("DeactivatedDueToRequeuingLimitExceeded", ("Deactivated", "RequeuingLimitExceeded")),
        ("Preempted", ("Preempted", "")),
        ("AdmissionCheck", ("AdmissionCheck", "")),
        ("DueTo", ("DueTo", "")),
    ],
)
def test_eviction_reasons_split_as_upstream_counts_them(reason: str, expected: tuple[str, str]) -> None:
    assert metrics.split_reason(reason) == expected


def test_eviction_is_counted_per_cluster_queue_reason_cause_and_priority_class() -> None:
    cq = unique("cq")
    metrics.workload_evicted(workload(priority_class="high"), cq, "DeactivatedDueToAdmissionCheck")
    assert series("kueue_evicted_workloads_total", cluster_queue=cq) == [
        {"cluster_queue": cq, "reason": "Deactivated", "underlying_cause": "AdmissionCheck", "priority_class": "high",
         "replica_role": "standalone"}  # fmt: skip
    ]


def test_reservation_without_checks_counts_admission_and_both_waits_since_creation() -> None:
    cq = unique("cq")
    metrics.quota_reserved(workload(), cq, admitted=True, now=NOW)
    labels = {"cluster_queue": cq, "priority_class": "", "replica_role": "standalone"}
    assert value("kueue_quota_reserved_workloads_total", **labels) == 1
    assert value("kueue_admitted_workloads_total", **labels) == 1
    assert value("kueue_quota_reserved_wait_time_seconds_sum", **labels) == 30
    assert value("kueue_admission_wait_time_seconds_sum", **labels) == 30


def test_reservation_with_checks_counts_no_admission_and_waits_run_from_the_requeue() -> None:
    cq = unique("cq")
    metrics.quota_reserved(workload(requeued=NOW - timedelta(seconds=4)), cq, admitted=False, now=NOW)
    labels = {"cluster_queue": cq, "priority_class": "", "replica_role": "standalone"}
    assert value("kueue_quota_reserved_wait_time_seconds_sum", **labels) == 4
    assert value("kueue_admitted_workloads_total", **labels) is None


def test_preemption_carries_the_role() -> None:
    cq = unique("cq")
    metrics.set_replica_role(metrics.ROLE_LEADER)
    metrics.workload_preempted(cq, "InClusterQueue")
    assert value("kueue_preempted_workloads_total", preempting_cluster_queue=cq, reason="InClusterQueue", replica_role="leader") == 1


# --- queue gauges ----------------------------------------------------------------------------------


def quota(flavor: str = "default", resource: str = "cpu", *, usage: str = "0", reservation: str = "0",
          borrowing: str | None = None) -> metrics.QuotaLine:  # fmt: skip
    return metrics.QuotaLine(flavor, resource, Decimal("8"), Decimal(borrowing) if borrowing else None, None,
                             Decimal(usage), Decimal(reservation))  # fmt: skip


def report(cq: str, **kw: Any) -> None:
    args: dict[str, Any] = dict(cohort="", status=metrics.CQ_ACTIVE, pending_active=0, pending_inadmissible=0,
                                reserving=0, admitted=0, quotas=[quota()])  # fmt: skip
    args.update(kw)
    metrics.report_queue_gauges(cq, metrics.cluster_queue_samples(cq, **args))


def test_queue_gauges_have_upstreams_labels_and_values() -> None:
    cq = unique("cq")
    report(cq, cohort="team", pending_active=2, pending_inadmissible=3, reserving=4, admitted=1,
           quotas=[quota(usage="0.5", reservation="1.5", borrowing="2"), quota("default", "memory")])  # fmt: skip
    role = {"replica_role": "standalone"}
    assert value("kueue_pending_workloads", cluster_queue=cq, status="active", **role) == 2
    assert value("kueue_pending_workloads", cluster_queue=cq, status="inadmissible", **role) == 3
    assert value("kueue_reserving_active_workloads", cluster_queue=cq, **role) == 4
    assert value("kueue_admitted_active_workloads", cluster_queue=cq, **role) == 1
    assert [value("kueue_cluster_queue_status", cluster_queue=cq, status=s, **role) for s in ("pending", "active", "terminating")] == [0, 1, 0]
    cpu = {"cohort": "team", "cluster_queue": cq, "flavor": "default", "resource": "cpu", **role}
    assert value("kueue_cluster_queue_nominal_quota", **cpu) == 8
    assert value("kueue_cluster_queue_resource_usage", **cpu) == 0.5
    assert value("kueue_cluster_queue_resource_reservation", **cpu) == 1.5
    assert value("kueue_cluster_queue_borrowing_limit", **cpu) == 2
    assert value("kueue_cluster_queue_lending_limit", **cpu) == math.inf  # unset: +Inf, as upstream
    assert value("kueue_cluster_queue_nominal_quota", **{**cpu, "resource": "memory"}) == 8


def test_weighted_share_is_reported_only_with_fair_sharing() -> None:
    """Upstream's kueue_cluster_queue_weighted_share{cluster_queue, cohort, replica_role}."""
    shared, plain = unique("cq"), unique("cq")
    base: dict[str, Any] = dict(status=metrics.CQ_ACTIVE, pending_active=0, pending_inadmissible=0, reserving=0,
                                admitted=0, quotas=[quota()])  # fmt: skip
    metrics.report_queue_gauges(shared, metrics.cluster_queue_samples(shared, cohort="team", weighted_share=250.0, **base))
    metrics.report_queue_gauges(plain, metrics.cluster_queue_samples(plain, cohort="", **base))
    assert value("kueue_cluster_queue_weighted_share", cluster_queue=shared, cohort="team", replica_role="standalone") == 250
    assert series("kueue_cluster_queue_weighted_share", cluster_queue=plain) == []


def test_the_view_carries_the_precise_share_for_the_metric() -> None:
    from multikueue.core.cache.views import ClusterQueueStatusView

    view = ClusterQueueStatusView(active=True, reason="Ready", message="", pending_workloads=0, reserving_workloads=0,
                                  admitted_workloads=0, flavors_reservation=[], flavors_usage=[], weighted_share=1,
                                  precise_weighted_share=0.5)  # fmt: skip
    assert view.status_fields()["fairSharing"] == {"weightedShare": 1}, "only the rounded value is written to the status"


def test_a_queue_or_flavor_no_longer_reported_loses_its_series() -> None:
    gone, kept = unique("cq"), unique("cq")
    report(gone, quotas=[quota(), quota("spot")])
    report(kept, pending_active=1)
    report(kept, quotas=[])
    metrics.keep_queue_gauges([kept])
    assert series("kueue_pending_workloads", cluster_queue=gone) == []
    assert series("kueue_cluster_queue_nominal_quota", cluster_queue=gone) == []
    assert series("kueue_cluster_queue_nominal_quota", cluster_queue=kept) == []
    assert len(series("kueue_pending_workloads", cluster_queue=kept)) == 2


def test_a_role_change_drops_the_queue_gauges_and_the_leader_reports_them_again() -> None:
    cq = unique("cq")
    metrics.set_replica_role(metrics.ROLE_LEADER)
    report(cq, pending_active=5)
    metrics.set_replica_role(metrics.ROLE_FOLLOWER)
    assert series("kueue_pending_workloads", cluster_queue=cq) == []
    metrics.set_replica_role(metrics.ROLE_LEADER)
    report(cq, pending_active=5)
    assert value("kueue_pending_workloads", cluster_queue=cq, status="active", replica_role="leader") == 5


def test_leading_wrapper_sets_leader_while_leading_then_follower() -> None:
    seen: list[str] = []

    async def lead(_: object) -> None:
        seen.append(metrics.replica_role())

    metrics.set_replica_role(metrics.ROLE_FOLLOWER)
    asyncio.run(metrics.leading(lead)(None))
    assert seen == ["leader"] and metrics.replica_role() == "follower"


# --- MultiKueue ------------------------------------------------------------------------------------


def test_dispatch_and_admission_on_a_worker_are_counted_per_queue_and_cluster() -> None:
    cq, cluster = unique("cq"), unique("worker")
    wl = workload(cluster_queue=cq)
    metrics.remote_workload_created(wl, cluster)
    metrics.remote_workload_created(wl, cluster)
    metrics.remote_workload_admitted(wl, cluster)
    labels = {"cluster_queue": cq, "cluster": cluster, "replica_role": "standalone"}
    assert value("multikueue_workloads_dispatched_total", **labels) == 2
    assert value("multikueue_workloads_admitted_total", **labels) == 1


def test_dispatch_latency_runs_from_this_process_reservation_else_from_the_condition() -> None:
    cq, cluster = unique("cq"), unique("worker")
    uid = str(uuid.uuid4())
    metrics.quota_reserved(workload(uid=uid), cq, admitted=False, now=NOW)
    assert uid in metrics.DISPATCH_CLOCK._reserved
    metrics.remote_job_created(workload(uid=uid, cluster_queue=cq, reserved=NOW - timedelta(hours=1)), cluster)
    observed = value("mkpy_dispatch_latency_seconds_sum", cluster_queue=cq, cluster=cluster)
    assert observed is not None and observed < 60, "timed from the in-process reservation, not the old condition"
    assert uid not in metrics.DISPATCH_CLOCK._reserved

    other = unique("worker")  # reserved by another process (a previous leader): the condition's time
    metrics.remote_job_created(workload(cluster_queue=cq, reserved=NOW - timedelta(seconds=3)), other, now=NOW)
    assert value("mkpy_dispatch_latency_seconds_sum", cluster_queue=cq, cluster=other) == 3


def test_dispatch_clock_forgets_the_oldest_past_its_limit() -> None:
    clock = metrics.DispatchClock(limit=2)
    for uid in ("a", "b", "c"):
        clock.reserved(uid)
    assert len(clock) == 2
    assert clock.elapsed("a", None) is None
    assert clock.elapsed("c", None) is not None


def test_status_sync_latency_runs_from_the_workers_last_condition_change() -> None:
    cluster = unique("worker")
    job = {"status": {"conditions": [
        {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": "2026-01-01T11:59:58Z"},
        {"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T11:59:59Z"},
        {"type": "Odd", "status": "True", "lastTransitionTime": "not a time"},
    ]}}  # fmt: skip
    metrics.remote_job_finished(job, cluster, now=NOW)
    assert value("mkpy_status_sync_latency_seconds_sum", cluster=cluster) == 1
    metrics.remote_job_finished({"status": {}}, cluster, now=NOW)  # nothing to time from: not observed
    assert value("mkpy_status_sync_latency_seconds_count", cluster=cluster) == 1


def test_worker_cluster_state_is_reported_then_dropped() -> None:
    cluster = unique("worker")
    metrics.worker_cluster_state(cluster, False)
    assert value("mkpy_worker_cluster_active", cluster=cluster) == 0
    metrics.worker_cluster_state(cluster, True)
    assert value("mkpy_worker_cluster_active", cluster=cluster) == 1
    metrics.worker_cluster_state(cluster, None)
    metrics.worker_cluster_state(cluster, None)  # twice: no error
    assert value("mkpy_worker_cluster_active", cluster=cluster) is None


def test_our_metrics_never_take_upstreams_prefixes() -> None:
    """Every metric is upstream's (a name upstream v0.19 exports) or ours under ``mkpy_``."""
    upstream = {
        "kueue_admitted_workloads_total", "kueue_quota_reserved_workloads_total", "kueue_evicted_workloads_total",
        "kueue_preempted_workloads_total", "kueue_quota_reserved_wait_time_seconds", "kueue_admission_wait_time_seconds",
        "kueue_pending_workloads", "kueue_reserving_active_workloads", "kueue_admitted_active_workloads",
        "kueue_cluster_queue_status", "kueue_cluster_queue_resource_usage", "kueue_cluster_queue_resource_reservation",
        "kueue_cluster_queue_nominal_quota", "kueue_cluster_queue_borrowing_limit", "kueue_cluster_queue_lending_limit",
        "kueue_cluster_queue_weighted_share", "multikueue_workloads_dispatched_total", "multikueue_workloads_admitted_total",
    }  # fmt: skip
    names = {f.name + ("_total" if f.type == "counter" else "") for f in metrics.REGISTRY.collect()}
    assert {n for n in names if not n.startswith("mkpy_")} == upstream
    labelled = [f for f in metrics.REGISTRY.collect() if not f.name.startswith("mkpy_")]
    assert all("replica_role" in s.labels for f in labelled for s in f.samples), "replica_role on every upstream-named series"


def test_a_reservation_admitted_at_once_is_not_kept_for_dispatch_timing() -> None:
    uid = str(uuid.uuid4())
    metrics.quota_reserved(workload(uid=uid), unique("cq"), admitted=True, now=NOW)
    assert uid not in metrics.DISPATCH_CLOCK._reserved
