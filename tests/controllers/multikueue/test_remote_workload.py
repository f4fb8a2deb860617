"""The Workload copy sent to workers, and reading a copy's state back (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from multikueue.controllers.multikueue.remote_workload import RemoteCopy, RemoteState, remote_state, remote_workload_copy
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


def copy_with(*conditions: dict[str, Any]) -> RemoteCopy:
    return RemoteCopy.from_k8s({"metadata": {"name": "w", "namespace": "ns"}, "status": {"conditions": list(conditions)}})


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


# --- RemoteCopy: what the manager keeps of a worker's copy -------------------------------


def worker_copy(**spec: Any) -> dict[str, Any]:
    """A copy as a worker's apiserver sends it: pod template, the worker's admission and checks."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": "job-pi-1a2b3",
            "namespace": "team-a",
            "uid": "worker-uid-1",
            "resourceVersion": "7",
            "labels": {Labels.MULTIKUEUE_ORIGIN: "manager-1"},
            "annotations": {"note": "not kept"},
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        },
        "spec": {
            "queueName": "user-queue",
            "priority": 100,
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "template": {
                        "metadata": {"annotations": {"a": "b"}},
                        "spec": {
                            "restartPolicy": "Never",
                            "initContainers": [{"name": "init", "image": "busybox", "resources": {"requests": {"memory": "1Gi"}}}],
                            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1"], "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}],
                        },
                    },
                }
            ],
            **spec,
        },
        "status": {
            "conditions": [cond("QuotaReserved", at=T0), cond("Admitted", at=LATER)],
            "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 2}]},
            "admissionChecks": [],
        },
    }


def test_a_remote_copy_keeps_what_dispatching_reads() -> None:
    from multikueue.controllers.multikueue.remote_workload import CopyPodSet

    view = RemoteCopy.from_k8s(worker_copy())
    assert (view.uid, view.deleting, view.finalizers) == ("worker-uid-1", False, ("kueue.x-k8s.io/resource-in-use",))
    assert (view.active, view.queue_name, view.priority) == (True, "user-queue", 100)
    assert view.pod_sets == (
        CopyPodSet("main", 2, None, (("initContainers", "init", (("memory", "1Gi"),)), ("containers", "c", (("cpu", "1"),)))),
    )
    assert [c.type for c in view.conditions] == ["QuotaReserved", "Admitted"]
    assert view.condition("Admitted").last_transition_time == LATER  # type: ignore[union-attr]
    assert view.is_true("QuotaReserved") and view.is_true("Admitted") and not view.is_true("Finished")
    assert remote_state(view) == RemoteState.ADMITTED
    # The same view whether read from the wire or from a parsed Workload.
    assert RemoteCopy.of(Workload.from_k8s(worker_copy())) == view


def test_a_remote_copy_reads_defaults_deletion_and_a_deactivated_copy() -> None:
    raw = worker_copy(active=False)
    raw["metadata"]["deletionTimestamp"] = format_time(T0)
    del raw["spec"]["podSets"][0]["count"]
    del raw["status"]
    view = RemoteCopy.from_k8s(raw)
    assert view.deleting and not view.active
    assert view.pod_sets[0].count == 1 and view.conditions == ()
    assert remote_state(view) == RemoteState.PENDING


def test_remote_copies_share_their_repeated_strings() -> None:
    first, second = RemoteCopy.from_k8s(worker_copy()), RemoteCopy.from_k8s(worker_copy())
    assert first.queue_name is second.queue_name
    assert first.conditions[0].reason is second.conditions[0].reason


@pytest.mark.parametrize(
    ("path", "value", "says"),
    [
        (("spec", "podSets"), {"main": {}}, "spec.podSets is not a list"),
        (("spec", "priority"), "high", "spec.priority an integer"),
        (("spec", "active"), "yes", "spec.active must be a boolean"),
        (("metadata", "uid"), 42, "metadata.uid is not a string"),
        (("status", "conditions"), [{"type": "QuotaReserved", "status": "True"}], "no valid lastTransitionTime"),
        (("status", "conditions"), [{"type": "Admitted", "lastTransitionTime": "yesterday"}], "no valid lastTransitionTime"),
        (("spec",), "not an object", "spec is not an object"),
    ],
)
def test_a_malformed_copy_is_refused_with_what_is_wrong(path: tuple[str, ...], value: Any, says: str) -> None:
    raw = worker_copy()
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValueError, match=says):
        RemoteCopy.from_k8s(raw)
