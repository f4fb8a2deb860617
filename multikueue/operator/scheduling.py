"""The controller process: kopf watches feeding the core, and the loops that act.

How the pieces meet:

- **Feeds.** A kopf *indexer* per kind parses each object into its pydantic
  model and puts it into the core :class:`~multikueue.core.cache.Cache`. kopf
  runs indexers for the whole initial listing of every indexed kind before
  it runs any other handler or daemon, so whatever acts later starts from a
  complete picture (a restart never admits against half-known usage).
  Deletions arrive through ``on.event`` handlers (indexers do not see them).
- **Scheduling.** A kopf *daemon* on the controller's own Namespace runs the
  scheduling loop: on every change it asks the pure scheduler for decisions
  and writes them. Being a daemon, it starts only once the cache is complete
  and is stopped by kopf when peering hands leadership to another replica.
- **Workload lifecycle.** An ``on.event`` handler per Workload applies the
  pure transitions of :mod:`multikueue.core.lifecycle` (Admitted, Retry,
  Rejected, finalizer release).
- **Queue status.** The same loop writes ClusterQueue/LocalQueue status when
  the counters or the ``Active`` condition changed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import kopf
import structlog
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError
from pydantic import ValidationError

from multikueue.api import (
    AdmissionCheck,
    ClusterQueue,
    Cohort,
    KueueObject,
    LocalQueue,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
)
from multikueue.api.constants import GROUP, VERSION, MultiKueue
from multikueue.api.configuration import DEFAULT_CONFIG_MAP, Configuration
from multikueue.core import lifecycle
from multikueue.core.cache import Cache
from multikueue.core.scheduler import schedule
from multikueue.controllers.multikueue.workloads import MultiKueueController
from multikueue.integrations.batchjob.reconciler import JobReconciler
from multikueue.runtime import metrics
from multikueue.runtime.events import EventRecorder
from multikueue.integrations.external.reconciler import Frameworks
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.queue_status import QueueStatusWriter
from multikueue.runtime.writer import WorkloadWriter, workload_ref

log = structlog.get_logger(__name__)

#: The finalizer kopf puts on the controller Namespace to run the scheduling daemon.
DAEMON_FINALIZER = "multikueue.x-k8s.io/controller"
#: Coalesce bursts of events into one scheduling cycle.
CYCLE_COALESCE_SECONDS = 0.005
#: Bound on concurrent admission writes.
WRITE_CONCURRENCY = 32
#: Bound on concurrent "why it waits" writes: informative, so they yield to admissions.
PENDING_WRITE_CONCURRENCY = 4


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class ControllerState:
    """Everything one controller process holds."""

    role: str
    namespace: str
    config: Configuration
    kube: AsyncKube
    events: EventRecorder
    config_map: str = DEFAULT_CONFIG_MAP
    cache: Cache = field(default_factory=Cache)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    cycles: int = 0

    def __post_init__(self) -> None:
        self.writer = WorkloadWriter(self.kube, self.events)
        self.queue_status = QueueStatusWriter(self.kube, self.cache)
        self.jobs = JobReconciler(self)
        self.frameworks = Frameworks(self, self.config_map)
        self.multikueue = MultiKueueController(self) if self.role == "manager" else None
        if self.multikueue is not None:
            self.frameworks.on_change = self.multikueue.frameworks_changed

    def notify(self) -> None:
        self.wake.set()

    def queue_has_multikueue_check(self, namespace: str, queue: str) -> bool | None:
        """Whether the LocalQueue leads to a ClusterQueue with a MultiKueue check; None if unknown."""
        local = self.cache.local_queue(namespace, queue)
        if local is None or not local.spec.cluster_queue:
            return None
        state = self.cache.cluster_queue_state(local.spec.cluster_queue)
        if state is None:
            return None
        return any(
            self.cache.admission_check_controller(name) == MultiKueue.CONTROLLER_NAME
            for name in state.admission_checks_for(f.name for g in state.spec.resource_groups or [] for f in g.flavors)
        )


def _parse(model: type[KueueObject], body: Mapping[str, Any]) -> KueueObject | None:
    try:
        return model.from_k8s(dict(body))
    except (ValidationError, ValueError) as exc:
        meta = body.get("metadata", {})
        log.warning(
            "object ignored: it does not parse",
            kind=model.kind,
            object=f"{meta.get('namespace') or ''}/{meta.get('name')}".lstrip("/"),
            error=str(exc).splitlines()[0],
        )
        return None


def _feed(
    registry: kopf.OperatorRegistry,
    state: ControllerState,
    model: type[KueueObject],
    upsert: Callable[[Any], None],
    delete: Callable[[Mapping[str, Any]], None],
    then: Callable[[Mapping[str, Any]], Awaitable[None]] | None = None,
) -> None:
    """Keep the cache's copy of ``model`` objects current.

    ``then`` runs after every non-deletion event, once the cache holds the
    new state; one handler per kind keeps kopf's per-event overhead low.
    """

    async def index(body: kopf.Body, **_: Any) -> None:
        obj = _parse(model, body)
        if obj is not None:
            upsert(obj)
            state.notify()

    async def forget(event: kopf.RawEvent, **_: Any) -> None:
        if event.get("type") == "DELETED":
            delete(event["object"]["metadata"])
            state.notify()
        elif then is not None:
            await then(event["object"]["metadata"])

    kopf.index(GROUP, VERSION, model.plural, registry=registry, id=f"feed_{model.plural}")(index)
    kopf.on.event(GROUP, VERSION, model.plural, registry=registry, id=f"forget_{model.plural}")(forget)


def build_registry(state: ControllerState) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    cache = state.cache
    _feed(registry, state, ResourceFlavor, cache.upsert_flavor, lambda m: cache.delete_flavor(m["name"]))
    _feed(registry, state, ClusterQueue, cache.upsert_cluster_queue, lambda m: cache.delete_cluster_queue(m["name"]))
    _feed(registry, state, Cohort, cache.upsert_cohort, lambda m: cache.delete_cohort(m["name"]))
    _feed(
        registry, state, LocalQueue, cache.upsert_local_queue, lambda m: cache.delete_local_queue(m["namespace"], m["name"])
    )
    _feed(
        registry,
        state,
        WorkloadPriorityClass,
        cache.upsert_priority_class,
        lambda m: cache.delete_priority_class(m["name"]),
    )
    _feed(
        registry, state, AdmissionCheck, cache.upsert_admission_check, lambda m: cache.delete_admission_check(m["name"])
    )
    _feed(
        registry,
        state,
        Workload,
        cache.upsert_workload,
        lambda m: workload_deleted(state, (m["namespace"], m["name"])),
        then=lambda m: workload_changed(state, (m["namespace"], m["name"])),
    )

    @kopf.index("", "v1", "namespaces", registry=registry, id="feed_namespaces")
    async def index_namespace(name: str, labels: Mapping[str, str], **_: Any) -> None:
        cache.upsert_namespace(name, dict(labels))
        state.notify()

    @kopf.on.event("", "v1", "namespaces", registry=registry, id="forget_namespaces")
    async def forget_namespace(event: kopf.RawEvent, name: str, **_: Any) -> None:
        if event.get("type") == "DELETED":
            cache.delete_namespace(name)
            state.notify()

    state.jobs.register(registry)

    @kopf.on.event(
        "",
        "v1",
        "configmaps",
        registry=registry,
        id="configuration",
        when=lambda name, namespace, **_: name == state.config_map and namespace == state.namespace,
    )
    async def configuration_changed(event: kopf.RawEvent, **_: Any) -> None:
        # Only the external frameworks are reloaded; other settings need a restart (logged at start).
        if event.get("type") == "DELETED":
            await state.frameworks.load([])
        else:
            await state.frameworks.reload_from_configmap(event["object"])

    if state.multikueue is not None:
        state.multikueue.register(registry)

    @kopf.daemon(
        "",
        "v1",
        "namespaces",
        registry=registry,
        id="scheduling_loop",
        when=lambda name, **_: name == state.namespace,
        cancellation_timeout=10,
    )
    async def scheduling_loop(stopped: kopf.DaemonStopped, **_: Any) -> None:
        log.info("scheduling loop started", namespace=state.namespace)
        await run_scheduling(state, stopped)
        log.info("scheduling loop stopped")

    return registry


def workload_deleted(state: ControllerState, key: tuple[str, str]) -> None:
    """Forget the Workload; the MultiKueue controller drops what it kept for it."""
    state.cache.delete_workload(key)
    if state.multikueue is not None:
        state.multikueue.schedule(key)


async def workload_changed(state: ControllerState, key: tuple[str, str]) -> None:
    """Apply the Workload's next lifecycle transition and reconcile its Job."""
    wl = state.cache.workload(key)
    if wl is None:
        return
    update = lifecycle.next_update(wl, utcnow())
    if update is not None:
        await state.writer.apply(wl, update, utcnow())
    await state.jobs.on_workload(wl)
    await state.frameworks.on_workload(wl)
    if state.multikueue is not None:
        await state.multikueue.on_workload(wl)


