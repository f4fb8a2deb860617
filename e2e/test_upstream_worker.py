"""A worker running upstream Kueue: the manager dispatches to it as to a worker of ours.

Many MultiKueue users run upstream Kueue on their workers. On kind clusters
brought up with ``kind-configs/up.sh --upstream-worker worker2``, worker2 runs
upstream Kueue v0.19.2 (built from its source archive, installed from its
own ``config/default``) and worker1 runs our controller. These tests are
deselected on any other clusters; ``hack/test.sh`` brings up that set-up in
a pass of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from multikueue.dev import kind
from multikueue.dev import objects as o
from multikueue.dev.pytest_plugin import Clusters
from multikueue.dev.scenarios import job_complete, multikueue_queues, timed_job
from multikueue.integrations.naming import workload_name_for_owner

pytestmark = [pytest.mark.e2e, pytest.mark.upstream_worker]


def test_upstream_kueue_is_what_runs_on_worker2(e2e_clusters: Clusters) -> None:
    apps = client.AppsV1Api(e2e_clusters.worker(2))
    deployments = {d.metadata.name: d for d in apps.list_namespaced_deployment("kueue-system").items}
    assert "multikueue-controller-manager" not in deployments
    upstream = deployments["kueue-controller-manager"]
    assert upstream.spec.template.spec.containers[0].image.startswith("multikueue/upstream-kueue:")
    assert (upstream.status.ready_replicas or 0) >= 1


def test_job_runs_on_the_upstream_worker_and_its_status_comes_back(e2e_clusters: Clusters, namespace: str, tmp_path: Path) -> None:
    """With worker1's controller stopped, only upstream Kueue on worker2 admits the copy: the Job must run there."""
    ns = namespace
    multikueue_queues(e2e_clusters.manager, [e2e_clusters.worker(1), e2e_clusters.worker(2)], ns)
    ours = kind.KindController(name="worker1", role="worker", kubeconfig=kind.kubeconfig_path("worker1"), log=tmp_path / "worker1.log")
    ours.stop()
    try:
        batch = client.BatchV1Api(e2e_clusters.manager)
        created = batch.create_namespaced_job(ns, timed_job(ns, "on-upstream", "1", run_for="3s"))
        wl_name = workload_name_for_owner("on-upstream", created.metadata.uid, "Job", "batch")
        manager, upstream = o.Kueue(e2e_clusters.manager), o.Kueue(e2e_clusters.worker(2))

        def admitted_by_upstream() -> dict[str, Any] | None:
            copy = upstream.get_or_none("Workload", wl_name, ns)
            return copy if copy and o.is_true(copy, "QuotaReserved") else None

        copy = o.wait_for(admitted_by_upstream, 90, what="the Workload copy admitted by upstream Kueue on worker2")
        assert copy["status"]["admission"]["clusterQueue"] == f"cq-{ns}"
        # The copy on worker1 (nobody admits it there) is withdrawn once worker2 has won.
        o.wait_for(lambda: o.Kueue(e2e_clusters.worker(1)).get_or_none("Workload", wl_name, ns) is None, 60,
                   what="the unadmitted copy on worker1 removed")  # fmt: skip
        remote = client.BatchV1Api(e2e_clusters.worker(2))
        job = o.wait_for(lambda: next(iter(remote.list_namespaced_job(ns).items), None), 60, what="the Job created on worker2")
        assert job.metadata.labels.get("kueue.x-k8s.io/prebuilt-workload-name") == wl_name
        assert not job.spec.managed_by, "the copy is left to the worker's own Job controller"

        o.wait_for(lambda: job_complete(batch, ns, "on-upstream"), 120, what="the manager's Job Complete")
        wl = o.wait_for(lambda: (w := manager.get("Workload", wl_name, ns)) and o.is_true(w, "Finished") and w, 60,
                        what="the manager's Workload Finished")  # fmt: skip
        assert wl["status"]["clusterName"] == "worker2"
        assert batch.read_namespaced_job("on-upstream", ns).status.succeeded == 1
        # Nothing is left on the upstream worker.
        o.wait_for(lambda: upstream.list("Workload", ns) == [], 60, what="worker2's Workload copy removed")
        o.wait_for(lambda: remote.list_namespaced_job(ns).items == [], 60, what="worker2's Job removed")
    finally:
        ours.start()
