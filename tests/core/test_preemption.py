"""Classical preemption decisions: the scenarios of upstream Kueue's preemption_test.go (TestPreemption), ours.

Each test names the upstream case it mirrors. The ClusterQueues are those of
upstream's ``defaultClusterQueues`` (memory in Gi units); a workload's
``usage`` is what its admission holds. Upstream's test feeds the preemptor
straight to the preemption step, bypassing the flavor assigner; where such a
preemptor would in fact fit (so our module answers ``Fits``), the incoming
request is raised just past the free quota and the test says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from multikueue.api.clusterqueue import ClusterQueuePreemption
from multikueue.core.preemption import (
    NO_CANDIDATES_MESSAGE,
    NOT_ENOUGH_CANDIDATES_MESSAGE,
    AdmittedWorkload,
    Classification,
    Outcome,
    PreemptionContext,
    PreemptionPlan,
    Preemptor,
    Simulation,
    cluster_queue_path,
    may_find_candidates,
    may_free_enough,
    plan_preemption,
    resources_needing_preemption,
    satisfies_policy,
)
from multikueue.core.quota import (
    FlavorResource,
    QuotaNode,
    ResourceQuota,
    add_usage,
    available,
    refresh_tree,
    remove_usage,
)

pytestmark = pytest.mark.unit

D = Decimal
NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
CPU = ("default", "cpu")
MEM = ("default", "memory")
ALPHA_MEM = ("alpha", "memory")
BETA_MEM = ("beta", "memory")

LP = "LowerPriority"


def policy(within: str = "Never", reclaim: str = "Never", borrow: str = "Never", threshold: int | None = None) -> Any:
    spec: dict[str, Any] = {"withinClusterQueue": within, "reclaimWithinCohort": reclaim}
    if borrow != "Never":
        spec["borrowWithinCohort"] = {"policy": borrow, "maxPriorityThreshold": threshold}
    return ClusterQueuePreemption.model_validate(spec)


def q(nominal: float, borrowing: float | None = None, lending: float | None = None) -> ResourceQuota:
    return ResourceQuota(
        D(str(nominal)),
        None if borrowing is None else D(str(borrowing)),
        None if lending is None else D(str(lending)),
    )


# name -> (cohort, quotas, preemption policy); upstream's defaultClusterQueues.
CLUSTER_QUEUES: dict[str, tuple[str | None, dict[FlavorResource, ResourceQuota], Any]] = {
    "standalone": (None, {CPU: q(6), ALPHA_MEM: q(3), BETA_MEM: q(3)}, policy(within=LP)),
    "c1": ("cohort", {CPU: q(6, 6), MEM: q(3, 3)}, policy(within=LP, reclaim=LP)),
    "c2": ("cohort", {CPU: q(6, 6), MEM: q(3, 3)}, policy(within="Never", reclaim="Any")),
    "d1": ("cohort-no-limits", {CPU: q(6), MEM: q(3)}, policy(within=LP, reclaim=LP)),
    "d2": ("cohort-no-limits", {CPU: q(6), MEM: q(3)}, policy(within="Never", reclaim="Any")),
    "l1": ("legion", {CPU: q(6, 12), MEM: q(3, 6)}, policy(within=LP, reclaim=LP)),
    "preventStarvation": (None, {CPU: q(6)}, policy(within="LowerOrNewerEqualPriority")),
    "a_standard": ("with_shared_cq", {CPU: q(1, 12)}, policy(within="Never", reclaim=LP, borrow=LP, threshold=0)),
    "b_standard": ("with_shared_cq", {CPU: q(1, 12)}, policy(within=LP, reclaim="Any", borrow=LP, threshold=0)),
    "a_best_effort": ("with_shared_cq", {CPU: q(1, 12)}, policy(within="Never", reclaim=LP, borrow=LP, threshold=0)),
    "b_best_effort": ("with_shared_cq", {CPU: q(0, 13)}, policy(within="Never", reclaim=LP, borrow=LP, threshold=0)),
    "shared": ("with_shared_cq", {CPU: q(10)}, policy()),
    "lend1": ("cohort-lend", {CPU: q(6, lending=4)}, policy(within=LP, reclaim=LP)),
    "lend2": ("cohort-lend", {CPU: q(6, lending=2)}, policy(within=LP, reclaim=LP)),
    "a": ("cohort-three", {CPU: q(2), MEM: q(2)}, policy(within=LP, reclaim="Any")),
    "b": ("cohort-three", {CPU: q(2), MEM: q(2)}, policy()),
    "c": ("cohort-three", {CPU: q(2), MEM: q(2)}, policy()),
}


def build_world(
    cluster_queues: Mapping[str, tuple[str | None, dict[FlavorResource, ResourceQuota], Any]] = CLUSTER_QUEUES,
    cohort_parents: Mapping[str, str] | None = None,
) -> dict[str, QuotaNode]:
    """ClusterQueue name -> its node, in quota trees built like the cache builds them."""
    cohorts: dict[str, QuotaNode] = {}

    def cohort(name: str) -> QuotaNode:
        if name not in cohorts:
            cohorts[name] = QuotaNode(name, is_cohort=True)
            parent = (cohort_parents or {}).get(name)
            if parent:
                cohorts[name].set_parent(cohort(parent))
        return cohorts[name]

    queues: dict[str, QuotaNode] = {}
    for name, (cohort_name, quotas, _) in cluster_queues.items():
        node = QuotaNode(name, is_cohort=False, quotas=quotas)
        if cohort_name:
            node.set_parent(cohort(cohort_name))
        queues[name] = node
    roots = {id(n): n for n in queues.values() if n.parent is None} | {
        id(c): c for c in cohorts.values() if c.parent is None
    }
    for root in roots.values():
        refresh_tree(root)
    return queues


def wl(
    name: str,
    cq: str,
    usage: Mapping[FlavorResource, float],
    priority: int = 0,
    *,
    reserved: datetime = NOW,
    queued: datetime = NOW,
    evicted: bool = False,
    version: int | None = None,
) -> AdmittedWorkload:
    return AdmittedWorkload(
        key=("", name),
        cluster_queue=cq,
        priority=priority,
        usage={fr: D(str(v)) for fr, v in usage.items()},
        queued_at=queued,
        quota_reserved_at=reserved,
        evicted=evicted,
        uid=f"uid-{name}",
        version=version,
    )


def incoming(
    cq: str,
    usage: Mapping[FlavorResource, float],
    priority: int = 0,
    needs: set[FlavorResource] | None = None,
    queued: datetime = NOW,
) -> Preemptor:
    """Upstream's ``baseIncomingWl`` (UID ``wl-in``, job UID ``job-in``); ``needs`` defaults to every pair."""
    return Preemptor(
        key=("", "in"),
        cluster_queue=cq,
        priority=priority,
        queued_at=queued,
        usage={fr: D(str(v)) for fr, v in usage.items()},
        needs_preemption=frozenset(usage if needs is None else needs),
        uid="wl-in",
        job_uid="job-in",
    )


