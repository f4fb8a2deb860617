"""Which admitted Workloads to preempt so that a pending one fits (pure; classical preemption).

:func:`plan_preemption` takes a pending Workload that does not fit
(:class:`Preemptor`) and what it would preempt in (:class:`PreemptionContext`:
its ClusterQueue's quota node, the queue's ``spec.preemption``, the admitted
Workloads holding quota in the same quota tree) and returns a
:class:`PreemptionPlan`: either the minimal list of :class:`Victim` s, each
with the reason for its ``Preempted`` condition and upstream's message, or
why preemption cannot help. No I/O, no clock (``ctx.now``), and the quota
tree passed in is as it was when the plan returns (the simulation changes
its usage and puts it back, :class:`Simulation`).

The behaviour reference is upstream Kueue's classical preemption
(``pkg/scheduler/preemption``: ``preemption.go``, ``classical/``,
``common/``, v0.19). Facts carried over:

- candidates are admitted Workloads that use at least one (flavor, resource)
  the preemptor needs preempting for, and that the ClusterQueue's policy
  allows: ``withinClusterQueue`` for its own Workloads, ``reclaimWithinCohort``
  for other ClusterQueues' Workloads, and only from ClusterQueues (and the
  cohorts between them and the common ancestor) that are above their nominal
  quota in those resources;
- a candidate of another ClusterQueue is preempted for
  ``InCohortReclamation`` when the preemptor has the hierarchical advantage
  (its request fits in the quota of a subtree the candidate only borrows
  from), or when the preemptor will not borrow after the preemption; for
  ``InCohortReclaimWhileBorrowing`` when ``borrowWithinCohort`` is
  ``LowerPriority``, the candidate's priority is lower than the preemptor's
  and not above ``maxPriorityThreshold``;
- candidates are tried in this order: Workloads already being evicted first,
  then other ClusterQueues' before the preemptor's own, then lower priority
  first, then the most recently admitted (``QuotaReserved`` transition)
  first, then by UID (ours: within one second of that transition, the later
  resourceVersion first, see :func:`candidate_order`); hierarchical-advantage
  candidates before the others, and the preemptor's own queue last, within
  both the evicted and the not-evicted part;
- candidates are removed in that order until the preemptor fits (in a run
  that allows it to borrow, or one that does not, tried in upstream's order);
  then each victim but the last is added back, last to first, and dropped
  from the list when the preemptor still fits without it (the "fill back"),
  so every victim left is needed;
- "fits" is the scheduler's quota arithmetic (:mod:`multikueue.core.quota`):
  every (flavor, resource) the preemptor uses is at most what its
  ClusterQueue may still use, and, in a run without borrowing, does not take
  the queue above its nominal quota.

Contract with the caller (the scheduler, once wired):

- call it only for a Workload whose flavor assignment failed for lack of
  unused quota, with the assignment it would use (``Preemptor.usage``, every
  (flavor, resource) it takes, and ``needs_preemption``, the pairs that did
  not fit; :func:`resources_needing_preemption` computes them). Workloads that
  can never fit (request above maximum capacity) are not for preemption;
- ``ctx.node`` is the preemptor's ClusterQueue node of the live quota tree,
  whose usage already counts every Workload in ``ctx.admitted`` (and
  Workloads assumed this cycle); ``ctx.admitted`` lists every Workload
  holding quota in that tree, already-evicted ones still holding quota
  included (with ``evicted=True``); others are ignored;
- for a plan with victims: evict each victim (``Evicted=True`` with reason
  ``Preempted`` and ``Preempted=True`` with ``Victim.reason``, both with
  ``Victim.message``), requeue it as any evicted Workload, and leave the
  preemptor pending (``QuotaReserved=False``, reason ``Pending``: upstream's
  ``WaitingForPreemptedWorkloads`` only shows behind its
  ``UnadmittedWorkloadsObservability`` gate) with
  :meth:`PreemptionPlan.preemptor_message`. The
  preemptor does not reserve quota in this cycle: it is admitted by a later
  cycle once the victims' quota is released. Victims claimed by another
  preemptor in the same cycle must not be used twice (upstream skips such a
  preemptor for the cycle);
- for a plan without victims: the preemptor stays pending with the flavor
  assigner's message (upstream says nothing more to the Workload; the plan's
  ``message`` is for logs and events).

Priorities are effective priorities (upstream's priority boost, if ever
supported, is the caller's business). ``Preemptor.queued_at`` and
``AdmittedWorkload.queued_at`` are upstream's queue order timestamp (the
creation time, or the eviction time where upstream uses that) and decide
``LowerOrNewerEqualPriority``.

Fair sharing (``InCohortFairSharing``) is :mod:`multikueue.core.fairpreemption`:
another search over the same :class:`Simulation`, with the candidate order
of :func:`candidate_order`.

Over 500 lines on purpose: candidates, their order, the simulation and the
fill-back are one algorithm whose correctness (the victims are necessary and
sufficient) is argued across all of them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import Enum, StrEnum, auto
from functools import cached_property

from multikueue.api.clusterqueue import (
    BorrowWithinCohortPolicy,
    ClusterQueuePreemption,
    ReclaimWithinCohortPolicy,
    WithinClusterQueuePolicy,
)
from multikueue.api.constants import PreemptionReason
from multikueue.core.cache.store import WorkloadKey
from multikueue.core.quota import (
    ZERO,
    FlavorResource,
    QuotaNode,
    above_quota,
    add_usage,
    available,
    borrows,
    guaranteed,
    leaves,
    remove_usage,
    root_of,
    set_usage,
)

__all__ = [
    "HUMAN_READABLE_REASONS",
    "NOT_ENOUGH_CANDIDATES_MESSAGE",
    "NO_CANDIDATES_MESSAGE",
    "PENDING_PREEMPTION_SUFFIX",
    "PREEMPTED_MESSAGE",
    "AdmittedWorkload",
    "Classification",
    "Outcome",
    "PreemptionContext",
    "PreemptionPlan",
    "Preemptor",
    "Simulation",
    "Victim",
    "candidate_order",
    "cluster_queue_path",
    "may_find_candidates",
    "may_free_enough",
    "plan_preemption",
    "resources_needing_preemption",
    "satisfies_policy",
]

# --- messages (upstream's wording, pkg/scheduler/preemption/preemption.go and pkg/scheduler/scheduler.go) ----

#: ``HumanReadablePreemptionReasons``: the reason's words in :data:`PREEMPTED_MESSAGE`.
HUMAN_READABLE_REASONS: Mapping[str, str] = {
    PreemptionReason.IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    PreemptionReason.IN_COHORT_RECLAMATION: "reclamation within the cohort",
    PreemptionReason.IN_COHORT_FAIR_SHARING: "Fair Sharing within the cohort",
    PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
}
#: ``preemptionMessage``: the message of a victim's ``Evicted`` and ``Preempted`` conditions.
PREEMPTED_MESSAGE = (
    "Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to {reason}; "
    "preemptor path: {preemptor_path}; preemptee path: {preemptee_path}"
)
#: The scheduler appends this to the preemptor's pending message while its victims are evicted.
PENDING_PREEMPTION_SUFFIX = ". Pending the preemption of {count} workload(s)"
#: Upstream logs this when no Workload may be preempted (the Workload's own message does not change).
NO_CANDIDATES_MESSAGE = "Workload requires preemption, but there are no candidate workloads allowed for preemption"
#: Ours: upstream does not tell this case apart from the one above.
NOT_ENOUGH_CANDIDATES_MESSAGE = (
    "Workload requires preemption, but preempting every candidate workload allowed for preemption would not free "
    "enough quota"
)
_UNKNOWN = "UNKNOWN"


# --- inputs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdmittedWorkload:
    """A Workload holding quota in the preemptor's quota tree: a possible victim."""

    key: WorkloadKey
    cluster_queue: str
    #: Effective priority.
    priority: int
    #: The quota it holds, per (flavor, resource) (:func:`~multikueue.core.cache.admission_usage`).
    usage: Mapping[FlavorResource, Decimal]
    #: Upstream's queue order timestamp (creation time); decides ``LowerOrNewerEqualPriority``.
    queued_at: datetime
    #: ``lastTransitionTime`` of ``QuotaReserved=True``; ``None`` (not seen yet) counts as ``ctx.now``.
    quota_reserved_at: datetime | None
    #: Already being evicted (``Evicted=True``) but still holding quota: preempted first.
    evicted: bool = False
    #: ``metadata.uid``: the last tie-break of the candidate order.
    uid: str = ""
    #: ``metadata.resourceVersion`` as a number (:func:`~multikueue.api.meta.version_number`), ``None``
    #: when not one: orders candidates reserved in the same second (see :func:`candidate_order`).
    version: int | None = None

    @cached_property
    def rank(self) -> tuple[object, ...] | None:
        """:func:`candidate_order` without its ClusterQueue step, once per Workload (``None`` while
        ``quota_reserved_at`` is not known: that order depends on ``now``). Why: plans sort the same
        candidates again and again within a cycle, and the memo keeps them across cycles."""
        return None if self.quota_reserved_at is None else _rank_at(self, self.quota_reserved_at)


