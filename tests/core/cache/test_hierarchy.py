"""The quota tree: cohort shapes, usage when Workloads take and give back quota, the counters."""

from __future__ import annotations

import gc
from decimal import Decimal
from typing import Any

import pytest

from multikueue.api.cohort import Cohort
from multikueue.core.cache.hierarchy import Contribution, QueueStats, QuotaTree, admission_usage
from multikueue.core.quota import QuotaNode

pytestmark = pytest.mark.unit

#: The ``build`` fixture (``Builders`` in this folder's conftest).
Build = Any
CPU = ("default-flavor", "cpu")


def contribution(cq: str, cpu: int, *, admitted: bool = True, lq: str = "user-queue") -> Contribution:
    return Contribution(cq, ("default", lq), {CPU: Decimal(cpu)}, admitted)


def tree_with(build: Build, cohorts: dict[str, Cohort] | None = None, **queues: dict[str, Any]) -> QuotaTree:
    """A tree holding ClusterQueue ``name=spec`` for each keyword (spec as ``build.cluster_queue`` takes it)."""
    tree = QuotaTree(cohorts if cohorts is not None else {})
    for name, spec in queues.items():
        tree.put_cluster_queue(name, build.cluster_queue(name, **spec).spec)
    return tree


def test_admission_usage_sums_pod_sets_per_flavor_and_resource(build: Build) -> None:
    admission = build.admission(usage={"cpu": "1500m", "memory": "1Gi"})
    second = admission.pod_set_assignments[0].model_copy(update={"name": "other"})
    admission = admission.model_copy(update={"pod_set_assignments": [*admission.pod_set_assignments, second]})
    assert admission_usage(admission) == {CPU: Decimal(3), ("default-flavor", "memory"): Decimal(2 * 1024**3)}


def test_a_cluster_queue_alone_is_its_own_tree(build: Build) -> None:
    tree = QuotaTree({})
    node, affected = tree.put_cluster_queue("cq", build.cluster_queue("cq").spec)
    assert affected == {"cq"} and node.parent is None
    assert node.subtree_quota == {CPU: Decimal(9)}
    assert tree.tree_of("cq") == {"cq"}
    assert tree.cohort_root("cq") == "clusterqueue/cq"
    assert tree.cohort_root("unknown") == "clusterqueue/unknown"


def test_usage_goes_up_the_tree_and_comes_back_exactly(build: Build) -> None:
    tree = tree_with(build, a={"quotas": {"default-flavor": {"cpu": 5}}, "cohortName": "team"}, b={"cohortName": "team"})
    node, _ = tree.put_cluster_queue("a", build.cluster_queue("a", {"default-flavor": {"cpu": 5}}, cohortName="team").spec)
    assert node.parent is not None and node.parent.subtree_quota == {CPU: Decimal(14)}
    assert tree.tree_of("a") == {"a", "b"} and tree.cohort_root("b") == "cohort/team"

    assert tree.set_contribution(("default", "w"), contribution("a", 6)) == ("a",)
    assert node.usage == {CPU: Decimal(6)} and node.parent.usage == {CPU: Decimal(6)}
    assert tree.usage("a") == {CPU: Decimal(6)}
    stats = tree.cluster_queue_stats("a")
    assert (stats.reserving, stats.admitted, stats.admitted_usage) == (1, 1, {CPU: Decimal(6)})
    assert tree.local_queue_stats(("default", "user-queue")).reserving == 1

    assert tree.set_contribution(("default", "w"), None) == ("a",)
    assert node.usage == {CPU: Decimal(0)} and node.parent.usage == {CPU: Decimal(0)}
    assert tree.usage("a") == {}  # zero entries are left out
    assert tree.set_contribution(("default", "w"), None) == ()


def test_same_quota_in_the_same_queue_only_changes_the_counters(build: Build) -> None:
    tree = tree_with(build, cq={})
    key = ("default", "w")
    assert tree.set_contribution(key, contribution("cq", 4, admitted=False)) == ("cq",)
    assert tree.cluster_queue_stats("cq").admitted == 0
    assert tree.set_contribution(key, contribution("cq", 4, admitted=True)) == ()  # reserving -> admitted
    stats = tree.cluster_queue_stats("cq")
    assert (stats.reserving, stats.admitted, stats.reservation) == (1, 1, {CPU: Decimal(4)})
    assert tree.set_contribution(key, contribution("cq", 4, admitted=True)) == ()
    assert tree.set_contribution(key, contribution("other", 4)) == ("cq", "other")  # moved: both queues change
    assert tree.usage("cq") == {} and tree.usage("other") == {CPU: Decimal(4)}


def test_usage_held_before_the_cluster_queue_exists_counts_when_it_appears(build: Build) -> None:
    tree = QuotaTree({})
    tree.set_contribution(("default", "w"), contribution("late", 3))
    assert tree.usage("late") == {CPU: Decimal(3)}
    node, _ = tree.put_cluster_queue("late", build.cluster_queue("late").spec)
    assert node.usage == {CPU: Decimal(3)}
    tree.set_contribution(("default", "w"), None)
    assert node.usage == {CPU: Decimal(0)}


