"""External frameworks at run time: adapters, local watches, ConfigMap reloads.

The configuration's ``multiKueue.externalFrameworks`` entries are compiled by
:mod:`multikueue.integrations.external.entries`; this module gives each valid entry a
:class:`GenericAdapter` with the plural found through discovery, watches its
objects on the local cluster (a thread per kind, like the worker watches), and
applies :mod:`multikueue.integrations.external.workload` to them. The ConfigMap is watched: an
added, changed or removed entry starts, restarts or stops its watch without a
restart, and Workloads already dispatched keep going (the MultiKueue
controller just sees a different set of adapters).

Problems (a bad entry, a kind the API server does not serve) are logged and
posted as Warning Events on the ConfigMap; the other entries keep working.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import structlog
from kubernetes.client.rest import ApiException

from multikueue.integrations.external.cel import CelEvaluationError
from multikueue.integrations.external.entries import CompiledFramework, FrameworkProblem, load_frameworks
from multikueue.integrations.external.adapter import GenericAdapter
from multikueue.controllers.multikueue.connection import _list, _watch_loop
from multikueue.api import Workload
from multikueue.api.configuration import CONFIG_KEY, ConfigurationError, load_configuration
from multikueue.integrations.external import workload as external
from multikueue.runtime.events import ObjectRef
from multikueue.api.resources import ResourceRef
from multikueue.api.resources import WORKLOADS

if TYPE_CHECKING:
    from multikueue.operator.scheduling import ControllerState

log = structlog.get_logger(__name__)

ObjectKey = tuple[str, str]
#: Pause before listing a kind again after its watch broke.
REWATCH_SECONDS = 2.0


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class FrameworkWatch:
    """One external kind being watched on the local cluster."""

    adapter: GenericAdapter
    objects: dict[ObjectKey, dict[str, Any]] = field(default_factory=dict)
    #: (namespace, prebuilt Workload name) -> the object bound to it (worker copies).
    prebuilt: dict[ObjectKey, ObjectKey] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    stopped: bool = False

    def store(self, obj: dict[str, Any]) -> None:
        key = _key(obj)
        self.objects[key] = obj
        name = external.prebuilt_workload_name(obj)
        if name:
            self.prebuilt[(key[0], name)] = key

    def forget(self, obj: Mapping[str, Any]) -> None:
        key = _key(obj)
        self.objects.pop(key, None)
        name = external.prebuilt_workload_name(obj)
        if name and self.prebuilt.get((key[0], name)) == key:
            del self.prebuilt[(key[0], name)]


class Frameworks:
    """The external frameworks this controller runs, kept in step with its ConfigMap."""

    def __init__(self, state: "ControllerState", config_map: str) -> None:
        self.state = state
        self.config_map = config_map
        self.watches: dict[str, FrameworkWatch] = {}
        self._specs: dict[str, Any] = {}
        self._last_problems: tuple[str, ...] = ()
        #: Called after the set of adapters changed (the MultiKueue controller re-plans).
        self.on_change: Callable[[], None] | None = None

    # -- lookups --------------------------------------------------------------------------

    def adapters(self) -> list[GenericAdapter]:
        return [w.adapter for w in self.watches.values()]

    def _watch_for(self, api_version: str, kind: str) -> FrameworkWatch | None:
        for watch in self.watches.values():
            if (watch.adapter.api_version, watch.adapter.kind) == (api_version, kind):
                return watch
        return None

    def adapter_for(self, api_version: str, kind: str) -> GenericAdapter | None:
        watch = self._watch_for(api_version, kind)
        return watch.adapter if watch is not None else None

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        watch = self._watch_for(api_version, kind)
        return watch.objects.get((namespace, name)) if watch is not None else None

    # -- loading --------------------------------------------------------------------------

    async def reload_from_configmap(self, body: Mapping[str, Any]) -> None:
        """Apply the ConfigMap's document (watch event); a bad document keeps what runs now."""
        text = (body.get("data") or {}).get(CONFIG_KEY)
        try:
            loaded = load_configuration(text)
        except ConfigurationError as exc:
            self._report(body, [f"ConfigMap {self.state.namespace}/{self.config_map}: {exc}; keeping the previous external frameworks"])
            return
        await self.load(loaded.config.multi_kueue.external_frameworks, source=body)

    async def load(self, entries: Iterable[Any], source: Mapping[str, Any] | None = None) -> list[str]:
        """Compile ``entries``, resolve their kinds, start/stop watches; return the problems found."""
        frameworks = load_frameworks(list(entries))
        problems = [str(p) for p in frameworks.problems]
        wanted: dict[str, tuple[CompiledFramework, ResourceRef]] = {}
        for name, framework in frameworks.frameworks.items():
            try:
                ref = await self._resolve(framework)
            except LookupError as exc:
                problems.append(str(FrameworkProblem(name, "name", str(exc))))
                continue
            wanted[name] = (framework, ref)
        changed = False
        for name in list(self.watches):
            if name not in wanted or self._specs.get(name) != wanted[name][0].spec:
                await self._stop(name)
                changed = True
        for name, (framework, ref) in wanted.items():
            if name not in self.watches:
                self._specs[name] = framework.spec
                self._start(GenericAdapter(framework, ref))
                changed = True
        self._report(source, problems)
        if changed:
            log.info("external frameworks", active=sorted(self.watches), problems=len(problems))
            if self.on_change is not None:
                self.on_change()
        return problems

    async def _resolve(self, framework: CompiledFramework) -> ResourceRef:
        """The kind's plural and scope from discovery; LookupError when the API server does not serve it."""
        kube = self.state.kube
        try:
            listing = await kube.call(kube._request, "GET", f"/apis/{framework.group}/{framework.version}")
        except ApiException as exc:
            if exc.status == 404:
                raise LookupError(
                    f"the API server does not serve {framework.api_version}: install the CRD of {framework.kind} on this cluster"
                ) from None
            raise LookupError(f"discovery of {framework.api_version} failed: {exc.status} {exc.reason}") from None
        for resource in listing.get("resources", []):
            if resource.get("kind") == framework.kind and "/" not in resource.get("name", ""):
                return ResourceRef(framework.group, framework.version, resource["name"], bool(resource.get("namespaced")))
        raise LookupError(f"{framework.api_version} has no kind {framework.kind}: check the CRD and the entry's name")

    def _report(self, source: Mapping[str, Any] | None, problems: list[str]) -> None:
        """Log each problem and post it as a Warning Event on the ConfigMap, once per distinct set."""
        if tuple(problems) == self._last_problems:
            return
        self._last_problems = tuple(problems)
        meta = (source or {}).get("metadata") or {}
        for problem in problems:
            log.warning("external framework not used", problem=problem, configmap=f"{self.state.namespace}/{self.config_map}")
            if meta.get("uid"):
                ref = ObjectRef("v1", "ConfigMap", self.state.namespace, self.config_map, str(meta["uid"]))
                self.state.events.record(ref, "Warning", "InvalidExternalFramework", problem)

    # -- watching -------------------------------------------------------------------------

    def _start(self, adapter: GenericAdapter) -> None:
        watch = FrameworkWatch(adapter)
        self.watches[adapter.gvk] = watch
        watch.task = asyncio.create_task(self._maintain(watch), name=f"watch {adapter.gvk}")

    async def _stop(self, name: str) -> None:
        watch = self.watches.pop(name, None)
        self._specs.pop(name, None)
        if watch is None:
            return
        watch.stopped = True
        if watch.task is not None:
            watch.task.cancel()
            try:
                await watch.task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping anyway
                pass

    async def stop(self) -> None:
        for name in list(self.watches):
            await self._stop(name)

    async def _maintain(self, watch: FrameworkWatch) -> None:
        """List, then watch from the listing's version; after a break, list again."""
        loop = asyncio.get_running_loop()
        api = self.state.kube.api
        ref = watch.adapter.ref
        while not watch.stopped:
            try:
                listed = await self.state.kube.call(_list, api, ref, "")
            except Exception as exc:  # noqa: BLE001 - retried; the log says why
                log.warning("external framework list failed", framework=watch.adapter.gvk, error=str(exc)[:200])
                await asyncio.sleep(REWATCH_SECONDS)
                continue
            watch.objects, watch.prebuilt = {}, {}
            for obj in listed.get("items", []):
                watch.store(obj)
            for obj in list(watch.objects.values()):
                self._changed(watch, obj)
            broken = loop.create_future()
            alive = threading.Event()
            alive.set()

            def deliver(_: str, event_type: str, obj: dict[str, Any], watch: FrameworkWatch = watch) -> None:
                if watch.stopped:
                    return
                if event_type == "DELETED":
                    watch.forget(obj)
                else:
                    watch.store(obj)
                    self._changed(watch, obj)

            def fail(exc: BaseException, broken: asyncio.Future[BaseException] = broken) -> None:
                if not broken.done():
                    broken.set_result(exc)

            thread = threading.Thread(
                target=_watch_loop,
                args=(api, ref, "", listed["metadata"].get("resourceVersion", ""), lambda: alive.is_set() and not watch.stopped, loop, deliver, fail),
                name=f"watch {watch.adapter.gvk}",
                daemon=True,
            )
            thread.start()
            try:
                exc = await broken
            finally:
                alive.clear()
            log.info("external framework watch restarted", framework=watch.adapter.gvk, error=str(exc)[:200])
            await asyncio.sleep(REWATCH_SECONDS)

    # -- reconciling ----------------------------------------------------------------------

    def _changed(self, watch: FrameworkWatch, obj: dict[str, Any]) -> None:
        asyncio.create_task(self.reconcile(watch.adapter, obj))
        multikueue = self.state.multikueue
        if multikueue is not None:
            namespace, name = _key(obj)
            adapter = watch.adapter
            owned = multikueue.owned.get((adapter.api_version, adapter.kind, namespace, name))
            multikueue.schedule(owned or (namespace, external.workload_name(adapter, obj)))

    def object_of(self, wl: Workload) -> tuple[GenericAdapter, dict[str, Any]] | None:
        """The external object ``wl`` belongs to (owner, or the object naming it as prebuilt)."""
        namespace = wl.namespace or ""
        for ref in wl.metadata.owner_references or []:
            owner = self._watch_for(ref.api_version, ref.kind)
            if owner is not None:
                obj = owner.objects.get((namespace, ref.name))
                return (owner.adapter, obj) if obj is not None else None
        for watch in self.watches.values():
            key = watch.prebuilt.get((namespace, wl.name))
            if key is not None and key in watch.objects:
                return watch.adapter, watch.objects[key]
        return None

    async def on_workload(self, wl: Workload) -> None:
        found = self.object_of(wl)
        if found is not None:
            await self.reconcile(*found)

    async def reconcile(self, adapter: GenericAdapter, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        wl = self.state.cache.workload((namespace, external.workload_name(adapter, obj)))
        try:
            priority_class = adapter.priority_class(obj)
            priority = self.state.cache.priority_class_value(priority_class) if priority_class else None
            action = external.decide(adapter, obj, wl, priority=priority, now=utcnow())
        except (CelEvaluationError, ValueError) as exc:
            log.warning("external object not handled", framework=adapter.gvk, object=f"{namespace}/{name}", error=str(exc))
            self._object_event(adapter, obj, "Warning", "InvalidExternalFramework", str(exc))
            return
        if action.step is external.ExternalStep.NONE:
            return
        kube = self.state.kube
        try:
            if action.step is external.ExternalStep.CREATE_WORKLOAD and action.workload is not None:
                try:
                    await kube.create(WORKLOADS, namespace, action.workload.to_k8s())
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    return
                self._object_event(adapter, obj, "Normal", "CreatedWorkload", f"Created Workload: {namespace}/{action.workload.name}")
            elif action.step is external.ExternalStep.FINISH_WORKLOAD and wl is not None and action.condition is not None:
                await self.state.writer.finish(wl, action.condition.to_dict())
            elif action.step is external.ExternalStep.RELEASE_HOLD and action.patch is not None:
                patch = {**action.patch, "metadata": {"resourceVersion": meta.get("resourceVersion")}}
                await kube.patch(adapter.ref, namespace, name, patch)
                self._object_event(adapter, obj, "Normal", "Started", action.message)
        except ApiException as exc:
            if exc.status in (404, 409):
                return
            log.error("external object reconcile failed", framework=adapter.gvk, object=f"{namespace}/{name}", step=action.step.value, status=exc.status, error=exc.reason)
            return
        log.info("external object reconciled", framework=adapter.gvk, object=f"{namespace}/{name}", step=action.step.value, message=action.message)

    def _object_event(self, adapter: GenericAdapter, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        ref = ObjectRef(adapter.api_version, adapter.kind, meta.get("namespace"), meta.get("name", ""), str(meta.get("uid") or ""))
        self.state.events.record(ref, type_, reason, message)


def _key(obj: Mapping[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace", ""), meta.get("name", ""))