@dataclass(frozen=True)
class Preemptor:
    """The pending Workload that needs quota."""

    key: WorkloadKey
    cluster_queue: str
    #: Effective priority.
    priority: int
    #: Upstream's queue order timestamp (creation time).
    queued_at: datetime
    #: Every (flavor, resource) the flavor assignment takes, with the amount (zero amounts included).
    usage: Mapping[FlavorResource, Decimal]
    #: The pairs of ``usage`` that do not fit now (upstream's assignment mode ``Preempt``); only
    #: Workloads using one of them are candidates. ``None``: computed with :func:`resources_needing_preemption`.
    needs_preemption: frozenset[FlavorResource] | None = None
    #: ``metadata.uid`` and the job's UID label, quoted in the victims' messages (``UNKNOWN`` when empty).
    uid: str = ""
    job_uid: str = ""


#: Plans' shared classification of the Workloads of a quota tree's queues (see :attr:`PreemptionContext.classified`).
Classification = dict[tuple[object, ...], list["_Candidate"]]


@dataclass(frozen=True)
class PreemptionContext:
    """Everything :func:`plan_preemption` needs besides the preemptor."""

    #: The preemptor's ClusterQueue node in the live quota tree (read, never modified).
    node: QuotaNode
    #: The preemptor ClusterQueue's ``spec.preemption``.
    policy: ClusterQueuePreemption
    #: Every Workload holding quota in that tree, as a list (Workloads of other trees are ignored) or grouped by
    #: ClusterQueue name (the scheduler's form: grouped once per cycle and tree, not once per plan).
    admitted: Sequence[AdmittedWorkload] | Mapping[str, Sequence[AdmittedWorkload]]
    #: Stands in for a ``quota_reserved_at`` not known yet.
    now: datetime
    #: Workloads of ``admitted`` that are not candidates (victims already claimed by another preemptor).
    excluded: Collection[WorkloadKey] = frozenset()
    #: Where plans over the same ``admitted`` share their classification of a ClusterQueue's Workloads
    #: (see :func:`_from_queue`); the scheduler passes one per quota tree and cycle. ``None``: not shared.
    classified: Classification | None = None


