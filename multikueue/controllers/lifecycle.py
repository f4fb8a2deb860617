"""Workload lifecycle transitions, then everyone who acts on a Workload's change.

On every Workload event the pure :func:`multikueue.core.lifecycle.next_update`
says which transition is due (Admitted, Retry, Rejected, the in-use
finalizer, deactivation) and the Workload writer writes it. Then the
Workload's integrations (its Job, its external object) and the MultiKueue
check hear of the change: they are handed in at wiring as listeners, so this
module names none of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from multikueue.api import Workload
from multikueue.api.meta import utcnow
from multikueue.core import lifecycle
from multikueue.core.cache import Cache
from multikueue.runtime.writer import WorkloadWriter

WorkloadKey = tuple[str, str]
#: Told after each Workload change, once its transition was written.
Listener = Callable[[Workload], Awaitable[None]]


class LifecycleController:
    def __init__(self, cache: Cache, writer: WorkloadWriter, listeners: list[Listener]) -> None:
        self.cache = cache
        self.writer = writer
        self.listeners = listeners

    async def workload_changed(self, key: WorkloadKey) -> None:
        """Apply the Workload's next lifecycle transition, then tell the listeners."""
        wl = self.cache.workload(key)
        if wl is None:
            return
        update = lifecycle.next_update(wl, utcnow())
        if update is not None:
            await self.writer.apply(wl, update)
        for listener in self.listeners:
            await listener(wl)
