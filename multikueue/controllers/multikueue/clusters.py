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
from dataclasses import dataclass, field
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
from multikueue.controllers.multikueue.checks import ClusterHealth, active_write_needed, check_status, config_name
from multikueue.controllers.multikueue.connection import ConnectionSettings, RemoteCluster
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
    #: The MultiKueueConfig exists and parses. False (missing, unparsable, not seen yet) is not "no clusters":
    #: the dispatch decision must then keep every Workload as it is.
    known: bool = True
    #: The MultiKueueConfig's name ("" when the check names none).
    config: str = ""
    #: Listed clusters without a MultiKueueCluster object: since when this process misses them.
    missing_since: dict[str, datetime] = field(default_factory=dict)


class ClusterManager:
    def __init__(
        self,
        kube: AsyncKube,
        integrations: IntegrationSet,
        *,
        namespace: str,
        origin: str,
        connection: ConnectionSettings | None = None,
    ) -> None:
        self.kube = kube
        self.connection = connection or ConnectionSettings()
        self.integrations = integrations
        self.namespace = namespace
        self.origin = origin
        self.clusters: dict[str, RemoteCluster] = {}
        self._specs: dict[str, MultiKueueCluster] = {}
        self._configs: dict[str, MultiKueueConfig] = {}
        self._checks: dict[str, AdmissionCheck] = {}
        self._status_written: dict[tuple[str, str], tuple[bool, str, str]] = {}
        #: One ``Active`` write per object at a time: each decides on the health at its turn, so an
        #: older decision ("no active clusters" while connecting) can never land after a newer one.
        self._status_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._on_topology: list[Callable[[], None]] = []
        self._on_remote: list[RemoteListener] = []
        #: Connections run only while this replica leads (:meth:`start_all`/:meth:`stop_all`);
        #: until then the handlers only record the clusters' specs.
        self._leading = False
        #: When a cluster named by a config was first found without its MultiKueueCluster (deleted, or never created).
        self._missing_since: dict[str, datetime] = {}
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
        """The clusters of ``check``'s MultiKueueConfig, as known now.

        A missing or unparsable config gives ``known=False`` (not an empty
        list: the decision keeps everything as it is). A listed cluster
        without a MultiKueueCluster gets the time it was first missed, so a
        winner whose cluster object was deleted is treated as lost, with the
        worker-lost timeout counting from then (a restart restarts the count,
        as for a disconnection).
        """
        ac = self._checks.get(check)
        name = (config_name(ac) or "") if ac is not None else ""
        config = self._configs.get(name) if name else None
        if config is None:
            return Membership(check, (), {}, known=False, config=name)
        names = tuple(config.spec.clusters or ())
        now = utcnow()
        connected = {n: self.clusters[n] for n in names if n in self.clusters}
        missing = {n: self._missing_since.setdefault(n, now) for n in names if n not in self._specs}
        return Membership(check, names, connected, config=name, missing_since=missing)

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
                self._missing_since[name] = utcnow()
                await self._stop_cluster(name)
                self._refresh_checks()
                self._topology_changed()  # a winner there is now lost: its Workloads start the worker-lost count
                return
            try:
                spec = MultiKueueCluster.from_k8s(obj)
            except (ValidationError, ValueError) as exc:
                log.warning("MultiKueueCluster ignored: it does not parse", cluster=name, error=str(exc).splitlines()[0])
                return
            previous = self._specs.get(name)
            self._specs[name] = spec
            self._missing_since.pop(name, None)
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
        if not self._leading:
            return
        remote = RemoteCluster(
            name=spec.name,
            spec=spec,
            origin=self.origin,
            namespace=self.namespace,
            manager=self.kube,
            job_refs=self.job_refs(),
            on_change=self._remote_changed,
            on_state=self._remote_state,
            settings=self.connection,
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

    def start_all(self) -> None:
        """This replica leads: connect to every worker whose MultiKueueCluster was seen.

        The ``Active`` conditions another replica wrote meanwhile are unknown
        here, so the memo of what this process wrote starts empty.
        """
        self._leading = True
        self._status_written.clear()
        for name, spec in self._specs.items():
            if name not in self.clusters:
                self._start_cluster(spec)
        self._refresh_checks()  # the checks' events a standby saw wrote nothing
        log.info("worker connections started", clusters=sorted(self.clusters))

    async def stop_all(self) -> None:
        """This replica no longer leads: close every worker connection and its watches.

        The specs stay known, so :meth:`start_all` reconnects without waiting
        for the MultiKueueClusters to change.
        """
        was_leading, self._leading = self._leading, False
        names = sorted(self.clusters)
        await self.stop()
        if was_leading:
            log.info("worker connections stopped", clusters=names)

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
        """Write the object's ``Active`` condition unless this process already wrote the same one (only while leading)."""
        if not self._leading:
            return  # a standby writes nothing; start_all writes the checks' conditions when it leads
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

    def _status_lock(self, ref: ResourceRef, name: str) -> asyncio.Lock:
        return self._status_locks.setdefault((ref.plural, name), asyncio.Lock())

    async def _write_cluster_status(self, remote: RemoteCluster) -> None:
        async with self._status_lock(MULTIKUEUE_CLUSTERS, remote.name):
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
        """Write the check's ``Active`` condition when it differs (see :func:`active_write_needed`).

        Serialised per check, deciding inside the lock: two refreshes racing (a connection coming
        up while another refresh still writes "no active clusters") once left a check False for
        good after a re-lead, the True decision made and skipped before the False write landed.
        """
        async with self._status_lock(ADMISSION_CHECKS, check.name):
            await self._write_check_status_locked(self._checks.get(check.name, check))

    async def _write_check_status_locked(self, check: AdmissionCheck) -> None:
        status = check_status(check, self._configs, self._health())
        wanted = (status.active, status.reason, status.message)
        key = (ADMISSION_CHECKS.plural, check.name)
        current = find_condition(check.status.conditions, ACTIVE)
        cached = None if current is None else (current.status == ConditionStatus.TRUE, current.reason, current.message)
        written = self._status_written.get(key)
        if not active_write_needed(cached, written, wanted):
            if written is None:
                self._status_written[key] = wanted
            return
        await self._write_active(ADMISSION_CHECKS, check.name, status.active, status.reason, status.message)
