"""MultiKueue end to end: a Job submitted to the manager runs on a worker.

Three full local clusters with our controller on each (manager role on the
manager, worker role on the workers). The manager's queue has a MultiKueue
admission check whose config names both workers (the MultiKueueClusters and
their kubeconfig Secrets come from `multikueue dev clusters up`).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters
from multikueue.jobs.naming import workload_name_for_owner

pytestmark = pytest.mark.e2e

MANAGED_BY = "kueue.x-k8s.io/multikueue"


def job(namespace: str, name: str, cpu: str, run_for: str = "2s", parallelism: int = 1) -> dict[str, Any]:
    body = o.batch_job(namespace, name, "user-queue", {"cpu": cpu}, parallelism=parallelism)
    body["spec"]["template"]["metadata"] = {"annotations": {"multikueue.x-k8s.io/run-for": run_for}}
    return body


def setup_multikueue(clusters: Clusters, ns: str, worker_cpu: tuple[int, int] = (8, 8), manager_cpu: int = 1000) -> None:
    manager = o.Kueue(clusters.manager)
    check, config = f"mk-{ns}", f"mkc-{ns}"
    manager.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": config}, "spec": {"clusters": ["worker1", "worker2"]}})
    manager.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": check},
                    "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config}}})
    manager.create(o.resource_flavor(f"default-{ns}"))
    manager.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": manager_cpu}}, checks=[check]))
    manager.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    for index, cpu in enumerate(worker_cpu, start=1):
        worker = o.Kueue(clusters.worker(index))
        worker.create(o.resource_flavor(f"default-{ns}"))
        worker.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": cpu}}))
        worker.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    o.wait_for(lambda: o.is_true(manager.get("AdmissionCheck", check), "Active"), 60, what="MultiKueue check active")


def complete(batch: client.BatchV1Api, ns: str, name: str) -> bool:
    status = batch.read_namespaced_job(name, ns).status
    return any(c.type == "Complete" and c.status == "True" for c in status.conditions or [])


def test_job_submitted_to_manager_runs_on_a_worker(e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], namespace: str) -> None:
    ns = namespace
    setup_multikueue(e2e_clusters, ns)
    batch = client.BatchV1Api(e2e_clusters.manager)
    created = batch.create_namespaced_job(ns, job(ns, "hello", "1", parallelism=2))
    assert created.spec.managed_by == MANAGED_BY and created.spec.suspend, "the webhook queues it for MultiKueue"
    wl_name = workload_name_for_owner("hello", created.metadata.uid, "Job", "batch")
    manager = o.Kueue(e2e_clusters.manager)
    o.wait_for(lambda: complete(batch, ns, "hello"), 120, what="manager Job Complete")
    assert batch.read_namespaced_job("hello", ns).status.succeeded == 2
    def finished() -> dict[str, Any] | None:
        wl = manager.get("Workload", wl_name, ns)
        return wl if o.is_true(wl, "Finished") else None

    wl = o.wait_for(finished, 60, what="manager Workload Finished")
    assert wl["status"]["clusterName"] in ("worker1", "worker2")
    check = wl["status"]["admissionChecks"][0]
    assert check["state"] == "Ready" and wl["status"]["clusterName"] in check["message"]
    # Nothing of it is left on either worker, and the manager never ran pods itself.
    for index in (1, 2):
        api = e2e_clusters.worker(index)
        o.wait_for(lambda api=api: o.Kueue(api).list("Workload", ns) == [], 60, what=f"worker{index} workloads cleaned up")
        o.wait_for(lambda api=api: client.BatchV1Api(api).list_namespaced_job(ns).items == [], 60, what=f"worker{index} jobs cleaned up")
    assert client.CoreV1Api(e2e_clusters.manager).list_namespaced_pod(ns).items == []
