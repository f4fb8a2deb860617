"""One connection to a worker cluster: client, informers, reconnects.

A :class:`RemoteCluster` reads its kubeconfig (a Secret in the controller
namespace or a file), validates it, builds an API client, and runs one
:class:`~multikueue.runtime.informer.Informer` for the remote Workloads and one
per job kind, all limited to this manager's origin label. The informers list,
watch, relist after a break (410 Gone included) and retry with backoff on their
own; their health decides the cluster's Active state: the Workloads informer
failing, or any informer losing the network, marks the cluster inactive until
they list again. A job kind the worker does not serve yet (403/404/429: a CRD
being set up, missing RBAC) only leaves that kind out of ``watched``. A failed
first connection is retried with exponential backoff and jitter (tenacity); a
changed Secret reconnects with the new kubeconfig.

The kubeconfig is validated and the client built from the validated values
only (:mod:`multikueue.runtime.kubeconfig`), off the event loop and after a
size check, so a hostile or huge Secret can neither smuggle a file, a program
or a skipped TLS check in nor stall the controller. While connected, a probe
(``GET /readyz`` with a short timeout, every few seconds, in the session's
executor) notices a worker apiserver that holds connections open but no longer
answers (a frozen process) long before a watch would time out: after
``probe_failures`` misses in a row the worker is inactive, and the first answer
makes it active again.

Just over 500 lines: the connection's life (kubeconfig source, client,
informers, health probe, reconnects) is one state machine, read together.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog
import tenacity
from kubernetes import client

from multikueue.api.meta import utcnow
from multikueue.api.configuration import MultiKueueSettings
from multikueue.runtime.kubeconfig import (
    MAX_KUBECONFIG_BYTES,
    REASON_BAD_CONFIG,
    KubeconfigError,
    allowed_kubeconfig_path,
    client_configuration,
    validate_kubeconfig,
)
from multikueue.controllers.multikueue.remote_workload import RemoteCopy
from multikueue.api.constants import Labels, MultiKueue, MultiKueueClusterReason
from multikueue.api.multikueue import LocationType, MultiKueueCluster
from multikueue.api.resources import ResourceRef
from multikueue.runtime.expectations import PendingDeletes, uid_of
from multikueue.runtime.informer import DELETED, NOT_USABLE, Informer, InformerState, object_key
from multikueue import USER_AGENT
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.tasks import cancel_and_wait
from multikueue.api.resources import SECRETS, WORKLOADS
from multikueue.controllers.multikueue.fencing import drop_origin_lease, hold_origin_lease
from multikueue.core.fencing import lease_duration

log = structlog.get_logger(__name__)

#: How often the kubeconfig source is re-read to notice edits.
SOURCE_POLL_SECONDS = 5.0
#: Server-side timeout of one watch request; the watch is then renewed.
WATCH_SECONDS = 60
#: Longest pause between two listings of a job kind the worker does not serve yet.
JOB_KIND_BACKOFF_MAX = 15.0
ObjectKey = tuple[str, str]


@dataclass(frozen=True)
class ConnectionSettings:
    """How worker connections are checked; the defaults detect a frozen worker within about 6 s.

    A probe starts every ``probe_interval`` seconds (at once after a probe
    that took longer); a worker missing ``probe_failures`` probes in a row,
    each allowed ``probe_timeout`` seconds, is inactive: at most
    interval + failures x timeout after it stopped answering.
    """

    #: Directory under which ``locationType: Path`` kubeconfigs may lie; None refuses them.
    path_prefix: str | None = None
    probe_interval: float = 2.0
    probe_timeout: float = 2.0
    probe_failures: int = 2
    #: Seconds of the origin Lease kept on each worker (fencing); None: fencing off, the Lease is removed.
    origin_lease: float | None = None

    @classmethod
    def from_settings(cls, settings: MultiKueueSettings) -> "ConnectionSettings":
        return cls(
            path_prefix=settings.kube_config_path_prefix,
            probe_interval=settings.worker_probe_interval.total_seconds(),
            probe_timeout=settings.worker_probe_timeout.total_seconds(),
            probe_failures=settings.worker_probe_failures,
            origin_lease=lease_duration(settings.worker_lost_timeout) if settings.fence_workers else None,
        )



class RemoteUnavailable(Exception):
    """The worker cannot be used right now; ``reason`` goes into the Active condition."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class ConnectionState:
    active: bool = False
    reason: str = "Pending"
    message: str = "connecting"
    inactive_since: datetime | None = None


