"""``decide`` for a queued Job: a Job being deleted gets nothing new, and its own Workload is finished (pure)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from multikueue.api.meta import ObjectMeta
from multikueue.api.resourceflavor import ResourceFlavor, ResourceFlavorSpec
from multikueue.api.workload import Workload
from multikueue.integrations.batchjob.decide import JobAction, Step, decide
from multikueue.integrations.batchjob.job import build_workload
from multikueue.core.lifecycle import preempted
from multikueue.dev.standins import merged
from multikueue.api.meta import utcnow

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


def assert_finished_as_orphan(action: JobAction) -> None:
    assert action.step == Step.FINISH_WORKLOAD
    assert action.finished_condition is not None
    assert (action.finished_condition["type"], action.finished_condition["status"]) == ("Finished", "True")
    assert action.finished_condition["reason"] == "OwnerNotFound"
    assert action.finished_condition["message"] == "The workload's owner no longer exists"


def test_a_job_being_deleted_finishes_its_changed_workload_rather_than_replace_it(api_job: JobFactory) -> None:
    job = api_job()
    workload: Workload = build_workload(job, priority=None, priority_class=None)
    job["spec"]["parallelism"] = 1
    assert decide(job, workload, flavors={}).step == Step.RECREATE_WORKLOAD
    assert_finished_as_orphan(decide(deleting(job), workload, flavors={}))


def test_a_job_being_deleted_is_not_started_and_its_quota_is_released(
    api_job: JobFactory, reserve: Callable[..., Workload]
) -> None:
    """Upstream's FinishOrphanedWorkloads: a Job lingering on a finalizer does not hold its quota meanwhile."""
    job = api_job()
    admitted = reserve(build_workload(job, priority=None, priority_class=None), admitted=True)
    assert decide(job, admitted, flavors=FLAVORS).step == Step.START
    assert_finished_as_orphan(decide(deleting(job), admitted, flavors=FLAVORS))


def test_a_preempted_workload_of_a_job_being_deleted_is_finished(
    api_job: JobFactory, reserve: Callable[..., Workload]
) -> None:
    """Its release would wait for the Job's stop, which a Job going away no longer gets."""
    job = api_job()
    admitted = reserve(build_workload(job, priority=None, priority_class=None), admitted=True)
    victim = merged(admitted, preempted(admitted, "InClusterQueue", "Preempted to accommodate a workload", utcnow()))
    assert_finished_as_orphan(decide(deleting(job), victim, flavors=FLAVORS))


def test_a_job_being_deleted_leaves_a_workload_it_does_not_own(
    api_job: JobFactory, reserve: Callable[..., Workload]
) -> None:
    """A prebuilt Workload (no owner), and one owned by another object, are not finished (as upstream)."""
    job = api_job()
    admitted = reserve(build_workload(job, priority=None, priority_class=None), admitted=True)
    admitted.metadata.owner_references = None
    assert decide(deleting(job), admitted, flavors=FLAVORS).step == Step.NONE
    other = reserve(build_workload(api_job(), priority=None, priority_class=None), admitted=True)
    for ref in other.metadata.owner_references or ():
        ref.uid = "another-uid"
    assert decide(deleting(job), other, flavors=FLAVORS).step == Step.NONE


def test_a_job_being_deleted_leaves_a_workload_being_deleted(
    api_job: JobFactory, reserve: Callable[..., Workload]
) -> None:
    job = api_job()
    admitted = reserve(build_workload(job, priority=None, priority_class=None), admitted=True)
    admitted.metadata.deletion_timestamp = admitted.metadata.creation_timestamp or utcnow()
    assert decide(deleting(job), admitted, flavors=FLAVORS).step == Step.NONE


def test_a_preempted_workloads_job_is_stopped_then_its_quota_released(
    api_job: JobFactory, reserve: Callable[..., Workload]
) -> None:
    """Upstream's two-step eviction: the Job stops first, and its Workload's quota is released after that."""
    job = api_job()
    admitted = reserve(build_workload(job, priority=None, priority_class=None), admitted=True)
    start = decide(job, admitted, flavors=FLAVORS)
    assert start.step == Step.START
    running = {**job, "spec": {**job["spec"], **start.job_patches[0].patch["spec"]}}
    assert decide(running, admitted, flavors=FLAVORS).step == Step.NONE

    victim = merged(admitted, preempted(admitted, "InClusterQueue", "Preempted to accommodate a workload", utcnow()))
    stop = decide(running, victim, flavors=FLAVORS)
    assert stop.step == Step.STOP and stop.release, "suspend the Job, then release in the same reconcile"
    # A stop interrupted after the suspension: the template's restore, then the release.
    suspended = {**running, "spec": {**running["spec"], "suspend": True}}
    restore = decide(suspended, victim, flavors=FLAVORS)
    assert restore.step == Step.STOP and restore.release
    # The Job fully stopped but the release not written (a conflict): the release alone is left.
    assert decide(job, victim, flavors=FLAVORS).step == Step.RELEASE_WORKLOAD
