"""The Cache facade: its public surface, and how it turns the parts' reports into dirty marks."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

import multikueue.core.cache as cache_module
from multikueue.core.cache import Cache, DirtyQueues

pytestmark = pytest.mark.unit

#: The ``build`` fixture (``Builders`` in this folder's conftest).
Build = Any
CPU = ("default-flavor", "cpu")

PUBLIC_METHODS = {
    "admission_check_controller", "assume", "candidates", "cluster_queue", "cluster_queue_names", "cluster_queue_state",
    "cluster_queue_status", "cohort_root", "default_pod_priority_class", "delete_admission_check", "delete_cluster_queue", "delete_cohort",
    "delete_flavor", "delete_local_queue", "delete_namespace", "delete_pod_priority_class", "delete_priority_class", "delete_workload",
    "flavors", "forget", "holds_quota", "inadmissible_in_cluster_queue", "is_assumed", "is_parked", "local_queue", "local_queue_keys", "local_queue_status", "local_queues_of",
    "namespace_labels", "next_requeue_at", "park", "pending_in_local_queue", "pod_priority_class_value", "priority_class_value", "quota_holders", "recheck", "releasing", "revisit", "start_writing", "take_dirty",
    "upsert_admission_check", "upsert_cluster_queue", "upsert_cohort", "upsert_flavor", "upsert_local_queue",
    "upsert_namespace", "upsert_pod_priority_class", "upsert_priority_class", "upsert_workload", "usage", "workload", "workloads_items",
}  # fmt: skip


def test_public_surface_is_unchanged_by_the_split() -> None:
    assert {name for name in dir(Cache) if not name.startswith("_")} == PUBLIC_METHODS
    for name in (
        "Cache", "ClusterQueueState", "ClusterQueueStatusView", "DirtyQueues", "LocalQueueKey",
        "LocalQueueStatusView", "PendingWorkload", "QueueStatusView", "WorkloadKey", "admission_usage",
    ):  # fmt: skip
        assert hasattr(cache_module, name), name


def seeded(build: Build) -> Cache:
    cache = Cache()
    cache.upsert_flavor(build.flavor())
    cache.upsert_cluster_queue(build.cluster_queue("a", cohortName="team"))
    cache.upsert_cluster_queue(build.cluster_queue("b", cohortName="team"))
    cache.upsert_cluster_queue(build.cluster_queue("alone"))
    cache.upsert_local_queue(build.local_queue(cq="a"))
    cache.take_dirty(build.now)
    return cache


def test_events_mark_the_whole_cohort_tree(build: Build) -> None:
    cache = seeded(build)
    cache.upsert_flavor(build.flavor(nodeLabels={"zone": "a"}))
    assert cache.take_dirty(build.now).cluster_queues == {"a", "b", "alone"}
    cache.delete_cluster_queue("b")
    assert cache.take_dirty(build.now) == DirtyQueues({"a", "b"}, set())
    cache.upsert_cohort(build.cohort("team", {"default-flavor": {"cpu": 1}}))
    assert cache.take_dirty(build.now).cluster_queues == {"a"}
    cache.upsert_local_queue(build.local_queue(cq="alone"))
    assert cache.take_dirty(build.now) == DirtyQueues({"a", "alone"}, {("default", "user-queue")})


def test_a_workload_moves_between_the_pending_queue_and_the_quota_tree(build: Build) -> None:
    cache = seeded(build)
    key = ("default", "w")
    cache.upsert_workload(build.workload("w"))
    assert [e.key for e in cache.pending_in_local_queue(("default", "user-queue"))] == [key]
    assert cache.take_dirty(build.now) == DirtyQueues(set(), {("default", "user-queue")})

    cache.assume(key, build.admission("a"))
    assert cache.is_assumed(key) and cache.usage("a") == {CPU: Decimal(4)}
    assert cache.pending_in_local_queue(("default", "user-queue")) == []
    assert cache.take_dirty(build.now) == DirtyQueues()  # the cycle that assumed already knows

    cache.forget(key)
    assert not cache.is_assumed(key) and cache.usage("a") == {}
    assert cache.take_dirty(build.now) == DirtyQueues({"a", "b"}, {("default", "user-queue")})

    conditions = [build.condition("QuotaReserved", "True", "QuotaReserved")]
    cache.upsert_workload(build.workload("w", admission=build.admission("a").to_dict(), conditions=conditions))
    status = cache.cluster_queue_status("a")
    assert status is not None and (status.pending_workloads, status.reserving_workloads) == (0, 1)
    cache.delete_workload(key)
    assert cache.usage("a") == {} and cache.workload(key) is None


def test_a_priority_class_change_reorders_its_workloads(build: Build) -> None:
    cache = seeded(build)
    cache.upsert_workload(build.workload("w", labels={"kueue.x-k8s.io/priority-class": "high"}))
    cache.take_dirty(build.now)
    cache.upsert_priority_class(build.priority_class("high", 7))
    assert cache.priority_class_value("high") == 7
    assert cache.pending_in_local_queue(("default", "user-queue"))[0].priority == 7
    assert cache.take_dirty(build.now).local_queues == {("default", "user-queue")}
    cache.upsert_namespace("default", {"team": "a"})
    assert cache.take_dirty(build.now).local_queues == {("default", "user-queue")}


def test_quota_holders_are_the_whole_cohort_trees_with_priorities_and_assumptions(build: Build) -> None:
    cache = seeded(build)
    cache.upsert_priority_class(build.priority_class("high", 100))
    reserved = [build.condition("QuotaReserved", "True", "QuotaReserved")]
    cache.upsert_workload(build.workload("in-a", priority=5, admission=build.admission("a").to_dict(), conditions=reserved))
    cache.upsert_workload(
        build.workload("in-b", labels={"kueue.x-k8s.io/priority-class": "high"}, admission=build.admission("b", {"cpu": "2"}).to_dict(),
                       conditions=reserved)
    )  # fmt: skip
    cache.upsert_workload(build.workload("alone", admission=build.admission("alone").to_dict(), conditions=reserved))
    cache.upsert_workload(build.workload("new"))
    cache.assume(("default", "new"), build.admission("a", {"cpu": "1"}))

    holders = {h.key[1]: h for h in cache.quota_holders("a")}
    assert set(holders) == {"in-a", "in-b", "new"}, "a and b share the cohort; alone does not"
    assert (holders["in-a"].priority, holders["in-b"].priority, holders["new"].priority) == (5, 100, 0)
    assert holders["in-b"].cluster_queue == "b" and holders["in-b"].usage == {CPU: Decimal(2)}
    assert holders["new"].assumed and not holders["in-a"].assumed
    assert [h.key[1] for h in cache.quota_holders("alone")] == ["alone"]
    cache.delete_workload(("default", "in-b"))
    assert {h.key[1] for h in cache.quota_holders("b")} == {"in-a", "new"}


def test_a_quota_holder_is_built_once_while_nothing_it_comes_from_changes(build: Build) -> None:
    """The scheduler keys what preemption weighs of a holder on the holder object (``CycleMemo``)."""
    cache = seeded(build)
    reserved = [build.condition("QuotaReserved", "True", "QuotaReserved")]
    cache.upsert_workload(build.workload("w", labels={"kueue.x-k8s.io/priority-class": "high"},
                                         admission=build.admission("a").to_dict(), conditions=reserved))  # fmt: skip
    [first] = cache.quota_holders("a")
    assert cache.quota_holders("b") == [first] and cache.quota_holders("b")[0] is first, "same object, from either queue"
    cache.upsert_priority_class(build.priority_class("high", 7))
    [repriced] = cache.quota_holders("a")
    assert repriced is not first and repriced.priority == 7
    cache.upsert_workload(build.workload("w", labels={"kueue.x-k8s.io/priority-class": "high", "changed": "yes"},
                                         admission=build.admission("a").to_dict(), conditions=reserved))  # fmt: skip
    [changed] = cache.quota_holders("a")
    assert changed is not repriced and changed.workload.metadata.labels["changed"] == "yes"
    assert cache.quota_holders("a")[0] is changed
    cache.delete_workload(("default", "w"))
    assert cache.quota_holders("a") == []


def test_a_replaced_workload_is_not_kept_alive_by_its_old_quota_holder(build: Build) -> None:
    """A finished Workload stays in the store; the holder built from its admitted version must not keep that too."""
    import gc
    import weakref

    cache = seeded(build)
    reserved = [build.condition("QuotaReserved", "True", "QuotaReserved")]
    admitted = build.workload("w", admission=build.admission("a").to_dict(), conditions=reserved)
    cache.upsert_workload(admitted)
    assert [h.key for h in cache.quota_holders("a")] == [("default", "w")]
    old = weakref.ref(admitted)
    finished = reserved + [build.condition("Finished", "True", "Succeeded")]
    cache.upsert_workload(build.workload("w", admission=build.admission("a").to_dict(), conditions=finished))
    del admitted
    gc.collect()
    assert old() is None
    assert cache.quota_holders("a") == []


def test_a_status_view_is_the_same_object_until_something_it_shows_changes(build: Build) -> None:
    """The status writer skips a queue whose view is the one it saw last: every input must make a new one."""
    cache = seeded(build)
    lq = ("default", "user-queue")
    cq_view, lq_view = cache.cluster_queue_status("a"), cache.local_queue_status(*lq)
    assert cache.cluster_queue_status("a") is cq_view and cache.local_queue_status(*lq) is lq_view

    cache.upsert_workload(build.workload("w"))  # one more pending
    pending = cache.cluster_queue_status("a"), cache.local_queue_status(*lq)
    assert pending[0] is not cq_view and pending[0] is not None and pending[0].pending_workloads == 1
    assert pending[1] is not lq_view and pending[1] is not None and pending[1].pending_workloads == 1

    cache.assume(("default", "w"), build.admission("a"))  # the counters change in place
    reserving = cache.cluster_queue_status("a")
    assert reserving is not None and (reserving.pending_workloads, reserving.reserving_workloads) == (0, 1)
    assert cache.cluster_queue_status("b") is not None

    cache.upsert_cluster_queue(build.cluster_queue("a", cohortName="team", stopPolicy="Hold"))  # the state
    held = cache.cluster_queue_status("a"), cache.local_queue_status(*lq)
    assert held[0] is not None and not held[0].active and held[0] is not reserving
    assert held[1] is not None and not held[1].active, "the LocalQueue shows its ClusterQueue's state"

    cache.fair_sharing_status = True  # with fair sharing, the usage of the queue's node too
    shared = cache.cluster_queue_status("b")
    assert shared is not None and shared.weighted_share == 0
    cache.upsert_workload(build.workload("big", admission=build.admission("b", {"cpu": "12"}).to_dict(),
                                         conditions=[build.condition("QuotaReserved", "True", "QuotaReserved")]))  # fmt: skip
    borrowing = cache.cluster_queue_status("b")
    assert borrowing is not None and borrowing.weighted_share is not None and borrowing.weighted_share > 0
    assert cache.cluster_queue_status("b") is borrowing
