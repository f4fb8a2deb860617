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
