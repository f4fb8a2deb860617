"""A manager running upstream Kueue: its MultiKueue dispatches to workers running this project's controller.

Many platform teams already run upstream Kueue on their manager cluster; our
controller must be a worker it can use unchanged. On kind clusters brought up
with ``kind-configs/up.sh --upstream-manager``, the manager runs upstream
Kueue v0.19.2 (built from its source archive, installed from its own
``config/default``) and both workers run ours (``config/worker``, with
``config/worker-access`` for the manager's identity). The Secrets,
MultiKueueClusters, AdmissionCheck and queues are the same objects our own
manager reads: they are upstream's API. These tests are deselected on any
other clusters; ``hack/test.sh`` brings up that set-up in a pass of its own.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev import upstream
from multikueue.dev.pytest_plugin import Clusters
from multikueue.dev.scenarios import job_complete, multikueue_queues, timed_job
from multikueue.integrations.naming import workload_name_for_owner

pytestmark = [pytest.mark.e2e, pytest.mark.upstream_manager]


def test_upstream_kueue_is_what_runs_on_the_manager(e2e_clusters: Clusters) -> None:
    apps = client.AppsV1Api(e2e_clusters.manager)
    deployments = {d.metadata.name: d for d in apps.list_namespaced_deployment(upstream.NAMESPACE).items}
    assert "multikueue-controller-manager" not in deployments
    manager = deployments[upstream.DEPLOYMENT]
    assert manager.spec.template.spec.containers[0].image.startswith("multikueue/upstream-kueue:")
    assert (manager.status.ready_replicas or 0) >= 1
    for index in (1, 2):
        workers = {d.metadata.name for d in client.AppsV1Api(e2e_clusters.worker(index)).list_namespaced_deployment(upstream.NAMESPACE).items}
        assert "multikueue-controller-manager" in workers and upstream.DEPLOYMENT not in workers


def test_upstream_sees_our_workers_as_active_clusters(e2e_clusters: Clusters) -> None:
    kueue = o.Kueue(e2e_clusters.manager)
    for name in ("worker1", "worker2"):
        cluster = o.wait_for(lambda n=name: (c := kueue.get("MultiKueueCluster", n)) and o.is_true(c, "Active") and c, 120,
                             what=f"upstream's MultiKueueCluster {name} Active")  # fmt: skip
        assert o.condition(cluster, "Active")["reason"] == "Active"


def test_a_job_dispatched_by_upstream_runs_on_our_worker_and_its_status_comes_back(e2e_clusters: Clusters, namespace: str) -> None:
    ns = namespace
    workers = [e2e_clusters.worker(1), e2e_clusters.worker(2)]
    multikueue_queues(e2e_clusters.manager, workers, ns)
    batch = client.BatchV1Api(e2e_clusters.manager)
    created = batch.create_namespaced_job(ns, timed_job(ns, "from-upstream", "1", run_for="3s"))
    assert created.spec.managed_by == "kueue.x-k8s.io/multikueue", "upstream's Job webhook hands it to MultiKueue"
    wl_name = workload_name_for_owner("from-upstream", created.metadata.uid, "Job", "batch")
    manager = o.Kueue(e2e_clusters.manager)

    def created_job() -> tuple[int, Any] | None:
        """The worker upstream chose: the one its Job copy is created on (both workers may admit a copy first)."""
        for index, api in enumerate(workers, start=1):
            jobs = client.BatchV1Api(api).list_namespaced_job(ns).items
            if jobs:
                return index, jobs[0]
        return None

    index, job = o.wait_for(created_job, 120, what="the Job created on the worker upstream chose")
    copy = o.Kueue(workers[index - 1]).get("Workload", wl_name, ns)
    assert o.is_true(copy, "QuotaReserved"), "our worker controller admitted the copy"
    assert copy["status"]["admission"]["clusterQueue"] == f"cq-{ns}"
    assert copy["metadata"]["labels"].get("kueue.x-k8s.io/multikueue-origin"), "upstream marked the copy as its own"
    remote = client.BatchV1Api(workers[index - 1])
    # Upstream v0.19 names the prebuilt Workload in an annotation (older releases used a label): ours reads both.
    prebuilt = {**(job.metadata.labels or {}), **(job.metadata.annotations or {})}.get("kueue.x-k8s.io/prebuilt-workload-name")
    assert prebuilt == wl_name
    assert not job.spec.managed_by, "the copy is left to the worker's own Job controller"
    o.wait_for(lambda: remote.read_namespaced_job(job.metadata.name, ns).spec.suspend is False, 90,
               what="our worker controller started the Job")  # fmt: skip

    o.wait_for(lambda: job_complete(batch, ns, "from-upstream"), 180, what="the manager's Job Complete (status synced by upstream)")
    wl = o.wait_for(lambda: (w := manager.get("Workload", wl_name, ns)) and o.is_true(w, "Finished") and w, 90,
                    what="the manager's Workload Finished")  # fmt: skip
    assert wl["status"]["clusterName"] == f"worker{index}"
    assert batch.read_namespaced_job("from-upstream", ns).status.succeeded == 1
    # Upstream's garbage collection removes what it created on our workers.
    for api in workers:
        o.wait_for(lambda a=api: o.Kueue(a).list("Workload", ns) == [], 120, what="the Workload copies removed from the workers")
