"""Preemption on a MultiKueue manager: a preempted Workload's remote job and copies go, and it runs again later.

The manager's ClusterQueue has room for one Job and ``withinClusterQueue:
LowerPriority``; the workers have room for both. A high-priority Job then
takes the quota of a low-priority one already running on a worker.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters
from multikueue.dev.scenarios import job_complete, multikueue_queues, timed_job
from multikueue.integrations.naming import workload_name_for_owner

pytestmark = pytest.mark.e2e


def prioritized(ns: str, name: str, priority_class: str, run_for: str) -> dict[str, Any]:
    body = timed_job(ns, name, "2", run_for=run_for)
    body["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority_class
    return body


def states(kueue: o.Kueue, ns: str) -> str:
    """Each Workload's priority, placement and conditions, with their times: what a failed wait needs to be understood.

    The times tell a preemption that never came from a preemptor that came late.
    """
    lines = []
    for w in kueue.list("Workload", ns):
        conditions = {
            c["type"]: f"{c['status']}/{c.get('reason')}@{(c.get('lastTransitionTime') or '')[11:19]}"
            for c in (w.get("status") or {}).get("conditions") or []
        }
        lines.append(f"{w['metadata']['name']}: created={w['metadata'].get('creationTimestamp')} "
                     f"priority={w['spec'].get('priority')} cluster={(w.get('status') or {}).get('clusterName')} "
                     f"conditions={conditions}")  # fmt: skip
    return "\n".join(lines)


def test_preempting_a_dispatched_workload_removes_its_remote_job_and_it_runs_again_later(
    e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], namespace: str
) -> None:
    ns = namespace
    manager = o.Kueue(e2e_clusters.manager)
    for name, value in ((f"low-{ns}", 10), (f"high-{ns}", 1000)):
        manager.create({"apiVersion": o.API_VERSION, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value})
    multikueue_queues(e2e_clusters.manager, [e2e_clusters.worker(1), e2e_clusters.worker(2)], ns, (8, 8), manager_cpu=2,
                      preemption={"withinClusterQueue": "LowerPriority"})  # fmt: skip
    batch = client.BatchV1Api(e2e_clusters.manager)

    def workload_of(name: str) -> str:
        return workload_name_for_owner(name, batch.read_namespaced_job(name, ns).metadata.uid, "Job", "batch")

    def placed(name: str) -> str | None:
        return ((manager.get_or_none("Workload", workload_of(name), ns) or {}).get("status") or {}).get("clusterName")

    # Long enough that the high-priority Job is certainly decided while the low one still runs: with 15 s, a slow
    # kind pass (CI) saw the low Job finish before the preemption (stop 21).
    batch.create_namespaced_job(ns, prioritized(ns, "low", f"low-{ns}", run_for="45s"))
    first = o.wait_for(lambda: placed("low"), 60, what="the low-priority Job dispatched")
    remote = client.BatchV1Api(e2e_clusters.worker(int(first[-1])))
    o.wait_for(lambda: remote.list_namespaced_job(ns).items, 60, what=f"the low-priority Job created on {first}")

    batch.create_namespaced_job(ns, prioritized(ns, "high", f"high-{ns}", run_for="2s"))
    low_name = workload_of("low")
    try:
        victim = o.wait_for(lambda: (w := manager.get("Workload", low_name, ns)) and o.is_true(w, "Preempted") and w, 60,
                            what="the low-priority Workload preempted")  # fmt: skip
    except o.WaitTimeout as exc:
        high_job = batch.read_namespaced_job("high", ns).metadata.creation_timestamp
        raise AssertionError(f"{exc}\nhigh Job created at {high_job}\n{states(manager, ns)}") from exc
    assert o.condition(victim, "Preempted")["reason"] == "InClusterQueue"
    assert o.condition(victim, "Evicted")["reason"] == "Preempted"
    # Its remote job and Workload copy are removed from the worker it ran on.
    o.wait_for(lambda: [j.metadata.name for j in remote.list_namespaced_job(ns).items if j.metadata.name == "low"] == [], 60,
               what=f"the low-priority Job removed from {first}")  # fmt: skip
    o.wait_for(lambda: o.Kueue(e2e_clusters.worker(int(first[-1]))).get_or_none("Workload", low_name, ns) is None, 60,
               what=f"the low-priority Workload copy removed from {first}")  # fmt: skip

    o.wait_for(lambda: job_complete(batch, ns, "high"), 90, what="the high-priority Job Complete")
    # Once the quota is free again, the victim is admitted, dispatched afresh and finishes.
    o.wait_for(lambda: job_complete(batch, ns, "low"), 150, what="the preempted Job Complete after running again")
    assert batch.read_namespaced_job("low", ns).status.succeeded == 1
