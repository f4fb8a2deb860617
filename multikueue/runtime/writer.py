"""Writing the core's decisions to Workloads, with optimistic concurrency.

Every write carries the resourceVersion the decision was made on. When the
Workload changed meanwhile, the API server answers 409 and the decision is
dropped: the watch brings the new state and the next cycle decides again.
That is what keeps a restarted or lagging controller from overwriting newer
state or counting quota twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import structlog
from kubernetes.client.rest import ApiException

from multikueue.api.constants import Finalizers
from multikueue.api.workload import Workload
from multikueue.core.lifecycle import WorkloadUpdate, finished_status
from multikueue.runtime import metrics
from multikueue.runtime.events import EventRecorder, ObjectRef
from multikueue.runtime.kube import AsyncKube
from multikueue.api.resources import WORKLOADS

log = structlog.get_logger(__name__)

#: Answers that mean "the decision is stale or moot", not "something is broken".
STALE = (404, 409)


def workload_ref(wl: Workload) -> ObjectRef:
    return ObjectRef(wl.api_version, wl.kind, wl.namespace, wl.name, wl.metadata.uid)


class WorkloadWriter:
    def __init__(self, kube: AsyncKube, events: EventRecorder) -> None:
        self.kube = kube
        self.events = events

    async def _finalizers(self, wl: Workload, rv: str | None, *, add: bool) -> str | None:
        current = list(wl.metadata.finalizers or [])
        if add and Finalizers.RESOURCE_IN_USE not in current:
            current.append(Finalizers.RESOURCE_IN_USE)
        elif not add and Finalizers.RESOURCE_IN_USE in current:
            current.remove(Finalizers.RESOURCE_IN_USE)
        else:
            return rv
        patch = {"metadata": {"finalizers": current, "resourceVersion": rv}}
        result = await self.kube.patch(WORKLOADS, wl.namespace, wl.name, patch)
        return str(result["metadata"]["resourceVersion"])

    async def _status(self, wl: Workload, rv: str | None, status: dict[str, Any]) -> str:
        patch = {"metadata": {"resourceVersion": rv}, "status": status}
        result = await self.kube.patch(WORKLOADS, wl.namespace, wl.name, patch, status=True)
        return str(result["metadata"]["resourceVersion"])

    async def reserve(self, wl: Workload, status: dict[str, Any]) -> bool:
        """Write the reservation; False if the Workload changed meanwhile.

        The resource-in-use finalizer, when missing (Jobs' Workloads have it
        from creation), is added right after by the lifecycle handler, as
        upstream's workload controller does: one write on the admission path.
        """
        try:
            await self._status(wl, wl.metadata.resource_version, status)
            return True
        except ApiException as exc:
            if exc.status in STALE:
                log.debug("reservation dropped: workload changed", workload=f"{wl.namespace}/{wl.name}", status=exc.status)
                return False
            raise

    async def pending(self, wl: Workload, status: dict[str, Any]) -> None:
        try:
            await self._status(wl, wl.metadata.resource_version, status)
        except ApiException as exc:
            if exc.status not in STALE:
                raise

    async def finish(self, wl: Workload, condition: dict[str, Any]) -> None:
        """Mark ``wl`` Finished with ``condition``, on the resourceVersion it was decided on."""
        await self._status(wl, wl.metadata.resource_version, finished_status(wl, condition))

    async def apply(self, wl: Workload, update: WorkloadUpdate, now: datetime) -> bool:
        """Write a lifecycle transition; False when the Workload changed meanwhile."""
        rv = wl.metadata.resource_version
        try:
            if update.deactivate:
                result = await self.kube.patch(
                    WORKLOADS, wl.namespace, wl.name, {"metadata": {"resourceVersion": rv}, "spec": {"active": False}}
                )
                rv = str(result["metadata"]["resourceVersion"])
            if update.add_finalizer:
                rv = await self._finalizers(wl, rv, add=True)
            if update.status is not None:
                rv = await self._status(wl, rv, update.status)
            if update.remove_finalizer:
                await self._finalizers(wl, rv, add=False)
        except ApiException as exc:
            if exc.status in STALE:
                return False
            raise
        for event in update.events:
            self.events.record(workload_ref(wl), event.type, event.reason, event.message)
        if update.transition in ("retry", "rejected", "deactivated") and update.status is not None:
            reason = next(
                (c["reason"] for c in update.status.get("conditions", []) if c["type"] == "Evicted"), update.transition
            )
            metrics.EVICTED_WORKLOADS.labels(reason).inc()
        elif update.transition == "admitted":
            cq = wl.status.admission.cluster_queue if wl.status and wl.status.admission else ""
            metrics.ADMITTED_WORKLOADS.labels(cq or "").inc()
        log.info("workload transition", workload=f"{wl.namespace}/{wl.name}", transition=update.transition)
        return True