# --- outputs ---------------------------------------------------------------------------------------


class Outcome(StrEnum):
    """What the plan says."""

    #: Evict the victims, then the preemptor fits.
    PREEMPT = "Preempt"
    #: It fits already: nothing to preempt (the caller should not have asked).
    FITS = "Fits"
    #: No admitted Workload may be preempted (policies, priorities, nobody borrowing the needed resources).
    NO_CANDIDATES = "NoCandidates"
    #: Some may, but even all of them would not free enough quota.
    NOT_ENOUGH_CANDIDATES = "NotEnoughCandidates"


@dataclass(frozen=True)
class Victim:
    """One Workload to preempt."""

    workload: AdmittedWorkload
    #: A :class:`~multikueue.api.constants.PreemptionReason` value, for the ``Preempted`` condition.
    reason: str
    #: Upstream's message for both its ``Evicted`` and ``Preempted`` conditions.
    message: str


@dataclass(frozen=True)
class PreemptionPlan:
    """The decision: victims to evict (outcome ``Preempt``), or why there are none."""

    outcome: Outcome
    #: In the order they were chosen (the candidate order).
    victims: tuple[Victim, ...] = ()
    #: Why there are no victims (empty for ``Preempt``); for logs and events, not the Workload.
    message: str = ""

    @property
    def preempts(self) -> bool:
        """Whether there are victims to evict."""
        return self.outcome == Outcome.PREEMPT

    def preemptor_message(self, assignment_message: str) -> str:
        """The preemptor's pending message: the flavor assigner's, plus upstream's note while victims go."""
        if not self.victims:
            return assignment_message
        return assignment_message + PENDING_PREEMPTION_SUFFIX.format(count=len(self.victims))


# --- small pure helpers -------------------------------------------------------------------------------


def resources_needing_preemption(node: QuotaNode, usage: Mapping[FlavorResource, Decimal]) -> frozenset[FlavorResource]:
    """The (flavor, resource) pairs of ``usage`` that do not fit in what the ClusterQueue ``node`` may still use.

    Upstream's flavor assigner gives these the mode ``Preempt`` (when they fit
    in the maximum capacity; it also asks its preemption oracle first, which
    is not modelled here).
    """
    return frozenset(fr for fr, amount in usage.items() if amount > max(ZERO, available(node, fr)))


def satisfies_policy(policy: str, preemptor: Preemptor, candidate: AdmittedWorkload) -> bool:
    """Whether a ``withinClusterQueue``/``reclaimWithinCohort`` policy value lets the preemptor preempt the candidate.

    ``LowerOrNewerEqualPriority`` also takes an equal-priority candidate that
    was queued after the preemptor (upstream's optional 5-minute buffer,
    feature gate ``SchedulerTimestampPreemptionBuffer``, is off by default and
    not modelled).
    """
    lower = preemptor.priority > candidate.priority
    if policy == WithinClusterQueuePolicy.LOWER_PRIORITY:  # the same word in both policies
        return lower
    if policy == WithinClusterQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
        return lower or (preemptor.priority == candidate.priority and preemptor.queued_at < candidate.queued_at)
    return policy == ReclaimWithinCohortPolicy.ANY


def cluster_queue_path(node: QuotaNode) -> str:
    """``/root-cohort/.../cluster-queue``: how upstream's messages name a ClusterQueue's place in the tree."""
    names: list[str] = []
    current: QuotaNode | None = node
    while current is not None:
        names.append(current.name)
        current = current.parent
    return "/" + "/".join(reversed(names))


def _within_nominal(node: QuotaNode, frs: Iterable[FlavorResource]) -> bool:
    """Upstream's ``IsWithinNominalInResources``: the node's usage is at most its (subtree) quota in every pair.

    A plain loop, not ``all()`` over a generator (whose set-up was most of
    the cost): a search asks it for every candidate it tries.
    """
    usage, quota = node.usage, node.subtree_quota
    for fr in frs:
        if usage.get(fr, ZERO) > quota.get(fr, ZERO):
            return False
    return True


