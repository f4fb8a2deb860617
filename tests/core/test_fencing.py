"""Fencing decisions (pure): Lease names and bodies, when a worker sees a Lease expire, what it fences."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from multikueue.core.fencing import (
    LEASE_NAMESPACE,
    LeaseSighting,
    LeaseWatch,
    lease_body,
    lease_duration,
    lease_name,
    renew_interval,
    sighting,
    to_fence,
)

pytestmark = pytest.mark.unit


def seen(origin: str = "mk", version: str = "1", duration: float = 10) -> dict[str, LeaseSighting]:
    return {origin: LeaseSighting(origin, version, duration)}


def test_the_lease_lasts_half_the_worker_lost_timeout_and_is_renewed_four_times_per_duration() -> None:
    assert lease_duration(timedelta(minutes=15)) == 450
    assert lease_duration(timedelta(seconds=20)) == 10
    assert renew_interval(10) == 2.5
    assert renew_interval(450) == 10  # capped


@pytest.mark.parametrize(
    ("origin", "name"),
    [("multikueue", "multikueue"), ("multikueue-e2e", "multikueue-e2e"), ("Team_A", None), ("x" * 64, None)],
)
def test_a_lease_is_named_after_its_origin_when_the_origin_is_a_valid_name(origin: str, name: str | None) -> None:
    got = lease_name(origin)
    if name is not None:
        assert got == name
    else:
        assert got.startswith("origin-") and len(got) <= 63 and got == lease_name(origin) and got != lease_name(origin + "x")


def test_the_lease_body_names_its_origin_in_holder_and_label() -> None:
    body = lease_body("Team_A", 10.4, datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC))
    assert body["metadata"]["namespace"] == LEASE_NAMESPACE
    assert body["metadata"]["labels"] == {"kueue.x-k8s.io/multikueue-origin": "Team_A"}
    assert body["spec"] == {"holderIdentity": "Team_A", "leaseDurationSeconds": 10, "renewTime": "2026-01-01T12:00:00.123456Z"}
    assert sighting({**body, "metadata": {**body["metadata"], "resourceVersion": "5"}}) == LeaseSighting("Team_A", "5", 10.0)


def test_leases_outside_the_namespace_or_without_duration_are_not_origin_leases() -> None:
    body = lease_body("mk", 10, datetime(2026, 1, 1, tzinfo=UTC))
    assert sighting({**body, "metadata": {**body["metadata"], "namespace": "tenant"}}) is None
    assert sighting({**body, "spec": {"holderIdentity": "mk"}}) is None


def test_a_lease_expires_after_its_duration_without_a_change() -> None:
    watch = LeaseWatch(max_gap=3)
    for t in range(0, 10):
        watch.observe(seen(), float(t))
        assert watch.expired(float(t)) == []
    watch.observe(seen(), 10.0)
    assert watch.expired(10.0) == ["mk"]


def test_a_renewal_restarts_the_window() -> None:
    watch = LeaseWatch(max_gap=3)
    for t in range(0, 8):
        watch.observe(seen(), float(t))
    for t in range(8, 17):
        watch.observe(seen(version="2"), float(t))
        assert watch.expired(float(t)) == []
    watch.observe(seen(version="2"), 18.0)
    assert watch.expired(18.0) == ["mk"]
    assert watch.next_expiry() == 18.0


def test_time_the_worker_could_not_read_does_not_count() -> None:
    """Its own apiserver frozen or restarting: it could not have seen a renewal, so it must not fence."""
    watch = LeaseWatch(max_gap=3)
    watch.observe(seen(), 0.0)
    watch.observe(seen(), 2.0)
    watch.observe(seen(), 12.0)  # ten seconds blind: the window restarts here
    assert watch.expired(12.0) == []
    watch.missed()
    watch.observe(seen(), 13.0)  # a failed listing in between: restarts again
    assert watch.expired(22.9) == []
    for t in range(14, 24):
        watch.observe(seen(), float(t))
    assert watch.expired(23.0) == ["mk"]


def test_a_lease_that_disappears_is_forgotten() -> None:
    watch = LeaseWatch(max_gap=3)
    watch.observe(seen(), 0.0)
    watch.observe({}, 1.0)
    assert watch.expired(100.0) == [] and watch.next_expiry() is None


def wl(origin: str = "mk", *, active: bool | None = None, finished: bool = False, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "w", "namespace": "ns", "labels": {"kueue.x-k8s.io/multikueue-origin": origin}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {} if active is None else {"active": active}
    conditions = [{"type": "Finished", "status": "True"}] if finished else []
    return {"metadata": meta, "spec": spec, "status": {"conditions": conditions}}


def test_only_active_unfinished_copies_of_an_expired_origin_are_fenced() -> None:
    assert to_fence(wl(), {"mk"})
    assert to_fence(wl(active=True), {"mk"})
    assert not to_fence(wl("other"), {"mk"})
    assert not to_fence(wl(active=False), {"mk"})
    assert not to_fence(wl(finished=True), {"mk"})
    assert not to_fence(wl(deleting=True), {"mk"})
    assert not to_fence({"metadata": {"name": "local"}, "spec": {}}, {"mk"})
