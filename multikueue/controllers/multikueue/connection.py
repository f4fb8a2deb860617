"""One connection to a worker cluster: client, watches, reconnects.

A :class:`RemoteCluster` reads its kubeconfig (a Secret in the controller
namespace or a file), validates it, builds an API client, lists the remote
Workloads and jobs carrying this manager's origin label, and watches them.
Watches run in threads (the ``kubernetes`` client is blocking) and hand their
events to the event loop. Any failure marks the cluster inactive and the
connection is retried with exponential backoff and jitter (tenacity); a
changed Secret reconnects with the new kubeconfig.
"""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import structlog
import tenacity
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from multikueue.runtime.kubeconfig import REASON_BAD_CONFIG, KubeconfigError, validate_kubeconfig
from multikueue.api import Workload
from multikueue.api.constants import Labels, MultiKueue, MultiKueueClusterReason
from multikueue.api.multikueue import LocationType, MultiKueueCluster
from multikueue.api.resources import ResourceRef
from multikueue.runtime.kube import AsyncKube
from multikueue.api.resources import SECRETS, WORKLOADS

log = structlog.get_logger(__name__)

#: How often the kubeconfig source is re-read to notice edits.
SOURCE_POLL_SECONDS = 5.0
#: Server-side timeout of one watch request; the watch is then renewed.
WATCH_SECONDS = 60
ObjectKey = tuple[str, str]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


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
class RemoteCluster:
    """A worker as the manager sees it."""

    name: str
    spec: MultiKueueCluster
    origin: str
    #: Where Secrets are read (the controller namespace) and files (a prefix).
    namespace: str
    manager: AsyncKube
    job_refs: list[ResourceRef]
    on_change: Callable[["RemoteCluster", str, dict[str, Any] | None], None]
    on_state: Callable[["RemoteCluster"], None]
    path_prefix: str | None = None
    state: ConnectionState = field(default_factory=ConnectionState)
    kube: AsyncKube | None = None
    workloads: dict[ObjectKey, Workload] = field(default_factory=dict)
    jobs: dict[tuple[str, ObjectKey], dict[str, Any]] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None
    _generation: int = 0
    _source_version: str | None = None
    _failure: asyncio.Future[RemoteUnavailable] | None = None
    _ref_generations: dict[str, int] = field(default_factory=dict)
    #: Plurals of the job kinds whose watch runs on the current connection (their ``jobs`` are known).
    watched: set[str] = field(default_factory=set)

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._maintain(), name=f"remote {self.name}")

    async def stop(self) -> None:
        self._generation += 1
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping anyway
                pass
            self._task = None
        self._disconnect()

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
            path = Path(source.location)
            if self.path_prefix is None or not str(path.resolve()).startswith(str(Path(self.path_prefix).resolve())):
                raise RemoteUnavailable(
                    REASON_BAD_CONFIG,
                    f"kubeconfig path {source.location!r} is not under the allowed prefix {self.path_prefix!r}",
                )
            try:
                text = path.read_text()
            except OSError as exc:
                raise RemoteUnavailable(REASON_BAD_CONFIG, f"cannot read kubeconfig file {path}: {exc.strerror}") from None
            return text, str(path.stat().st_mtime_ns)
        secret = await self.manager.get_or_none(SECRETS, self.namespace, source.location)
        if secret is None:
            raise RemoteUnavailable(
                REASON_BAD_CONFIG, f"Secret {self.namespace}/{source.location} not found"
            )
        data = (secret.get("data") or {}).get(MultiKueue.KUBECONFIG_SECRET_KEY)
        if not data:
            raise RemoteUnavailable(
                REASON_BAD_CONFIG,
                f"Secret {self.namespace}/{source.location} has no key {MultiKueue.KUBECONFIG_SECRET_KEY!r}",
            )
        try:
            text = base64.b64decode(data).decode()
        except (ValueError, UnicodeDecodeError):
            raise RemoteUnavailable(
                REASON_BAD_CONFIG, f"Secret {self.namespace}/{source.location}: kubeconfig is not valid base64 text"
            ) from None
        return text, str(secret["metadata"].get("resourceVersion"))

    # -- connecting ------------------------------------------------------------

    def _build_client(self, text: str) -> client.ApiClient:
        try:
            valid = validate_kubeconfig(text)
        except KubeconfigError as exc:
            raise RemoteUnavailable(exc.reason, str(exc)) from None
        configuration = client.Configuration()
        try:
            config.load_kube_config_from_dict(valid.document, client_configuration=configuration)
        except (config.ConfigException, ValueError, TypeError) as exc:
            raise RemoteUnavailable(MultiKueueClusterReason.BAD_KUBECONFIG, f"kubeconfig cannot be loaded: {exc}") from None
        configuration.connection_pool_maxsize = 32
        configuration.retries = False
        return client.ApiClient(configuration)

    async def _connect(self, text: str) -> None:
        """Build a client and take the initial listing; raise RemoteUnavailable on failure."""
        api = self._build_client(text)
        kube = AsyncKube(api, workers=16)
        selector = f"{Labels.MULTIKUEUE_ORIGIN}={self.origin}"
        try:
            listed = await kube.call(_list, api, WORKLOADS, selector)
            jobs: dict[tuple[str, ObjectKey], dict[str, Any]] = {}
            job_versions: dict[str, str] = {}
            for ref in self.job_refs:
                try:
                    result = await kube.call(_list, api, ref, selector)
                except ApiException as exc:
                    # Missing RBAC or CRD, or a CRD still being set up (429): the worker is usable for
                    # the other kinds; this one is retried on its own (see _watch_added).
                    log.warning(
                        "job kind not usable on worker",
                        cluster=self.name,
                        gvk=f"{ref.plural}.{ref.group}/{ref.version}",
                        status=exc.status,
                    )
                    continue
                job_versions[ref.plural] = result["metadata"].get("resourceVersion", "")
                for item in result.get("items", []):
                    jobs[(ref.plural, _key(item))] = item
        except ApiException as exc:
            kube.close()
            raise RemoteUnavailable(
                MultiKueueClusterReason.CLIENT_CONNECTION_FAILED,
                f"worker API answered {exc.status} {exc.reason} when listing Workloads: check the RBAC of the kubeconfig's user and that the Kueue CRDs are installed",
            ) from None
        except Exception as exc:  # noqa: BLE001 - network errors come in many types
            kube.close()
            raise RemoteUnavailable(
                MultiKueueClusterReason.CLIENT_CONNECTION_FAILED, f"cannot reach {api.configuration.host}: {_brief(exc)}"
            ) from None
        self._disconnect()
        self.kube = kube
        self._generation += 1
        generation = self._generation
        self.workloads = {}
        for item in listed.get("items", []):
            self._store_workload("ADDED", item)
        self.jobs = jobs
        self._start_watch(api, WORKLOADS, selector, listed["metadata"].get("resourceVersion", ""), generation)
        self.watched = set()
        for ref in self.job_refs:
            if ref.plural in job_versions:
                self._start_watch(api, ref, selector, job_versions[ref.plural], generation)
                self.watched.add(ref.plural)
        missing = [r for r in self.job_refs if r.plural not in job_versions]
        if missing:
            asyncio.create_task(self._watch_added(missing, generation))
        for key in list(self.workloads):
            self.on_change(self, "workload", {"metadata": {"namespace": key[0], "name": key[1]}})

    def _disconnect(self) -> None:
        self._generation += 1
        if self.kube is not None:
            self.kube.close()
            self.kube = None

    async def _maintain(self) -> None:
        """Connect, watch, reconnect: until stopped."""
        loop = asyncio.get_running_loop()
        while True:
            self._failure = loop.create_future()
            try:
                async for attempt in tenacity.AsyncRetrying(
                    wait=tenacity.wait_exponential_jitter(initial=0.5, max=30),
                    retry=tenacity.retry_if_exception_type(RemoteUnavailable),
                    before_sleep=self._report_failure,
                ):
                    with attempt:
                        text, version = await self._read_source()
                        await self._connect(text)
                        self._source_version = version
            except asyncio.CancelledError:
                raise
            self._set_state(True, MultiKueueClusterReason.ACTIVE, "Connected")
            reason = await self._watch_until_broken()
            self._disconnect()
            if reason is not None:
                self._set_state(False, reason.reason, reason.message)

    def _report_failure(self, retry_state: tenacity.RetryCallState) -> None:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(exc, RemoteUnavailable):
            self._set_state(False, exc.reason, exc.message)

    async def _watch_until_broken(self) -> RemoteUnavailable | None:
        """Wait for a watch failure or a kubeconfig change; return why the connection ends."""
        while True:
            try:
                assert self._failure is not None
                failure = await asyncio.wait_for(asyncio.shield(self._failure), timeout=SOURCE_POLL_SECONDS)
                return failure  # type: ignore[no-any-return]
            except asyncio.TimeoutError:
                pass
            try:
                _, version = await self._read_source()
            except RemoteUnavailable as exc:
                return exc
            except ApiException:
                continue  # the manager's own API hiccup: keep the connection
            if version != self._source_version:
                log.info("worker kubeconfig changed: reconnecting", cluster=self.name)
                return None

    # -- watches ------------------------------------------------------------------

    def set_job_refs(self, refs: list[ResourceRef]) -> None:
        """Follow a new set of job kinds (the external frameworks changed) without reconnecting.

        Kinds no longer listed stop being watched; new ones are listed and
        watched on the current connection (or at the next connect).
        """
        removed = [r for r in self.job_refs if r not in refs]
        added = [r for r in refs if r not in self.job_refs]
        self.job_refs = list(refs)
        for ref in removed:
            self.watched.discard(ref.plural)
            self._ref_generations[ref.plural] = self._ref_generations.get(ref.plural, 0) + 1
            for key in [k for k in self.jobs if k[0] == ref.plural]:
                self.jobs.pop(key, None)
        if added and self.kube is not None:
            asyncio.create_task(self._watch_added(added, self._generation))

    async def _watch_added(self, refs: list[ResourceRef], generation: int) -> None:
        kube = self.kube
        if kube is None:
            return
        selector = f"{Labels.MULTIKUEUE_ORIGIN}={self.origin}"
        for ref in refs:
            result = None
            attempt = 0
            while result is None:
                if generation != self._generation or ref not in self.job_refs:
                    return
                try:
                    result = await kube.call(_list, kube.api, ref, selector)
                except Exception as exc:  # noqa: BLE001 - a new CRD answers 429/404 for a while; keep trying
                    attempt += 1
                    status = exc.status if isinstance(exc, ApiException) else None
                    if attempt in (1, 5) or attempt % 20 == 0:
                        log.warning("job kind not usable on worker yet", cluster=self.name, gvk=f"{ref.plural}.{ref.group}/{ref.version}", status=status, error=_brief(exc), attempt=attempt)
                    await asyncio.sleep(min(15.0, 0.5 * 2**attempt))
            if generation != self._generation or ref not in self.job_refs:
                return
            for item in result.get("items", []):
                self.jobs[(ref.plural, _key(item))] = item
            self._start_watch(kube.api, ref, selector, result["metadata"].get("resourceVersion", ""), generation)
            self.watched.add(ref.plural)

    def _start_watch(self, api: client.ApiClient, ref: ResourceRef, selector: str, version: str, generation: int) -> None:
        loop = asyncio.get_running_loop()
        ref_generation = self._ref_generations.get(ref.plural, 0)

        def current() -> bool:
            return generation == self._generation and self._ref_generations.get(ref.plural, 0) == ref_generation

        def deliver(kind: str, event_type: str, obj: dict[str, Any]) -> None:
            if current():
                self._on_watch_event(ref, event_type, obj)

        def fail(exc: BaseException) -> None:
            if current() and self._failure is not None and not self._failure.done():
                self._failure.set_result(
                    RemoteUnavailable(
                        MultiKueueClusterReason.CLIENT_CONNECTION_FAILED,
                        f"lost the watch on {ref.plural}: {_brief(exc)}",
                    )
                )

        thread = threading.Thread(
            target=_watch_loop,
            args=(api, ref, selector, version, current, loop, deliver, fail),
            name=f"watch {self.name} {ref.plural}",
            daemon=True,
        )
        thread.start()

    def _store_workload(self, event_type: str, obj: dict[str, Any]) -> None:
        key = _key(obj)
        if event_type == "DELETED":
            self.workloads.pop(key, None)
            return
        try:
            self.workloads[key] = Workload.from_k8s(obj)
        except (ValidationError, ValueError) as exc:
            log.warning("remote workload ignored: it does not parse", cluster=self.name, workload=f"{key[0]}/{key[1]}", error=str(exc).splitlines()[0])

    def _on_watch_event(self, ref: ResourceRef, event_type: str, obj: dict[str, Any]) -> None:
        if ref == WORKLOADS:
            self._store_workload(event_type, obj)
            self.on_change(self, "workload", obj)
        else:
            key = (ref.plural, _key(obj))
            if event_type == "DELETED":
                self.jobs.pop(key, None)
            else:
                self.jobs[key] = obj
            self.on_change(self, "job", obj)


