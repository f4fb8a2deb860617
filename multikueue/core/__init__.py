"""Local quota admission: Kueue's scheduler as pure, synchronous Python.

The package holds state and decisions only; the I/O layer (watches, status
writes, retries) lives elsewhere and talks to it through two calls:

- :class:`~multikueue.core.cache.Cache` is the **state**: fed one object at a
  time from watch events (``upsert_*`` / ``delete_*`` with the
  ``multikueue.api`` models), it keeps usage, queue membership and the
  Active state of queues current incrementally, answers the status views
  the I/O layer writes back, and records what changed since the last cycle.
- :func:`~multikueue.core.scheduler.schedule` is the **decision**: one cycle
  over what changed, returning admissions to write and pending conditions
  to update (:class:`~multikueue.core.scheduler.CycleResult`).

The decision is built from small pure parts, each testable on its own:

- :mod:`~multikueue.core.resources`: what a pod and a pod set request;
- :mod:`~multikueue.core.quota`: how much a ClusterQueue may use, alone or
  borrowing in its cohort (nominal quota, borrowing and lending limits);
- :mod:`~multikueue.core.matching`: namespace selectors, node affinity,
  taints and tolerations;
- :mod:`~multikueue.core.flavors`: which flavor each resource gets;
- :mod:`~multikueue.core.messages`: every user-visible text, worded as
  upstream Kueue words it.

Nothing here does I/O, sleeps, or uses asyncio.
"""

from __future__ import annotations

from multikueue.core.cache import (
    Cache,
    ClusterQueueStatusView,
    LocalQueueKey,
    LocalQueueStatusView,
    WorkloadKey,
)
from multikueue.core.scheduler import AdmissionDecision, CycleResult, PendingUpdate, schedule

__all__ = [
    "AdmissionDecision",
    "Cache",
    "ClusterQueueStatusView",
    "CycleResult",
    "LocalQueueKey",
    "LocalQueueStatusView",
    "PendingUpdate",
    "WorkloadKey",
    "schedule",
]