def _fits_in_quota(
    node: QuotaNode, requests: Mapping[FlavorResource, Decimal]
) -> tuple[bool, dict[FlavorResource, Decimal]]:
    """Upstream's ``QuantitiesFitInQuota``: whether the requests fit in the node's own (subtree) quota,
    and what is left of them after the node's guaranteed (unlendable) part."""
    fits = True
    remaining: dict[FlavorResource, Decimal] = {}
    for fr, amount in requests.items():
        usage = node.usage.get(fr, ZERO)
        if usage + amount > node.subtree_quota.get(fr, ZERO):
            fits = False
        remaining[fr] = max(ZERO, amount - max(ZERO, guaranteed(node, fr) - usage))
    return fits, remaining


# --- the simulation ---------------------------------------------------------------------------------------


class _Variant(Enum):
    """How a candidate may be preempted (upstream's ``preemptionVariant``)."""

    WITHIN_CLUSTER_QUEUE = auto()
    #: The preemptor has the hierarchical advantage: it reclaims quota of its own subtree.
    HIERARCHICAL_RECLAIM = auto()
    #: Only if the preemptor does not borrow after the preemption.
    RECLAIM_WITHOUT_BORROWING = auto()
    #: Even if the preemptor borrows (``borrowWithinCohort``).
    RECLAIM_WHILE_BORROWING = auto()

    @property
    def reason(self) -> str:
        """The victim's ``Preempted`` reason."""
        if self is _Variant.WITHIN_CLUSTER_QUEUE:
            return PreemptionReason.IN_CLUSTER_QUEUE
        if self is _Variant.RECLAIM_WHILE_BORROWING:
            return PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING
        return PreemptionReason.IN_COHORT_RECLAMATION


@dataclass(frozen=True)
class _Candidate:
    workload: AdmittedWorkload
    variant: _Variant
    #: For another ClusterQueue's Workload: the cohort where the preemptor's and its paths meet.
    meeting_point: QuotaNode | None


class _UsageJournal:
    """Usage changes made to a live quota tree, to be put back: each entry's value before its first change is saved.

    Why not a copy of the tree: with upstream's large-scale generator
    (cohorts of 100 ClusterQueues) a copy of the whole tree per plan was a
    fifth of the controller's CPU, while a plan changes the usage of a few
    paths only. Nothing else may read the tree until :meth:`restore` (the
    scheduler is synchronous).
    """

    def __init__(self) -> None:
        #: (node id, pair) -> (node, pair, the usage entry before the first change; None: there was none).
        self._saved: dict[tuple[int, FlavorResource], tuple[QuotaNode, FlavorResource, Decimal | None]] = {}

    def _note(self, node: QuotaNode, fr: FlavorResource) -> None:
        walk: QuotaNode | None = node
        while walk is not None:
            key = (id(walk), fr)
            if key not in self._saved:
                self._saved[key] = (walk, fr, walk.usage.get(fr))
            walk = walk.parent

    def remove(self, node: QuotaNode, usage: Mapping[FlavorResource, Decimal]) -> None:
        """Take ``usage`` out of ``node`` (and what it took from its cohorts)."""
        for fr, amount in usage.items():
            self._note(node, fr)
            remove_usage(node, fr, amount)

    def add(self, node: QuotaNode, usage: Mapping[FlavorResource, Decimal]) -> None:
        """Count ``usage`` in ``node`` (and its cohorts)."""
        for fr, amount in usage.items():
            self._note(node, fr)
            add_usage(node, fr, amount)

    def restore(self) -> None:
        """Put every changed entry back as it was (the index of children above quota with it)."""
        for node, fr, before in self._saved.values():
            set_usage(node, fr, before)
        self._saved.clear()


def _fits(node: QuotaNode, usage: Mapping[FlavorResource, Decimal], *, allow_borrowing: bool) -> bool:
    """Upstream's ``workloadFits``: every pair of ``usage`` fits in ``node`` now, without borrowing if asked."""
    for fr, amount in usage.items():
        if not allow_borrowing and borrows(node, fr, amount):
            return False
        if amount > max(ZERO, available(node, fr)):
            return False
    return True


