"""The watches feeding the core cache.

Workloads come through our own :class:`~multikueue.runtime.informer.Informer`
(:class:`WorkloadFeed`); every other kind through kopf. Workloads are the
kind with thousands of objects and several events each: kopf's per-event
machinery (handler state, keyword arguments, per-object memories, two
handlers per event) was a quarter of the controller's busy time under
upstream's scalability load, against a few per cent for the parse itself.

For the other kinds a kopf *indexer* parses each object into its pydantic
model and puts it into the :class:`~multikueue.core.cache.Cache`. kopf runs
indexers for the whole initial listing of every indexed kind before it runs
any other handler or daemon; the Workload feed has its own ``synced`` flag,
and the controller counts its cache synced only once both are (a restart
never admits against half-known usage). Deletions arrive through
``on.event`` handlers (indexers do not see them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf
import structlog
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
from multikueue.api.constants import GROUP, VERSION
from multikueue.api.meta import without_managed_fields
from multikueue.api.resources import WORKLOADS
from multikueue.core.cache import Cache
from multikueue.runtime import metrics
from multikueue.runtime.informer import DELETED, Informer, object_key
from multikueue.runtime.kube import AsyncKube

log = structlog.get_logger(__name__)

WorkloadKey = tuple[str, str]


def _parse(model: type[KueueObject], body: Mapping[str, Any], *, owned: bool = False) -> KueueObject | None:
    """``body`` as ``model``, or None (logged) when it does not parse; ``owned`` as :meth:`KueueObject.from_k8s`'s."""
    try:
        return model.from_k8s(without_managed_fields(body), owned=owned)
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
    notify: Callable[[], None],
    model: type[KueueObject],
    upsert: Callable[[Any], None],
    delete: Callable[[Mapping[str, Any]], None],
) -> None:
    """Keep the cache's copy of ``model`` objects current."""

    async def index(body: kopf.Body, **_: Any) -> None:
        obj = _parse(model, body)
        if obj is not None:
            upsert(obj)
            notify()

    async def forget(event: kopf.RawEvent, **_: Any) -> None:
        if event.get("type") == "DELETED":
            delete(event["object"]["metadata"])
            notify()

    kopf.index(GROUP, VERSION, model.plural, registry=registry, id=f"feed_{model.plural}")(index)
    kopf.on.event(GROUP, VERSION, model.plural, registry=registry, id=f"forget_{model.plural}")(forget)


def register_feeds(
    registry: kopf.OperatorRegistry,
    cache: Cache,
    notify: Callable[[], None],
) -> None:
    """Feed every kind the scheduler reads but Workloads (:class:`WorkloadFeed`); ``notify`` wakes the scheduling loop."""
    _feed(registry, notify, ResourceFlavor, cache.upsert_flavor, lambda m: cache.delete_flavor(m["name"]))
    _feed(registry, notify, ClusterQueue, cache.upsert_cluster_queue, lambda m: cache.delete_cluster_queue(m["name"]))
    _feed(registry, notify, Cohort, cache.upsert_cohort, lambda m: cache.delete_cohort(m["name"]))
    _feed(
        registry, notify, LocalQueue, cache.upsert_local_queue, lambda m: cache.delete_local_queue(m["namespace"], m["name"])
    )
    _feed(
        registry, notify, WorkloadPriorityClass, cache.upsert_priority_class, lambda m: cache.delete_priority_class(m["name"])
    )
    _feed(
        registry, notify, AdmissionCheck, cache.upsert_admission_check, lambda m: cache.delete_admission_check(m["name"])
    )

    @kopf.index("scheduling.k8s.io", "v1", "priorityclasses", registry=registry, id="feed_priorityclasses")
    async def index_pod_priority_class(name: str, body: kopf.Body, **_: Any) -> None:
        value = body.get("value")
        if isinstance(value, int):
            cache.upsert_pod_priority_class(name, value, bool(body.get("globalDefault")))

    @kopf.on.event("scheduling.k8s.io", "v1", "priorityclasses", registry=registry, id="forget_priorityclasses")
    async def forget_pod_priority_class(event: kopf.RawEvent, name: str, **_: Any) -> None:
        if event.get("type") == "DELETED":
            cache.delete_pod_priority_class(name)

    @kopf.index("", "v1", "namespaces", registry=registry, id="feed_namespaces")
    async def index_namespace(name: str, labels: Mapping[str, str], **_: Any) -> None:
        cache.upsert_namespace(name, dict(labels))
        notify()

    @kopf.on.event("", "v1", "namespaces", registry=registry, id="forget_namespaces")
    async def forget_namespace(event: kopf.RawEvent, name: str, **_: Any) -> None:
        if event.get("type") == "DELETED":
            cache.delete_namespace(name)
            notify()


class WorkloadFeed:
    """Workloads into the cache, from one list + watch of our own.

    Each event is parsed once (by orjson in the watch thread, then
    into the model) and put into the cache; then ``changed`` or ``deleted``
    is told the key, and ``notify`` wakes the scheduling loop. ``changed`` is
    synchronous: whoever acts on a change (the lifecycle) queues the key and
    reads the cache when it gets to it, so a burst of events on one Workload
    costs one handling. The informer keeps only the keys (the cache holds
    the parse), enough to hand over the deletions a relist reveals.
    """

    def __init__(
        self,
        kube: AsyncKube,
        cache: Cache,
        notify: Callable[[], None],
        *,
        changed: Callable[[WorkloadKey], None],
        deleted: Callable[[WorkloadKey], None],
    ) -> None:
        self.cache = cache
        self.notify = notify
        self.changed = changed
        self.deleted = deleted
        self.informer = Informer(kube, WORKLOADS, self._event, keep_objects=False, cluster="local")

    @property
    def synced(self) -> asyncio.Event:
        """Set once the first listing is in the cache."""
        return self.informer.synced

    def start(self) -> None:
        self.informer.start()

    async def stop(self) -> None:
        await self.informer.stop()

    def _released(self, held: bool, key: WorkloadKey) -> None:
        """Observe how long an event that ended the Workload's quota waited before the cache freed it."""
        read_at = self.informer.event_read_at
        if held and read_at is not None and not self.cache.holds_quota(key):
            metrics.QUOTA_RELEASE_DELAY.observe(max(0.0, time.monotonic() - read_at))

    def _event(self, event_type: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        held = self.cache.holds_quota(key)
        if event_type == DELETED:
            self.cache.delete_workload(key)
            self._released(held, key)
            self.deleted(key)
            self.notify()
            return
        version = (obj.get("metadata") or {}).get("resourceVersion")
        cached = self.cache.workload(key)
        if cached is None or version is None or cached.metadata.resource_version != version:
            # The informer keeps no object (only keys) and hands each decoded line to this one consumer.
            workload = _parse(Workload, obj, owned=True)
            if workload is None:
                return
            self.cache.upsert_workload(workload)
            self._released(held, key)
        # else: the echo of a write of ours, whose answer the writer already put into the cache (a second
        # parse of the same resourceVersion would change nothing); most Workload events under load are these.
        self.notify()
        self.changed(key)