def test_removing_a_cluster_queue_keeps_usage_and_reports_its_peers(build: Build) -> None:
    tree = tree_with(build, a={"cohortName": "team"}, b={"cohortName": "team"})
    tree.set_contribution(("default", "w"), contribution("a", 4))
    b_node, _ = tree.put_cluster_queue("b", build.cluster_queue("b", cohortName="team").spec)
    cohort = b_node.parent
    assert cohort is not None and cohort.usage == {CPU: Decimal(4)}
    assert tree.remove_cluster_queue("a") == {"a", "b"}
    assert cohort.usage == {} and cohort.subtree_quota == {CPU: Decimal(9)}
    assert tree.usage("a") == {CPU: Decimal(4)}  # still held, counts again if "a" comes back
    assert tree.remove_cluster_queue("a") == {"a"}
    a_node, _ = tree.put_cluster_queue("a", build.cluster_queue("a", cohortName="team").spec)
    assert a_node.usage == {CPU: Decimal(4)} and cohort.usage == {CPU: Decimal(4)}


def test_moving_a_cluster_queue_refreshes_and_reports_both_trees(build: Build) -> None:
    tree = tree_with(build, a={"cohortName": "one"}, b={"cohortName": "one"}, c={"cohortName": "two"})
    node, affected = tree.put_cluster_queue("a", build.cluster_queue("a", cohortName="two").spec)
    assert affected == {"a", "b", "c"}
    assert node.parent is not None and node.parent.name == "two" and node.parent.subtree_quota == {CPU: Decimal(18)}
    assert tree.tree_of("b") == {"b"}
    # The implicit cohort "one" is dropped once nobody names it.
    _, affected = tree.put_cluster_queue("b", build.cluster_queue("b").spec)
    assert affected == {"b"} and tree.cohort_root("b") == "clusterqueue/b"


def test_cohort_objects_give_quota_and_a_parent(build: Build) -> None:
    cohorts: dict[str, Cohort] = {}
    tree = tree_with(build, cohorts, a={"cohortName": "team"}, b={"cohortName": "org"})
    cohorts["team"] = build.cohort("team", {"default-flavor": {"cpu": 2}}, parent="org")
    assert tree.reshape_cohort("team") == {"a", "b"}
    assert tree.cohort_root("a") == tree.cohort_root("b") == "cohort/org"
    node, _ = tree.put_cluster_queue("b", build.cluster_queue("b", cohortName="org").spec)
    assert node.parent is not None and node.parent.subtree_quota == {CPU: Decimal(20)}  # 9 + 9 + the cohort's 2

    # A parent that would make a cycle is ignored.
    cohorts["org"] = build.cohort("org", parent="team")
    assert tree.reshape_cohort("org") == {"a", "b"}
    assert tree.cohort_root("a") == "cohort/org"

    del cohorts["team"]
    assert tree.remove_cohort("team") == {"a", "b"}
    assert tree.cohort_root("a") == "cohort/team"  # still an implicit cohort: "a" names it
    assert tree.tree_of("a") == {"a"}
    assert tree.remove_cohort("never-seen") == set()


def test_stats_of_unknown_queues_are_empty() -> None:
    tree = QuotaTree({})
    assert tree.cluster_queue_stats("none") == QueueStats()
    assert tree.local_queue_stats(("ns", "none")) == QueueStats()
    assert tree.usage("none") == {}


def test_a_removed_cohort_is_not_kept_alive_by_the_names_of_its_tree(build: Build) -> None:
    """The names ``tree_of`` keeps per tree go with any change of shape: a cohort whose ClusterQueues are all
    gone leaves nothing behind (its node was kept, with the nodes it reached, for as long as the cache ran)."""
    cohort = "cohort-removed-in-this-test"
    tree = tree_with(build, a={"cohortName": cohort}, b={"cohortName": cohort})
    assert tree.tree_of("a") == {"a", "b"}
    tree.remove_cluster_queue("a")
    tree.remove_cluster_queue("b")
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, QuotaNode) and o.name == cohort]


def test_the_names_of_a_tree_follow_every_change_of_its_shape(build: Build) -> None:
    """``tree_of`` keeps each tree's names until its shape changes: joining, leaving and moving queues,
    and a Cohort object giving the tree a new root, all show at once."""
    tree = tree_with(build, a={"cohortName": "team"}, b={"cohortName": "team"})
    assert tree.tree_of("a") == {"a", "b"}
    tree.put_cluster_queue("c", build.cluster_queue("c", cohortName="team").spec)
    assert tree.tree_of("a") == {"a", "b", "c"} and tree.tree_of("c") == {"a", "b", "c"}
    tree.put_cluster_queue("b", build.cluster_queue("b", cohortName="other").spec)
    assert tree.tree_of("a") == {"a", "c"} and tree.tree_of("b") == {"b"}
    tree.remove_cluster_queue("c")
    assert tree.tree_of("a") == {"a"}
    cohorts = {"team": build.cohort("team", parent="top"), "other": build.cohort("other", parent="top")}
    joined = QuotaTree(cohorts)
    for name, cohort_name in (("a", "team"), ("b", "other")):
        joined.put_cluster_queue(name, build.cluster_queue(name, cohortName=cohort_name).spec)
    assert joined.tree_of("a") == {"a", "b"}
    cohorts["other"] = build.cohort("other")  # no parent any more: its own tree
    joined.reshape_cohort("other")
    assert joined.tree_of("a") == {"a"} and joined.tree_of("b") == {"b"}
