"""PendingDeletes: the record of this controller's deletions until the watch confirms them (pure)."""

from __future__ import annotations

import pytest

from multikueue.runtime.expectations import PendingDeletes, uid_of


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


pytestmark = pytest.mark.unit

def test_a_deleted_uid_is_pending_until_its_deleted_event() -> None:
    pending = PendingDeletes(clock=Clock())
    pending.expect("a")
    assert pending.pending("a") and not pending.pending("b")
    pending.observed("a")
    assert not pending.pending("a") and len(pending) == 0


def test_a_new_object_under_the_same_name_is_never_hidden() -> None:
    """Records are by UID: the re-created copy has a new one."""
    pending = PendingDeletes(clock=Clock())
    pending.expect(uid_of({"metadata": {"name": "w", "uid": "old"}}))
    assert not pending.pending(uid_of({"metadata": {"name": "w", "uid": "new"}}))


def test_a_deletion_never_confirmed_expires() -> None:
    clock = Clock()
    pending = PendingDeletes(ttl=300, clock=clock)
    pending.expect("a")
    clock.now = 299
    assert pending.pending("a")
    clock.now = 300
    assert not pending.pending("a") and len(pending) == 0


def test_expired_records_are_pruned_as_new_ones_come() -> None:
    clock = Clock()
    pending = PendingDeletes(ttl=10, clock=clock)
    pending.expect("a")
    clock.now = 20
    pending.expect("b")
    assert len(pending) == 1


def test_objects_without_a_uid_are_not_recorded() -> None:
    pending = PendingDeletes(clock=Clock())
    for obj in (None, {}, {"metadata": None}, {"metadata": {"uid": ""}}, {"metadata": {"uid": 7}}):
        pending.expect(uid_of(obj))  # type: ignore[arg-type]
    assert len(pending) == 0 and not pending.pending(None)
