"""The one writer of Workload status: every write, its Events and its metrics.

Every controller that changes a Workload's status (the scheduling loop, the
lifecycle transitions, the integrations finishing a Workload, the MultiKueue
admission check) goes through :class:`WorkloadWriter`, so each transition is
counted once in ``kueue_*`` metrics, announced by one Event, and written the
same way:

- every write carries the resourceVersion the decision was made on. When the
  Workload changed meanwhile the API server answers 409 and the decision is
  dropped: the watch brings the new state and the next pass decides again.
  That is what keeps a restarted or lagging controller from overwriting
  newer state or counting quota twice;
- what a write returns is handed to ``on_written`` (the store), so the next
  decision is made on what was just written rather than on an older copy.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from kubernetes.client.rest import ApiException

from multikueue.api.constants import Finalizers
from multikueue.api.resources import WORKLOADS
from multikueue.api.workload import Workload
from multikueue.core.lifecycle import WorkloadUpdate, finished_status
from multikueue.runtime import metrics
from multikueue.runtime.events import EventRecorder, ObjectRef
from multikueue.runtime.kube import AsyncKube

log = structlog.get_logger(__name__)

#: Answers that mean "the decision is stale or moot", not "something is broken".
STALE = (404, 409)
#: An Event to post with a write: (type, reason, message).
EventSpec = tuple[str, str, str]


def workload_ref(wl: Workload) -> ObjectRef:
    return ObjectRef(wl.api_version, wl.kind, wl.namespace, wl.name, wl.metadata.uid)


def _cluster_queue(wl: Workload) -> str:
    return (wl.status.admission.cluster_queue if wl.status and wl.status.admission else "") or ""


class WorkloadWriter:
    def __init__(
        self, kube: AsyncKube, events: EventRecorder, on_written: Callable[[Workload], None] | None = None
    ) -> None:
        self.kube = kube
        self.events = events
        self._on_written = on_written
        #: Requests made, by what they wrote (``status:<why>``, ``finalizer+``, ``finalizer-``, ``spec``), 409s
        #: included: logged at shutdown, to count writes per Workload against upstream's (issue 16).
        self.writes: Counter[str] = Counter()

    # -- low level ------------------------------------------------------------------

    async def _finalizers(self, wl: Workload, rv: str | None, *, add: bool) -> str | None:
        current = list(wl.metadata.finalizers or [])
        if add and Finalizers.RESOURCE_IN_USE not in current:
            current.append(Finalizers.RESOURCE_IN_USE)
        elif not add and Finalizers.RESOURCE_IN_USE in current:
            current.remove(Finalizers.RESOURCE_IN_USE)
        else:
            return rv
        patch = {"metadata": {"finalizers": current, "resourceVersion": rv}}
        self.writes["finalizer+" if add else "finalizer-"] += 1
        result = await self.kube.patch(WORKLOADS, wl.namespace, wl.name, patch)
        return str(result["metadata"]["resourceVersion"])

    async def _status(self, wl: Workload, rv: str | None, status: dict[str, Any], why: str) -> dict[str, Any]:
        self.writes[f"status:{why}"] += 1
        patch = {"metadata": {"resourceVersion": rv}, "status": status}
        return await self.kube.patch(WORKLOADS, wl.namespace, wl.name, patch, status=True)

    def _record(self, wl: Workload, events: Sequence[EventSpec]) -> None:
        for type_, reason, message in events:
            self.events.record(workload_ref(wl), type_, reason, message)

    def _written(self, body: dict[str, Any]) -> Workload:
        """The write's answer as the cache keeps it: parsed once, without the field managers' records.

        The answer is a fresh decode no one else holds (``owned``); its
        ``managedFields`` would otherwise stay in the cache with the object
        (the watch feed drops them too).
        """
        meta = body.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
        updated = Workload.from_k8s(body, owned=True)
        if self._on_written is not None:
            self._on_written(updated)
        return updated

    # -- the scheduling loop ----------------------------------------------------------

    async def reserve(self, wl: Workload, status: dict[str, Any], *, cluster_queue: str, checks: Sequence[str]) -> bool:
        """Write a quota reservation; False (nothing counted) if the Workload changed meanwhile.

        The resource-in-use finalizer: Jobs' Workloads have it from
        creation. A Workload created without it gets it only in a
        ClusterQueue with admission checks (a MultiKueue check must delete
        its remote objects before the Workload goes); without checks it is
        left without one, as upstream's, which saves a write and a delete
        step per Workload (nothing waits on its deletion: the cache releases
        its quota on the watch's DELETE). When added, it is written *before*
        the status write, on the same resourceVersion chain: once the
        reservation is visible, this controller writes nothing more to the
        Workload until it finishes or is evicted. Written after, the
        finalizer raced whoever acts on the admission (the job's own
        controller marking it Finished, upstream's perf runner): their update
        was refused as stale and retried with backoff, holding quota long
        after the work ended.
        """
        rv = wl.metadata.resource_version
        try:
            if checks and Finalizers.RESOURCE_IN_USE not in (wl.metadata.finalizers or []):
                rv = await self._finalizers(wl, rv, add=True)
            # Stored at once: the next cycle plans on what was written, not on the older copy.
            self._written(await self._status(wl, rv, status, "reserve"))
        except ApiException as exc:
            if exc.status in STALE:
                log.debug("reservation dropped: workload changed", workload=f"{wl.namespace}/{wl.name}", status=exc.status)
                return False
            raise
        metrics.quota_reserved(wl, cluster_queue, admitted=not checks)
        log.debug("quota reserved", workload=f"{wl.namespace}/{wl.name}", cluster_queue=cluster_queue, checks=list(checks))
        # One Event per admission: when no check is pending it also says the Workload is admitted
        # (upstream posts a second "Admitted" Event; the lifecycle transition does so when checks exist).
        admitted = "" if checks else "; admitted (no admission checks)"
        self._record(wl, [("Normal", "QuotaReserved", f"Quota reserved in ClusterQueue {cluster_queue}{admitted}")])
        return True

    async def pending(self, wl: Workload, status: dict[str, Any]) -> bool:
        """Say why the Workload waits; False when it changed meanwhile (the caller decides again later)."""
        try:
            # Stored at once, so a reservation decided before the watch brings this write back is made
            # on its resourceVersion (a copy older than our own write was refused: a wasted reservation).
            self._written(await self._status(wl, wl.metadata.resource_version, status, "pending"))
        except ApiException as exc:
            if exc.status not in STALE:
                raise
            return False
        return True

    # -- lifecycle transitions --------------------------------------------------------

    async def apply(self, wl: Workload, update: WorkloadUpdate) -> bool:
        """Write a lifecycle transition; False when the Workload changed meanwhile."""
        rv = wl.metadata.resource_version
        try:
            if update.deactivate:
                self.writes["spec"] += 1
                result = await self.kube.patch(
                    WORKLOADS, wl.namespace, wl.name, {"metadata": {"resourceVersion": rv}, "spec": {"active": False}}
                )
                rv = str(result["metadata"]["resourceVersion"])
            if update.add_finalizer:
                rv = await self._finalizers(wl, rv, add=True)
            if update.status is not None:
                rv = str((await self._status(wl, rv, update.status, update.transition))["metadata"]["resourceVersion"])
            if update.remove_finalizer:
                await self._finalizers(wl, rv, add=False)
        except ApiException as exc:
            if exc.status in STALE:
                return False
            raise
        self._record(wl, [(e.type, e.reason, e.message) for e in update.events])
        if update.transition in ("retry", "rejected", "deactivated", "preempted") and update.status is not None:
            reason = next(
                (c["reason"] for c in update.status.get("conditions", []) if c["type"] == "Evicted"), update.transition
            )
            metrics.workload_evicted(wl, _cluster_queue(wl), reason)
        elif update.transition == "admitted":
            metrics.workload_admitted(wl, _cluster_queue(wl))
        log.debug("workload transition", workload=f"{wl.namespace}/{wl.name}", transition=update.transition)
        return True

    # -- status written by controllers (admission checks, integrations) ---------------

    async def write(
        self,
        wl: Workload,
        status: dict[str, Any],
        *,
        events: Sequence[EventSpec] = (),
        admitted: bool = False,
        why: str = "controller",
    ) -> Workload:
        """Patch ``status`` on the resourceVersion ``wl`` was read at; return what was written.

        ``admitted`` says the patch completes the admission (the last check
        turned Ready in the same write). A 409 propagates: the caller's plan
        was made on a stale copy and must be made again.
        """
        updated = self._written(await self._status(wl, wl.metadata.resource_version, status, why))
        self._record(updated, events)
        if admitted:
            metrics.workload_admitted(updated, _cluster_queue(updated))
        return updated

    async def finish(self, wl: Workload, condition: dict[str, Any], *, events: Sequence[EventSpec] = ()) -> Workload:
        """Mark ``wl`` Finished with ``condition``, on the resourceVersion it was decided on."""
        return await self.write(wl, finished_status(wl, condition), events=events, why="finish")
