"""Starting and stopping a Job, and the copy MultiKueue makes of it on a worker."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from multikueue.api.constants import Labels, MultiKueue
from multikueue.api.core import Toleration
from multikueue.api.meta import Condition, ObjectMeta
from multikueue.api.resourceflavor import ResourceFlavor, ResourceFlavorSpec
from multikueue.api.workload import Admission, AdmissionCheckState, PodSetAssignment, PodSetUpdate, Workload
from multikueue.integrations.batchjob import job as batchjob
from multikueue.integrations.batchjob.job import JOB_STATUS_FIELDS, build_workload
from multikueue.integrations.batchjob.remote import StatusSync, remote_copy, status_for_manager, status_sync_action
from multikueue.integrations.batchjob.startstop import (
    MissingFlavorError,
    PatchStep,
    PodSetMergeConflict,
    start_patch,
    stop_patch,
    stop_steps,
)

pytestmark = pytest.mark.unit

UID = "0f3a9c2e-7b1d-4c55-9e1a-2d7f6b8c4e10"
TOLERATION = {"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
SPOT = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}


def api_job() -> dict[str, Any]:
    """A Job as the API server returns it: defaults filled in, selector and labels generated."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "sample",
            "namespace": "team-a",
            "uid": UID,
            "resourceVersion": "4242",
            "generation": 1,
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {Labels.QUEUE_NAME: "user-queue", "app": "sample"},
            "annotations": {"team": "a"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "cm-uid"}],
            "finalizers": ["example.com/keep"],
            "managedFields": [{"manager": "kubectl-create", "operation": "Update", "apiVersion": "batch/v1"}],
        },
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "backoffLimit": 6,
            "completionMode": "NonIndexed",
            "suspend": True,
            "managedBy": MultiKueue.MANAGED_BY,
            "podReplacementPolicy": "TerminatingOrFailed",
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": UID}},
            "template": {
                "metadata": {
                    "creationTimestamp": None,
                    "annotations": {"note": "keep"},
                    "labels": {
                        "app": "sample",
                        "batch.kubernetes.io/controller-uid": UID,
                        "batch.kubernetes.io/job-name": "sample",
                        "controller-uid": UID,
                        "job-name": "sample",
                    },
                },
                "spec": {
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}},
                    ],
                    "restartPolicy": "Never",
                    "nodeSelector": {"disk": "ssd"},
                    "tolerations": [dict(TOLERATION)],
                },
            },
        },
        "status": {},
    }


FLAVORS = {
    "on-demand": ResourceFlavor(
        metadata=ObjectMeta(name="on-demand"),
        spec=ResourceFlavorSpec(node_labels={"instance": "on-demand"}, tolerations=[Toleration(**SPOT)]),
    ),
    "gpu": ResourceFlavor(metadata=ObjectMeta(name="gpu"), spec=ResourceFlavorSpec(node_labels={"accel": "a100"})),
}


def admitted(job: dict[str, Any], *, flavors: dict[str, str] | None = None, count: int | None = None) -> Workload:
    wl = build_workload(job, priority=None, priority_class=None)
    wl.status.admission = Admission(
        cluster_queue="cq",
        pod_set_assignments=[
            PodSetAssignment(name="main", flavors=flavors or {"cpu": "on-demand", "memory": "on-demand"}, count=count)
        ],
    )
    wl.status.conditions = [
        Condition(type="QuotaReserved", status="True", reason="QuotaReserved"),
        Condition(type="Admitted", status="True", reason="Admitted"),
    ]
    return wl


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies it."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def apply_steps(job: dict[str, Any], steps: list[PatchStep]) -> dict[str, Any]:
    for step in steps:
        if step.subresource == "status":
            assert set(step.patch) == {"status"}, "a status write only changes status"
        else:
            assert "status" not in step.patch
        job = merge_patch(job, step.patch)
    return job


# --- start -----------------------------------------------------------------------


def test_start_unsuspends_and_injects_flavor_labels_and_tolerations() -> None:
    job = api_job()
    patch = start_patch(job, admitted(job), FLAVORS)
    started = merge_patch(job, patch)
    assert started["spec"]["suspend"] is False
    pod = started["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd", "instance": "on-demand"}
    assert pod["spec"]["tolerations"] == [TOLERATION, SPOT]
    assert pod["metadata"]["labels"][batchjob.POD_SET_LABEL] == "main"
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "sample"
    assert pod["metadata"]["annotations"] == {"note": "keep"}
    # Only what changes is written.
    assert patch == {
        "spec": {
            "suspend": False,
            "template": {
                "metadata": {"labels": {batchjob.POD_SET_LABEL: "main"}},
                "spec": {"nodeSelector": {"instance": "on-demand"}, "tolerations": [TOLERATION, SPOT]},
            },
        }
    }


