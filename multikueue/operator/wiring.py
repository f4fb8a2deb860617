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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import kopf

from multikueue.api import Workload
from multikueue.api.configuration import Configuration
from multikueue.controllers.lifecycle import LifecycleController, Listener
from multikueue.controllers.multikueue.apply import PlanApplier
from multikueue.controllers.multikueue.checks import queue_has_multikueue_check
from multikueue.controllers.multikueue.clusters import ClusterManager
from multikueue.controllers.multikueue.gc import GarbageCollector
from multikueue.controllers.multikueue.workloads import DispatchSettings, MultiKueueController
from multikueue.core.cache import Cache
from multikueue.integrations.base import Integration
from multikueue.integrations.batchjob import webhook as job_webhook
from multikueue.integrations.batchjob.adapter import BatchJobAdapter
from multikueue.integrations.batchjob.reconciler import JobReconciler
from multikueue.integrations.external.reconciler import ExternalReconciler
from multikueue.integrations.external.reload import FrameworkLoader
from multikueue.integrations.registry import IntegrationSet
from multikueue.operator.feeds import register_feeds
from multikueue.operator.scheduling import SchedulingLoop
from multikueue.runtime.events import EventRecorder
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.queue_status import QueueStatusWriter
from multikueue.runtime.writer import WorkloadWriter

MANAGER = "manager"


@dataclass(frozen=True)
class Settings:
    role: str
    namespace: str
    config_map: str
    config: Configuration
    webhooks: bool = False


@dataclass
class Controller:
    """Everything one controller process runs, built by :func:`build`."""

    settings: Settings
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

    def register(self, registry: kopf.OperatorRegistry) -> None:
        """Register every kopf handler and daemon of the parts built."""
        register_feeds(
            registry,
            self.cache,
            self.scheduling.notify,
            workload_changed=self.lifecycle.workload_changed,
            workload_deleted=self._workload_deleted,
        )
        self.jobs.register(registry)
        self.frameworks.register(registry)
        self.scheduling.register(registry, self.settings.namespace)
        if self.clusters is not None and self.gc is not None:
            self.clusters.register(registry)
            self.gc.register(registry)
        if self.settings.webhooks:
            job_webhook.register(registry, lambda ns, queue: queue_has_multikueue_check(self.cache, ns, queue))

    def _workload_deleted(self, key: tuple[str, str]) -> None:
        if self.multikueue is not None:
            self.multikueue.workload_deleted(key)

    def start(self) -> None:
        """Start the background parts (call on the running loop, from kopf's start-up)."""
        self.events.start()
        self.external.start()
        if self.multikueue is not None:
            self.multikueue.start()

    async def stop(self) -> None:
        if self.multikueue is not None:
            await self.multikueue.stop()
        if self.clusters is not None:
            await self.clusters.stop()
        await self.external.stop()
        await self.events.stop()


def build(kube: AsyncKube, events: EventRecorder, settings: Settings) -> Controller:
    cache = Cache()
    writer = WorkloadWriter(kube, events, on_written=cache.upsert_workload)
    jobs = JobReconciler(kube, cache, writer, events)
    integrations = IntegrationSet([Integration(BatchJobAdapter(), jobs)])
    external = ExternalReconciler(kube, cache, writer, events, integrations)
    frameworks = FrameworkLoader(kube, events, external, namespace=settings.namespace, config_map=settings.config_map)
    multikueue: MultiKueueController | None = None
    clusters: ClusterManager | None = None
    gc: GarbageCollector | None = None
    listeners: list[Listener] = [jobs.on_workload, external.on_workload]
    if settings.role == MANAGER:
        mk = settings.config.multi_kueue
        clusters = ClusterManager(kube, integrations, namespace=settings.namespace, origin=mk.origin)
        multikueue = MultiKueueController(
            cache,
            clusters,
            integrations,
            PlanApplier(kube, writer, origin=mk.origin),
            DispatchSettings(origin=mk.origin, dispatcher=mk.dispatcher_name, worker_lost_timeout=mk.worker_lost_timeout),
        )
        gc = GarbageCollector(
            clusters, lambda key: cache.workload(key) is not None, interval=mk.gc_interval, namespace=settings.namespace
        )
        external.on_object(multikueue.object_changed)
        listeners.append(_awaitable(multikueue.workload_changed))
    return Controller(
        settings=settings,
        cache=cache,
        events=events,
        writer=writer,
        integrations=integrations,
        scheduling=SchedulingLoop(cache, writer, QueueStatusWriter(kube, cache)),
        lifecycle=LifecycleController(cache, writer, listeners),
        jobs=jobs,
        external=external,
        frameworks=frameworks,
        multikueue=multikueue,
        clusters=clusters,
        gc=gc,
    )


def _awaitable(callback: Callable[[Workload], None]) -> Listener:
    async def listener(wl: Workload) -> None:
        callback(wl)

    return listener
