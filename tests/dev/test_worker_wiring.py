"""The manager holds, for each worker, a kubeconfig Secret and a MultiKueueCluster.

The Secrets must be usable by the admission check as they are: accepted by
its kubeconfig validation (no exec plugin, no files, CA embedded) and good
enough to reach the worker and do there what the manager needs to do.
"""

from __future__ import annotations

import base64

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from multikueue.runtime.kubeconfig import validate_kubeconfig
from multikueue.dev.pytest_plugin import Clusters

pytestmark = pytest.mark.integration

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"


def worker_secret_kubeconfig(clusters: Clusters, worker: str) -> str:
    cluster = client.CustomObjectsApi(clusters.manager).get_cluster_custom_object(
        GROUP, VERSION, "multikueueclusters", worker
    )
    source = cluster["spec"]["clusterSource"]["kubeConfig"]
    assert source["locationType"] == "Secret"
    secret = client.CoreV1Api(clusters.manager).read_namespaced_secret(source["location"], "kueue-system")
    return base64.b64decode(secret.data["kubeconfig"]).decode()


def test_manager_lists_one_multikueuecluster_per_worker(integration_clusters: Clusters) -> None:
    items = client.CustomObjectsApi(integration_clusters.manager).list_cluster_custom_object(
        GROUP, VERSION, "multikueueclusters"
    )["items"]
    names = {i["metadata"]["name"] for i in items}
    assert {"worker1", "worker2"} <= names  # other tests add their own


@pytest.mark.parametrize("index", [1, 2])
def test_worker_secret_reaches_its_worker_with_needed_rights(
    integration_clusters: Clusters, namespace: str, index: int
) -> None:
    text = worker_secret_kubeconfig(integration_clusters, f"worker{index}")
    valid = validate_kubeconfig(text)  # raises on exec plugins, files, insecure TLS
    assert valid.server == integration_clusters.server(index)
    remote = config.new_client_from_config_dict(valid.document)
    workload = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": {"name": "probe", "labels": {"kueue.x-k8s.io/multikueue-origin": "multikueue"}},
        "spec": {"queueName": "user-queue", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}]},
    }
    objects = client.CustomObjectsApi(remote)
    created = objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "workloads", workload)
    # It is the worker (not the manager) that answered: the copy is there, with that uid.
    on_worker = client.CustomObjectsApi(integration_clusters.worker(index)).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "workloads", "probe"
    )
    assert on_worker["metadata"]["uid"] == created["metadata"]["uid"]
    objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, "workloads", "probe")
    batch = client.BatchV1Api(remote)
    assert batch.list_namespaced_job(namespace).items == []
    # ...and nothing beyond what config/worker-access grants (tests/dev/test_worker_access.py checks every verb).
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(remote).list_namespaced_secret("kueue-system")
    assert denied.value.status == 403
