"""Which admitted Workloads to preempt when fair sharing is on (pure).

:func:`plan_fair_preemption` is the fair-sharing counterpart of
:func:`multikueue.core.preemption.plan_preemption`: same inputs
(:class:`~multikueue.core.preemption.Preemptor`,
:class:`~multikueue.core.preemption.PreemptionContext`) plus the
Configuration's ``fairSharing.preemptionStrategies``, same output
(:class:`~multikueue.core.preemption.PreemptionPlan`, victims with upstream's
reasons and messages) and the same contract with the scheduler. The
simulation changes the live quota tree's usage and puts it back
(:class:`~multikueue.core.preemption.Simulation`).

Behaviour reference: upstream Kueue's ``fairPreemptions``
(``pkg/scheduler/preemption/preemption.go``) and
``pkg/scheduler/preemption/fairsharing/`` (v0.19, default feature gates):

- candidates: the preemptor's own ClusterQueue's Workloads that
  ``withinClusterQueue`` allows, and, when ``reclaimWithinCohort`` is not
  ``Never``, the Workloads it allows in every other ClusterQueue of the tree
  that borrows (usage above nominal) in a pair needing preemption; only
  Workloads using such a pair; sorted as upstream's ``CandidatesOrdering``.
  ``borrowWithinCohort`` plays no part;
- the preemptor's usage is added to its ClusterQueue for every share computed
  below (and taken out again to check whether it fits);
- target ClusterQueues come from a walk down the cohort tree
  (``TargetClusterQueueOrdering``): at each cohort, the child with the
  highest share among those still borrowing (or on the preemptor's path, or
  the preemptor's queue) with candidates left; a cohort wins ties against a
  ClusterQueue; ties between ClusterQueues go to the one whose first
  candidate sorts first. A ClusterQueue that stops borrowing or runs out of
  candidates is never chosen again;
- first strategy (``preemptionStrategies[0]``) over the walk: a Workload of
  the preemptor's own queue is preempted (``InClusterQueue``); when the
  preemptor's queue, with the preemptor, stays within nominal in the pairs
  needing preemption, any candidate is (``InCohortReclamation``,
  ``FairSharingPreemptWithinNominal``, on by default); otherwise the shares
  of the two *almost least common ancestors* (the nodes just below the
  lowest cohort both are under) decide: ``LessThanOrEqualToFinalShare``
  preempts when the preemptor's share is at most the target's share without
  the candidate, ``LessThanInitialShare`` when it is below the target's
  share before (``InCohortFairSharing``); after a preemption the walk starts
  again from the root; a candidate that fails is kept for the second
  strategy. A preemptor whose share is infinite (weight 0) skips a target
  whose share is finite;
- second strategy (rule S2-b, ``LessThanInitialShare``, when a second one is
  configured): over the kept candidates, at most one per ClusterQueue;
- the preemptor must fit after the removals (it may borrow); the victims are
  then filled back as classical preemption does, so every one is needed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from multikueue.api.clusterqueue import ReclaimWithinCohortPolicy, WithinClusterQueuePolicy
from multikueue.api.configuration import DEFAULT_PREEMPTION_STRATEGIES, PreemptionStrategy
from multikueue.api.constants import PreemptionReason
from multikueue.core.fairsharing import DRS, NEGATIVE_DRS, compare_drs, dominant_resource_share
from multikueue.core.preemption import (
    HUMAN_READABLE_REASONS,
    NO_CANDIDATES_MESSAGE,
    NOT_ENOUGH_CANDIDATES_MESSAGE,
    PREEMPTED_MESSAGE,
    AdmittedWorkload,
    Outcome,
    PreemptionContext,
    PreemptionPlan,
    Preemptor,
    Simulation,
    Victim,
    candidate_order,
    cluster_queue_path,
    satisfies_policy,
)
from multikueue.core.quota import ZERO, QuotaNode, root_of

__all__ = ["plan_fair_preemption", "strategy_passes"]

_UNKNOWN = "UNKNOWN"


def strategy_passes(strategy: PreemptionStrategy, preemptor_new: DRS, target_old: DRS, target_new: DRS) -> bool:
    """Upstream's ``LessThanOrEqualToFinalShare`` (rule S2-a) and ``LessThanInitialShare`` (rule S2-b)."""
    if strategy == PreemptionStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return compare_drs(preemptor_new, target_new) <= 0
    return compare_drs(preemptor_new, target_old) < 0


