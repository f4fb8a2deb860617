"""The copy MultiKueue makes of a manager's Job on a worker, and the worker Job's status brought back."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from multikueue.api.constants import Labels, MultiKueue
from multikueue.integrations.batchjob import job as batchjob
from multikueue.integrations.batchjob.job import JOB_STATUS_FIELDS
from multikueue.integrations.batchjob.remote import StatusSync, remote_copy, status_for_manager, status_sync_action
from multikueue.integrations.patch import apply_merge_patch

pytestmark = pytest.mark.unit

#: The builder the ``api_job`` fixture (conftest.py) returns, and ``manager_job``.
JobFactory = Callable[..., dict[str, Any]]


@pytest.fixture
def manager_job(api_job: JobFactory) -> JobFactory:
    """``manager_job()``: an ``api_job()`` handed to MultiKueue (``spec.managedBy``)."""
    return lambda: api_job(managed_by=MultiKueue.MANAGED_BY)


# --- MultiKueue: the worker copy ------------------------------------------------------


def test_remote_copy_of_an_apiserver_job(manager_job: JobFactory) -> None:
    job = manager_job()
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
            # As the manager has it, but for the generated selector and managedBy.
            **{key: value for key, value in job["spec"].items() if key not in ("selector", "managedBy", "template")},
            "template": {
                "metadata": {"creationTimestamp": None, "annotations": {"note": "keep"}, "labels": {"app": "sample"}},
                "spec": job["spec"]["template"]["spec"],
            },
        },
    }


def test_remote_copy_is_always_suspended_for_the_worker_kueue_to_start(manager_job: JobFactory) -> None:
    """Seen in the fault suite: a copy made while the manager's Job still ran (a Retry re-dispatching
    before the manager's Job was suspended again) was created running, outside the worker's admission."""
    job = manager_job()
    job["spec"]["suspend"] = False
    assert remote_copy(job, origin="m", workload_name="wl")["spec"]["suspend"] is True


def test_remote_copy_drops_the_managers_stopping_annotation(manager_job: JobFactory) -> None:
    """Seen in the fault suite: a Retry re-dispatched while the manager was stopping its Job; the copy
    carried ``kueue.x-k8s.io/stopping`` and the worker's Kueue, waiting for that stop, never started it."""
    job = manager_job()
    job["metadata"]["annotations"] = {"kueue.x-k8s.io/stopping": "true", "note": "keep"}
    job["spec"]["suspend"] = True
    worker_job = remote_copy(job, origin="m", workload_name="wl")
    assert worker_job["metadata"]["annotations"] == {"note": "keep"}
    assert batchjob.is_suspended(worker_job)


def test_remote_copy_keeps_a_manual_selector(manager_job: JobFactory) -> None:
    job = manager_job()
    job["spec"]["manualSelector"] = True
    job["spec"]["selector"] = {"matchLabels": {"app": "sample"}}
    remote = remote_copy(job, origin="m", workload_name="wl")
    assert remote["spec"]["selector"] == {"matchLabels": {"app": "sample"}}
    assert remote["spec"]["template"]["metadata"]["labels"] == job["spec"]["template"]["metadata"]["labels"]
    assert "managedBy" not in remote["spec"]


def test_remote_copy_puts_a_long_workload_name_in_an_annotation(manager_job: JobFactory) -> None:
    name = "job-" + "a" * 100 + "-abcde"
    remote = remote_copy(manager_job(), origin="m", workload_name=name)
    assert Labels.PREBUILT_WORKLOAD_NAME not in remote["metadata"]["labels"]
    assert remote["metadata"]["annotations"][batchjob.PREBUILT_WORKLOAD_ANNOTATION] == name
    assert batchjob.prebuilt_workload_name(remote) == name


def test_remote_copy_is_bound_to_its_workload(manager_job: JobFactory) -> None:
    remote = remote_copy(manager_job(), origin="m", workload_name="job-sample-abcde")
    assert batchjob.prebuilt_workload_name(remote) == "job-sample-abcde"
    assert batchjob.queue_name(remote) == "user-queue"


# --- MultiKueue: status back to the manager --------------------------------------------


def test_status_for_manager_mirrors_every_field(manager_job: JobFactory) -> None:
    remote = manager_job()
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


def test_status_for_manager_clears_what_the_worker_dropped(manager_job: JobFactory) -> None:
    local = manager_job()
    local["status"] = {"active": 3, "ready": 3, "startTime": "2025-01-01T00:01:00Z"}
    remote = manager_job()
    remote["status"] = {
        "succeeded": 3,
        "startTime": "2025-01-01T00:01:00Z",
        "completionTime": "2025-01-01T00:02:00Z",
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    synced = apply_merge_patch(local, {"status": status_for_manager(remote)})
    assert synced["status"] == remote["status"]


def test_status_sync_waits_for_the_manager_job_to_start(manager_job: JobFactory) -> None:
    local, remote = manager_job(), manager_job()
    remote["spec"]["suspend"] = False
    assert status_sync_action(local, remote) is StatusSync.RETRY_LATER
    local["spec"]["suspend"] = False
    assert status_sync_action(local, remote) is StatusSync.SYNC


def test_status_sync_between_suspended_jobs_only_for_eviction(manager_job: JobFactory) -> None:
    local, remote = manager_job(), manager_job()
    assert status_sync_action(local, remote) is StatusSync.SKIP
    remote["status"] = {"conditions": [{"type": "Suspended", "status": "True"}]}
    assert status_sync_action(local, remote) is StatusSync.SYNC
    local["status"] = {"active": 2, "conditions": [{"type": "Suspended", "status": "True"}]}
    assert status_sync_action(local, remote) is StatusSync.SYNC
    local["status"] = {"conditions": [{"type": "Suspended", "status": "True"}]}
    assert status_sync_action(local, remote) is StatusSync.SKIP
