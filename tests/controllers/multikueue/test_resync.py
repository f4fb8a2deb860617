"""The MultiKueue controller's periodic resync and its restart with leadership (pure: a fake clock, no API).

The controller's queue is replaced by one on a :class:`FakeClock` whose
handler only records the keys, so the test sees exactly when each Workload
would be planned, and time moves only when the test moves it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio

from multikueue.api import Workload
from multikueue.api.meta import Condition
from multikueue.api.constants import Dispatcher
from multikueue.controllers.multikueue.workloads import RESYNC_SECONDS, DispatchSettings, MultiKueueController
from multikueue.core.cache import Cache
from multikueue.integrations.registry import IntegrationSet
from multikueue.runtime.workqueue import FakeClock, WorkQueue

pytestmark = pytest.mark.unit

CHECK = "mk"
WorkloadKey = tuple[str, str]


class StandInClusters:
    """What the controller asks the ClusterManager: which Workloads carry the MultiKueue check."""

    def on_topology(self, listener: Callable[[], None]) -> None:
        pass

    def on_remote(self, listener: Callable[..., None]) -> None:
        pass

    def check_of(self, wl: Workload) -> str | None:
        return CHECK if wl.admission_check(CHECK) is not None else None


def workload(name: str, *, check: bool = True) -> Workload:
    status: dict[str, Any] = {}
    if check:
        status["admissionChecks"] = [
            {"name": CHECK, "state": "Pending", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]
    return Workload.from_k8s(
        {
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {}}]},
            "status": status,
        }
    )


async def settle(rounds: int = 50) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


@dataclass
class Harness:
    controller: MultiKueueController
    cache: Cache
    clock: FakeClock
    handled: list[tuple[WorkloadKey, float]]

    def passes(self, since: float = 0.0) -> list[str]:
        """Names handled at or after clock time ``since``, in order."""
        return [key[1] for key, at in self.handled if at >= since]


@pytest_asyncio.fixture
async def harness() -> AsyncIterator[Harness]:
    cache = Cache()
    controller = MultiKueueController(
        cache,
        StandInClusters(),  # type: ignore[arg-type]
        IntegrationSet([]),
        None,  # type: ignore[arg-type]  # the recording handler below never applies a plan
        DispatchSettings(origin="manager", dispatcher=Dispatcher.ALL_AT_ONCE, worker_lost_timeout=timedelta(minutes=15)),
    )
    clock = FakeClock()
    handled: list[tuple[WorkloadKey, float]] = []

    async def record(key: WorkloadKey) -> float | None:
        handled.append((key, clock.now()))
        return None

    controller.queue = WorkQueue("multikueue", record, workers=4, clock=clock, urgent=controller.started)
    try:
        yield Harness(controller, cache, clock, handled)
    finally:
        await controller.stop()


@pytest.mark.asyncio
async def test_start_plans_every_workload_with_the_check_once(harness: Harness) -> None:
    for name in ("a", "b"):
        harness.cache.upsert_workload(workload(name))
    harness.cache.upsert_workload(workload("plain", check=False))
    harness.controller.start()
    await settle()
    assert sorted(harness.passes()) == ["a", "b"]


@pytest.mark.asyncio
async def test_every_workload_is_planned_again_each_period_without_any_event(harness: Harness) -> None:
    for name in ("a", "b"):
        harness.cache.upsert_workload(workload(name))
    harness.controller.start()
    await settle()
    assert len(harness.handled) == 2
    harness.clock.advance(RESYNC_SECONDS - 1)
    await settle()
    assert len(harness.handled) == 2, "nothing happens before the period is over"
    harness.clock.advance(1)
    await settle()
    harness.clock.advance(RESYNC_SECONDS / 2)  # a pass spreads its Workloads over half a period
    await settle()
    assert sorted(harness.passes(since=RESYNC_SECONDS)) == ["a", "b"]
    harness.cache.upsert_workload(workload("c"))  # no event reaches the controller for it
    harness.clock.advance(RESYNC_SECONDS / 2)
    await settle()
    harness.clock.advance(RESYNC_SECONDS / 2)
    await settle()
    assert sorted(harness.passes(since=2 * RESYNC_SECONDS)) == ["a", "b", "c"]


@pytest.mark.asyncio
async def test_an_event_plans_only_its_workload(harness: Harness) -> None:
    """The per-event work is one key, not a scan; the scan is once per period."""
    for name in ("a", "b", "c"):
        harness.cache.upsert_workload(workload(name))
    harness.controller.start()
    await settle()
    harness.controller.workload_changed(workload("b"))
    await settle()
    assert harness.passes()[3:] == ["b"]


@pytest.mark.asyncio
async def test_a_stopped_controller_plans_nothing_and_a_restart_replans_everything(harness: Harness) -> None:
    """Leadership lost, then regained: nothing runs meanwhile, and the events missed are made up for."""
    harness.cache.upsert_workload(workload("a"))
    harness.controller.start()
    await settle()
    await harness.controller.stop()
    harness.cache.upsert_workload(workload("b"))
    harness.controller.workload_changed(workload("b"))  # dropped: the queue is stopped
    harness.clock.advance(3 * RESYNC_SECONDS)
    await settle()
    assert harness.passes() == ["a"], "a stopped controller neither handles events nor resyncs"
    harness.controller.start()
    await settle()
    assert sorted(harness.passes(since=3 * RESYNC_SECONDS)) == ["a", "b"]
    harness.clock.advance(RESYNC_SECONDS)
    await settle()
    harness.clock.advance(RESYNC_SECONDS / 2)  # the pass spreads its Workloads over half a period
    await settle()
    assert sorted(harness.passes(since=4 * RESYNC_SECONDS)) == ["a", "b"], "the periodic resync runs again"


@pytest.mark.asyncio
async def test_what_was_started_is_planned_ahead_of_what_is_not(harness: Harness) -> None:
    """A Workload placed on a worker (its job runs there) and one finished here (its copies to delete)
    go ahead of the Workloads still being dispatched, even ones whose events came first."""
    for name in ("a", "b", "c", "d", "e"):
        harness.cache.upsert_workload(workload(name))
    harness.controller.start()
    await settle()
    placed, finished = workload("e"), workload("c")
    placed.status.cluster_name = "worker1"
    finished.status.conditions = [Condition(type="Finished", status="True", reason="Succeeded")]
    harness.cache.upsert_workload(placed)
    harness.cache.upsert_workload(finished)
    for name in ("a", "b", "c", "d", "e"):  # in one go: the queue hands them out only after
        harness.controller.schedule(("ns", name))
    await settle()
    assert harness.passes()[5:7] == ["c", "e"]
    assert sorted(harness.passes()[5:]) == ["a", "b", "c", "d", "e"]
