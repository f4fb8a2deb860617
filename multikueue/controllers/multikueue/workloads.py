"""The MultiKueue admission check on the manager: the I/O around :mod:`dispatch`.

- MultiKueueCluster objects become :class:`RemoteCluster` connections; their
  ``Active`` condition mirrors the connection.
- MultiKueue AdmissionChecks get ``Active`` from their config and clusters.
- Every local Workload carrying a MultiKueue check is reconciled when it
  changes, when its remote copies or jobs change, and when a worker connects
  or disconnects: the pure :func:`dispatch.decide` says what to do, this
  module does it (one lock per Workload, so two events never race).
- A periodic GC deletes remote objects of this origin whose local Workload is
  gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import kopf
import structlog
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from multikueue.integrations.base import Adapter, SyncLater
from multikueue.integrations.batchjob.adapter import BatchJobAdapter
from multikueue.integrations.external.adapter import GenericAdapter
from multikueue.controllers.multikueue import dispatch
from multikueue.controllers.multikueue.checks import ClusterHealth, check_status, config_name
from multikueue.controllers.multikueue.gc import find_orphans
from multikueue.controllers.multikueue.connection import RemoteCluster
from multikueue.controllers.multikueue.remote_workload import remote_workload_copy
from multikueue.api import AdmissionCheck, MultiKueueCluster, MultiKueueConfig, Workload
from multikueue.api.constants import ACTIVE, GROUP, VERSION, ConditionStatus, Labels, MultiKueue
from multikueue.api.meta import Condition, find_condition
from multikueue.core import lifecycle
from multikueue.runtime import metrics
from multikueue.api.resources import ADMISSION_CHECKS, MULTIKUEUE_CLUSTERS, WORKLOADS
from multikueue.runtime.writer import workload_ref

if TYPE_CHECKING:
    from multikueue.operator.scheduling import ControllerState

log = structlog.get_logger(__name__)

WorkloadKey = tuple[str, str]
#: How soon to retry a status copy that had to wait (the manager's job not started yet).
SYNC_RETRY_SECONDS = 1.0


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class MultiKueueController:
    def __init__(self, state: "ControllerState") -> None:
        self.state = state
        settings = state.config.multi_kueue
        self.origin = settings.origin
        self.gc_interval = settings.gc_interval
        self.worker_lost_timeout = settings.worker_lost_timeout
        self.dispatcher = settings.dispatcher_name
        self.adapters: dict[tuple[str, str], Adapter] = {}
        for adapter in (BatchJobAdapter(),):
            self.adapters[(adapter.api_version, adapter.kind)] = adapter
        self.clusters: dict[str, RemoteCluster] = {}
        self.cluster_specs: dict[str, MultiKueueCluster] = {}
        self.configs: dict[str, MultiKueueConfig] = {}
        self.checks: dict[str, AdmissionCheck] = {}
        self._locks: dict[WorkloadKey, asyncio.Lock] = {}
        self._timers: dict[WorkloadKey, asyncio.TimerHandle] = {}
        self._status_written: dict[tuple[str, str], tuple[bool, str, str]] = {}
        self._failures: dict[WorkloadKey, int] = {}
        #: External objects (apiVersion, kind, namespace, name) -> the Workload they own.
        self.owned: dict[tuple[str, str, str, str], WorkloadKey] = {}
        self._owner_of: dict[WorkloadKey, tuple[str, str, str, str]] = {}

    # -- registration ---------------------------------------------------------

    def register(self, registry: kopf.OperatorRegistry) -> None:
        @kopf.on.event(GROUP, VERSION, "multikueueclusters", registry=registry, id="multikueue_clusters")
        async def on_cluster(event: kopf.RawEvent, **_: Any) -> None:
            obj = event["object"]
            name = obj["metadata"]["name"]
            if event.get("type") == "DELETED":
                self.cluster_specs.pop(name, None)
                await self._stop_cluster(name)
                self._refresh_checks()
                return
            try:
                spec = MultiKueueCluster.from_k8s(obj)
            except (ValidationError, ValueError) as exc:
                log.warning("MultiKueueCluster ignored: it does not parse", cluster=name, error=str(exc).splitlines()[0])
                return
            previous = self.cluster_specs.get(name)
            self.cluster_specs[name] = spec
            if previous is None or previous.spec != spec.spec or name not in self.clusters:
                await self._stop_cluster(name)
                self._start_cluster(spec)

        @kopf.on.event(GROUP, VERSION, "multikueueconfigs", registry=registry, id="multikueue_configs")
        async def on_config(event: kopf.RawEvent, **_: Any) -> None:
            obj = event["object"]
            name = obj["metadata"]["name"]
            if event.get("type") == "DELETED":
                self.configs.pop(name, None)
            else:
                try:
                    self.configs[name] = MultiKueueConfig.from_k8s(obj)
                except (ValidationError, ValueError):
                    self.configs.pop(name, None)
            self._refresh_checks()
            self._reconcile_all()

        @kopf.on.event(GROUP, VERSION, "admissionchecks", registry=registry, id="multikueue_checks")
        async def on_check(event: kopf.RawEvent, **_: Any) -> None:
            obj = event["object"]
            name = obj["metadata"]["name"]
            if event.get("type") == "DELETED":
                self.checks.pop(name, None)
                return
            try:
                check = AdmissionCheck.from_k8s(obj)
            except (ValidationError, ValueError):
                return
            if check.spec.controller_name != MultiKueue.CONTROLLER_NAME:
                self.checks.pop(name, None)
                return
            previous = self.checks.get(name)
            self.checks[name] = check
            if previous is None or previous.spec != check.spec:
                self._reconcile_all()
            await self._write_check_status(check)

        @kopf.daemon(
            "",
            "v1",
            "namespaces",
            registry=registry,
            id="multikueue_gc",
            when=lambda name, **_: name == self.state.namespace,
            cancellation_timeout=10,
        )
        async def garbage_collector(stopped: kopf.DaemonStopped, **_: Any) -> None:
            while not stopped:
                await asyncio.sleep(min(5.0, self.gc_interval.total_seconds()))
                await self.collect_garbage()
                await stopped.wait(max(0.0, self.gc_interval.total_seconds() - 5.0))

    # -- clusters --------------------------------------------------------------

    def _start_cluster(self, spec: MultiKueueCluster) -> None:
        remote = RemoteCluster(
            name=spec.name,
            spec=spec,
            origin=self.origin,
            namespace=self.state.namespace,
            manager=self.state.kube,
            job_refs=self._job_refs(),
            on_change=self._on_remote_change,
            on_state=self._on_remote_state,
        )
        self.clusters[spec.name] = remote
        remote.start()

    def all_adapters(self) -> list[Adapter]:
        """Built-in adapters, then those of the external frameworks configured now."""
        return [*self.adapters.values(), *self.state.frameworks.adapters()]

    def _job_refs(self) -> list[Any]:
        return [a.ref for a in self.all_adapters()]

    def frameworks_changed(self) -> None:
        """The external frameworks changed: watch their kinds on the workers and re-plan."""
        refs = self._job_refs()
        for remote in self.clusters.values():
            remote.set_job_refs(refs)
        self._reconcile_all()

    async def _stop_cluster(self, name: str) -> None:
        remote = self.clusters.pop(name, None)
        if remote is not None:
            await remote.stop()

    def _on_remote_state(self, remote: RemoteCluster) -> None:
        asyncio.create_task(self._write_cluster_status(remote))
        self._refresh_checks()
        self._reconcile_all()

    def _on_remote_change(self, remote: RemoteCluster, kind: str, obj: dict[str, Any] | None) -> None:
        if obj is None:
            return
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace", "")
        name = meta.get("name", "") if kind == "workload" else (meta.get("labels") or {}).get(Labels.PREBUILT_WORKLOAD_NAME)
        if name:
            self.schedule((namespace, name))

    async def _write_active(
        self, ref: Any, name: str, active: bool, reason: str, message: str, since: datetime | None = None
    ) -> None:
        """Write the object's ``Active`` condition unless this process already wrote the same one."""
        key = (ref.plural, name)
        wanted = (active, reason, message)
        if self._status_written.get(key) == wanted:
            return
        condition = Condition(
            type=ACTIVE,
            status=ConditionStatus.TRUE if active else ConditionStatus.FALSE,
            reason=reason,
            message=message,
            last_transition_time=since or utcnow(),
        )
        try:
            await self.state.kube.patch(ref, None, name, {"status": {"conditions": [condition.to_dict()]}}, status=True)
            self._status_written[key] = wanted
        except ApiException as exc:
            if exc.status != 404:
                log.warning("Active condition not written", kind=ref.plural, name=name, status=exc.status)

    async def _write_cluster_status(self, remote: RemoteCluster) -> None:
        state = remote.state
        since = None if state.active else state.inactive_since
        await self._write_active(MULTIKUEUE_CLUSTERS, remote.name, state.active, state.reason, state.message, since)

    def _health(self) -> dict[str, ClusterHealth]:
        return {
            name: ClusterHealth(remote.state.active, remote.state.reason, remote.state.message)
            for name, remote in self.clusters.items()
        }

    def _refresh_checks(self) -> None:
        for check in list(self.checks.values()):
            asyncio.create_task(self._write_check_status(check))

    async def _write_check_status(self, check: AdmissionCheck) -> None:
        status = check_status(check, self.configs, self._health())
        current = find_condition(check.status.conditions, ACTIVE)
        if current is not None and (current.status == ConditionStatus.TRUE, current.reason, current.message) == (
            status.active,
            status.reason,
            status.message,
        ):
            self._status_written[(ADMISSION_CHECKS.plural, check.name)] = (status.active, status.reason, status.message)
            return
        await self._write_active(ADMISSION_CHECKS, check.name, status.active, status.reason, status.message)

    # -- workloads ---------------------------------------------------------------

    def mk_check_of(self, wl: Workload) -> str | None:
        for state in wl.status.admission_checks or [] if wl.status else []:
            if state.name in self.checks:
                return state.name
        return None

    def schedule(self, key: WorkloadKey, delay: float = 0.0) -> None:
        """Reconcile ``key`` soon (coalescing repeated requests)."""
        if delay <= 0:
            asyncio.create_task(self.reconcile(key))
            return
        loop = asyncio.get_running_loop()
        previous = self._timers.pop(key, None)
        if previous is not None:
            previous.cancel()
        self._timers[key] = loop.call_later(delay, lambda: asyncio.create_task(self.reconcile(key)))

    def _reconcile_all(self) -> None:
        for key, wl in list(self.state.cache.workloads_items()):
            if self.mk_check_of(wl) is not None or (wl.status and (wl.status.cluster_name or wl.status.nominated_cluster_names)):
                self.schedule(key)

    async def on_workload(self, wl: Workload) -> None:
        if self.mk_check_of(wl) is not None:
            await self.reconcile((wl.namespace or "", wl.name))

    def _owner(self, wl: Workload) -> tuple[Adapter | None, Mapping[str, Any] | None, str | None]:
        """The adapter and the owner object of ``wl``, or why there is none."""
        owners = [r for r in wl.metadata.owner_references or [] if r.controller]
        if not owners:
            return None, None, "The workload has no owner job to dispatch"
        ref = owners[0]
        adapter: Adapter | None = self.adapters.get((ref.api_version, ref.kind))
        if adapter is None:
            adapter = self.state.frameworks.adapter_for(ref.api_version, ref.kind)
        if adapter is None:
            return None, None, f'No multikueue adapter found for owner kind "{ref.kind}.{ref.api_version}"'
        if isinstance(adapter, BatchJobAdapter):
            owner = self.state.jobs.jobs.get((wl.namespace or "", ref.name))
        else:
            # Remember whose Workload this is: the object's events (status, late arrival) re-plan it.
            owner_key = (ref.api_version, ref.kind, wl.namespace or "", ref.name)
            self.owned[owner_key] = (wl.namespace or "", wl.name)
            self._owner_of[(wl.namespace or "", wl.name)] = owner_key
            owner = self.state.frameworks.get(ref.api_version, ref.kind, wl.namespace or "", ref.name)
        if owner is None:
            return adapter, None, None
        if not adapter.managed_by_multikueue(owner):
            if isinstance(adapter, GenericAdapter):
                path = adapter.framework.managed_by
                where, managed = path.canonical, path.get(owner)
            else:
                where, managed = "spec.managedBy", (owner.get("spec") or {}).get("managedBy")
            return (
                adapter,
                owner,
                f"The owner is not managed by Kueue: {ref.kind} {wl.namespace}/{ref.name} has {where} "
                f"{managed!r}, not {MultiKueue.MANAGED_BY!r}",
            )
        return adapter, owner, None

    def _context(self, check: str, adapter_problem: str | None) -> dispatch.DispatchContext | None:
        ac = self.checks.get(check)
        config = self.configs.get(config_name(ac) or "") if ac is not None else None
        members = tuple(config.spec.clusters or ()) if config is not None else ()
        views = {}
        for name in members:
            remote = self.clusters.get(name)
            if remote is None:
                continue
            views[name] = dispatch.ClusterView(
                name=name,
                active=remote.state.active,
                inactive_since=remote.state.inactive_since,
                workload=None,  # filled per workload
                job_exists=False,
            )
        return dispatch.DispatchContext(
            check_name=check,
            clusters=members,
            views=views,
            dispatcher=self.dispatcher,
            worker_lost_timeout=self.worker_lost_timeout,
            origin=self.origin,
            now=utcnow(),
            adapter_problem=adapter_problem,
        )

    async def reconcile(self, key: WorkloadKey) -> None:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            try:
                await self._reconcile(key)
                self._failures.pop(key, None)
            except ApiException as exc:
                failures = self._failures[key] = self._failures.get(key, 0) + 1
                if exc.status not in (404, 409):
                    log.error(
                        "multikueue reconcile failed",
                        workload=f"{key[0]}/{key[1]}",
                        status=exc.status,
                        error=_api_message(exc),
                        retry_in=min(30, 2**failures),
                    )
                self.schedule(key, delay=0.2 if exc.status == 409 else min(30.0, 2.0**failures))
        if not lock.locked() and self.state.cache.workload(key) is None:
            self._locks.pop(key, None)

    async def _reconcile(self, key: WorkloadKey) -> None:
        wl = self.state.cache.workload(key)
        if wl is None:
            owner_key = self._owner_of.pop(key, None)
            if owner_key is not None and self.owned.get(owner_key) == key:
                del self.owned[owner_key]
            return
        check = self.mk_check_of(wl)
        if check is None:
            return
        adapter, owner, problem = self._owner(wl)
        ctx = self._context(check, problem)
        if ctx is None:
            return
        job_name = owner["metadata"]["name"] if owner else None
        views = {}
        for name, view in ctx.views.items():
            remote = self.clusters[name]
            job_exists = bool(
                adapter is not None and job_name and (adapter.ref.plural, (key[0], job_name)) in remote.jobs
            )
            views[name] = dispatch.ClusterView(
                name=name,
                active=view.active,
                inactive_since=view.inactive_since,
                workload=remote.workloads.get(key),
                job_exists=job_exists,
            )
        ctx = dispatch.DispatchContext(**{**ctx.__dict__, "views": views})
        plan = dispatch.decide(wl, ctx)
        if plan.actions:
            await self._apply(wl, plan, check, adapter, owner)
        if plan.requeue_after is not None:
            self.schedule(key, delay=max(0.5, plan.requeue_after.total_seconds()))

    # -- applying a plan -------------------------------------------------------------

    async def _apply(
        self, wl: Workload, plan: dispatch.Plan, plan_check: str, adapter: Adapter | None, owner: Mapping[str, Any] | None
    ) -> None:
        """Write the local status first, then act on the workers.

        The local status (clusterName, nominated clusters, the check's state)
        is the commit point: it is written with the resourceVersion the plan
        was made on, so a plan made on a stale copy fails here (409) before it
        touches any worker, and once a winner is recorded every later decision
        sees it, even after a restart.
        """
        status: dict[str, Any] = {}
        checks = [c.model_copy() for c in (wl.status.admission_checks or [])] if wl.status else []
        events: list[tuple[str, str, str]] = []
        remote_actions: list[Any] = []
        for action in plan.actions:
            if isinstance(action, dispatch.SetCheckState):
                self._set_check(checks, plan_check, action)
                status["admissionChecks"] = [c.to_dict() for c in checks]
                kind = "Warning" if action.state in ("Rejected", "Retry") else "Normal"
                events.append((kind, f"MultiKueue{action.state}", action.message))
            elif isinstance(action, dispatch.SetNominatedClusters):
                status["nominatedClusterNames"] = list(action.names) or None
            elif isinstance(action, dispatch.SetClusterName):
                status["clusterName"] = action.name
            else:
                remote_actions.append(action)
        admitted = self._admitted_with(wl, checks, status, events)
        if status:
            wl = await self._write_status(wl, status)
            for kind, reason, message in events:
                self._event(wl, kind, reason, message)
            if admitted:
                cq = wl.status.admission.cluster_queue if wl.status and wl.status.admission else ""
                metrics.ADMITTED_WORKLOADS.labels(cq or "").inc()
        if remote_actions and all(isinstance(a, _INDEPENDENT_ACTIONS) for a in remote_actions):
            # Workers are independent: act on them at once (in plan order on each one), so
            # the second copy is not a round trip behind the first and no worker gets a head start.
            by_cluster: dict[str, list[Any]] = {}
            for action in remote_actions:
                by_cluster.setdefault(action.cluster, []).append(action)
            results = await asyncio.gather(
                *(self._run_remote(wl, plan_check, actions, adapter, owner) for actions in by_cluster.values()),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            return
        await self._run_remote(wl, plan_check, remote_actions, adapter, owner)

    async def _run_remote(
        self, wl: Workload, plan_check: str, actions: list[Any], adapter: Adapter | None, owner: Mapping[str, Any] | None
    ) -> None:
        """Carry out worker-side actions in order; stop at the first that says so."""
        current: Workload | None = wl
        for action in actions:
            remote = self.clusters.get(action.cluster)
            if remote is None or remote.kube is None or current is None:
                return
            try:
                current = await self._remote_action(current, action, remote, adapter, owner)
            except ApiException as exc:
                if exc.status in (403, 404, 422):
                    # A missing namespace, CRD or permission on the worker: say so where the user looks.
                    await self._report(current, plan_check, f"Worker {remote.name!r}: {type(action).__name__} failed: {_api_message(exc)}")
                raise

    @staticmethod
    def _admitted_with(
        wl: Workload, checks: list[Any], status: dict[str, Any], events: list[tuple[str, str, str]]
    ) -> bool:
        """Fold the ``Admitted`` transition into this write when the new check states complete it.

        The lifecycle handler would write it one watch round trip later; doing
        it here saves a write and that delay on every dispatch. Only when no
        finalizer is missing (that write stays with the lifecycle handler).
        """
        if "admissionChecks" not in status or wl.status is None:
            return False
        preview = wl.model_copy(update={"status": wl.status.model_copy(update={"admission_checks": checks})})
        update = lifecycle.next_update(preview, utcnow())
        if update is None or update.transition != "admitted" or update.add_finalizer or update.status is None:
            return False
        status.update(update.status)
        events += [(e.type, e.reason, e.message) for e in update.events]
        return True

    async def _report(self, wl: Workload, check: str, message: str) -> None:
        """Put ``message`` on the check (state unchanged) unless it already says so."""
        current = next((c for c in (wl.status.admission_checks or []) if c.name == check), None) if wl.status else None
        if current is None or current.message == message:
            return
        checks = [c.model_copy(update={"message": message}) if c.name == check else c for c in wl.status.admission_checks or []]
        try:
            await self._write_status(wl, {"admissionChecks": [c.to_dict() for c in checks]})
            self._event(wl, "Warning", "MultiKueueWorkerError", message)
        except ApiException:
            pass

    async def _remote_action(
        self, wl: Workload, action: Any, remote: RemoteCluster, adapter: Adapter | None, owner: Mapping[str, Any] | None
    ) -> Workload | None:
        """Carry out one worker-side action; None stops the plan here."""
        assert remote.kube is not None
        namespace, name = wl.namespace or "", wl.name
        if isinstance(action, dispatch.CreateRemoteWorkload):
            await _create(remote, WORKLOADS, namespace, remote_workload_copy(wl, origin=self.origin))
            log.info("remote workload created", workload=f"{namespace}/{name}", cluster=remote.name)
        elif isinstance(action, dispatch.DeleteRemoteWorkload):
            await remote.kube.delete(WORKLOADS, namespace, name)
            log.info("remote workload deleted", workload=f"{namespace}/{name}", cluster=remote.name)
        elif isinstance(action, dispatch.CreateRemoteJob):
            if adapter is None or owner is None:
                return None
            body = adapter.remote_copy(owner, origin=self.origin, workload_name=name)
            await _create(remote, adapter.ref, namespace, body)
            # The Ready event of the same dispatch already names the worker: a log line, not a second Event.
            log.info("remote job created", workload=f"{namespace}/{name}", cluster=remote.name, kind=adapter.kind, reason="MultiKueueDispatched")
        elif isinstance(action, dispatch.DeleteRemoteJob):
            if adapter is None or owner is None:
                return wl
            job = remote.jobs.get((adapter.ref.plural, (namespace, owner["metadata"]["name"])))
            if job is not None and (job["metadata"].get("labels") or {}).get(Labels.MULTIKUEUE_ORIGIN) == self.origin:
                await remote.kube.delete(adapter.ref, namespace, job["metadata"]["name"])
        elif isinstance(action, dispatch.SyncJobStatus):
            if not await self._sync_job(remote, adapter, owner):
                self.schedule((namespace, name), delay=SYNC_RETRY_SECONDS)
        elif isinstance(action, dispatch.FinishLocal):
            # The final status must reach the manager's object before its Workload finishes.
            if not await self._sync_job(remote, adapter, owner, final=True):
                self.schedule((namespace, name), delay=SYNC_RETRY_SECONDS)
                return None
            wl = await self._finish(wl, action)
        return wl

    @staticmethod
    def _set_check(checks: list[Any], name: str, action: dispatch.SetCheckState) -> None:
        """Update check ``name``; its transition time moves only when the state changes."""
        for index, current in enumerate(checks):
            if current.name == name:
                checks[index] = current.model_copy(
                    update={
                        "state": action.state,
                        "message": action.message,
                        "last_transition_time": utcnow() if current.state != action.state else current.last_transition_time,
                    }
                )
                return

    async def _write_status(self, wl: Workload, status: dict[str, Any]) -> Workload:
        patch = {"metadata": {"resourceVersion": wl.metadata.resource_version}, "status": status}
        result = await self.state.kube.patch(WORKLOADS, wl.namespace, wl.name, patch, status=True)
        updated = Workload.from_k8s(result)
        # Decide on what was just written, not on the cache's older copy; the watch
        # event carrying the same resourceVersion changes nothing.
        self.state.cache.upsert_workload(updated)
        return updated

    async def _sync_job(
        self, remote: RemoteCluster, adapter: Adapter | None, owner: Mapping[str, Any] | None, *, final: bool = False
    ) -> bool:
        """Copy the worker job's status to the manager's; False when it has to wait."""
        if adapter is None or owner is None:
            return True
        meta = owner["metadata"]
        remote_job = remote.jobs.get((adapter.ref.plural, (meta["namespace"], meta["name"])))
        if remote_job is None:
            # Unknown because this kind is not watched there yet (a new CRD, missing RBAC): the
            # final status would be lost, so wait. Truly gone: nothing left to copy.
            return not final or adapter.ref.plural in remote.watched
        if final and adapter.tells_finished and not adapter.is_finished(remote_job):
            return False  # the job's own final event is still on its way
        try:
            patch = adapter.status_patch(owner, remote_job)
        except SyncLater:
            return False
        if patch is not None:
            await self.state.kube.patch(adapter.ref, meta["namespace"], meta["name"], patch, status=True)
        return True

    async def _finish(self, wl: Workload, action: dispatch.FinishLocal) -> Workload:
        condition = Condition(
            type="Finished", status=ConditionStatus.TRUE, reason=action.reason, message=action.message, last_transition_time=utcnow()
        )
        updated = await self._write_status(wl, lifecycle.finished_status(wl, condition.to_dict()))
        self._event(wl, "Normal", "MultiKueueFinished", f"finished on worker {action.cluster}: {action.reason}: {action.message}")
        return updated

    def _event(self, wl: Workload, type_: str, reason: str, message: str) -> None:
        self.state.events.record(workload_ref(wl), type_, reason, message)
        log.info("multikueue", workload=f"{wl.namespace}/{wl.name}", reason=reason, message=message)

    # -- GC ------------------------------------------------------------------------------

    async def collect_garbage(self) -> None:
        for remote in list(self.clusters.values()):
            if not remote.state.active or remote.kube is None:
                continue
            jobs = [(plural, key, obj) for (plural, key), obj in remote.jobs.items()]
            orphans = find_orphans(remote.workloads, jobs, lambda key: self.state.cache.workload(key) is not None)
            refs = {a.ref.plural: a.ref for a in self.all_adapters()}
            try:
                for plural, namespace, name in orphans.jobs:
                    await remote.kube.delete(refs[plural], namespace, name)
                    log.info("gc: remote job deleted", cluster=remote.name, job=f"{namespace}/{name}")
                for namespace, name in orphans.workloads:
                    await remote.kube.delete(WORKLOADS, namespace, name)
                    log.info("gc: remote workload deleted", cluster=remote.name, workload=f"{namespace}/{name}")
            except ApiException as exc:
                log.warning("gc pass incomplete", cluster=remote.name, status=exc.status, error=exc.reason)
            except Exception as exc:  # noqa: BLE001 - the worker may vanish mid-pass; the next pass retries
                log.warning("gc pass incomplete", cluster=remote.name, error=str(exc)[:200])

    async def stop(self) -> None:
        for name in list(self.clusters):
            await self._stop_cluster(name)


#: Worker-side actions that touch only their own worker (not the local Workload): safe to run side by side.
_INDEPENDENT_ACTIONS = (
    dispatch.CreateRemoteWorkload,
    dispatch.DeleteRemoteWorkload,
    dispatch.CreateRemoteJob,
    dispatch.DeleteRemoteJob,
)


def _api_message(exc: ApiException) -> str:
    """The API server's own message (what the user can act on), else the HTTP reason."""
    try:
        import json

        return str(json.loads(exc.body or "{}").get("message") or exc.reason)[:500]
    except ValueError:
        return str(exc.reason)


async def _create(remote: RemoteCluster, ref: Any, namespace: str, body: dict[str, Any]) -> None:
    assert remote.kube is not None
    try:
        await remote.kube.create(ref, namespace, body)
    except ApiException as exc:
        if exc.status != 409:
            raise

