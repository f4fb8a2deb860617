"""ConfigMap reload: the external frameworks follow the controller's ConfigMap live.

The ``multiKueue.externalFrameworks`` entries are compiled by
:mod:`.entries`; each valid entry's kind is looked up by discovery (its
plural and scope) and handed to the :class:`~.reconciler.ExternalReconciler`,
which starts, restarts or stops its watch. An added, changed or removed
entry takes effect without a restart, and Workloads already dispatched keep
going (the MultiKueue check just sees a different set of integrations).

Problems (a bad entry, a kind the API server does not serve, a document that
is not YAML) are logged and posted as Warning Events on the ConfigMap; the
other entries keep working, and a bad document keeps what runs now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import structlog
from kubernetes.client.rest import ApiException

from multikueue.api.configuration import CONFIG_KEY, ConfigurationError, load_configuration
from multikueue.api.resources import CONFIG_MAPS, ResourceRef
from multikueue.integrations.external.entries import CompiledFramework, FrameworkProblem, load_frameworks
from multikueue.integrations.external.reconciler import ExternalReconciler
from multikueue.runtime.events import EventRecorder, ObjectRef
from multikueue.runtime.informer import DELETED, Informer
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.tasks import cancel_and_wait

log = structlog.get_logger(__name__)

#: What a load activated: entry name -> (compiled entry, the kind's resource as discovered).
Active = Mapping[str, tuple[CompiledFramework, ResourceRef]]


class FrameworkLoader:
    """Turns the ConfigMap's entries into watched kinds, and reports what cannot be used."""

    def __init__(
        self, kube: AsyncKube, events: EventRecorder, reconciler: ExternalReconciler, *, namespace: str, config_map: str
    ) -> None:
        self.kube = kube
        self.events = events
        self.reconciler = reconciler
        self.namespace = namespace
        self.config_map = config_map
        self._last_problems: tuple[str, ...] = ()
        self._informer: Informer | None = None
        self._worker: asyncio.Task[None] | None = None
        self._events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        #: The entries in use since the last load (their kinds resolved).
        self.active: dict[str, tuple[CompiledFramework, ResourceRef]] = {}
        self._listeners: list[Callable[[Active], Awaitable[Any]]] = []

    def on_loaded(self, listener: Callable[[Active], Awaitable[Any]]) -> None:
        """Await ``listener(active)`` after every load (the manager's webhooks follow the entries)."""
        self._listeners.append(listener)

    def start(self) -> None:
        """Reload on every change of the ConfigMap (only the external frameworks; other settings need a restart).

        The ConfigMap is watched by name in the controller's namespace (a
        field selector), so the controller needs no access to other
        namespaces' ConfigMaps. Its events are applied one at a time, in
        order, from a queue of their own (a slow discovery must not let an
        older document win over a newer one). Runs in every replica: the
        external frameworks' watches only read.
        """
        if self._informer is not None:
            return
        self._informer = Informer(
            self.kube,
            CONFIG_MAPS,
            self._on_event,
            namespace=self.namespace,
            field_selector=f"metadata.name={self.config_map}",
            cluster="local",
        )
        self._informer.start()
        self._worker = asyncio.create_task(self._apply_events(), name="configuration reload")

    async def stop(self) -> None:
        if self._informer is not None:
            await self._informer.stop()
            self._informer = None
        await cancel_and_wait(self._worker)
        self._worker = None

    def _on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        self._events.put_nowait((event_type, obj))

    async def _apply_events(self) -> None:
        while True:
            event_type, obj = await self._events.get()
            try:
                if event_type == DELETED:
                    await self.load([])
                else:
                    await self.reload_from_configmap(obj)
            except Exception:  # noqa: BLE001 - the next change of the ConfigMap is applied all the same
                log.exception("external frameworks not reloaded: fix the cause, then change the ConfigMap again",
                              configmap=f"{self.namespace}/{self.config_map}")

    async def reload_from_configmap(self, body: Mapping[str, Any]) -> None:
        """Apply the ConfigMap's document (watch event); a bad document keeps what runs now."""
        text = (body.get("data") or {}).get(CONFIG_KEY)
        try:
            loaded = load_configuration(text)
        except ConfigurationError as exc:
            self._report(body, [f"ConfigMap {self.namespace}/{self.config_map}: {exc}; keeping the previous external frameworks"])
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
        changed = await self.reconciler.apply(wanted)
        self.active = wanted
        for listener in self._listeners:
            await listener(wanted)
        self._report(source, problems)
        if changed:
            log.info("external frameworks", active=sorted(self.reconciler.watches), problems=len(problems))
        return problems

    async def _resolve(self, framework: CompiledFramework) -> ResourceRef:
        """The kind's plural and scope from discovery; LookupError when the API server does not serve it."""
        try:
            listing = await self.kube.discover(framework.group, framework.version)
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
            log.warning("external framework not used", problem=problem, configmap=f"{self.namespace}/{self.config_map}")
            if meta.get("uid"):
                ref = ObjectRef("v1", "ConfigMap", self.namespace, self.config_map, str(meta["uid"]))
                self.events.record(ref, "Warning", "InvalidExternalFramework", problem)

