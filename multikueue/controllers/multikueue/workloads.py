"""The MultiKueue admission check's Workload reconciler on the manager.

Every local Workload carrying a MultiKueue check is reconciled through one
work queue (one key at a time, coalesced, retried with backoff on any
failure) when it changes, when its remote copies or jobs change, when its
job changes, and when the clusters or job kinds change:

1. build the :class:`~.dispatch.DispatchContext` from what is known now
   (the check's clusters and their connections, each worker's copy of the
   Workload, whether the job exists there, and the owner job as its
   integration sees it);
2. ask the pure :func:`~.dispatch.decide` for a plan;
3. hand the plan to :class:`~.apply.PlanApplier`.

A deleted Workload that was placed on workers keeps its ``resource-in-use``
finalizer (the lifecycle leaves it, see :mod:`multikueue.core.lifecycle`):
its plans delete the remote job and copies, found by the Workload's name and
this origin rather than through the owner (usually gone by then), and once
no active worker shows any of them the finalizer is dropped here. So the
remote job goes with the manager's, not at the next GC pass.

Nothing here knows a concrete job kind: the owner and every kind-specific
answer come from the :class:`~multikueue.integrations.registry.IntegrationSet`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog
from kubernetes.client.rest import ApiException

from multikueue.api.meta import utcnow
from multikueue.api import Workload
from multikueue.api.constants import Finalizers
from multikueue.controllers.multikueue import dispatch
from multikueue.controllers.multikueue.apply import PlanApplier, WorkerCallFailed, api_message, bound_job
from multikueue.controllers.multikueue.clusters import ClusterManager
from multikueue.controllers.multikueue.connection import RemoteCluster
from multikueue.controllers.multikueue.remote_workload import RemoteCopy
from multikueue.core import lifecycle
from multikueue.core.cache import Cache
from multikueue.integrations.base import Adapter
from multikueue.integrations.binding import bound_workload_name
from multikueue.integrations.registry import IntegrationSet
from multikueue.runtime.workqueue import WorkQueue

log = structlog.get_logger(__name__)

WorkloadKey = tuple[str, str]
#: (apiVersion, kind, namespace, name) of a job object.
OwnerKey = tuple[str, str, str, str]
#: Pause before looking again at a plan that lost a race (409): the watch brings the new state.
CONFLICT_RETRY_SECONDS = 0.2
#: Shortest requeue a plan may ask for.
MIN_REQUEUE_SECONDS = 0.5
#: Workloads reconciled at once (each mostly waits on API round trips).
CONCURRENCY = 32
#: Every Workload with a MultiKueue check is planned again at least this often, whatever the
#: events: a plan may wait on something no event reports (a missed watch event, a deadline).
RESYNC_SECONDS = 60.0
#: How long a deleted Workload's MultiKueue check may stay unknown before its finalizer is dropped anyway.
UNKNOWN_CHECK_GRACE_SECONDS = 60.0



def _held_for_cleanup(wl: Workload) -> bool:
    """A deleted Workload whose in-use finalizer the lifecycle left for this controller to drop."""
    return wl.metadata.deletion_timestamp is not None and lifecycle.placed_on_workers(wl) and (
        Finalizers.RESOURCE_IN_USE in (wl.metadata.finalizers or ())
    )


def _unless_deleted(remote: RemoteCluster, copy: RemoteCopy | None) -> RemoteCopy | None:
    """The cached copy, or None when this manager deleted it and the watch has not said so yet."""
    if copy is None or remote.pending_deletes.pending(copy.uid):
        return None
    return copy


@dataclass(frozen=True)
class DispatchSettings:
    origin: str
    dispatcher: str
    worker_lost_timeout: timedelta


class MultiKueueController:
    def __init__(
        self,
        cache: Cache,
        clusters: ClusterManager,
        integrations: IntegrationSet,
        applier: PlanApplier,
        settings: DispatchSettings,
    ) -> None:
        self.cache = cache
        self.clusters = clusters
        self.integrations = integrations
        self.applier = applier
        self.settings = settings
        self.queue: WorkQueue[WorkloadKey] = WorkQueue(
            "multikueue",
            self._handle,
            workers=CONCURRENCY,
            format_key=lambda k: f"{k[0]}/{k[1]}",
            expected=(WorkerCallFailed, ApiException),
            urgent=self.started,
        )
        #: Which Workload each job object belongs to, learned from the Workloads' owner references
        #: (a third party may name the Workload of an external object as it likes).
        self._owned: dict[OwnerKey, WorkloadKey] = {}
        self._owner_of: dict[WorkloadKey, OwnerKey] = {}
        #: Deleted Workloads held for clean-up whose check is unknown, and since when (queue clock).
        self._unknown_since: dict[WorkloadKey, float] = {}
        clusters.on_topology(self.reconcile_all)
        clusters.on_remote(self.remote_changed)

    # -- what triggers a reconcile -----------------------------------------------------

    def start(self) -> None:
        """Start reconciling (this replica leads): plan every Workload now, then every RESYNC_SECONDS.

        The queue dropped whatever was added while stopped (a standby's
        events), so the first resync is what re-plans it. Call once the cache
        is current again, or the plans are made on a stale picture.
        """
        self.queue.start(resync=self.owned, every=RESYNC_SECONDS)

    async def stop(self) -> None:
        """Stop reconciling: the resync timer ends and running passes are cancelled (see WorkQueue.stop)."""
        await self.queue.stop()

    def schedule(self, key: WorkloadKey, delay: float = 0.0) -> None:
        self.queue.add(key, delay=delay)

    def started(self, key: WorkloadKey) -> bool:
        """Urgent in the queue: finish what was started before starting more.

        A Workload that won a worker (``clusterName``: its job is created
        there, runs, has its status copied back and is finished from it), or
        that is finished or deleted here (its copies and job are deleted on
        the workers), goes ahead of those still being dispatched. With
        thousands of Workloads being dispatched (ten copies each, several
        events per copy), first come first served left Jobs done on the
        workers for minutes behind new dispatches (issue 16: in a 3,000-Job
        run, copies finished for seven minutes were not yet seen through),
        holding quota, copies and memory meanwhile. Asked at every add: one
        cache lookup.
        """
        wl = self.cache.workload(key)
        return wl is not None and (
            bool(wl.status.cluster_name) or wl.is_finished or wl.metadata.deletion_timestamp is not None
        )

    def workload_changed(self, wl: Workload) -> None:
        if self.clusters.check_of(wl) is not None or _held_for_cleanup(wl):
            self.schedule((wl.namespace or "", wl.name))

    def workload_deleted(self, key: WorkloadKey) -> None:
        self.schedule(key)

    def owned(self) -> list[WorkloadKey]:
        """Every Workload this check owns or has dispatched: one pass over the cache, no API call."""
        return [
            key
            for key, wl in self.cache.workloads_items()
            if self.clusters.check_of(wl) is not None
            or (wl.status and (wl.status.cluster_name or wl.status.nominated_cluster_names))
        ]

    def reconcile_all(self) -> None:
        self.queue.add_all(self.owned())

    def remote_changed(self, remote: RemoteCluster, kind: str, obj: dict[str, Any] | None) -> None:
        if obj is None:
            return
        meta = obj.get("metadata", {})
        name = meta.get("name", "") if kind == "workload" else bound_workload_name(obj)
        if name:
            self.schedule((meta.get("namespace", ""), name))

    def object_changed(self, adapter: Adapter, obj: Mapping[str, Any]) -> None:
        """A local job object changed: re-plan the Workload it belongs to."""
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace", "")
        owned = self._owned.get((adapter.api_version, adapter.kind, namespace, meta.get("name", "")))
        self.schedule(owned or (namespace, adapter.workload_name(obj)))

    # -- one reconcile ------------------------------------------------------------------

    async def _handle(self, key: WorkloadKey) -> float | None:
        """One pass for the work queue: a stale local copy is looked at again soon; any other failure backs off."""
        try:
            return await self.reconcile(key)
        except ApiException as exc:  # from the manager: the local commit point or a status copy
            if exc.status in (404, 409):
                return CONFLICT_RETRY_SECONDS  # decided on a stale copy: look again once the watch caught up
            log.error(
                "multikueue reconcile failed", workload=f"{key[0]}/{key[1]}", status=exc.status, error=api_message(exc)
            )
            raise

    async def _release_without_check(self, key: WorkloadKey, wl: Workload) -> float | None:
        """A deleted Workload held for clean-up whose MultiKueue check this controller does not know.

        Unknown is not gone: the AdmissionCheck may not have been seen yet
        (start-up, a lagging watch) or be known to another controller. Only
        after :data:`UNKNOWN_CHECK_GRACE_SECONDS` of not knowing it is the
        finalizer dropped (leftovers on workers are then the GC's), so such a
        Workload is never stuck in deletion for good.
        """
        now = self.queue.clock.now()
        since = self._unknown_since.setdefault(key, now)
        if now - since < UNKNOWN_CHECK_GRACE_SECONDS:
            return UNKNOWN_CHECK_GRACE_SECONDS - (now - since)
        del self._unknown_since[key]
        log.info("multikueue check unknown: releasing a deleted workload", workload=f"{key[0]}/{key[1]}")
        await self.applier.release(wl)
        return None

    async def reconcile(self, key: WorkloadKey) -> float | None:
        """Decide and act for one Workload; return seconds after which to look again, or None."""
        wl = self.cache.workload(key)
        if wl is None:
            self._unknown_since.pop(key, None)
            owner_key = self._owner_of.pop(key, None)
            if owner_key is not None and self._owned.get(owner_key) == key:
                del self._owned[owner_key]
            return None
        check = self.clusters.check_of(wl)
        if check is None:
            if _held_for_cleanup(wl):
                return await self._release_without_check(key, wl)
            self._unknown_since.pop(key, None)
            return None
        self._unknown_since.pop(key, None)
        found = self.integrations.owner_of(wl)
        integration, owner = found.integration, found.owner
        if integration is not None:
            ref = next(r for r in wl.metadata.owner_references or [] if r.controller)
            owner_key = (ref.api_version, ref.kind, key[0], ref.name)
            self._owned[owner_key] = key
            self._owner_of[key] = owner_key
        membership = self.clusters.membership(check)
        job_name = owner["metadata"]["name"] if owner else None
        origin = self.settings.origin
        views = {
            name: dispatch.ClusterView(
                name=name,
                active=remote.state.active,
                inactive_since=remote.state.inactive_since,
                workload=_unless_deleted(remote, remote.workloads.get(key)),
                # By binding and origin, not through the owner: a deleted Workload's owner is usually gone.
                job_exists=integration is not None
                and bound_job(remote, integration.ref.plural, key[0], key[1], origin, hint=job_name) is not None,
            )
            for name, remote in membership.connected.items()
        }
        for name, since in membership.missing_since.items():
            # No MultiKueueCluster (deleted, or never created): lost since then, as a disconnected worker.
            views[name] = dispatch.ClusterView(name=name, active=False, inactive_since=since, workload=None, job_exists=False)
        ctx = dispatch.DispatchContext(
            check_name=check,
            clusters=membership.names,
            views=views,
            dispatcher=self.settings.dispatcher,
            worker_lost_timeout=self.settings.worker_lost_timeout,
            origin=self.settings.origin,
            now=utcnow(),
            adapter_problem=found.problem,
            config_known=membership.known,
            config_name=membership.config,
        )
        plan = dispatch.decide(wl, ctx)
        retry = None
        if plan.actions:
            retry = await self.applier.apply(wl, plan, check, membership.connected, integration, owner)
        elif _held_for_cleanup(wl) and not dispatch.remote_objects_left(ctx):
            # Deleted, and no active worker shows a copy or job any more (unreachable ones are the GC's).
            await self.applier.release(wl)
        delays = [d for d in (retry,) if d is not None]
        if plan.requeue_after is not None:
            delays.append(max(MIN_REQUEUE_SECONDS, plan.requeue_after.total_seconds()))
        return min(delays) if delays else None