@dataclass
class _Target:
    workload: AdmittedWorkload
    reason: str


@dataclass
class _Search:
    """The simulation with the preemptor's usage added, and the walk over target ClusterQueues."""

    sim: Simulation
    #: Per ClusterQueue, its candidates still to consider, in candidate order.
    candidates: dict[str, list[AdmittedWorkload]]
    #: Stands in for a ``quota_reserved_at`` not known yet (``ctx.now``).
    now: datetime
    pruned: set[int] = field(default_factory=set)
    targets: list[_Target] = field(default_factory=list)

    @property
    def preemptor_node(self) -> QuotaNode:
        return self.sim.node

    def on_preemptor_path(self, cohort: QuotaNode) -> bool:
        node = self.preemptor_node.parent
        while node is not None:
            if node is cohort:
                return True
            node = node.parent
        return False

    # --- usage of the preemptor and of the victims ------------------------------------------------

    def add_preemptor(self) -> None:
        self.sim.add_usage(self.preemptor_node, self.sim.preemptor.usage)

    def remove_preemptor(self) -> None:
        self.sim.remove_usage(self.preemptor_node, self.sim.preemptor.usage)

    def fits(self) -> bool:
        """Upstream's ``workloadFitsForFairSharing``: the preemptor fits (borrowing allowed) without its own usage."""
        self.remove_preemptor()
        try:
            return self.sim.fits(allow_borrowing=True)
        finally:
            self.add_preemptor()

    def take(self, workload: AdmittedWorkload, reason: str) -> bool:
        """Preempt ``workload`` in the simulation; whether the preemptor fits now."""
        self.sim.remove(workload)
        self.targets.append(_Target(workload, reason))
        return self.fits()

    # --- the walk (TargetClusterQueueOrdering) ------------------------------------------------------

    def pop(self, queue: QuotaNode) -> AdmittedWorkload:
        return self.candidates[queue.name].pop(0)

    def has_candidates(self, queue: QuotaNode) -> bool:
        return bool(self.candidates.get(queue.name))

    def walk(self) -> Iterator[QuotaNode]:
        """Target ClusterQueues, the highest share first, until every node is pruned.

        The caller pops a candidate of each queue yielded (or prunes the
        queue) before asking for the next, so the walk always progresses.
        """
        node = self.preemptor_node
        if node.parent is None:
            while id(node) not in self.pruned and self.has_candidates(node):
                yield node
            return
        root = root_of(node)
        while id(root) not in self.pruned:
            target = self._next_target(root)
            if target is not None:
                yield target

    def _next_target(self, cohort: QuotaNode) -> QuotaNode | None:
        best_queue: QuotaNode | None = None
        best_queue_share = NEGATIVE_DRS
        best_cohort: QuotaNode | None = None
        best_cohort_share = NEGATIVE_DRS
        for child in cohort.children:
            if id(child) in self.pruned or child.is_cohort:
                continue
            share = dominant_resource_share(child)
            if (not share.borrowing and child is not self.preemptor_node) or not self.has_candidates(child):
                self.pruned.add(id(child))
                continue
            compared = compare_drs(share, best_queue_share)
            if compared == 0 and best_queue is not None:
                if self._first_key(child) < self._first_key(best_queue):
                    best_queue = child
            elif compared > 0:
                best_queue, best_queue_share = child, share
        for child in cohort.children:
            if id(child) in self.pruned or not child.is_cohort:
                continue
            share = dominant_resource_share(child)
            if not share.borrowing and not self.on_preemptor_path(child):
                self.pruned.add(id(child))
            elif compare_drs(share, best_cohort_share) >= 0:
                best_cohort, best_cohort_share = child, share
        if best_cohort is None and best_queue is None:
            self.pruned.add(id(cohort))
            return None
        if best_cohort is not None and compare_drs(best_cohort_share, best_queue_share) >= 0:
            return self._next_target(best_cohort)
        return best_queue

    def _first_key(self, queue: QuotaNode) -> tuple[object, ...]:
        first = self.candidates[queue.name][0]
        return candidate_order(first, self.sim.preemptor.cluster_queue, self.now)

    # --- shares (almost least common ancestors) ------------------------------------------------------

    def _almost_lcas(self, target: QuotaNode) -> tuple[QuotaNode, QuotaNode]:
        lca = target.parent
        while lca is not None and not self.on_preemptor_path(lca):
            lca = lca.parent
        assert lca is not None, "a target ClusterQueue is in the preemptor's tree"
        return _child_towards(self.preemptor_node, lca), _child_towards(target, lca)

    def shares(self, target: QuotaNode) -> tuple[DRS, DRS]:
        """(the preemptor's new share, the target's old share) at their almost least common ancestors."""
        preemptor_side, target_side = self._almost_lcas(target)
        return dominant_resource_share(preemptor_side), dominant_resource_share(target_side)

    def target_share_after_removal(self, target: QuotaNode, workload: AdmittedWorkload) -> DRS:
        self.sim.remove(workload)
        try:
            return dominant_resource_share(self._almost_lcas(target)[1])
        finally:
            self.sim.add(workload)


