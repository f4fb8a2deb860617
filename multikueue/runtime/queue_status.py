"""ClusterQueue and LocalQueue status: counters, flavor usage, ``Active``.

The views come from the core cache; this module only turns them into status
patches and writes those that changed. The last written body per queue is
remembered so a quiet system makes no writes at all, and the object's own
status (as last seen) is compared too, so a restart does not rewrite every
queue.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import structlog
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from multikueue.api.constants import ACTIVE, ConditionStatus
from multikueue.api.meta import Condition, find_condition
from multikueue.core.cache import Cache
from multikueue.runtime import metrics
from multikueue.runtime.kube import AsyncKube
from multikueue.api.resources import CLUSTER_QUEUES, LOCAL_QUEUES

log = structlog.get_logger(__name__)


def _active_condition(current: list[Condition] | None, active: bool, reason: str, message: str) -> dict[str, Any]:
    status = ConditionStatus.TRUE if active else ConditionStatus.FALSE
    previous = find_condition(current, ACTIVE)
    when = (
        previous.last_transition_time
        if previous is not None and previous.status == status
        else datetime.now(timezone.utc)
    )
    return Condition(type=ACTIVE, status=status, reason=reason, message=message, last_transition_time=when).to_dict()


def _comparable(status: dict[str, Any]) -> dict[str, Any]:
    """The status without timestamps, to decide whether anything changed."""
    out = dict(status)
    out["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions", [])]
    return out


class QueueStatusWriter:
    def __init__(self, kube: AsyncKube, cache: Cache) -> None:
        self.kube = kube
        self.cache = cache
        self._written: dict[tuple[str, str, str], dict[str, Any]] = {}

    async def sync(self) -> None:
        for name in list(self.cache.cluster_queue_names()):
            cq = self.cache.cluster_queue(name)
            view = self.cache.cluster_queue_status(name)
            if cq is None or view is None:
                continue
            metrics.PENDING_WORKLOADS.labels(name).set(view.pending_workloads)
            metrics.RESERVING_WORKLOADS.labels(name).set(view.reserving_workloads)
            status = {
                "conditions": [_active_condition(cq.status.conditions, view.active, view.reason, view.message)],
                **view.status_fields(),
            }
            await self._write(("cq", "", name), cq.status.to_dict(), status)
        for namespace, name in list(self.cache.local_queue_keys()):
            lq = self.cache.local_queue(namespace, name)
            view = self.cache.local_queue_status(namespace, name)
            if lq is None or view is None:
                continue
            status = {
                "conditions": [_active_condition(lq.status.conditions, view.active, view.reason, view.message)],
                **view.status_fields(),
            }
            await self._write(("lq", namespace, name), lq.status.to_dict(), status)

    async def _write(self, key: tuple[str, str, str], seen: dict[str, Any], status: dict[str, Any]) -> None:
        wanted = _comparable(status)
        if self._written.get(key) == wanted:
            return
        current = {k: seen.get(k) for k in status}
        current["conditions"] = seen.get("conditions", [])
        if _comparable(current) == wanted:
            self._written[key] = wanted
            return
        kind, namespace, name = key
        ref = CLUSTER_QUEUES if kind == "cq" else LOCAL_QUEUES
        try:
            await self.kube.patch(ref, namespace or None, name, {"status": status}, status=True)
            self._written[key] = wanted
        except ApiException as exc:
            if exc.status != 404:
                log.warning("queue status not written", queue=name, kind=kind, status=exc.status, error=exc.reason)
        except HTTPError as exc:  # unreachable API server: the next sync writes it
            log.warning("queue status not written: API server unreachable", queue=name, kind=kind, error=str(exc)[:200])
