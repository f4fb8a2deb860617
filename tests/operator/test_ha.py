"""Two replicas electing a leader on a Lease: one acts, the other stands by (warm cache, no writes) and takes over."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from multikueue.api.meta import format_micro_time
from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess, lease_holder
from multikueue.dev.pytest_plugin import Clusters

pytestmark = pytest.mark.integration

#: Where the replicas' Lease lives (the controller's namespace).
LEASE_NAMESPACE = "kueue-system"


def hand_lease_to(api: client.ApiClient, name: str, identity: str) -> None:
    """Write ``identity`` into the Lease as its holder, renewed now (an administrator forcing a hand-off)."""
    now = format_micro_time(datetime.now(UTC))
    client.CoordinationV1Api(api).patch_namespaced_lease(
        name, LEASE_NAMESPACE, {"spec": {"holderIdentity": identity, "renewTime": now, "acquireTime": now}}
    )


def test_standby_replica_takes_over(
    integration_clusters: Clusters, integration_controller: ControllerProcess, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    k = o.Kueue(integration_clusters.manager)
    kubeconfig = integration_clusters.kubeconfigs[0]
    lease = f"ha-{ns}"
    # DEBUG: the per-Workload lines looked for below ("quota reserved", "remote workload created") are at debug.
    election = ("--leader-elect", "--leader-election-id", lease, "--controller-log-level", "DEBUG")
    integration_controller.stop()  # only the two electing replicas act in this test
    active = ControllerProcess("active", kubeconfig, "manager", tmp_path / "active.log", extra_args=election)
    standby = ControllerProcess("standby", kubeconfig, "manager", tmp_path / "standby.log", extra_args=election)
    api = integration_clusters.manager
    try:
        active.start()
        o.wait_for(lambda: lease_holder(api, LEASE_NAMESPACE, lease) == active.identity(), 30, what="the first replica holding the Lease")
        standby.start()
        assert standby.ready(), "a standby with a synced cache is ready"
        k.create(o.resource_flavor(f"default-{ns}"))
        k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 8}}))
        k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
        k.create(o.workload(ns, "first", "user-queue", {"cpu": "1"}))
        o.wait_for(lambda: o.is_true(k.get("Workload", "first", ns), "Admitted"), 30, what="first admitted")
        o.wait_for(lambda: f"{ns}/first" in active.logs(), 10, what="the active replica's log line")
        assert "quota reserved" not in standby.logs(), "the standby replica must not act"

        killed = time.monotonic()
        active.kill()
        k.create(o.workload(ns, "second", "user-queue", {"cpu": "1"}))
        o.wait_for(lambda: lease_holder(api, LEASE_NAMESPACE, lease) == standby.identity(), 30, what="the standby holding the Lease")
        assert time.monotonic() - killed < 17, "taken over once the Lease expired (15 s after the last renewal)"
        o.wait_for(lambda: o.is_true(k.get("Workload", "second", ns), "Admitted"), 60, what="second admitted by the standby")
        # The log line follows the write the test just saw.
        o.wait_for(lambda: f"{ns}/second" in standby.logs(), 10, what="the standby replica's log line")
        assert standby.alive

        # SIGTERM: the leader stops acting, releases the Lease and exits 0 within seconds.
        assert standby.process is not None and standby.process.popen is not None
        popen = standby.process.popen
        stopping = time.monotonic()
        standby.stop()
        assert time.monotonic() - stopping < 10 and popen.returncode == 0, popen.returncode
        assert "Lease released" in standby.logs()
        assert lease_holder(api, LEASE_NAMESPACE, lease) is None, "released: the next replica need not wait"
    finally:
        active.stop()
        standby.stop()
        integration_controller.start()


#: Written by the replica that loses the lead once everything that acts has stopped (operator/wiring.py).
RELEASED = "leadership released"
#: What only an acting replica writes in its log.
WRITES = ("remote workload created", "quota reserved")


def test_a_replica_that_loses_the_lead_stops_acting_and_the_new_leader_dispatches(
    integration_clusters: Clusters,
    integration_controller: ControllerProcess,
    multikueue_setup: Any,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Hand-off to a live replica: the Lease is given to a standby; the old leader keeps running but makes no write."""
    ns = namespace
    k = o.Kueue(integration_clusters.manager)
    worker = o.Kueue(integration_clusters.worker(1))
    kubeconfig = integration_clusters.kubeconfigs[0]
    lease = f"handoff-{ns}"
    # DEBUG: the per-Workload lines looked for below ("quota reserved", "remote workload created") are at debug.
    election = ("--leader-elect", "--leader-election-id", lease, "--controller-log-level", "DEBUG")
    webhook_port = integration_controller.webhook_port
    integration_controller.stop()  # only the two electing replicas act in this test
    # The old leader serves the Job webhooks in the integration controller's place (same port).
    old = ControllerProcess(
        "old", kubeconfig, "manager", tmp_path / "old.log", extra_args=election, webhooks=True, webhook_port=webhook_port
    )
    new = ControllerProcess("new", kubeconfig, "manager", tmp_path / "new.log", extra_args=election)
    cluster, config, check = f"w1-{ns}", f"cfg-{ns}", f"mk-{ns}"
    try:
        old.start()
        multikueue_setup.put_cluster(cluster, "worker1-secret")
        multikueue_setup.put_config(config, [cluster])
        multikueue_setup.put_check(check, config)
        k.create(o.resource_flavor(f"default-{ns}"))
        k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 8}}, checks=[check]))
        k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
        o.wait_for(lambda: o.is_true(k.get("AdmissionCheck", check), "Active"), 60, what="check active")
        jobs = client.BatchV1Api(integration_clusters.manager)
        jobs.create_namespaced_job(ns, o.batch_job(ns, "first", "user-queue", {"cpu": "1"}, managed_by="kueue.x-k8s.io/multikueue"))
        o.wait_for(lambda: len(worker.list("Workload", ns)) == 1, 60, what="the first copy on the worker")
        o.wait_for(lambda: "remote workload created" in old.logs(), 10, what="the old leader's log line")

        new.start()
        time.sleep(3)  # a standby, fed by the watches: it writes nothing
        assert "leading: controllers started" not in new.logs()
        new_identity = new.identity()
        assert new_identity is not None
        hand_lease_to(integration_clusters.manager, lease, new_identity)
        o.wait_for(lambda: RELEASED in old.logs(), 60, what="the old leader releasing the lead")
        released_at = old.logs().index(RELEASED)
        # Anywhere in its log: it has led once so far (a window before the release would depend on how much it logs).
        assert "worker connections stopped" in old.logs(), "the worker connections are closed"

        jobs.create_namespaced_job(ns, o.batch_job(ns, "second", "user-queue", {"cpu": "1"}, managed_by="kueue.x-k8s.io/multikueue"))
        o.wait_for(lambda: len(worker.list("Workload", ns)) == 2, 60, what="the second copy, made by the new leader")
        o.wait_for(lambda: "remote workload created" in new.logs(), 10, what="the new leader's log line")
        after = old.logs()[released_at:]
        for line in after.splitlines():
            assert not any(w in line for w in WRITES), f"the old leader wrote after the hand-off: {line}"
        assert old.alive and new.alive
        # The first Workload was not dispatched twice: one copy per Job.
        assert len(worker.list("Workload", ns)) == 2

        # While the old leader stands by, a Workload is deleted: its watches (warm cache) tell it.
        [first] = [w for w in k.list("Workload", ns) if w["metadata"]["name"].startswith("job-first-")]
        # Else the Job integration makes its Workload again; Background, as the default for Jobs (orphan)
        # leaves the Job terminating for good on these clusters (no garbage collector).
        jobs.delete_namespaced_job("first", ns, propagation_policy="Background")
        k.delete("Workload", first["metadata"]["name"], ns)
        o.wait_for(lambda: k.get_or_none("Workload", first["metadata"]["name"], ns) is None, 60, what="the first Workload gone")
        released = time.monotonic()
        new.stop()  # a graceful exit releases the Lease: the old replica takes it at its next try
        o.wait_for(lambda: old.logs().count("leading: controllers started") == 2, 60, what="the old replica leading again")
        assert time.monotonic() - released < 15, "taken over without waiting for the Lease to expire"
        assert "Lease released" in new.logs()
        caught_up = [line for line in old.logs().splitlines() if "cache caught up" in line]
        # The standby's cache saw the deletion: nothing left to forget.
        assert len(caught_up) == 2 and '"forgotten": 0' in caught_up[1], caught_up
        jobs.create_namespaced_job(ns, o.batch_job(ns, "third", "user-queue", {"cpu": "1"}, managed_by="kueue.x-k8s.io/multikueue"))
        o.wait_for(
            lambda: any(w["metadata"]["name"].startswith("job-third-") for w in worker.list("Workload", ns)),
            60,
            what="the third copy, made by the old replica leading again",
        )
        assert not any(w["metadata"]["name"] == first["metadata"]["name"] for w in worker.list("Workload", ns)), (
            "no copy of the deleted Workload is made again"
        )
    finally:
        old.stop()
        new.stop()
        for kind, name in (("AdmissionCheck", check), ("MultiKueueConfig", config), ("MultiKueueCluster", cluster)):
            try:
                k.delete(kind, name)
            except Exception:  # noqa: BLE001 - best-effort clean-up of cluster-scoped objects
                pass
        integration_controller.start()
