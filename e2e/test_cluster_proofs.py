"""Proofs that the local worker clusters are real Kubernetes.

A plain Job runs to completion on kwok nodes (job controller, scheduler and
kwok all did their part), while a Job handed to MultiKueue through
``spec.managedBy`` is left alone by the worker's job controller: that field is
what keeps a manager from running the jobs it dispatches.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from multikueue.dev.pytest_plugin import Clusters

pytestmark = [pytest.mark.e2e, pytest.mark.local_clusters]

MULTIKUEUE_MANAGED_BY = "kueue.x-k8s.io/multikueue"


def job(name: str, completions: int = 2, managed_by: str | None = None) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            completions=completions,
            parallelism=completions,
            managed_by=managed_by,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[
                        client.V1Container(
                            name="main",
                            image="registry.k8s.io/e2e-test-images/agnhost:2.53",
                            args=["pause"],
                            resources=client.V1ResourceRequirements(requests={"cpu": "1"}),
                        )
                    ],
                )
            ),
        ),
    )


def wait_for(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def test_job_runs_to_completion_on_kwok_nodes(e2e_clusters: Clusters, namespace: str) -> None:
    api = e2e_clusters.worker(1)
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(namespace, job("runs", completions=2))

    def complete() -> client.V1Job | None:
        current = batch.read_namespaced_job("runs", namespace)
        conditions = current.status.conditions or []
        return current if any(c.type == "Complete" and c.status == "True" for c in conditions) else None

    done = wait_for(complete, 120, "Job runs to be Complete")
    assert done.status.succeeded == 2
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector="job-name=runs").items
    assert len(pods) == 2
    assert {p.status.phase for p in pods} == {"Succeeded"}
    assert all(p.spec.node_name and p.spec.node_name.startswith("kwok-node-") for p in pods)


def test_job_managed_by_multikueue_is_left_alone(e2e_clusters: Clusters, namespace: str) -> None:
    api = e2e_clusters.worker(1)
    batch = client.BatchV1Api(api)
    created = batch.create_namespaced_job(namespace, job("dispatched", managed_by=MULTIKUEUE_MANAGED_BY))
    assert created.spec.managed_by == MULTIKUEUE_MANAGED_BY
    # A control Job created right after shows the job controller is active meanwhile.
    batch.create_namespaced_job(namespace, job("control", completions=1))
    core = client.CoreV1Api(api)
    wait_for(
        lambda: core.list_namespaced_pod(namespace, label_selector="job-name=control").items,
        60,
        "the control Job's pod",
    )
    time.sleep(3)
    assert core.list_namespaced_pod(namespace, label_selector="job-name=dispatched").items == []
    status = batch.read_namespaced_job("dispatched", namespace).status
    assert not status.active and not status.succeeded and not status.failed
    assert not status.conditions and status.start_time is None
