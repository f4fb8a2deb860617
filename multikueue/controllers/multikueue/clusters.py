"""Workers as the manager sees them: connections, and the ``Active`` conditions that report them.

- Each MultiKueueCluster becomes a :class:`~.connection.RemoteCluster`
  (kubeconfig from a Secret, list + watch of this origin's remote objects,
  reconnects); a changed spec reconnects.
- MultiKueueConfigs and the AdmissionChecks of the MultiKueue controller are
  kept as seen, so a Workload's check can be mapped to its clusters.
- This module is the one writer of the ``Active`` condition of
  MultiKueueClusters and MultiKueue AdmissionChecks.

Whoever dispatches Workloads listens: ``on_topology`` after anything that can
change a plan (a cluster connected or lost, a config or check changed, the
set of job kinds changed), ``on_remote`` after each remote object event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import kopf
import structlog
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from multikueue.api import AdmissionCheck, MultiKueueCluster, MultiKueueConfig, Workload
from multikueue.api.constants import ACTIVE, GROUP, VERSION, ConditionStatus, MultiKueue
from multikueue.api.meta import Condition, find_condition, utcnow
from multikueue.api.resources import ADMISSION_CHECKS, MULTIKUEUE_CLUSTERS, ResourceRef
from multikueue.controllers.multikueue.checks import ClusterHealth, check_status, config_name
from multikueue.controllers.multikueue.connection import RemoteCluster
from multikueue.integrations.registry import IntegrationSet
from multikueue.runtime.kube import AsyncKube

log = structlog.get_logger(__name__)

RemoteListener = Callable[[RemoteCluster, str, "dict[str, Any] | None"], None]



@dataclass(frozen=True)
class Membership:
    """The clusters a MultiKueue check dispatches to, and the connections among them."""

    check: str
    #: The config's cluster names, in its order.
    names: tuple[str, ...]
    connected: dict[str, RemoteCluster]


class ClusterManager:
    def __init__(self, kube: AsyncKube, integrations: IntegrationSet, *, namespace: str, origin: str) -> None:
        self.kube = kube
        self.integrations = integrations
        self.namespace = namespace
        self.origin = origin
        self.clusters: dict[str, RemoteCluster] = {}
        self._specs: dict[str, MultiKueueCluster] = {}
        self._configs: dict[str, MultiKueueConfig] = {}
        self._checks: dict[str, AdmissionCheck] = {}
        self._status_written: dict[tuple[str, str], tuple[bool, str, str]] = {}
        self._on_topology: list[Callable[[], None]] = []
        self._on_remote: list[RemoteListener] = []
        integrations.subscribe(self._kinds_changed)

    # -- listeners -------------------------------------------------------------------

    def on_topology(self, listener: Callable[[], None]) -> None:
        self._on_topology.append(listener)

    def on_remote(self, listener: RemoteListener) -> None:
        self._on_remote.append(listener)

    def _topology_changed(self) -> None:
        for listener in self._on_topology:
            listener()

    # -- questions -------------------------------------------------------------------

    def check_of(self, wl: Workload) -> str | None:
        """The Workload's MultiKueue check, if it has one."""
        for state in (wl.status.admission_checks or []) if wl.status else []:
            if state.name in self._checks:
                return state.name
        return None

    def membership(self, check: str) -> Membership:
        ac = self._checks.get(check)
        config = self._configs.get(config_name(ac) or "") if ac is not None else None
        names = tuple(config.spec.clusters or ()) if config is not None else ()
        return Membership(check, names, {n: self.clusters[n] for n in names if n in self.clusters})

    def job_refs(self) -> list[ResourceRef]:
        return [i.ref for i in self.integrations.all()]

    # -- kopf handlers -----------------------------------------------------------------

    def register(self, registry: kopf.OperatorRegistry) -> None:
        @kopf.on.event(GROUP, VERSION, "multikueueclusters", registry=registry, id="multikueue_clusters")
        async def on_cluster(event: kopf.RawEvent, **_: Any) -> None:
            obj = event["object"]
            name = obj["metadata"]["name"]
            if event.get("type") == "DELETED":
                self._specs.pop(name, None)
                await self._stop_cluster(name)
                self._refresh_checks()
                return
            try:
                spec = MultiKueueCluster.from_k8s(obj)
            except (ValidationError, ValueError) as exc:
                log.warning("MultiKueueCluster ignored: it does not parse", cluster=name, error=str(exc).splitlines()[0])
                return
            previous = self._specs.get(name)
            self._specs[name] = spec
            if previous is None or previous.spec != spec.spec or name not in self.clusters:
                await self._stop_cluster(name)
                self._start_cluster(spec)

        @kopf.on.event(GROUP, VERSION, "multikueueconfigs", registry=registry, id="multikueue_configs")
        async def on_config(event: kopf.RawEvent, **_: Any) -> None:
            obj = event["object"]
            name = obj["metadata"]["name"]
            if event.get("type") == "DELETED":
                self._configs.pop(name, None)
            else:
                try:
                    self._configs[name] = MultiKueueConfig.from_k8s(obj)
                except (ValidationError, ValueError):
                    self._configs.pop(name, None)
            self._refresh_checks()
            self._topology_changed()

        @kopf.on.event(GROUP, VERSION, "admissionchecks", registry=registry, id="multikueue_checks")
        async def on_check(event: kopf.RawEvent, **_: Any) -> None:
            obj = event["object"]
            name = obj["metadata"]["name"]
            if event.get("type") == "DELETED":
                self._checks.pop(name, None)
                return
            try:
                check = AdmissionCheck.from_k8s(obj)
            except (ValidationError, ValueError):
                return
            if check.spec.controller_name != MultiKueue.CONTROLLER_NAME:
                self._checks.pop(name, None)
                return
            previous = self._checks.get(name)
            self._checks[name] = check
            if previous is None or previous.spec != check.spec:
                self._topology_changed()
            await self._write_check_status(check)

    # -- connections -------------------------------------------------------------------

    def _start_cluster(self, spec: MultiKueueCluster) -> None:
        remote = RemoteCluster(
            name=spec.name,
            spec=spec,
            origin=self.origin,
            namespace=self.namespace,
            manager=self.kube,
            job_refs=self.job_refs(),
            on_change=self._remote_changed,
            on_state=self._remote_state,
        )
        self.clusters[spec.name] = remote
        remote.start()

    async def _stop_cluster(self, name: str) -> None:
        remote = self.clusters.pop(name, None)
        if remote is not None:
            await remote.stop()

    async def stop(self) -> None:
        for name in list(self.clusters):
            await self._stop_cluster(name)

    def _kinds_changed(self) -> None:
        """The job kinds changed (external frameworks): watch them on the workers and re-plan."""
        refs = self.job_refs()
        for remote in self.clusters.values():
            remote.set_job_refs(refs)
        self._topology_changed()

    def _remote_state(self, remote: RemoteCluster) -> None:
        asyncio.create_task(self._write_cluster_status(remote))
        self._refresh_checks()
        self._topology_changed()

    def _remote_changed(self, remote: RemoteCluster, kind: str, obj: dict[str, Any] | None) -> None:
        for listener in self._on_remote:
            listener(remote, kind, obj)

    # -- Active conditions ---------------------------------------------------------------

    async def _write_active(
        self, ref: ResourceRef, name: str, active: bool, reason: str, message: str, since: datetime | None = None
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
            await self.kube.patch(ref, None, name, {"status": {"conditions": [condition.to_dict()]}}, status=True)
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
        for check in list(self._checks.values()):
            asyncio.create_task(self._write_check_status(check))

    async def _write_check_status(self, check: AdmissionCheck) -> None:
        status = check_status(check, self._configs, self._health())
        current = find_condition(check.status.conditions, ACTIVE)
        if current is not None and (current.status == ConditionStatus.TRUE, current.reason, current.message) == (
            status.active,
            status.reason,
            status.message,
        ):
            self._status_written[(ADMISSION_CHECKS.plural, check.name)] = (status.active, status.reason, status.message)
            return
        await self._write_active(ADMISSION_CHECKS, check.name, status.active, status.reason, status.message)
