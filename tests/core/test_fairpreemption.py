"""Fair-sharing preemption: the cases of upstream Kueue's ``preemption_fair_test.go`` (``TestFairPreemptions``, v0.19.2).

Each test names the case it mirrors. Upstream's ``baseCQs``: ClusterQueues
a, b, c (3 cpu each; ``withinClusterQueue: LowerPriority``,
``reclaimWithinCohort: Any``, ``borrowWithinCohort: LowerPriority`` with
threshold -3) and ``preemptible`` (0 cpu, no preemption) in cohort ``all``.
Workloads have UID = name and the same reservation time, as upstream's test
sets them. Upstream feeds the preemptor straight to ``GetTargets``; where
such a preemptor in fact fits (ours answers ``Fits``, no victims either),
the test says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multikueue.api.clusterqueue import ClusterQueuePreemption
from multikueue.api.configuration import PreemptionStrategy
from multikueue.core.fairpreemption import plan_fair_preemption
from multikueue.core.preemption import AdmittedWorkload, Outcome, PreemptionContext, PreemptionPlan, Preemptor
from multikueue.core.quota import FlavorResource, QuotaNode, ResourceQuota, add_usage, available, refresh_tree

pytestmark = pytest.mark.unit

D = Decimal
NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
CPU = ("default", "cpu")
S2A = PreemptionStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE
S2B = PreemptionStrategy.LESS_THAN_INITIAL_SHARE
FS = "InCohortFairSharing"
RECLAIM = "InCohortReclamation"
IN_CQ = "InClusterQueue"


def policy(within: str = "Never", reclaim: str = "Never", borrow: str | None = None, threshold: int | None = None) -> Any:
    spec: dict[str, Any] = {"withinClusterQueue": within, "reclaimWithinCohort": reclaim}
    if borrow:
        spec["borrowWithinCohort"] = {"policy": borrow, "maxPriorityThreshold": threshold}
    return ClusterQueuePreemption.model_validate(spec)


BASE_POLICY = policy("LowerPriority", "Any", "LowerPriority", -3)


class World:
    """Quota trees built from (name -> parent, nominal cpu, weight) for queues and cohorts."""

    def __init__(
        self,
        queues: Mapping[str, tuple[str | None, float | None, str, Any]],
        cohorts: Mapping[str, tuple[str | None, float, str]] | None = None,
    ) -> None:
        self.cohorts: dict[str, QuotaNode] = {}
        self.cohort_specs = dict(cohorts or {})
        self.queues: dict[str, QuotaNode] = {}
        self.policies: dict[str, Any] = {}
        for name in self.cohort_specs:
            self.cohort(name)
        for name, (parent, nominal, weight, preemption) in queues.items():
            quotas = {} if nominal is None else {CPU: ResourceQuota(D(str(nominal)))}  # None: no resource group
            node = QuotaNode(name, is_cohort=False, quotas=quotas, weight=D(weight))
            if parent:
                node.set_parent(self.cohort(parent))
            self.queues[name] = node
            self.policies[name] = preemption
        roots = {id(n): n for n in [*self.queues.values(), *self.cohorts.values()] if n.parent is None}
        for root in roots.values():
            refresh_tree(root)

    def cohort(self, name: str) -> QuotaNode:
        if name not in self.cohorts:
            parent, nominal, weight = self.cohort_specs.get(name, (None, 0, "1"))
            quotas = {CPU: ResourceQuota(D(str(nominal)))} if nominal else {}
            self.cohorts[name] = QuotaNode(name, is_cohort=True, quotas=quotas, weight=D(weight))
            if parent:
                self.cohorts[name].set_parent(self.cohort(parent))
        return self.cohorts[name]


def base_world(weights: Mapping[str, str] | None = None) -> World:
    w = weights or {}
    return World(
        {
            "a": ("all", 3, w.get("a", "1"), BASE_POLICY),
            "b": ("all", 3, w.get("b", "1"), BASE_POLICY),
            "c": ("all", 3, w.get("c", "1"), BASE_POLICY),
            "preemptible": ("all", 0, "1", policy()),
        }
    )


def wl(name: str, cq: str, cpu: float = 1, priority: int = 0) -> AdmittedWorkload:
    return AdmittedWorkload(
        key=("", name),
        cluster_queue=cq,
        priority=priority,
        usage={CPU: D(str(cpu))},
        queued_at=NOW,
        quota_reserved_at=NOW,
        uid=name,
    )


def run(
    world: World,
    cq: str,
    cpu: float,
    admitted: list[AdmittedWorkload],
    *,
    priority: int = 0,
    strategies: tuple[PreemptionStrategy, ...] = (S2A, S2B),
) -> PreemptionPlan:
    for workload in admitted:
        add_usage(world.queues[workload.cluster_queue], CPU, workload.usage[CPU])
    preemptor = Preemptor(
        key=("", "incoming"), cluster_queue=cq, priority=priority, queued_at=NOW, usage={CPU: D(str(cpu))},
        needs_preemption=frozenset({CPU}), uid="wl-in", job_uid="job-in",
    )
    ctx = PreemptionContext(node=world.queues[cq], policy=world.policies[cq], admitted=admitted, now=NOW)
    return plan_fair_preemption(preemptor, ctx, strategies)


def victims(plan: PreemptionPlan) -> set[tuple[str, str]]:
    return {(v.workload.key[1], v.reason) for v in plan.victims}


def units(cq: str, count: int, prefix: str | None = None) -> list[AdmittedWorkload]:
    return [wl(f"{prefix or cq}{i}", cq) for i in range(1, count + 1)]


def test_reclaim_nominal_from_user_using_the_most() -> None:
    """"reclaim nominal from user using the most": c stays within nominal, so it reclaims (InCohortReclamation)."""
    plan = run(base_world(), "c", 1, units("a", 3) + units("b", 5) + units("c", 1))
    assert victims(plan) == {("b1", RECLAIM)}


def test_can_reclaim_from_queue_using_less_if_the_one_using_the_most_is_not_enough() -> None:
    """"can reclaim from queue using less, if taking the latest workload from user using the most isn't enough"."""
    admitted = [wl("a1", "a", 3), wl("a2", "a", 1), wl("b1", "b", 2), wl("b2", "b", 3)]
    assert victims(run(base_world(), "c", 3, admitted)) == {("a1", RECLAIM)}


def test_reclaim_borrowable_quota_from_user_using_the_most() -> None:
    """"reclaim borrowable quota from user using the most": a borrows with the incoming, rule S2-a takes b1."""
    plan = run(base_world(), "a", 1, units("a", 3) + units("b", 5) + units("c", 1))
    assert victims(plan) == {("b1", FS)}
    [victim] = plan.victims
    assert victim.message == (
        "Preempted to accommodate a workload (UID: wl-in, JobUID: job-in) due to Fair Sharing within the cohort; "
        "preemptor path: /all/a; preemptee path: /all/b"
    )


def test_preempt_one_from_each_cq_borrowing() -> None:
    """"preempt one from each CQ borrowing"."""
    admitted = [
        wl("a1", "a", 0.5), wl("a2", "a", 0.5), wl("a3", "a", 3),
        wl("b1", "b", 0.5), wl("b2", "b", 0.5), wl("b3", "b", 3),
    ]  # fmt: skip
    assert victims(run(base_world(), "c", 2, admitted)) == {("a1", RECLAIM), ("b1", RECLAIM)}


def test_cannot_preempt_when_everyone_is_under_nominal() -> None:
    """"can't preempt when everyone under nominal"."""
    plan = run(base_world(), "c", 1, units("a", 3) + units("b", 3) + units("c", 3))
    assert plan.victims == ()
    assert plan.outcome == Outcome.NO_CANDIDATES  # nobody borrows, c's own are not of lower priority


def test_cannot_preempt_when_it_would_switch_the_imbalance() -> None:
    """"can't preempt when it would switch the imbalance" (the incoming raised from 2 to 2.5: 2 fits as is)."""
    plan = run(base_world(), "a", 2.5, units("a", 3) + units("b", 5))
    assert plan.outcome == Outcome.NOT_ENOUGH_CANDIDATES


def test_can_preempt_lower_priority_workloads_from_same_cq() -> None:
    """"can preempt lower priority workloads from same CQ"."""
    admitted = [wl("a1_low", "a", priority=-1), wl("a2_low", "a", priority=-1), wl("a3", "a"), wl("a4", "a")]
    plan = run(base_world(), "a", 2, admitted + units("b", 5))
    assert victims(plan) == {("a1_low", IN_CQ), ("a2_low", IN_CQ)}


def test_can_preempt_a_combination_of_same_cq_and_highest_user() -> None:
    """"can preempt a combination of same CQ and highest user"."""
    admitted = [wl("a_low", "a", priority=-1), wl("a2", "a"), wl("a3", "a")] + units("b", 6)
    assert victims(run(base_world(), "a", 2, admitted)) == {("a_low", IN_CQ), ("b1", FS)}


def test_preempt_huge_workload_if_there_is_no_other_option() -> None:
    """"preempt huge workload if there is no other option, as long as the target CQ gets a lower share"."""
    assert victims(run(base_world(), "a", 2, [wl("b1", "b", 9)])) == {("b1", RECLAIM)}


def test_cannot_preempt_huge_workload_if_the_incoming_is_also_huge() -> None:
    """"can't preempt huge workload if the incoming is also huge"."""
    plan = run(base_world(), "a", 5, [wl("a1", "a", 2), wl("b1", "b", 7)])
    assert plan.victims == ()


def test_cannot_preempt_2_smaller_workloads_if_the_incoming_is_huge() -> None:
    """"can't preempt 2 smaller workloads if the incoming is huge"."""
    plan = run(base_world(), "a", 6, [wl("b1", "b", 2), wl("b2", "b", 2), wl("b3", "b", 3)])
    assert plan.victims == ()


def test_preempt_from_target_and_others_even_if_over_nominal() -> None:
    """"preempt from target and others even if over nominal"."""
    admitted = [wl("a1_low", "a", 2, -1), wl("a2_low", "a", 1, -1), wl("b1", "b", 3), wl("b2", "b", 3)]
    assert victims(run(base_world(), "a", 4, admitted)) == {("a1_low", IN_CQ), ("b1", FS)}


def test_prefer_to_preempt_workloads_that_do_not_make_the_target_cq_have_the_biggest_share() -> None:
    """"prefer to preempt workloads that don't make the target CQ have the biggest share": S2-a finds b2 first."""
    admitted = [wl("b1", "b", 2), wl("b2", "b", 1), wl("b3", "b", 2), wl("c1", "c", 1)]
    assert victims(run(base_world(), "a", 3.5, admitted)) == {("b2", FS)}


def test_preempt_from_different_cluster_queues_if_the_end_result_has_a_smaller_max_share() -> None:
    """"preempt from different cluster queues if the end result has a smaller max share"."""
    admitted = [wl("b1", "b", 2), wl("b2", "b", 2.5), wl("c1", "c", 2), wl("c2", "c", 2.5)]
    assert victims(run(base_world(), "a", 3.5, admitted)) == {("b1", FS), ("c1", FS)}


def test_scenario_above_does_not_flap() -> None:
    """"scenario above does not flap"."""
    plan = run(base_world(), "b", 2, [wl("a1", "a", 3.5), wl("b2", "b", 2.5), wl("c2", "c", 2.5)])
    assert plan.victims == ()


def test_cannot_preempt_if_it_would_make_the_candidate_cq_go_under_nominal() -> None:
    """"cannot preempt if it would make the candidate CQ go under nominal after preempting one element"."""
    plan = run(base_world(), "a", 4, [wl("b1", "b", 3), wl("b2", "b", 3), wl("c1", "c", 3)])
    assert plan.victims == ()


def test_workloads_under_priority_threshold_not_capriciously_preempted() -> None:
    """"workloads under priority threshold not capriciously preempted": borrowWithinCohort plays no part.

    The incoming is raised from 2 to 3.5 (2 fits as is); the preemptible
    queue's Workloads (priority -3) borrow, but a's share with the incoming
    would exceed theirs.
    """
    admitted = units("a", 3) + units("b", 3) + [wl(f"preemptible{i}", "preemptible", 1, -3) for i in (1, 2, 3)]
    assert run(base_world(), "a", 3.5, admitted).victims == ()


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (S2B, {("b_low", FS)}),  # "preempt lower priority first, even if big"
        (S2A, {("b_high", FS)}),  # "preempt workload that doesn't transfer the imbalance, even if high priority"
    ],
)
def test_one_strategy(strategy: PreemptionStrategy, expected: set[tuple[str, str]]) -> None:
    """"preempt lower priority first, even if big" (LessThanInitialShare only) and
    "preempt workload that doesn't transfer the imbalance, even if high priority" (LessThanOrEqualToFinalShare only)."""
    admitted = [wl("a1", "a", 3), wl("b_low", "b", 5, 0), wl("b_high", "b", 1, 1)]
    assert victims(run(base_world(), "a", 1, admitted, strategies=(strategy,))) == expected


def three_queues(weights: Mapping[str, str]) -> World:
    lp_any = policy("LowerPriority", "Any")
    return World({name: ("all", 3, weights.get(name, "1"), lp_any) for name in ("a", "b", "c")})


def test_cq_with_higher_weight_can_preempt_more() -> None:
    """"CQ with higher weight can preempt more"."""
    plan = run(three_queues({"a": "2"}), "a", 2, units("a", 3) + units("b", 6))
    assert victims(plan) == {("b1", FS), ("b2", FS)}


def test_can_preempt_anything_borrowing_from_cq_with_0_weight() -> None:
    """"can preempt anything borrowing from CQ with 0 weight"."""
    plan = run(three_queues({"b": "0"}), "a", 3, units("a", 3) + units("b", 6))
    assert victims(plan) == {("b1", FS), ("b2", FS), ("b3", FS)}


def test_cannot_preempt_nominal_from_cq_with_0_weight() -> None:
    """"can't preempt nominal from CQ with 0 weight"."""
    lp_any = policy("LowerPriority", "Any")
    world = World({"a": ("all", 3, "1", lp_any), "b": ("all", 3, "0", lp_any)})
    assert run(world, "a", 1, units("a", 3) + units("b", 3)).victims == ()


def test_cannot_preempt_nominal_from_cohort_with_0_weight() -> None:
    """"can't preempt nominal from Cohort with 0 weight"."""
    reclaim = policy(reclaim="Any")
    world = World(
        {"left-cq": ("root", 0, "1", reclaim), "right-cq": ("right-cohort", 0, "0", reclaim)},
        {"right-cohort": ("root", 1, "0")},
    )
    assert run(world, "left-cq", 1, [wl("right-1", "right-cq")]).victims == ()


def test_can_preempt_within_cluster_queue_when_no_cohort() -> None:
    """"can preempt within cluster queue when no cohort"."""
    world = World({"a": (None, 1, "1", policy("LowerPriority"))})
    plan = run(world, "a", 1, [wl("a1", "a")], priority=1000)
    assert victims(plan) == {("a1", IN_CQ)}
    assert plan.victims[0].message.endswith("preemptor path: /a; preemptee path: /a")


def test_hierarchical_preemption() -> None:
    """"hierarchical preemption": a (weight 2) under LEFT (weight 2) preempts across the whole tree."""
    reclaim = policy(reclaim="Any")
    world = World(
        {
            "a": ("LEFT", 1, "2", reclaim),
            "b": ("LEFT", 1, "1", policy()),
            "c": ("ROOT", 1, "1", policy()),
            "d": ("RIGHT", 1, "1", policy()),
            "e": ("RIGHT", 1, "0.99", policy()),
        },
        {"ROOT": (None, 5, "1"), "LEFT": ("ROOT", 5, "2"), "RIGHT": ("ROOT", 5, "1")},
    )
    admitted = [wl(f"{q}{p}", q, 1, p) for q in "bcde" for p in range(1, 6)]
    plan = run(world, "a", 5, admitted)
    assert victims(plan) == {("b1", FS), ("b2", FS), ("c1", FS), ("c2", FS), ("e1", FS)}
    assert {v.workload.key[1]: v.message.split("; ", 1)[1] for v in plan.victims}["e1"] == (
        "preemptor path: /ROOT/LEFT/a; preemptee path: /ROOT/RIGHT/e"
    )


def test_borrowing_cq_in_non_borrowing_cohort_is_protected() -> None:
    """"borrowing cq in non-borrowing cohort is protected": b borrows, RIGHT does not; a preempts its own."""
    world = World(
        {"a": ("ROOT", 5, "10", policy("LowerPriority", "Any")), "b": ("RIGHT", None, "0.1", policy())},
        {"ROOT": (None, 0, "1"), "RIGHT": ("ROOT", 1, "0.1")},
    )
    admitted = [wl(f"a{i}", "a", 1, -1) for i in (1, 2, 3)] + [wl("b1", "b", 1, -1)]
    assert victims(run(world, "a", 5, admitted)) == {("a1", IN_CQ), ("a2", IN_CQ), ("a3", IN_CQ)}


def test_forced_to_preempt_within_clusterqueue_because_borrowing_workload_too_important() -> None:
    """"forced to preempt within clusterqueue because borrowing workload too important"."""
    world = World(
        {"a": ("ROOT", 5, "10", policy("LowerPriority", "LowerPriority")), "b": ("RIGHT", None, "0.1", policy())},
        {"ROOT": (None, 0, "1"), "RIGHT": ("ROOT", 3, "0.1")},
    )
    admitted = [wl(f"a{i}", "a", 1, -1) for i in (1, 2, 3)] + [wl("b1", "b", 4, 100)]
    assert victims(run(world, "a", 4, admitted)) == {("a1", IN_CQ), ("a2", IN_CQ), ("a3", IN_CQ)}


def test_deep_preemption() -> None:
    """"deep preemption": the only quota is four levels down another branch; A (1.01) against B (0.99)."""
    world = World(
        {"a": ("AAA", 0, "1", policy(reclaim="Any")), "b": ("BBB", 0, "1", policy())},
        {
            "ROOT": (None, 0, "1"),
            "A": ("ROOT", 0, "1.01"), "AA": ("A", 0, "1"), "AAA": ("AA", 0, "1"),
            "B": ("ROOT", 0, "0.99"), "BB": ("B", 0, "1"), "BBB": ("BB", 0, "1"),
            "C": ("ROOT", 0, "1"), "CC": ("C", 0, "1"), "CCC": ("CC", 0, "1"), "CCCC": ("CCC", 1, "1"),
        },
    )  # fmt: skip
    assert victims(run(world, "a", 1, [wl("b1", "b")])) == {("b1", FS)}


def test_cq_with_zero_weight_can_reclaim_nominal_quota() -> None:
    """"cq with zero weight can reclaim nominal quota"."""
    world = World({"a": ("ROOT", 1, "0", policy(reclaim="Any")), "b": ("ROOT", 0, "1", policy())})
    assert victims(run(world, "a", 1, [wl("b1", "b")])) == {("b1", RECLAIM)}


def test_cohort_with_zero_weight_can_reclaim_nominal_quota() -> None:
    """"cohort with zero weight can reclaim nominal quota": a borrows from A (share 0 at ROOT's level is A's)."""
    world = World(
        {"a": ("A", 0, "0", policy(reclaim="Any")), "b": ("ROOT", 0, "1", policy())},
        {"ROOT": (None, 0, "1"), "A": ("ROOT", 1, "0")},
    )
    assert victims(run(world, "a", 1, [wl("b1", "b")])) == {("b1", FS)}


def test_zero_weight_borrowing_preemptor_cannot_preempt_from_a_borrowing_cq_with_a_non_zero_weight() -> None:
    """"zero weight borrowing preemptor cannot preempt from a borrowing CQ with a non-zero weight"."""
    world = World({"a": ("all", 1, "0", policy(reclaim="Any")), "b": ("all", 1, "1", policy())})
    assert run(world, "a", 1, [wl("a1", "a"), wl("b1", "b"), wl("b2", "b")]).victims == ()


@pytest.mark.parametrize("weight", ["0", "1"])
def test_borrowing_preemptor_preempts_from_a_borrowing_cq_of_the_same_weight(weight: str) -> None:
    """"zero weight borrowing preemptor can preempt from a borrowing CQ which also has zero weight" and
    "non-zero weight borrowing preemptor preempts from a borrowing CQ"."""
    world = World(
        {"a": ("all", 1, weight, policy(reclaim="Any")), "b": ("all", 0, weight, policy())}, {"all": (None, 3, "1")}
    )
    assert victims(run(world, "a", 2, units("b", 3))) == {("b1", FS)}


def test_candidates_skipped_by_the_first_strategy_are_still_available_to_the_second_strategy() -> None:
    """"candidates skipped by the first strategy are still available to the second strategy"."""
    world = World(
        {
            "p": ("A", 2, "1", policy(reclaim="Any")),
            "y": ("A", 2, "1", policy()),
            "x": ("ROOT", 1, "1", policy()),
        },
        {"ROOT": (None, 0, "1"), "A": ("ROOT", 1, "0")},
    )
    admitted = [wl("p1", "p", 2), wl("y1", "y", 2), wl("y2", "y", 2), wl("x1", "x"), wl("x2", "x")]
    assert victims(run(world, "p", 1, admitted)) == {("y1", FS), ("x1", FS)}


def test_strategies_are_tried_in_order_and_the_second_gets_the_skipped_candidates() -> None:
    """The candidates the first strategy skipped go to the second (upstream's rule S2-b pass)."""
    admitted = [wl("a1", "a", 3), wl("b_low", "b", 5, 0), wl("b_high", "b", 1, 1)]
    # S2-a alone takes b_high (1): with S2-b only after it, the same.
    assert victims(run(base_world(), "a", 1, admitted, strategies=(S2A, S2B))) == {("b_high", FS)}


def test_the_live_tree_is_not_modified() -> None:
    """The plan is simulated on the tree passed in, which keeps its usage once the plan returns."""
    world = base_world()
    run(world, "a", 1, units("a", 3) + units("b", 5) + units("c", 1))
    assert {name: node.usage.get(CPU) for name, node in world.queues.items()} == {
        "a": D(3), "b": D(5), "c": D(1), "preemptible": None,
    }  # fmt: skip


_generated = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 4), st.integers(-2, 2)), min_size=1, max_size=10
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    generated=_generated,
    request=st.integers(1, 6),
    priority=st.integers(-1, 3),
    target=st.sampled_from(["a", "b", "c"]),
    weights=st.tuples(*[st.sampled_from(["0", "0.5", "1", "2"])] * 3),
    strategies=st.sampled_from([(S2A,), (S2B,), (S2A, S2B)]),
)
def test_victims_make_room_and_every_victim_is_needed(
    generated: list[tuple[str, int, int]],
    request: int,
    priority: int,
    target: str,
    weights: tuple[str, str, str],
    strategies: tuple[PreemptionStrategy, ...],
) -> None:
    """Ours: with the victims gone the preemptor fits; with any one of them back it does not (the fill back);
    victims of its own queue have lower priority; the live tree is left as it was."""

    def world() -> World:
        return World({name: ("all", 3, w, BASE_POLICY) for name, w in zip("abc", weights, strict=True)})

    def admit(workloads: list[AdmittedWorkload]) -> tuple[World, list[AdmittedWorkload]]:
        fresh = world()
        held = []
        for w in workloads:
            node = fresh.queues[w.cluster_queue]
            if w.usage[CPU] <= available(node, CPU):
                add_usage(node, CPU, w.usage[CPU])
                held.append(w)
        return fresh, held

    def fits(w: World) -> bool:
        return D(request) <= available(w.queues[target], CPU)

    workloads = [wl(f"w{i}", cq, amount, prio) for i, (cq, amount, prio) in enumerate(generated)]
    live, admitted = admit(workloads)
    cohort = live.queues[target].parent
    assert cohort is not None

    def usage() -> dict[str, dict[FlavorResource, Decimal]]:
        return {name: dict(node.usage) for name, node in live.queues.items()} | {"(cohort)": dict(cohort.usage)}

    before = usage()
    preemptor = Preemptor(
        key=("", "incoming"), cluster_queue=target, priority=priority, queued_at=NOW, usage={CPU: D(request)},
        needs_preemption=frozenset({CPU}),
    )
    plan = plan_fair_preemption(preemptor, PreemptionContext(live.queues[target], BASE_POLICY, admitted, NOW), strategies)
    assert usage() == before
    if plan.outcome != Outcome.PREEMPT:
        assert plan.victims == ()
        assert (plan.outcome == Outcome.FITS) == fits(live)
        return
    names = [v.workload.key[1] for v in plan.victims]
    assert len(set(names)) == len(names) > 0
    for victim in plan.victims:
        if victim.workload.cluster_queue == target:
            assert victim.workload.priority < priority and victim.reason == IN_CQ
        else:
            assert victim.reason in (RECLAIM, FS)

    def without(gone: set[str]) -> World:
        fresh = world()
        for w in admitted:
            if w.key[1] not in gone:
                add_usage(fresh.queues[w.cluster_queue], CPU, w.usage[CPU])
        return fresh

    assert fits(without(set(names)))
    for name in names:
        assert not fits(without(set(names) - {name}))
