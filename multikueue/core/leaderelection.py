"""Leader election on a ``coordination.k8s.io/v1`` Lease: the decisions, without I/O.

The semantics are client-go's ``leaderelection`` package (what
controller-runtime uses): the Lease's ``spec.holderIdentity`` names the
leader, which moves ``renewTime`` forward every retry period; another replica
takes the Lease over once ``renewTime + leaseDurationSeconds`` has passed, or
at once when the holder released it (empty ``holderIdentity``). Every write
carries the resourceVersion it was decided on, so of two replicas deciding at
once one gets a 409 and stands by.

One difference from client-go: expiry is judged on the ``renewTime`` the
holder wrote, not on the local time this replica first saw that renewal
(client-go's ``observedTime``). A standby so takes over 15 s after the last
renewal rather than up to one retry period later; the price is trusting the
replicas' clocks to within the margin between the lease duration (15 s) and
the renew deadline (10 s), after which a leader that cannot renew has already
stopped acting (:func:`must_step_down`). The I/O loop is
:mod:`multikueue.runtime.leaderelection`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping

from multikueue.api.meta import format_micro_time

#: How long a Lease holds after its last renewal (client-go's LeaseDuration).
LEASE_DURATION_SECONDS = 15.0
#: A leader that has not renewed for this long stops acting (client-go's RenewDeadline).
RENEW_DEADLINE_SECONDS = 10.0
#: How often the leader renews and a standby tries (client-go's RetryPeriod).
RETRY_PERIOD_SECONDS = 2.0


@dataclass(frozen=True)
class Timing:
    lease_duration: float = LEASE_DURATION_SECONDS
    renew_deadline: float = RENEW_DEADLINE_SECONDS
    retry_period: float = RETRY_PERIOD_SECONDS

    def __post_init__(self) -> None:
        # client-go's checks: the leader must stop acting before others may take over,
        # and must get more than one try before the deadline.
        if not self.lease_duration > self.renew_deadline:
            raise ValueError("the lease duration must be longer than the renew deadline")
        if not self.renew_deadline > self.retry_period:
            raise ValueError("the renew deadline must be longer than the retry period")
        if self.retry_period <= 0:
            raise ValueError("the retry period must be positive")


@dataclass(frozen=True)
class LeaseRecord:
    """The parts of a Lease the election reads, as last read from the API server."""

    holder: str = ""
    lease_duration: float = LEASE_DURATION_SECONDS
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0
    resource_version: str | None = None

    @classmethod
    def from_lease(cls, body: Mapping[str, Any]) -> "LeaseRecord":
        spec = body.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            lease_duration=float(spec.get("leaseDurationSeconds") or 0),
            acquire_time=parse_micro_time(spec.get("acquireTime")),
            renew_time=parse_micro_time(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=(body.get("metadata") or {}).get("resourceVersion"),
        )

    def expires_at(self) -> datetime | None:
        """When the holder's claim ends; None when it never started (no renewTime)."""
        if self.renew_time is None:
            return None
        return self.renew_time + timedelta(seconds=self.lease_duration)

    def held_by_other(self, identity: str, now: datetime) -> bool:
        """Whether another replica holds the Lease now (named and not expired)."""
        if not self.holder or self.holder == identity:
            return False
        expires = self.expires_at()
        return expires is not None and expires > now


class Verdict(enum.Enum):
    #: No Lease yet: create it, held by this replica.
    CREATE = "create"
    #: Free (released or expired): take it over.
    ACQUIRE = "acquire"
    #: This replica holds it: move renewTime forward.
    RENEW = "renew"
    #: Another replica holds it: wait.
    STAND_BY = "stand-by"
    #: This replica led, but another one holds it now: stop acting at once.
    LOST = "lost"


def decide(lease: LeaseRecord | None, *, identity: str, now: datetime, leading: bool) -> Verdict:
    """What this replica does with the Lease as last read (``None``: it does not exist)."""
    if lease is None:
        return Verdict.CREATE
    if lease.holder == identity:
        return Verdict.RENEW
    if lease.held_by_other(identity, now):
        return Verdict.LOST if leading else Verdict.STAND_BY
    return Verdict.ACQUIRE


def next_spec(lease: LeaseRecord | None, verdict: Verdict, *, identity: str, now: datetime, duration: float) -> dict[str, Any]:
    """The Lease ``spec`` to write for ``verdict`` (CREATE, ACQUIRE or RENEW)."""
    stamp = format_micro_time(now)
    if verdict is Verdict.RENEW and lease is not None:
        acquired = format_micro_time(lease.acquire_time) if lease.acquire_time is not None else stamp
        transitions = lease.transitions
    elif verdict is Verdict.ACQUIRE and lease is not None:
        acquired, transitions = stamp, lease.transitions + 1
    elif verdict is Verdict.CREATE:
        acquired, transitions = stamp, 0
    else:
        raise ValueError(f"nothing to write for {verdict.value}")
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": max(1, int(round(duration))),
        "acquireTime": acquired,
        "renewTime": stamp,
        "leaseTransitions": transitions,
    }


def release_spec(lease: LeaseRecord, *, now: datetime) -> dict[str, Any]:
    """The Lease ``spec`` that hands it over at once (client-go's ReleaseOnCancel)."""
    stamp = format_micro_time(now)
    return {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": lease.transitions,
    }


def must_step_down(last_renewed: float, now: float, timing: Timing) -> bool:
    """Whether a leader whose last successful renewal was sent at ``last_renewed`` must stop acting.

    Both times are this replica's monotonic clock. Stepping down at the renew
    deadline leaves ``lease_duration - renew_deadline`` seconds for stopping
    before another replica may take the Lease.
    """
    return now - last_renewed >= timing.renew_deadline


def next_try_in(lease: LeaseRecord | None, *, identity: str, now: datetime, timing: Timing) -> float:
    """Seconds a standby waits before trying again: the retry period, or less if the Lease expires sooner."""
    if lease is None or not lease.held_by_other(identity, now):
        return timing.retry_period
    expires = lease.expires_at()
    assert expires is not None
    # A hair after expiry, so the next read decides ACQUIRE.
    return max(0.0, min(timing.retry_period, (expires - now).total_seconds() + 0.01))


def parse_micro_time(value: str | None) -> datetime | None:
    """A ``metav1.MicroTime`` (or ``Time``) from JSON; None when absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
