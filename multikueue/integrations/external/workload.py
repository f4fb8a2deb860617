"""Workloads for objects of external frameworks (pure decisions).

An ``externalFrameworks`` entry with ``workload`` asks this project to do for
its kind what a job integration does for Jobs, so no separate controller is
needed:

- on the manager, an object with a queue name gets a Workload (owner
  reference to the object, pod sets from the entry), and its Workload is
  finished when the entry's ``finished`` test says so (the status synced
  back from the worker makes it true);
- on a worker running this project, an object bound to a prebuilt Workload
  (label ``kueue.x-k8s.io/prebuilt-workload-name``) is released from its
  ``hold`` once that Workload is admitted, and its Workload is finished when
  ``finished`` says so.

The I/O lives in :mod:`multikueue.integrations.external.reconciler`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from multikueue.integrations.external.adapter import GenericAdapter
from multikueue.api import Workload
from multikueue.api.constants import Finalizers, Labels, WorkloadConditionType
from multikueue.api.meta import Condition
from multikueue.integrations.binding import bound_workload_name
from multikueue.integrations.orphans import finishes_with_its_owner, is_deleting, owner_gone_condition

#: Upstream's reasons on the ``Finished`` condition.
SUCCEEDED = "Succeeded"
FAILED = "Failed"


class ExternalStep(StrEnum):
    NONE = "none"
    CREATE_WORKLOAD = "create-workload"
    FINISH_WORKLOAD = "finish-workload"
    RELEASE_HOLD = "release-hold"


@dataclass(frozen=True)
class ExternalAction:
    step: ExternalStep
    workload: Workload | None = None
    patch: dict[str, Any] | None = None
    condition: Condition | None = None
    message: str = ""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def prebuilt_workload_name(obj: Mapping[str, Any]) -> str | None:
    return bound_workload_name(obj)


def workload_name(adapter: GenericAdapter, obj: Mapping[str, Any]) -> str:
    """The Workload bound to ``obj``: its prebuilt one, else the upstream-style name of its own."""
    return adapter.workload_name(obj)


def build_workload(adapter: GenericAdapter, obj: Mapping[str, Any], *, priority: int | None, priority_class: str | None) -> Workload:
    """The Workload for ``obj``: owned by it, queue and pod sets from the entry, the in-use finalizer."""
    meta = _meta(obj)
    uid = str(meta.get("uid") or "")
    body: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(adapter, obj),
            "namespace": meta.get("namespace"),
            "labels": {Labels.JOB_UID: uid} if uid and len(uid) <= 63 else {},
            "ownerReferences": [
                {
                    "apiVersion": adapter.api_version,
                    "kind": adapter.kind,
                    "name": meta.get("name"),
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "finalizers": [Finalizers.RESOURCE_IN_USE],
        },
        "spec": {
            "queueName": adapter.queue_name(obj),
            "podSets": adapter.pod_sets(obj),
            "priority": priority if priority is not None else 0,
            "active": True,
        },
    }
    if priority_class and priority is not None:
        body["spec"]["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": priority_class}
    return Workload.from_k8s(body)


def finished_condition(adapter: GenericAdapter, succeeded: bool, now: Any = None) -> Condition:
    condition = Condition(
        type=WorkloadConditionType.FINISHED,
        status="True",
        reason=SUCCEEDED if succeeded else FAILED,
        message=f"{adapter.kind} {'succeeded' if succeeded else 'failed'}",
    )
    return condition if now is None else condition.model_copy(update={"last_transition_time": now})


def decide(
    adapter: GenericAdapter,
    obj: Mapping[str, Any],
    wl: Workload | None,
    *,
    priority: int | None = None,
    now: Any = None,
) -> ExternalAction:
    """What to do for one object of an external framework, given its Workload (or None).

    Raises :class:`~multikueue.integrations.external.cel.CelEvaluationError` when an
    entry's expression cannot be evaluated on this object, also when the object is
    too deep or too large or an evaluation runs out of its budget (``bounded``);
    the caller reports it on the object. CPU-bound on hostile objects for up to
    the CEL budget per expression: the reconciler calls it in a thread.
    """
    if is_deleting(obj):
        if wl is not None and finishes_with_its_owner(wl, obj):  # its quota is given back at once
            return ExternalAction(
                ExternalStep.FINISH_WORKLOAD,
                condition=owner_gone_condition(at=now),
                message=f"{adapter.kind} is being deleted: its Workload is finished to release its quota",
            )
        return ExternalAction(ExternalStep.NONE)
    prebuilt = prebuilt_workload_name(obj)
    if wl is None:
        if prebuilt or not adapter.creates_workload or not adapter.queue_name(obj):
            return ExternalAction(ExternalStep.NONE)
        finished, _ = adapter.finished(obj)
        if finished:
            return ExternalAction(ExternalStep.NONE)
        workload = build_workload(adapter, obj, priority=priority, priority_class=adapter.priority_class(obj))
        return ExternalAction(ExternalStep.CREATE_WORKLOAD, workload=workload, message="created Workload")
    if wl.is_finished:
        return ExternalAction(ExternalStep.NONE)
    if prebuilt or adapter.creates_workload:
        finished, succeeded = adapter.finished(obj)
        if finished:
            return ExternalAction(
                ExternalStep.FINISH_WORKLOAD,
                condition=finished_condition(adapter, succeeded, now),
                message=f"{adapter.kind} finished",
            )
    if prebuilt and wl.is_admitted:
        patch = adapter.release_patch(obj)
        if patch is not None:
            return ExternalAction(ExternalStep.RELEASE_HOLD, patch=patch, message="Workload admitted: hold released")
    return ExternalAction(ExternalStep.NONE)
