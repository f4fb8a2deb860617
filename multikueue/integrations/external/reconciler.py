"""External frameworks at run time: one watch per configured kind, their objects reconciled.

For every entry of ``multiKueue.externalFrameworks`` that :mod:`.reload`
found usable, this module watches the kind's objects on the local cluster
and applies the pure decisions of :mod:`.workload` to them: create the
Workload an entry with ``workload`` asks for, finish it when the object
finished, release a worker copy's hold once its prebuilt Workload is
admitted. Each watched kind is an :class:`~multikueue.integrations.base.Integration`
in the controller's :class:`~multikueue.integrations.registry.IntegrationSet`,
so the MultiKueue check dispatches it like a Job.

The objects are tenants' data, so deciding about one is fenced in: the
decision runs in a thread (the entries' CEL evaluations take up to
:data:`~multikueue.integrations.external.cel.MAX_SECONDS` each on a hostile
object; the event loop keeps serving everything else meanwhile), within
:data:`DECIDE_SECONDS` after which its result is abandoned, and any failure
on the object's data (an expression failing, an object too deep or too
large, a ``RecursionError``) is reported on that object as a Warning Event
``InvalidExternalFramework``, once per resourceVersion, while the kind's
other objects are processed as usual.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from kubernetes.client.rest import ApiException

from multikueue.api.meta import utcnow
from multikueue.api import Workload
from multikueue.api.resources import WORKLOADS, ResourceRef
from multikueue.core.cache import Cache
from multikueue.integrations.base import Integration
from multikueue.integrations.external import workload as external
from multikueue.integrations.external.adapter import GenericAdapter
from multikueue.integrations.external.cel import CelEvaluationError
from multikueue.integrations.external.entries import CompiledFramework
from multikueue.integrations.registry import IntegrationSet
from multikueue.runtime.events import EventRecorder, ObjectRef
from multikueue.runtime.informer import DELETED, Informer
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.workqueue import WorkQueue
from multikueue.runtime.writer import WorkloadWriter

log = structlog.get_logger(__name__)

ObjectKey = tuple[str, str]
#: What the work queue holds: (the kind's ``Kind.version.group``, namespace, name).
QueueKey = tuple[str, str, str]
#: Objects reconciled at once.
CONCURRENCY = 8
#: Told when an object of a watched kind changed (the MultiKueue check re-plans its Workload).
ObjectListener = Callable[[GenericAdapter, Mapping[str, Any]], None]



PREBUILT_INDEX = "prebuilt"
#: Longest a decision about one object may take before its result is abandoned (it evaluates up to three
#: expressions of at most ``cel.MAX_SECONDS`` each; the thread ends by the CEL budget, not by this).
DECIDE_SECONDS = 10.0
#: Reason of the Warning Event on an object that cannot be handled.
INVALID = "InvalidExternalFramework"


@dataclass
class FrameworkWatch:
    """One external kind being watched on the local cluster (the integration's ObjectSource)."""

    adapter: GenericAdapter
    informer: Informer

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as last seen."""
        return self.informer.get(namespace, name)

    def bound_to(self, namespace: str, workload: str) -> dict[str, Any] | None:
        """The object bound to prebuilt Workload ``namespace/workload`` (a worker copy), if any."""
        found = self.informer.by_index(PREBUILT_INDEX, f"{namespace}/{workload}")
        return found[0] if found else None


def _prebuilt_keys(obj: dict[str, Any]) -> list[str]:
    name = external.prebuilt_workload_name(obj)
    return [f"{_key(obj)[0]}/{name}"] if name else []


class ExternalReconciler:
    """The watched external kinds and the reconciliation of their objects."""

    def __init__(
        self, kube: AsyncKube, cache: Cache, writer: WorkloadWriter, events: EventRecorder, integrations: IntegrationSet
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.writer = writer
        self.events = events
        self.integrations = integrations
        self.watches: dict[str, FrameworkWatch] = {}
        self._specs: dict[str, Any] = {}
        self._listeners: list[ObjectListener] = []
        #: (kind, namespace, name) -> resourceVersion already reported invalid (one Event per version).
        self._reported: dict[QueueKey, str] = {}
        self.queue: WorkQueue[QueueKey] = WorkQueue(
            "external",
            self._handle,
            workers=CONCURRENCY,
            format_key=lambda k: f"{k[0]} {k[1]}/{k[2]}",
            expected=(ApiException,),
        )

    def on_object(self, listener: ObjectListener) -> None:
        """Call ``listener`` after each change of a watched object."""
        self._listeners.append(listener)

    async def apply(self, wanted: Mapping[str, tuple[CompiledFramework, ResourceRef]]) -> bool:
        """Watch exactly the kinds in ``wanted`` (restarting changed ones); True when the set changed."""
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
        if changed:
            self.integrations.set_external(Integration(w.adapter, w) for w in self.watches.values())
        return changed

    # -- watching -------------------------------------------------------------------------

    def _start(self, adapter: GenericAdapter) -> None:
        def changed(event_type: str, obj: dict[str, Any]) -> None:
            if event_type != DELETED:
                self._changed(adapter, obj)
            else:
                self._reported.pop((adapter.gvk, *_key(obj)), None)

        informer = Informer(self.kube, adapter.ref, changed, indexers={PREBUILT_INDEX: _prebuilt_keys}, cluster="local")
        self.watches[adapter.gvk] = FrameworkWatch(adapter, informer)
        informer.start()

    async def _stop(self, name: str) -> None:
        watch = self.watches.pop(name, None)
        self._specs.pop(name, None)
        if watch is not None:
            await watch.informer.stop()

    def start(self) -> None:
        """Start reconciling (this replica leads), beginning with every object the watches hold.

        While stopped the watches kept their objects current but the queue
        dropped their changes, so each one is looked at again now.
        """
        self.queue.start()
        for watch in self.watches.values():
            for obj in list(watch.informer.store.objects.values()):
                namespace, name = _key(obj)
                self.queue.add((watch.adapter.gvk, namespace, name))

    async def stop(self, *, watches: bool = True) -> None:
        """Stop reconciling; ``watches=False`` (leadership lost) keeps the watches for a later :meth:`start`.

        The watches only read the local cluster; the kinds they serve stay
        known to the MultiKueue check, and a standby that takes over starts
        from current objects.
        """
        await self.queue.stop()
        if watches:
            for name in list(self.watches):
                await self._stop(name)

    # -- reconciling ----------------------------------------------------------------------

    def _changed(self, adapter: GenericAdapter, obj: dict[str, Any]) -> None:
        namespace, name = _key(obj)
        self.queue.add((adapter.gvk, namespace, name))
        for listener in self._listeners:
            listener(adapter, obj)

    async def _handle(self, key: QueueKey) -> None:
        gvk, namespace, name = key
        watch = self.watches.get(gvk)
        obj = watch.get(namespace, name) if watch is not None else None
        if watch is not None and obj is not None:
            await self.reconcile(watch.adapter, obj)
        return None

    def _watch_for(self, api_version: str, kind: str) -> FrameworkWatch | None:
        for watch in self.watches.values():
            if (watch.adapter.api_version, watch.adapter.kind) == (api_version, kind):
                return watch
        return None

    def object_of(self, wl: Workload) -> tuple[GenericAdapter, dict[str, Any]] | None:
        """The external object ``wl`` belongs to (owner, or the object naming it as prebuilt)."""
        namespace = wl.namespace or ""
        for ref in wl.metadata.owner_references or []:
            owner = self._watch_for(ref.api_version, ref.kind)
            if owner is not None:
                obj = owner.get(namespace, ref.name)
                return (owner.adapter, obj) if obj is not None else None
        for watch in self.watches.values():
            bound = watch.bound_to(namespace, wl.name)
            if bound is not None:
                return watch.adapter, bound
        return None

    async def on_workload(self, wl: Workload) -> None:
        found = self.object_of(wl)
        if found is not None:
            adapter, obj = found
            self.queue.add((adapter.gvk, *_key(obj)))

    async def reconcile(self, adapter: GenericAdapter, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        wl = self.cache.workload((namespace, external.workload_name(adapter, obj)))
        try:
            priority_class = await self._off_loop(_checked_priority_class, adapter, obj)
            priority = self.cache.priority_class_value(priority_class) if priority_class else None
            action = await self._off_loop(external.decide, adapter, obj, wl, priority=priority, now=utcnow())
        except Exception as exc:  # noqa: BLE001 - tenant data: whatever it makes fail is reported on it
            self._invalid(adapter, obj, exc)
            return
        self._reported.pop((adapter.gvk, namespace, name), None)
        if action.step is external.ExternalStep.NONE:
            return
        kube = self.kube
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
                await self.writer.finish(wl, action.condition.to_dict())
            elif action.step is external.ExternalStep.RELEASE_HOLD and action.patch is not None:
                patch = {**action.patch, "metadata": {"resourceVersion": meta.get("resourceVersion")}}
                await kube.patch(adapter.ref, namespace, name, patch)
                self._object_event(adapter, obj, "Normal", "Started", action.message)
        except ApiException as exc:
            if exc.status in (404, 409):
                return
            log.error("external object reconcile failed", framework=adapter.gvk, object=f"{namespace}/{name}", step=action.step.value, status=exc.status, error=exc.reason)
            return
        log.debug("external object reconciled", framework=adapter.gvk, object=f"{namespace}/{name}", step=action.step.value, message=action.message)

    async def _off_loop(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn`` in a thread, its result abandoned after :data:`DECIDE_SECONDS` (TimeoutError)."""
        try:
            return await asyncio.wait_for(asyncio.to_thread(fn, *args, **kwargs), DECIDE_SECONDS)
        except asyncio.TimeoutError:
            raise TimeoutError(f"deciding about this object took longer than {DECIDE_SECONDS:g} s; abandoned") from None

    def _invalid(self, adapter: GenericAdapter, obj: Mapping[str, Any], exc: BaseException) -> None:
        """Log and post a Warning Event on ``obj`` for ``exc``, once per resourceVersion; nothing is done for it."""
        meta = obj.get("metadata") or {}
        namespace, name, version = meta.get("namespace", ""), meta.get("name", ""), str(meta.get("resourceVersion") or "")
        key = (adapter.gvk, namespace, name)
        if version and self._reported.get(key) == version:
            return
        self._reported[key] = version
        expected = isinstance(exc, CelEvaluationError | ValueError | TimeoutError)
        message = str(exc) if expected else f"{type(exc).__name__} on this object: {str(exc)[:300]}"
        message = message[:1000]
        (log.warning if expected else log.error)(
            "external object not handled: fix the object or the entry; it is looked at again when either changes",
            framework=adapter.gvk, object=f"{namespace}/{name}", resource_version=version,
            error_type=type(exc).__name__, error=message,
        )
        self._object_event(adapter, obj, "Warning", INVALID, message)

    def _object_event(self, adapter: GenericAdapter, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        ref = ObjectRef(adapter.api_version, adapter.kind, meta.get("namespace"), meta.get("name", ""), str(meta.get("uid") or ""))
        self.events.record(ref, type_, reason, message)


def _checked_priority_class(adapter: GenericAdapter, obj: Mapping[str, Any]) -> str | None:
    """The object within bounds (else ``CelEvaluationError``), then its priority class name."""
    adapter.check(obj)
    return adapter.priority_class(obj)


def _key(obj: Mapping[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace", ""), meta.get("name", ""))
