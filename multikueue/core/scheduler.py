"""One scheduling cycle: which pending Workloads get quota now, and what to tell the others.

:func:`schedule` is deterministic and does no I/O. It reads the
:class:`~multikueue.core.cache.Cache`, records each admission it decides with
:meth:`Cache.assume <multikueue.core.cache.Cache.assume>` (so later decisions
in the same cycle see the quota taken) and returns a :class:`CycleResult`
for the I/O layer to write:

- for each :class:`AdmissionDecision`: ``status.admission``,
  ``QuotaReserved=True`` (``messages.QUOTA_RESERVED``), a ``Pending`` entry in
  ``status.admissionChecks`` for each name in ``admission_checks`` and, when
  there are none, ``Admitted=True``; on a failed write, ``cache.forget(key)``;
- for each :class:`PendingUpdate`: ``QuotaReserved=False`` with its reason and
  message (only produced when that differs from what the Workload says);
- for each :class:`PreemptionDecision`: evict the victim
  (:func:`multikueue.core.lifecycle.preempted`) on the resourceVersion the
  cache holds; the preemptor got a ``PendingUpdate`` saying it waits for
  them, and a later cycle admits it once their quota is released;
- when ``next_cycle_at`` is set, run a cycle then even if no event arrives
  (a Workload's requeue backoff ends).

How a cycle decides (upstream Kueue's ``pkg/scheduler``, classical preemption):

1. Only queues whose inputs changed since the last cycle are looked at
   (see the cache's dirty tracking).
2. A Workload whose LocalQueue is missing or stopped, or whose ClusterQueue
   is missing or inactive, gets reason ``Inadmissible`` with upstream's
   message and is not considered.
3. Each active ClusterQueue orders its pending Workloads by priority
   (descending), then creation time, then name. The cycle proceeds in
   rounds: each round takes the next candidate of every queue, assigns
   flavors (:mod:`multikueue.core.flavors`), and admits the round's
   candidates that fit, those that fit without borrowing first, then by
   priority and age, re-assigning a candidate when an earlier admission in
   the round used the same cohort (so it never over-commits, and messages
   tell the current shortfall).
4. A candidate that does not fit (or whose namespace the ClusterQueue's
   ``namespaceSelector`` refuses, or whose pod templates have invalid
   resources) gets reason ``Pending`` with the reason as message. In a ``StrictFIFO`` queue it blocks the Workloads behind it for
   this cycle (they keep their current condition); ``BestEffortFIFO`` goes
   on with the next one.
5. A candidate that does not fit only for lack of unused quota, in a
   ClusterQueue whose ``preemption`` policies allow any, asks
   :func:`multikueue.core.preemption.plan_preemption` for victims among the
   Workloads holding quota in its quota tree (not those assumed this cycle,
   nor victims another preemptor of this cycle claimed). With victims, they
   are evicted and the candidate waits for them (upstream's message plus
   "Pending the preemption of N workload(s)"); it does not reserve in this
   cycle. Without, it is pending as in 4. Preemption is planned for one
   candidate per ClusterQueue per cycle, the first that needs it in queue
   order (upstream plans for queue heads only): planning is the expensive
   part of a cycle, and a lower candidate preempting for quota the higher
   one is about to take would only evict twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from multikueue.api.clusterqueue import (
    BorrowWithinCohortPolicy,
    ClusterQueuePreemption,
    ReclaimWithinCohortPolicy,
    StopPolicy,
    WithinClusterQueuePolicy,
)
from multikueue.api.constants import Labels, WorkloadConditionType, WorkloadReason
from multikueue.api.meta import find_condition
from multikueue.api.workload import Admission
from multikueue.core import messages
from multikueue.core.cache import Cache, ClusterQueueState, PendingWorkload, QuotaHolder, WorkloadKey
from multikueue.core.flavors import FlavorAssignment, assign_flavors
from multikueue.core.matching import selector_matches
from multikueue.core.preemption import AdmittedWorkload, PreemptionContext, Preemptor, plan_preemption

__all__ = ["AdmissionDecision", "CycleResult", "PendingUpdate", "PreemptionDecision", "schedule"]


@dataclass(frozen=True)
class AdmissionDecision:
    """Reserve quota for a Workload: write ``admission`` to its status.

    ``admission_checks`` names the ClusterQueue's admission checks that apply
    to the assigned flavors, in the queue's order; each needs a ``Pending``
    entry in ``status.admissionChecks``. When it is empty the Workload is
    admitted at once (``Admitted=True``).
    """

    key: WorkloadKey
    cluster_queue: str
    admission: Admission
    admission_checks: list[str]


@dataclass(frozen=True)
class PendingUpdate:
    """Set the Workload's ``QuotaReserved`` condition to ``False`` with this reason and message."""

    key: WorkloadKey
    reason: str
    message: str


