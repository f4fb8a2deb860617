"""batch/v1 Jobs queued through our controller on full local clusters.

Pods run on kwok nodes; each pod stays Running for the time in its
``multikueue.x-k8s.io/run-for`` annotation (see hack/kwok/stages.yaml), so a
test can watch a Job wait for quota while others run.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters
from multikueue.integrations.naming import workload_name_for_owner

pytestmark = pytest.mark.e2e


def job(namespace: str, name: str, queue: str | None, cpu: str, run_for: str = "1s", **kwargs: Any) -> dict[str, Any]:
    return o.batch_job(namespace, name, queue, {"cpu": cpu}, run_for=run_for, **kwargs)


def job_condition(batch: client.BatchV1Api, ns: str, name: str, ctype: str) -> bool:
    status = batch.read_namespaced_job(name, ns).status
    return any(c.type == ctype and c.status == "True" for c in status.conditions or [])


def workload_of(batch: client.BatchV1Api, ns: str, name: str) -> str:
    uid = batch.read_namespaced_job(name, ns).metadata.uid
    return workload_name_for_owner(name, uid, "Job", "batch")


def queue(k: o.Kueue, ns: str) -> None:
    """One flavor, a 9-CPU ClusterQueue and the LocalQueue ``user-queue`` in ``ns``."""
    k.create(o.resource_flavor(f"default-{ns}"))
    k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 9}}))
    k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))


def test_seed_scenario_with_jobs(e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], namespace: str) -> None:
    ns = namespace
    api = e2e_clusters.manager
    k, batch = o.Kueue(api), client.BatchV1Api(api)
    queue(k, ns)
    names = [f"job-{i}" for i in range(3)]
    for name in names:
        batch.create_namespaced_job(ns, job(ns, name, "user-queue", "4", run_for="6s"))

    workloads = {n: o.wait_for(lambda n=n: workload_of(batch, ns, n), 10, what="job uid") for n in names}

    def running() -> list[str]:
        return [n for n in names if not batch.read_namespaced_job(n, ns).spec.suspend]

    started = o.wait_for(lambda: running() if len(running()) == 2 else None, 30, what="two Jobs started")
    waiting = next(n for n in names if n not in started)
    wl = k.get("Workload", workloads[waiting], ns)
    owner = wl["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Job", waiting, True)
    message = o.wait_for(
        lambda: (o.condition(k.get("Workload", workloads[waiting], ns), "QuotaReserved") or {}).get("message"),
        10,
        what="pending message of the third Job's Workload",
    )
    assert "insufficient unused quota for cpu" in message
    assert batch.read_namespaced_job(waiting, ns).spec.suspend is True
    pods = client.CoreV1Api(api).list_namespaced_pod(ns).items
    assert {p.metadata.labels.get("job-name") for p in pods} == set(started)

    for name in names:
        o.wait_for(lambda n=name: job_condition(batch, ns, n, "Complete"), 90, what=f"{name} Complete")
    for name in names:
        o.wait_for(lambda n=name: o.is_true(k.get("Workload", workloads[n], ns), "Finished"), 30, what=f"{name} Workload Finished")
    finished = o.condition(k.get("Workload", workloads[names[0]], ns), "Finished")
    assert finished["reason"] == "Succeeded"


def test_deleting_a_job_deletes_its_workload(e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], namespace: str) -> None:
    ns = namespace
    api = e2e_clusters.manager
    k, batch = o.Kueue(api), client.BatchV1Api(api)
    queue(k, ns)
    batch.create_namespaced_job(ns, job(ns, "doomed", "user-queue", "1", run_for="600s"))
    name = o.wait_for(lambda: workload_of(batch, ns, "doomed"), 10, what="job uid")
    o.wait_for(lambda: o.is_true(k.get_or_none("Workload", name, ns), "Admitted"), 30, what="admitted")
    batch.delete_namespaced_job("doomed", ns, propagation_policy="Background")
    o.wait_for(lambda: k.get_or_none("Workload", name, ns) is None, 60, what="Workload deleted with its Job")


def test_worker_job_bound_to_prebuilt_workload(e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], namespace: str) -> None:
    ns = namespace
    api = e2e_clusters.worker(1)
    k, batch = o.Kueue(api), client.BatchV1Api(api)
    queue(k, ns)
    body = job(ns, "bound", None, "2", run_for="2s")
    body["metadata"]["labels"] = {"kueue.x-k8s.io/prebuilt-workload-name": "prebuilt"}
    batch.create_namespaced_job(ns, body)
    wl = o.workload(ns, "prebuilt", "user-queue", {"cpu": "2"})
    wl["spec"]["podSets"][0]["template"] = body["spec"]["template"]
    k.create(wl)
    o.wait_for(lambda: job_condition(batch, ns, "bound", "Complete"), 60, what="bound Job Complete")
    o.wait_for(lambda: o.is_true(k.get("Workload", "prebuilt", ns), "Finished"), 30, what="prebuilt Workload Finished")
    # No Workload of its own was made for the Job.
    assert [w["metadata"]["name"] for w in k.list("Workload", ns)] == ["prebuilt"]


def test_unqueued_jobs_are_left_alone(e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], namespace: str) -> None:
    api = e2e_clusters.manager
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(namespace, job(namespace, "free", None, "1", suspend=False))
    o.wait_for(lambda: job_condition(batch, namespace, "free", "Complete"), 60, what="unqueued Job Complete")
    assert o.Kueue(api).list("Workload", namespace) == []


def test_controller_keeps_running_after_bad_objects(e2e_controllers: list[ControllerProcess]) -> None:
    for controller in e2e_controllers:
        assert controller.alive, controller.logs()[-2000:]
        assert "Traceback" not in controller.logs()