def run(
    preemptor: Preemptor,
    admitted: list[AdmittedWorkload],
    *,
    queues: dict[str, QuotaNode] | None = None,
    policies: Mapping[str, Any] | None = None,
) -> PreemptionPlan:
    queues = queues if queues is not None else build_world()
    for workload in admitted:
        for fr, amount in workload.usage.items():
            add_usage(queues[workload.cluster_queue], fr, amount)
    preemption = (policies or {}).get(preemptor.cluster_queue) or CLUSTER_QUEUES[preemptor.cluster_queue][2]
    ctx = PreemptionContext(node=queues[preemptor.cluster_queue], policy=preemption, admitted=admitted, now=NOW)
    return plan_preemption(preemptor, ctx)


def victims(plan: PreemptionPlan) -> list[tuple[str, str]]:
    return [(v.workload.key[1], v.reason) for v in plan.victims]


def message(reason: str, preemptor_path: str, preemptee_path: str) -> str:
    return (
        f"Preempted to accommodate a workload (UID: wl-in, JobUID: job-in) due to {reason}; "
        f"preemptor path: {preemptor_path}; preemptee path: {preemptee_path}"
    )


IN_CQ = "InClusterQueue"
RECLAIM = "InCohortReclamation"
WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


# --- withinClusterQueue ---------------------------------------------------------------------------


def test_preempt_lowest_priority() -> None:
    plan = run(
        incoming("standalone", {CPU: 2}, priority=1),
        [
            wl("low", "standalone", {CPU: 2}, -1),
            wl("mid", "standalone", {CPU: 2}),
            wl("high", "standalone", {CPU: 2}, 1),
        ],
    )
    assert plan.outcome == Outcome.PREEMPT and victims(plan) == [("low", IN_CQ)]
    assert plan.victims[0].message == message("prioritization in the ClusterQueue", "/standalone", "/standalone")


def test_preempt_multiple() -> None:
    plan = run(
        incoming("standalone", {CPU: 3}, priority=1),
        [
            wl("low", "standalone", {CPU: 2}, -1),
            wl("mid", "standalone", {CPU: 2}),
            wl("high", "standalone", {CPU: 2}, 1),
        ],
    )
    assert victims(plan) == [("low", IN_CQ), ("mid", IN_CQ)]
    assert plan.preemptor_message("couldn't assign flavors") == (
        "couldn't assign flavors. Pending the preemption of 2 workload(s)"
    )


def test_no_preemption_for_low_priority() -> None:
    plan = run(
        incoming("standalone", {CPU: 1}, priority=-1),
        [wl("low", "standalone", {CPU: 3}, -1), wl("mid", "standalone", {CPU: 3})],
    )
    assert plan.outcome == Outcome.NO_CANDIDATES and plan.victims == ()
    assert plan.message == NO_CANDIDATES_MESSAGE
    assert plan.preemptor_message("couldn't assign flavors") == "couldn't assign flavors"


def test_not_enough_low_priority_workloads() -> None:
    plan = run(
        incoming("standalone", {CPU: 4}),
        [wl("low", "standalone", {CPU: 3}, -1), wl("mid", "standalone", {CPU: 3})],
    )
    assert plan.outcome == Outcome.NOT_ENOUGH_CANDIDATES and plan.message == NOT_ENOUGH_CANDIDATES_MESSAGE


def test_some_free_quota_preempt_low_priority() -> None:
    plan = run(
        incoming("standalone", {CPU: 2}, priority=1),
        [
            wl("low", "standalone", {CPU: 1}, -1),
            wl("mid", "standalone", {CPU: 1}),
            wl("high", "standalone", {CPU: 3}, 1),
        ],
    )
    assert victims(plan) == [("low", IN_CQ)]


def test_minimal_set_excludes_low_priority() -> None:
    """Fill back: ``low`` is removed first but is added back once ``mid`` is gone."""
    plan = run(
        incoming("standalone", {CPU: 2}, priority=1),
        [
            wl("low", "standalone", {CPU: 1}, -1),
            wl("mid", "standalone", {CPU: 2}),
            wl("high", "standalone", {CPU: 3}, 1),
        ],
    )
    assert victims(plan) == [("mid", IN_CQ)]


