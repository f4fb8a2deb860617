"""What happens to a Workload after the scheduler reserved its quota.

The scheduler decides *where* a Workload gets quota; this module decides the
transitions that follow, from the Workload alone:

- every admission check ``Ready`` (or none at all): ``Admitted=True``;
- a check in ``Retry``: evict (reason ``AdmissionCheck``), release the quota
  and requeue, with every check back to ``Pending``; every eviction also
  clears ``clusterName`` and ``nominatedClusterNames`` (as upstream), so the
  next reservation dispatches afresh instead of waiting on the worker the
  last attempt ran on (the MultiKueue check deletes what is left there);
- a check in ``Rejected``: deactivate (``spec.active=false``) and evict;
- ``spec.active=false`` while holding quota: evict (reason ``Deactivated``);
- preempted (``Evicted=True`` while still holding quota, see
  :func:`preempted`): released once whoever runs its job has stopped it;
  :func:`release_wait` says when that is this module's part
  (:class:`Releaser`);
- finished or being deleted: drop the ``resource-in-use`` finalizer, so the
  Workload can go once its quota is released; except a Workload being
  deleted that is placed on workers (``clusterName`` or
  ``nominatedClusterNames`` set, which only the MultiKueue check sets):
  the MultiKueue controller drops it once the remote job and copies are
  gone, so it still sees the Workload to delete them by name (upstream keeps
  deleted Workloads in a cache for the same purpose; a finalizer also
  survives a restart).

Each function is pure and returns a :class:`WorkloadUpdate`; the I/O layer
writes it with the Workload's resourceVersion as precondition, so a decision
made on a stale copy is refused by the API server instead of overwriting
newer state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from multikueue.api.constants import CheckState, ConditionStatus, Finalizers, WorkloadConditionType, WorkloadReason
from multikueue.api.meta import Condition, find_condition, is_condition_true, set_condition
from multikueue.api.workload import Admission, AdmissionCheckState, Workload

QUOTA_RESERVED = WorkloadConditionType.QUOTA_RESERVED
ADMITTED = WorkloadConditionType.ADMITTED
EVICTED = WorkloadConditionType.EVICTED
REQUEUED = WorkloadConditionType.REQUEUED
FINISHED = WorkloadConditionType.FINISHED


@dataclass(frozen=True)
class EventRecord:
    """A Kubernetes Event to post about the Workload."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class WorkloadUpdate:
    """Writes for one Workload. ``status`` is a JSON merge patch of ``.status``."""

    transition: str
    status: dict[str, Any] | None = None
    remove_finalizer: bool = False
    add_finalizer: bool = False
    deactivate: bool = False
    events: list[EventRecord] = field(default_factory=list)


class Releaser(StrEnum):
    """Who gives back the quota of a preempted Workload (upstream's two-step eviction).

    Upstream's scheduler only marks a victim ``Evicted``; the victim's job
    controller stops the job, then clears the reservation, so the preemptor
    cannot start while the victim's pods still run. Here:
    """

    #: Its batch Job's integration: it suspends the Job, then releases (:func:`released`).
    JOB = "job"
    #: Bound to an object of ours that has nothing to stop here (an external kind's object, held on a manager or
    #: run by its own controller on a worker): released at once.
    AT_ONCE = "at-once"
    #: No integration of ours knows it (no owner, or an owner kind not integrated here): an outside controller
    #: may play the job controller, as upstream expects; released after a grace period if nobody did.
    OUTSIDE = "outside"


#: Default seconds a preempted Workload of :attr:`Releaser.OUTSIDE` is left to an outside controller to release.
OUTSIDE_RELEASE_GRACE_SECONDS = 5.0


def _set(conditions: list[Condition], ctype: str, status: ConditionStatus, reason: str, message: str, now: datetime) -> None:
    set_condition(conditions, Condition(type=ctype, status=status, reason=reason, message=message, last_transition_time=now))


def _admit(conditions: list[Condition], cluster_queue: str | None, now: datetime) -> None:
    _set(conditions, ADMITTED, ConditionStatus.TRUE, WorkloadReason.ADMITTED, f"The workload is admitted by ClusterQueue {cluster_queue}", now)


def holds_quota(wl: Workload) -> bool:
    status = wl.status
    return bool(
        status
        and status.admission is not None
        and is_condition_true(status.conditions, QUOTA_RESERVED)
        and not is_condition_true(status.conditions, FINISHED)
    )


def _conditions(wl: Workload) -> list[Condition]:
    return [c.model_copy() for c in (wl.status.conditions or [])] if wl.status else []