@dataclass
class _Session:
    """One connection's client and informers; events of a session that is not current are ignored."""

    kube: AsyncKube
    workloads: Informer | None = None
    #: The worker's copies of Workloads, kept from the first listing on as what dispatching reads of
    #: them (:class:`RemoteCopy`; the informer keeps only their keys): for every copy on every worker,
    #: this is what the manager's memory grows with. Becomes :attr:`RemoteCluster.workloads` once the
    #: session is current.
    copies: dict[ObjectKey, RemoteCopy] = field(default_factory=dict)
    jobs: dict[ResourceRef, Informer] = field(default_factory=dict)
    #: Set while the worker's apiserver misses its health probes.
    unresponsive: "RemoteUnavailable | None" = None
    probe: asyncio.Task[None] | None = None
    #: Renews this origin's Lease on the worker (fencing), or removes it once when fencing is off.
    lease: asyncio.Task[None] | None = None

    def informers(self) -> list[Informer]:
        return [i for i in (self.workloads, *self.jobs.values()) if i is not None]


def listing_advice(status: int) -> str:
    """What to do about a worker apiserver's answer to listing Workloads, by HTTP status."""
    if status == 429:
        return "the worker's API server asks to try again later (its storage is still initializing); retrying"
    if status in (401, 403):
        return "check the RBAC of the kubeconfig's user on the worker (config/worker-access grants what is needed)"
    if status == 404:
        return "check that the Kueue CRDs are installed on the worker"
    return "check the RBAC of the kubeconfig's user and that the Kueue CRDs are installed"