def test_only_preempt_workloads_using_the_chosen_flavor() -> None:
    plan = run(
        incoming("standalone", {CPU: 1, BETA_MEM: 2}, priority=1, needs={BETA_MEM}),
        [
            wl("low", "standalone", {ALPHA_MEM: 2}, -1),
            wl("mid", "standalone", {BETA_MEM: 1}),
            wl("high", "standalone", {BETA_MEM: 1}, 1),
        ],
    )
    assert victims(plan) == [("mid", IN_CQ)]


def test_each_pod_set_preempts_a_different_flavor() -> None:
    # launcher: 1 x 2Gi in alpha; workers: 2 x 1Gi in beta.
    plan = run(
        incoming("standalone", {ALPHA_MEM: 2, BETA_MEM: 2}),
        [wl("low-alpha", "standalone", {ALPHA_MEM: 2}, -1), wl("low-beta", "standalone", {BETA_MEM: 2}, -1)],
    )
    assert sorted(victims(plan)) == [("low-alpha", IN_CQ), ("low-beta", IN_CQ)]


def test_preempt_newer_workloads_with_the_same_priority() -> None:
    """LowerOrNewerEqualPriority; between equal candidates the most recently admitted goes first."""
    plan = run(
        incoming("preventStarvation", {CPU: 2}, priority=1, queued=NOW - timedelta(seconds=15)),
        [
            wl("wl1", "preventStarvation", {CPU: 2}, 2),
            wl("wl2", "preventStarvation", {CPU: 2}, 1, reserved=NOW + timedelta(seconds=1)),
            wl("wl3", "preventStarvation", {CPU: 2}, 1, reserved=NOW),
        ],
    )
    assert victims(plan) == [("wl2", IN_CQ)]


def test_lower_or_newer_equal_priority_spares_older_equal_priority() -> None:
    plan = run(
        incoming("preventStarvation", {CPU: 2}, priority=1, queued=NOW + timedelta(seconds=15)),
        [wl("wl1", "preventStarvation", {CPU: 4}, 1), wl("wl2", "preventStarvation", {CPU: 2}, 1)],
    )
    assert plan.outcome == Outcome.NO_CANDIDATES


def test_ties_go_to_the_most_recently_admitted() -> None:
    plan = run(
        incoming("standalone", {CPU: 2}, priority=1),
        [
            wl("older", "standalone", {CPU: 2}, reserved=NOW - timedelta(minutes=5)),
            wl("newest", "standalone", {CPU: 2}, reserved=NOW - timedelta(minutes=1)),
            wl("middle", "standalone", {CPU: 2}, reserved=NOW - timedelta(minutes=3)),
        ],
    )
    assert victims(plan) == [("newest", IN_CQ)]


def test_within_one_second_of_reservation_the_later_write_goes_first() -> None:
    """The API keeps QuotaReserved's time to the second; the resourceVersion orders a second's reservations."""
    plan = run(
        incoming("standalone", {CPU: 2}, priority=1),
        [
            wl("a-first", "standalone", {CPU: 2}, version=120),
            wl("b-last", "standalone", {CPU: 2}, version=135),
            wl("c-unversioned", "standalone", {CPU: 2}),
        ],
    )
    assert victims(plan) == [("b-last", IN_CQ)]


def test_a_later_second_of_reservation_outweighs_an_older_write() -> None:
    plan = run(
        incoming("standalone", {CPU: 2}, priority=1),
        [
            wl("rewritten", "standalone", {CPU: 3}, reserved=NOW - timedelta(seconds=1), version=900),
            wl("newer", "standalone", {CPU: 3}, version=100),
        ],
    )
    assert victims(plan) == [("newer", IN_CQ)]


def test_workloads_being_evicted_go_first() -> None:
    plan = run(
        incoming("standalone", {CPU: 2}, priority=1),
        [
            wl("low", "standalone", {CPU: 2}, -1),
            wl("evicting", "standalone", {CPU: 2}, evicted=True),
            wl("x", "standalone", {CPU: 2}),
        ],
    )
    assert victims(plan) == [("evicting", IN_CQ)]


def test_cannot_preempt_in_cluster_queue_for_within_cluster_queue_never() -> None:
    # Upstream asks for 4 cpu, which would fit by borrowing; 10 does not (9 free).
    plan = run(incoming("c2", {CPU: 10}, priority=1), [wl("c2-low", "c2", {CPU: 3}, -1)])
    assert plan.outcome == Outcome.NO_CANDIDATES


# --- reclaimWithinCohort ------------------------------------------------------------------------------


def test_reclaim_quota_from_borrower() -> None:
    plan = run(
        incoming("c1", {CPU: 3}, priority=1),
        [wl("c1-low", "c1", {CPU: 3}, -1), wl("c2-mid", "c2", {CPU: 3}), wl("c2-high", "c2", {CPU: 6}, 1)],
    )
    assert victims(plan) == [("c2-mid", RECLAIM)]
    assert plan.victims[0].message == message("reclamation within the cohort", "/cohort/c1", "/cohort/c2")


def test_reclaim_quota_when_a_zero_request_resource_is_at_nominal() -> None:
    plan = run(
        incoming("c1", {CPU: 3, MEM: 0}, priority=1, needs={CPU}),
        [
            wl("c1-low", "c1", {CPU: 3, MEM: 3}, -1),
            wl("c2-mid", "c2", {CPU: 3, MEM: 0}),
            wl("c2-high", "c2", {CPU: 6, MEM: 0}, 1),
        ],
    )
    assert victims(plan) == [("c2-mid", RECLAIM)]


