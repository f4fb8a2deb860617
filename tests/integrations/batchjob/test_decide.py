"""``decide`` for a queued Job: a Job being deleted gets nothing new (pure)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from multikueue.api.meta import ObjectMeta
from multikueue.api.resourceflavor import ResourceFlavor, ResourceFlavorSpec
from multikueue.api.workload import Workload
from multikueue.integrations.batchjob.decide import Step, decide
from multikueue.integrations.batchjob.job import build_workload

pytestmark = pytest.mark.unit

JobFactory = Callable[..., dict[str, Any]]
FLAVORS = {"on-demand": ResourceFlavor(metadata=ObjectMeta(name="on-demand"), spec=ResourceFlavorSpec())}


def deleting(job: dict[str, Any]) -> dict[str, Any]:
    job["metadata"]["deletionTimestamp"] = "2025-01-01T00:01:00Z"
    return job


def test_a_job_without_a_workload_gets_one(api_job: JobFactory) -> None:
    assert decide(api_job(), None, flavors={}).step == Step.CREATE_WORKLOAD


def test_a_job_being_deleted_gets_no_workload(api_job: JobFactory) -> None:
    """Seen on a cluster without a garbage collector: a deleted Job lingering with its finalizers got a new Workload."""
    assert decide(deleting(api_job()), None, flavors={}).step == Step.NONE


def test_a_job_being_deleted_keeps_its_changed_workload(api_job: JobFactory) -> None:
    job = api_job()
    workload: Workload = build_workload(job, priority=None, priority_class=None)
    job["spec"]["parallelism"] = 1
    assert decide(job, workload, flavors={}).step == Step.RECREATE_WORKLOAD
    assert decide(deleting(job), workload, flavors={}).step == Step.NONE


def test_a_job_being_deleted_is_not_started(api_job: JobFactory, reserve: Callable[..., Workload]) -> None:
    job = api_job()
    admitted = reserve(build_workload(job, priority=None, priority_class=None), admitted=True)
    assert decide(job, admitted, flavors=FLAVORS).step == Step.START
    assert decide(deleting(job), admitted, flavors=FLAVORS).step == Step.NONE
