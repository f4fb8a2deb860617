"""The Workload copy a manager puts on a worker, and how to read its state back.

All of it is pure: the I/O layer creates the dict returned by
:func:`remote_workload_copy` on the worker, keeps each copy it watches as a
:class:`RemoteCopy` (what dispatching reads, no more), and feeds those to
:func:`remote_state` (through :func:`multikueue.controllers.multikueue.dispatch.decide`).

Reference: upstream Kueue's ``cloneForCreate`` and ``bestMatchByCondition``
(``pkg/controller/admissionchecks/multikueue/workload.go``).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from multikueue.api.constants import API_VERSION, ConditionStatus, Labels, WorkloadConditionType
from multikueue.api.workload import Workload

__all__ = ["CopyCondition", "CopyPodSet", "RemoteCopy", "RemoteState", "pod_template_requests", "remote_state", "remote_workload_copy"]


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


#: Per container of a pod template: (``initContainers`` or ``containers``, its name, its sorted requests).
Requests = tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...]


def pod_template_requests(template: Mapping[str, Any] | None) -> Requests:
    """Each container's resource requests in a pod template (what quota is reserved for)."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    out: list[tuple[str, str, tuple[tuple[str, str], ...]]] = []
    for field in ("initContainers", "containers"):
        containers = spec.get(field) if isinstance(spec, Mapping) else None
        for container in containers if isinstance(containers, list) else ():
            if not isinstance(container, Mapping):
                continue
            resources = container.get("resources")
            requests = resources.get("requests") if isinstance(resources, Mapping) else None
            pairs = tuple(sorted((str(k), str(v)) for k, v in requests.items())) if isinstance(requests, Mapping) else ()
            out.append((field, sys.intern(str(container.get("name", ""))), pairs))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class CopyCondition:
    """A status condition of a worker's copy: what the dispatch and the check's messages read."""

    type: str
    status: str
    reason: str
    message: str
    last_transition_time: datetime


@dataclass(frozen=True, slots=True)
class CopyPodSet:
    """A pod set of a worker's copy, as far as drift is judged (:func:`~.dispatch.spec_drift`)."""

    name: str
    count: int
    min_count: int | None
    requests: Requests


@dataclass(frozen=True, slots=True)
class RemoteCopy:
    """What the manager keeps of a worker's copy of a Workload: only what dispatching reads.

    The manager holds one copy per Workload per worker (ten workers, ten
    copies), so this is what grows with the load: at 10,000 Workloads in
    flight every kilobyte kept per copy is about 100 MB. A parsed
    :class:`Workload` of a typical Job's copy kept about 10 KiB (pydantic
    models with every field, the whole pod template, the worker's admission);
    this keeps about 1 KiB. Left out: the pod templates but each container's
    requests, annotations, owner references, the worker's admission and
    checks. Whoever writes to a copy reads it from the worker first, never
    from here.
    """

    uid: str | None
    #: ``metadata.deletionTimestamp`` is set.
    deleting: bool
    finalizers: tuple[str, ...]
    active: bool
    queue_name: str | None
    priority: int | None
    pod_sets: tuple[CopyPodSet, ...]
    conditions: tuple[CopyCondition, ...]

    @classmethod
    def from_k8s(cls, obj: Mapping[str, Any]) -> RemoteCopy:
        """Read a worker's copy as the API server sends it; ``ValueError`` when it does not parse.

        Strings that repeat across copies (queue names, condition types and
        reasons, container names) are interned: one string for all copies.
        """
        meta = _mapping(obj.get("metadata"), "metadata")
        spec = _mapping(obj.get("spec"), "spec")
        status = _mapping(obj.get("status"), "status")
        pod_sets = tuple(_pod_set(ps) for ps in _list(spec.get("podSets"), "spec.podSets"))
        active = spec.get("active", True)
        priority = spec.get("priority")
        queue_name = spec.get("queueName")
        if not isinstance(active, bool) or not (priority is None or isinstance(priority, int)):
            raise ValueError("spec.active must be a boolean and spec.priority an integer")
        return cls(
            uid=_optional_str(meta.get("uid"), "metadata.uid"),
            deleting=meta.get("deletionTimestamp") is not None,
            finalizers=tuple(sys.intern(str(f)) for f in _list(meta.get("finalizers"), "metadata.finalizers")),
            active=active,
            queue_name=None if queue_name is None else sys.intern(str(queue_name)),
            priority=priority,
            pod_sets=pod_sets,
            conditions=tuple(_condition(c) for c in _list(status.get("conditions"), "status.conditions")),
        )

    @classmethod
    def of(cls, wl: Workload) -> RemoteCopy:
        """The same view of a parsed Workload (tools and tests that hold one)."""
        return cls.from_k8s(wl.to_dict())

    def condition(self, condition_type: str) -> CopyCondition | None:
        """The status condition of this type, or ``None``."""
        return next((c for c in self.conditions if c.type == condition_type), None)

    def is_true(self, condition_type: str) -> bool:
        """Whether the condition of this type is there with status ``True``."""
        return _true(self.condition(condition_type))


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} is not an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where} is not a list")
    return value


def _optional_str(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{where} is not a string")
    return value


def _pod_set(pod_set: Any) -> CopyPodSet:
    pod_set = _mapping(pod_set, "a pod set")
    count, min_count = pod_set.get("count", 1), pod_set.get("minCount")
    if not isinstance(count, int) or not (min_count is None or isinstance(min_count, int)):
        raise ValueError("a pod set's count and minCount must be integers")
    template = _mapping(pod_set.get("template"), "a pod set's template")
    return CopyPodSet(sys.intern(str(pod_set.get("name", "main"))), count, min_count, pod_template_requests(template))


def _condition(condition: Any) -> CopyCondition:
    condition = _mapping(condition, "a condition")
    try:
        since = datetime.fromisoformat(str(condition["lastTransitionTime"]))
    except (KeyError, ValueError) as exc:
        raise ValueError(f"condition {condition.get('type')!r} has no valid lastTransitionTime") from exc
    return CopyCondition(
        type=sys.intern(str(condition.get("type", ""))),
        status=sys.intern(str(condition.get("status", ""))),
        reason=sys.intern(str(condition.get("reason", ""))),
        message=str(condition.get("message", "")),
        last_transition_time=since if since.tzinfo is not None else since.replace(tzinfo=UTC),
    )


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


def _true(condition: CopyCondition | None) -> bool:
    return condition is not None and condition.status == ConditionStatus.TRUE


def _evicted(remote: RemoteCopy) -> bool:
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


def remote_state(remote: RemoteCopy | None) -> RemoteState:
    """Classify a worker's copy, most final state first.

    ``FINISHED`` wins over everything (the job is done whatever else the
    conditions say); then ``EVICTED`` (an eviction in progress still shows
    ``QuotaReserved=True`` on upstream Kueue, and must not count as a
    reservation); then ``ADMITTED`` and ``RESERVED``; anything else is
    ``PENDING``.
    """
    if remote is None:
        return RemoteState.ABSENT
    if remote.is_true(WorkloadConditionType.FINISHED):
        return RemoteState.FINISHED
    if _evicted(remote):
        return RemoteState.EVICTED
    if remote.is_true(WorkloadConditionType.QUOTA_RESERVED):
        return RemoteState.ADMITTED if remote.is_true(WorkloadConditionType.ADMITTED) else RemoteState.RESERVED
    return RemoteState.PENDING