def _child_towards(node: QuotaNode, ancestor: QuotaNode) -> QuotaNode:
    """The node on the path from ``node`` up to ``ancestor`` whose parent is ``ancestor``."""
    while node.parent is not ancestor:
        assert node.parent is not None
        node = node.parent
    return node


def _unsatisfiable(preemptor_new: DRS, target_old: DRS) -> bool:
    """Upstream's ``fsStrategyUnsatisfiable``: an infinite preemptor share never beats a finite target share."""
    return preemptor_new.weighted_share.is_infinite() and not target_old.weighted_share.is_infinite()


def _within_nominal(search: _Search) -> bool:
    """Upstream's ``queueWithinNominalInResourcesNeedingPreemption`` (with the preemptor's usage added)."""
    node = search.preemptor_node
    return all(node.usage.get(fr, ZERO) <= node.subtree_quota.get(fr, ZERO) for fr in search.sim.needs)


def _first_strategy(search: _Search, strategy: PreemptionStrategy) -> tuple[bool, list[AdmittedWorkload]]:
    """Upstream's ``runFirstFsStrategy``: whether the preemptor fits, and the candidates kept for the second."""
    retry: list[AdmittedWorkload] = []
    within_nominal = _within_nominal(search)
    for queue in search.walk():
        if queue is search.preemptor_node:
            if search.take(search.pop(queue), PreemptionReason.IN_CLUSTER_QUEUE):
                return True, retry
            continue
        if within_nominal:
            if search.take(search.pop(queue), PreemptionReason.IN_COHORT_RECLAMATION):
                return True, retry
            continue
        preemptor_new, target_old = search.shares(queue)
        if _unsatisfiable(preemptor_new, target_old):
            while search.has_candidates(queue):
                retry.append(search.pop(queue))
            continue
        while search.has_candidates(queue):
            workload = search.pop(queue)
            target_new = search.target_share_after_removal(queue, workload)
            if strategy_passes(strategy, preemptor_new, target_old, target_new):
                if search.take(workload, PreemptionReason.IN_COHORT_FAIR_SHARING):
                    return True, retry
                break  # the shares changed: choose the target queue again
            retry.append(workload)
    return False, retry


def _second_strategy(search: _Search, retry: list[AdmittedWorkload]) -> bool:
    """Upstream's ``runSecondFsStrategy`` (rule S2-b): at most one more victim per ClusterQueue."""
    search.candidates = _by_queue(retry)
    search.pruned = set()
    for queue in search.walk():
        preemptor_new, target_old = search.shares(queue)
        workload = search.pop(queue)
        passed = strategy_passes(PreemptionStrategy.LESS_THAN_INITIAL_SHARE, preemptor_new, target_old, target_old)
        if passed and search.take(workload, PreemptionReason.IN_COHORT_FAIR_SHARING):
            return True
        search.pruned.add(id(queue))
    return False


