"""manageJobsWithoutQueueName, the pure parts: which Jobs are managed, the webhook scope, the Workload."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.integrations.batchjob.decide import Step, decide, is_queued
from multikueue.integrations.batchjob.webhook import WEBHOOKS, mutate_job, webhooks_for

pytestmark = pytest.mark.unit


def job(labels: dict[str, str] | None = None, suspend: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u1", "labels": labels or {}},
        "spec": {
            "parallelism": 1,
            "suspend": suspend,
            "template": {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}},
        },
    }


def test_a_job_without_queue_name_is_managed_only_with_the_setting() -> None:
    assert not is_queued(job())
    assert is_queued(job(), without_queue_name=True)
    assert is_queued(job({"kueue.x-k8s.io/queue-name": "q"}))


def test_its_workload_names_no_queue() -> None:
    assert decide(job(), None, flavors={}).step is Step.NONE
    action = decide(job(suspend=True), None, flavors={}, without_queue_name=True)
    assert action.step is Step.CREATE_WORKLOAD
    assert action.workload is not None and not action.workload.spec.queue_name


def test_the_webhook_suspends_it_and_loses_its_queue_name_selector() -> None:
    assert mutate_job(job(), queue_has_multikueue_check=None) == []
    assert mutate_job(job(), queue_has_multikueue_check=None, manage_jobs_without_queue_name=True) == [
        {"op": "add", "path": "/spec/suspend", "value": True}
    ]
    assert webhooks_for(False) is WEBHOOKS
    [mutating] = webhooks_for(True)["mutating"]
    assert "objectSelector" not in mutating
    assert webhooks_for(True)["validating"] == WEBHOOKS["validating"]
    assert "objectSelector" in WEBHOOKS["mutating"][0], "the shared table is not changed"
