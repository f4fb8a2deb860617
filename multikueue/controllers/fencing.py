"""The worker's half of fencing: stop the jobs of a manager whose origin Lease expired.

Runs on workers while this replica leads. Every ``poll`` seconds it lists
the origin Leases (a consistent read, no watch: a watch that goes quiet
cannot be told apart from a Lease that stopped changing) and feeds them to
:class:`multikueue.core.fencing.LeaseWatch`. For each expired origin it
deactivates (``spec.active: false``) that origin's Workloads that are active
and not finished: the lifecycle evicts them, the Job integration suspends
their Jobs, and the scheduler does not admit them again. A Warning Event on
each says why. The manager, once it reaches the worker again, finds the
copies evicted and dispatches afresh (it may have done so already, after
its ``workerLostTimeout``, which is twice the Lease's duration); copies
that were still pending are only deactivated, and the manager replaces
those it still nominates (``dispatch._usable``).

A deactivated copy stays deactivated when the Lease is renewed again:
whether its job should run is the manager's decision by then.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from multikueue.api.constants import Labels
from multikueue.api.resources import LEASES, WORKLOADS
from multikueue.core.fencing import LEASE_NAMESPACE, LEASE_ORIGIN_LABEL, LeaseSighting, LeaseWatch, sighting, to_fence
from multikueue.runtime.events import EventRecorder, ObjectRef
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.tasks import cancel_and_wait

log = structlog.get_logger(__name__)

#: Seconds between two listings of the origin Leases.
POLL_SECONDS = 1.0
#: A listing that takes longer than this counts as a miss (the worker could not see a renewal).
LIST_TIMEOUT_SECONDS = 2.0
REASON = "MultiKueueOriginLost"


class OriginFencing:
    """Polls the origin Leases on this cluster and fences the origins whose Lease expired."""

    def __init__(self, kube: AsyncKube, events: EventRecorder, *, poll: float = POLL_SECONDS) -> None:
        self.kube = kube
        self.events = events
        self.poll = poll
        self.watch = LeaseWatch(max_gap=poll + LIST_TIMEOUT_SECONDS)
        self._task: asyncio.Task[None] | None = None
        #: Origins fenced now (logged once per expiry).
        self.fenced: set[str] = set()

    def start(self) -> None:
        """Start polling; windows start afresh (a replica that just took the lead saw nothing before)."""
        if self._task is None:
            self.watch = LeaseWatch(max_gap=self.poll + LIST_TIMEOUT_SECONDS)
            self.fenced = set()
            self._task = asyncio.create_task(self._run(), name="origin fencing")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        """Tick until cancelled: an error nobody foresaw is logged, and the next tick comes as usual
        (a held task that raised would end fencing for good, silently)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self.tick(loop.time())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - see the docstring
                log.error("origin fencing check failed unexpectedly: trying again", error=repr(exc)[:200], exc_info=exc)
            await asyncio.sleep(self.poll)

    async def tick(self, now: float) -> list[str]:
        """One listing and what follows from it; returns the origins expired now."""
        try:
            leases = await asyncio.wait_for(
                self.kube.list(LEASES, LEASE_NAMESPACE, label_selector=LEASE_ORIGIN_LABEL), LIST_TIMEOUT_SECONDS
            )
        except (ApiException, HTTPError, OSError, TimeoutError) as exc:
            self.watch.missed()
            log.debug("origin leases not listed: fencing waits", error=str(exc)[:200])
            return []
        sightings: dict[str, LeaseSighting] = {}
        for lease in leases:
            seen = sighting(lease)
            if seen is not None:
                sightings[seen.origin] = seen
        self.watch.observe(sightings, now)
        expired = self.watch.expired(now)
        for origin in sorted(self.fenced - set(expired)):
            log.info("origin lease renewed: no longer fencing", origin=origin)
        self.fenced &= set(expired)
        for origin in expired:
            if origin not in self.fenced:
                log.warning(
                    "origin lease expired: deactivating its workloads",
                    origin=origin,
                    lease_seconds=sightings[origin].duration,
                    hint="the manager of this origin has not reached this cluster for the lease's duration; "
                    "its jobs stop here before it dispatches them elsewhere",
                )
                self.fenced.add(origin)
            await self._fence(origin, sightings[origin].duration)
        return expired

    async def _fence(self, origin: str, duration: float) -> None:
        try:
            workloads = await self.kube.list(WORKLOADS, None, label_selector=f"{Labels.MULTIKUEUE_ORIGIN}={origin}")
        except (ApiException, HTTPError, OSError) as exc:
            log.warning("workloads of an expired origin not listed; retrying", origin=origin, error=str(exc)[:200])
            return
        for wl in workloads:
            if to_fence(wl, {origin}):
                await self._deactivate(wl, origin, duration)

    async def _deactivate(self, wl: dict[str, Any], origin: str, duration: float) -> None:
        meta = wl["metadata"]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": {"active": False}}
        try:
            await self.kube.patch(WORKLOADS, meta["namespace"], meta["name"], patch)
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone, or changed: looked at again next tick
                log.warning("workload of an expired origin not deactivated", workload=f"{meta['namespace']}/{meta['name']}", status=exc.status)
            return
        message = (
            f"The lease of MultiKueue origin {origin!r} was not renewed for {duration:g}s: its manager cannot reach this "
            f"cluster. Deactivated so that its job does not run here and on another worker at once; the manager "
            f"dispatches it again"
        )
        # Listed items carry no apiVersion/kind; the Event's involvedObject needs them.
        self.events.record(ObjectRef.of({**wl, "apiVersion": WORKLOADS.api_version, "kind": "Workload"}), "Warning", REASON, message)
        log.info("workload fenced", workload=f"{meta['namespace']}/{meta['name']}", origin=origin)