@dataclass
class Simulation:
    """The live quota tree, in which Workloads are removed and added back, and put back as it was afterwards.

    ``held`` groups the admitted Workloads of the tree by ClusterQueue
    (:meth:`workloads_in` leaves out the preemptor and the ``excluded``
    ones); ``needs`` are the pairs needing preemption.
    Open it with :meth:`open` (a context manager): the changes go through a
    :class:`_UsageJournal`, restored on leaving, exceptions included.
    """

    preemptor: Preemptor
    needs: frozenset[FlavorResource]
    node: QuotaNode
    #: ClusterQueue name -> the Workloads holding quota there (read through :meth:`workloads_in`).
    held: Mapping[str, Sequence[AdmittedWorkload]]
    #: Keys of Workloads that are not candidates besides the preemptor (victims claimed by another preemptor);
    #: read, not copied (one plan per candidate; a cycle may have claimed hundreds).
    excluded: Collection[WorkloadKey]
    #: See :attr:`PreemptionContext.classified`.
    classified: Classification | None = None
    #: ClusterQueue nodes met so far, by name (see :meth:`node_of`).
    _met: dict[str, QuotaNode] = field(default_factory=dict)
    _all: dict[str, QuotaNode] | None = None
    _journal: _UsageJournal = field(default_factory=_UsageJournal)

    @classmethod
    @contextmanager
    def open(cls, preemptor: Preemptor, ctx: PreemptionContext) -> Iterator[Simulation]:
        """The simulation on ``ctx.node``'s tree; the tree's usage is restored when the block ends."""
        node = ctx.node
        needs = preemptor.needs_preemption
        if needs is None:
            needs = resources_needing_preemption(node, preemptor.usage)
        if isinstance(ctx.admitted, Mapping):
            sim = cls(preemptor, needs, node, ctx.admitted, ctx.excluded, ctx.classified)
        else:
            sim = cls(preemptor, needs, node, {}, ctx.excluded)
            grouped: dict[str, list[AdmittedWorkload]] = {}
            for workload in ctx.admitted:
                if workload.cluster_queue in sim.queues:
                    grouped.setdefault(workload.cluster_queue, []).append(workload)
            sim.held = grouped
        sim.met(node)
        try:
            yield sim
        finally:
            sim._journal.restore()

    def workloads_in(self, queue: str) -> Iterator[AdmittedWorkload]:
        """The Workloads holding quota in ClusterQueue ``queue`` that may be candidates."""
        preemptor, excluded = self.preemptor.key, self.excluded
        for workload in self.held.get(queue, ()):
            if workload.key != preemptor and workload.key not in excluded:
                yield workload

    @property
    def queues(self) -> dict[str, QuotaNode]:
        """Every ClusterQueue node of the tree, by name (walked on first use: most plans look at a few)."""
        if self._all is None:
            self._all = {leaf.name: leaf for leaf in leaves(root_of(self.node))}
        return self._all

    def met(self, node: QuotaNode) -> None:
        """Remember a ClusterQueue node found while walking the tree, so :meth:`node_of` needs no walk."""
        self._met[node.name] = node

    def node_of(self, queue: str) -> QuotaNode:
        """The node of ClusterQueue ``queue`` (one met, else from the whole tree)."""
        node = self._met.get(queue)
        return node if node is not None else self.queues[queue]

    def remove_usage(self, node: QuotaNode, usage: Mapping[FlavorResource, Decimal]) -> None:
        """Take ``usage`` out of ``node`` (and what it took from its cohorts), journalled."""
        self._journal.remove(node, usage)

    def add_usage(self, node: QuotaNode, usage: Mapping[FlavorResource, Decimal]) -> None:
        """Count ``usage`` in ``node`` (and its cohorts), journalled."""
        self._journal.add(node, usage)

    def remove(self, workload: AdmittedWorkload) -> None:
        self.remove_usage(self.node_of(workload.cluster_queue), workload.usage)

    def add(self, workload: AdmittedWorkload) -> None:
        self.add_usage(self.node_of(workload.cluster_queue), workload.usage)

    def fits(self, *, allow_borrowing: bool) -> bool:
        """Upstream's ``workloadFits``: every pair of the preemptor's usage fits, without borrowing if asked."""
        return _fits(self.node, self.preemptor.usage, allow_borrowing=allow_borrowing)

    def under_nominal(self) -> bool:
        """Upstream's ``queueUnderNominalInResourcesNeedingPreemption``: strictly below nominal in every needed pair."""
        return all(self.node.usage.get(fr, ZERO) < self.node.subtree_quota.get(fr, ZERO) for fr in self.needs)


# --- candidates ---------------------------------------------------------------------------------------------


def _borrowing_forbidden(policy: ClusterQueuePreemption) -> bool:
    return policy.borrow_within_cohort.policy == BorrowWithinCohortPolicy.NEVER


def _from_queue(
    sim: Simulation, policy: ClusterQueuePreemption, queue: str, meeting_point: QuotaNode | None, advantage: bool
) -> list[_Candidate]:
    """The queue's Workloads the preemptor may preempt, each with how (upstream's ``classifyPreemptionVariant``).

    The policy is read once per queue, not once per Workload: a plan in a
    saturated cohort classifies hundreds of them. With ``sim.classified``
    the classification is shared by the plans of a cycle that ask the same
    question (the same queue, policy, needs, preemptor priority and
    meeting point): each plan in a cohort of 100 ClusterQueues reads the
    same queues above their nominal quota, and classifying them again for
    every plan was a twentieth of the controller's time with upstream's
    large-scale generator. Only the Workloads claimed since (``excluded``)
    are left out per plan.
    """
    preemptor, needs = sim.preemptor, sim.needs
    own = queue == preemptor.cluster_queue
    rule = (policy.within_cluster_queue if own else policy.reclaim_within_cohort).value
    if own:
        fixed: _Variant | None = _Variant.WITHIN_CLUSTER_QUEUE
    elif advantage:
        fixed = _Variant.HIERARCHICAL_RECLAIM
    elif _borrowing_forbidden(policy):
        fixed = _Variant.RECLAIM_WITHOUT_BORROWING
    else:
        fixed = None  # by priority, below
    threshold = policy.borrow_within_cohort.max_priority_threshold
    shared = sim.classified
    if shared is None:
        found = _classify(sim, queue, rule, fixed, threshold, meeting_point)
    else:
        queued_at = preemptor.queued_at if rule == WithinClusterQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY else None
        limit = threshold if fixed is None else None
        question = (queue, rule, fixed, limit, needs, preemptor.priority, queued_at, id(meeting_point))
        found = shared.get(question)
        if found is None:
            found = shared[question] = _classify(sim, queue, rule, fixed, threshold, meeting_point)
    excluded = sim.excluded
    return [c for c in found if c.workload.key not in excluded and c.workload.key != preemptor.key]


