"""``multikueue status``: the report derived from Workloads, MultiKueueClusters and AdmissionChecks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from multikueue.api import AdmissionCheck, MultiKueueCluster, Workload
from multikueue.status.report import (
    INACTIVE_MESSAGE,
    QuotaState,
    RemoteLookup,
    build_report,
    check_row,
    cluster_row,
    quota_status,
    remote_state,
    workload_row,
)

pytestmark = pytest.mark.unit

T0 = "2025-03-01T10:00:00Z"


def cond(ctype: str, status: str = "True", reason: str | None = None, message: str = "") -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason or ctype, "message": message, "lastTransitionTime": T0}


def wl(
    name: str = "job-a",
    *,
    namespace: str = "team",
    conditions: list[dict[str, Any]] | None = None,
    active: bool = True,
    **status: Any,
) -> Workload:
    body: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "queueName": "user-queue",
            "active": active,
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}],
        },
        "status": {"conditions": conditions or [], **status},
    }
    return Workload.from_k8s(body)


RESERVED = cond("QuotaReserved", message="Quota reserved in ClusterQueue cq")
ADMITTED = cond("Admitted", message="The workload is admitted")


@pytest.mark.parametrize(
    ("conditions", "active", "expected"),
    [
        ([], True, (QuotaState.PENDING, "", "")),
        (
            [cond("QuotaReserved", "False", "Inadmissible", "LocalQueue user-queue doesn't exist")],
            True,
            (QuotaState.PENDING, "Inadmissible", "LocalQueue user-queue doesn't exist"),
        ),
        ([RESERVED], True, (QuotaState.QUOTA_RESERVED, "QuotaReserved", "Quota reserved in ClusterQueue cq")),
        ([RESERVED, ADMITTED], True, (QuotaState.ADMITTED, "Admitted", "The workload is admitted")),
        (
            [RESERVED, ADMITTED, cond("Finished", reason="Succeeded", message="Job finished successfully")],
            True,
            (QuotaState.FINISHED, "Succeeded", "Job finished successfully"),
        ),
        (
            [cond("Finished", reason="Failed", message="BackoffLimitExceeded")],
            False,
            (QuotaState.FINISHED, "Failed", "BackoffLimitExceeded"),
        ),
        (
            # An eviction in progress still holds the reservation: Evicted wins.
            [RESERVED, cond("Evicted", reason="AdmissionCheck", message="At least one admission check is false")],
            True,
            (QuotaState.EVICTED, "AdmissionCheck", "At least one admission check is false"),
        ),
        (
            [cond("QuotaReserved", "False", "Pending"), cond("Evicted", reason="Preempted", message="Preempted by x")],
            True,
            (QuotaState.EVICTED, "Preempted", "Preempted by x"),
        ),
        (
            # The controller resets Evicted on the next reservation.
            [RESERVED, ADMITTED, cond("Evicted", "False", "QuotaReserved", "Previously: Preempted")],
            True,
            (QuotaState.ADMITTED, "Admitted", "The workload is admitted"),
        ),
        (
            [cond("Evicted", reason="DeactivatedDueToAdmissionCheck", message="Admission check mk rejected the workload")],
            False,
            (QuotaState.INACTIVE, "DeactivatedDueToAdmissionCheck", "Admission check mk rejected the workload"),
        ),
        ([], False, (QuotaState.INACTIVE, "Deactivated", INACTIVE_MESSAGE)),
        ([RESERVED, ADMITTED], False, (QuotaState.INACTIVE, "Deactivated", INACTIVE_MESSAGE)),
    ],
    ids=[
        "no-conditions",
        "pending-inadmissible",
        "quota-reserved",
        "admitted",
        "finished",
        "finished-beats-inactive",
        "evicting",
        "evicted-waiting",
        "evicted-then-readmitted",
        "inactive-with-eviction",
        "inactive-never-admitted",
        "inactive-still-holding",
    ],
)
def test_quota_state(conditions: list[dict[str, Any]], active: bool, expected: tuple[str, str, str]) -> None:
    quota = quota_status(wl(conditions=conditions, active=active))
    assert (quota.state, quota.reason, quota.message) == expected


@pytest.mark.parametrize(
    ("lookup", "expected"),
    [
        (None, None),
        (RemoteLookup(), "not found"),
        (RemoteLookup(error="cannot read Secret kueue-system/worker1-secret (403)"),
         "unknown: cannot read Secret kueue-system/worker1-secret (403)"),
        (RemoteLookup(workload=wl()), "Pending"),
        (RemoteLookup(workload=wl(conditions=[RESERVED])), "QuotaReserved"),
        (RemoteLookup(workload=wl(conditions=[RESERVED, ADMITTED])), "Admitted on worker1"),
        (RemoteLookup(workload=wl(conditions=[RESERVED, ADMITTED, cond("Finished", reason="Succeeded")])), "Finished: Succeeded"),
        (RemoteLookup(workload=wl(conditions=[cond("Evicted", reason="Preempted")])), "Evicted: Preempted"),
        (RemoteLookup(workload=wl(active=False)), "Inactive: Deactivated"),
    ],
    ids=["not-read", "missing", "unknown", "pending", "reserved", "admitted", "finished", "evicted", "inactive"],
)
def test_remote_state(lookup: RemoteLookup | None, expected: str | None) -> None:
    assert remote_state(lookup, "worker1") == expected


def test_workload_row_takes_queue_checks_and_placement_from_the_workload() -> None:
    nominated = wl(
        conditions=[RESERVED],
        admission={"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1}]},
        admissionChecks=[
            {"name": "mk", "state": "Pending", "message": "", "lastTransitionTime": T0},
            {"name": "prov", "state": "Ready", "message": "capacity found", "lastTransitionTime": T0},
        ],
        nominatedClusterNames=["worker1", "worker2"],
    )
    row = workload_row(nominated, RemoteLookup(error="ignored: no chosen worker"))
    assert (row.namespace, row.name, row.queue, row.cluster_queue) == ("team", "job-a", "user-queue", "cq")
    assert [(c.name, c.state, c.message) for c in row.checks] == [("mk", "Pending", ""), ("prov", "Ready", "capacity found")]
    assert row.nominated == ["worker1", "worker2"]
    assert row.cluster is None and row.remote is None

    chosen = wl(conditions=[RESERVED, ADMITTED], clusterName="worker2")
    assert workload_row(chosen).remote is None  # workers not asked (--no-remote)
    assert workload_row(chosen, RemoteLookup()).remote == "not found"


def test_cluster_row_reads_the_active_condition_and_the_kubeconfig_source() -> None:
    cluster = MultiKueueCluster.from_k8s(
        {
            "metadata": {"name": "worker1"},
            "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": "worker1-secret"}}},
            "status": {"conditions": [cond("Active", "False", "ClientConnectionFailed", "cannot reach https://w1")]},
        }
    )
    row = cluster_row(cluster)
    assert (row.name, row.active, row.reason, row.message) == (
        "worker1", "False", "ClientConnectionFailed", "cannot reach https://w1"
    )
    assert row.since == datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
    assert row.kube_config is not None and row.kube_config.location == "worker1-secret"

    fresh = cluster_row(MultiKueueCluster.from_k8s({"metadata": {"name": "new"}, "spec": {"clusterSource": {"kubeConfig": {"location": "s"}}}}))
    assert (fresh.active, fresh.reason, fresh.since) == ("Unknown", "", None)


def test_check_row_names_controller_and_parameters() -> None:
    check = AdmissionCheck.from_k8s(
        {
            "metadata": {"name": "mk"},
            "spec": {
                "controllerName": "kueue.x-k8s.io/multikueue",
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "cfg"},
            },
            "status": {"conditions": [cond("Active", reason="Active", message="The admission check is active")]},
        }
    )
    row = check_row(check)
    assert (row.name, row.controller, row.parameters, row.active, row.reason) == (
        "mk", "kueue.x-k8s.io/multikueue", "MultiKueueConfig/cfg", "True", "Active"
    )
    bare = check_row(AdmissionCheck.from_k8s({"metadata": {"name": "other"}, "spec": {"controllerName": "example.com/x"}}))
    assert (bare.parameters, bare.active) == (None, "Unknown")


def test_build_report_sorts_and_attaches_remote_states() -> None:
    b = wl("b", conditions=[RESERVED, ADMITTED], clusterName="worker1")
    a = wl("a", namespace="zeta")
    c = wl("c", conditions=[RESERVED, ADMITTED], clusterName="worker2")
    report = build_report(
        [a, c, b],
        [],
        [],
        {("team", "b"): RemoteLookup(workload=wl("b", conditions=[RESERVED, ADMITTED])), ("team", "c"): RemoteLookup()},
    )
    assert [(r.namespace, r.name, r.remote) for r in report.workloads] == [
        ("team", "b", "Admitted on worker1"),
        ("team", "c", "not found"),
        ("zeta", "a", None),
    ]
    # Same input, same report: --watch relies on equality to print only changes.
    assert report == build_report([b, a, c], [], [], {("team", "b"): RemoteLookup(workload=wl("b", conditions=[RESERVED, ADMITTED])), ("team", "c"): RemoteLookup()})
