"""The one place that builds the controller's parts and connects them.

Each part receives only what it uses (a client, the cache, the Workload
writer, the integrations, the Event recorder, its settings); nothing receives
"the whole state". Who listens to whom is written here, in one screen:

- the cache feeds wake the scheduling loop;
- a Workload change goes to its lifecycle transition, then to the Job
  integration, the external frameworks and (on a manager) the MultiKueue
  check;
- an external object's change, a worker's event, a cluster or job-kind
  change re-plan the MultiKueue Workloads concerned.

Everything that writes runs only while this replica leads. kopf runs in
every replica, standalone: its watches and handlers feed the cache of a
standby too (a warm cache, so a new leader catches up in moments), but a
handler that would write does nothing while not leading (the Workload
lifecycle here; the Active conditions in the cluster manager; the work
queues drop what they are given while stopped). :meth:`Controller.lead_until`
is what the Lease loop (``runtime/leaderelection.py``, or at once without
``--leader-elect``) runs while this replica leads: it waits until the cache
has caught up with the API server, then starts the work queues, the worker
connections, the Event recorder, the GC and the scheduling loop, and goes
over every cached Workload once (the transitions a standby skipped); when
told to stop (the Lease lost, not renewed in time, or shutdown) it stops
them all before returning. A replica that stopped leading so keeps no
connection, watch of a worker, timer or queue that could still act.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
import structlog
from kubernetes.client.rest import ApiException

from multikueue.api import Workload
from multikueue.api.configuration import Configuration
from multikueue.api.meta import version_number
from multikueue.api.resources import WORKLOADS
from multikueue.controllers.fencing import OriginFencing
from multikueue.controllers.lifecycle import LifecycleController, Listener
from multikueue.core.lifecycle import OUTSIDE_RELEASE_GRACE_SECONDS, Releaser
from multikueue.controllers.multikueue.apply import PlanApplier
from multikueue.controllers.multikueue.checks import queue_has_multikueue_check
from multikueue.controllers.multikueue.clusters import ClusterManager
from multikueue.controllers.multikueue.connection import ConnectionSettings
from multikueue.controllers.multikueue.gc import GarbageCollector
from multikueue.controllers.multikueue.workloads import DispatchSettings, MultiKueueController
from multikueue.core.cache import Cache
from multikueue.integrations.base import Integration
from multikueue.integrations.batchjob import webhook as job_webhook
from multikueue.integrations.batchjob.adapter import BatchJobAdapter
from multikueue.integrations.batchjob.reconciler import JobReconciler
from multikueue.integrations.external.reconciler import ExternalReconciler
from multikueue.integrations.external.reload import FrameworkLoader
from multikueue.integrations.external.webhook import ExternalDefaults
from multikueue.integrations.registry import IntegrationSet
from multikueue.operator.feeds import WorkloadFeed, register_feeds
from multikueue.operator.scheduling import SchedulingLoop, fair_sharing_of
from multikueue.operator.webhook import AdmissionSource
from multikueue.runtime.events import EventRecorder
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.leaderelection import Stopped
from multikueue.runtime.queue_status import QueueStatusWriter
from multikueue.runtime.tasks import cancel_and_wait, first_of
from multikueue.runtime.workqueue import WorkQueue
from multikueue.runtime.writer import WorkloadWriter

log = structlog.get_logger(__name__)

MANAGER = "manager"
#: How long a new leader waits for its cache to catch up before it acts anyway (with a warning).
CATCH_UP_TIMEOUT_SECONDS = 30.0
#: How often the catch-up compares the cache with the listing.
CATCH_UP_POLL_SECONDS = 0.1
#: First GC pass this long after taking the lead (or the GC interval, if shorter).
GC_FIRST_PASS_SECONDS = 5.0
#: Workloads deleted while standing by that are remembered for the MultiKueue check (the most recent; the GC covers the rest).
STANDBY_DELETIONS_KEPT = 10_000
#: Lifecycle transitions handled at once (different Workloads; one Workload's are never concurrent).
LIFECYCLE_WORKERS = 8

WorkloadKey = tuple[str, str]


def _not_older(current: str | None, listed: str | None) -> bool:
    """Whether a cached resourceVersion is at least the listed one (etcd revisions; else: equal)."""
    if current is None:
        return False
    if current == listed:
        return True
    ours, theirs = version_number(current), version_number(listed)
    return ours is not None and theirs is not None and ours >= theirs


def lagging_workloads(listed: Mapping[WorkloadKey, str | None], cached: Mapping[WorkloadKey, str | None]) -> list[WorkloadKey]:
    """The listed Workloads the cache does not hold at (at least) the listed resourceVersion yet."""
    return sorted(key for key, rv in listed.items() if not _not_older(cached.get(key), rv))


def unlisted_workloads(listed: Iterable[WorkloadKey], cached: Iterable[WorkloadKey]) -> list[WorkloadKey]:
    """Cached Workloads the listing lacks: deleted while this replica stood by, or created since the listing."""
    known = set(listed)
    return sorted(key for key in cached if key not in known)


@dataclass(frozen=True)
class Settings:
    role: str
    namespace: str
    config_map: str
    config: Configuration
    webhooks: bool = False
    #: Seconds a preempted Workload no integration here runs is left to its own controller to release.
    outside_release_grace: float = OUTSIDE_RELEASE_GRACE_SECONDS


@dataclass
class Controller:
    """Everything one controller process runs, built by :func:`build`."""

    settings: Settings
    kube: AsyncKube
    cache: Cache
    events: EventRecorder
    writer: WorkloadWriter
    integrations: IntegrationSet
    scheduling: SchedulingLoop
    lifecycle: LifecycleController
    jobs: JobReconciler
    external: ExternalReconciler
    frameworks: FrameworkLoader
    multikueue: MultiKueueController | None
    clusters: ClusterManager | None
    gc: GarbageCollector | None
    #: Workers only: stops the jobs of a manager whose origin Lease expired.
    fencing: OriginFencing | None = None
    #: Set once kopf has listed every indexed kind and the Workload feed its Workloads (the readiness probe;
    #: leading waits for it).
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set by kopf's first event of the controller's Namespace: every kind kopf indexes is listed.
    kopf_synced: asyncio.Event = field(default_factory=asyncio.Event)
    #: Between :meth:`lead` and :meth:`follow`: the handlers that write may.
    leading: bool = False
    #: Workloads deleted while not leading, in order: their remote copies are cleaned up once leading.
    standby_deletions: dict[WorkloadKey, None] = field(default_factory=dict)
    #: Webhooks whose set changes while running (the external kinds' defaulting), made by :meth:`register`:
    #: the process hands them to its webhook server before kopf starts it.
    admission_sources: list[AdmissionSource] = field(default_factory=list)
    #: Workloads into the cache (our own watch, not kopf's; started by :meth:`start_feeds`).
    workloads: WorkloadFeed = field(init=False)
    #: Each changed Workload's lifecycle transition and listeners; runs only while leading.
    lifecycle_queue: WorkQueue[WorkloadKey] = field(init=False)
    _sync_task: asyncio.Task[None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.workloads = WorkloadFeed(
            self.kube, self.cache, self.scheduling.notify, changed=self._workload_changed, deleted=self._workload_deleted
        )
        self.lifecycle_queue = WorkQueue(
            "lifecycle",
            self.lifecycle.workload_changed,
            workers=LIFECYCLE_WORKERS,
            format_key=lambda key: f"{key[0]}/{key[1]}",
            expected=(ApiException, OSError),
        )
        self.lifecycle.later = self.lifecycle_queue.add

    def register(self, registry: kopf.OperatorRegistry) -> None:
        """Register every kopf handler of the parts built (no daemon, timer or change handler: kopf writes nothing)."""
        register_feeds(registry, self.cache, self.scheduling.notify)
        if self.settings.config.integrations.batch_jobs:
            self.jobs.register(registry)
        self._register_synced(registry)
        if self.clusters is not None:
            self.clusters.register(registry)
        if self.settings.webhooks and self.settings.config.integrations.batch_jobs:
            job_webhook.register(
                registry,
                lambda ns, queue: queue_has_multikueue_check(self.cache, ns, queue),
                manage_jobs_without_queue_name=self.settings.config.manage_jobs_without_queue_name,
            )
        if self.settings.webhooks and self.settings.role == MANAGER:
            # managedBy defaulted for the external kinds whose entry has `webhook`, following reloads.
            defaults = ExternalDefaults(self.frameworks.active)
            self.frameworks.on_loaded(defaults.apply)
            self.admission_sources.append(defaults)

    def start_feeds(self) -> None:
        """Start the Workload feed, and mark the cache synced once it and kopf's indexes have listed (on the loop)."""
        self.workloads.start()
        if self._sync_task is None:
            self._sync_task = asyncio.create_task(self._mark_synced(), name="cache synced")

    async def _mark_synced(self) -> None:
        await self.kopf_synced.wait()
        await self.workloads.synced.wait()
        self.synced.set()
        log.info("cache synced", workloads=len(self._cached_versions()))

    def _workload_changed(self, key: WorkloadKey) -> None:
        """A Workload event: its lifecycle transition and listeners, only while leading (a standby writes nothing).

        What a standby skips here, :meth:`lead` queues once it leads (every cached Workload).
        """
        if self.leading:
            self.lifecycle_queue.add(key)

    def _workload_deleted(self, key: tuple[str, str]) -> None:
        if self.multikueue is None:
            return
        if not self.leading:
            # The check's queue drops it while stopped, and a resync only sees cached Workloads.
            self.standby_deletions.pop(key, None)
            self.standby_deletions[key] = None
            if len(self.standby_deletions) > STANDBY_DELETIONS_KEPT:
                del self.standby_deletions[next(iter(self.standby_deletions))]
        self.multikueue.workload_deleted(key)

    async def stop(self) -> None:
        """Shut down (kopf's clean-up, after the leadership loop ended): whatever still runs, and the external watches."""
        await self.follow()
        await cancel_and_wait(self._sync_task)
        await self.workloads.stop()
        await self.frameworks.stop()
        await self.external.stop()
        await self.events.stop()

    # -- leadership ---------------------------------------------------------------------

    def _register_synced(self, registry: kopf.OperatorRegistry) -> None:
        """Note kopf's indexes complete at the first event of the controller's Namespace.

        kopf holds every non-indexing handler until the initial listing of
        every indexed kind is in the indexes (the cache), so the first event
        handled here means the cache holds every kind kopf feeds.
        """
        namespace = self.settings.namespace

        @kopf.on.event("", "v1", "namespaces", registry=registry, id="synced", when=lambda name, **_: name == namespace)
        async def synced(**_: Any) -> None:
            self.kopf_synced.set()

    async def lead_until(self, stopped: Stopped) -> None:
        """Act as the leader until ``stopped``: catch up, start everything, schedule; then stop everything."""
        log.info("leadership taken: catching up with the API server", namespace=self.settings.namespace)
        gc_task: asyncio.Task[None] | None = None
        try:
            await self._wait_synced(stopped)
            if stopped:
                return
            await self.catch_up(stopped)
            if stopped:
                return
            self.lead()
            if self.gc is not None:
                gc_task = asyncio.create_task(self._collect_garbage(stopped), name="multikueue gc")
            await self.scheduling.run(stopped)
        finally:
            self.leading = False  # first: no handler writes from here on
            await cancel_and_wait(gc_task)
            # Shielded: kopf cancels a daemon that is slow to exit, and a half-done stop would leave
            # worker connections running on a replica that no longer leads.
            stopping = asyncio.ensure_future(self.follow())
            try:
                took = await asyncio.shield(stopping)
            except asyncio.CancelledError:
                await asyncio.wait({stopping})
                log.info("leadership released: controllers stopped (the daemon was cancelled meanwhile)")
                raise
            reason = stopped.reason if stopped.reason is not None else "cancelled"
            log.info("leadership released: controllers stopped, this replica makes no more writes", reason=reason, took=took)

    async def _wait_synced(self, stopped: Stopped) -> None:
        await first_of(self.synced.wait(), stopped.wait())

    def lead(self) -> None:
        """Start the parts that act (the cache is current): queues, worker connections, Events, resyncs."""
        self._drop_assumptions()
        self.leading = True
        # Every cached Workload's transition once: a standby skipped them (the integrations and the
        # MultiKueue check re-add what they own as their queues start; this also wakes them per Workload).
        self.lifecycle_queue.start(resync=lambda: [key for key, _ in self.cache.workloads_items()])
        self.events.start()
        self.jobs.start()
        self.external.start()
        if self.clusters is not None:
            self.clusters.start_all()
        if self.multikueue is not None:
            self.multikueue.start()
            deleted, self.standby_deletions = list(self.standby_deletions), {}
            for key in deleted:
                self.multikueue.workload_deleted(key)
        if self.fencing is not None:
            self.fencing.start()
        log.info("leading: controllers started")

    async def follow(self) -> dict[str, float]:
        """Stop the parts that act; the external frameworks' watches (read-only) stay for the next lead.

        Returns the seconds each part took to stop (logged: a slow stop delays the hand-off).
        """
        self.leading = False
        loop = asyncio.get_running_loop()
        took: dict[str, float] = {}
        start = loop.time()
        await self.lifecycle_queue.stop()
        took["lifecycle"] = round(loop.time() - start, 3)
        start = loop.time()
        if self.multikueue is not None:
            await self.multikueue.stop()
            took["multikueue"] = round(loop.time() - start, 3)
        if self.clusters is not None:
            start = loop.time()
            await self.clusters.stop_all()
            took["workers"] = round(loop.time() - start, 3)
        if self.fencing is not None:
            start = loop.time()
            await self.fencing.stop()
            took["fencing"] = round(loop.time() - start, 3)
        start = loop.time()
        await self.jobs.stop()
        took["jobs"] = round(loop.time() - start, 3)
        start = loop.time()
        await self.external.stop(watches=False)
        took["external"] = round(loop.time() - start, 3)
        # Events still queued are posted when this replica leads again.
        await self.events.stop()
        return took

    def _drop_assumptions(self) -> None:
        """Forget admissions assumed in an earlier term whose write was cancelled when it ended.

        After the catch-up, the cache holds every reservation that was
        written; an assumption left is one that never was, and would keep
        its quota counted for good.
        """
        stale = [key for key, _ in self.cache.workloads_items() if self.cache.is_assumed(key)]
        for key in stale:
            self.cache.forget(key)
        if stale:
            log.info("assumed admissions of the previous term dropped", workloads=len(stale))

    async def catch_up(self, stopped: Stopped) -> None:
        """Wait until the cache holds every Workload at least as new as the API server lists it.

        A standby's cache is warm (kopf's watches run in every replica), but
        it trails the API server by the watch's lag: the previous leader's
        last writes (a reservation, a finished Workload) may not have
        arrived yet. Acting earlier would admit against usage that is not
        counted yet or plan copies of Workloads that are gone. Workloads the
        cache holds but the listing lacks (a deletion still on its way, or a
        Workload created since the listing) are looked up one by one: those
        that no longer exist are forgotten. On a cache that kept up this
        costs one list.
        """
        try:
            items = await self.kube.list(WORKLOADS)
        except (ApiException, OSError) as exc:
            log.warning(
                "catch-up skipped: Workloads not listed; acting on the cache as the watch keeps it",
                error=str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__,
            )
            return
        listed = {
            (i["metadata"].get("namespace", ""), i["metadata"]["name"]): i["metadata"].get("resourceVersion") for i in items
        }
        deadline = asyncio.get_running_loop().time() + CATCH_UP_TIMEOUT_SECONDS
        while not stopped:
            lagging = lagging_workloads(listed, self._cached_versions())
            if not lagging:
                break
            if asyncio.get_running_loop().time() > deadline:
                log.warning(
                    "cache still behind the API server: acting anyway; check the manager's watch connections",
                    lagging=len(lagging),
                    first=f"{lagging[0][0]}/{lagging[0][1]}",
                )
                break
            await stopped.wait(CATCH_UP_POLL_SECONDS)
        gone = 0
        for key in unlisted_workloads(listed, self._cached_versions()):
            if stopped:
                return
            try:
                exists = await self.kube.get_or_none(WORKLOADS, key[0], key[1]) is not None
            except (ApiException, OSError):
                continue  # the watch settles it; nothing is deleted on a doubt
            if not exists:
                gone += 1
                self.cache.delete_workload(key)
                self._workload_deleted(key)
        if gone:
            self.scheduling.notify()
        log.info("cache caught up", workloads=len(listed), forgotten=gone)

    def _cached_versions(self) -> dict[WorkloadKey, str | None]:
        return {key: wl.metadata.resource_version for key, wl in self.cache.workloads_items()}

    async def _collect_garbage(self, stopped: Stopped) -> None:
        """The GC's passes, only while leading and only on a caught-up cache (else it could delete running work)."""
        assert self.gc is not None
        seconds = self.gc.interval.total_seconds()
        await stopped.wait(min(GC_FIRST_PASS_SECONDS, seconds))
        while not stopped:
            try:
                await self.gc.collect()
            except Exception as exc:  # noqa: BLE001 - one failed pass must not end the GC; the next one retries
                log.warning("gc pass failed; retrying next interval", error=str(exc)[:200], retry_in=seconds)
            await stopped.wait(seconds)


