"""What to do next for one queued ``batch/v1`` Job, given its Workload (pure).

The order of the checks is upstream's job reconciler in miniature: a
finished Job finishes its Workload; a Job without a Workload gets one (unless
it names a prebuilt one, which is then awaited); a Workload that no longer
matches its Job is replaced while it holds no quota; an admitted Workload
starts its suspended Job; a Job running without an admitted Workload is
stopped; a preempted Workload (evicted, still holding quota) has its Job
stopped and then its quota released (upstream's two-step eviction: the
preemptor is not admitted while the victim's pods still run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from multikueue.api.constants import WorkloadConditionType
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import PriorityClassRef, Workload
from multikueue.core.lifecycle import awaits_release, holds_quota
from multikueue.integrations.batchjob import job as batchjob
from multikueue.integrations.batchjob.startstop import PatchStep, start_patch, stop_steps
from multikueue.integrations.orphans import finishes_with_its_owner, is_deleting, owner_gone_condition


class Step(StrEnum):
    NONE = "none"
    CREATE_WORKLOAD = "create-workload"
    RECREATE_WORKLOAD = "recreate-workload"
    WAIT_FOR_PREBUILT = "wait-for-prebuilt-workload"
    START = "start"
    STOP = "stop"
    FINISH_WORKLOAD = "finish-workload"
    #: The Job is stopped: give back its evicted Workload's quota (:func:`multikueue.core.lifecycle.released`).
    RELEASE_WORKLOAD = "release-workload"


@dataclass(frozen=True)
class JobAction:
    step: Step
    #: The Workload to create (CREATE_WORKLOAD).
    workload: Workload | None = None
    #: Writes to the Job, in order (START, STOP).
    job_patches: list[PatchStep] = field(default_factory=list)
    #: The Workload ``Finished`` condition (FINISH_WORKLOAD).
    finished_condition: dict[str, Any] | None = None
    #: Why, for events and logs.
    message: str = ""
    #: STOP of an evicted Workload's Job: release the Workload's quota once the Job's writes are done.
    release: bool = False


def workload_name_for(job: Mapping[str, Any]) -> str:
    """The Workload a Job is bound to: its prebuilt one, or the one named after it."""
    return batchjob.prebuilt_workload_name(job) or batchjob.workload_name(job)


def is_queued(job: Mapping[str, Any], *, without_queue_name: bool = False) -> bool:
    """Whether the Job integration manages ``job``.

    A Job with a queue name or bound to a prebuilt Workload; with
    ``without_queue_name`` (upstream's ``manageJobsWithoutQueueName``) every
    Job, whose Workload then names no queue and waits as inadmissible
    ("LocalQueue  doesn't exist") until the Job gets one, as upstream's does.
    The namespace selector is the reconciler's check.
    """
    if without_queue_name:
        return True
    return batchjob.queue_name(job) is not None or batchjob.prebuilt_workload_name(job) is not None


def decide(
    job: Mapping[str, Any],
    workload: Workload | None,
    *,
    flavors: Mapping[str, ResourceFlavor],
    priority: int | None = None,
    priority_class: PriorityClassRef | None = None,
    without_queue_name: bool = False,
) -> JobAction:
    if not is_queued(job, without_queue_name=without_queue_name):
        return JobAction(Step.NONE)
    prebuilt = batchjob.prebuilt_workload_name(job)
    finished = batchjob.is_finished(job)
    # A Job being deleted gets no new Workload, nor a replaced or admitted one (as upstream's
    # reconciler): it would only hold quota, or be queued, for a Job that is going away.
    deleting = is_deleting(job)

    if workload is None:
        if finished is not None or deleting:
            return JobAction(Step.NONE)
        if prebuilt:
            return JobAction(Step.WAIT_FOR_PREBUILT, message=f"waiting for the prebuilt Workload {prebuilt}")
        return JobAction(
            Step.CREATE_WORKLOAD,
            workload=batchjob.build_workload(job, priority=priority, priority_class=priority_class),
            message="created Workload",
        )

    if finished is not None:
        if not workload.is_condition_true(WorkloadConditionType.FINISHED):
            return JobAction(
                Step.FINISH_WORKLOAD,
                finished_condition=batchjob.finished_condition(job),
                message=finished.message,
            )
        return JobAction(Step.NONE)

    if workload.is_condition_true(WorkloadConditionType.FINISHED):
        # Finished elsewhere (e.g. on a MultiKueue worker): its final status arrives by sync, never stop it.
        return JobAction(Step.NONE)

    if deleting:
        # The quota of a Job going away is given back at once (integrations/orphans.py).
        if finishes_with_its_owner(workload, job):
            return JobAction(
                Step.FINISH_WORKLOAD,
                finished_condition=owner_gone_condition().to_dict(),
                message="the Job is being deleted: its Workload is finished to release its quota",
            )
        return JobAction(Step.NONE)

    if not prebuilt and not holds_quota(workload) and not batchjob.equivalent(job, workload):
        return JobAction(Step.RECREATE_WORKLOAD, message="the Job changed; its Workload is replaced")

    evicted = awaits_release(workload)
    admitted = workload.is_condition_true(WorkloadConditionType.ADMITTED) and holds_quota(workload) and not evicted
    if admitted and batchjob.is_suspended(job):
        patch = start_patch(job, workload, flavors)
        return JobAction(Step.START, job_patches=[PatchStep("", patch)], message="admitted: starting the Job")
    if not admitted and not batchjob.is_suspended(job):
        steps = stop_steps(job, workload)
        if steps:
            why = "evicted: suspending the Job" if evicted else "not admitted: suspending the Job"
            return JobAction(Step.STOP, job_patches=steps, message=why, release=evicted)
    if not admitted and batchjob.is_suspended(job):
        steps = stop_steps(job, workload)  # finish an interrupted stop (template restore)
        if steps:
            return JobAction(Step.STOP, job_patches=steps, message="restoring the Job's template", release=evicted)
    if evicted:
        return JobAction(Step.RELEASE_WORKLOAD, message="evicted and the Job is stopped: releasing its quota")
    return JobAction(Step.NONE)
