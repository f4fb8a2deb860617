"""Kubernetes Events about the objects the controller acts on.

Events are posted in the background from a bounded queue: a transition is
never slowed down or failed by its Event, and under a burst the oldest
pending Events are dropped (with a log line) rather than growing memory.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

import structlog

from multikueue.runtime.kube import AsyncKube

log = structlog.get_logger(__name__)

COMPONENT = "multikueue"


@dataclass(frozen=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str | None
    name: str
    uid: str | None = None

    @classmethod
    def of(cls, obj: dict[str, Any]) -> "ObjectRef":
        meta = obj.get("metadata", {})
        return cls(obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace"), meta.get("name", ""), meta.get("uid"))


#: Where an Event about a cluster-scoped object goes (a ClusterQueue's, a cluster-scoped external kind's): the API
#: server accepts one whose ``involvedObject`` has no namespace only in ``default`` (or in none), as client-go's
#: recorder posts them; ``kubectl describe`` finds them there.
CLUSTER_SCOPED_EVENTS_NAMESPACE = "default"


class EventRecorder:
    def __init__(self, kube: AsyncKube, capacity: int = 5000) -> None:
        self._kube = kube
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=capacity)
        self._tasks: list[asyncio.Task[None]] = []
        self.dropped = 0

    def start(self, posters: int = 2) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._run(), name=f"event poster {i}") for i in range(posters)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks = []

    def record(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        namespace = ref.namespace or CLUSTER_SCOPED_EVENTS_NAMESPACE
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref.name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": ref.api_version,
                "kind": ref.kind,
                "name": ref.name,
                "namespace": ref.namespace,
                "uid": ref.uid,
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": now[:19] + "Z",
            "lastTimestamp": now[:19] + "Z",
            "count": 1,
        }
        try:
            self._queue.put_nowait(body)
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.warning("events dropped", dropped=self.dropped, reason=reason)

    async def _run(self) -> None:
        while True:
            body = await self._queue.get()
            try:
                await self._kube.create_event(body["metadata"]["namespace"], body)
            except Exception as exc:  # noqa: BLE001 - an Event must never break the controller
                log.debug("event not posted", reason=body["reason"], error=str(exc))