def _key(obj: dict[str, Any]) -> ObjectKey:
    meta = obj.get("metadata", {})
    return (meta.get("namespace", ""), meta.get("name", ""))


def _brief(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


def _list(api: client.ApiClient, ref: ResourceRef, selector: str) -> dict[str, Any]:
    objects = client.CustomObjectsApi(api)
    return objects.list_cluster_custom_object(ref.group, ref.version, ref.plural, label_selector=selector, _request_timeout=(5, 30))  # type: ignore[no-any-return]


def _watch_loop(
    api: client.ApiClient,
    ref: ResourceRef,
    selector: str,
    version: str,
    current: Callable[[], bool],
    loop: asyncio.AbstractEventLoop,
    deliver: Callable[[str, str, dict[str, Any]], None],
    fail: Callable[[BaseException], None],
) -> None:
    """Watch from ``version`` until the connection breaks or the generation moves on (thread)."""
    objects = client.CustomObjectsApi(api)
    while current():
        stream = watch.Watch()
        try:
            for event in stream.stream(
                objects.list_cluster_custom_object,
                ref.group,
                ref.version,
                ref.plural,
                label_selector=selector,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
                _request_timeout=(5, WATCH_SECONDS + 15),
                # One json.loads per event: the client's default deserialisation dumps and
                # re-parses every object (a fifth of the manager's CPU under load).
                deserialize=False,
            ):
                if not current():
                    stream.stop()
                    return
                obj = event["object"]
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if event["type"] == "BOOKMARK":
                    continue
                if event["type"] == "ERROR":
                    raise RuntimeError(f"watch error: {obj.get('message', obj)}")
                loop.call_soon_threadsafe(deliver, ref.plural, event["type"], obj)
        except ApiException as exc:
            if exc.status == 410:  # expired resourceVersion: a relist through reconnect is needed
                loop.call_soon_threadsafe(fail, exc)
                return
            loop.call_soon_threadsafe(fail, exc)
            return
        except Exception as exc:  # noqa: BLE001 - any break of the stream ends this connection
            loop.call_soon_threadsafe(fail, exc)
            return
