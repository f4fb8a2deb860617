"""Pure stand-ins for the writes the scheduler's tests cannot make: what comes back through the watch.

Tests of :mod:`multikueue.core.scheduler` (no API server) apply a cycle's
decisions to the cache themselves; this is the part every such test shares.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from multikueue.api.workload import Workload
from multikueue.core import lifecycle
from multikueue.core.cache import Cache
from multikueue.core.lifecycle import WorkloadUpdate
from multikueue.core.scheduler import PreemptionDecision


def merged(wl: Workload, update: WorkloadUpdate) -> Workload:
    """``wl`` after ``update``'s status merge patch."""
    assert update.status is not None
    body = wl.to_k8s()
    body["status"] = {k: v for k, v in {**body.get("status", {}), **update.status}.items() if v is not None}
    return Workload.from_k8s(body)


def evict_and_release(cache: Cache, preempted: Iterable[PreemptionDecision], now: datetime) -> None:
    """Each victim marked evicted (the loop's write), then released (its job controller's, once the job stopped)."""
    for decision in preempted:
        wl = cache.workload(decision.victim)
        assert wl is not None
        wl = merged(wl, lifecycle.preempted(wl, decision.reason, decision.message, now))
        cache.upsert_workload(merged(wl, lifecycle.released(wl, now)))
