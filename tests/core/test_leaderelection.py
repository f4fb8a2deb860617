"""Leader election decisions on a Lease (pure: the Lease as read, an identity, a time)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from multikueue.core.leaderelection import (
    LeaseRecord,
    Timing,
    Verdict,
    decide,
    must_step_down,
    next_spec,
    next_try_in,
    parse_micro_time,
    release_spec,
)

pytestmark = pytest.mark.unit

T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
ME, OTHER = "pod-a_1", "pod-b_2"


def held(holder: str, renewed: datetime, duration: float = 15, transitions: int = 3) -> LeaseRecord:
    return LeaseRecord(holder, duration, T0 - timedelta(minutes=5), renewed, transitions, "42")


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def test_no_lease_is_created() -> None:
    assert decide(None, identity=ME, now=T0, leading=False) is Verdict.CREATE


def test_a_lease_held_by_another_replica_is_waited_on_until_it_expires() -> None:
    clock = FakeClock()
    lease = held(OTHER, T0)
    assert decide(lease, identity=ME, now=clock.now, leading=False) is Verdict.STAND_BY
    assert decide(lease, identity=ME, now=clock.advance(14.9), leading=False) is Verdict.STAND_BY
    assert decide(lease, identity=ME, now=clock.advance(0.1), leading=False) is Verdict.ACQUIRE  # renewTime + 15 s


def test_the_holder_renews() -> None:
    clock = FakeClock()
    assert decide(held(ME, T0), identity=ME, now=clock.advance(2), leading=True) is Verdict.RENEW
    # Even once expired: nobody took it, so this replica still holds it.
    assert decide(held(ME, T0), identity=ME, now=clock.advance(60), leading=False) is Verdict.RENEW


def test_a_released_lease_is_taken_at_once() -> None:
    released = LeaseRecord.from_lease({"metadata": {"resourceVersion": "7"}, "spec": release_spec(held(OTHER, T0), now=T0)})
    assert released.holder == "" and released.lease_duration == 1
    assert decide(released, identity=ME, now=T0, leading=False) is Verdict.ACQUIRE


def test_a_leader_whose_lease_another_replica_holds_has_lost() -> None:
    assert decide(held(OTHER, T0), identity=ME, now=T0 + timedelta(seconds=1), leading=True) is Verdict.LOST


def test_a_lease_without_renew_time_is_free() -> None:
    assert decide(LeaseRecord(holder=OTHER, renew_time=None), identity=ME, now=T0, leading=False) is Verdict.ACQUIRE


def test_specs_written_for_create_acquire_and_renew() -> None:
    created = next_spec(None, Verdict.CREATE, identity=ME, now=T0, duration=15)
    assert created == {
        "holderIdentity": ME,
        "leaseDurationSeconds": 15,
        "acquireTime": "2025-01-01T12:00:00.000000Z",
        "renewTime": "2025-01-01T12:00:00.000000Z",
        "leaseTransitions": 0,
    }
    expired = held(OTHER, T0 - timedelta(seconds=30), transitions=3)
    acquired = next_spec(expired, Verdict.ACQUIRE, identity=ME, now=T0, duration=15)
    assert acquired["holderIdentity"] == ME and acquired["leaseTransitions"] == 4
    assert acquired["acquireTime"] == acquired["renewTime"] == "2025-01-01T12:00:00.000000Z"
    mine = LeaseRecord.from_lease({"metadata": {"resourceVersion": "9"}, "spec": acquired})
    renewed = next_spec(mine, Verdict.RENEW, identity=ME, now=T0 + timedelta(seconds=2), duration=15)
    assert renewed["acquireTime"] == "2025-01-01T12:00:00.000000Z", "a renewal keeps the acquire time"
    assert renewed["renewTime"] == "2025-01-01T12:00:02.000000Z"
    assert renewed["leaseTransitions"] == 4, "a renewal is no transition"
    with pytest.raises(ValueError):
        next_spec(mine, Verdict.STAND_BY, identity=ME, now=T0, duration=15)


def test_release_keeps_the_transitions_and_empties_the_holder() -> None:
    spec = release_spec(held(ME, T0, transitions=5), now=T0)
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1 and spec["leaseTransitions"] == 5


def test_the_lease_as_the_api_server_returns_it() -> None:
    record = LeaseRecord.from_lease(
        {
            "metadata": {"name": "x", "resourceVersion": "123"},
            "spec": {
                "holderIdentity": OTHER,
                "leaseDurationSeconds": 15,
                "acquireTime": "2025-01-01T11:59:00.000000Z",
                "renewTime": "2025-01-01T12:00:00.500000Z",
                "leaseTransitions": 2,
            },
        }
    )
    assert record == LeaseRecord(OTHER, 15, T0 - timedelta(minutes=1), T0 + timedelta(seconds=0.5), 2, "123")
    assert LeaseRecord.from_lease({"metadata": {}, "spec": {}}) == LeaseRecord(lease_duration=0)
    assert parse_micro_time("not a time") is None


def test_a_leader_steps_down_at_the_renew_deadline_before_others_may_take_over() -> None:
    timing = Timing()
    assert not must_step_down(100.0, 109.9, timing)
    assert must_step_down(100.0, 110.0, timing)
    # Stepping down (renew deadline) comes before the Lease may be taken (lease duration).
    assert timing.renew_deadline < timing.lease_duration


def test_a_standby_tries_again_at_the_retry_period_or_right_at_expiry() -> None:
    timing = Timing()
    assert next_try_in(None, identity=ME, now=T0, timing=timing) == 2.0
    assert next_try_in(held(OTHER, T0), identity=ME, now=T0 + timedelta(seconds=5), timing=timing) == 2.0
    soon = next_try_in(held(OTHER, T0), identity=ME, now=T0 + timedelta(seconds=14.5), timing=timing)
    assert 0.5 <= soon < 0.6


def test_timings_that_would_let_two_replicas_lead_are_refused() -> None:
    with pytest.raises(ValueError):
        Timing(lease_duration=10, renew_deadline=10)
    with pytest.raises(ValueError):
        Timing(lease_duration=15, renew_deadline=2, retry_period=2)