def test_start_merges_every_flavor_of_the_pod_set() -> None:
    job = api_job()
    started = merge_patch(job, start_patch(job, admitted(job, flavors={"cpu": "on-demand", "nvidia.com/gpu": "gpu"}), FLAVORS))
    assert started["spec"]["template"]["spec"]["nodeSelector"] == {"disk": "ssd", "instance": "on-demand", "accel": "a100"}


def test_start_of_a_started_job_changes_nothing_else() -> None:
    job = api_job()
    wl = admitted(job)
    started = merge_patch(job, start_patch(job, wl, FLAVORS))
    assert start_patch(started, wl, FLAVORS) == {"spec": {"suspend": False}}


def test_start_without_a_template_selector() -> None:
    job = api_job()
    del job["spec"]["template"]["spec"]["nodeSelector"]
    del job["spec"]["template"]["spec"]["tolerations"]
    started = merge_patch(job, start_patch(job, admitted(job), FLAVORS))
    assert started["spec"]["template"]["spec"]["nodeSelector"] == {"instance": "on-demand"}
    assert started["spec"]["template"]["spec"]["tolerations"] == [SPOT]


def test_start_applies_admission_check_pod_set_updates() -> None:
    job = api_job()
    wl = admitted(job)
    wl.status.admission_checks = [
        AdmissionCheckState(
            name="prov",
            state="Ready",
            pod_set_updates=[PodSetUpdate(name="main", labels={"booked": "yes"}, node_selector={"zone": "a"})],
        )
    ]
    pod = merge_patch(job, start_patch(job, wl, FLAVORS))["spec"]["template"]
    assert pod["metadata"]["labels"]["booked"] == "yes"
    assert pod["spec"]["nodeSelector"]["zone"] == "a"


def test_conflicting_selector_is_refused() -> None:
    job = api_job()
    job["spec"]["template"]["spec"]["nodeSelector"]["instance"] = "spot"
    with pytest.raises(PodSetMergeConflict, match="instance"):
        start_patch(job, admitted(job), FLAVORS)


def test_unknown_flavor_is_reported() -> None:
    job = api_job()
    with pytest.raises(MissingFlavorError, match="missing"):
        start_patch(job, admitted(job, flavors={"cpu": "missing"}), FLAVORS)


def test_start_needs_an_admission() -> None:
    job = api_job()
    with pytest.raises(ValueError, match="admission"):
        start_patch(job, build_workload(job, priority=None, priority_class=None), FLAVORS)


def test_flavors_may_be_given_as_api_dicts() -> None:
    job = api_job()
    as_dicts = {name: flavor.to_k8s() for name, flavor in FLAVORS.items()}
    assert start_patch(job, admitted(job).to_k8s(), as_dicts) == start_patch(job, admitted(job), FLAVORS)


# --- stop ------------------------------------------------------------------------


def running(job: dict[str, Any], wl: Workload) -> dict[str, Any]:
    """The Job after start, with the Job controller's status."""
    started = merge_patch(job, start_patch(job, wl, FLAVORS))
    started["status"] = {"active": 3, "ready": 3, "startTime": "2025-01-01T00:01:00Z"}
    return started


def test_stop_steps_restore_exactly_the_original_template() -> None:
    job = api_job()
    wl = admitted(job)
    stopped = apply_steps(running(job, wl), stop_steps(running(job, wl), wl))
    assert stopped["spec"]["suspend"] is True
    assert stopped["spec"]["template"] == job["spec"]["template"]
    assert "startTime" not in stopped["status"]
    assert batchjob.STOPPING_ANNOTATION not in stopped["metadata"]["annotations"]


