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
from multikueue.dev.binaries import ensure_binaries
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters
from multikueue.dev.scenarios import MANAGED_BY, PodWatch, job_complete, multikueue_queues, timed_job, wait_jobs_complete
from multikueue.integrations.naming import workload_name_for_owner

pytestmark = pytest.mark.e2e

def setup_multikueue(clusters: Clusters, ns: str, worker_cpu: tuple[int, int] = (8, 8), manager_cpu: int = 1000) -> None:
    multikueue_queues(clusters.manager, [clusters.worker(1), clusters.worker(2)], ns, worker_cpu, manager_cpu)


def test_job_submitted_to_manager_runs_on_a_worker(e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], namespace: str) -> None:
    ns = namespace
    setup_multikueue(e2e_clusters, ns)
    batch = client.BatchV1Api(e2e_clusters.manager)
    created = batch.create_namespaced_job(ns, timed_job(ns, "hello", "1", parallelism=2))
    assert created.spec.managed_by == MANAGED_BY and created.spec.suspend, "the webhook queues it for MultiKueue"
    wl_name = workload_name_for_owner("hello", created.metadata.uid, "Job", "batch")
    manager = o.Kueue(e2e_clusters.manager)
    o.wait_for(lambda: job_complete(batch, ns, "hello"), 120, what="manager Job Complete")
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


def workload_of(batch: client.BatchV1Api, ns: str, name: str) -> str:
    return workload_name_for_owner(name, batch.read_namespaced_job(name, ns).metadata.uid, "Job", "batch")


def cluster_name(k: o.Kueue, ns: str, wl: str) -> str | None:
    status = (k.get_or_none("Workload", wl, ns) or {}).get("status") or {}
    return status.get("clusterName")


def test_job_that_fits_only_worker2_lands_there(e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], namespace: str) -> None:
    ns = namespace
    setup_multikueue(e2e_clusters, ns, worker_cpu=(2, 8))
    batch = client.BatchV1Api(e2e_clusters.manager)
    batch.create_namespaced_job(ns, timed_job(ns, "big", "4"))
    wl = workload_of(batch, ns, "big")
    manager = o.Kueue(e2e_clusters.manager)
    assert o.wait_for(lambda: cluster_name(manager, ns, wl), 60, what="dispatched") == "worker2"
    o.wait_for(lambda: job_complete(batch, ns, "big"), 60, what="Complete")


def test_hundred_jobs_spread_over_both_workers_and_run_once(e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], namespace: str) -> None:
    ns = namespace
    setup_multikueue(e2e_clusters, ns, worker_cpu=(8, 8))
    watches = [PodWatch(e2e_clusters.worker(i), ns) for i in (1, 2)]
    batch = client.BatchV1Api(e2e_clusters.manager)
    names = [f"job-{i:03d}" for i in range(100)]
    for name in names:
        batch.create_namespaced_job(ns, timed_job(ns, name, "1", run_for="1s"))
    manager = o.Kueue(e2e_clusters.manager)
    try:
        o.wait_for(lambda: all(job_complete(batch, ns, n) for n in names), 300, interval=2, what="100 Jobs Complete")
    except o.WaitTimeout:
        stuck = [n for n in names if not job_complete(batch, ns, n)]
        details = []
        for n in stuck[:3]:
            j = batch.read_namespaced_job(n, ns)
            w = manager.get_or_none("Workload", workload_of(batch, ns, n), ns) or {}
            details.append((n, j.spec.suspend, j.status.to_dict(), w.get("status")))
        pytest.fail(f"{len(stuck)} Jobs not Complete: {details}")
    placed = [cluster_name(manager, ns, workload_of(batch, ns, n)) for n in names]
    assert set(placed) == {"worker1", "worker2"}, f"spread: {placed.count('worker1')} / {placed.count('worker2')}"
    for w in watches:
        w.stop()
    runs = {n: sum(len(w.pods.get(n, ())) for w in watches) for n in names}
    twice = {n: [sorted(w.pods.get(n, ())) for w in watches] for n, r in runs.items() if r != 1}
    assert not twice, twice
    assert all(batch.read_namespaced_job(n, ns).status.succeeded == 1 for n in names)