def _dump(conditions: list[Condition]) -> list[dict[str, Any]]:
    return [c.to_dict() for c in conditions]


def _checks(wl: Workload) -> list[AdmissionCheckState]:
    return list(wl.status.admission_checks or []) if wl.status else []


def reservation_status(
    wl: Workload, admission: Admission, check_names: list[str], now: datetime
) -> dict[str, Any]:
    """The status patch that reserves quota (and admits at once when there are no checks)."""
    conditions = _conditions(wl)
    cq = admission.cluster_queue
    _set(conditions, QUOTA_RESERVED, ConditionStatus.TRUE, WorkloadReason.QUOTA_RESERVED, f"Quota reserved in ClusterQueue {cq}", now)
    # As upstream's SetQuotaReservation: a new reservation ends the eviction and the preemption.
    for ctype in (EVICTED, WorkloadConditionType.PREEMPTED):
        previous = find_condition(conditions, ctype)
        if previous is not None and previous.status == ConditionStatus.TRUE:
            _set(conditions, ctype, ConditionStatus.FALSE, WorkloadReason.QUOTA_RESERVED, "Previously: " + previous.message, now)
    existing = {c.name: c for c in _checks(wl)}
    checks = [
        existing.get(name)
        or AdmissionCheckState(name=name, state=CheckState.PENDING, last_transition_time=now)
        for name in check_names
    ]
    if all(c.state == CheckState.READY for c in checks):
        _admit(conditions, cq, now)
    status: dict[str, Any] = {"admission": admission.to_dict(), "conditions": _dump(conditions)}
    status["admissionChecks"] = [c.to_dict() for c in checks] if checks else None
    return status


def finished_status(wl: Workload, condition: dict[str, Any]) -> dict[str, Any]:
    """The status patch marking ``wl`` Finished with ``condition`` (any earlier Finished replaced)."""
    conditions = [c for c in _dump(_conditions(wl)) if c["type"] != FINISHED]
    return {"conditions": conditions + [condition]}


def may_report_pending(wl: Workload | None, *, assumed: bool) -> bool:
    """Whether a "why it waits" write decided earlier still applies to ``wl`` as it is now.

    Such writes run after the admissions of their cycle, so the Workload may
    hold quota (or be assumed to) by then: the write would erase that reservation.
    """
    return wl is not None and not assumed and not holds_quota(wl) and not wl.is_finished


_NUMBERS = re.compile(r"\d+(?:\.\d+)?")


def _pending_message(wl: Workload, reason: str) -> str | None:
    """The message ``wl`` gives for waiting when it waits for ``reason`` (``QuotaReserved=False``), else ``None``."""
    status = wl.status
    current = find_condition(status.conditions if status else None, QUOTA_RESERVED)
    if current is None or current.status != ConditionStatus.FALSE or current.reason != reason:
        return None
    return current.message or ""


def says_pending(wl: Workload, reason: str, message: str) -> bool:
    """Whether ``wl`` already says it waits for ``reason`` with exactly ``message``.

    A report is decided on the version a cycle saw and written later; an
    earlier report of the same words may have been written meanwhile.
    """
    return _pending_message(wl, reason) == message


def only_numbers_differ(wl: Workload, reason: str, message: str) -> bool:
    """Whether ``wl`` already says it waits for ``reason`` with ``message`` but for its figures.

    "insufficient unused quota for cpu in flavor rf, 3 more needed" and the
    same with "2 more needed" tell the user the same thing; the figure follows
    every change of the quota tree's usage, and rewriting it at each one was
    most of the manager's Workload writes in upstream's scalability test.
    """
    current = _pending_message(wl, reason)
    return current is not None and current != message and _NUMBERS.sub("#", current) == _NUMBERS.sub("#", message)


def pending_status(wl: Workload, reason: str, message: str, now: datetime) -> dict[str, Any]:
    """The status patch that says why a Workload still waits."""
    conditions = _conditions(wl)
    _set(conditions, QUOTA_RESERVED, ConditionStatus.FALSE, reason, message, now)
    return {"conditions": _dump(conditions)}