def _classify(
    sim: Simulation, queue: str, rule: str, fixed: _Variant | None, threshold: int | None, meeting_point: QuotaNode | None
) -> list[_Candidate]:
    """:func:`_from_queue`'s candidates, in holder order, with no Workload left out for being claimed."""
    preemptor, needs = sim.preemptor, sim.needs
    result = []
    for workload in sim.held.get(queue, ()):
        if needs.isdisjoint(workload.usage) or not satisfies_policy(rule, preemptor, workload):
            continue
        variant = fixed
        if variant is None:
            above = workload.priority >= preemptor.priority or (threshold is not None and workload.priority > threshold)
            variant = _Variant.RECLAIM_WITHOUT_BORROWING if above else _Variant.RECLAIM_WHILE_BORROWING
        result.append(_Candidate(workload, variant, meeting_point))
    return result


def _collect_in_subtree(
    sim: Simulation,
    policy: ClusterQueuePreemption,
    current: QuotaNode,
    subtree_root: QuotaNode,
    skip: QuotaNode | None,
    advantage: bool,
    into: list[_Candidate],
) -> None:
    """Candidates of the ClusterQueues below ``current`` that are above nominal, down paths that are above nominal."""
    for child in above_quota(current, sim.needs):
        if child is skip or child is sim.node:
            continue
        if child.is_cohort:
            _collect_in_subtree(sim, policy, child, subtree_root, skip, advantage, into)
        else:
            sim.met(child)
            into.extend(_from_queue(sim, policy, child.name, subtree_root, advantage))


def _cohort_candidates(sim: Simulation, policy: ClusterQueuePreemption) -> tuple[list[_Candidate], list[_Candidate]]:
    """Other ClusterQueues' candidates: (with hierarchical advantage, without).

    Walking up from the preemptor's cohort, each level's new subtree is
    searched; once the preemptor's request fits in the quota of the subtree
    walked so far, it has the advantage over everything found further up.
    """
    with_advantage: list[_Candidate] = []
    by_priority: list[_Candidate] = []
    if sim.node.parent is None or policy.reclaim_within_cohort == ReclaimWithinCohortPolicy.NEVER:
        return with_advantage, by_priority
    advantage, remaining = _fits_in_quota(sim.node, sim.preemptor.usage)
    previous: QuotaNode | None = None
    cohort = sim.node.parent
    while cohort is not None:
        into = with_advantage if advantage else by_priority
        _collect_in_subtree(sim, policy, cohort, cohort, previous, advantage, into)
        fits, remaining = _fits_in_quota(cohort, remaining)
        advantage = advantage or fits
        previous, cohort = cohort, cohort.parent
    return with_advantage, by_priority


def candidate_order(workload: AdmittedWorkload, cluster_queue: str, now: datetime) -> tuple[object, ...]:
    """Sort key of upstream's ``CandidatesOrdering`` (without the LocalQueue fair-sharing usage step).

    Being evicted first, other ClusterQueues' before the preemptor's own
    (``cluster_queue``), lower priority, the most recently admitted, UID.

    "Most recently admitted" is read from ``QuotaReserved``'s transition
    time, which the API keeps to the second; Workloads reserved in the same
    second are then ordered by their resourceVersion, the later write first
    (versions of one resource are comparable, KEP-5504), before the UID.
    Why: the reason for the order is to take back the quota whose work has
    run the least, and a scheduler that reserves many Workloads a second
    would otherwise pick among them at random (upstream keeps its own
    admissions' times to the nanosecond in memory until its informer brings
    the stored object; here the order comes from the objects only). For an
    admitted Workload the last write is usually its reservation; a later
    one (a check's state, ``PodsReady``) makes it look a little younger,
    within that one second.
    """
    return (not workload.evicted, workload.cluster_queue == cluster_queue, *_rank(workload, now)[1:])


def _rank(workload: AdmittedWorkload, now: datetime) -> tuple[object, ...]:
    """:func:`candidate_order` without the ClusterQueue step (see :attr:`AdmittedWorkload.rank`)."""
    rank = workload.rank
    return rank if rank is not None else _rank_at(workload, now)


def _rank_at(workload: AdmittedWorkload, reserved: datetime) -> tuple[object, ...]:
    """:func:`_rank` with ``reserved`` as the time the Workload's quota was reserved."""
    return (not workload.evicted, workload.priority, -reserved.timestamp(), -(workload.version or 0), workload.uid, workload.key)