@pytest.mark.local_clusters  # stops a worker's kube-apiserver process
def test_worker_lost_redispatches_and_stale_copy_is_removed(e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], namespace: str) -> None:
    assert e2e_clusters.local is not None, "needs local clusters (it stops a worker's apiserver)"
    ns = namespace
    setup_multikueue(e2e_clusters, ns, worker_cpu=(8, 8))
    batch = client.BatchV1Api(e2e_clusters.manager)
    manager = o.Kueue(e2e_clusters.manager)
    batch.create_namespaced_job(ns, timed_job(ns, "survivor", "1", run_for="40s"))
    wl = workload_of(batch, ns, "survivor")
    first = o.wait_for(lambda: cluster_name(manager, ns, wl), 60, what="dispatched")
    lost = e2e_clusters.local.cluster(first)
    apiserver = next(p for p in lost.processes if p.name.endswith("/kube-apiserver"))
    apiserver.stop(timeout=5)
    try:
        o.wait_for(
            lambda: (o.condition(manager.get("MultiKueueCluster", first), "Active") or {}).get("status") == "False",
            20,
            what=f"{first} Active=False",
        )
        other = "worker2" if first == "worker1" else "worker1"
        o.wait_for(lambda: cluster_name(manager, ns, wl) == other, 90, what=f"re-dispatched to {other}")
    finally:
        lost.processes.remove(apiserver)
        lost.start_apiserver(ensure_binaries().binaries)
        lost.wait_apiserver()
    o.wait_for(lambda: job_complete(batch, ns, "survivor"), 120, what="Complete on the other worker")
    back = o.Kueue(e2e_clusters.local.api(lost))
    o.wait_for(lambda: back.list("Workload", ns) == [], 90, what=f"stale copy removed from {first}")


def test_manager_restart_mid_dispatch_duplicates_nothing(e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], namespace: str) -> None:
    ns = namespace
    setup_multikueue(e2e_clusters, ns, worker_cpu=(4, 4))
    watches = [PodWatch(e2e_clusters.worker(i), ns) for i in (1, 2)]
    batch = client.BatchV1Api(e2e_clusters.manager)
    manager_ctl = e2e_controllers[0]
    names = [f"job-{i:02d}" for i in range(30)]
    for name in names:
        batch.create_namespaced_job(ns, timed_job(ns, name, "1", run_for="3s"))
    manager = o.Kueue(e2e_clusters.manager)
    o.wait_for(
        lambda: sum(bool(cluster_name(manager, ns, workload_of(batch, ns, n))) for n in names) >= 5,
        60,
        what="dispatch under way",
    )
    manager_ctl.kill()
    import time

    time.sleep(3)
    manager_ctl.start()
    wait_jobs_complete(e2e_clusters.manager, ns, names, 240, interval=2)
    for w in watches:
        w.stop()
    runs = {n: sum(len(w.pods.get(n, ())) for w in watches) for n in names}
    assert set(runs.values()) == {1}, {n: r for n, r in runs.items() if r != 1}
    for index in (1, 2):
        api = e2e_clusters.worker(index)
        o.wait_for(lambda api=api: o.Kueue(api).list("Workload", ns) == [], 60, what=f"worker{index} cleaned up")


def test_deleting_the_manager_job_removes_the_remote_job_within_two_seconds(
    e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], namespace: str
) -> None:
    """Issue 10, item I: the remote Job goes with the manager's, not at the next GC.

    The Workload keeps its in-use finalizer while it is placed on a worker,
    and the MultiKueue check deletes the remote Job by its binding to the
    Workload (the owner Job is gone by then).
    """
    import time

    ns = namespace
    setup_multikueue(e2e_clusters, ns)
    batch = client.BatchV1Api(e2e_clusters.manager)
    batch.create_namespaced_job(ns, timed_job(ns, "long", "1", run_for="300s"))
    wl = workload_of(batch, ns, "long")
    manager = o.Kueue(e2e_clusters.manager)
    worker = o.wait_for(lambda: cluster_name(manager, ns, wl), 60, what="dispatched")
    remote = client.BatchV1Api(e2e_clusters.worker(int(worker.removeprefix("worker"))))

    def remote_job() -> Any:
        try:
            return remote.read_namespaced_job("long", ns)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    o.wait_for(lambda: remote_job() is not None and not remote_job().spec.suspend, 60, what="the remote Job started")
    start = time.monotonic()
    batch.delete_namespaced_job("long", ns, propagation_policy="Background")
    o.wait_for(lambda: remote_job() is None, 30, interval=0.02, what="the remote Job deleted")
    elapsed = time.monotonic() - start
    print(f"remote Job gone {elapsed:.2f}s after the manager Job was deleted")
    assert elapsed < 2.0
    o.wait_for(lambda: manager.get_or_none("Workload", wl, ns) is None, 30, what="the manager's Workload released")
    o.wait_for(lambda: o.Kueue(e2e_clusters.worker(int(worker.removeprefix("worker")))).list("Workload", ns) == [], 30,
               what="the remote Workload deleted")
