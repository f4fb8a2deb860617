"""The Workload of a job that is being deleted gives its quota back at once (shared by every kind).

Upstream's ``FinishOrphanedWorkloads`` (beta, on by default since v0.18): once
a job has a ``deletionTimestamp``, the Workload it controls is finished with
reason ``OwnerNotFound``. Without it the quota stayed held for as long as any
finalizer kept the job, since the garbage collector removes a dependent only
after its owner is gone. A Workload the job does not control (a prebuilt one
has no owner) and one already being deleted are left alone, as upstream's.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from multikueue.api.constants import ConditionStatus, WorkloadConditionType, WorkloadReason
from multikueue.api.meta import Condition, now
from multikueue.api.workload import Workload

OWNER_GONE_MESSAGE = "The workload's owner no longer exists"


def is_deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def finishes_with_its_owner(wl: Workload, owner: Mapping[str, Any]) -> bool:
    """Whether ``wl`` is to be finished because ``owner``, its controller, is being deleted."""
    if not is_deleting(owner) or wl.metadata.deletion_timestamp is not None or wl.is_finished:
        return False
    uid = (owner.get("metadata") or {}).get("uid")
    return bool(uid) and any(ref.controller and ref.uid == uid for ref in wl.metadata.owner_references or ())


def owner_gone_condition(*, at: datetime | None = None) -> Condition:
    """The ``Finished`` condition written then (upstream's reason and message)."""
    return Condition(
        type=WorkloadConditionType.FINISHED,
        status=ConditionStatus.TRUE,
        reason=WorkloadReason.OWNER_NOT_FOUND,
        message=OWNER_GONE_MESSAGE,
        last_transition_time=at or now(),
    )
