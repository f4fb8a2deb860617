"""kopf watches feeding the core cache.

A kopf *indexer* per kind parses each object into its pydantic model and
puts it into the :class:`~multikueue.core.cache.Cache`. kopf runs indexers
for the whole initial listing of every indexed kind before it runs any other
handler or daemon, so whatever acts later starts from a complete picture (a
restart never admits against half-known usage). Deletions arrive through
``on.event`` handlers (indexers do not see them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
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
from multikueue.core.cache import Cache

log = structlog.get_logger(__name__)

WorkloadKey = tuple[str, str]


def without_managed_fields(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """``body`` without ``metadata.managedFields`` (a shallow copy; ``body`` itself when it has none).

    The cache keeps every object for as long as it exists, and the field
    managers' records are about half of a Workload's size (11 of 24 KB for
    one the scalability runner finished); no decision reads them, and a
    write that omits them leaves the server's as they are.
    """
    meta = body.get("metadata")
    if not isinstance(meta, Mapping) or "managedFields" not in meta:
        return body
    return {**body, "metadata": {key: value for key, value in meta.items() if key != "managedFields"}}


def _parse(model: type[KueueObject], body: Mapping[str, Any]) -> KueueObject | None:
    try:
        return model.from_k8s(without_managed_fields(body))
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
            notify()

    async def forget(event: kopf.RawEvent, **_: Any) -> None:
        if event.get("type") == "DELETED":
            delete(event["object"]["metadata"])
            notify()
        elif then is not None:
            await then(event["object"]["metadata"])

    kopf.index(GROUP, VERSION, model.plural, registry=registry, id=f"feed_{model.plural}")(index)
    kopf.on.event(GROUP, VERSION, model.plural, registry=registry, id=f"forget_{model.plural}")(forget)


def register_feeds(
    registry: kopf.OperatorRegistry,
    cache: Cache,
    notify: Callable[[], None],
    *,
    workload_changed: Callable[[WorkloadKey], Awaitable[None]],
    workload_deleted: Callable[[WorkloadKey], None],
) -> None:
    """Feed every kind the scheduler reads; ``notify`` wakes the scheduling loop."""
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

    def deleted(meta: Mapping[str, Any]) -> None:
        key = (meta["namespace"], meta["name"])
        cache.delete_workload(key)
        workload_deleted(key)

    _feed(
        registry,
        notify,
        Workload,
        cache.upsert_workload,
        deleted,
        then=lambda m: workload_changed((m["namespace"], m["name"])),
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