def _by_queue(workloads: Sequence[AdmittedWorkload]) -> dict[str, list[AdmittedWorkload]]:
    grouped: dict[str, list[AdmittedWorkload]] = {}
    for workload in workloads:
        grouped.setdefault(workload.cluster_queue, []).append(workload)
    return grouped


def _candidates(sim: Simulation, ctx: PreemptionContext) -> list[AdmittedWorkload]:
    """Upstream's ``findCandidates``, sorted by ``CandidatesOrdering``."""
    preemptor = sim.preemptor
    policy = ctx.policy

    def usable(workload: AdmittedWorkload, rule: str) -> bool:
        return any(fr in sim.needs for fr in workload.usage) and satisfies_policy(rule, preemptor, workload)

    found: list[AdmittedWorkload] = []
    if policy.within_cluster_queue != WithinClusterQueuePolicy.NEVER:
        rule = policy.within_cluster_queue.value
        found += [w for w in sim.workloads_in(preemptor.cluster_queue) if usable(w, rule)]
    if sim.node.parent is not None and policy.reclaim_within_cohort != ReclaimWithinCohortPolicy.NEVER:
        rule = policy.reclaim_within_cohort.value
        for name, queue in sorted(sim.queues.items()):
            if name == preemptor.cluster_queue or not _borrowing_in(queue, sim):
                continue
            found += [w for w in sim.workloads_in(name) if usable(w, rule)]
    found.sort(key=lambda w: candidate_order(w, preemptor.cluster_queue, ctx.now))
    return found


def _borrowing_in(queue: QuotaNode, sim: Simulation) -> bool:
    """Upstream's ``cqIsBorrowing``: above nominal in a pair needing preemption."""
    return any(queue.usage.get(fr, ZERO) > queue.subtree_quota.get(fr, ZERO) for fr in sim.needs)


def _fill_back(search: _Search) -> list[_Target]:
    """Add back every victim but the last, last to first; keep out only those the preemptor still needs gone."""
    targets = search.targets
    dropped: set[int] = set()
    for index in range(len(targets) - 2, -1, -1):
        workload = targets[index].workload
        search.sim.add(workload)
        if search.sim.fits(allow_borrowing=True):
            dropped.add(index)
        else:
            search.sim.remove(workload)
    return [t for index, t in enumerate(targets) if index not in dropped]


def plan_fair_preemption(
    preemptor: Preemptor,
    ctx: PreemptionContext,
    strategies: Sequence[PreemptionStrategy] = DEFAULT_PREEMPTION_STRATEGIES,
) -> PreemptionPlan:
    """Decide which admitted Workloads to preempt under fair sharing (see the module docstring)."""
    with Simulation.open(preemptor, ctx) as sim:
        if sim.fits(allow_borrowing=True):
            return PreemptionPlan(Outcome.FITS)
        candidates = _candidates(sim, ctx)
        if not candidates:
            return PreemptionPlan(Outcome.NO_CANDIDATES, message=NO_CANDIDATES_MESSAGE)
        strategies = tuple(strategies) or DEFAULT_PREEMPTION_STRATEGIES
        search = _Search(sim, _by_queue(candidates), ctx.now)
        search.add_preemptor()
        fits, retry = _first_strategy(search, strategies[0])
        if not fits and len(strategies) > 1:
            fits = _second_strategy(search, retry)
        search.remove_preemptor()
        if not fits:
            return PreemptionPlan(Outcome.NOT_ENOUGH_CANDIDATES, message=NOT_ENOUGH_CANDIDATES_MESSAGE)
        chosen = _fill_back(search)
        preemptor_path = cluster_queue_path(sim.node)
        victims = tuple(
            Victim(
                workload=t.workload,
                reason=t.reason,
                message=PREEMPTED_MESSAGE.format(
                    uid=preemptor.uid or _UNKNOWN,
                    job_uid=preemptor.job_uid or _UNKNOWN,
                    reason=HUMAN_READABLE_REASONS[t.reason],
                    preemptor_path=preemptor_path,
                    preemptee_path=cluster_queue_path(sim.node_of(t.workload.cluster_queue)),
                ),
            )
            for t in chosen
        )
        return PreemptionPlan(Outcome.PREEMPT, victims)
