"""The Workload copy sent to workers, and reading a copy's state back (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from multikueue.controllers.multikueue.remote_workload import RemoteState, remote_state, remote_workload_copy
from multikueue.api import Workload
from multikueue.api.constants import API_VERSION, Labels
from multikueue.api.meta import format_time

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def local_workload() -> Workload:
    return Workload.from_k8s(
        {
            "apiVersion": API_VERSION,
            "kind": "Workload",
            "metadata": {
                "name": "job-pi-1a2b3",
                "namespace": "team-a",
                "uid": "0000-1111",
                "resourceVersion": "42",
                "generation": 3,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{"manager": "kueue", "operation": "Update"}],
                "labels": {Labels.JOB_UID: "job-uid-1", Labels.QUEUE_NAME: "user-queue", "team": "a"},
                "annotations": {"note": "keep me"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": "job-uid-1", "controller": True}],
                "finalizers": ["kueue.x-k8s.io/resource-in-use"],
            },
            "spec": {
                "queueName": "user-queue",
                "priority": 100,
                "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"},
                "active": True,
                "maximumExecutionTimeSeconds": 600,
                "podSets": [
                    {
                        "name": "main",
                        "count": 2,
                        "template": {"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}},
                    }
                ],
            },
            "status": {
                "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": format_time(T0)}],
                "admission": {"clusterQueue": "cq"},
                "nominatedClusterNames": ["w1"],
            },
        }
    )


def test_copy_keeps_name_labels_annotations_and_spec_only() -> None:
    local = local_workload()
    copy = remote_workload_copy(local, origin="manager-1")
    assert set(copy) == {"apiVersion", "kind", "metadata", "spec"}
    assert copy["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert copy["kind"] == "Workload"
    assert copy["metadata"] == {
        "name": "job-pi-1a2b3",
        "namespace": "team-a",
        "labels": {Labels.QUEUE_NAME: "user-queue", "team": "a", Labels.MULTIKUEUE_ORIGIN: "manager-1"},
        "annotations": {"note": "keep me"},
    }
    assert copy["spec"] == local.spec.to_dict()
    assert copy["spec"]["priorityClassRef"]["name"] == "high"
    assert copy["spec"]["maximumExecutionTimeSeconds"] == 600
    assert copy["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["image"] == "busybox"


def test_copy_drops_the_job_uid_label_as_upstream() -> None:
    copy = remote_workload_copy(local_workload(), origin="o")
    assert Labels.JOB_UID not in copy["metadata"]["labels"]


def test_copy_of_a_bare_workload_has_only_the_origin_label() -> None:
    local = Workload.from_k8s({"metadata": {"name": "w", "namespace": "ns"}, "spec": {"podSets": [{"name": "main", "template": {}}]}})
    copy = remote_workload_copy(local, origin="o")
    assert copy["metadata"] == {"name": "w", "namespace": "ns", "labels": {Labels.MULTIKUEUE_ORIGIN: "o"}}


def test_copy_is_independent_of_the_local_workload() -> None:
    local = local_workload()
    copy = remote_workload_copy(local, origin="o")
    copy["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["image"] = "changed"
    copy["metadata"]["labels"]["team"] = "b"
    assert local.spec.pod_sets[0].template["spec"]["containers"][0]["image"] == "busybox"
    assert local.metadata.labels is not None and local.metadata.labels["team"] == "a"


def test_copy_parses_back_as_a_workload_without_status() -> None:
    parsed = Workload.from_k8s(remote_workload_copy(local_workload(), origin="o"))
    assert parsed.status.conditions is None
    assert parsed.metadata.owner_references is None
    assert parsed.spec == local_workload().spec


# --- remote_state ---------------------------------------------------------------------


def cond(kind: str, status: str = "True", at: datetime = T0, reason: str = "R") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": "", "lastTransitionTime": format_time(at)}


def copy_with(*conditions: dict[str, Any]) -> Workload:
    return Workload.from_k8s({"metadata": {"name": "w", "namespace": "ns"}, "status": {"conditions": list(conditions)}})


LATER = T0 + timedelta(minutes=1)


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ((), RemoteState.PENDING),
        ((cond("QuotaReserved", "False", reason="Pending"),), RemoteState.PENDING),
        ((cond("QuotaReserved"),), RemoteState.RESERVED),
        ((cond("QuotaReserved"), cond("Admitted")), RemoteState.ADMITTED),
        # Eviction in progress on upstream Kueue: still reserved, but Evicted=True came later.
        ((cond("QuotaReserved", at=T0), cond("Evicted", at=LATER)), RemoteState.EVICTED),
        ((cond("QuotaReserved", "False", at=LATER), cond("Evicted", at=LATER)), RemoteState.EVICTED),
        # Reserved again after an eviction by a worker that leaves Evicted=True behind.
        ((cond("QuotaReserved", at=LATER), cond("Evicted", at=T0)), RemoteState.RESERVED),
        ((cond("QuotaReserved", at=T0), cond("Evicted", at=T0)), RemoteState.RESERVED),
        # Lost its reservation again; the conditions prove it had one.
        ((cond("QuotaReserved", "False"), cond("Evicted", "False")), RemoteState.EVICTED),
        ((cond("QuotaReserved", "False"), cond("Requeued")), RemoteState.EVICTED),
        ((cond("QuotaReserved"), cond("Finished")), RemoteState.FINISHED),
        ((cond("QuotaReserved"), cond("Evicted", at=LATER), cond("Finished")), RemoteState.FINISHED),
    ],
)
def test_remote_state(conditions: tuple[dict[str, Any], ...], expected: RemoteState) -> None:
    assert remote_state(copy_with(*conditions)) == expected


def test_remote_state_of_no_copy_is_absent() -> None:
    assert remote_state(None) == RemoteState.ABSENT