@dataclass
class _Candidates:
    ordered: list[_Candidate]
    none_from_other_queues: bool
    none_with_advantage: bool


def _candidates(sim: Simulation, policy: ClusterQueuePreemption, now: datetime) -> _Candidates:
    own: list[_Candidate] = []
    if policy.within_cluster_queue != WithinClusterQueuePolicy.NEVER:
        own = _from_queue(sim, policy, sim.preemptor.cluster_queue, None, False)
    with_advantage, by_priority = _cohort_candidates(sim, policy)
    groups = [with_advantage, by_priority, own]
    for group in groups:  # one group is all the preemptor's queue or none of it: candidate_order's queue step is even
        group.sort(key=lambda c: _rank(c.workload, now))
    evicted = [c for group in groups for c in group if c.workload.evicted]
    running = [c for group in groups for c in group if not c.workload.evicted]
    return _Candidates(
        ordered=evicted + running,
        none_from_other_queues=not with_advantage and not by_priority,
        none_with_advantage=not with_advantage,
    )


def _own_priority_may_go(policy: ClusterQueuePreemption, preemptor: Preemptor, priority: int) -> bool:
    """Whether ``withinClusterQueue`` may let the preemptor take some Workload of its own queue at ``priority``
    (an equal one only under ``LowerOrNewerEqualPriority``, if queued after it: counted as possible)."""
    within = policy.within_cluster_queue
    if within == WithinClusterQueuePolicy.NEVER:
        return False
    equal_too = within == WithinClusterQueuePolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
    return priority < preemptor.priority or (equal_too and priority == preemptor.priority)


def may_find_candidates(
    preemptor: Preemptor, node: QuotaNode, policy: ClusterQueuePreemption, own_priorities: Iterable[int]
) -> bool:
    """False only when :func:`plan_preemption` would find no candidate: a necessary condition, no tree copied.

    ``node`` is the preemptor's ClusterQueue in the live tree and
    ``own_priorities`` the priorities of the Workloads holding quota in it. A
    candidate of its own queue needs a priority ``withinClusterQueue`` lets it
    preempt; one of another queue needs ``reclaimWithinCohort`` and that queue
    above its nominal quota in a pair the preemptor uses (the pairs needing
    preemption are among them). Why: a saturated cohort sends most pending
    Workloads to preemption, and in upstream's scalability test 98 % of those
    plans found nobody: each one copied the tree and weighed every holder.
    """
    if any(_own_priority_may_go(policy, preemptor, p) for p in own_priorities):
        return True
    if node.parent is None or policy.reclaim_within_cohort == ReclaimWithinCohortPolicy.NEVER:
        return False
    used = preemptor.usage.keys()
    return any(leaf is not node for leaf in _leaves_above_quota(root_of(node), used))


def may_free_enough(
    preemptor: Preemptor,
    node: QuotaNode,
    policy: ClusterQueuePreemption,
    own_usage: Mapping[int, Mapping[FlavorResource, Decimal]],
) -> bool:
    """False only when no plan of :func:`plan_preemption` can have victims: even with everything a plan
    could take gone, the preemptor does not fit.

    ``own_usage`` is the usage of the Workloads holding quota in the
    preemptor's ClusterQueue, summed per priority. Taken away, in the live
    tree and put back before returning: the usage of the priorities
    ``withinClusterQueue`` allows (equal ones too under
    ``LowerOrNewerEqualPriority``); if the preemptor does not fit then, with
    ``reclaimWithinCohort`` also the whole usage of every other ClusterQueue
    of the tree above its nominal quota in a pair the preemptor uses (the
    only queues a plan takes from), after which it must fit without
    borrowing, unless a run that lets it borrow may take other queues'
    Workloads (``borrowWithinCohort`` allows it, or the hierarchical
    advantage is possible). Sound because taking usage away anywhere never
    lowers what a ClusterQueue may use (:func:`~multikueue.core.quota.available`
    only grows, and the queue's own borrowing only shrinks), so a plan's
    victims, a part of that, free no more. Why: in a saturated cohort of 100
    ClusterQueues most plans weighed a few hundred candidates to find they
    were not enough (upstream's large-scale generator: two thirds of the
    plans, mostly small Workloads in queues above their nominal quota, which
    may only reclaim without borrowing), at about nine times this cost.
    """
    usage = preemptor.usage
    # Whether a run that lets the preemptor borrow may take other queues' Workloads: with borrowWithinCohort
    # Never, only those it has the hierarchical advantage over (see _cohort_candidates), which needs its
    # request to fit in the quota of its queue or of a cohort on its path.
    others_while_borrowing = not _borrowing_forbidden(policy)
    remaining: Mapping[FlavorResource, Decimal] = usage
    walk: QuotaNode | None = node
    while walk is not None and walk.parent is not None and not others_while_borrowing:
        others_while_borrowing, remaining = _fits_in_quota(walk, remaining)
        walk = walk.parent
    journal = _UsageJournal()
    try:
        for priority, summed in own_usage.items():
            if _own_priority_may_go(policy, preemptor, priority):
                journal.remove(node, summed)
        if _fits(node, usage, allow_borrowing=True):
            return True
        if node.parent is None or policy.reclaim_within_cohort == ReclaimWithinCohortPolicy.NEVER:
            return False
        if not others_while_borrowing and any(borrows(node, fr, amount) for fr, amount in usage.items()):
            return False  # it would still borrow, whatever other queues give back: no run takes from them
        for leaf in list(_leaves_above_quota(root_of(node), usage)):  # listed first: removals change the index
            if leaf is not node:
                journal.remove(leaf, {fr: leaf.usage[fr] for fr in usage if fr in leaf.usage})
        return _fits(node, usage, allow_borrowing=others_while_borrowing)
    finally:
        journal.restore()