def test_stop_steps_are_upstreams_three_writes() -> None:
    job = api_job()
    wl = admitted(job)
    steps = stop_steps(running(job, wl), wl)
    assert [s.subresource for s in steps] == ["", "status", ""]
    assert steps[0].patch == {
        "metadata": {"annotations": {batchjob.STOPPING_ANNOTATION: "true"}},
        "spec": {"suspend": True},
    }
    assert steps[1].patch == {"status": {"startTime": None}}
    assert steps[2].patch["metadata"] == {"annotations": {batchjob.STOPPING_ANNOTATION: None}}
    assert steps[2].patch["spec"]["template"]["spec"] == {"nodeSelector": {"instance": None}, "tolerations": [TOLERATION]}


def test_interrupted_stop_resumes() -> None:
    job = api_job()
    wl = admitted(job)
    steps = stop_steps(running(job, wl), wl)
    half_way = apply_steps(running(job, wl), steps[:1])
    stopped = apply_steps(half_way, stop_steps(half_way, wl))
    assert stopped["spec"]["template"] == job["spec"]["template"]
    assert stopped["spec"]["suspend"] is True
    assert batchjob.STOPPING_ANNOTATION not in stopped["metadata"]["annotations"]


def test_stopped_job_needs_no_steps() -> None:
    job = api_job()
    assert stop_steps(job, admitted(job)) == []


def test_stop_patch_in_one_write_restores_the_template() -> None:
    job = api_job()
    wl = admitted(job)
    started = merge_patch(job, start_patch(job, wl, FLAVORS))
    stopped = merge_patch(started, stop_patch(started, wl))
    assert stopped["spec"]["suspend"] is True
    assert stopped["spec"]["template"] == job["spec"]["template"]
    assert stop_patch(job, wl) == {"spec": {"suspend": True}}


def test_stop_removes_a_selector_the_original_did_not_have() -> None:
    job = api_job()
    del job["spec"]["template"]["spec"]["nodeSelector"]
    del job["spec"]["template"]["spec"]["tolerations"]
    wl = admitted(job)
    started = merge_patch(job, start_patch(job, wl, FLAVORS))
    patch = stop_patch(started, wl)
    assert patch["spec"]["template"]["spec"] == {"nodeSelector": None, "tolerations": None}
    assert merge_patch(started, patch)["spec"]["template"] == job["spec"]["template"]


# --- partial admission ---------------------------------------------------------------


def partial_job(*, sync_completions: bool = False) -> dict[str, Any]:
    job = api_job()
    job["metadata"]["annotations"][batchjob.MIN_PARALLELISM_ANNOTATION] = "1"
    if sync_completions:
        job["metadata"]["annotations"][batchjob.COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION] = "true"
        job["spec"]["completionMode"] = "Indexed"
    return job


def test_partial_admission_sets_parallelism_and_stop_restores_it() -> None:
    job = partial_job()
    wl = admitted(job, count=2)
    started = merge_patch(job, start_patch(job, wl, FLAVORS))
    assert (started["spec"]["parallelism"], started["spec"]["completions"]) == (2, 3)
    stopped = apply_steps(started, stop_steps(started, wl))
    assert (stopped["spec"]["parallelism"], stopped["spec"]["completions"]) == (3, 3)


def test_partial_admission_can_also_set_completions() -> None:
    job = partial_job(sync_completions=True)
    wl = admitted(job, count=2)
    started = merge_patch(job, start_patch(job, wl, FLAVORS))
    assert (started["spec"]["parallelism"], started["spec"]["completions"]) == (2, 2)
    stopped = merge_patch(started, stop_patch(started, wl))
    assert (stopped["spec"]["parallelism"], stopped["spec"]["completions"]) == (3, 3)


def test_without_min_parallelism_counts_are_left_alone() -> None:
    job = api_job()
    patch = start_patch(job, admitted(job, count=2), FLAVORS)
    assert "parallelism" not in patch["spec"]


# --- MultiKueue: the worker copy ------------------------------------------------------


def test_remote_copy_of_an_apiserver_job() -> None:
    job = api_job()
    before = copy.deepcopy(job)
    remote = remote_copy(job, origin="manager-1", workload_name="job-sample-abcde")
    assert job == before
    assert remote == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "sample",
            "namespace": "team-a",
            "labels": {
                Labels.QUEUE_NAME: "user-queue",
                "app": "sample",
                Labels.MULTIKUEUE_ORIGIN: "manager-1",
                Labels.PREBUILT_WORKLOAD_NAME: "job-sample-abcde",
            },
            "annotations": {"team": "a"},
        },
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "backoffLimit": 6,
            "completionMode": "NonIndexed",
            "suspend": True,
            "podReplacementPolicy": "TerminatingOrFailed",
            "template": {
                "metadata": {"creationTimestamp": None, "annotations": {"note": "keep"}, "labels": {"app": "sample"}},
                "spec": job["spec"]["template"]["spec"],
            },
        },
    }