def test_no_workloads_borrowing() -> None:
    # Upstream asks for 4 cpu, which would fit by borrowing; 5 does not (4 free).
    plan = run(
        incoming("c1", {CPU: 5}, priority=1),
        [
            wl("c1-high", "c1", {CPU: 4}, 1),
            wl("c2-low-1", "c2", {CPU: 4}, -1),
        ],
    )
    assert plan.outcome == Outcome.NO_CANDIDATES


def test_not_enough_workloads_borrowing() -> None:
    """After one c2 Workload goes, c2 is back within nominal: the other is no longer a candidate."""
    plan = run(
        incoming("c1", {CPU: 4}, priority=1),
        [wl("c1-high", "c1", {CPU: 4}, 1), wl("c2-low-1", "c2", {CPU: 4}, -1), wl("c2-low-2", "c2", {CPU: 4}, -1)],
    )
    assert plan.outcome == Outcome.NOT_ENOUGH_CANDIDATES


def test_preempting_locally_and_borrowing_other_resources_without_cohort_candidates() -> None:
    plan = run(
        incoming("c1", {CPU: 4, MEM: 5}, priority=1),
        [wl("c1-low", "c1", {CPU: 4}, -1), wl("c2-low-1", "c2", {CPU: 4}, -1), wl("c2-high-2", "c2", {CPU: 4}, 1)],
    )
    assert victims(plan) == [("c1-low", IN_CQ)]
    assert plan.victims[0].message == message("prioritization in the ClusterQueue", "/cohort/c1", "/cohort/c1")


def test_preempting_locally_and_borrowing_same_resource_in_cohort() -> None:
    plan = run(
        incoming("c1", {CPU: 4}, priority=1),
        [wl("c1-med", "c1", {CPU: 4}, 0), wl("c1-low", "c1", {CPU: 4}, -1), wl("c2-low-1", "c2", {CPU: 4}, -1)],
    )
    assert victims(plan) == [("c1-low", IN_CQ)]


def test_preempting_locally_and_borrowing_same_resource_without_borrowing_limit() -> None:
    plan = run(
        incoming("d1", {CPU: 4}, priority=1),
        [wl("d1-med", "d1", {CPU: 4}, 0), wl("d1-low", "d1", {CPU: 4}, -1), wl("d2-low-1", "d2", {CPU: 4}, -1)],
    )
    assert victims(plan) == [("d1-low", IN_CQ)]
    assert plan.victims[0].message.endswith(
        "preemptor path: /cohort-no-limits/d1; preemptee path: /cohort-no-limits/d1"
    )


def test_preempting_locally_and_borrowing_other_resources_with_cohort_candidates() -> None:
    plan = run(
        incoming("c1", {CPU: 2, MEM: 5}, priority=1),
        [
            wl("c1-med", "c1", {CPU: 4}, 0),
            wl("c2-low-1", "c2", {CPU: 5}, -1),
            wl("c2-low-2", "c2", {CPU: 1}, -1),
            wl("c2-low-3", "c2", {CPU: 1}, -1),
        ],
    )
    assert victims(plan) == [("c1-med", IN_CQ)]


def test_preempting_locally_and_not_borrowing_same_resource_in_one_queue_cohort() -> None:
    """Fill back keeps the larger victim: removing the smaller one first was not needed."""
    plan = run(
        incoming("l1", {CPU: 4}, priority=1),
        [
            wl("l1-med", "l1", {CPU: 4}, 0),
            wl("l1-low", "l1", {CPU: 2}, -1),
        ],
    )
    assert victims(plan) == [("l1-med", IN_CQ)]


def test_do_not_reclaim_from_same_priority_with_lower_priority_policy() -> None:
    plan = run(
        incoming("c1", {CPU: 4}),
        [wl("c1", "c1", {CPU: 2}), wl("c2-1", "c2", {CPU: 4}), wl("c2-2", "c2", {CPU: 4})],
    )
    assert plan.outcome == Outcome.NO_CANDIDATES


def test_reclaim_from_same_priority_with_any_policy() -> None:
    plan = run(
        incoming("c2", {CPU: 4}),
        [wl("c1-1", "c1", {CPU: 4}), wl("c1-2", "c1", {CPU: 4}, 1), wl("c2", "c2", {CPU: 2})],
    )
    assert victims(plan) == [("c1-1", RECLAIM)]


def test_preempt_from_all_cluster_queues_in_cohort() -> None:
    plan = run(
        incoming("c1", {CPU: 4}),
        [
            wl("c1-low", "c1", {CPU: 3}, -1),
            wl("c1-mid", "c1", {CPU: 2}),
            wl("c2-low", "c2", {CPU: 3}, -1),
            wl("c2-mid", "c2", {CPU: 4}),
        ],
    )
    # Other ClusterQueues' candidates are tried first.
    assert victims(plan) == [("c2-low", RECLAIM), ("c1-low", IN_CQ)]


def test_reclaim_quota_from_lender() -> None:
    plan = run(
        incoming("lend1", {CPU: 3}, priority=1),
        [
            wl("lend1-low", "lend1", {CPU: 3}, -1),
            wl("lend2-mid", "lend2", {CPU: 3}),
            wl("lend2-high", "lend2", {CPU: 4}, 1),
        ],
    )
    assert victims(plan) == [("lend2-mid", RECLAIM)]
    assert plan.victims[0].message.endswith("preemptor path: /cohort-lend/lend1; preemptee path: /cohort-lend/lend2")


def test_preempt_from_all_cluster_queues_in_cohort_with_lending_limits() -> None:
    plan = run(
        incoming("lend1", {CPU: 4}),
        [
            wl("lend1-low", "lend1", {CPU: 3}, -1),
            wl("lend1-mid", "lend1", {CPU: 2}),
            wl("lend2-low", "lend2", {CPU: 3}, -1),
            wl("lend2-mid", "lend2", {CPU: 4}),
        ],
    )
    assert sorted(victims(plan)) == [("lend1-low", IN_CQ), ("lend2-low", RECLAIM)]