@dataclass(frozen=True)
class PreemptionDecision:
    """Evict ``victim`` so that ``preemptor`` (of ClusterQueue ``preempting_cluster_queue``) can fit.

    ``reason`` is the ``Preempted`` condition's reason; ``message`` goes on
    both the ``Evicted`` and ``Preempted`` conditions (upstream's wording).
    """

    victim: WorkloadKey
    preemptor: WorkloadKey
    preempting_cluster_queue: str
    reason: str
    message: str


@dataclass
class CycleResult:
    """What one cycle decided, in decision order."""

    admitted: list[AdmissionDecision] = field(default_factory=list)
    pending: list[PendingUpdate] = field(default_factory=list)
    preempted: list[PreemptionDecision] = field(default_factory=list)
    #: ClusterQueues whose preemption was planned this cycle (once each: for their first candidate
    #: that needs it, in queue order, as upstream plans only for queue heads).
    planned_preemption: set[str] = field(default_factory=set, repr=False, compare=False)
    #: Run another cycle at this time even without events (the earliest end of a requeue backoff).
    next_cycle_at: datetime | None = None


@dataclass
class _Cursor:
    """Walks one ClusterQueue's candidates in queue order during a cycle."""

    state: ClusterQueueState
    candidates: list[PendingWorkload]
    position: int = 0

    def next(self) -> PendingWorkload | None:
        if self.position >= len(self.candidates):
            return None
        candidate = self.candidates[self.position]
        self.position += 1
        return candidate


@dataclass
class _Entry:
    """A candidate of one round, with its flavor assignment."""

    cursor: _Cursor
    workload: PendingWorkload
    assignment: FlavorAssignment


def schedule(cache: Cache, now: datetime) -> CycleResult:
    """Run one scheduling cycle over the queues that changed since the last one (see the module docstring)."""
    result = CycleResult()
    dirty = cache.take_dirty(now)
    cluster_queues = set(dirty.cluster_queues)

    for namespace, name in sorted(dirty.local_queues):
        local_queue = cache.local_queue(namespace, name)
        if local_queue is None:
            _inadmissible(cache, result, (namespace, name), messages.LOCAL_QUEUE_MISSING.format(name=name))
        elif local_queue.spec.stop_policy != StopPolicy.NONE:
            _inadmissible(cache, result, (namespace, name), messages.LOCAL_QUEUE_INACTIVE.format(name=name))
        else:
            cluster_queues.add(local_queue.spec.cluster_queue or "")

    cursors: list[_Cursor] = []
    for cq_name in sorted(cluster_queues):
        state = cache.cluster_queue_state(cq_name)
        if state is None or not state.active:
            template = messages.CLUSTER_QUEUE_MISSING if state is None else messages.CLUSTER_QUEUE_INACTIVE
            for lq_key in _open_local_queues(cache, cq_name):
                _inadmissible(cache, result, lq_key, template.format(name=cq_name))
            continue
        candidates = [
            workload
            for lq_key in _open_local_queues(cache, cq_name)
            for workload in cache.pending_in_local_queue(lq_key)
            if workload.requeue_at is None or workload.requeue_at <= now
        ]
        if candidates:
            candidates.sort(key=lambda w: w.order)
            cursors.append(_Cursor(state, candidates))

    while cursors:
        cursors = _run_round(cache, cursors, result, now)

    result.next_cycle_at = cache.next_requeue_at()
    return result


def _open_local_queues(cache: Cache, cq_name: str) -> list[tuple[str, str]]:
    """LocalQueues of the ClusterQueue that are not stopped (stopped ones are handled on their own)."""
    open_queues = []
    for namespace, name in cache.local_queues_of(cq_name):
        local_queue = cache.local_queue(namespace, name)
        if local_queue is not None and local_queue.spec.stop_policy == StopPolicy.NONE:
            open_queues.append((namespace, name))
    return open_queues


def _inadmissible(cache: Cache, result: CycleResult, lq_key: tuple[str, str], message: str) -> None:
    for workload in cache.pending_in_local_queue(lq_key):
        _report(result, workload, WorkloadReason.INADMISSIBLE, message)


def _report(result: CycleResult, workload: PendingWorkload, reason: str, message: str) -> None:
    """Ask for a condition update unless the Workload already says exactly this."""
    message = messages.truncate(message)
    if workload.condition != (reason, message):
        result.pending.append(PendingUpdate(workload.key, reason, message))


