"""The batch/v1 Job as Kueue sees it: queue, pod sets, Workload, equivalence, finished state."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from multikueue.api.constants import Labels, MultiKueue
from multikueue.api.workload import PriorityClassRef, Workload
from multikueue.integrations.batchjob import job as batchjob
from multikueue.integrations.batchjob.job import (
    build_workload,
    equivalent,
    finished_condition,
    is_finished,
    is_suspended,
    pod_sets,
    prebuilt_workload_name,
    queue_name,
)

pytestmark = pytest.mark.unit

#: The builder the ``api_job`` fixture (conftest.py) returns.
JobFactory = Callable[..., dict[str, Any]]


# --- reading the Job -----------------------------------------------------------


def test_queue_name_comes_from_the_label(api_job: JobFactory) -> None:
    assert queue_name(api_job()) == "user-queue"


def test_queue_name_annotation_is_not_honoured(api_job: JobFactory) -> None:
    # Upstream removed the deprecated annotation with v1beta2 (kubernetes-sigs/kueue#7271).
    job = api_job()
    del job["metadata"]["labels"][Labels.QUEUE_NAME]
    job["metadata"]["annotations"][Labels.QUEUE_NAME] = "user-queue"
    assert queue_name(job) is None


def test_no_labels_no_queue() -> None:
    assert queue_name({"metadata": {"name": "x"}}) is None


def test_prebuilt_workload_name_from_label_or_annotation(api_job: JobFactory) -> None:
    job = api_job()
    assert prebuilt_workload_name(job) is None
    job["metadata"]["labels"][Labels.PREBUILT_WORKLOAD_NAME] = "job-sample-abcde"
    assert prebuilt_workload_name(job) == "job-sample-abcde"
    del job["metadata"]["labels"][Labels.PREBUILT_WORKLOAD_NAME]
    job["metadata"]["annotations"][batchjob.PREBUILT_WORKLOAD_ANNOTATION] = "x" * 100
    assert prebuilt_workload_name(job) == "x" * 100


def test_suspended_unless_being_stopped(api_job: JobFactory) -> None:
    job = api_job()
    assert is_suspended(job)
    job["metadata"]["annotations"][batchjob.STOPPING_ANNOTATION] = "true"
    assert not is_suspended(job)
    job = api_job()
    job["spec"]["suspend"] = False
    assert not is_suspended(job)


# --- pod sets ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parallelism", "completions", "count"),
    [
        (None, None, 1),  # parallelism defaults to 1
        (3, None, 3),
        (5, 2, 2),  # capped by completions
        (2, 10, 2),
        (4, 0, 0),
    ],
)
def test_pod_set_count(parallelism: int | None, completions: int | None, count: int, api_job: JobFactory) -> None:
    job = api_job()
    job["spec"].pop("parallelism")
    job["spec"].pop("completions")
    if parallelism is not None:
        job["spec"]["parallelism"] = parallelism
    if completions is not None:
        job["spec"]["completions"] = completions
    [pod_set] = pod_sets(job)
    assert pod_set.name == "main"
    assert pod_set.count == count


def test_min_parallelism_annotation_sets_min_count(api_job: JobFactory) -> None:
    job = api_job()
    assert pod_sets(job)[0].min_count is None
    job["metadata"]["annotations"][batchjob.MIN_PARALLELISM_ANNOTATION] = "2"
    assert pod_sets(job)[0].min_count == 2
    job["metadata"]["annotations"][batchjob.MIN_PARALLELISM_ANNOTATION] = "two"
    assert pod_sets(job)[0].min_count is None


def test_template_keeps_metadata_but_not_the_controller_labels(api_job: JobFactory) -> None:
    job = api_job()
    template = pod_sets(job)[0].template
    assert template["metadata"]["labels"] == {"app": "sample"}
    assert template["metadata"]["annotations"] == {"note": "keep"}
    assert template["spec"]["nodeSelector"] == {"disk": "ssd"}
    assert template["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1", "memory": "200Mi"}}
    # The Job itself is untouched.
    assert "job-name" in job["spec"]["template"]["metadata"]["labels"]


def test_duplicate_env_vars_keep_the_last_value(api_job: JobFactory) -> None:
    job = api_job()
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
        {"name": "A", "value": "3"},
    ]
    env = pod_sets(job)[0].template["spec"]["containers"][0]["env"]
    assert env == [{"name": "A", "value": "3"}, {"name": "B", "value": "2"}]


# --- the Workload ----------------------------------------------------------------


def test_build_workload_fields(api_job: JobFactory, job_uid: str) -> None:
    wl = build_workload(api_job(), priority=None, priority_class=None)
    body = wl.to_k8s()
    assert body["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert body["metadata"]["name"] == "job-sample-" + body["metadata"]["name"][-5:]
    assert wl.name == batchjob.workload_name(api_job())
    assert body["metadata"]["namespace"] == "team-a"
    assert body["metadata"]["labels"] == {Labels.JOB_UID: job_uid}
    assert body["metadata"]["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]
    assert body["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "sample",
            "uid": job_uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    spec = body["spec"]
    assert spec["queueName"] == "user-queue"
    assert spec["active"] is True
    assert spec["priority"] == 0
    assert "priorityClassRef" not in spec
    assert [ps["name"] for ps in spec["podSets"]] == ["main"]
    assert spec["podSets"][0]["count"] == 3
    # What the API server gets back parses into the same model.
    assert Workload.from_k8s(body) == wl


def test_build_workload_priority_class(api_job: JobFactory) -> None:
    ref = PriorityClassRef(group="kueue.x-k8s.io", kind="WorkloadPriorityClass", name="high")
    spec = build_workload(api_job(), priority=1000, priority_class=ref).to_k8s()["spec"]
    assert spec["priority"] == 1000
    assert spec["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}


def test_build_workload_copies_configured_labels_and_provreq_annotations(api_job: JobFactory, job_uid: str) -> None:
    job = api_job()
    job["metadata"]["labels"][Labels.MAX_EXEC_TIME_SECONDS] = "600"
    job["metadata"]["annotations"]["provreq.kueue.x-k8s.io/maxRunDurationSeconds"] = "60"
    wl = build_workload(job, priority=None, priority_class=None, label_keys_to_copy=["app", "missing"])
    assert wl.metadata.labels == {"app": "sample", Labels.JOB_UID: job_uid}
    assert wl.metadata.annotations == {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "60"}
    assert wl.spec.maximum_execution_time_seconds == 600


def test_build_workload_for_multikueue_needs_managed_by(api_job: JobFactory) -> None:
    job = api_job()
    with pytest.raises(ValueError, match="managedBy"):
        build_workload(job, priority=None, priority_class=None, managed_by_multikueue=True)
    job["spec"]["managedBy"] = MultiKueue.MANAGED_BY
    wl = build_workload(job, priority=None, priority_class=None, managed_by_multikueue=True)
    assert wl == build_workload(job, priority=None, priority_class=None)


def test_build_workload_needs_a_created_job(api_job: JobFactory) -> None:
    job = api_job()
    del job["metadata"]["uid"]
    with pytest.raises(ValueError, match="uid"):
        build_workload(job, priority=None, priority_class=None)


# --- equivalence -------------------------------------------------------------------


@pytest.fixture
def workload(api_job: JobFactory) -> Callable[[], Workload]:
    """``workload()``: the Workload of a new ``api_job()``."""
    return lambda: build_workload(api_job(), priority=None, priority_class=None)


def test_fresh_workload_is_equivalent(api_job: JobFactory, workload: Callable[[], Workload]) -> None:
    assert equivalent(api_job(), workload())
    assert equivalent(api_job(), workload().to_k8s())


def test_changed_parallelism_is_not_equivalent(api_job: JobFactory, workload: Callable[[], Workload]) -> None:
    job = api_job()
    job["spec"]["parallelism"] = 2
    assert not equivalent(job, workload())


def test_changed_requests_are_not_equivalent_but_equal_quantities_are(api_job: JobFactory, workload: Callable[[], Workload]) -> None:
    job = api_job()
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    assert not equivalent(job, workload())
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1000m"
    assert equivalent(job, workload())


def test_other_container_fields_do_not_matter(api_job: JobFactory, workload: Callable[[], Workload]) -> None:
    job = api_job()
    job["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2"
    assert equivalent(job, workload())


def test_tolerations_matter_until_the_job_runs(api_job: JobFactory, workload: Callable[[], Workload], reserve: Callable[..., Workload]) -> None:
    job = api_job()
    job["spec"]["template"]["spec"]["tolerations"].append({"key": "spot", "operator": "Exists"})
    assert not equivalent(job, workload())
    job["spec"]["suspend"] = False
    assert equivalent(job, reserve(workload()))


def test_partially_admitted_count_is_equivalent(api_job: JobFactory, reserve: Callable[..., Workload]) -> None:
    job = api_job()
    job["metadata"]["annotations"][batchjob.MIN_PARALLELISM_ANNOTATION] = "1"
    wl = reserve(build_workload(job, priority=None, priority_class=None), count=2)
    job["spec"]["parallelism"] = 2
    job["spec"]["suspend"] = False
    assert equivalent(job, wl)
    job["spec"]["parallelism"] = 1
    assert not equivalent(job, wl)


def test_workload_of_another_job_is_not_equivalent(api_job: JobFactory, workload: Callable[[], Workload]) -> None:
    job = api_job()
    job["metadata"]["name"] = "other"
    assert not equivalent(job, workload())


def test_changed_max_exec_time_is_not_equivalent(api_job: JobFactory, workload: Callable[[], Workload]) -> None:
    job = api_job()
    job["metadata"]["labels"][Labels.MAX_EXEC_TIME_SECONDS] = "30"
    assert not equivalent(job, workload())


# --- finished --------------------------------------------------------------------


@pytest.fixture
def with_conditions(api_job: JobFactory) -> Callable[..., dict[str, Any]]:
    """``with_conditions(*conditions)``: an ``api_job()`` whose status holds ``conditions``."""

    def build(*conditions: dict[str, str]) -> dict[str, Any]:
        job = api_job()
        job["status"] = {"conditions": [dict(c) for c in conditions]}
        return job

    return build


COMPLETE = {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods"}
FAILED = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}
SUCCESS_CRITERIA_MET = {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods"}
FAILURE_TARGET = {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}


def test_complete_job_succeeded(with_conditions: Callable[..., dict[str, Any]]) -> None:
    state = is_finished(with_conditions(SUCCESS_CRITERIA_MET, COMPLETE))
    assert state is not None
    assert state.succeeded and state.reason == "Succeeded"
    assert state.message == "Reached expected number of succeeded pods"


def test_failed_job_failed(with_conditions: Callable[..., dict[str, Any]]) -> None:
    state = is_finished(with_conditions(FAILURE_TARGET, FAILED))
    assert state is not None
    assert not state.succeeded and state.reason == "Failed"
    assert state.message == "Job has reached the specified backoff limit"


def test_running_job_is_not_finished(api_job: JobFactory, with_conditions: Callable[..., dict[str, Any]]) -> None:
    job = api_job()
    job["status"] = {"active": 3, "startTime": "2025-01-01T00:00:10Z"}
    assert is_finished(job) is None
    assert finished_condition(job) is None
    assert is_finished(with_conditions({"type": "Suspended", "status": "True"})) is None
    assert is_finished(with_conditions({**COMPLETE, "status": "False"})) is None


def test_interim_conditions_finish_only_when_asked(with_conditions: Callable[..., dict[str, Any]]) -> None:
    # Pods may still be terminating: upstream waits for Complete/Failed before releasing quota.
    assert is_finished(with_conditions(FAILURE_TARGET)) is None
    assert is_finished(with_conditions(SUCCESS_CRITERIA_MET)) is None
    failed = is_finished(with_conditions(FAILURE_TARGET), include_interim=True)
    succeeded = is_finished(with_conditions(SUCCESS_CRITERIA_MET), include_interim=True)
    assert failed is not None and failed.reason == "Failed"
    assert succeeded is not None and succeeded.reason == "Succeeded"


def test_finished_condition_for_the_workload(with_conditions: Callable[..., dict[str, Any]]) -> None:
    at = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert finished_condition(with_conditions(COMPLETE), at=at) == {
        "type": "Finished",
        "status": "True",
        "reason": "Succeeded",
        "message": "Reached expected number of succeeded pods",
        "lastTransitionTime": "2025-01-02T03:04:05Z",
    }
    failed = finished_condition(with_conditions(FAILED), at=at)
    assert failed is not None
    assert (failed["reason"], failed["message"]) == ("Failed", "Job has reached the specified backoff limit")


def test_finished_condition_message_is_truncated_to_the_api_limit(with_conditions: Callable[..., dict[str, Any]]) -> None:
    condition = finished_condition(with_conditions({**FAILED, "message": "x" * 40000}))
    assert condition is not None
    assert len(condition["message"]) == 32 * 1024
    assert condition["message"].endswith(" ...")


def test_input_job_is_never_modified(api_job: JobFactory, workload: Callable[[], Workload]) -> None:
    job = api_job()
    before = copy.deepcopy(job)
    build_workload(job, priority=None, priority_class=None)
    equivalent(job, workload())
    finished_condition(job)
    assert job == before