def test_cannot_preempt_beyond_requestable_quota_including_lending_limit() -> None:
    plan = run(incoming("lend1", {CPU: 9}), [wl("lend2-low", "lend2", {CPU: 10}, -1)])
    assert plan.outcome == Outcome.NOT_ENOUGH_CANDIDATES


@pytest.mark.parametrize(
    ("usage", "admitted_usage"),
    [
        pytest.param({CPU: 2}, {CPU: 1}, id="single requested resource"),
        pytest.param({CPU: 2, MEM: 2}, {CPU: 1, MEM: 1}, id="two requested resources"),
        pytest.param({CPU: 2, MEM: 2}, {CPU: 1}, id="one requested resource but not the other"),
    ],
)
def test_preemptions_from_cluster_queue_when_it_is_exhausted(
    usage: dict[FlavorResource, float], admitted_usage: dict[FlavorResource, float]
) -> None:
    """a is at nominal and b borrows only a's cpu: only a's own Workloads may go."""
    admitted = [
        wl("a1", "a", admitted_usage, -2),
        wl("a2", "a", admitted_usage, -2),
        wl("a3", "a", admitted_usage, -1),
        wl("b1", "b", admitted_usage),
        wl("b2", "b", admitted_usage),
        wl("b3", "b", admitted_usage),
    ]
    plan = run(incoming("a", usage), admitted)
    assert sorted(victims(plan)) == [("a1", IN_CQ), ("a2", IN_CQ)]


def test_preemption_from_other_cluster_queues_when_the_queue_is_not_exhausted() -> None:
    plan = run(
        incoming("a", {CPU: 2}),
        [
            wl("a1", "a", {CPU: 1}, -1),
            wl("b1", "b", {CPU: 1}),
            wl("b2", "b", {CPU: 1}),
            wl("b3", "b", {CPU: 1}),
            wl("b4", "b", {CPU: 1}),
            wl("b5", "b", {CPU: 1}, -1),
        ],
    )
    assert sorted(victims(plan)) == [("a1", IN_CQ), ("b5", RECLAIM)]


def test_long_range_preemption_across_a_cohort_tree() -> None:
    queues = build_world(
        {
            "cq-left": ("cohort-left", {CPU: q(10)}, policy(reclaim="Any")),
            "cq-right": ("cohort-right", {CPU: q(0)}, policy()),
        },
        cohort_parents={"cohort-left": "root", "cohort-right": "root"},
    )
    plan = run(
        incoming("cq-left", {CPU: 8}),
        [wl("to-be-preempted", "cq-right", {CPU: 5})],
        queues=queues,
        policies={"cq-left": policy(reclaim="Any")},
    )
    assert victims(plan) == [("to-be-preempted", RECLAIM)]
    assert plan.victims[0].message == message(
        "reclamation within the cohort", "/root/cohort-left/cq-left", "/root/cohort-right/cq-right"
    )


# --- borrowWithinCohort -----------------------------------------------------------------------------------


def test_borrow_within_cohort_preempts_lower_priority_while_borrowing() -> None:
    plan = run(
        incoming("a_standard", {CPU: 10}),
        [
            wl("a_best_effort_low", "a_best_effort", {CPU: 10}, -1),
            wl("b_best_effort_low", "b_best_effort", {CPU: 1}, -1),
        ],
    )
    assert victims(plan) == [("a_best_effort_low", WHILE_BORROWING)]
    assert plan.victims[0].message == message(
        "reclamation within the cohort while borrowing", "/with_shared_cq/a_standard", "/with_shared_cq/a_best_effort"
    )


def test_borrow_within_cohort_spares_priority_above_threshold_when_still_borrowing() -> None:
    plan = run(incoming("a_standard", {CPU: 10}, priority=2), [wl("b_standard", "b_standard", {CPU: 10}, 1)])
    assert plan.outcome == Outcome.NOT_ENOUGH_CANDIDATES


def test_borrow_within_cohort_takes_priority_above_threshold_when_not_borrowing_after() -> None:
    plan = run(incoming("a_standard", {CPU: 1}, priority=2), [wl("b_standard", "b_standard", {CPU: 13}, 1)])
    assert victims(plan) == [("b_standard", RECLAIM)]


def test_borrow_within_cohort_does_not_preempt_in_own_queue_with_within_never() -> None:
    plan = run(incoming("a_standard", {CPU: 1}, priority=2), [wl("a_standard", "a_standard", {CPU: 13}, 1)])
    assert plan.outcome == Outcome.NO_CANDIDATES


def test_borrow_within_cohort_preempts_own_queue_when_no_one_is_below_threshold() -> None:
    plan = run(
        incoming("b_standard", {CPU: 1}, priority=3),
        [
            wl("a_standard_1", "a_standard", {CPU: 10}, 1),
            wl("a_standard_2", "a_standard", {CPU: 1}, 1),
            wl("b_standard_1", "b_standard", {CPU: 1}, 1),
            wl("b_standard_2", "b_standard", {CPU: 1}, 2),
        ],
    )
    assert victims(plan) == [("b_standard_1", IN_CQ)]


def test_borrow_within_cohort_preempts_own_queue_and_others_below_threshold() -> None:
    plan = run(
        incoming("b_standard", {CPU: 2}, priority=2),
        [
            wl("b_standard_high", "b_standard", {CPU: 10}, 2),
            wl("b_standard_mid", "b_standard", {CPU: 1}, 1),
            wl("a_best_effort_low", "a_best_effort", {CPU: 1}, -1),
            wl("a_best_effort_lower", "a_best_effort", {CPU: 1}, -2),
        ],
    )
    assert sorted(victims(plan)) == [("a_best_effort_lower", WHILE_BORROWING), ("b_standard_mid", IN_CQ)]


