"""Partial admission by our controller on a real apiserver: a Job with ``job-min-parallelism`` runs smaller.

A Job asking for 6 pods of 1 CPU with ``kueue.x-k8s.io/job-min-parallelism: 2``
meets a ClusterQueue with 4 CPUs: the Workload is admitted with 4 pods (the
largest count that fits, upstream's reduction), and the Job starts with
``parallelism: 4``.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev.pytest_plugin import Clusters
from multikueue.integrations.naming import workload_name_for_owner

pytestmark = pytest.mark.integration


def test_a_job_with_min_parallelism_is_admitted_with_the_pods_that_fit(
    kueue: o.Kueue, integration_clusters: Clusters, namespace: str
) -> None:
    ns = namespace
    kueue.create(o.resource_flavor(f"default-{ns}"))
    kueue.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 4}}, scale_cpu=False))
    kueue.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    batch = client.BatchV1Api(integration_clusters.manager)

    body = o.batch_job(ns, "wide", "user-queue", {"cpu": "1"}, parallelism=6)
    body["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "2"}
    batch.create_namespaced_job(ns, body)

    def started() -> client.V1Job | None:
        current = batch.read_namespaced_job("wide", ns)
        return current if current.spec.suspend is False else None

    job = o.wait_for(started, 30, what="the Job started")
    assert job.spec.parallelism == 4, "started with the admitted count"

    name = workload_name_for_owner("wide", job.metadata.uid, "Job", "batch")
    workload = kueue.get("Workload", name, ns)
    [pod_set] = workload["spec"]["podSets"]
    assert (pod_set["count"], pod_set["minCount"]) == (6, 2)
    [assignment] = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["count"] == 4 and assignment["resourceUsage"]["cpu"] == "4"