@dataclass
class RemoteCluster:
    """A worker as the manager sees it."""

    name: str
    spec: MultiKueueCluster
    origin: str
    #: Where Secrets are read (the controller namespace).
    namespace: str
    manager: AsyncKube
    job_refs: list[ResourceRef]
    on_change: Callable[["RemoteCluster", str, dict[str, Any] | None], None]
    on_state: Callable[["RemoteCluster"], None]
    settings: ConnectionSettings = field(default_factory=ConnectionSettings)
    state: ConnectionState = field(default_factory=ConnectionState)
    kube: AsyncKube | None = None
    workloads: dict[ObjectKey, RemoteCopy] = field(default_factory=dict)
    jobs: dict[tuple[str, ObjectKey], dict[str, Any]] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None
    _source_version: str | None = None
    _session: _Session | None = None
    _background: set[asyncio.Task[None]] = field(default_factory=set)
    #: Plurals of the job kinds listed and watched on the current connection (their ``jobs`` are known).
    watched: set[str] = field(default_factory=set)
    #: Copies and jobs this manager deleted here whose ``DELETED`` has not come back yet: readers of
    #: ``workloads`` and ``jobs`` treat them as gone (see :mod:`multikueue.runtime.expectations`).
    pending_deletes: PendingDeletes = field(default_factory=PendingDeletes)

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._maintain(), name=f"remote {self.name}")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await self._disconnect()

    def _set_state(self, active: bool, reason: str, message: str) -> None:
        changed = (active, reason, message) != (self.state.active, self.state.reason, self.state.message)
        if active:
            self.state = ConnectionState(True, reason, message, None)
        else:
            since = self.state.inactive_since or utcnow()
            self.state = ConnectionState(False, reason, message, since)
        if changed:
            log.info("worker connection", cluster=self.name, active=active, reason=reason, message=message)
            self.on_state(self)

    # -- kubeconfig ----------------------------------------------------------

    async def _read_source(self) -> tuple[str, str]:
        """(kubeconfig text, version of its source) or RemoteUnavailable(BadConfig)."""
        source = self.spec.spec.cluster_source.kube_config if self.spec.spec.cluster_source else None
        if source is None:
            raise RemoteUnavailable(REASON_BAD_CONFIG, "spec.clusterSource.kubeConfig is not set")
        if source.location_type == LocationType.PATH:
            return await asyncio.to_thread(self._read_file, source.location)
        where = f"Secret {self.namespace}/{source.location}"
        try:
            secret = await self.manager.get_or_none(SECRETS, self.namespace, source.location)
        except (OSError, client.ApiException) as exc:
            # The manager's own API did not answer or refused: as upstream, BadConfig, and retried.
            detail = f"HTTP {exc.status} {exc.reason}" if isinstance(exc, client.ApiException) else str(exc)
            raise RemoteUnavailable(REASON_BAD_CONFIG, f"{where} could not be read on the manager: {detail}; retrying") from None
        if secret is None:
            raise RemoteUnavailable(REASON_BAD_CONFIG, f"{where} not found")
        data = (secret.get("data") or {}).get(MultiKueue.KUBECONFIG_SECRET_KEY)
        if not data:
            raise RemoteUnavailable(REASON_BAD_CONFIG, f"{where} has no key {MultiKueue.KUBECONFIG_SECRET_KEY!r}")
        if len(data) * 3 // 4 > MAX_KUBECONFIG_BYTES:
            raise RemoteUnavailable(
                REASON_BAD_CONFIG,
                f"{where}: kubeconfig is about {len(data) * 3 // 4} bytes, larger than the limit of "
                f"{MAX_KUBECONFIG_BYTES // 1024} KiB: store only the worker's context, cluster and user",
            )
        try:
            text = base64.b64decode(data).decode()
        except (ValueError, UnicodeDecodeError):
            raise RemoteUnavailable(REASON_BAD_CONFIG, f"{where}: kubeconfig is not valid base64 text") from None
        return text, str(secret["metadata"].get("resourceVersion"))

    def _read_file(self, location: str) -> tuple[str, str]:
        """A ``locationType: Path`` kubeconfig (blocking: run in a thread), only under the configured prefix."""
        try:
            path = allowed_kubeconfig_path(location, self.settings.path_prefix)
        except KubeconfigError as exc:
            raise RemoteUnavailable(exc.reason, str(exc)) from None
        try:
            stat = path.stat()
            if stat.st_size > MAX_KUBECONFIG_BYTES:
                raise RemoteUnavailable(
                    REASON_BAD_CONFIG,
                    f"kubeconfig file {path} is {stat.st_size} bytes, larger than the limit of {MAX_KUBECONFIG_BYTES // 1024} KiB",
                )
            text = path.read_text()
        except OSError as exc:
            raise RemoteUnavailable(REASON_BAD_CONFIG, f"cannot read kubeconfig file {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise RemoteUnavailable(REASON_BAD_CONFIG, f"kubeconfig file {path} is not UTF-8 text") from None
        return text, f"{stat.st_ino}:{stat.st_mtime_ns}:{stat.st_size}"

    # -- connecting ------------------------------------------------------------

    @staticmethod
    def _build_client(text: str) -> client.ApiClient:
        """Validate the kubeconfig and build a client from the validated values only (blocking: run in a thread)."""
        try:
            valid = validate_kubeconfig(text)
        except KubeconfigError as exc:
            raise RemoteUnavailable(exc.reason, str(exc)) from None
        configuration = client_configuration(valid)
        configuration.connection_pool_maxsize = 32
        configuration.retries = False
        api = client.ApiClient(configuration)
        api.user_agent = USER_AGENT
        return api

    async def _connect(self, text: str) -> None:
        """Build a client, start the informers, wait for their first listing; RemoteUnavailable on failure."""
        api = await asyncio.to_thread(self._build_client, text)
        session = _Session(AsyncKube(api, workers=16))
        session.workloads = self._informer(session, WORKLOADS)
        for ref in self.job_refs:
            session.jobs[ref] = self._informer(session, ref)
        try:
            for informer in session.informers():
                informer.start()
            await asyncio.gather(*(i.wait_settled() for i in session.informers()))
            problem = self._problem(session)
            if problem is not None:
                raise problem
        except BaseException:
            await _close(session)
            raise
        await self._disconnect()
        self._session = session
        self.kube = session.kube
        session.probe = asyncio.create_task(self._probe(session), name=f"probe {self.name}")
        lease = self.settings.origin_lease
        renewals = (
            hold_origin_lease(session.kube, self.name, self.origin, lease)
            if lease is not None
            else drop_origin_lease(session.kube, self.name, self.origin)
        )
        session.lease = asyncio.create_task(renewals, name=f"origin lease {self.name}")
        # The job kinds may have changed while connecting: follow the current list.
        for ref in [r for r in session.jobs if r not in self.job_refs]:
            informer = session.jobs.pop(ref)
            informer.halt()
            self._spawn(informer.stop())
        for ref in [r for r in self.job_refs if r not in session.jobs]:
            session.jobs[ref] = self._informer(session, ref)
            session.jobs[ref].start()
        self.workloads = session.copies
        self.jobs = {
            (ref.plural, key): obj for ref, informer in session.jobs.items() for key, obj in informer.store.objects.items()
        }
        self.watched = self._synced_kinds(session)
        for namespace, name in list(session.copies):
            self.on_change(self, "workload", {"metadata": {"namespace": namespace, "name": name}})

    def _informer(self, session: _Session, ref: ResourceRef) -> Informer:
        job = ref != WORKLOADS
        return Informer(
            session.kube,
            ref,
            lambda event_type, obj: self._on_event(session, ref, event_type, obj),
            keep_objects=job,  # the Workloads' parse is kept in the session (see _Session.copies)
            label_selector=f"{Labels.MULTIKUEUE_ORIGIN}={self.origin}",
            on_health=lambda _: self._on_health(session),
            not_usable=NOT_USABLE if job else (),
            cluster=self.name,
            backoff_max=JOB_KIND_BACKOFF_MAX if job else 30.0,
        )

    def _problem(self, session: _Session) -> RemoteUnavailable | None:
        """Why the worker is unusable according to the informers' health; None when it is usable.

        The Workloads informer must be synced; a job kind's informer only counts
        when it lost the network (an API answer about one kind, such as a CRD
        not installed yet or a broken conversion webhook, leaves that kind out).
        """
        host = session.kube.api.configuration.host
        if session.unresponsive is not None:
            return session.unresponsive
        workloads = session.workloads
        if workloads is not None and workloads.state is not InformerState.SYNCED:
            if workloads.last_status is not None:
                return RemoteUnavailable(
                    MultiKueueClusterReason.CLIENT_CONNECTION_FAILED,
                    f"worker API answered {workloads.last_error} when listing Workloads: {listing_advice(workloads.last_status)}",
                )
            return RemoteUnavailable(MultiKueueClusterReason.CLIENT_CONNECTION_FAILED, f"cannot reach {host}: {workloads.last_error}")
        for informer in session.jobs.values():
            if informer.state is InformerState.FAILED and informer.last_status is None:
                return RemoteUnavailable(
                    MultiKueueClusterReason.CLIENT_CONNECTION_FAILED,
                    f"cannot reach {host}: {informer.last_error} (watching {informer.ref.plural})",
                )
        return None

    @staticmethod
    def _synced_kinds(session: _Session) -> set[str]:
        return {ref.plural for ref, informer in session.jobs.items() if informer.state is InformerState.SYNCED}

    def _refresh_state(self) -> None:
        """Set Active from the current connection's informers."""
        session = self._session
        if session is None:
            return
        self.watched = self._synced_kinds(session)
        problem = self._problem(session)
        if problem is None:
            self._set_state(True, MultiKueueClusterReason.ACTIVE, "Connected")
        else:
            self._set_state(False, problem.reason, problem.message)

    def _on_health(self, session: _Session) -> None:
        if session is self._session:
            self._refresh_state()

    async def _disconnect(self) -> None:
        session, self._session = self._session, None
        self.kube = None
        if session is not None:
            await _close(session)

    async def _maintain(self) -> None:
        """Connect, follow the informers' health, reconnect on a kubeconfig change: until stopped.

        Nothing but a cancellation ends this loop. Any error but
        ``RemoteUnavailable`` used to end it (the manager's API failing while
        the Secret is read, for one): the worker then stayed unused for good
        with nothing in the log, since an unawaited task's exception is
        reported only when the task is collected, and this one is held.
        """
        while True:
            try:
                async for attempt in tenacity.AsyncRetrying(
                    wait=tenacity.wait_exponential(multiplier=0.5, max=30) + tenacity.wait_random(0, 1),
                    retry=tenacity.retry_if_exception_type(Exception),
                    before_sleep=self._report_failure,
                ):
                    with attempt:
                        text, version = await self._read_source()
                        await self._connect(text)
                        self._source_version = version
                self._refresh_state()
                reason = await self._until_source_changes()
                await self._disconnect()
                if reason is not None:
                    self._set_state(False, reason.reason, reason.message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - see the docstring: log, report, start over
                log.error("worker connection failed unexpectedly: reconnecting", cluster=self.name, exc_info=exc)
                await self._disconnect()
                self._set_state(False, MultiKueueClusterReason.CLIENT_CONNECTION_FAILED, f"internal error: {exc!r}; reconnecting")
                await asyncio.sleep(SOURCE_POLL_SECONDS)

    def _report_failure(self, retry_state: tenacity.RetryCallState) -> None:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(exc, RemoteUnavailable):
            self._set_state(False, exc.reason, exc.message)
        elif exc is not None:
            log.error("worker connection attempt failed unexpectedly: retrying", cluster=self.name, exc_info=exc)
            self._set_state(False, MultiKueueClusterReason.CLIENT_CONNECTION_FAILED, f"cannot connect: {exc!r}; retrying")

    async def _until_source_changes(self) -> RemoteUnavailable | None:
        """Poll the kubeconfig source; return why the connection must end (None: it changed)."""
        while True:
            await asyncio.sleep(SOURCE_POLL_SECONDS)
            try:
                _, version = await self._read_source()
            except RemoteUnavailable as exc:
                return exc
            except Exception as exc:  # noqa: BLE001 - the manager's own API hiccup: keep the connection
                log.debug("kubeconfig source not read: keeping the connection", cluster=self.name, error=str(exc)[:200])
                continue
            if version != self._source_version:
                log.info("worker kubeconfig changed: reconnecting", cluster=self.name)
                return None

    # -- health probe ------------------------------------------------------------------

    async def _probe(self, session: _Session) -> None:
        """Probe the worker's apiserver while ``session`` lives; mark it unresponsive after repeated misses."""
        loop = asyncio.get_running_loop()
        settings = self.settings
        host = session.kube.api.configuration.host
        failures = 0
        # Probes start every interval; one that used up its timeout is followed at once by the next.
        next_start = loop.time() + settings.probe_interval
        while True:
            await asyncio.sleep(max(0.0, next_start - loop.time()))
            next_start = loop.time() + settings.probe_interval
            try:
                error = await self._probe_once(session)
                failures = self._probe_result(session, host, error, failures)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a held task must not end silently: log, probe on
                log.error("worker health probe failed unexpectedly", cluster=self.name, error=repr(exc)[:200], exc_info=exc)

    def _probe_result(self, session: _Session, host: str, error: str | None, failures: int) -> int:
        """Follow one probe's outcome (None: answered); return the misses in a row."""
        settings = self.settings
        if error is None:
            if session.unresponsive is not None:
                session.unresponsive = None
                log.info("worker apiserver answers again", cluster=self.name, host=host)
                self._on_health(session)
            return 0
        failures += 1
        log.debug("worker health probe missed", cluster=self.name, host=host, failures=failures, error=error)
        if failures >= settings.probe_failures and session.unresponsive is None:
            session.unresponsive = RemoteUnavailable(
                MultiKueueClusterReason.CLIENT_CONNECTION_FAILED,
                f"worker apiserver {host} did not answer GET /readyz {failures} times in a row "
                f"(last: {error}); check that it is running and reachable",
            )
            self._on_health(session)
        return failures

    async def _probe_once(self, session: _Session) -> str | None:
        """None when the apiserver answered (any status below 500), else what went wrong."""
        timeout = self.settings.probe_timeout
        try:
            status = await asyncio.wait_for(session.kube.call(_readyz, session.kube.api, timeout), timeout + 1.0)
        except asyncio.TimeoutError:
            return f"no answer within {timeout:g}s"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - network failures come in many types
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else 'no detail'}"
        if status >= 500:
            return f"answered HTTP {status}"
        return None

    # -- job kinds and events --------------------------------------------------------------

    def set_job_refs(self, refs: list[ResourceRef]) -> None:
        """Follow a new set of job kinds (the external frameworks changed) without reconnecting.

        Kinds no longer listed stop being watched; new ones get an informer on
        the current connection (or at the next connect).
        """
        removed = [r for r in self.job_refs if r not in refs]
        added = [r for r in refs if r not in self.job_refs]
        self.job_refs = list(refs)
        session = self._session
        for ref in removed:
            self.watched.discard(ref.plural)
            for key in [k for k in self.jobs if k[0] == ref.plural]:
                self.jobs.pop(key, None)
            informer = session.jobs.pop(ref, None) if session is not None else None
            if informer is not None:
                informer.halt()
                self._spawn(informer.stop())
        if session is not None:
            for ref in added:
                session.jobs[ref] = self._informer(session, ref)
                session.jobs[ref].start()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _store_workload(self, session: _Session, event_type: str, obj: dict[str, Any]) -> str | None:
        """Keep the session's parse of a worker's copy up to date; the UID of a deleted one (a relist's
        ``DELETED`` carries only the key)."""
        key = object_key(obj)
        if event_type == DELETED:
            gone = session.copies.pop(key, None)
            return uid_of(obj) or (gone.uid if gone is not None else None)
        try:
            session.copies[key] = RemoteCopy.from_k8s(obj)
        except ValueError as exc:
            log.warning("remote workload ignored: it does not parse", cluster=self.name, workload=f"{key[0]}/{key[1]}", error=str(exc).splitlines()[0])
        return None

    def _on_event(self, session: _Session, ref: ResourceRef, event_type: str, obj: dict[str, Any]) -> None:
        """An informer event: the copies of a connecting session are kept; otherwise only the current
        connection's events count (those of a closed one, or of a dropped kind, are ignored)."""
        deleted_uid = self._store_workload(session, event_type, obj) if ref == WORKLOADS else None
        if session is not self._session:
            return
        if event_type == DELETED:
            self.pending_deletes.observed(deleted_uid if ref == WORKLOADS else uid_of(obj))
        if ref == WORKLOADS:
            self.on_change(self, "workload", obj)
        elif session.jobs.get(ref) is not None:
            key = (ref.plural, object_key(obj))
            if event_type == DELETED:
                self.jobs.pop(key, None)
            else:
                self.jobs[key] = obj
            self.on_change(self, "job", obj)


def _readyz(api: client.ApiClient, timeout: float) -> int:
    """GET /readyz through the worker client's auth and TLS settings (blocking); the HTTP status.

    Any answer counts as alive except a 5xx: a 401/403 still proves the
    apiserver is serving, while a request that gets no answer within
    ``timeout`` (a frozen process keeps its TCP port open) raises.
    """
    _, url, headers, _, _ = api.param_serialize(
        method="GET", resource_path="/readyz", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
    )
    try:
        response = api.call_api("GET", url, header_params=headers, _request_timeout=(timeout, timeout))
    except client.ApiException as exc:
        if not exc.status:
            raise  # no HTTP answer (TLS or connection failure)
        return int(exc.status)
    response.read()
    return int(response.status)


async def _close(session: _Session) -> None:
    """Stop the session's probe and informers (no event after this), then close its client."""
    await cancel_and_wait(session.probe)
    await cancel_and_wait(session.lease)
    await asyncio.gather(*(i.stop() for i in session.informers()), return_exceptions=True)
    await session.kube.close()