# --- outcomes and the contract ------------------------------------------------------------------------


def test_a_workload_that_fits_needs_no_preemption() -> None:
    plan = run(incoming("standalone", {CPU: 2}, priority=1), [wl("low", "standalone", {CPU: 2}, -1)])
    assert plan.outcome == Outcome.FITS and not plan.preempts and plan.victims == ()


def test_the_live_quota_tree_is_not_modified() -> None:
    queues, admitted = _admit(
        [wl("c1-low", "c1", {CPU: 3}, -1), wl("c2-low", "c2", {CPU: 3}, -1), wl("c2-mid", "c2", {CPU: 6})]
    )
    cohort = queues["c1"].parent
    assert cohort is not None
    before = [(node.name, dict(node.usage)) for node in (*queues.values(), cohort)]
    ctx = PreemptionContext(queues["c1"], CLUSTER_QUEUES["c1"][2], admitted, NOW)
    plan = plan_preemption(incoming("c1", {CPU: 4}), ctx)
    assert victims(plan) == [("c2-low", RECLAIM), ("c1-low", IN_CQ)]
    assert [(node.name, dict(node.usage)) for node in (*queues.values(), cohort)] == before
    assert queues["c1"].parent is cohort and [c.name for c in cohort.children] == ["c1", "c2"]


def _usage_everywhere(queues: Mapping[str, QuotaNode]) -> dict[str, dict[FlavorResource, Decimal]]:
    """Every node's usage map (absent entries stay absent), by node name, over the trees of ``queues``."""
    found: dict[str, dict[FlavorResource, Decimal]] = {}
    for node in queues.values():
        walk: QuotaNode | None = node
        while walk is not None:
            found[walk.name] = dict(walk.usage)
            walk = walk.parent
    return found


def test_a_simulation_puts_the_tree_back_when_the_plan_fails() -> None:
    """The usage is restored on the way out of the block, an exception included."""
    queues, admitted = _admit([wl("c1-low", "c1", {CPU: 3}, -1), wl("c2-low", "c2", {CPU: 9}, -1)])
    before = _usage_everywhere(queues)
    ctx = PreemptionContext(queues["c1"], CLUSTER_QUEUES["c1"][2], admitted, NOW)
    with pytest.raises(RuntimeError), Simulation.open(incoming("c1", {CPU: 4}), ctx) as sim:
        sim.remove(admitted[1])
        sim.add_usage(queues["c1"], {MEM: D(1)})  # a pair with no entry anywhere before
        assert queues["c2"].usage[CPU] == 0 and queues["c1"].usage[MEM] == 1
        raise RuntimeError("the plan failed half-way")
    assert _usage_everywhere(queues) == before and MEM not in queues["c1"].usage


def test_needs_preemption_defaults_to_the_pairs_that_do_not_fit() -> None:
    queues = build_world()
    add_usage(queues["standalone"], CPU, D(5))
    assert resources_needing_preemption(queues["standalone"], {CPU: D(2), BETA_MEM: D(1)}) == {CPU}
    preemptor = Preemptor(("", "in"), "standalone", 1, NOW, {CPU: D(2), BETA_MEM: D(1)})
    ctx = PreemptionContext(
        queues["standalone"], CLUSTER_QUEUES["standalone"][2], [wl("low", "standalone", {CPU: 5}, -1)], NOW
    )
    plan = plan_preemption(preemptor, ctx)
    assert victims(plan) == [("low", IN_CQ)]
    assert "(UID: UNKNOWN, JobUID: UNKNOWN)" in plan.victims[0].message


def test_cluster_queue_path() -> None:
    queues = build_world()
    assert cluster_queue_path(queues["standalone"]) == "/standalone"
    assert cluster_queue_path(queues["c2"]) == "/cohort/c2"


@pytest.mark.parametrize(
    ("rule", "preemptor_priority", "preemptor_queued", "candidate_priority", "candidate_queued", "allowed"),
    [
        ("LowerPriority", 10, NOW, 5, NOW, True),
        ("LowerPriority", 10, NOW, 10, NOW, False),
        ("LowerOrNewerEqualPriority", 10, NOW, 10, NOW, False),
        ("LowerOrNewerEqualPriority", 10, NOW + timedelta(minutes=1), 10, NOW, False),
        ("LowerOrNewerEqualPriority", 10, NOW, 10, NOW + timedelta(minutes=1), True),
        ("LowerOrNewerEqualPriority", 10, NOW, 5, NOW - timedelta(minutes=1), True),
        ("Any", 10, NOW, 10, NOW + timedelta(minutes=6), True),
        ("Any", 5, NOW, 10, NOW, True),
        ("Never", 10, NOW, 1, NOW, False),
    ],
)
def test_satisfies_policy(
    rule: str,
    preemptor_priority: int,
    preemptor_queued: datetime,
    candidate_priority: int,
    candidate_queued: datetime,
    allowed: bool,
) -> None:
    """Upstream's TestSatisfiesPreemptionPolicy (without the feature-gated buffer and priority boost)."""
    preemptor = incoming("standalone", {CPU: 1}, preemptor_priority, queued=preemptor_queued)
    candidate = wl("candidate", "standalone", {CPU: 1}, candidate_priority, queued=candidate_queued)
    assert satisfies_policy(rule, preemptor, candidate) is allowed


# --- properties -------------------------------------------------------------------------------------------