def _release_into(wl: Workload, conditions: list[Condition], message: str, now: datetime) -> dict[str, Any]:
    """The release part of an eviction: no reservation, not admitted, checks back to ``Pending``, off the workers."""
    _set(conditions, QUOTA_RESERVED, ConditionStatus.FALSE, WorkloadReason.PENDING, message, now)
    if find_condition(conditions, ADMITTED) is not None:
        _set(conditions, ADMITTED, ConditionStatus.FALSE, WorkloadReason.PENDING, "The workload has no reservation", now)
    checks = [
        c.model_copy(update={"state": CheckState.PENDING, "message": "", "last_transition_time": now, "pod_set_updates": None})
        for c in _checks(wl)
    ]
    status: dict[str, Any] = {
        "admission": None,
        "conditions": _dump(conditions),
        "admissionChecks": [c.to_dict() for c in checks] if checks else None,
    }
    if placed_on_workers(wl):
        status.update(clusterName=None, nominatedClusterNames=None)
    return status


def _mark_evicted(
    conditions: list[Condition], reason: str, message: str, now: datetime, requeue: bool, preemption_reason: str | None
) -> None:
    if preemption_reason is not None:
        _set(conditions, WorkloadConditionType.PREEMPTED, ConditionStatus.TRUE, preemption_reason, message, now)
    _set(conditions, EVICTED, ConditionStatus.TRUE, reason, message, now)
    if requeue:
        _set(conditions, REQUEUED, ConditionStatus.TRUE, reason, "The workload was requeued after eviction", now)


def _evict(wl: Workload, reason: str, message: str, now: datetime, requeue: bool) -> dict[str, Any]:
    """A one-step eviction: marked evicted and released in the same write."""
    conditions = _conditions(wl)
    _mark_evicted(conditions, reason, message, now, requeue, None)
    return _release_into(wl, conditions, message, now)


def preempted(wl: Workload, reason: str, message: str, now: datetime) -> WorkloadUpdate:
    """Evict a victim of preemption (the scheduler chose it; :mod:`multikueue.core.preemption` says why).

    As upstream: ``Evicted=True`` reason ``Preempted`` and ``Preempted=True``
    with the preemption reason (``InClusterQueue``, ``InCohortReclamation``,
    ``InCohortReclaimWhileBorrowing``), both with the preemption message, and
    requeued. The reservation stays (upstream's two-step eviction): the quota
    is given back by :func:`released` once the victim's job has stopped
    (:class:`Releaser` says who does that), so the preemptor is not admitted
    while the victim's pods still run, and the release is written once, by
    whoever stopped the job. The ``resource-in-use`` finalizer stays.
    """
    conditions = _conditions(wl)
    _mark_evicted(conditions, WorkloadReason.EVICTED_BY_PREEMPTION, message, now, True, reason)
    return WorkloadUpdate(
        transition="preempted",
        status={"conditions": _dump(conditions)},
        events=[EventRecord("Normal", WorkloadReason.EVICTED_BY_PREEMPTION, message)],
    )


def awaits_release(wl: Workload) -> bool:
    """Evicted but still holding quota: the second step of an eviction (:func:`released`) is due.

    The eviction must be the later of the two (a tie counts: both are stamped
    to the second): a reservation written by something that leaves an old
    ``Evicted=True`` in place (a hand-made Workload, another controller) is a
    new reservation, not one awaiting its release.
    """
    if not holds_quota(wl):
        return False
    conditions = wl.status.conditions if wl.status else None
    evicted = find_condition(conditions, EVICTED)
    reserved = find_condition(conditions, QUOTA_RESERVED)
    if evicted is None or evicted.status != ConditionStatus.TRUE:
        return False
    if reserved is None or reserved.last_transition_time is None or evicted.last_transition_time is None:
        return True
    return evicted.last_transition_time >= reserved.last_transition_time


def released(wl: Workload, now: datetime) -> WorkloadUpdate:
    """Give back the quota of an evicted Workload whose job has stopped (the second step of :func:`preempted`).

    ``QuotaReserved=False`` reason ``Pending`` with the eviction's message
    (upstream's job reconciler writes the same), ``status.admission`` cleared,
    ``Admitted=False``, every check back to ``Pending``; on a MultiKueue
    manager ``clusterName`` cleared, so the next reservation dispatches afresh.
    """
    evicted = find_condition(wl.status.conditions if wl.status else None, EVICTED)
    message = evicted.message if evicted is not None and evicted.message else "The workload was evicted"
    return WorkloadUpdate(transition="eviction released", status=_release_into(wl, _conditions(wl), message, now))


