"""What a standby replica runs: kopf's watches feed its cache, and nothing it registers with kopf writes."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest
from kubernetes import client

from multikueue.api.configuration import load_configuration
from multikueue.operator.wiring import Settings, build
from multikueue.runtime.events import EventRecorder
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.leaderelection import Stopped, lead_alone

pytestmark = pytest.mark.unit


def controller(role: str = "manager") -> Any:
    kube = AsyncKube(client.ApiClient(client.Configuration()), workers=1)
    config = load_configuration(None).config
    return build(kube, EventRecorder(kube), Settings(role, "kueue-system", "cm", config, webhooks=True))


@pytest.mark.parametrize("role", ["manager", "worker"])
def test_kopf_gets_no_handler_that_would_write(role: str) -> None:
    """No daemon or timer (kopf puts a finalizer on their objects), no change handler (progress annotations)."""
    registry = kopf.OperatorRegistry()
    controller(role).register(registry)
    assert registry._spawning.get_all_handlers() == []
    assert registry._changing.get_all_handlers() == []
    assert registry._indexing.get_all_handlers(), "the feeds index"
    assert registry._watching.get_all_handlers(), "the event handlers"


def test_workload_events_change_nothing_while_standing_by() -> None:
    ctl = controller()
    ctl._workload_changed(("ns", "a"))
    assert len(ctl.lifecycle_queue) == 0, "a standby queues no lifecycle transition"
    ctl.leading = True
    ctl._workload_changed(("ns", "a"))
    assert list(ctl.lifecycle_queue.waiting()) == [("ns", "a")]


@pytest.mark.asyncio
async def test_leading_alone_starts_at_once_and_stops_at_shutdown() -> None:
    events: list[str] = []

    async def lead(stopped: Stopped) -> None:
        events.append("lead")
        await stopped.wait()
        events.append(f"stopped: {stopped.reason}")

    stop = asyncio.Event()
    task = asyncio.create_task(lead_alone(lead, stop))
    await asyncio.sleep(0.05)
    assert events == ["lead"]
    stop.set()
    await asyncio.wait_for(task, 2)
    assert events == ["lead", "stopped: shutdown"]


def test_deletions_seen_while_standing_by_are_kept_for_the_multikueue_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from multikueue.operator import wiring

    monkeypatch.setattr(wiring, "STANDBY_DELETIONS_KEPT", 2)
    ctl = controller()
    for name in ("a", "b", "a", "c"):
        ctl._workload_deleted(("ns", name))
    assert list(ctl.standby_deletions) == [("ns", "a"), ("ns", "c")], "the most recent, bounded"
    ctl.leading = True
    ctl._workload_deleted(("ns", "d"))
    assert ("ns", "d") not in ctl.standby_deletions