def _fits(queues: dict[str, QuotaNode], preemptor: Preemptor, *, allow_borrowing: bool = True) -> bool:
    node = queues[preemptor.cluster_queue]
    for fr, amount in preemptor.usage.items():
        if amount > max(D(0), available(node, fr)):
            return False
        if not allow_borrowing and node.usage.get(fr, D(0)) + amount > node.subtree_quota.get(fr, D(0)):
            return False
    return True


def _admit(workloads: list[AdmittedWorkload]) -> tuple[dict[str, QuotaNode], list[AdmittedWorkload]]:
    """A fresh world holding the Workloads of the list that fit, admitted in order (as a scheduler would)."""
    queues = build_world()
    admitted = []
    for w in workloads:
        node = queues[w.cluster_queue]
        if all(amount <= available(node, fr) for fr, amount in w.usage.items()):
            for fr, amount in w.usage.items():
                add_usage(node, fr, amount)
            admitted.append(w)
    return queues, admitted


_workloads = st.lists(
    st.tuples(st.sampled_from(["c1", "c2"]), st.integers(1, 4), st.integers(-2, 2)), min_size=1, max_size=8
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    generated=_workloads,
    request=st.integers(1, 8),
    priority=st.integers(-1, 3),
    target=st.sampled_from(["c1", "c2"]),
)
def test_victims_make_room_and_every_victim_is_needed(
    generated: list[tuple[str, int, int]], request: int, priority: int, target: str
) -> None:
    """With the victims gone the preemptor fits; with any one of them back it does not fit without borrowing.

    (Whether it may borrow depends on the run that found the victims; either
    way, a victim the fill back kept makes it not fit in that run's terms.)
    """
    workloads = [
        wl(f"w{i}", cq, {CPU: amount}, prio, reserved=NOW - timedelta(seconds=i))
        for i, (cq, amount, prio) in enumerate(generated)
    ]
    queues, admitted = _admit(workloads)
    before = _usage_everywhere(queues)
    preemptor = incoming(target, {CPU: request}, priority)
    ctx = PreemptionContext(queues[target], CLUSTER_QUEUES[target][2], admitted, NOW)
    plan = plan_preemption(preemptor, ctx)
    assert _usage_everywhere(queues) == before  # the simulation put back every entry it changed, and only those
    if plan.outcome != Outcome.PREEMPT:
        assert plan.victims == () and plan.message != "" or plan.outcome == Outcome.FITS
        assert (plan.outcome == Outcome.FITS) == _fits(queues, preemptor)
        return
    assert len({v.workload.key for v in plan.victims}) == len(plan.victims) > 0
    for victim in plan.victims:
        if victim.workload.cluster_queue == target:
            assert victim.workload.priority < priority and victim.reason == IN_CQ
        else:
            assert victim.workload.cluster_queue in queues and victim.reason != IN_CQ
    gone = [v.workload for v in plan.victims]

    def without(excluded: list[AdmittedWorkload]) -> dict[str, QuotaNode]:
        fresh = build_world()
        for w in admitted:
            if all(w is not e for e in excluded):
                for fr, amount in w.usage.items():
                    add_usage(fresh[w.cluster_queue], fr, amount)
        return fresh

    assert _fits(without(gone), preemptor)
    for victim in gone:
        assert not _fits(without([w for w in gone if w is not victim]), preemptor, allow_borrowing=False)


# --- the necessary condition the scheduler checks before planning ---------------------------------------

_POLICIES = [
    policy(),
    policy(within=LP),
    policy(within="LowerOrNewerEqualPriority"),
    policy(reclaim="Any"),
    policy(reclaim=LP),
    policy(within=LP, reclaim="Any"),
    policy(within="LowerOrNewerEqualPriority", reclaim=LP, borrow=LP, threshold=0),
    policy(within=LP, reclaim=LP, borrow=LP),
]
_HIERARCHY = {"cohort": "top", "cohort-no-limits": "top", "cohort-three": "top"}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    generated=st.lists(
        st.tuples(
            st.sampled_from(["c1", "c2", "d1", "d2", "a", "b", "c", "lend1", "lend2", "standalone"]),
            st.integers(1, 6),
            st.integers(1, 3),
            st.integers(-2, 2),
            st.booleans(),
        ),
        min_size=4,
        max_size=24,
    ),
    target=st.sampled_from(["c1", "c2", "d1", "d2", "a", "b", "c", "lend1", "standalone"]),
    cpu=st.integers(1, 12),
    mem=st.integers(0, 6),
    priority=st.integers(-1, 3),
    chosen=st.sampled_from(range(len(_POLICIES))),
    hierarchical=st.booleans(),
)
def test_no_plan_finds_victims_where_the_necessary_conditions_say_none_can_exist(
    generated: list[tuple[str, int, int, int, bool]],
    target: str,
    cpu: int,
    mem: int,
    priority: int,
    chosen: int,
    hierarchical: bool,
) -> None:
    """``may_find_candidates`` and ``may_free_enough`` only skip plans that would find nobody: every plan with
    victims passes both (and a preemptor that fits already passes the second)."""
    queues = build_world(cohort_parents=_HIERARCHY if hierarchical else None)
    admitted = []
    for i, (cq, cpus, mems, prio, evicted) in enumerate(generated):
        usage = {CPU: D(cpus), (ALPHA_MEM if cq == "standalone" else MEM): D(mems)}
        if cq in ("lend1", "lend2"):
            usage = {CPU: D(cpus)}
        node = queues[cq]
        if all(amount <= available(node, fr) for fr, amount in usage.items()):
            for fr, amount in usage.items():
                add_usage(node, fr, amount)
            admitted.append(
                AdmittedWorkload(("", f"w{i}"), cq, prio, usage, NOW - timedelta(seconds=i), NOW - timedelta(seconds=i), evicted, f"u{i}")
            )
    request = {CPU: D(cpu)}
    if mem and target not in ("lend1",):
        request[ALPHA_MEM if target == "standalone" else MEM] = D(mem)
    preemptor = Preemptor(("", "in"), target, priority, NOW, request)
    chosen_policy = _POLICIES[chosen]
    plan = plan_preemption(preemptor, PreemptionContext(queues[target], chosen_policy, admitted, NOW))
    own = [w.priority for w in admitted if w.cluster_queue == target]
    if not may_find_candidates(preemptor, queues[target], chosen_policy, own):
        assert plan.outcome in (Outcome.FITS, Outcome.NO_CANDIDATES), plan
    own_usage: dict[int, dict[FlavorResource, Decimal]] = {}
    for w in admitted:
        if w.cluster_queue == target:
            summed = own_usage.setdefault(w.priority, {})
            for fr, amount in w.usage.items():
                summed[fr] = summed.get(fr, D(0)) + amount
    before = _usage_everywhere(queues)
    enough = may_free_enough(preemptor, queues[target], chosen_policy, own_usage)
    assert _usage_everywhere(queues) == before, "the tree is put back"
    if not enough:
        event("may_free_enough said no")
        assert not plan.preempts and plan.outcome != Outcome.FITS, plan