def release_wait(wl: Workload, now: datetime, releaser: Releaser, grace: float) -> float | None:
    """Seconds until the lifecycle releases the evicted ``wl`` itself (0: now), or ``None`` when that is not its part.

    ``None`` when ``wl`` awaits no release, or its Job's integration releases
    it (:attr:`Releaser.JOB`). An :attr:`Releaser.OUTSIDE` Workload waits
    ``grace`` seconds from its ``Evicted`` transition for an outside
    controller's release (upstream's would wait for ever; a Workload nobody
    runs would then hold its quota for good).
    """
    if not awaits_release(wl) or releaser is Releaser.JOB:
        return None
    if releaser is Releaser.AT_ONCE:
        return 0.0
    evicted = find_condition(wl.status.conditions if wl.status else None, EVICTED)
    since = evicted.last_transition_time if evicted is not None else None
    if since is None:
        return 0.0
    return max(0.0, grace - (now - since).total_seconds())


def placed_on_workers(wl: Workload) -> bool:
    """Whether the MultiKueue check put copies of ``wl`` on workers (a winner, or nominated ones)."""
    status = wl.status
    return bool(status and (status.cluster_name or status.nominated_cluster_names))


def next_update(
    wl: Workload, now: datetime, releaser: Releaser = Releaser.AT_ONCE, grace: float = OUTSIDE_RELEASE_GRACE_SECONDS
) -> WorkloadUpdate | None:
    """The next transition of ``wl``, or ``None`` when it is where it should be.

    ``releaser`` and ``grace`` matter only to a preempted Workload still
    holding quota (:func:`release_wait`).
    """
    status = wl.status
    conditions = status.conditions if status else None
    finalizers = wl.metadata.finalizers or []
    has_finalizer = Finalizers.RESOURCE_IN_USE in finalizers

    finished = is_condition_true(conditions, FINISHED)
    if wl.metadata.deletion_timestamp is not None and not finished and placed_on_workers(wl):
        return None  # the MultiKueue check releases it once its remote objects are gone
    if wl.metadata.deletion_timestamp is not None or finished:
        if has_finalizer:
            return WorkloadUpdate(transition="release", remove_finalizer=True)
        return None

    if not holds_quota(wl):
        # Jobs' Workloads carry the finalizer from creation (as upstream's do); it
        # goes when they finish or are deleted, not while they wait.
        return None

    if not wl.spec.active:
        message = "The workload is deactivated"
        return WorkloadUpdate(
            transition="deactivated",
            status=_evict(wl, WorkloadReason.DEACTIVATED, message, now, requeue=False),
            remove_finalizer=has_finalizer,
            events=[EventRecord("Normal", WorkloadReason.DEACTIVATED, message)],
        )

    if awaits_release(wl):
        # Preempted: nothing more happens to it but its release (checks going Ready must not admit it again).
        return released(wl, now) if release_wait(wl, now, releaser, grace) == 0.0 else None

    checks = _checks(wl)
    rejected = [c for c in checks if c.state == CheckState.REJECTED]
    if rejected:
        message = f"Admission check {rejected[0].name} rejected the workload: {rejected[0].message}".rstrip(": ")
        return WorkloadUpdate(
            transition="rejected",
            status=_evict(wl, WorkloadReason.DEACTIVATED_DUE_TO_ADMISSION_CHECK, message, now, requeue=False),
            remove_finalizer=has_finalizer,
            deactivate=True,
            events=[EventRecord("Warning", WorkloadReason.DEACTIVATED_DUE_TO_ADMISSION_CHECK, message)],
        )
    retry = [c for c in checks if c.state == CheckState.RETRY]
    if retry:
        message = f"At least one admission check is false: {retry[0].name}: {retry[0].message}".rstrip(": ")
        return WorkloadUpdate(
            transition="retry",
            status=_evict(wl, WorkloadReason.EVICTED_BY_ADMISSION_CHECK, message, now, requeue=True),
            remove_finalizer=has_finalizer,
            events=[EventRecord("Normal", "EvictedDueToAdmissionCheck", message)],
        )

    all_ready = all(c.state == CheckState.READY for c in checks)
    if all_ready and not is_condition_true(conditions, ADMITTED):
        cq = status.admission.cluster_queue if status and status.admission else ""
        new = _conditions(wl)
        _admit(new, cq, now)
        return WorkloadUpdate(
            transition="admitted",
            status={"conditions": _dump(new)},
            add_finalizer=not has_finalizer and bool(checks),
            events=[EventRecord("Normal", WorkloadReason.ADMITTED, f"Admitted by ClusterQueue {cq}")],
        )
    if not has_finalizer and checks:
        # A Workload created without the finalizer gets it only when checks act on it (see WorkloadWriter.reserve).
        return WorkloadUpdate(transition="protect", add_finalizer=True)
    return None
