"""Workload lifecycle transitions, then everyone who acts on a Workload's change.

On every Workload event the pure :func:`multikueue.core.lifecycle.next_update`
says which transition is due (Admitted, Retry, Rejected, the in-use
finalizer, deactivation, the release of a preempted Workload nobody else
releases) and the Workload writer writes it. Then the
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
#: Says who releases a preempted Workload (the integrations answer; :class:`lifecycle.Releaser`).
ReleaserOf = Callable[[Workload], lifecycle.Releaser]
#: Has the Workload's transition looked at again after some seconds (the lifecycle's work queue).
Later = Callable[[WorkloadKey, float], None]


def _outside(wl: Workload) -> lifecycle.Releaser:
    return lifecycle.Releaser.OUTSIDE


class LifecycleController:
    def __init__(
        self,
        cache: Cache,
        writer: WorkloadWriter,
        listeners: list[Listener],
        *,
        releaser_of: ReleaserOf = _outside,
        release_grace: float = lifecycle.OUTSIDE_RELEASE_GRACE_SECONDS,
    ) -> None:
        self.cache = cache
        self.writer = writer
        self.listeners = listeners
        self.releaser_of = releaser_of
        self.release_grace = release_grace
        #: Set at wiring, once the work queue that runs :meth:`workload_changed` exists.
        self.later: Later | None = None

    async def workload_changed(self, key: WorkloadKey) -> None:
        """Apply the Workload's next lifecycle transition, then tell the listeners."""
        wl = self.cache.workload(key)
        if wl is None:
            return
        now = utcnow()
        releaser = self.releaser_of(wl) if lifecycle.awaits_release(wl) else lifecycle.Releaser.AT_ONCE
        update = lifecycle.next_update(wl, now, releaser, self.release_grace)
        if update is not None:
            await self.writer.apply(wl, update)
        else:
            wait = lifecycle.release_wait(wl, now, releaser, self.release_grace)
            if wait is not None and wait > 0 and self.later is not None:
                self.later(key, wait + 0.05)  # past the grace: the release is due when it runs
        for listener in self.listeners:
            await listener(wl)