def build(kube: AsyncKube, events: EventRecorder, settings: Settings) -> Controller:
    cache = Cache()
    writer = WorkloadWriter(kube, events, on_written=cache.upsert_workload)
    jobs = JobReconciler(
        kube,
        cache,
        writer,
        events,
        managed_namespaces=settings.config.managed_jobs_namespace_selector,
        manage_jobs_without_queue_name=settings.config.manage_jobs_without_queue_name,
    )
    # A framework left out of integrations.frameworks is not reconciled, as upstream: with batch/job
    # left out, no Job is watched, suspended, given a Workload or dispatched (the reconciler is built
    # but never fed).
    integrations = IntegrationSet([Integration(BatchJobAdapter(), jobs)] if settings.config.integrations.batch_jobs else [])
    external = ExternalReconciler(kube, cache, writer, events, integrations)
    frameworks = FrameworkLoader(kube, events, external, namespace=settings.namespace, config_map=settings.config_map)
    multikueue: MultiKueueController | None = None
    clusters: ClusterManager | None = None
    gc: GarbageCollector | None = None
    listeners: list[Listener] = [jobs.on_workload, external.on_workload]
    if settings.role == MANAGER:
        mk = settings.config.multi_kueue
        clusters = ClusterManager(
            kube,
            integrations,
            namespace=settings.namespace,
            origin=mk.origin,
            connection=ConnectionSettings.from_settings(mk),
        )
        multikueue = MultiKueueController(
            cache,
            clusters,
            integrations,
            PlanApplier(kube, writer, origin=mk.origin),
            DispatchSettings(origin=mk.origin, dispatcher=mk.dispatcher_name, worker_lost_timeout=mk.worker_lost_timeout),
        )
        gc = GarbageCollector(clusters, lambda key: cache.workload(key) is not None, interval=mk.gc_interval)
        external.on_object(multikueue.object_changed)
        listeners.append(_awaitable(multikueue.workload_changed))
    fencing = OriginFencing(kube, events) if settings.role != MANAGER else None
    return Controller(
        settings=settings,
        kube=kube,
        cache=cache,
        events=events,
        writer=writer,
        integrations=integrations,
        scheduling=SchedulingLoop(cache, writer, QueueStatusWriter(kube, cache, events=events), fair_sharing_of(settings.config)),
        lifecycle=LifecycleController(
            cache, writer, listeners, releaser_of=releaser_of(jobs, external), release_grace=settings.outside_release_grace
        ),
        jobs=jobs,
        external=external,
        frameworks=frameworks,
        multikueue=multikueue,
        clusters=clusters,
        gc=gc,
        fencing=fencing,
    )


def releaser_of(jobs: JobReconciler, external: ExternalReconciler) -> Callable[[Workload], Releaser]:
    """Who releases a preempted Workload: its Job's integration (after stopping the Job), at once for an external
    kind's object (nothing of it runs here to stop), else an outside controller (the lifecycle after a grace)."""

    def releaser(wl: Workload) -> Releaser:
        if jobs.releases(wl):
            return Releaser.JOB
        if external.object_of(wl) is not None:
            return Releaser.AT_ONCE
        return Releaser.OUTSIDE

    return releaser


def _awaitable(callback: Callable[[Workload], None]) -> Listener:
    async def listener(wl: Workload) -> None:
        callback(wl)

    return listener