async def _admit(state: ControllerState, decision: Any, gate: asyncio.Semaphore) -> None:
    async with gate:
        wl = state.cache.workload(decision.key)
        if wl is None:
            state.cache.forget(decision.key)
            return
        status = lifecycle.reservation_status(wl, decision.admission, list(decision.admission_checks), utcnow())
        try:
            written = await state.writer.reserve(wl, status)
        except ApiException as exc:
            log.error("reservation failed", workload=f"{wl.namespace}/{wl.name}", status=exc.status, error=exc.reason)
            written = False
        except HTTPError as exc:  # the API server is unreachable: drop the assumption, retry next cycle
            log.error("reservation failed: API server unreachable", workload=f"{wl.namespace}/{wl.name}", error=str(exc)[:200])
            written = False
        if not written:
            state.cache.forget(decision.key)
            state.notify()
            return
        metrics.QUOTA_RESERVED_WORKLOADS.labels(decision.cluster_queue).inc()
        if not decision.admission_checks:
            metrics.ADMITTED_WORKLOADS.labels(decision.cluster_queue).inc()
        if wl.metadata.creation_timestamp is not None:
            waited = (utcnow() - wl.metadata.creation_timestamp).total_seconds()
            metrics.ADMISSION_WAIT.labels(decision.cluster_queue).observe(max(0.0, waited))
        log.info(
            "quota reserved",
            workload=f"{wl.namespace}/{wl.name}",
            cluster_queue=decision.cluster_queue,
            checks=list(decision.admission_checks),
        )
        # One Event per admission: when no check is pending it also says the Workload is admitted
        # (upstream posts a second "Admitted" Event; the lifecycle handler does so when checks exist).
        admitted = "" if decision.admission_checks else "; admitted (no admission checks)"
        state.events.record(
            workload_ref(wl), "Normal", "QuotaReserved", f"Quota reserved in ClusterQueue {decision.cluster_queue}{admitted}"
        )


