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
  decision was made on (``victim_version``), or not at all if the victim
  changed since (it finished, say); the preemptor got a ``PendingUpdate``
  saying it waits for them, and a later cycle admits it once their quota is
  released;
- when ``next_cycle_at`` is set, run a cycle then even if no event arrives
  (a Workload's requeue backoff ends).

How a cycle decides (upstream Kueue's ``pkg/scheduler``; classical preemption
unless fair sharing is on, see the end):

1. Only queues whose inputs changed since the last cycle are looked at
   (see the cache's dirty tracking).
2. A Workload whose LocalQueue is missing or stopped, or whose ClusterQueue
   is missing or inactive, gets reason ``Inadmissible`` with upstream's
   message and is not considered.
3. Each active ClusterQueue orders its pending Workloads by priority
   (descending), then creation time, then name. The cycle proceeds in
   rounds: each round takes the next candidate of every queue, assigns
   flavors (:mod:`multikueue.core.flavors`; when the full counts neither
   fit nor have victims to preempt and a pod set has a ``minCount``, the
   largest reduced counts that do, :mod:`multikueue.core.partial`), and
   goes through the round's
   candidates in upstream's classical entry order (``classicalIterator``
   in ``pkg/scheduler/scheduler.go``): those that do not borrow first, then
   higher priority, then older (queue order). Fitting or not does not
   matter: a candidate that needs preemption is placed by whether it would
   still borrow once the Workloads it may preempt in its own ClusterQueue
   are gone (upstream's preemption oracle reports the borrowing after its
   simulated preemption). A candidate that fits is admitted; it is
   re-assigned first when an earlier candidate of the round used or holds
   quota in the same quota tree (so it never over-commits, and messages
   tell the current shortfall). Without fair sharing, a candidate that
   fits only by borrowing is not admitted in its round but after the last
   one, in the same order (:func:`_decide`): a round is one set of upstream's
   heads, and a borrower of an early round would otherwise take quota that
   a later round's candidate within its nominal quota reclaims by preemption.
4. A candidate that does not fit (or whose namespace the ClusterQueue's
   ``namespaceSelector`` refuses, or whose pod templates have invalid
   resources) gets reason ``Pending`` with the reason as message. Pod sets
   that did not fit earlier in the cycle are not assigned again: the
   candidate gets the same message (:func:`_known_misfit`). In a ``StrictFIFO`` queue it blocks the Workloads behind it for
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
6. A candidate that preempts (including one that, in a later cycle, still
   waits for victims it chose before: they are chosen again, first, until
   their quota is released) holds its usage in its quota tree for the rest
   of the cycle, and its victims' usage counts as released, as upstream's
   scheduler adds a preemptor's usage to its cycle snapshot and simulates
   the removal of the cycle's victims when it checks whether a later entry
   fits. Later candidates in that tree therefore cannot take the quota it
   waits for while its victims are released one write at a time. This is
   a cycle-local overlay on the cache's quota tree, taken back when the
   cycle ends (also on error): after :func:`schedule` the tree holds only
   the usage of real Workloads and of this cycle's assumptions.
7. A candidate left pending for lack of quota is *parked*
   (:meth:`Cache.park <multikueue.core.cache.Cache.park>`, upstream's
   inadmissible Workloads): later cycles do not look at it until the tree
   changed, or the Workload itself changed, or a requeue batch (1 s) after
   quota was freed or taken in its quota tree; quota given back in its own
   ClusterQueue by a Workload of its priority or a lower one that finished
   or was deleted wakes it at once (:meth:`PendingQueues.mark_cluster_queues
   <multikueue.core.cache.queues.PendingQueues.mark_cluster_queues>` says
   why). Its equals in the ClusterQueue (same priority, same pod sets),
   queued or arriving later, are left out with it until the same wake,
   as upstream's scheduling equivalence (:meth:`PendingQueues.park
   <multikueue.core.cache.queues.PendingQueues.park>`). Not parked:
   candidates of a StrictFIFO queue (the head blocks either way), those
   that need preemption but were not weighed (their queue planned for
   another one this cycle, and no earlier one of the same pod sets found
   no victims: :func:`_no_victims_known`), any in a tree where a
   preemptor holds its usage this cycle, and (classical ordering) one that
   would fit with preemption when quota was given back in its tree within
   a requeue batch, unless it was preempted and has not reserved quota
   since: that one stays its queue's head, nothing behind it is
   looked at this cycle, and the queue is looked at again in the next
   (:func:`_park`). In such a cycle, too, the walk of a queue stops at the
   first Workload of a lower priority than one it passed over as parked
   for lack of victims (:func:`_held_back`). With ``heads_per_queue``, a
   cycle stops walking a ClusterQueue once that many of its candidates
   were not admitted in their round (left pending, or deferred to borrow;
   not those parked as an earlier misfit's copy); when it parked some
   of them, it sets :attr:`CycleResult.more` and the queue is looked at
   again in the next cycle, which starts after them. So a cycle costs the
   Workloads that may move, not every one that waits, as upstream's one
   head per queue per cycle; the Workloads not reached keep their current
   condition.

With fair sharing (``schedule(..., fair_sharing=FairSharing(...))``, the
Configuration's ``fairSharing``), step 3's order within a round is
upstream's ``fairSharingIterator`` instead: the entries of one quota tree
are taken one at a time, each chosen by a tournament over the cohort tree
in which every cohort prefers, among its children's nominees, the one whose
child (with the nominee admitted) does not borrow in the pairs the nominee
requests, then has the lowest dominant resource share
(:mod:`multikueue.core.fairsharing`), then the higher priority, then the
older. The shares are computed again for every pick, so they include what
the round admitted or held so far. Step 5's victims are then chosen by
:func:`multikueue.core.fairpreemption.plan_fair_preemption` with the
configured strategies (reasons ``InClusterQueue``, ``InCohortReclamation``,
``InCohortFairSharing``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import partial

from multikueue.api.clusterqueue import (
    BorrowWithinCohortPolicy,
    ClusterQueuePreemption,
    ReclaimWithinCohortPolicy,
    StopPolicy,
    WithinClusterQueuePolicy,
)
from multikueue.api.constants import Labels, WorkloadConditionType, WorkloadReason
from multikueue.api.meta import find_condition, version_number
from multikueue.api.workload import Admission
from multikueue.core import messages
from multikueue.core.fairpreemption import plan_fair_preemption
from multikueue.core.fairsharing import DRS, FairSharing, compare_drs, dominant_resource_share
from multikueue.core.cache import Cache, ClusterQueueState, PendingWorkload, QuotaHolder, WorkloadKey
from multikueue.core.flavors import FlavorAssignment, PodSetRequest, assign_flavors
from multikueue.core.matching import selector_matches
from multikueue.core.preemption import (
    NO_CANDIDATES_MESSAGE,
    AdmittedWorkload,
    Classification,
    Outcome,
    PreemptionContext,
    PreemptionPlan,
    Preemptor,
    may_find_candidates,
    may_free_enough,
    plan_preemption,
    satisfies_policy,
)
from multikueue.core.partial import can_be_partially_admitted, reduce_counts
from multikueue.core.quota import ZERO, FlavorResource, QuotaNode, add_usage, remove_usage, root_of, set_usage

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
    ``victim_version`` is the victim's resourceVersion the plan was made on:
    a victim that changed since (finished, evicted by someone else) is not
    evicted on a newer version the plan never saw.
    """

    victim: WorkloadKey
    preemptor: WorkloadKey
    preempting_cluster_queue: str
    reason: str
    message: str
    victim_version: str | None = None


#: Entries a :class:`CycleMemo` may hold beyond the holders its last cycle weighed before it is pruned.
MEMO_SLACK = 64


@dataclass
class CycleMemo:
    """What one cycle hands the next: values derived from the cache's objects, never a decision.

    The cache hands back the same :class:`QuotaHolder` object while its
    Workload, quota and priority are unchanged, so what preemption weighs
    of a holder (:func:`_candidate`) is built once per holder, not once per
    holder and cycle (``now`` only stands in for a missing
    ``creationTimestamp``, which the API server always sets). A cycle that
    weighed a quota tree's holders keeps only those of that tree (give or
    take :data:`MEMO_SLACK`): an entry for a holder that changed keeps its
    old Workload object alive. A tree not weighed again keeps its last
    entries (one tree's holders at most; the price of not passing over
    every tree's entries in each cycle that takes only some trees).
    """

    #: Per quota tree, by holder.
    candidates: dict[str, dict[WorkloadKey, tuple[QuotaHolder, AdmittedWorkload]]] = field(default_factory=dict)
    #: The ClusterQueues whose candidate preempted (or waited for its victims) in the last cycle that looked
    #: at them: a cycle that looks at a ClusterQueue of their quota tree looks at them too (see
    #: :func:`schedule`). Which queues to look at, not what to decide: a lost memo costs one cycle's hold.
    preempting: set[str] = field(default_factory=set)
    #: Quota trees a cycle left for the next one (``max_queues``), in the order to take them first.
    postponed: list[str] = field(default_factory=list)

    def candidate(self, holder: QuotaHolder, now: datetime, tree: str) -> AdmittedWorkload:
        in_tree = self.candidates.setdefault(tree, {})
        known = in_tree.get(holder.key)
        if known is None or known[0] is not holder:
            known = in_tree[holder.key] = (holder, _candidate(holder, now))
        return known[1]

    def prune(self, weighed: Mapping[str, Collection[WorkloadKey]]) -> None:
        """In each quota tree whose holders this cycle weighed, keep those it weighed (give or take
        :data:`MEMO_SLACK`); other trees' entries stay, without a pass over them (a cycle may take only
        some trees, ``max_queues``)."""
        for tree, used in weighed.items():
            in_tree = self.candidates.get(tree)
            if in_tree is not None and len(in_tree) > len(used) + MEMO_SLACK:
                self.candidates[tree] = {key: known for key, known in in_tree.items() if key in used}


@dataclass
class CycleResult:
    """What one cycle decided, in decision order."""

    admitted: list[AdmissionDecision] = field(default_factory=list)
    pending: list[PendingUpdate] = field(default_factory=list)
    preempted: list[PreemptionDecision] = field(default_factory=list)
    #: ClusterQueues whose preemption was planned this cycle and found victims (once each: for their
    #: first candidate that finds some, in queue order, as upstream plans only for queue heads; see
    #: :func:`_may_plan`).
    planned_preemption: set[str] = field(default_factory=set, repr=False, compare=False)
    #: Preemption plans run, and those answered "no victims" without running (:func:`may_find_candidates`,
    #: :func:`may_free_enough`).
    plans: int = field(default=0, repr=False, compare=False)
    plans_skipped: int = field(default=0, repr=False, compare=False)
    #: Run another cycle at this time even without events (the earliest end of a requeue backoff).
    next_cycle_at: datetime | None = None
    #: Workloads whose assumed admission (decided by an earlier cycle, its write not begun) this cycle's
    #: preemption took back: the cycle forgot the assumptions, nothing is to be written for them
    #: (:meth:`Cache.start_writing <multikueue.core.cache.Cache.start_writing>`).
    withdrawn: list[WorkloadKey] = field(default_factory=list)
    #: Run another cycle soon: a ClusterQueue's walk stopped at ``heads_per_queue`` candidates not
    #: admitted in their round, parked some of them, and may have Workloads it did not look at; or
    #: the cycle left quota trees for the next one (``max_queues``).
    more: bool = False


@dataclass
class _Cursor:
    """Walks one ClusterQueue's candidates in queue order during a cycle (:meth:`Cache.candidates`, lazily)."""

    state: ClusterQueueState
    candidates: Iterator[PendingWorkload]
    #: ``queueingStrategy: StrictFIFO`` (read once: it is asked for every candidate left pending).
    strict_fifo: bool = False
    #: Candidates not admitted in their round this cycle (left pending, or deferred to borrow), and how
    #: many of them were parked.
    missed: int = 0
    parked: int = 0
    exhausted: bool = False
    #: False once a StrictFIFO queue's head stays pending (or waits to borrow): nothing behind it this cycle.
    open: bool = True
    #: True once a candidate was deferred to borrow: the queue's later candidates are deferred behind it.
    deferring: bool = False

    def next(self) -> PendingWorkload | None:
        candidate = None if self.exhausted else next(self.candidates, None)
        self.exhausted = candidate is None
        return candidate


@dataclass
class _Entry:
    """A candidate of one round, with its flavor assignment."""

    cursor: _Cursor
    workload: PendingWorkload
    assignment: FlavorAssignment
    #: Whether it borrows: with a fitting assignment, as assigned; with one that needs preemption,
    #: once the Workloads it may preempt in its own ClusterQueue are gone (:func:`_borrows_after_preemption`).
    borrows: bool = False
    #: The count of changes the cycle had made in the entry's quota tree when ``assignment`` was made
    #: (:attr:`_Cycle.tree_changes`): the same count, the same assignment.
    assigned_at: int = 0


class _CycleUsage:
    """Usage counted in the live quota tree for the rest of one cycle only (upstream's cycle cohort usage).

    A preemptor that issued preemption (or waits for the victims it chose)
    holds its usage in its quota tree, and its victims' usage is counted as
    released, so the entries after it in the cycle see the tree as it will be
    once the victims are gone and it is admitted. :meth:`undo` (called in a
    ``finally`` by :func:`schedule`) takes every change back, last first, and
    drops the zero entries it created, so nothing leaks out of the cycle;
    :func:`multikueue.core.quota.add_usage` and
    :func:`~multikueue.core.quota.remove_usage` keep each cohort's usage
    consistent whatever the order, so assumptions made in between stay.
    """

    def __init__(self) -> None:
        #: (leaf node, pair, signed amount, the nodes on its path that had no entry for the pair before).
        self._changes: list[tuple[QuotaNode, FlavorResource, Decimal, list[QuotaNode]]] = []

    def add(self, node: QuotaNode, usage: Mapping[FlavorResource, Decimal]) -> None:
        for fr, amount in usage.items():
            if amount:
                self._changes.append((node, fr, amount, _without_entry(node, fr)))
                add_usage(node, fr, amount)

    def release(self, node: QuotaNode, usage: Mapping[FlavorResource, Decimal]) -> None:
        for fr, amount in usage.items():
            if amount:
                self._changes.append((node, fr, -amount, _without_entry(node, fr)))
                remove_usage(node, fr, amount)

    def undo(self) -> None:
        while self._changes:
            node, fr, amount, fresh = self._changes.pop()
            if amount > 0:
                remove_usage(node, fr, amount)
            else:
                add_usage(node, fr, -amount)
            for touched in fresh:
                if touched.usage.get(fr) == ZERO:
                    set_usage(touched, fr, None)


def _without_entry(node: QuotaNode | None, fr: FlavorResource) -> list[QuotaNode]:
    """The nodes from ``node`` up to its root whose usage has no entry for ``fr``."""
    missing = []
    while node is not None:
        if fr not in node.usage:
            missing.append(node)
        node = node.parent
    return missing


@dataclass
class _OwnHolders:
    """The Workloads holding quota in one ClusterQueue that its own preemption could take (:meth:`_Cycle.may_preempt`)."""

    #: Their usage summed per priority.
    by_priority: dict[int, dict[FlavorResource, Decimal]] = field(default_factory=dict)
    #: Per priority, the Workloads themselves (for ``LowerOrNewerEqualPriority``'s equal-priority part).
    members: dict[int, list[QuotaHolder]] = field(default_factory=dict)
    by_key: dict[WorkloadKey, QuotaHolder] = field(default_factory=dict)


@dataclass
class _Cycle:
    """What the rounds of one cycle share."""

    cache: Cache
    result: CycleResult
    now: datetime
    #: The Configuration's ``fairSharing``; ``None``: classical ordering and preemption.
    fair_sharing: FairSharing | None = None
    usage: _CycleUsage = field(default_factory=_CycleUsage)
    #: Per quota tree (:meth:`Cache.cohort_root`), the Workloads holding quota there at the first look
    #: (the cycle only adds assumptions, which it does not preempt).
    holders: dict[str, list[QuotaHolder]] = field(default_factory=dict)
    #: Admissions this cycle assumed (see :meth:`may_preempt`).
    assumed_now: set[WorkloadKey] = field(default_factory=set)
    own: dict[str, _OwnHolders] = field(default_factory=dict)
    #: The quota trees whose holders :meth:`own_holders` grouped this cycle.
    own_grouped: set[str] = field(default_factory=set)
    #: Per quota tree, what preemption weighs of each holder it may take, by key (see :meth:`victims_of`).
    victims_by_tree: dict[str, dict[WorkloadKey, AdmittedWorkload]] = field(default_factory=dict)
    #: Per quota tree, the same grouped by ClusterQueue name (see :meth:`victims_by_queue`).
    victims_grouped: dict[str, dict[str, list[AdmittedWorkload]]] = field(default_factory=dict)
    #: Per ClusterQueue, by pod-set shape, the assignments that did not fit earlier in this cycle (see :func:`_known_misfit`).
    misfits: dict[str, dict[str, FlavorAssignment]] = field(default_factory=dict)
    #: Per ClusterQueue, the pod-set shapes whose preemption was weighed this cycle and found no victims
    #: (see :func:`_no_victims_known`).
    without_victims: dict[str, set[str]] = field(default_factory=dict)
    #: Under fair sharing, the ClusterQueues whose preemption was weighed this cycle (see :func:`_may_plan`).
    weighed_fair: set[str] = field(default_factory=set)
    #: (ClusterQueue, namespace) -> whether the queue's ``namespaceSelector`` admits the namespace.
    namespaces: dict[tuple[str, str], bool] = field(default_factory=dict)
    #: Quota trees where a preemptor holds its usage this cycle: nothing is parked there (what does not
    #: fit may fit without the hold, if the preemptor goes away before its victims do).
    held_trees: set[str] = field(default_factory=set)
    #: Stop walking a ClusterQueue after this many candidates not admitted in their round (None: walk them all).
    heads_per_queue: int | None = None
    #: Per quota tree, how many times this cycle changed its usage (an admission assumed, a preemptor's hold
    #: with its victims' release): a flavor assignment made at the same count would be the same.
    tree_changes: dict[str, int] = field(default_factory=dict)
    #: Candidates that fit only by borrowing, decided after every round (see :func:`_decide`).
    deferred: list[_Entry] = field(default_factory=list)
    #: The victims of this cycle's preemptions (``result.preempted``), by key and by their ClusterQueue:
    #: each plan and each ordering of a candidate needing preemption reads them, and a pass over the whole
    #: list for each was a twentieth of the controller's time when a cycle preempted hundreds.
    claimed: set[WorkloadKey] = field(default_factory=set)
    claimed_in: dict[str, list[WorkloadKey]] = field(default_factory=dict)
    #: Per quota tree, the plans' shared classification of its queues' Workloads (see
    #: :attr:`~multikueue.core.preemption.PreemptionContext.classified`): valid as long as
    #: :meth:`victims_by_queue`, which it classifies, that is for the cycle.
    classified: dict[str, Classification] = field(default_factory=dict)
    memo: CycleMemo = field(default_factory=CycleMemo)
    #: ClusterQueues of the quota trees where quota was given back within a requeue batch (see :func:`_park`).
    released: set[str] = field(default_factory=set)

    def holders_of(self, cq_name: str) -> list[QuotaHolder]:
        tree = self.cache.cohort_root(cq_name)
        if tree not in self.holders:
            self.holders[tree] = self.cache.quota_holders(cq_name)
        return self.holders[tree]

    def may_preempt(self, holder: QuotaHolder) -> bool:
        """Whether preemption may take a holder :meth:`holders_of` listed: any not assumed, and under
        classical preemption an assumed admission whose write has not begun, unless this cycle decided
        it (it is in this cycle's result). The answer does not change within the cycle: a listed holder
        already held quota, so it cannot be among the admissions assumed after the listing."""
        if not holder.assumed:
            return True
        return holder.withdrawable and self.fair_sharing is None and holder.key not in self.assumed_now

    def victims_of(self, cq_name: str) -> dict[WorkloadKey, AdmittedWorkload]:
        """The possible victims in the ClusterQueue's quota tree (:meth:`may_preempt`), in holder order.

        Built once per tree and cycle: every preemption planned in the tree
        weighs the same Workloads (those claimed by an earlier preemptor are
        left out by :func:`_plan`), and building each one reads its conditions.
        """
        tree = self.cache.cohort_root(cq_name)
        found = self.victims_by_tree.get(tree)
        if found is None:
            found = self.victims_by_tree[tree] = {
                h.key: self.memo.candidate(h, self.now, tree) for h in self.holders_of(cq_name) if self.may_preempt(h)
            }
        return found

    def victims_by_queue(self, cq_name: str) -> dict[str, list[AdmittedWorkload]]:
        """:meth:`victims_of` grouped by ClusterQueue, once per tree and cycle (what a plan takes: grouping per
        plan was a pass over every holder of the tree, hundreds in a cohort of 100 queues)."""
        tree = self.cache.cohort_root(cq_name)
        grouped = self.victims_grouped.get(tree)
        if grouped is None:
            grouped = self.victims_grouped[tree] = {}
            for victim in self.victims_of(cq_name).values():
                grouped.setdefault(victim.cluster_queue, []).append(victim)
        return grouped

    def own_holders(self, cq_name: str) -> _OwnHolders:
        """The ClusterQueue's own holders preemption may take, grouped for its whole tree in one pass.

        Once per tree and cycle: grouping per ClusterQueue was a pass over
        every holder of the tree for each queue that weighed a preemption
        (a tenth of the scheduler's time with upstream's large-scale
        generator, 100 queues and a few thousand holders per tree).
        """
        own = self.own.get(cq_name)
        if own is None:
            tree = self.cache.cohort_root(cq_name)
            if tree not in self.own_grouped:
                self.own_grouped.add(tree)
                for holder in self.holders_of(cq_name):
                    if not self.may_preempt(holder):
                        continue
                    group = self.own.get(holder.cluster_queue)
                    if group is None:
                        group = self.own[holder.cluster_queue] = _OwnHolders()
                    summed = group.by_priority.setdefault(holder.priority, {})
                    for fr, amount in holder.usage.items():
                        summed[fr] = summed.get(fr, ZERO) + amount
                    group.members.setdefault(holder.priority, []).append(holder)
                    group.by_key[holder.key] = holder
            own = self.own.get(cq_name)
            if own is None:
                own = self.own[cq_name] = _OwnHolders()
        return own


def schedule(
    cache: Cache,
    now: datetime,
    fair_sharing: FairSharing | None = None,
    *,
    heads_per_queue: int | None = None,
    memo: CycleMemo | None = None,
    max_queues: int | None = None,
) -> CycleResult:
    """Run one scheduling cycle over the queues that changed since the last one (see the module docstring).

    ``fair_sharing`` (the Configuration's ``fairSharing``, when set) switches
    the entry order and preemption to upstream's fair sharing.
    ``heads_per_queue`` bounds how many candidates of one ClusterQueue a cycle
    does not admit in their round before it stops walking that queue (step 7).
    ``memo``: what the previous cycle derived and may hand on (:class:`CycleMemo`); a fresh one without.
    ``max_queues``: look at whole quota trees until about this many ClusterQueues, and leave the other
    changed trees to the next cycle (:func:`_this_cycles_share`).
    """
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

    memo = memo or CycleMemo()
    _with_waiting_preemptors(cache, cluster_queues, memo)
    if max_queues is not None:
        cluster_queues = _this_cycles_share(cache, cluster_queues, max_queues, memo, result)
    cursors: list[_Cursor] = []
    releasing: set[str] = set()
    for cq_name in sorted(cluster_queues):
        state = cache.cluster_queue_state(cq_name)
        if state is None or not state.active:
            template = messages.CLUSTER_QUEUE_MISSING if state is None else messages.CLUSTER_QUEUE_INACTIVE
            for lq_key in _open_local_queues(cache, cq_name):
                _inadmissible(cache, result, lq_key, template.format(name=cq_name))
            continue
        on_hold = None
        if fair_sharing is None and not state.strict_fifo and cache.releasing(cq_name, now):
            releasing.add(cq_name)
            on_hold = partial(_held_back, cache, result, cq_name)
        candidates = cache.candidates(cq_name, _open_local_queues(cache, cq_name), now, on_hold)
        cursors.append(_Cursor(state, candidates, strict_fifo=state.strict_fifo))

    cycle = _Cycle(cache, result, now, fair_sharing, heads_per_queue=heads_per_queue, memo=memo, released=releasing)
    try:
        while cursors:
            cursors = _run_round(cycle, cursors)
        _decide_deferred(cycle)
    finally:
        cycle.usage.undo()  # the preemptors' held usage is for this cycle only
        cycle.memo.prune(cycle.victims_by_tree)
    for key in result.withdrawn:
        cache.forget(key)  # its quota is its preemptor's; it is pending again
    memo.preempting = (memo.preempting - cluster_queues) | result.planned_preemption

    result.next_cycle_at = cache.next_requeue_at()
    return result


def _preempted(workload: PendingWorkload) -> bool:
    """Whether the Workload was evicted by preemption and has not reserved quota since (``Preempted=True``;
    a reservation sets it back to False): such a one is parked as before, not kept its queue's head, or a
    medium Workload behind large ones that run back to back in its queue takes each gap and is evicted by
    the next large one, once a second (the 1-cohort baseline, decisions, stop 49)."""
    return workload.workload.is_condition_true(WorkloadConditionType.PREEMPTED)


def _held_back(cache: Cache, result: CycleResult, cq_name: str) -> None:
    """A walk stopped while its tree gives quota back (behind a head kept or a parked higher-priority
    Workload): the next cycle looks at the queue again (it walks on once no release is a requeue batch
    old or less)."""
    cache.revisit(cq_name)
    result.more = True


def _with_waiting_preemptors(cache: Cache, cluster_queues: set[str], memo: CycleMemo) -> None:
    """Add to the cycle the ClusterQueues whose preemptor waits for its victims in a quota tree it looks at.

    A preemptor holds the quota it waits for only in the cycles that look at
    its ClusterQueue (step 6). A cycle started by another queue of the tree
    alone (a Workload arriving there) did not, so the quota a victim had just
    given back went to that queue's borrowers, which the preemptor then
    evicted in turn (in a simulation of upstream's full scalability baseline,
    515 of 669 evictions were of Workloads admitted while their preemptor
    waited so). Upstream's preemptor is a head in every cycle.
    """
    if not memo.preempting:
        return
    trees = {cache.cohort_root(name) for name in cluster_queues}
    for name in memo.preempting - cluster_queues:
        if cache.cluster_queue_state(name) is not None and cache.cohort_root(name) in trees:
            cluster_queues.add(name)


def _this_cycles_share(
    cache: Cache, cluster_queues: set[str], max_queues: int, memo: CycleMemo, result: CycleResult
) -> set[str]:
    """The ClusterQueues this cycle looks at: whole quota trees, those left by the last cycle first, until
    ``max_queues`` (at least one tree); the others are looked at by the next cycle (``result.more``).

    Why: a cycle holds the event loop, and with upstream's large-scale generator (ten trees of 100
    ClusterQueues, all changing all the time) one over every tree took 0.2-0.6 s, so a Workload's
    finish waited that long to give its quota back. Trees are independent (no quota, borrowing or
    preemption crosses them), so deciding one a cycle later is the same as its events arriving a
    moment later; within a tree nothing changes, as every queue of it is in the same cycle. The trees
    left over are taken first next time (``memo.postponed``), so none waits more than a few cycles.
    """
    by_tree: dict[str, list[str]] = {}
    for name in cluster_queues:
        by_tree.setdefault(cache.cohort_root(name), []).append(name)
    if len(cluster_queues) <= max_queues or len(by_tree) == 1:
        memo.postponed = []
        return cluster_queues
    first = [tree for tree in memo.postponed if tree in by_tree]
    order = first + sorted(set(by_tree) - set(first))
    taken: set[str] = set()
    for index, tree in enumerate(order):
        if taken and len(taken) + len(by_tree[tree]) > max_queues:
            memo.postponed = order[index:]
            for later in memo.postponed:
                for name in by_tree[later]:
                    cache.revisit(name)
            result.more = True
            return taken
        taken.update(by_tree[tree])
    memo.postponed = []
    return taken


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


def _assign_pod_sets(cache: Cache, state: ClusterQueueState, pod_sets: Sequence[PodSetRequest]) -> FlavorAssignment:
    return assign_flavors(
        pod_sets,
        state.groups,
        cache.flavors,
        state.node,
        state.spec.flavor_fungibility.when_can_borrow,
        preemption=may_preempt(state.spec.preemption),
    )


def _assign(cycle: _Cycle, state: ClusterQueueState, workload: PendingWorkload) -> FlavorAssignment:
    """The candidate's assignment: its full counts, or reduced ones under partial admission.

    As upstream's ``getInitialAssignments``: the full counts when they fit,
    or when they need preemption and victims exist; otherwise, if a pod set
    has a ``minCount``, the largest reduced counts that fit or that have
    victims to preempt (:func:`multikueue.core.partial.reduce_counts`);
    otherwise the full counts (and their message).
    """
    full = _assign_pod_sets(cycle.cache, state, workload.pod_sets)
    if full.fits:
        return full
    counts = [p.count for p in workload.pod_sets]
    min_counts = [p.min_count for p in workload.pod_sets]
    if not can_be_partially_admitted(counts, min_counts):
        return full
    if full.preemptible and _plan(cycle, state, workload, full).preempts:
        return full

    def attempt(reduced: list[int]) -> FlavorAssignment | None:
        pod_sets = [p.with_count(c) for p, c in zip(workload.pod_sets, reduced, strict=True)]
        assignment = _assign_pod_sets(cycle.cache, state, pod_sets)
        if assignment.fits or (assignment.preemptible and _plan(cycle, state, workload, assignment).preempts):
            return assignment
        return None

    return reduce_counts(counts, min_counts, attempt) or full


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
        version=version_number(holder.workload.metadata.resource_version),
    )


def _preemptor(pending: PendingWorkload, state: ClusterQueueState, assignment: FlavorAssignment) -> Preemptor:
    workload = pending.workload
    return Preemptor(
        key=pending.key,
        cluster_queue=state.name,
        priority=pending.priority,
        queued_at=pending.created,
        usage=assignment.usage,
        uid=workload.metadata.uid or "",
        job_uid=(workload.metadata.labels or {}).get(Labels.JOB_UID, ""),
    )


def _borrows_after_preemption(cycle: _Cycle, state: ClusterQueueState, entry: _Entry) -> bool:
    """Whether a candidate that needs preemption still borrows once its own queue's preemptible Workloads are gone.

    Upstream orders such an entry by the borrowing its preemption oracle
    predicts after removing the candidates it found; here the Workloads of
    its own ClusterQueue that ``withinClusterQueue`` allows (that it may take,
    not already released by this cycle's overlay) are taken out of the
    queue's usage. Reclaimed Workloads of other ClusterQueues do not change
    the queue's own usage.
    """
    node = state.node
    if node.parent is None:
        return False
    usage = entry.assignment.usage
    freed: dict[FlavorResource, Decimal] = {}

    def free(amounts: Mapping[FlavorResource, Decimal], sign: int = 1) -> None:
        for fr, amount in amounts.items():
            if fr in usage:
                freed[fr] = freed.get(fr, ZERO) + sign * amount

    policy = state.spec.preemption.within_cluster_queue
    if policy != WithinClusterQueuePolicy.NEVER:
        own = cycle.own_holders(state.name)
        weighed = cycle.victims_of(state.name)
        preemptor = _preemptor(entry.workload, state, entry.assignment)
        for priority, summed in own.by_priority.items():
            if priority < preemptor.priority:
                free(summed)
            elif priority == preemptor.priority and policy == WithinClusterQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
                for holder in own.members[priority]:
                    if satisfies_policy(policy, preemptor, weighed[holder.key]):
                        free(holder.usage)
        for key in cycle.claimed_in.get(state.name, ()):  # victims the overlay already took out of the usage
            victim = own.by_key.get(key)
            if victim is not None and satisfies_policy(policy, preemptor, weighed[victim.key]):
                free(victim.usage, -1)
    return any(
        node.usage.get(fr, ZERO) - freed.get(fr, ZERO) + amount > node.subtree_quota.get(fr, ZERO)
        for fr, amount in usage.items()
        if amount
    )


#: The plan :func:`_plan` answers when no plan can have victims (:func:`plan_preemption` would find no candidate,
#: or not enough).
NO_CANDIDATES_PLAN = PreemptionPlan(Outcome.NO_CANDIDATES, message=NO_CANDIDATES_MESSAGE)


def _plan(cycle: _Cycle, state: ClusterQueueState, pending: PendingWorkload, assignment: FlavorAssignment) -> PreemptionPlan:
    """The preemption ``assignment`` would need: victims among the quota holders no preemptor of this cycle claimed."""
    preemptor = _preemptor(pending, state, assignment)
    policy = state.spec.preemption
    if cycle.fair_sharing is None:
        own = cycle.own_holders(state.name).by_priority
        if not may_find_candidates(preemptor, state.node, policy, own) or not may_free_enough(
            preemptor, state.node, policy, own
        ):
            cycle.result.plans_skipped += 1
            return NO_CANDIDATES_PLAN
    cycle.result.plans += 1
    classified = cycle.classified.setdefault(cycle.cache.cohort_root(state.name), {})
    ctx = PreemptionContext(
        state.node, policy, cycle.victims_by_queue(state.name), cycle.now, excluded=cycle.claimed, classified=classified
    )
    if cycle.fair_sharing is not None:
        return plan_fair_preemption(preemptor, ctx, cycle.fair_sharing.preemption_strategies)
    return plan_preemption(preemptor, ctx)


def _preempt(cycle: _Cycle, state: ClusterQueueState, entry: _Entry, assignment: FlavorAssignment) -> tuple[str, bool]:
    """Plan and record the preemption for a candidate that does not fit; its message, and whether it preempts.

    With victims, the preemptor's usage is held in its quota tree for the
    rest of the cycle and theirs counted as released (:class:`_CycleUsage`).
    """
    result = cycle.result
    plan = _plan(cycle, state, entry.workload, assignment)
    if not plan.preempts:
        return assignment.message, False
    cycle.misfits.clear()  # the victims' usage now counts as released: what did not fit may fit
    cycle.without_victims.clear()
    for victim in plan.victims:
        cycle.claimed.add(victim.workload.key)
        cycle.claimed_in.setdefault(victim.workload.cluster_queue, []).append(victim.workload.key)
        victim_state = cycle.cache.cluster_queue_state(victim.workload.cluster_queue)
        if victim_state is not None:
            cycle.usage.release(victim_state.node, victim.workload.usage)
        if cycle.cache.is_assumed(victim.workload.key):
            result.withdrawn.append(victim.workload.key)  # not yet written: forgotten at the cycle's end
            continue
        victim_wl = cycle.cache.workload(victim.workload.key)
        result.preempted.append(
            PreemptionDecision(
                victim.workload.key, entry.workload.key, state.name, victim.reason, victim.message,
                victim_wl.metadata.resource_version if victim_wl is not None else None,
            )
        )
    cycle.usage.add(state.node, assignment.usage)
    cycle.held_trees.add(cycle.cache.cohort_root(state.name))
    return plan.preemptor_message(assignment.message), True


def _park(cycle: _Cycle, cursor: _Cursor, workload: PendingWorkload, assignment: FlavorAssignment, *, weighed: bool) -> bool:
    """Park a candidate left pending for lack of quota, unless something this cycle did not weigh may admit it.

    ``weighed``: when the assignment needs preemption, whether this
    candidate's own preemption was planned (and found no victims). One that
    was not (its queue planned for an earlier candidate) stays, as upstream
    requeues a head skipped for a pending preemption at once. A StrictFIFO
    queue parks nothing: its head blocks the others whether it fits or not.
    Returns whether it parked.

    Nor is one parked that would fit with preemption (it found no victims)
    when quota was given back in its quota tree within a requeue batch (1 s;
    :meth:`Cache.releasing <multikueue.core.cache.Cache.releasing>`;
    classical ordering only): it stays its queue's head, the Workloads
    behind it are not looked at in this cycle, and the next cycle looks at
    the queue again (``result.more``); it is parked once the tree's last
    release is older than that. Upstream puts a head that did not fit back
    on its heap, not among the inadmissible ones, when its cohort's
    inadmissible Workloads were requeued since it was popped (any release
    there does that; ``requeueIfNotPresent`` in
    ``pkg/cache/queue/cluster_queue.go``), so under a steady stream of
    releases each queue's head stays a high-priority Workload and every
    quota freed in the cohort goes to such a head. Parked at once, ours let
    the lower-priority Workloads behind it take that quota a piece at a time,
    and then the head (or its peers) took it back by preemption: on
    upstream's large-scale generator upstream wrote almost only large
    Workloads after its first 30 s, ours admitted medium and small ones
    around large ones parked in silence (decisions, stop 48). For the same
    reason a queue's walk in such a cycle stops at the first Workload of a
    lower priority than one parked so before the release (:func:`_held_back`).
    A Workload preempted and not re-admitted since is parked as before
    (:func:`_preempted` says why).
    """
    state = cursor.state
    if cursor.strict_fifo or (assignment.preemptible and not weighed):
        return False
    if cycle.cache.cohort_root(state.name) in cycle.held_trees:
        return False
    if assignment.preemptible and state.name in cycle.released and not _preempted(workload):
        # Quota was given back in its tree within a requeue batch: it stays its queue's head, nothing
        # behind it is looked at in this cycle, and the next cycle looks at the queue again.
        cursor.open = False
        _held_back(cycle.cache, cycle.result, state.name)
        return False
    cycle.cache.park(workload.key, state.name, for_victims=assignment.preemptible)
    cursor.parked += 1
    return True


#: Shapes remembered per ClusterQueue and cycle; a queue whose Workloads all differ gains nothing from more.
MISFIT_SHAPES = 8


def _known_misfit(cycle: _Cycle, state: ClusterQueueState, workload: PendingWorkload) -> FlavorAssignment | None:
    """The assignment that did not fit for the same pod sets earlier in this cycle, if it decides this one too.

    Within a cycle the free quota of a tree only shrinks (assumptions, a
    preemptor's held usage) until a preemption counts its victims' usage as
    released, which forgets every remembered misfit (:func:`_preempt`). So
    pod sets that did not fit still do not, and the candidate is told the
    same thing without assigning flavors again. Upstream gets there by
    looking at one head per ClusterQueue per cycle and parking those that
    do not fit as inadmissible; assigning (and formatting the "why") for each
    of hundreds of identical pending Workloads after every event was most of
    the scheduler's CPU in upstream's scalability test. Not used when a pod
    set may be partially admitted (its reduced counts depend on its priority
    and age), nor while the queue may still plan a preemption this cycle.
    """
    if workload.may_be_partial:  # its reduced counts depend on more than its pod sets
        return None
    assignment = cycle.misfits.get(state.name, {}).get(workload.shape)
    if assignment is not None and assignment.preemptible and _may_plan(cycle, state) and not _no_victims_known(cycle, state, workload):
        return None
    return assignment


def _may_plan(cycle: _Cycle, state: ClusterQueueState) -> bool:
    """Whether a candidate of this ClusterQueue that needs preemption gets its own plan this cycle.

    Once per ClusterQueue and cycle a plan finds victims; after that the
    queue's later candidates wait (its preemptor holds quota, the victims'
    is counted as released). A plan that found none changes nothing, so
    under classical preemption the next candidate needing preemption, of
    another shape, gets its own, as upstream weighs each head in its own
    cycle. Before, it was left unweighed and so awake (never parked): after
    a batch wake, the queue's higher-priority Workloads were parked again
    while quota was short, its lower-priority ones stayed awake, and when a
    higher-priority Workload finished a moment later they took what it gave
    back ahead of those parked (upstream's scalability test: the small
    Workloads admitted into the gap between two large ones while a backlog
    of medium ones waited, most of our evictions there). Fair sharing keeps
    one plan per queue and cycle: its plans weigh shares, not just shapes.
    """
    if state.name in cycle.result.planned_preemption:
        return False
    return cycle.fair_sharing is None or state.name not in cycle.weighed_fair


def _no_victims_known(cycle: _Cycle, state: ClusterQueueState, workload: PendingWorkload) -> bool:
    """Whether a candidate that needs preemption would find no victims: an earlier one of its queue with
    the same pod sets found none this cycle.

    Classical preemption only: a candidate later in queue order (lower priority, or the same and newer)
    may preempt a subset of what the earlier one may (``LowerPriority``, ``LowerOrNewerEqualPriority``,
    ``borrowWithinCohort``'s threshold; ``reclaimWithinCohort`` the same set), and the free quota has
    only shrunk since (a preemption with victims forgets every such shape, :func:`_preempt`). Such a
    candidate counts as weighed and is parked (:func:`_park`), as upstream's heads, popped one per
    cycle, each go to the inadmissible Workloads in turn. Left unparked (not weighed), the Workloads
    behind a waiting higher-priority one stayed candidates until the next change; when that was the
    higher-priority one finishing just before the next arrived, they were admitted into the gap and
    evicted, every time (upstream's scheduler scalability configs, 4 evictions per large Workload).
    """
    if cycle.fair_sharing is not None or workload.may_be_partial:
        return False
    return workload.shape in cycle.without_victims.get(state.name, ())


def _remember_misfit(cycle: _Cycle, state: ClusterQueueState, workload: PendingWorkload, assignment: FlavorAssignment) -> None:
    if workload.may_be_partial:
        return
    shapes = cycle.misfits.setdefault(state.name, {})
    if len(shapes) >= MISFIT_SHAPES and workload.shape not in shapes:
        del shapes[next(iter(shapes))]  # the oldest
    shapes[workload.shape] = assignment


def _order_key(entry: _Entry) -> tuple[bool, tuple[int, datetime, str, str]]:
    """The order of a round's entries, upstream's ``makeClassicalIterator`` (v0.19, default feature gates).

    Upstream sorts a cycle's entries by: quota already reserved first (a
    second pass; never the case here), preemptors waiting for evictions
    first (only with the alpha gate ``PrioritizePreemptorWorkloads``, off by
    default: not followed), the assignment's borrowing (``Borrows()``, the
    height of the lowest cohort subtree the request fits in; 0 = no
    borrowing, lower first; here a yes/no, which is the same in a flat
    cohort), higher priority (gate ``PrioritySortingWithinCohort``, on by
    default), then the queue order timestamp (creation time). The entry's
    mode (fit or preempt) is not a key: a preempt-mode entry is placed by the
    borrowing its preemption oracle predicts after preemption
    (:attr:`_Entry.borrows`). Names break the remaining ties.
    """
    return (entry.borrows, entry.workload.order)


def _fair_sharing_order(entries: list[_Entry]) -> Iterator[_Entry]:
    """The round's entries in upstream's fair-sharing order (``fairSharingIterator``), one at a time.

    Lazy on purpose: each entry is chosen after the previous one was
    processed, so the shares it is chosen by include the quota just
    assumed or held (upstream adds each admission to its cycle snapshot
    before popping the next entry). An entry whose ClusterQueue has no
    cohort comes out as it is (in classical order here; upstream's order
    between trees is a map's); otherwise a tournament over its quota tree
    picks the next one (:func:`_tournament`). ``entries`` is in classical
    order, which only decides between trees.
    """
    remaining = list(entries)
    while remaining:
        node = remaining[0].cursor.state.node
        if node.parent is None:
            yield remaining.pop(0)
            continue
        root = root_of(node)
        in_tree = {id(e.cursor.state.node): e for e in remaining if root_of(e.cursor.state.node) is root}
        if len(in_tree) == 1:
            winner = remaining[0]  # the last of its tree this round: no shares to compare
        else:
            winner = _tournament(root, in_tree, _shares(in_tree))
        remaining.remove(winner)
        yield winner


#: Per (cohort, entry): the DRS, with the entry admitted, of the cohort's child on the entry's path.
_Shares = dict[tuple[int, int], DRS]


def _shares(in_tree: Mapping[int, _Entry]) -> _Shares:
    """Upstream's ``computeDRS``: each entry's usage added to its ClusterQueue, the shares up to the root.

    The value stored for a cohort is the share of its child on the path
    from the entry's ClusterQueue (the queue itself or a lower cohort), so
    that a tournament compares the cohort's children with each child's
    nominee admitted. The simulated usage is taken back before returning.
    """
    shares: _Shares = {}
    for entry in in_tree.values():
        node = entry.cursor.state.node
        simulated = _CycleUsage()
        simulated.add(node, entry.assignment.usage)
        try:
            share = dominant_resource_share(node)
            child, ancestor = node, node.parent
            while ancestor is not None:
                shares[(id(ancestor), id(entry))] = share
                child, ancestor = ancestor, ancestor.parent
                share = dominant_resource_share(child)
        finally:
            simulated.undo()
    return shares


def _tournament(cohort: QuotaNode, in_tree: Mapping[int, _Entry], shares: _Shares) -> _Entry | None:
    """Upstream's ``runTournament``: each cohort nominates the best of its children's nominees, up to the root."""
    candidates = [
        nominee
        for child in cohort.children
        if child.is_cohort and (nominee := _tournament(child, in_tree, shares)) is not None
    ]
    candidates += [in_tree[id(child)] for child in cohort.children if not child.is_cohort and id(child) in in_tree]
    if not candidates:
        return None
    best = candidates[0]
    for current in candidates[1:]:
        if _fairer(current, best, cohort, shares):
            best = current
    return best


def _fairer(a: _Entry, b: _Entry, cohort: QuotaNode, shares: _Shares) -> bool:
    """Upstream's ``entryComparer.less`` at ``cohort`` (v0.19 default feature gates).

    1. not borrowing in the requested pairs first (``FairSharingPrioritizeNonBorrowing``, beta, on):
       the child on the entry's path, with the entry admitted, borrows from
       ``cohort`` in none of the (flavor, resource) pairs the entry uses;
    2. lower share (:func:`~multikueue.core.fairsharing.compare_drs`);
    3. higher priority (``PrioritySortingWithinCohort``, on);
    4. earlier queue order timestamp (creation), then names (ours, for a deterministic order).

    ``PrioritizePreemptorWorkloads`` (alpha, off) is not followed.
    """
    a_share, b_share = shares[(id(cohort), id(a))], shares[(id(cohort), id(b))]
    a_borrows = a_share.borrowing_on(a.assignment.usage)
    b_borrows = b_share.borrowing_on(b.assignment.usage)
    if a_borrows != b_borrows:
        return not a_borrows
    compared = compare_drs(a_share, b_share)
    if compared:
        return compared < 0
    return a.workload.order < b.workload.order


def _namespace_admitted(cycle: _Cycle, state: ClusterQueueState, namespace: str) -> bool:
    """Whether the ClusterQueue's ``namespaceSelector`` admits the namespace (once per pair and cycle)."""
    known = cycle.namespaces.get((state.name, namespace))
    if known is None:
        known = selector_matches(state.spec.namespace_selector, cycle.cache.namespace_labels(namespace))
        cycle.namespaces[(state.name, namespace)] = known
    return known


def _run_round(cycle: _Cycle, cursors: list[_Cursor]) -> list[_Cursor]:
    """Take the next candidate of every queue, admit those that fit; return the queues that go on."""
    cache, result = cycle.cache, cycle.result
    entries: list[_Entry] = []
    still_open: list[_Cursor] = []

    limit = cycle.heads_per_queue
    for cursor in cursors:
        if limit is not None and cursor.missed >= limit:
            # Enough heads not admitted: the rest waits for a next cycle, which comes soon when this one
            # parked some (the walk then starts after them) and otherwise with the next change.
            if cursor.parked and not cursor.exhausted:
                result.more = True
                cache.revisit(cursor.state.name)
            continue
        workload = cursor.next()
        if workload is None:
            continue
        still_open.append(cursor)
        if not _namespace_admitted(cycle, cursor.state, workload.key[0]):
            _wait(cycle, cursor, workload, messages.NAMESPACE_MISMATCH)
            continue
        if workload.invalid is not None:
            _wait(cycle, cursor, workload, workload.invalid)
            continue
        misfit = _known_misfit(cycle, cursor.state, workload)
        if misfit is not None:
            # Same pod sets as an earlier misfit of the cycle; one needing preemption gets here only
            # when its queue planned for another candidate (weighed only if that one found no victims).
            # Parked, it does not count towards heads_per_queue: it cost no assignment, and a cycle
            # that parks the whole run of them saves the next cycles from reaching the end of the
            # run one bound at a time, after the quota they wait for may have been freed.
            weighed = misfit.preemptible and _no_victims_known(cycle, cursor.state, workload)
            parked = _park(cycle, cursor, workload, misfit, weighed=weighed)
            _wait(cycle, cursor, workload, misfit.message, missed=not parked)
            continue
        tree = cache.cohort_root(cursor.state.name)
        entry = _Entry(cursor, workload, _assign(cycle, cursor.state, workload), assigned_at=cycle.tree_changes.get(tree, 0))
        if entry.assignment.fits:
            entry.borrows = entry.assignment.borrows
        elif entry.assignment.preemptible and cycle.fair_sharing is None:
            entry.borrows = _borrows_after_preemption(cycle, cursor.state, entry)
        entries.append(entry)

    entries.sort(key=_order_key)
    _decide(cycle, entries, defer=cycle.fair_sharing is None)
    return [cursor for cursor in still_open if cursor.open]


def _decide_deferred(cycle: _Cycle) -> None:
    """Decide the deferred candidates after the cycle's last round: round by round, each queue's in queue order."""
    by_queue: dict[int, list[_Entry]] = {}
    for entry in cycle.deferred:  # in the order deferred: each queue's in its queue order
        by_queue.setdefault(id(entry.cursor), []).append(entry)
    queues = list(by_queue.values())
    for depth in range(max((len(entries) for entries in queues), default=0)):
        round_ = [entries[depth] for entries in queues if len(entries) > depth]
        _decide(cycle, sorted(round_, key=_order_key), defer=False)


def _wait(cycle: _Cycle, cursor: _Cursor, workload: PendingWorkload, message: str, *, missed: bool = True) -> None:
    """The candidate stays pending with ``message``; in a StrictFIFO queue it blocks the rest of this cycle.

    ``missed``: it counts towards ``heads_per_queue``."""
    _report(cycle.result, workload, WorkloadReason.PENDING, message)
    cursor.missed += missed
    if cursor.strict_fifo:
        cursor.open = False


def _decide(cycle: _Cycle, entries: list[_Entry], *, defer: bool) -> None:
    """Admit, preempt for, or leave pending each entry, in the order given.

    ``defer``: an entry that fits only by borrowing is kept for the end of
    the cycle (``cycle.deferred``), after every round, instead of being
    admitted now. Upstream decides one head per queue per cycle, and sorts
    a cycle's heads so that those not borrowing go first; a round here is
    one such set of heads, and without deferring, a borrower of an early
    round would take quota that a queue's later candidate, within its
    nominal quota, then reclaims by preemption (most of our evictions in
    upstream's scalability test were such reclaims). Deferred, the borrower
    gets what the cycle's non-borrowing candidates left. In a StrictFIFO
    queue a deferred head blocks the queue for the rest of the cycle.

    Once a queue has a deferred candidate, its later candidates of the
    cycle are deferred too, fitting or not, and the deferred are decided in
    rounds again, so each queue's stay in queue order
    (:func:`_decide_deferred`): upstream decides no Workload of a
    ClusterQueue before that queue's head. Admitted in its round, a
    lower-priority Workload behind a deferred borrower took the quota the
    borrower then needed, and the borrower preempted it, cycle after cycle
    (most of our evictions in upstream's scalability test after the
    deferral were such).
    An entry is assigned again when the cycle changed its quota tree since
    its assignment (an earlier entry took or holds quota there;
    :attr:`_Cycle.tree_changes`); otherwise its assignment stands, as the
    same inputs give the same one. Before, every deferred entry was assigned
    again after the rounds, a tenth of a busy cycle with upstream's
    large-scale generator, though most trees had not changed since.
    """
    cache, result = cycle.cache, cycle.result
    for entry in entries if cycle.fair_sharing is None else _fair_sharing_order(entries):
        state = entry.cursor.state
        tree = cache.cohort_root(state.name)
        assignment = entry.assignment
        changes = cycle.tree_changes.get(tree, 0)
        if changes != entry.assigned_at:
            assignment = _assign(cycle, state, entry.workload)  # an earlier entry took or holds quota there
            entry.assignment, entry.assigned_at = assignment, changes
        if defer and (entry.cursor.deferring or (assignment.fits and assignment.borrows)):
            cycle.deferred.append(entry)
            entry.cursor.deferring = True
            entry.cursor.missed += 1  # counts towards heads_per_queue: not admitted in its round
            if entry.cursor.strict_fifo:
                entry.cursor.open = False
            continue
        if assignment.fits:
            admission = assignment.to_admission(state.name)
            cache.assume(entry.workload.key, admission)
            cycle.assumed_now.add(entry.workload.key)
            cycle.tree_changes[tree] = changes + 1
            result.admitted.append(
                AdmissionDecision(
                    key=entry.workload.key,
                    cluster_queue=state.name,
                    admission=admission,
                    admission_checks=state.admission_checks_for(assignment.flavor_names),
                )
            )
            continue
        message, preempts, weighed = assignment.message, False, False
        if assignment.preemptible and _may_plan(cycle, state):
            if cycle.fair_sharing is not None:
                cycle.weighed_fair.add(state.name)
            weighed = True
            message, preempts = _preempt(cycle, state, entry, assignment)
            if preempts:
                result.planned_preemption.add(state.name)
                cycle.tree_changes[tree] = changes + 1  # it holds its usage there now: later entries are re-assigned
            elif not entry.workload.may_be_partial:
                cycle.without_victims.setdefault(state.name, set()).add(entry.workload.shape)
        elif assignment.preemptible:
            weighed = _no_victims_known(cycle, state, entry.workload)
        if not preempts:
            _remember_misfit(cycle, state, entry.workload, assignment)
            _park(cycle, entry.cursor, entry.workload, assignment, weighed=weighed)
        _wait(cycle, entry.cursor, entry.workload, message)
