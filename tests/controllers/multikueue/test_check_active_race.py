"""Two refreshes of a check's ``Active`` condition racing: the last decision must be what stays written.

White-box (it drives ``ClusterManager``'s refresh directly, with a fake client whose first write is
slow): the race needs a write in flight while the health changes, which a real apiserver gives only
by chance (seen once in CI: a check left ``Active=False`` after a re-lead, its ClusterQueue inactive).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from multikueue.api import AdmissionCheck, MultiKueueConfig
from multikueue.controllers.multikueue import clusters as clusters_module
from multikueue.controllers.multikueue.checks import ClusterHealth
from multikueue.integrations.registry import IntegrationSet

pytestmark = pytest.mark.unit


class SlowFirstWrite:
    """Records status patches; the first one waits until released."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.release = asyncio.Event()

    async def patch(self, ref: Any, namespace: Any, name: str, body: dict[str, Any], status: bool = False) -> dict[str, Any]:
        if not self.written and not self.release.is_set():
            self.written.append("pending")
            await self.release.wait()
            self.written[0] = body["status"]["conditions"][0]["status"]
        else:
            self.written.append(body["status"]["conditions"][0]["status"])
        return {}


@pytest.mark.asyncio
async def test_a_newer_decision_is_never_overtaken_by_an_older_write_in_flight() -> None:
    kube = SlowFirstWrite()
    manager = clusters_module.ClusterManager(kube, IntegrationSet(), namespace="kueue-system", origin="o")  # type: ignore[arg-type]
    check = AdmissionCheck.from_k8s({
        "metadata": {"name": "mk"},
        "spec": {"controllerName": "kueue.x-k8s.io/multikueue",
                 "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "cfg"}},
        "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Active", "message": "The admission check is active",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    })  # fmt: skip
    manager._leading = True
    manager._checks["mk"] = check
    manager._configs["cfg"] = MultiKueueConfig.from_k8s({"metadata": {"name": "cfg"}, "spec": {"clusters": ["w"]}})
    health = {"w": ClusterHealth(False, "ClientConnectionFailed", "connecting")}
    manager._health = lambda: dict(health)  # type: ignore[method-assign]

    first = asyncio.create_task(manager._write_check_status(check))  # decides False while connecting
    await asyncio.sleep(0.01)
    health["w"] = ClusterHealth(True, "Active", "Connected")
    second = asyncio.create_task(manager._write_check_status(check))  # the connection came up: True
    await asyncio.sleep(0.01)
    kube.release.set()
    await asyncio.gather(first, second)
    assert kube.written == ["False", "True"], "the check ends Active as the health says now"
