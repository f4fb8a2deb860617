"""The pending queues: entries, order, dirty marks, requeue backoff and assumed admissions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from multikueue.api.workload import Workload
from multikueue.core.cache.queues import DirtyQueues, PendingQueues, PendingWorkload

pytestmark = pytest.mark.unit

#: The ``build`` fixture (``Builders`` in this folder's conftest).
Build = Any
LQ = ("default", "user-queue")


def add(queues: PendingQueues, workload: Workload, *, quiet: bool = False) -> PendingWorkload:
    """Make the Workload pending, as the cache does for a Workload without quota."""
    key = (workload.namespace or "", workload.name)
    entry = queues.entry_for(key, workload)
    queues.set_pending(key, entry, quiet=quiet)
    return entry


def dirty_local_queues(queues: PendingQueues, now: datetime) -> set[tuple[str, str]]:
    return queues.take_dirty(now).local_queues


def test_entries_carry_what_the_scheduler_needs(build: Build) -> None:
    queues = PendingQueues({"high": 100})
    requeue_at = build.now + timedelta(minutes=1)
    condition = build.condition("QuotaReserved", "False", "Pending", "no room")
    entry = queues.entry_for(
        ("default", "w"),
        build.workload("w", labels={"kueue.x-k8s.io/priority-class": "high"}, conditions=[condition],
                       requeueState={"requeueAt": requeue_at.isoformat()}),
    )
    assert (entry.local_queue, entry.priority, entry.priority_class) == (LQ, 100, "high")
    assert (entry.created, entry.requeue_at, entry.condition, entry.invalid) == (build.now, requeue_at, ("Pending", "no room"), None)
    assert [p.name for p in entry.pod_sets] == ["main"]

    assert queues.entry_for(("default", "p"), build.workload("p", priority=3)).priority_class is None
    unknown = queues.entry_for(("default", "u"), build.workload("u", labels={"kueue.x-k8s.io/priority-class": "none"}))
    assert (unknown.priority, unknown.priority_class) == (0, "none")


def test_invalid_pod_sets_are_reported_not_raised(build: Build) -> None:
    entry = PendingQueues({}).entry_for(("default", "w"), build.workload("w", cpu="lots"))
    assert entry.pod_sets == ()
    assert entry.invalid is not None and entry.invalid.startswith("resources validation failed: ")


def test_queue_order_is_priority_then_age_then_name(build: Build) -> None:
    queues = PendingQueues({})
    for workload in (
        build.workload("young", age=1),
        build.workload("b-old", age=50),
        build.workload("a-old", age=50),
        build.workload("urgent", priority=5),
        build.workload("elsewhere", queue="other"),
    ):
        add(queues, workload)
    assert [e.key[1] for e in queues.pending_in_local_queue(LQ)] == ["urgent", "a-old", "b-old", "young"]
    assert queues.pending_count(LQ) == 4 and queues.pending_count(("default", "missing")) == 0
    assert queues.pending_in_local_queue(("default", "missing")) == []


def test_only_changes_the_scheduler_reads_mark_the_queue(build: Build) -> None:
    queues = PendingQueues({})
    add(queues, build.workload("w"))
    assert dirty_local_queues(queues, build.now) == {LQ}
    assert dirty_local_queues(queues, build.now) == set()  # taken: the record was reset

    condition = build.condition("QuotaReserved", "False", "Pending", "no room")
    add(queues, build.workload("w", conditions=[condition]))  # only its condition changed
    assert dirty_local_queues(queues, build.now) == set()
    assert queues.pending_in_local_queue(LQ)[0].condition == ("Pending", "no room")

    add(queues, build.workload("w", priority=2), quiet=True)
    assert dirty_local_queues(queues, build.now) == set()

    add(queues, build.workload("w", queue="other"))  # moved: both queues are re-checked
    assert dirty_local_queues(queues, build.now) == {LQ, ("default", "other")}
    queues.set_pending(("default", "w"), None, quiet=False)
    assert dirty_local_queues(queues, build.now) == {("default", "other")}
    queues.set_pending(("default", "w"), None, quiet=False)  # not pending: nothing to do
    assert queues.take_dirty(build.now) == DirtyQueues()


def test_a_backoff_wakes_its_queue_when_it_ends(build: Build) -> None:
    queues = PendingQueues({})
    ends = build.now + timedelta(seconds=30)
    add(queues, build.workload("w", requeueState={"requeueAt": ends.isoformat()}))
    assert queues.next_requeue_at() == ends
    assert dirty_local_queues(queues, build.now) == {LQ}  # the add itself
    assert dirty_local_queues(queues, ends - timedelta(seconds=1)) == set()
    assert dirty_local_queues(queues, ends) == {LQ}
    assert queues.next_requeue_at() is None


def test_stale_backoffs_are_skipped(build: Build) -> None:
    queues = PendingQueues({})
    first = build.now + timedelta(seconds=10)
    later = build.now + timedelta(seconds=60)
    add(queues, build.workload("w", requeueState={"requeueAt": first.isoformat()}))
    add(queues, build.workload("w", requeueState={"requeueAt": later.isoformat()}))
    assert queues.next_requeue_at() == later  # the first end time no longer applies
    queues.set_pending(("default", "w"), None, quiet=False)
    queues.take_dirty(build.now)
    assert queues.next_requeue_at() is None
    assert dirty_local_queues(queues, datetime.max.replace(tzinfo=UTC)) == set()


def test_cluster_queue_local_queue_and_namespace_marks(build: Build) -> None:
    queues = PendingQueues({})
    add(queues, build.workload("w", namespace="team", queue="a"), quiet=True)
    queues.mark_cluster_queues(["cq", "peer"])
    queues.mark_local_queue(("default", "idle"))
    queues.mark_namespace("team")
    queues.mark_namespace("nobody-pending-here")
    assert queues.take_dirty(build.now) == DirtyQueues({"cq", "peer"}, {("default", "idle"), ("team", "a")})


def test_workloads_by_priority_class(build: Build) -> None:
    queues = PendingQueues({})
    labels = {"kueue.x-k8s.io/priority-class": "high"}
    add(queues, build.workload("a", labels=labels))
    add(queues, build.workload("b", labels=labels, priority=1))  # spec.priority wins: not from the class
    assert queues.with_priority_class("high") == [("default", "a")]
    queues.set_pending(("default", "a"), None, quiet=True)
    assert queues.with_priority_class("high") == []


def test_assumed_admissions(build: Build) -> None:
    queues = PendingQueues({})
    admission = build.admission()
    assert queues.assumption(("default", "w")) is None
    queues.assume(("default", "w"), admission)
    assert queues.assumption(("default", "w")) is admission
    assert queues.drop_assumption(("default", "w"))
    assert not queues.drop_assumption(("default", "w"))


# --- the walk a cycle reads (candidates) ------------------------------------------------------------


def walk(queues: PendingQueues, now: datetime, *lqs: tuple[str, str]) -> list[str]:
    return [e.key[1] for e in queues.candidates("cq", lqs or (LQ,), now)]


def band_of_equals(build: Build, queues: PendingQueues, count: int = 40) -> list[str]:
    """``large`` (priority 200), ``count`` equal mediums (100, 5 CPUs, oldest first), ``small`` (50)."""
    add(queues, build.workload("large", "20", priority=200, age=500))
    names = [f"medium-{i:02d}" for i in range(count)]
    for i, name in enumerate(names):
        add(queues, build.workload(name, "5", priority=100, age=400 - i))
    add(queues, build.workload("small", "1", priority=50, age=500))
    return names


def test_a_parked_kind_takes_its_whole_band_and_the_walk_goes_on_past_it(build: Build) -> None:
    queues = PendingQueues({})
    mediums = band_of_equals(build, queues)
    queues.park(("default", mediums[0]), "cq")
    assert walk(queues, build.now) == ["large", "small"]
    assert all(queues.is_parked(("default", m), "cq") for m in mediums)
    assert walk(queues, build.now) == ["large", "small"]  # and again, nothing was taken off
    queues.mark_cluster_queues(["cq"])  # the tree changed: every parked Workload wakes
    assert walk(queues, build.now) == ["large", *mediums, "small"]


def test_a_band_parked_while_the_walk_is_in_it_is_left_at_once(build: Build) -> None:
    """The cycle parks the band's head it was given: the rest of the band goes with it, in that walk.

    (Where nothing was parked yet, the first cycle tells the head's equals why they wait instead: the
    scheduler's tests, ``test_identical_workloads_that_do_not_fit_are_assigned_once_per_cycle``.)"""
    queues = PendingQueues({})
    mediums = band_of_equals(build, queues)
    queues.park(("default", mediums[0]), "cq")
    queues.mark_cluster_queues(["cq"])  # woken: the kind's mark is stale, the band is walked again
    seen = []
    for entry in queues.candidates("cq", (LQ,), build.now):
        seen.append(entry.key[1])
        if entry.key[1] == mediums[0]:
            queues.park(entry.key, "cq")
    assert seen == ["large", mediums[0], "small"]


def test_a_band_of_several_shapes_is_walked_one_by_one(build: Build) -> None:
    queues = PendingQueues({})
    mediums = band_of_equals(build, queues)
    add(queues, build.workload("medium-odd", "6", priority=100, age=300))
    queues.park(("default", mediums[0]), "cq")
    assert walk(queues, build.now) == ["large", "medium-odd", "small"]


def test_an_equal_unparked_by_name_is_the_one_of_its_band_looked_at(build: Build) -> None:
    queues = PendingQueues({})
    mediums = band_of_equals(build, queues)
    queues.park(("default", mediums[0]), "cq")
    queues.unpark(("default", mediums[7]))
    assert walk(queues, build.now) == ["large", mediums[7], "small"]


def test_admissions_during_the_walk_shift_nothing(build: Build) -> None:
    queues = PendingQueues({})
    mediums = band_of_equals(build, queues, count=3)
    seen = []
    for entry in queues.candidates("cq", (LQ,), build.now):
        seen.append(entry.key[1])
        queues.set_pending(entry.key, None, quiet=False)  # admitted: it leaves the queue at once
    assert seen == ["large", *mediums, "small"]


def test_the_walk_merges_the_local_queues_of_its_cluster_queue_in_order(build: Build) -> None:
    queues = PendingQueues({})
    other = ("default", "other-queue")
    add(queues, build.workload("a-high", "1", priority=10, age=5))
    add(queues, build.workload("b-high", "1", priority=10, age=9, queue="other-queue"))
    add(queues, build.workload("a-low", "2", priority=1, age=50))
    add(queues, build.workload("b-low", "2", priority=1, age=40, queue="other-queue"))
    add(queues, build.workload("b-low-2", "2", priority=1, age=30, queue="other-queue"))
    assert walk(queues, build.now, LQ, other) == ["b-high", "a-high", "a-low", "b-low", "b-low-2"]
    queues.park(("default", "a-low"), "cq")  # its kind is parked in both queues
    assert walk(queues, build.now, LQ, other) == ["b-high", "a-high"]


def test_a_workload_whose_shape_changes_moves_to_the_band_of_its_new_shape(build: Build) -> None:
    queues = PendingQueues({})
    mediums = band_of_equals(build, queues, count=3)
    queues.park(("default", mediums[0]), "cq")
    add(queues, build.workload(mediums[2], "6", priority=100, age=400 - 2))  # asks 6 CPUs now
    assert walk(queues, build.now) == ["large", mediums[2], "small"]


def test_inadmissible_count_follows_the_entries(build: Build) -> None:
    """A LocalQueue's Workloads tried (told why they wait, or not countable) or backing off, counted as entries change."""
    queues = PendingQueues({})
    waits = build.condition("QuotaReserved", "False", "Pending", "no room")
    later = build.now + timedelta(seconds=5)
    add(queues, build.workload("new"))
    add(queues, build.workload("told", conditions=[waits]))
    add(queues, build.workload("bad", cpu="lots"))
    add(queues, build.workload("backing-off", requeueState={"requeueAt": later.isoformat()}))
    add(queues, build.workload("elsewhere", queue="other", conditions=[waits]))
    assert queues.inadmissible_count(LQ, build.now) == 3
    assert queues.inadmissible_count(LQ, later) == 2, "the backoff is over"
    assert queues.inadmissible_count(("default", "other"), build.now) == 1
    assert queues.inadmissible_count(("default", "missing"), build.now) == 0

    add(queues, build.workload("new", conditions=[waits]))  # told why it waits
    queues.set_pending(("default", "told"), None, quiet=False)  # admitted
    queues.set_pending(("default", "backing-off"), None, quiet=False)
    assert queues.inadmissible_count(LQ, build.now) == 2
    queues.set_pending(("default", "new"), None, quiet=False)
    queues.set_pending(("default", "bad"), None, quiet=False)
    assert queues.inadmissible_count(LQ, build.now) == 0


def test_a_deleted_cluster_queue_leaves_nothing_behind(build: Build) -> None:
    """Parking, wakes and releases are kept per ClusterQueue name; a deleted one's go with it."""
    queues = PendingQueues({})
    mediums = band_of_equals(build, queues, count=3)
    for round_ in range(3):
        name = f"gone-{round_}"
        queues.park(("default", mediums[0]), name, for_victims=True)
        queues.mark_cluster_queues([name], by_workload=True)  # a release in its tree: a batched wake
        queues.take_dirty(build.now)
        queues.mark_cluster_queues([name])  # the tree's wake for the deletion
        assert name in queues.tracked_cluster_queues()
        queues.forget_cluster_queue(name)
        assert queues.tracked_cluster_queues() == set()
        assert not queues.is_parked(("default", mediums[0]), name)
    assert walk(queues, build.now) == ["large", *mediums, "small"]


def test_releases_nobody_asks_about_are_swept(build: Build) -> None:
    """A release is remembered for a requeue batch; those of queues no cycle asks about do not pile up."""
    queues = PendingQueues({})
    for i in range(1_000):
        queues.mark_cluster_queues([f"cq-{i}"], by_workload=True)
        queues.take_dirty(build.now + timedelta(seconds=2 * i))
    assert len(queues.tracked_cluster_queues()) < 300
    queues.mark_cluster_queues(["asked"], by_workload=True)
    later = build.now + timedelta(seconds=2_000)
    queues.take_dirty(later)
    assert queues.releasing("asked", later + timedelta(milliseconds=500))
    assert not queues.releasing("asked", later + timedelta(seconds=2))
