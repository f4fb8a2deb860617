"""A Job whose Workload name is too long for a label runs once on its worker, untouched by the GC.

The name of a Job's Workload is ``job-<name>-<hash>``; past 63 characters it
cannot be a label value, so the worker copy names its prebuilt Workload in an
annotation. The GC and the remote watches once read only the label: such a
remote Job was deleted as an orphan within seconds and re-created, in a loop
every ``gcInterval`` (10 s on these clusters), and the manager's Job never
completed (issue 10, item 2).
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters
from multikueue.dev.scenarios import job_complete, multikueue_queues, timed_job
from multikueue.integrations.binding import is_label_value
from multikueue.integrations.naming import workload_name_for_owner

pytestmark = pytest.mark.e2e

def test_a_job_bound_by_annotation_survives_the_gc(
    e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], namespace: str
) -> None:
    ns = namespace
    multikueue_queues(e2e_clusters.manager, [e2e_clusters.worker(1), e2e_clusters.worker(2)], ns)
    name = "a-job-with-a-rather-long-name-that-needs-an-annotation-x"
    batch = client.BatchV1Api(e2e_clusters.manager)
    created = batch.create_namespaced_job(ns, timed_job(ns, name, "1", run_for="14s"))
    wl_name = workload_name_for_owner(name, created.metadata.uid, "Job", "batch")
    assert not is_label_value(wl_name), "the test needs a Workload name that cannot be a label value"

    def remote_job() -> tuple[int, client.V1Job] | None:
        for index in (1, 2):
            jobs = client.BatchV1Api(e2e_clusters.worker(index)).list_namespaced_job(ns).items
            if jobs:
                return index, jobs[0]
        return None

    index, first = o.wait_for(remote_job, 60, what="the Job's copy on a worker")
    assert first.metadata.annotations["kueue.x-k8s.io/prebuilt-workload-name"] == wl_name
    uids = {first.metadata.uid}
    deadline = time.monotonic() + 120
    while not job_complete(batch, ns, name):
        assert time.monotonic() < deadline, "the manager's Job did not complete"
        current = client.BatchV1Api(e2e_clusters.worker(index)).list_namespaced_job(ns).items
        uids |= {j.metadata.uid for j in current}
        time.sleep(0.5)
    assert uids == {first.metadata.uid}, "the remote Job was deleted and re-created while it ran"
    wl = o.Kueue(e2e_clusters.manager).get("Workload", wl_name, ns)
    assert wl["status"]["clusterName"] == f"worker{index}"
