"""Leader election on a Lease against a real kube-apiserver: two electors in this process.

Short timings (a 3 s lease, 2 s renew deadline, 0.25 s retry period) keep the
tests quick; the relations between them are those of the defaults.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes.client.rest import ApiException

from multikueue.api.resources import LEASES, ResourceRef
from multikueue.core.leaderelection import LeaseRecord, Timing
from multikueue.dev.pytest_plugin import Clusters
from multikueue.runtime.kube import AsyncKube, load_api_client
from multikueue.runtime.leaderelection import LeaderElector, Stopped

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

TIMING = Timing(lease_duration=3.0, renew_deadline=2.0, retry_period=0.25)
LEASE = "test-leader"


class FaultyKube(AsyncKube):
    """A real client whose calls can be made to fail (500) or to hang, as an API server that is unreachable would."""

    def __init__(self, path: Path) -> None:
        super().__init__(load_api_client(str(path), 4), workers=4)
        self.mode = "ok"

    async def _fault(self) -> None:
        if self.mode == "fail":
            raise ApiException(status=500, reason="injected")
        if self.mode == "hang":
            await asyncio.Event().wait()

    async def get(self, ref: ResourceRef, namespace: str | None, name: str) -> dict[str, Any]:
        await self._fault()
        return await super().get(ref, namespace, name)

    async def patch(self, ref: ResourceRef, namespace: str | None, name: str, patch: Any, **kwargs: Any) -> dict[str, Any]:
        await self._fault()
        return await super().patch(ref, namespace, name, patch, **kwargs)

    async def create(self, ref: ResourceRef, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        await self._fault()
        return await super().create(ref, namespace, body)


@dataclass
class Replica:
    """One elector, what its ``lead`` saw, and the task running it."""

    name: str
    kube: FaultyKube
    elector: LeaderElector
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    #: (event, monotonic time): "start" when lead began, "stop" when it returned.
    history: list[tuple[str, float]] = field(default_factory=list)

    @property
    def acting(self) -> bool:
        return bool(self.history) and self.history[-1][0] == "start"

    def started_at(self) -> list[float]:
        return [t for event, t in self.history if event == "start"]

    def stopped_at(self) -> list[float]:
        return [t for event, t in self.history if event == "stop"]

    def start(self) -> "Replica":
        self.task = asyncio.create_task(self.elector.run(self.stop))
        return self

    async def shutdown(self) -> None:
        self.stop.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, 10)
        await self.kube.close()


@pytest_asyncio.fixture
async def replicas(integration_clusters: Clusters, namespace: str) -> AsyncIterator[list[Replica]]:
    made: list[Replica] = []

    def make(name: str) -> Replica:
        kube = FaultyKube(integration_clusters.kubeconfigs[0])
        replica: Replica

        async def lead(stopped: Stopped) -> None:
            replica.history.append(("start", time.monotonic()))
            try:
                await stopped.wait()
            finally:
                replica.history.append(("stop", time.monotonic()))

        replica = Replica(name, kube, LeaderElector(kube, namespace=namespace, name=LEASE, identity=name, lead=lead, timing=TIMING))
        made.append(replica)
        return replica

    yield [make("replica-a"), make("replica-b")]
    for replica in made:
        replica.kube.mode = "ok"
        await replica.shutdown()


async def lease(kube: AsyncKube, namespace: str) -> LeaseRecord:
    return LeaseRecord.from_lease(await kube.get(LEASES, namespace, LEASE))


async def until(condition: Any, timeout: float, what: str) -> float:
    """Poll ``condition`` (sync) until true; the monotonic time it became true."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)
    return time.monotonic()


@pytest.mark.asyncio
async def test_one_leads_the_other_stands_by_and_a_release_hands_over_at_once(replicas: list[Replica], namespace: str) -> None:
    a, b = replicas
    a.start()
    await until(lambda: a.acting, 10, "a leading")
    b.start()
    await asyncio.sleep(TIMING.lease_duration + 1)  # longer than a lease: a renews, b stands by
    assert a.acting and not b.history, "only one replica acts"
    record = await lease(b.kube, namespace)
    assert record.holder == "replica-a" and record.lease_duration == 3
    first_transitions = record.transitions

    released = time.monotonic()
    await a.shutdown()  # stop acting, then release
    assert a.stopped_at() and a.stopped_at()[-1] <= released + 1
    took_over = await until(lambda: b.acting, 5, "b leading")
    assert took_over - released < TIMING.lease_duration, "a released Lease is taken without waiting for it to expire"
    assert b.started_at()[0] >= a.stopped_at()[-1], "b acts only once a has stopped"
    record = await lease(b.kube, namespace)
    assert record.holder == "replica-b" and record.transitions == first_transitions + 1


@pytest.mark.asyncio
async def test_a_leader_that_stops_renewing_is_replaced_after_the_lease_duration(replicas: list[Replica], namespace: str) -> None:
    a, b = replicas
    a.start()
    await until(lambda: a.acting, 10, "a leading")
    b.start()
    await asyncio.sleep(1)
    a.kube.mode = "hang"  # a's process is frozen or cut off: its calls never come back
    last = await lease(b.kube, namespace)
    await until(lambda: b.acting, TIMING.lease_duration + 3, "b leading")
    record = await lease(b.kube, namespace)
    assert record.holder == "replica-b"
    assert record.acquire_time is not None and last.renew_time is not None
    # Not before the Lease expired: at least the lease duration after a's last renewal (read before it froze).
    assert (record.acquire_time - last.renew_time).total_seconds() >= TIMING.lease_duration
    # a stopped acting at its renew deadline, before b could start.
    assert a.stopped_at() and a.stopped_at()[-1] < b.started_at()[0]


@pytest.mark.asyncio
async def test_a_leader_whose_renewals_fail_stops_acting_within_the_renew_deadline(replicas: list[Replica], namespace: str) -> None:
    a, b = replicas
    a.start()
    await until(lambda: a.acting, 10, "a leading")
    b.start()
    await asyncio.sleep(1)
    before = await lease(b.kube, namespace)
    failing_since = time.monotonic()
    a.kube.mode = "fail"  # every renewal answers 500
    stopped = await until(lambda: not a.acting, TIMING.renew_deadline + 1, "a to stop acting")
    # Its last successful renewal was at most one retry period before the failures began.
    assert stopped - failing_since <= TIMING.renew_deadline + 0.2
    assert not b.history, "b has not taken over yet: the Lease has not expired"
    await until(lambda: b.acting, TIMING.lease_duration + 2, "b leading")
    assert b.started_at()[0] > a.stopped_at()[-1]
    record = await lease(b.kube, namespace)
    assert record.holder == "replica-b" and record.transitions == before.transitions + 1

    # a's API comes back: it stands by (b holds the Lease) and does not act again.
    a.kube.mode = "ok"
    await asyncio.sleep(1)
    assert not a.acting and b.acting
