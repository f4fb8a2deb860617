"""The metrics endpoint of a running manager after a Job was dispatched to a worker and finished there.

The manager controller (``integration_controller``) runs against the
integration manager, our worker-role controller against worker1; the Job's
pods do not run (no kube controllers on these clusters), so the test plays
the worker's Job controller. Then ``/metrics`` is scraped and parsed, and
every series the dashboard (``config/grafana``) reads is checked with
upstream's labels.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
import urllib.request

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters

pytestmark = pytest.mark.integration

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by name: (labels, value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def find(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> list[float]:
    return [v for lbls, v in samples.get(name, []) if all(lbls.get(k) == want for k, want in labels.items())]


@pytest.fixture
def worker_controller(integration_clusters: Clusters, tmp_path: Path) -> Iterator[ControllerProcess]:
    """Our controller in the worker role on worker1."""
    ctl = ControllerProcess("worker1", integration_clusters.kubeconfigs[1], "worker", tmp_path / "worker1-controller.log").start()
    try:
        yield ctl
    finally:
        ctl.stop()


def _ago(seconds: int) -> str:
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_metrics_after_a_job_ran_on_a_worker(
    integration_clusters: Clusters, integration_controller: ControllerProcess, worker_controller: ControllerProcess, namespace: str
) -> None:
    ns = namespace
    manager, worker = o.Kueue(integration_clusters.manager), o.Kueue(integration_clusters.worker(1))
    check, mkconfig, cq = f"mk-{ns}", f"mkc-{ns}", f"cq-{ns}"
    manager.create({"apiVersion": f"{GROUP}/{VERSION}", "kind": "MultiKueueConfig", "metadata": {"name": mkconfig}, "spec": {"clusters": ["worker1"]}})
    manager.create({"apiVersion": f"{GROUP}/{VERSION}", "kind": "AdmissionCheck", "metadata": {"name": check},
                    "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {"apiGroup": GROUP, "kind": "MultiKueueConfig", "name": mkconfig}}})  # fmt: skip
    for k in (manager, worker):
        k.create(o.resource_flavor(f"default-{ns}"))
        k.create(o.cluster_queue(cq, {f"default-{ns}": {"cpu": 8}}, checks=[check] if k is manager else None))
        k.create(o.local_queue(ns, "user-queue", cq))
    o.wait_for(lambda: o.is_true(manager.get("AdmissionCheck", check), "Active"), 60, what="MultiKueue check active")

    batch, worker_batch = client.BatchV1Api(integration_clusters.manager), client.BatchV1Api(integration_clusters.worker(1))
    batch.create_namespaced_job(ns, o.batch_job(ns, "counted", "user-queue", {"cpu": "3"}, managed_by="kueue.x-k8s.io/multikueue"))
    # Too big for the queue: stays pending, inadmissible once the scheduler said why.
    batch.create_namespaced_job(ns, o.batch_job(ns, "too-big", "user-queue", {"cpu": "20"}, managed_by="kueue.x-k8s.io/multikueue"))

    def started_on_worker() -> bool:
        jobs = [j for j in worker_batch.list_namespaced_job(ns).items if j.metadata.name == "counted"]
        return bool(jobs) and jobs[0].spec.suspend is False

    o.wait_for(started_on_worker, 60, what="the Job started on worker1")
    port = integration_controller.metrics_port
    role = {"replica_role": "standalone"}

    # While it runs: usage against quota, admitted and pending Workloads, the worker's state.
    def running() -> dict[str, Any] | None:
        samples = scrape(port)
        usage = find(samples, "kueue_cluster_queue_resource_usage", cluster_queue=cq, resource="cpu", flavor=f"default-{ns}", cohort="", **role)
        inadmissible = find(samples, "kueue_pending_workloads", cluster_queue=cq, status="inadmissible", **role)
        return samples if usage == [3.0] and inadmissible == [1.0] else None

    samples = o.wait_for(running, 30, what="usage and pending gauges")
    assert find(samples, "kueue_cluster_queue_nominal_quota", cluster_queue=cq, resource="cpu", flavor=f"default-{ns}", cohort="", **role) == [8.0]
    assert find(samples, "kueue_cluster_queue_resource_reservation", cluster_queue=cq, resource="cpu", **role) == [3.0]
    assert find(samples, "kueue_pending_workloads", cluster_queue=cq, status="active", **role) == [0.0]
    assert find(samples, "kueue_admitted_active_workloads", cluster_queue=cq, **role) == [1.0]
    assert find(samples, "kueue_reserving_active_workloads", cluster_queue=cq, **role) == [1.0]
    assert find(samples, "kueue_cluster_queue_status", cluster_queue=cq, status="active", **role) == [1.0]
    assert find(samples, "mkpy_worker_cluster_active", cluster="worker1") == [1.0]
    counted = {"cluster_queue": cq, "priority_class": "", **role}
    assert find(samples, "kueue_quota_reserved_workloads_total", **counted) == [1.0]
    assert find(samples, "kueue_admitted_workloads_total", **counted) == [1.0]
    assert find(samples, "kueue_admission_wait_time_seconds_count", **counted) == [1.0]
    dispatched = {"cluster_queue": cq, "cluster": "worker1"}
    assert find(samples, "multikueue_workloads_dispatched_total", **dispatched, **role) == [1.0]
    assert find(samples, "multikueue_workloads_admitted_total", **dispatched, **role) == [1.0]
    [latency] = find(samples, "mkpy_dispatch_latency_seconds_sum", **dispatched)
    assert 0 < latency < 30
    assert find(samples, "mkpy_dispatch_latency_seconds_count", **dispatched) == [1.0]

    # The worker's Job succeeds; its status comes back and the Workload finishes: status-sync latency.
    before = sum(find(samples, "mkpy_status_sync_latency_seconds_count", cluster="worker1"))
    condition = {"status": "True", "reason": "CompletionsReached", "message": "done", "lastTransitionTime": _ago(0)}
    started = _ago(5)  # once: a second ticking between the two patches would change it, and startTime is immutable (422)
    worker_batch.patch_namespaced_job_status("counted", ns, {"status": {"startTime": started, "active": 1}})
    worker_batch.patch_namespaced_job_status("counted", ns, {"status": {
        "startTime": started, "completionTime": _ago(0), "active": None, "succeeded": 1, "uncountedTerminatedPods": {},
        "conditions": [{"type": "SuccessCriteriaMet", **condition}, {"type": "Complete", **condition}],
    }})  # fmt: skip
    o.wait_for(lambda: sum(find(scrape(port), "mkpy_status_sync_latency_seconds_count", cluster="worker1")) > before, 60,
               what="status-sync latency observed")  # fmt: skip
    # Quota released: usage back to 0.
    o.wait_for(lambda: find(scrape(port), "kueue_cluster_queue_resource_usage", cluster_queue=cq, resource="cpu", **role) == [0.0], 30,
               what="usage released")  # fmt: skip


def test_replica_role_follows_the_lease(integration_clusters: Clusters, integration_controller: ControllerProcess, namespace: str, tmp_path: Path) -> None:
    """The leader counts under replica_role="leader" and reports the queue gauges; the standby reports none until it leads."""
    from multikueue.dev.controllers import lease_holder

    ns = namespace
    k = o.Kueue(integration_clusters.manager)
    kubeconfig, api, lease = integration_clusters.kubeconfigs[0], integration_clusters.manager, f"metrics-{ns}"
    election = ("--leader-elect", "--leader-election-id", lease)
    integration_controller.stop()  # only the two electing replicas act in this test
    first = ControllerProcess("first", kubeconfig, "manager", tmp_path / "first.log", extra_args=election)
    second = ControllerProcess("second", kubeconfig, "manager", tmp_path / "second.log", extra_args=election)
    try:
        first.start()
        o.wait_for(lambda: lease_holder(api, "kueue-system", lease) == first.identity(), 30, what="the first replica leading")
        second.start()
        k.create(o.resource_flavor(f"default-{ns}"))
        k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 8}}))
        k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
        k.create(o.workload(ns, "wl", "user-queue", {"cpu": "1"}))
        cq = {"cluster_queue": f"cq-{ns}"}
        o.wait_for(lambda: find(scrape(first.metrics_port), "kueue_admitted_workloads_total", **cq, replica_role="leader") == [1.0], 30,
                   what="admission counted by the leader")  # fmt: skip
        # The gauges follow at the next queue-status sync (every half second while leading).
        o.wait_for(lambda: find(scrape(first.metrics_port), "kueue_reserving_active_workloads", **cq, replica_role="leader") == [1.0], 10,
                   what="the leader reporting the queue")  # fmt: skip
        standby = scrape(second.metrics_port)
        assert find(standby, "kueue_reserving_active_workloads", **cq) == [], "a standby reports no queue gauges"
        assert find(standby, "kueue_admitted_workloads_total", **cq) == []

        first.stop()  # SIGTERM releases the Lease: the standby takes over at once
        o.wait_for(lambda: find(scrape(second.metrics_port), "kueue_reserving_active_workloads", **cq, replica_role="leader") == [1.0], 30,
                   what="the new leader reporting the queue")  # fmt: skip
    finally:
        first.stop()
        second.stop()
        integration_controller.start()