def test_remote_copy_keeps_suspend_as_the_manager_has_it() -> None:
    job = api_job()
    job["spec"]["suspend"] = False
    assert remote_copy(job, origin="m", workload_name="wl")["spec"]["suspend"] is False


def test_remote_copy_keeps_a_manual_selector() -> None:
    job = api_job()
    job["spec"]["manualSelector"] = True
    job["spec"]["selector"] = {"matchLabels": {"app": "sample"}}
    remote = remote_copy(job, origin="m", workload_name="wl")
    assert remote["spec"]["selector"] == {"matchLabels": {"app": "sample"}}
    assert remote["spec"]["template"]["metadata"]["labels"] == job["spec"]["template"]["metadata"]["labels"]
    assert "managedBy" not in remote["spec"]


def test_remote_copy_puts_a_long_workload_name_in_an_annotation() -> None:
    name = "job-" + "a" * 100 + "-abcde"
    remote = remote_copy(api_job(), origin="m", workload_name=name)
    assert Labels.PREBUILT_WORKLOAD_NAME not in remote["metadata"]["labels"]
    assert remote["metadata"]["annotations"][batchjob.PREBUILT_WORKLOAD_ANNOTATION] == name
    assert batchjob.prebuilt_workload_name(remote) == name


def test_remote_copy_is_bound_to_its_workload() -> None:
    remote = remote_copy(api_job(), origin="m", workload_name="job-sample-abcde")
    assert batchjob.prebuilt_workload_name(remote) == "job-sample-abcde"
    assert batchjob.queue_name(remote) == "user-queue"


# --- MultiKueue: status back to the manager --------------------------------------------


def test_status_for_manager_mirrors_every_field() -> None:
    remote = api_job()
    remote["status"] = {
        "active": 2,
        "ready": 1,
        "terminating": 0,
        "startTime": "2025-01-01T00:01:00Z",
        "uncountedTerminatedPods": {"succeeded": ["pod-uid"]},
        "conditions": [{"type": "Suspended", "status": "False", "reason": "JobResumed"}],
    }
    status = status_for_manager(remote)
    assert set(status) == set(JOB_STATUS_FIELDS)
    assert status["active"] == 2 and status["ready"] == 1 and status["terminating"] == 0
    assert status["uncountedTerminatedPods"] == {"succeeded": ["pod-uid"]}
    assert status["succeeded"] is None and status["completionTime"] is None
    status["conditions"].append({"type": "x"})
    assert len(remote["status"]["conditions"]) == 1


def test_status_for_manager_clears_what_the_worker_dropped() -> None:
    local = api_job()
    local["status"] = {"active": 3, "ready": 3, "startTime": "2025-01-01T00:01:00Z"}
    remote = api_job()
    remote["status"] = {
        "succeeded": 3,
        "startTime": "2025-01-01T00:01:00Z",
        "completionTime": "2025-01-01T00:02:00Z",
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    synced = merge_patch(local, {"status": status_for_manager(remote)})
    assert synced["status"] == remote["status"]


def test_status_sync_waits_for_the_manager_job_to_start() -> None:
    local, remote = api_job(), api_job()
    remote["spec"]["suspend"] = False
    assert status_sync_action(local, remote) is StatusSync.RETRY_LATER
    local["spec"]["suspend"] = False
    assert status_sync_action(local, remote) is StatusSync.SYNC


def test_status_sync_between_suspended_jobs_only_for_eviction() -> None:
    local, remote = api_job(), api_job()
    assert status_sync_action(local, remote) is StatusSync.SKIP
    remote["status"] = {"conditions": [{"type": "Suspended", "status": "True"}]}
    assert status_sync_action(local, remote) is StatusSync.SYNC
    local["status"] = {"active": 2, "conditions": [{"type": "Suspended", "status": "True"}]}
    assert status_sync_action(local, remote) is StatusSync.SYNC
    local["status"] = {"conditions": [{"type": "Suspended", "status": "True"}]}
    assert status_sync_action(local, remote) is StatusSync.SKIP
