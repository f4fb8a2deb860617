"""Two replicas with kopf peering: one acts, the other stands by and takes over."""

from __future__ import annotations

from pathlib import Path

import pytest

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters

pytestmark = pytest.mark.integration


def test_standby_replica_takes_over(
    integration_clusters: Clusters, integration_controller: ControllerProcess, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    k = o.Kueue(integration_clusters.manager)
    kubeconfig = integration_clusters.kubeconfigs[0]
    peering = ("--peering", f"ha-{ns}")
    integration_controller.stop()  # only the two peered replicas act in this test
    active = ControllerProcess("active", kubeconfig, "manager", tmp_path / "active.log", extra_args=(*peering, "--priority", "100"))
    standby = ControllerProcess("standby", kubeconfig, "manager", tmp_path / "standby.log", extra_args=(*peering, "--priority", "10"))
    try:
        active.start()
        standby.start()
        k.create(o.resource_flavor(f"default-{ns}"))
        k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 8}}))
        k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
        k.create(o.workload(ns, "first", "user-queue", {"cpu": "1"}))
        o.wait_for(lambda: o.is_true(k.get("Workload", "first", ns), "Admitted"), 30, what="first admitted")
        o.wait_for(lambda: f"{ns}/first" in active.logs(), 10, what="the active replica's log line")
        assert "quota reserved" not in standby.logs(), "the standby replica must not act"

        active.kill()
        k.create(o.workload(ns, "second", "user-queue", {"cpu": "1"}))
        o.wait_for(lambda: o.is_true(k.get("Workload", "second", ns), "Admitted"), 60, what="second admitted by the standby")
        # The log line follows the write the test just saw.
        o.wait_for(lambda: f"{ns}/second" in standby.logs(), 10, what="the standby replica's log line")
        assert standby.alive
    finally:
        active.stop()
        standby.stop()
        integration_controller.start()