def _leaves_above_quota(cohort: QuotaNode, frs: Iterable[FlavorResource]) -> Iterator[QuotaNode]:
    """The ClusterQueues of the tree below ``cohort`` above their nominal quota in a pair of ``frs``."""
    for child in above_quota(cohort, frs):
        if not child.is_cohort:
            yield child
    for child in cohort.child_cohorts:
        yield from _leaves_above_quota(child, frs)


def _still_valid(sim: Simulation, candidate: _Candidate, allow_borrowing: bool) -> bool:
    """Whether the candidate may still be taken in this run (earlier removals may have ended its queue's borrowing)."""
    workload = candidate.workload
    if workload.cluster_queue == sim.preemptor.cluster_queue:
        return True
    if allow_borrowing and candidate.variant is _Variant.RECLAIM_WITHOUT_BORROWING:
        return False
    node: QuotaNode | None = sim.node_of(workload.cluster_queue)
    while node is not None and node is not candidate.meeting_point:
        if _within_nominal(node, sim.needs):
            return False
        node = node.parent
    return True


# --- the search -----------------------------------------------------------------------------------------------


def _fill_back(sim: Simulation, targets: list[_Candidate], *, allow_borrowing: bool) -> list[_Candidate]:
    """Add back every victim but the last, last to first; keep out only those the preemptor still needs gone."""
    dropped: set[int] = set()
    for index in range(len(targets) - 2, -1, -1):
        workload = targets[index].workload
        sim.add(workload)
        if sim.fits(allow_borrowing=allow_borrowing):
            dropped.add(index)
        else:
            sim.remove(workload)
    return [c for index, c in enumerate(targets) if index not in dropped]


def _classical_search(
    sim: Simulation, policy: ClusterQueuePreemption, candidates: _Candidates
) -> list[_Candidate] | None:
    """Upstream's ``classicalPreemptions``: the victims, or ``None`` when no run makes the preemptor fit.

    A run either lets the preemptor borrow after the preemption (then
    candidates allowed only without borrowing are skipped) or not; upstream
    tries them in the order chosen below.
    """
    forbidden = _borrowing_forbidden(policy)
    if candidates.none_from_other_queues or (forbidden and not sim.under_nominal()):
        runs = (True,)
    elif forbidden and candidates.none_with_advantage:
        runs = (False, True)
    else:
        runs = (True, False)
    for allow_borrowing in runs:
        targets: list[_Candidate] = []
        for candidate in candidates.ordered:
            if not _still_valid(sim, candidate, allow_borrowing):
                continue
            sim.remove(candidate.workload)
            targets.append(candidate)
            if sim.fits(allow_borrowing=allow_borrowing):
                return _fill_back(sim, targets, allow_borrowing=allow_borrowing)
        for candidate in targets:
            sim.add(candidate.workload)
    return None


def plan_preemption(preemptor: Preemptor, ctx: PreemptionContext) -> PreemptionPlan:
    """Decide which admitted Workloads to preempt so that ``preemptor`` fits (see the module docstring)."""
    with Simulation.open(preemptor, ctx) as sim:
        if sim.fits(allow_borrowing=True):
            return PreemptionPlan(Outcome.FITS)
        candidates = _candidates(sim, ctx.policy, ctx.now)
        if not candidates.ordered:
            return PreemptionPlan(Outcome.NO_CANDIDATES, message=NO_CANDIDATES_MESSAGE)
        chosen = _classical_search(sim, ctx.policy, candidates)
        if chosen is None:
            return PreemptionPlan(Outcome.NOT_ENOUGH_CANDIDATES, message=NOT_ENOUGH_CANDIDATES_MESSAGE)
        preemptor_path = cluster_queue_path(sim.node)
        victims = tuple(
            Victim(
                workload=c.workload,
                reason=c.variant.reason,
                message=PREEMPTED_MESSAGE.format(
                    uid=preemptor.uid or _UNKNOWN,
                    job_uid=preemptor.job_uid or _UNKNOWN,
                    reason=HUMAN_READABLE_REASONS[c.variant.reason],
                    preemptor_path=preemptor_path,
                    preemptee_path=cluster_queue_path(sim.node_of(c.workload.cluster_queue)),
                ),
            )
            for c in chosen
        )
        return PreemptionPlan(Outcome.PREEMPT, victims)