# --- plans of one cycle sharing their classification --------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    generated=st.lists(
        st.tuples(
            st.sampled_from(["c1", "c2", "d1", "d2", "a", "b", "c", "l1"]),
            st.integers(1, 6),
            st.integers(-2, 2),
            st.booleans(),
            st.integers(0, 3),
        ),
        min_size=4,
        max_size=24,
    ),
    preemptors=st.lists(
        st.tuples(
            st.sampled_from(["c1", "c2", "d1", "d2", "a", "b", "c"]),
            st.integers(1, 8),
            st.integers(-1, 3),
            st.sampled_from(range(len(_POLICIES))),
            st.integers(-2, 2),
        ),
        min_size=2,
        max_size=5,
    ),
    hierarchical=st.booleans(),
)
def test_plans_sharing_a_classification_decide_as_plans_made_alone(
    generated: list[tuple[str, int, int, bool, int]],
    preemptors: list[tuple[str, int, int, int, int]],
    hierarchical: bool,
) -> None:
    """A cycle's plans share one classification of each queue's Workloads (``classified``) and read the victims
    claimed so far (``excluded``) without copying them: each plan is the plan made alone on the same tree over
    the Workloads not claimed, whatever was classified for the earlier ones (other preemptor priorities, queues,
    policies, queue order times)."""
    queues = build_world(cohort_parents=_HIERARCHY if hierarchical else None)
    grouped: dict[str, list[AdmittedWorkload]] = {}
    for i, (cq, cpus, prio, evicted, age) in enumerate(generated):
        node = queues[cq]
        if CPU in node.quotas and D(cpus) <= available(node, CPU):
            add_usage(node, CPU, D(cpus))
            queued = NOW - timedelta(seconds=age)
            grouped.setdefault(cq, []).append(
                AdmittedWorkload(("", f"w{i}"), cq, prio, {CPU: D(cpus)}, queued, NOW - timedelta(seconds=i), evicted, f"u{i}")
            )
    classified: Classification = {}
    claimed: set[tuple[str, str]] = set()
    for n, (target, cpus, priority, chosen, age) in enumerate(preemptors):
        preemptor = Preemptor(("", f"in{n}"), target, priority, NOW - timedelta(seconds=age), {CPU: D(cpus)})
        left = [w for held in grouped.values() for w in held if w.key not in claimed]
        alone = plan_preemption(preemptor, PreemptionContext(queues[target], _POLICIES[chosen], left, NOW))
        shared = plan_preemption(
            preemptor,
            PreemptionContext(queues[target], _POLICIES[chosen], grouped, NOW, excluded=claimed, classified=classified),
        )
        assert shared == alone
        if shared.preempts and n:
            event("a later plan preempts")
        for victim in shared.victims:  # as the scheduler does: claimed, their usage counted as released, the
            claimed.add(victim.workload.key)  # preemptor's held
            remove_usage(queues[victim.workload.cluster_queue], CPU, victim.workload.usage[CPU])
        if shared.preempts:
            add_usage(queues[target], CPU, D(cpus))
    if classified:
        event("classification shared")


def test_a_shared_classification_tells_apart_preemptors_queued_at_different_times() -> None:
    """Under ``LowerOrNewerEqualPriority`` an equal-priority holder is a candidate only for a preemptor queued
    before it: the second plan of the cycle, for an older preemptor, is not answered with the first one's list."""
    queues = build_world()
    holder = wl("holder", "preventStarvation", {CPU: 6}, 0, queued=NOW - timedelta(seconds=10))
    add_usage(queues["preventStarvation"], CPU, D(6))
    grouped = {"preventStarvation": [holder]}
    classified: Classification = {}
    newer = Preemptor(("", "newer"), "preventStarvation", 0, NOW, {CPU: D(2)})
    older = Preemptor(("", "older"), "preventStarvation", 0, NOW - timedelta(seconds=20), {CPU: D(2)})
    policy_ = CLUSTER_QUEUES["preventStarvation"][2]
    first = plan_preemption(newer, PreemptionContext(queues["preventStarvation"], policy_, grouped, NOW, classified=classified))
    second = plan_preemption(older, PreemptionContext(queues["preventStarvation"], policy_, grouped, NOW, classified=classified))
    assert not first.preempts
    assert victims(second) == [("holder", IN_CQ)]
