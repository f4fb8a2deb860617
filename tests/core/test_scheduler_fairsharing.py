"""Scheduling cycles with fair sharing: entry order by dominant resource share, fair-sharing preemption.

Each test names the case of upstream Kueue's ``pkg/scheduler/scheduler_fs_test.go``
(``TestScheduleForFairSharing``, v0.19.2) or ``scheduler_test.go``
(``TestEntryComparerLess``) it mirrors. Upstream's cycle takes one head per
ClusterQueue; where our cycle goes on with the next Workloads of a queue in
later rounds of the same cycle, the test says what differs.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest

from multikueue.api.clusterqueue import ClusterQueue
from multikueue.api.cohort import Cohort
from multikueue.api.localqueue import LocalQueue
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import Workload
from multikueue.core import Cache, CycleResult, schedule
from multikueue.dev.standins import evict_and_release
from multikueue.core.fairsharing import DRS, NEGATIVE_DRS, FairSharing
from multikueue.core.quota import QuotaNode
from multikueue.core.scheduler import _fairer

pytestmark = pytest.mark.unit

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
FS = FairSharing()
NS = "eng-alpha"


# --- builders ------------------------------------------------------------------------------------


def _groups(quotas: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    covered = sorted({r for resources in quotas.values() for r in resources})
    flavors = []
    for flavor, resources in quotas.items():
        entries = []
        for resource, quota in resources.items():
            entry: dict[str, Any] = {"name": resource}
            entry.update(quota if isinstance(quota, dict) else {"nominalQuota": str(quota)})
            entries.append(entry)
        flavors.append({"name": flavor, "resources": entries})
    return [{"coveredResources": covered, "flavors": flavors}]


def cluster_queue(
    name: str,
    cohort: str | None,
    quotas: dict[str, dict[str, Any]],
    *,
    weight: str | None = None,
    preemption: dict[str, Any] | None = None,
) -> ClusterQueue:
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": _groups(quotas)}
    if cohort:
        spec["cohortName"] = cohort
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    if preemption:
        spec["preemption"] = preemption
    return ClusterQueue.from_k8s({"metadata": {"name": name}, "spec": spec})


def cohort(name: str, parent: str | None = None, quotas: dict[str, dict[str, Any]] | None = None, weight: str | None = None) -> Cohort:
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if quotas:
        spec["resourceGroups"] = _groups(quotas)
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return Cohort.from_k8s({"metadata": {"name": name}, "spec": spec})


def setup(queues: list[ClusterQueue], cohorts: list[Cohort] = (), flavors: tuple[str, ...] = ("on-demand",)) -> Cache:  # type: ignore[assignment]
    """A cache with the flavors, cohorts and ClusterQueues, and a LocalQueue ``lq-<cq>`` for each queue."""
    cache = Cache()
    cache.upsert_namespace(NS, {"kubernetes.io/metadata.name": NS})
    for name in flavors:
        cache.upsert_flavor(ResourceFlavor.from_k8s({"metadata": {"name": name}, "spec": {}}))
    for c in cohorts:
        cache.upsert_cohort(c)
    for cq in queues:
        cache.upsert_cluster_queue(cq)
        cache.upsert_local_queue(
            LocalQueue.from_k8s({"metadata": {"name": f"lq-{cq.name}", "namespace": NS}, "spec": {"clusterQueue": cq.name}})
        )
    return cache


def _condition(type_: str, reason: str, at: datetime = NOW) -> dict[str, Any]:
    return {"type": type_, "status": "True", "reason": reason, "message": "", "lastTransitionTime": at.isoformat()}


def workload(
    name: str,
    cq: str,
    cpu: str,
    *,
    priority: int | None = None,
    age: int = 0,
    admitted_in: str | None = None,
    admitted_at: datetime = NOW,
    resource: str = "cpu",
    uid: str | None = None,
    job_uid: str | None = None,
) -> Workload:
    """A one-pod Workload of LocalQueue ``lq-<cq>``; ``admitted_in`` (a flavor) makes it hold its request there."""
    body: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid or name,
            "creationTimestamp": (NOW - timedelta(seconds=age)).isoformat(),
            **({"labels": {"kueue.x-k8s.io/job-uid": job_uid}} if job_uid else {}),
        },
        "spec": {
            "queueName": f"lq-{cq}",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {resource: cpu}}}]}
                    },
                }
            ],
        },
    }
    if priority is not None:
        body["spec"]["priority"] = priority
    if admitted_in is not None:
        body["status"] = {
            "admission": {
                "clusterQueue": cq,
                "podSetAssignments": [
                    {"name": "main", "flavors": {resource: admitted_in}, "resourceUsage": {resource: cpu}, "count": 1}
                ],
            },
            "conditions": [_condition("QuotaReserved", "QuotaReserved", admitted_at), _condition("Admitted", "Admitted", admitted_at)],
        }
    return Workload.from_k8s(body)


def add(cache: Cache, *workloads: Workload) -> None:
    for wl in workloads:
        cache.upsert_workload(wl)


def admitted(result: CycleResult) -> list[tuple[str, str, dict[str, str]]]:
    """(name, ClusterQueue, resource -> flavor) of each admission, in decision order."""
    return [
        (d.key[1], d.cluster_queue, dict(d.admission.pod_set_assignments[0].flavors or {})) for d in result.admitted
    ]


def admitted_names(result: CycleResult) -> list[str]:
    return [d.key[1] for d in result.admitted]


# --- ordering ------------------------------------------------------------------------------------


def lowest_drf_after_admission() -> Cache:
    cache = setup(
        [cluster_queue("b", "A", {"on-demand": {"cpu": 0}}), cluster_queue("c", "A", {"on-demand": {"cpu": 0}})],
        [cohort("A", quotas={"on-demand": {"cpu": 100}})],
    )
    add(
        cache,
        workload("b0", "b", "10", admitted_in="on-demand"),
        workload("b1", "b", "50"),
        workload("c1", "c", "75", age=10),  # older: the classical order would take it first
    )
    return cache


def test_schedule_workload_with_lowest_drf_after_admission() -> None:
    """"fair sharing schedule workload with lowest drf after admission": b0+b1 = 60 < c1 = 75, so b1 goes first."""
    cache = lowest_drf_after_admission()
    result = schedule(cache, NOW, FS)
    assert admitted_names(result) == ["b1"]
    assert "c1" in {u.key[1] for u in result.pending}


def test_without_fair_sharing_the_older_entry_goes_first() -> None:
    """The same queues without fair sharing: both borrow, equal priority, the older c1 wins (classical order)."""
    result = schedule(lowest_drf_after_admission(), NOW)
    assert admitted_names(result) == ["c1"]


def test_hierarchical_fair_sharing_schedule_workload_which_wins_tournament() -> None:
    """"hierarchical fair sharing schedule workload which wins tournament".

    A(200) has cohorts B (d: 10 used, e: 20 used) and C (g: 100 used). At B,
    d with d1 (80) beats e with e1 (81); at C, f with f1 (1) beats g with g1
    (101); at A, B with d1 (100) beats C with f1 (101). d1 fills A; the others
    no longer fit.
    """
    zero = {"on-demand": {"cpu": 0}}
    cache = setup(
        [cluster_queue("d", "B", zero), cluster_queue("e", "B", zero), cluster_queue("f", "C", zero), cluster_queue("g", "C", zero)],
        [cohort("A", quotas={"on-demand": {"cpu": 200}}), cohort("B", parent="A"), cohort("C", parent="A")],
    )
    add(
        cache,
        workload("d0", "d", "10", admitted_in="on-demand"),
        workload("e0", "e", "20", admitted_in="on-demand"),
        workload("g0", "g", "100", admitted_in="on-demand"),
        workload("d1", "d", "70"),
        workload("e1", "e", "61", age=10),  # older: the classical order would take e1, f1 and g1, not d1
        workload("f1", "f", "1", age=10),
        workload("g1", "g", "1", age=10),
    )
    result = schedule(cache, NOW, FS)
    assert admitted(result) == [("d1", "d", {"cpu": "on-demand"})]
    assert {u.key[1] for u in result.pending} == {"e1", "f1", "g1"}


@pytest.mark.parametrize("weight", ["0", "123456789"])
def test_two_queues_with_weight_0_or_high_schedule_the_workload_which_borrows_less(weight: str) -> None:
    """"fair sharing two queues with weight 0 schedules workload which borrows less" and "... with high weight ...".

    b already borrows 4 of A's 8; c1 (c would borrow 4) beats the higher-priority
    b1 (b would borrow 8). With weight 0 both shares are infinite and compare
    by their unweighted share.
    """
    policy = {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}
    cache = setup(
        [
            cluster_queue("b", "A", {"on-demand": {"cpu": 0}}, weight=weight, preemption=policy),
            cluster_queue("c", "A", {"on-demand": {"cpu": 0}}, weight=weight, preemption=policy),
        ],
        [cohort("A", quotas={"on-demand": {"cpu": 8}})],
    )
    add(
        cache,
        workload("b0", "b", "4", admitted_in="on-demand"),
        workload("b1", "b", "4", priority=9001),
        workload("c1", "c", "4", priority=0),
    )
    result = schedule(cache, NOW, FS)
    assert admitted_names(result) == ["c1"]
    assert result.preempted == []
    assert "b1" in {u.key[1] for u in result.pending}


def equal_shares() -> Cache:
    return setup(
        [cluster_queue("b", "A", {"on-demand": {"cpu": 0}}), cluster_queue("c", "A", {"on-demand": {"cpu": 0}})],
        [cohort("A", quotas={"on-demand": {"cpu": 10}}), cohort("B")],
    )


def test_schedule_highest_priority_first() -> None:
    """"fair sharing schedule highest priority first": equal shares, c1 (101) before b1 (99)."""
    cache = equal_shares()
    add(cache, workload("b1", "b", "10", priority=99, age=10), workload("c1", "c", "10", priority=101))
    assert admitted_names(schedule(cache, NOW, FS)) == ["c1"]


def test_schedule_earliest_timestamp_first() -> None:
    """"fair sharing schedule earliest timestamp first": equal shares and priorities, the older b1 first."""
    cache = equal_shares()
    add(cache, workload("b1", "b", "10", age=10), workload("c1", "c", "10"))
    assert admitted_names(schedule(cache, NOW, FS)) == ["b1"]


def test_schedule_workload_with_lowest_share_first() -> None:
    """"with fair sharing: schedule workload with lowest share first".

    eng (on-demand 50+50+10, spot 100+0): eng-alpha uses its 50, eng-beta
    borrows 5. ``new`` (alpha, 5) would take alpha's share to 5*1000/210,
    ``older_new`` (beta, 1) beta's to 6*1000/210: ``new`` goes first in
    on-demand, which it fills. Upstream then says of ``older_new`` "no longer
    fits" (it keeps its nominated on-demand); our cycle assigns it again and
    it borrows alpha's unused spot.
    """
    cache = setup(
        [
            cluster_queue(
                "eng-alpha", "eng", {"on-demand": {"cpu": {"nominalQuota": "50", "borrowingLimit": "50"}},
                                     "spot": {"cpu": {"nominalQuota": "100", "borrowingLimit": "0"}}},
            ),
            cluster_queue(
                "eng-beta", "eng", {"on-demand": {"cpu": {"nominalQuota": "50", "borrowingLimit": "10"}},
                                    "spot": {"cpu": {"nominalQuota": "0", "borrowingLimit": "100"}}},
                preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            ),
            cluster_queue("eng-shared", "eng", {"on-demand": {"cpu": {"nominalQuota": "10", "borrowingLimit": "0"}}}),
        ],
        flavors=("on-demand", "spot"),
    )
    add(
        cache,
        workload("all_nominal", "eng-alpha", "50", admitted_in="on-demand"),
        workload("borrowing", "eng-beta", "55", admitted_in="on-demand"),
        workload("older_new", "eng-beta", "1", age=60),
        workload("new", "eng-alpha", "5"),
    )
    result = schedule(cache, NOW, FS)
    assert admitted(result) == [
        ("new", "eng-alpha", {"cpu": "on-demand"}),
        ("older_new", "eng-beta", {"cpu": "spot"}),
    ]
    assert result.preempted == []


def test_nominal_first_ordering_admits_the_workload_fitting_within_nominal_despite_a_higher_share() -> None:
    """"with fair sharing: nominal-first ordering admits workload fitting within nominal despite higher CQ DRS".

    fs-nom-a borrows 30 spot (share 30*1000/160) but nom-wl fits in its
    nominal on-demand; fs-nom-b's borrow-wl gives the lower share (10*1000/160)
    but borrows on-demand, which it requests. ``FairSharingPrioritizeNonBorrowing``:
    nom-wl first. Upstream's two resource groups for the same resource are one
    group with both flavors here. Upstream then says borrow-wl "no longer fits"
    (on-demand is full); our cycle assigns it again and it fits in fs-nom-b's
    own spot.
    """
    cache = setup(
        [
            cluster_queue(
                "fs-nom-a", "fs-nom", {"on-demand": {"cpu": {"nominalQuota": "50", "borrowingLimit": "0"}},
                                       "spot": {"cpu": {"nominalQuota": "50", "borrowingLimit": "50"}}},
            ),
            cluster_queue(
                "fs-nom-b", "fs-nom", {"on-demand": {"cpu": {"nominalQuota": "10", "borrowingLimit": "50"}},
                                       "spot": {"cpu": {"nominalQuota": "50", "borrowingLimit": "0"}}},
            ),
        ],
        flavors=("on-demand", "spot"),
    )
    add(
        cache,
        workload("spot-heavy", "fs-nom-a", "80", admitted_in="spot"),
        workload("light-usage", "fs-nom-b", "5", admitted_in="on-demand"),
        workload("borrow-wl", "fs-nom-b", "15", age=60),
        workload("nom-wl", "fs-nom-a", "45"),
    )
    result = schedule(cache, NOW, FS)
    assert admitted(result) == [
        ("nom-wl", "fs-nom-a", {"cpu": "on-demand"}),
        ("borrow-wl", "fs-nom-b", {"cpu": "spot"}),
    ]


def test_singleton_queues_and_a_queue_without_cohort_are_all_scheduled() -> None:
    """"fair sharing schedule singleton cqs and cq without cohort": no tournament is needed outside a cohort tree."""
    cache = setup(
        [
            cluster_queue("a", None, {"on-demand": {"cpu": 10}}),
            cluster_queue("b", "B", {"on-demand": {"cpu": 10}}),
            cluster_queue("c", "C", {"on-demand": {"cpu": 10}}),
        ]
    )
    add(cache, workload("a1", "a", "10"), workload("b1", "b", "10"), workload("c1", "c", "10"))
    assert sorted(admitted_names(schedule(cache, NOW, FS))) == ["a1", "b1", "c1"]


def test_the_shares_are_taken_with_the_quota_admitted_earlier_in_the_cycle() -> None:
    """Upstream pops one entry at a time from a snapshot holding the cycle's earlier admissions.

    A(100) has cohorts B (d, e) and C (f). d1 (10) wins first (B at 10 against
    C at 15). Then B with e1 would be at 20, C with f1 at 15: f1 before e1,
    although e1 alone (10) is below f1.
    """
    zero = {"on-demand": {"cpu": 0}}
    cache = setup(
        [cluster_queue("d", "B", zero), cluster_queue("e", "B", zero), cluster_queue("f", "C", zero)],
        [cohort("A", quotas={"on-demand": {"cpu": 100}}), cohort("B", parent="A"), cohort("C", parent="A")],
    )
    add(cache, workload("d1", "d", "10", age=30), workload("e1", "e", "10", age=20), workload("f1", "f", "15", age=10))
    assert admitted_names(schedule(cache, NOW, FS)) == ["d1", "f1", "e1"]


# --- preemption ------------------------------------------------------------------------------------


def preemptions(result: CycleResult) -> dict[str, tuple[str, str]]:
    return {d.victim[1]: (d.reason, d.message) for d in result.preempted}


def test_preempt_workload_from_cq_with_the_highest_share() -> None:
    """"with fair sharing: preempt workload from CQ with the highest share".

    eng-beta's preemptor (30) stays within beta's nominal on-demand, so it
    reclaims: first from eng-alpha (borrowing 30, the highest share), then
    from eng-gamma (borrowing 20, now the highest); both ``InCohortReclamation``.
    """
    cache = setup(
        [
            cluster_queue(
                "eng-alpha", "eng", {"on-demand": {"cpu": {"nominalQuota": "50", "borrowingLimit": "50"}},
                                     "spot": {"cpu": {"nominalQuota": "100", "borrowingLimit": "0"}}},
            ),
            cluster_queue(
                "eng-beta", "eng", {"on-demand": {"cpu": {"nominalQuota": "50", "borrowingLimit": "10"}},
                                    "spot": {"cpu": {"nominalQuota": "0", "borrowingLimit": "100"}}},
                preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            ),
            cluster_queue("eng-gamma", "eng", {"on-demand": {"cpu": {"nominalQuota": "50", "borrowingLimit": "0"}}}),
        ],
        flavors=("on-demand", "spot"),
    )
    add(cache, workload("all_spot", "eng-alpha", "100", admitted_in="spot"))
    add(cache, *(workload(f"alpha{i}", "eng-alpha", "20", admitted_in="on-demand") for i in range(1, 5)))
    add(cache, workload("gamma1", "eng-gamma", "10", admitted_in="on-demand"))
    add(cache, *(workload(f"gamma{i}", "eng-gamma", "20", admitted_in="on-demand") for i in range(2, 5)))
    add(cache, workload("preemptor", "eng-beta", "30", uid="wl-preemptor", job_uid="job-preemptor"))
    result = schedule(cache, NOW, FS)
    assert admitted_names(result) == []
    message = (
        "Preempted to accommodate a workload (UID: wl-preemptor, JobUID: job-preemptor) due to reclamation within "
        "the cohort; preemptor path: /eng/eng-beta; preemptee path: /eng/{cq}"
    )
    assert preemptions(result) == {
        "alpha1": ("InCohortReclamation", message.format(cq="eng-alpha")),
        "gamma1": ("InCohortReclamation", message.format(cq="eng-gamma")),
    }
    assert {u.key[1]: u.message for u in result.pending}["preemptor"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor on-demand, 30 more "
        "needed, insufficient unused quota for cpu in flavor spot, 30 more needed. Pending the preemption of 2 workload(s)"
    )


def test_in_cq_preemption_for_cq_without_cohort() -> None:
    """"fair sharing: in-CQ preemption for CQ without cohort; repro for nil pointer panic"."""
    cache = setup(
        [cluster_queue("no-cohort-cq", None, {"default": {"cpu": 4}}, preemption={"withinClusterQueue": "LowerPriority"})],
        flavors=("default",),
    )
    add(
        cache,
        workload("nc-low", "no-cohort-cq", "4", priority=-1, admitted_in="default"),
        workload("nc-high", "no-cohort-cq", "4", priority=100, uid="wl-nc-high", job_uid="job-nc-high"),
    )
    result = schedule(cache, NOW, FS)
    message = (
        "Preempted to accommodate a workload (UID: wl-nc-high, JobUID: job-nc-high) due to prioritization in the "
        "ClusterQueue; preemptor path: /no-cohort-cq; preemptee path: /no-cohort-cq"
    )
    assert preemptions(result) == {"nc-low": ("InClusterQueue", message)}
    assert {u.key[1]: u.message for u in result.pending}["nc-high"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 4 more needed. "
        "Pending the preemption of 1 workload(s)"
    )


def test_not_enough_resources_with_fair_sharing_enabled() -> None:
    """"not enough resources with fair sharing enabled": above the maximum capacity, no preemption is tried."""
    cache = setup(
        [cluster_queue("sales", None, {"default": {"cpu": 50}}, preemption={"withinClusterQueue": "LowerPriority"})],
        flavors=("default",),
    )
    add(cache, workload("new", "sales", "100"))
    result = schedule(cache, NOW, FS)
    assert result.preempted == []
    assert {u.key[1]: u.message for u in result.pending}["new"] == (
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, previously considered "
        "podsets requests (0) + current podset request (100) > maximum capacity (50)"
    )


def test_fair_sharing_reclaims_from_the_queue_whose_share_is_highest_not_by_priority() -> None:
    """Classical reclamation takes the lowest priority first; fair sharing takes from the highest share.

    b and c (4 each, cohort of 12 with a) both borrow; c borrows more. a's
    preemptor (within nominal) reclaims c's Workload although b's has the
    lower priority (upstream's TargetClusterQueueOrdering; classical preemption
    would take b's).
    """
    any_policy = {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}
    queues = [
        cluster_queue("a", "all", {"on-demand": {"cpu": 4}}, preemption=any_policy),
        cluster_queue("b", "all", {"on-demand": {"cpu": 4}}),
        cluster_queue("c", "all", {"on-demand": {"cpu": 4}}),
    ]
    workloads = [
        workload("b1", "b", "5", priority=-5, admitted_in="on-demand"),
        workload("c1", "c", "7", priority=5, admitted_in="on-demand"),
        workload("a1", "a", "4"),
    ]
    fair = setup(queues)
    add(fair, *workloads)
    assert preemptions(schedule(fair, NOW, FS)).keys() == {"c1"}
    classical = setup(queues)
    add(classical, *workloads)
    assert preemptions(schedule(classical, NOW)).keys() == {"b1"}


# --- status.fairSharing ----------------------------------------------------------------------------------


def test_cluster_queue_status_reports_the_weighted_share_only_with_fair_sharing() -> None:
    """Upstream's ClusterQueue reconciler: ``status.fairSharing.weightedShare`` = the share rounded up
    (max int64 for a borrowing queue of weight 0) when fair sharing is on, else nothing."""
    cache = setup(
        [
            cluster_queue("b", "A", {"on-demand": {"cpu": 2}}, weight="2"),
            cluster_queue("c", "A", {"on-demand": {"cpu": 2}}, weight="0"),
            cluster_queue("d", "A", {"on-demand": {"cpu": 6}}),
        ],
    )
    add(
        cache,
        workload("b1", "b", "5", admitted_in="on-demand"),  # borrows 3 of the 10 its cohort could lend: 300 / 2
        workload("c1", "c", "3", admitted_in="on-demand"),  # borrows with weight 0
    )

    def fields(name: str) -> dict[str, Any]:
        view = cache.cluster_queue_status(name)
        assert view is not None
        return view.status_fields()

    assert "fairSharing" not in fields("b")
    cache.fair_sharing_status = True
    assert fields("b")["fairSharing"] == {"weightedShare": 150}
    assert fields("c")["fairSharing"] == {"weightedShare": 2**63 - 1}
    assert fields("d")["fairSharing"] == {"weightedShare": 0}


# --- the comparison at one cohort (upstream's entryComparer.less) -------------------------------------------


def _entry(name: str, age: int, requested: dict[tuple[str, str], int]) -> Any:
    """A stand-in for the scheduler's entry: what ``_fairer`` reads (assignment usage, queue order)."""
    order = (0, NOW - timedelta(seconds=age), NS, name)
    usage = {fr: Decimal(v) for fr, v in requested.items()}
    return SimpleNamespace(assignment=SimpleNamespace(usage=usage), workload=SimpleNamespace(order=order))


@pytest.mark.parametrize(
    ("a_share", "b_share", "a_age", "b_age", "want"),
    [
        # "non-borrowing subtree preferred over borrowing subtree" (b borrows in the cpu it requests)
        ("zero", "borrowing", 0, 10, True),
        # "both borrowing on requested flavors falls through to FIFO" (a is the newer)
        ("borrowing", "borrowing", 0, 10, False),
        # "lower DRS preferred over higher DRS"
        ("negative", "zero", 0, 10, True),
        # "both non-borrowing falls through to FIFO" (a is the older)
        ("zero", "zero", 10, 0, True),
    ],
)
def test_entry_comparer_less(a_share: str, b_share: str, a_age: int, b_age: int, want: bool) -> None:
    """TestEntryComparerLess (``scheduler_test.go``), the cases without the alpha PrioritizePreemptorWorkloads gate."""
    cpu = ("default", "cpu")
    shares = {"zero": DRS(), "negative": NEGATIVE_DRS, "borrowing": DRS(unweighted_ratio=Decimal(0), borrowed=frozenset({cpu}))}
    cohort = QuotaNode("cohort", is_cohort=True)
    a, b = _entry("a", a_age, {cpu: 1}), _entry("b", b_age, {cpu: 1})
    table = {(id(cohort), id(a)): shares[a_share], (id(cohort), id(b)): shares[b_share]}
    assert _fairer(a, b, cohort, table) is want


# --- over several cycles ---------------------------------------------------------------------------------


def _confirm(cache: Cache, result: CycleResult) -> None:
    """What the I/O layer writes for each admission, coming back through the watch."""
    for decision in result.admitted:
        wl = cache.workload(decision.key)
        assert wl is not None
        body = wl.to_k8s()
        body["status"] = {
            "admission": decision.admission.to_dict(),
            "conditions": [_condition("QuotaReserved", "QuotaReserved"), _condition("Admitted", "Admitted")],
        }
        cache.upsert_workload(Workload.from_k8s(body))


def _evict(cache: Cache, result: CycleResult) -> None:
    """What the I/O layer writes for each victim, coming back through the watch (quota released)."""
    evict_and_release(cache, result.preempted, NOW)


def test_a_fair_share_is_reached_and_kept_over_cycles() -> None:
    """Ours, over cycles: b's preemptor takes back its share from a, which borrowed it all; then nobody
    preempts again (upstream's "scenario above does not flap", at the scheduler's level)."""
    policy = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    cache = setup(
        [cluster_queue("a", "all", {"on-demand": {"cpu": 3}}, preemption=policy),
         cluster_queue("b", "all", {"on-demand": {"cpu": 3}}, preemption=policy)],
    )  # fmt: skip
    add(cache, *(workload(f"a{i}", "a", "1", age=100 - i) for i in range(1, 7)))
    first = schedule(cache, NOW, FS)
    assert len(first.admitted) == 6  # a borrows all of b's quota
    _confirm(cache, first)

    add(cache, workload("b1", "b", "2"))
    second = schedule(cache, NOW + timedelta(seconds=1), FS)
    assert admitted_names(second) == []
    assert {d.reason for d in second.preempted} == {"InCohortReclamation"}
    assert len(second.preempted) == 2  # b stays within its nominal: it reclaims exactly what it needs
    _evict(cache, second)

    third = schedule(cache, NOW + timedelta(seconds=2), FS)
    assert admitted_names(third) == ["b1"]
    # a's evicted Workloads are tried again in the same cycle and wait: nobody preempts back (no flapping)
    assert third.preempted == []
    assert {u.key[1] for u in third.pending} == {d.victim[1] for d in second.preempted}
