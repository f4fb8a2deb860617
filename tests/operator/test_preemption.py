"""Preemption by our controller on a real apiserver: a higher-priority Job takes a lower one's quota.

The controller runs as its own process against the integration manager. The
ClusterQueue allows ``withinClusterQueue: LowerPriority``; priorities come
from WorkloadPriorityClasses named by the Jobs' ``kueue.x-k8s.io/priority-class``
label, as upstream users set them.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev.pytest_plugin import Clusters
from multikueue.integrations.naming import workload_name_for_owner

pytestmark = pytest.mark.integration


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": o.API_VERSION, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}


def job(ns: str, name: str, priority: str) -> dict[str, Any]:
    body = o.batch_job(ns, name, "user-queue", {"cpu": "1"})
    body["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority
    return body


def test_a_higher_priority_job_preempts_the_newest_lower_one(
    kueue: o.Kueue, integration_clusters: Clusters, namespace: str
) -> None:
    ns = namespace
    kueue.create(priority_class(f"low-{ns}", 10))
    kueue.create(priority_class(f"high-{ns}", 1000))
    kueue.create(o.resource_flavor(f"default-{ns}"))
    kueue.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 2}}, scale_cpu=False,
                                 preemption={"withinClusterQueue": "LowerPriority"}))  # fmt: skip
    kueue.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    batch = client.BatchV1Api(integration_clusters.manager)

    def running(name: str) -> bool:
        return batch.read_namespaced_job(name, ns).spec.suspend is False

    def workload_of(name: str) -> str:
        return workload_name_for_owner(name, batch.read_namespaced_job(name, ns).metadata.uid, "Job", "batch")

    batch.create_namespaced_job(ns, job(ns, "low-1", f"low-{ns}"))
    o.wait_for(lambda: running("low-1"), 30, what="low-1 running")
    batch.create_namespaced_job(ns, job(ns, "low-2", f"low-{ns}"))
    o.wait_for(lambda: running("low-2"), 30, what="low-2 running")

    batch.create_namespaced_job(ns, job(ns, "high", f"high-{ns}"))
    o.wait_for(lambda: running("high"), 30, what="the high-priority Job running")
    # Both were reserved within the same second (conditions carry whole seconds): which one is the
    # newest is then decided by UID, as upstream does. One victim is enough; the other keeps running.
    suspended = o.wait_for(lambda: [n for n in ("low-1", "low-2") if not running(n)], 30, what="a low-priority Job suspended again")
    assert len(suspended) == 1, suspended
    [loser] = suspended
    winner = "low-2" if loser == "low-1" else "low-1"
    assert running(winner)

    victim = kueue.get("Workload", workload_of(loser), ns)
    evicted, preempted = o.condition(victim, "Evicted"), o.condition(victim, "Preempted")
    assert evicted and (evicted["status"], evicted["reason"]) == ("True", "Preempted")
    assert preempted and (preempted["status"], preempted["reason"]) == ("True", "InClusterQueue")
    high_uid = kueue.get("Workload", workload_of("high"), ns)["metadata"]["uid"]
    assert preempted["message"].startswith(f"Preempted to accommodate a workload (UID: {high_uid}")
    assert f"preemptor path: /cq-{ns}; preemptee path: /cq-{ns}" in preempted["message"]
    assert not o.is_true(victim, "QuotaReserved") and "admission" not in victim["status"]
    events = client.CoreV1Api(integration_clusters.manager).list_namespaced_event(ns).items
    assert any(e.reason == "Preempted" and e.involved_object.name == victim["metadata"]["name"] for e in events)

    # The victim waits in its queue again; once the high one finishes, it runs again.
    def waiting_message() -> str:
        return (o.condition(kueue.get("Workload", workload_of(loser), ns), "QuotaReserved") or {}).get("message", "")

    try:
        o.wait_for(lambda: "insufficient unused quota" in waiting_message(), 30, what="the victim pending with the quota message")
    except o.WaitTimeout:
        pytest.fail(f"victim status: {kueue.get('Workload', workload_of(loser), ns).get('status')}")


def test_a_jobs_pod_priority_class_gives_its_workload_priority(
    kueue: o.Kueue, integration_clusters: Clusters, namespace: str
) -> None:
    """Upstream's second priority source: the pod template's priorityClassName (scheduling.k8s.io)."""
    ns = namespace
    scheduling = client.SchedulingV1Api(integration_clusters.manager)
    scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=f"pods-{ns}"), value=4242))
    try:
        kueue.create(o.resource_flavor(f"default-{ns}"))
        kueue.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 2}}, scale_cpu=False))
        kueue.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
        # The controller has seen what was created after the PriorityClass (watches of different kinds
        # are not ordered, so this only makes the race with the Job's reconcile unlikely).
        o.wait_for(lambda: o.is_true(kueue.get("LocalQueue", "user-queue", ns), "Active"), 30, what="LocalQueue active")
        batch = client.BatchV1Api(integration_clusters.manager)
        body = o.batch_job(ns, "with-pod-class", "user-queue", {"cpu": "1"})
        body["spec"]["template"]["spec"]["priorityClassName"] = f"pods-{ns}"
        created = batch.create_namespaced_job(ns, body)
        name = workload_name_for_owner("with-pod-class", created.metadata.uid, "Job", "batch")
        wl = o.wait_for(lambda: kueue.get_or_none("Workload", name, ns), 30, what="the Job's Workload")
        assert wl["spec"]["priority"] == 4242
        assert wl["spec"]["priorityClassRef"] == {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": f"pods-{ns}"}
    finally:
        scheduling.delete_priority_class(f"pods-{ns}")
