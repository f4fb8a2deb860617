"""The Workload copy a manager puts on a worker, and how to read its state back.

Both functions are pure: the I/O layer creates the dict returned by
:func:`remote_workload_copy` on the worker, and feeds the copies it watches
to :func:`remote_state` (through :func:`multikueue.controllers.multikueue.dispatch.decide`).

Reference: upstream Kueue's ``cloneForCreate`` and ``bestMatchByCondition``
(``pkg/controller/admissionchecks/multikueue/workload.go``).
"""

from __future__ import annotations

import copy
from enum import StrEnum
from typing import Any

from multikueue.api.constants import API_VERSION, ConditionStatus, Labels, WorkloadConditionType
from multikueue.api.meta import Condition
from multikueue.api.workload import Workload

__all__ = ["RemoteState", "remote_state", "remote_workload_copy"]


def remote_workload_copy(local: Workload, *, origin: str) -> dict[str, Any]:
    """The Workload to create on a worker for ``local``, as an API-server-ready dict.

    As upstream's ``cloneForCreate``: metadata is only name, namespace, labels
    and annotations (``api.CloneObjectMetaForCreation``), so no owner
    references (the owner lives on the manager), finalizers, status, uid,
    resourceVersion, generation, creationTimestamp or managedFields. The
    labels gain ``kueue.x-k8s.io/multikueue-origin: <origin>`` (the GC finds
    its copies by it) and lose ``kueue.x-k8s.io/job-uid``: that UID is the
    manager Job's, and on the worker it would point at the wrong object. The
    spec is copied as is (pod sets, queue name, priority, priority class
    reference, ``active``, maximum execution time, ...).

    Not done (upstream, alpha feature gate ``MultiKueueOrchestratedPreemption``):
    replacing the preemption gates with MultiKueue's own gate.
    """
    labels = dict(local.metadata.labels or {})
    labels.pop(Labels.JOB_UID, None)
    labels[Labels.MULTIKUEUE_ORIGIN] = origin
    metadata: dict[str, Any] = {"name": local.metadata.name, "namespace": local.metadata.namespace, "labels": labels}
    if local.metadata.annotations:
        metadata["annotations"] = dict(local.metadata.annotations)
    return {
        "apiVersion": API_VERSION,
        "kind": Workload.kind,
        "metadata": metadata,
        "spec": copy.deepcopy(local.spec.to_dict()),
    }


class RemoteState(StrEnum):
    """Where a Workload copy on a worker stands, as far as dispatching cares."""

    #: No copy on the worker.
    ABSENT = "Absent"
    #: A copy that waits for quota on the worker (never reserved, or nothing says it was).
    PENDING = "Pending"
    #: The worker reserved quota for the copy (``QuotaReserved=True``); not admitted yet.
    RESERVED = "Reserved"
    #: Quota reserved and every worker-side admission check passed (``Admitted=True``).
    ADMITTED = "Admitted"
    #: The worker evicted the copy (it had quota and lost it).
    EVICTED = "Evicted"
    #: The copy finished on the worker (``Finished=True``).
    FINISHED = "Finished"


def _true(condition: Condition | None) -> bool:
    return condition is not None and condition.status == ConditionStatus.TRUE


def _evicted(remote: Workload) -> bool:
    """Whether the copy holds no (lasting) reservation because the worker evicted it.

    ``Evicted=True`` counts unless ``QuotaReserved=True`` came at the same
    time or after it: upstream Kueue flips ``Evicted`` to False when it
    reserves quota again, but a worker that does not (this project's lifecycle
    on a worker leaves it True) would otherwise look evicted forever. Times
    have one-second precision; a tie counts as reserved because that mistake
    corrects itself (an eviction in progress soon drops ``QuotaReserved``),
    while the other would leave a re-admitted copy looking evicted. A copy whose
    ``QuotaReserved`` is False and which carries an ``Evicted`` or
    ``Requeued`` condition at all had a reservation before: only an eviction
    writes those.
    """
    evicted = remote.condition(WorkloadConditionType.EVICTED)
    reserved = remote.condition(WorkloadConditionType.QUOTA_RESERVED)
    if evicted is not None and _true(evicted):
        return not (reserved is not None and _true(reserved) and reserved.last_transition_time >= evicted.last_transition_time)
    if _true(reserved):
        return False
    return evicted is not None or remote.condition(WorkloadConditionType.REQUEUED) is not None


def remote_state(remote: Workload | None) -> RemoteState:
    """Classify a worker's copy, most final state first.

    ``FINISHED`` wins over everything (the job is done whatever else the
    conditions say); then ``EVICTED`` (an eviction in progress still shows
    ``QuotaReserved=True`` on upstream Kueue, and must not count as a
    reservation); then ``ADMITTED`` and ``RESERVED``; anything else is
    ``PENDING``.
    """
    if remote is None:
        return RemoteState.ABSENT
    if remote.is_finished:
        return RemoteState.FINISHED
    if _evicted(remote):
        return RemoteState.EVICTED
    if remote.has_quota_reservation:
        return RemoteState.ADMITTED if remote.is_admitted else RemoteState.RESERVED
    return RemoteState.PENDING
