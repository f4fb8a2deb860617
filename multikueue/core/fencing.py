"""Fencing: a worker stops a manager's jobs before that manager can run them elsewhere.

Upstream MultiKueue is at-least-once: a worker the manager cannot reach for
``workerLostTimeout`` has its Workloads dispatched again elsewhere, while the
worker, cut off but healthy, keeps running them. This project fences such a
worker when it runs this controller too:

- the manager keeps one ``coordination.k8s.io`` Lease per origin on every
  worker it reaches (:func:`lease_body`, in :data:`LEASE_NAMESPACE`),
  renewed every :func:`renew_interval` with a duration of
  :func:`lease_duration`, half the ``workerLostTimeout``;
- the worker reads those Leases and, once one has not changed for its whole
  duration (:class:`LeaseWatch`), deactivates every running Workload of that
  origin, so its Job is suspended there; the manager re-dispatches only
  after the full ``workerLostTimeout``, so the worker has the other half of
  it to stop the job.

Expiry is measured on the worker's own clock, from the moment it *saw* a
Lease change, never from the ``renewTime`` the manager wrote: the two
clusters' clocks need not agree. Time during which the worker could not read
its own API server does not count (it could not have seen a renewal): such a
gap restarts every Lease's window, so a worker whose own control plane
hiccups never fences a healthy manager.

Everything here is pure; the manager's renewal and the worker's polling
live in the controllers.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from multikueue.api.constants import Labels
from multikueue.api.meta import format_micro_time

#: Where the origin Leases live on a worker: a namespace of their own, so the manager's
#: role there (config/worker-access) reaches no other Lease (leader elections live elsewhere).
LEASE_NAMESPACE = "multikueue-origins"
#: The Lease's holder names the manager's origin; its label says the same for selection.
LEASE_ORIGIN_LABEL = Labels.MULTIKUEUE_ORIGIN
#: Renewals are at most this far apart, however long the Lease.
MAX_RENEW_SECONDS = 10.0

_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def lease_duration(worker_lost_timeout: timedelta) -> float:
    """Seconds a Lease stays valid without renewal: half the ``workerLostTimeout``.

    The manager re-dispatches a lost worker's Workloads ``workerLostTimeout``
    after it last reached it; the worker fences them a Lease duration after it
    last saw a renewal. The other half is the worker's time to notice, to
    deactivate, and for its Job controller to stop the pods.
    """
    return max(1.0, worker_lost_timeout.total_seconds() / 2)


def renew_interval(duration: float) -> float:
    """How often the manager renews: four times per duration, at most every :data:`MAX_RENEW_SECONDS`."""
    return min(MAX_RENEW_SECONDS, duration / 4)


def lease_name(origin: str) -> str:
    """The Lease's name for ``origin``: the origin itself when it is a valid name, else a digest of it.

    Origins are label values (upper case and ``_`` allowed), Lease names are
    DNS labels; the origin label on the Lease is what the worker reads.
    """
    if len(origin) <= 63 and _DNS_NAME.match(origin):
        return origin
    return "origin-" + hashlib.sha256(origin.encode()).hexdigest()[:16]


def lease_body(origin: str, duration: float, now: datetime) -> dict[str, Any]:
    """The origin Lease as the manager writes it (create, or the ``spec`` of a renewal patch)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": lease_name(origin), "namespace": LEASE_NAMESPACE, "labels": {LEASE_ORIGIN_LABEL: origin}},
        "spec": {
            "holderIdentity": origin,
            "leaseDurationSeconds": max(1, round(duration)),
            "renewTime": format_micro_time(now),
        },
    }


@dataclass(frozen=True)
class LeaseSighting:
    """One origin's Lease as a worker listed it: its version and duration."""

    origin: str
    version: str
    duration: float


@dataclass
class _Window:
    version: str
    duration: float
    since: float


class LeaseWatch:
    """Which origins' Leases have not changed for their whole duration, seen from one worker.

    Feed it every successful listing (:meth:`observe`) with the worker's
    monotonic time; :meth:`expired` is only meaningful right after one. A
    listing more than ``max_gap`` seconds after the previous successful one
    (or after :meth:`missed`) restarts every window: the worker was blind
    meanwhile. A Lease that disappears is forgotten (its manager turned
    fencing off, or it was never a manager's).
    """

    def __init__(self, max_gap: float) -> None:
        self.max_gap = max_gap
        self._windows: dict[str, _Window] = {}
        self._last_ok: float | None = None

    def missed(self) -> None:
        """A listing failed: the next successful one starts every window afresh."""
        self._last_ok = None

    def observe(self, sightings: Mapping[str, LeaseSighting], now: float) -> None:
        blind = self._last_ok is None or now - self._last_ok > self.max_gap
        for origin in [o for o in self._windows if o not in sightings]:
            del self._windows[origin]
        for origin, seen in sightings.items():
            window = self._windows.get(origin)
            if blind or window is None or window.version != seen.version:
                self._windows[origin] = _Window(seen.version, seen.duration, now)
            else:
                window.duration = seen.duration
        self._last_ok = now

    def expired(self, now: float) -> list[str]:
        """Origins whose Lease has stayed the same for at least its duration, in name order."""
        return sorted(o for o, w in self._windows.items() if now - w.since >= w.duration)

    def next_expiry(self) -> float | None:
        """The earliest time (same clock) an origin not yet expired would expire, or None."""
        times = [w.since + w.duration for w in self._windows.values()]
        return min(times) if times else None


def sighting(lease: Mapping[str, Any]) -> LeaseSighting | None:
    """What a listed Lease says about its origin; None for one that is not an origin Lease."""
    meta = lease.get("metadata") or {}
    origin = (meta.get("labels") or {}).get(LEASE_ORIGIN_LABEL)
    spec = lease.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    if not origin or meta.get("namespace") != LEASE_NAMESPACE or not isinstance(duration, int) or duration <= 0:
        return None
    return LeaseSighting(origin, str(meta.get("resourceVersion", "")), float(duration))


def to_fence(workload: Mapping[str, Any], expired: set[str]) -> bool:
    """Whether a worker's Workload must be deactivated: a copy of an expired origin, active and not finished."""
    meta = workload.get("metadata") or {}
    origin = (meta.get("labels") or {}).get(Labels.MULTIKUEUE_ORIGIN)
    if origin not in expired or meta.get("deletionTimestamp"):
        return False
    if (workload.get("spec") or {}).get("active") is False:
        return False
    conditions = (workload.get("status") or {}).get("conditions") or []
    return not any(c.get("type") == "Finished" and c.get("status") == "True" for c in conditions)