async def _pending(state: ControllerState, update: Any, gate: asyncio.Semaphore) -> None:
    async with gate:
        wl = state.cache.workload(update.key)
        if not lifecycle.may_report_pending(wl, assumed=state.cache.is_assumed(update.key)):
            return
        assert wl is not None
        status = lifecycle.pending_status(wl, update.reason, update.message, utcnow())
        try:
            await state.writer.pending(wl, status)
        except ApiException as exc:
            log.error("pending status not written", workload=f"{wl.namespace}/{wl.name}", status=exc.status)
        except HTTPError as exc:
            log.warning("pending status not written: API server unreachable", workload=f"{wl.namespace}/{wl.name}", error=str(exc)[:200])


async def run_scheduling(state: ControllerState, stopped: kopf.DaemonStopped) -> None:
    gate = asyncio.Semaphore(WRITE_CONCURRENCY)
    pending_gate = asyncio.Semaphore(PENDING_WRITE_CONCURRENCY)
    inflight: set[asyncio.Task[None]] = set()
    last_status = 0.0
    next_cycle_at: datetime | None = None
    state.notify()
    while not stopped:
        timeout = 1.0
        if next_cycle_at is not None:
            timeout = max(0.0, min(timeout, (next_cycle_at - utcnow()).total_seconds()))
        try:
            await asyncio.wait_for(state.wake.wait(), timeout=timeout)
        except asyncio.TimeoutError:
            pass
        if stopped:
            break
        await asyncio.sleep(CYCLE_COALESCE_SECONDS)
        state.wake.clear()
        with metrics.SCHEDULING_CYCLE.time():
            result = schedule(state.cache, utcnow())
        next_cycle_at = result.next_cycle_at
        state.cycles += 1
        for decision in result.admitted:
            task = asyncio.create_task(_admit(state, decision, gate))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        for update in result.pending:
            task = asyncio.create_task(_pending(state, update, pending_gate))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        if time.monotonic() - last_status > 0.5:
            last_status = time.monotonic()
            task = asyncio.create_task(state.queue_status.sync())
            inflight.add(task)
            task.add_done_callback(inflight.discard)
    for task in inflight:
        task.cancel()
