"""Updates the Job webhook refuses: what a running Job was admitted with cannot change."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from multikueue.api.constants import Labels
from multikueue.integrations.batchjob import job as batchjob
from multikueue.integrations.batchjob.webhook import WEBHOOKS, validate_job_update

pytestmark = pytest.mark.unit

QUEUE = f"metadata.labels[{Labels.QUEUE_NAME}]"


def stored_job(*, suspend: bool, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A queued Job as stored: in ``user-queue``, 2 pods, suspended or running."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "sample",
            "namespace": "team-a",
            "labels": {Labels.QUEUE_NAME: "user-queue", **(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": {"parallelism": 2, "completions": 2, "suspend": suspend, "template": {"spec": {"containers": []}}},
    }


def relabelled(job: dict[str, Any], key: str, value: str | None) -> dict[str, Any]:
    new = copy.deepcopy(job)
    if value is None:
        new["metadata"]["labels"].pop(key, None)
    else:
        new["metadata"]["labels"][key] = value
    return new


def test_queue_name_of_a_running_job_is_immutable() -> None:
    old = stored_job(suspend=False)
    assert validate_job_update(old, relabelled(old, Labels.QUEUE_NAME, "other")) == [
        f'{QUEUE}: Invalid value: "other": field is immutable'
    ]
    assert validate_job_update(old, relabelled(old, Labels.QUEUE_NAME, None)) == [
        f'{QUEUE}: Invalid value: "": field is immutable'
    ]


def test_queue_name_of_a_suspended_job_may_change() -> None:
    old = stored_job(suspend=True)
    assert validate_job_update(old, relabelled(old, Labels.QUEUE_NAME, "other")) == []


def test_unsuspending_and_moving_in_one_update_is_refused() -> None:
    # Upstream looks at the new Job's suspend: a Job started by this very update keeps its queue.
    old = stored_job(suspend=True)
    new = relabelled(old, Labels.QUEUE_NAME, "other")
    new["spec"]["suspend"] = False
    assert validate_job_update(old, new) == [f'{QUEUE}: Invalid value: "other": field is immutable']


def test_other_changes_of_a_running_job_pass() -> None:
    old = stored_job(suspend=False)
    new = relabelled(old, "team", "a")
    new["metadata"]["finalizers"] = ["example.com/hold"]
    assert validate_job_update(old, new) == []


def test_prebuilt_workload_name_of_a_running_job_is_immutable() -> None:
    key = Labels.PREBUILT_WORKLOAD_NAME
    old = stored_job(suspend=False, labels={key: "wl-a"})
    assert validate_job_update(old, relabelled(old, key, "wl-b")) == [
        f'metadata.labels[{key}]: Invalid value: "wl-b": field is immutable'
    ]
    suspended = stored_job(suspend=True, labels={key: "wl-a"})
    assert validate_job_update(suspended, relabelled(suspended, key, "wl-b")) == []


def test_max_exec_time_changes_only_while_suspended_before_and_after() -> None:
    key = Labels.MAX_EXEC_TIME_SECONDS
    suspended = stored_job(suspend=True, labels={key: "60"})
    assert validate_job_update(suspended, relabelled(suspended, key, "120")) == []
    started = relabelled(suspended, key, "120")
    started["spec"]["suspend"] = False
    assert validate_job_update(suspended, started) == [f'metadata.labels[{key}]: Invalid value: "120": field is immutable']


def test_creation_rules_apply_to_the_new_job() -> None:
    old = stored_job(suspend=True)
    assert validate_job_update(old, relabelled(old, Labels.QUEUE_NAME, "Not_A_Queue"))[0].startswith(
        f'{QUEUE}: Invalid value: "Not_A_Queue": a lowercase RFC 1123 subdomain'
    )


def test_parallelism_of_a_running_partially_admitted_job_is_fixed() -> None:
    old = stored_job(suspend=False, annotations={batchjob.MIN_PARALLELISM_ANNOTATION: "1"})
    new = copy.deepcopy(old)
    new["spec"]["parallelism"] = 1
    assert validate_job_update(old, new) == [
        "spec.parallelism: Forbidden: cannot change when partial admission is enabled and the job is not suspended"
    ]
    old["spec"]["suspend"] = True
    assert validate_job_update(old, new) == []


def test_webhooks_fail_closed_and_are_scoped_to_kueue_jobs() -> None:
    [mutating] = WEBHOOKS["mutating"]
    [validating] = WEBHOOKS["validating"]
    assert mutating["failurePolicy"] == validating["failurePolicy"] == "Fail"
    assert mutating["objectSelector"] == {"matchExpressions": [{"key": Labels.QUEUE_NAME, "operator": "Exists"}]}
    assert [rule["operations"] for rule in mutating["rules"]] == [["CREATE"]]
    expressions = {c["name"]: c["expression"] for c in validating["matchConditions"]}
    for key in (Labels.QUEUE_NAME, Labels.PREBUILT_WORKLOAD_NAME, batchjob.MIN_PARALLELISM_ANNOTATION):
        assert f"'{key}'" in expressions["kueue-job"]
    assert "object.metadata.finalizers" not in expressions["create-or-validated-fields-changed"]
