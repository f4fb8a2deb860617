"""The Job admission webhook: suspend and hand to MultiKueue at creation, refuse bad input."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.api.constants import Labels, MultiKueue
from multikueue.integrations.batchjob import job as batchjob
from multikueue.integrations.batchjob.webhook import mutate_job, validate_job
from multikueue.dev.objects import apply_json_patch

pytestmark = pytest.mark.unit


def submitted_job(*, queue: str | None = "user-queue") -> dict[str, Any]:
    """A Job as a user submits it (what the mutating webhook sees, before defaults)."""
    labels = {"app": "sample"}
    if queue is not None:
        labels[Labels.QUEUE_NAME] = queue
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sample", "namespace": "team-a", "labels": labels},
        "spec": {
            "parallelism": 3,
            "template": {
                "spec": {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Never"},
            },
        },
    }


# --- mutating ----------------------------------------------------------------------


def test_queued_job_is_suspended() -> None:
    assert mutate_job(submitted_job(), queue_has_multikueue_check=False) == [
        {"op": "add", "path": "/spec/suspend", "value": True}
    ]


def test_queued_job_of_a_multikueue_queue_is_handed_to_multikueue() -> None:
    assert mutate_job(submitted_job(), queue_has_multikueue_check=True) == [
        {"op": "add", "path": "/spec/suspend", "value": True},
        {"op": "add", "path": "/spec/managedBy", "value": MultiKueue.MANAGED_BY},
    ]


def test_unknown_queue_gets_no_managed_by() -> None:
    assert mutate_job(submitted_job(), queue_has_multikueue_check=None) == [
        {"op": "add", "path": "/spec/suspend", "value": True}
    ]


def test_job_without_queue_is_untouched() -> None:
    assert mutate_job(submitted_job(queue=None), queue_has_multikueue_check=True) == []
    assert mutate_job(submitted_job(queue=""), queue_has_multikueue_check=True) == []


def test_manage_jobs_without_queue_name_suspends_them() -> None:
    job = submitted_job(queue=None)
    assert mutate_job(job, queue_has_multikueue_check=None, manage_jobs_without_queue_name=True) == [
        {"op": "add", "path": "/spec/suspend", "value": True}
    ]


def test_managed_by_another_controller_is_kept() -> None:
    job = submitted_job()
    job["spec"]["managedBy"] = "example.com/other"
    assert mutate_job(job, queue_has_multikueue_check=True) == [
        {"op": "add", "path": "/spec/suspend", "value": True}
    ]


def test_the_builtin_job_controller_is_replaced() -> None:
    job = submitted_job()
    job["spec"]["managedBy"] = batchjob.JOB_CONTROLLER_NAME
    assert {"op": "add", "path": "/spec/managedBy", "value": MultiKueue.MANAGED_BY} in mutate_job(
        job, queue_has_multikueue_check=True
    )


def test_already_suspended_and_managed_job_needs_nothing() -> None:
    # Without the webhook, a Job submitted this way works the same (DESIGN section 5).
    job = submitted_job()
    job["spec"]["suspend"] = True
    job["spec"]["managedBy"] = MultiKueue.MANAGED_BY
    assert mutate_job(job, queue_has_multikueue_check=True) == []


def test_suspend_false_is_overridden() -> None:
    job = submitted_job()
    job["spec"]["suspend"] = False
    patched = apply_json_patch(job, mutate_job(job, queue_has_multikueue_check=False))
    assert patched["spec"]["suspend"] is True


@pytest.mark.parametrize("multikueue", [True, False, None])
def test_mutation_is_idempotent(multikueue: bool | None) -> None:
    job = submitted_job()
    once = apply_json_patch(job, mutate_job(job, queue_has_multikueue_check=multikueue))
    assert mutate_job(once, queue_has_multikueue_check=multikueue) == []
    assert once["spec"]["suspend"] is True
    assert (once["spec"].get("managedBy") == MultiKueue.MANAGED_BY) is (multikueue is True)


def test_job_without_spec_gets_one_first() -> None:
    job = {"metadata": {"name": "x", "labels": {Labels.QUEUE_NAME: "q"}}}
    operations = mutate_job(job, queue_has_multikueue_check=False)
    assert operations[0] == {"op": "add", "path": "/spec", "value": {}}
    assert apply_json_patch(job, operations)["spec"] == {"suspend": True}


# --- validating --------------------------------------------------------------------


def test_valid_job_passes() -> None:
    assert validate_job(submitted_job()) == []
    assert validate_job(submitted_job(queue=None)) == []


def test_queue_name_must_be_an_object_name() -> None:
    [error] = validate_job(submitted_job(queue="User_Queue"))
    assert error.startswith('metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "User_Queue": ')
    assert "lowercase RFC 1123 subdomain" in error


def test_prebuilt_workload_name_must_be_an_object_name() -> None:
    job = submitted_job()
    job["metadata"]["labels"][Labels.PREBUILT_WORKLOAD_NAME] = "-bad"
    [error] = validate_job(job)
    assert error.startswith("metadata.labels[kueue.x-k8s.io/prebuilt-workload-name]: Invalid value: ")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("600", None),
        ("0", 'metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: 0: should be greater than 0'),
        (
            "1m",
            'metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: "1m": '
            'strconv.Atoi: parsing "1m": invalid syntax',
        ),
    ],
)
def test_max_exec_time(value: str, expected: str | None) -> None:
    job = submitted_job()
    job["metadata"]["labels"][Labels.MAX_EXEC_TIME_SECONDS] = value
    assert validate_job(job) == ([] if expected is None else [expected])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2", None),
        ("3", "Invalid value: 3: should be between 0 and 2"),
        ("0", "Invalid value: 0: should be between 0 and 2"),
        ("x", 'Invalid value: "x": strconv.Atoi: parsing "x": invalid syntax'),
    ],
)
def test_min_parallelism(value: str, expected: str | None) -> None:
    job = submitted_job()
    job["metadata"]["annotations"] = {batchjob.MIN_PARALLELISM_ANNOTATION: value}
    errors = validate_job(job)
    if expected is None:
        assert errors == []
    else:
        assert errors == [f"metadata.annotations[{batchjob.MIN_PARALLELISM_ANNOTATION}]: {expected}"]


def test_completions_equal_parallelism_needs_an_indexed_job_with_equal_counts() -> None:
    key = batchjob.COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION
    job = submitted_job()
    job["metadata"]["annotations"] = {key: "true"}
    errors = validate_job(job)
    assert errors == [
        f'metadata.annotations[{key}]: Invalid value: "true": should not be enabled for NonIndexed jobs',
        f'spec.completions: Invalid value: "null": should be equal to parallelism when {key} is annotation is true',
    ]
    job["spec"]["completionMode"] = "Indexed"
    job["spec"]["completions"] = 3
    assert validate_job(job) == []
    job["metadata"]["annotations"] = {key: "maybe"}
    assert validate_job(job) == [
        f'metadata.annotations[{key}]: Invalid value: "maybe": strconv.ParseBool: parsing "maybe": invalid syntax'
    ]
    job["metadata"]["annotations"] = {key: "false"}
    assert validate_job(job) == []