def _assign(cache: Cache, state: ClusterQueueState, workload: PendingWorkload) -> FlavorAssignment:
    return assign_flavors(
        workload.pod_sets,
        state.groups,
        cache.flavors,
        state.node,
        state.spec.flavor_fungibility.when_can_borrow,
        preemption=may_preempt(state.spec.preemption),
    )


def may_preempt(policy: ClusterQueuePreemption) -> bool:
    """Whether a ClusterQueue's ``preemption`` lets its Workloads preempt at all (every policy ``Never`` does not)."""
    return (
        policy.within_cluster_queue != WithinClusterQueuePolicy.NEVER
        or policy.reclaim_within_cohort != ReclaimWithinCohortPolicy.NEVER
        or policy.borrow_within_cohort.policy != BorrowWithinCohortPolicy.NEVER
    )


def _candidate(holder: QuotaHolder, now: datetime) -> AdmittedWorkload:
    conditions = holder.workload.status.conditions if holder.workload.status else None
    reserved = find_condition(conditions, WorkloadConditionType.QUOTA_RESERVED)
    return AdmittedWorkload(
        key=holder.key,
        cluster_queue=holder.cluster_queue,
        priority=holder.priority,
        usage=holder.usage,
        queued_at=holder.workload.metadata.creation_timestamp or now,
        quota_reserved_at=reserved.last_transition_time if reserved is not None else None,
        evicted=holder.workload.is_evicted,
        uid=holder.workload.metadata.uid or "",
    )


def _preempt(
    cache: Cache, state: ClusterQueueState, entry: _Entry, assignment: FlavorAssignment, result: CycleResult, now: datetime
) -> str:
    """Plan and record the preemption for a candidate that does not fit; the message it waits with."""
    claimed = {d.victim for d in result.preempted}
    candidates = [
        _candidate(h, now) for h in cache.quota_holders(state.name) if not h.assumed and h.key not in claimed
    ]
    workload = entry.workload.workload
    preemptor = Preemptor(
        key=entry.workload.key,
        cluster_queue=state.name,
        priority=entry.workload.priority,
        queued_at=entry.workload.created,
        usage=assignment.usage,
        uid=workload.metadata.uid or "",
        job_uid=(workload.metadata.labels or {}).get(Labels.JOB_UID, ""),
    )
    plan = plan_preemption(preemptor, PreemptionContext(state.node, state.spec.preemption, candidates, now))
    if not plan.preempts:
        return assignment.message
    for victim in plan.victims:
        result.preempted.append(
            PreemptionDecision(victim.workload.key, entry.workload.key, state.name, victim.reason, victim.message)
        )
    return plan.preemptor_message(assignment.message)


def _run_round(cache: Cache, cursors: list[_Cursor], result: CycleResult, now: datetime) -> list[_Cursor]:
    """Take the next candidate of every queue, admit those that fit; return the queues that go on."""
    entries: list[_Entry] = []
    still_open: list[_Cursor] = []
    for cursor in cursors:
        workload = cursor.next()
        if workload is None:
            continue
        still_open.append(cursor)
        labels = cache.namespace_labels(workload.key[0])
        if not selector_matches(cursor.state.spec.namespace_selector, labels):
            _report(result, workload, WorkloadReason.PENDING, messages.NAMESPACE_MISMATCH)
            if cursor.state.strict_fifo:
                still_open.remove(cursor)
            continue
        if workload.invalid is not None:
            _report(result, workload, WorkloadReason.PENDING, workload.invalid)
            if cursor.state.strict_fifo:
                still_open.remove(cursor)
            continue
        entries.append(_Entry(cursor, workload, _assign(cache, cursor.state, workload)))

    # Fitting without borrowing first, then by priority and age (upstream's entryOrdering).
    entries.sort(key=lambda e: (not e.assignment.fits, e.assignment.borrows, e.workload.order))
    touched_trees: set[str] = set()
    for entry in entries:
        state = entry.cursor.state
        tree = cache.cohort_root(state.name)
        assignment = entry.assignment
        if tree in touched_trees:
            assignment = _assign(cache, state, entry.workload)  # an earlier admission used the same quota
        if assignment.fits:
            admission = assignment.to_admission(state.name)
            cache.assume(entry.workload.key, admission)
            touched_trees.add(tree)
            result.admitted.append(
                AdmissionDecision(
                    key=entry.workload.key,
                    cluster_queue=state.name,
                    admission=admission,
                    admission_checks=state.admission_checks_for(assignment.flavor_names),
                )
            )
            continue
        message = assignment.message
        if assignment.preemptible and state.name not in result.planned_preemption:
            result.planned_preemption.add(state.name)
            message = _preempt(cache, state, entry, assignment, result, now)
        _report(result, entry.workload, WorkloadReason.PENDING, message)
        if state.strict_fifo:
            still_open.remove(entry.cursor)
    return still_open
