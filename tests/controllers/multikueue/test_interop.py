"""A worker running upstream Kueue's CRDs accepts the Workload copies we create."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from multikueue.controllers.multikueue.remote_workload import remote_workload_copy
from multikueue.api import Workload
from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters

pytestmark = pytest.mark.integration


def test_workload_copy_lands_unpruned_on_an_upstream_worker(
    integration_clusters: Clusters,
    integration_controller: ControllerProcess,
    upstream_crd_clusters: Clusters,
    multikueue_setup: Any,
    namespace: str,
) -> None:
    ns = namespace
    manager_api = integration_clusters.manager
    upstream_api = upstream_crd_clusters.manager
    client.CoreV1Api(upstream_api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    text = upstream_crd_clusters.kubeconfigs[0].read_text()  # admin client certificate, embedded
    multikueue_setup.put_secret(f"upstream-{ns}", text)
    k = o.Kueue(manager_api)
    cluster, config, check = f"upstream-{ns}", f"cfg-{ns}", f"mk-{ns}"
    multikueue_setup.put_cluster(cluster, f"upstream-{ns}")
    multikueue_setup.put_config(config, [cluster])
    multikueue_setup.put_check(check, config)
    k.create(o.resource_flavor(f"default-{ns}"))
    k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 10}}, checks=[check]))
    k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    o.wait_for(lambda: o.is_true(k.get("AdmissionCheck", check), "Active"), 60, what="check active")
    job = o.batch_job(ns, "interop", "user-queue", {"cpu": "2"}, parallelism=2, managed_by="kueue.x-k8s.io/multikueue")
    client.BatchV1Api(manager_api).create_namespaced_job(ns, job)

    upstream = o.Kueue(upstream_api)
    copies = o.wait_for(lambda: upstream.list("Workload", ns), 60, what="the copy on the upstream worker")
    [remote] = copies
    local = Workload.from_k8s(k.get("Workload", remote["metadata"]["name"], ns))
    sent = remote_workload_copy(local, origin="multikueue")
    assert remote["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] == "multikueue"
    assert remote["spec"]["podSets"] == sent["spec"]["podSets"], "nothing pruned by upstream's schema"
    assert remote["spec"]["queueName"] == "user-queue"
    assert not remote["metadata"].get("ownerReferences")
    # Its status is writable with upstream's schema too (as a worker's Kueue would write it).
    status = {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "waiting", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    upstream.patch("Workload", remote["metadata"]["name"], {"status": status}, ns, status=True)
