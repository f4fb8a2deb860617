"""Bad MultiKueue input is reported where the user looks, and fixing it recovers."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess, free_port
from multikueue.dev.pytest_plugin import Clusters

pytestmark = pytest.mark.integration

NS = "kueue-system"


def secret(api: client.ApiClient, name: str, kubeconfig: dict[str, Any] | str) -> None:
    text = kubeconfig if isinstance(kubeconfig, str) else yaml.safe_dump(kubeconfig)
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, namespace=NS),
        data={"kubeconfig": base64.b64encode(text.encode()).decode()},
    )
    client.CoreV1Api(api).create_namespaced_secret(NS, body)


def worker_kubeconfig(api: client.ApiClient, worker: str = "worker1") -> dict[str, Any]:
    data = client.CoreV1Api(api).read_namespaced_secret(f"{worker}-secret", NS).data["kubeconfig"]
    return yaml.safe_load(base64.b64decode(data))


def mk_cluster(k: o.Kueue, name: str, secret_name: str) -> None:
    k.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster", "metadata": {"name": name},
              "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": secret_name}}}})


def active(k: o.Kueue, kind: str, name: str) -> tuple[str, str, str] | None:
    c = o.condition(k.get_or_none(kind, name), "Active")
    return (c["status"], c["reason"], c["message"]) if c else None


@pytest.fixture
def k(integration_clusters: Clusters, integration_controller: ControllerProcess) -> o.Kueue:
    return o.Kueue(integration_clusters.manager)


def test_exec_plugin_kubeconfig_is_refused(k: o.Kueue, integration_clusters: Clusters, namespace: str) -> None:
    config = worker_kubeconfig(integration_clusters.manager)
    config["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/steal-credentials"}}
    secret(integration_clusters.manager, f"exec-{namespace}", config)
    mk_cluster(k, f"exec-{namespace}", f"exec-{namespace}")
    status, reason, message = o.wait_for(lambda: active(k, "MultiKueueCluster", f"exec-{namespace}"), 20, what="condition")
    assert (status, reason) == ("False", "InsecureKubeConfig")
    assert "exec plugin" in message


def test_missing_secret_then_created(k: o.Kueue, integration_clusters: Clusters, namespace: str) -> None:
    name = f"late-{namespace}"
    mk_cluster(k, name, name)
    status, reason, message = o.wait_for(lambda: active(k, "MultiKueueCluster", name), 20, what="condition")
    assert (status, reason) == ("False", "BadConfig")
    assert message == f"Secret kueue-system/{name} not found"
    secret(integration_clusters.manager, name, worker_kubeconfig(integration_clusters.manager))
    o.wait_for(lambda: (active(k, "MultiKueueCluster", name) or ("",))[0] == "True", 60, what="Active once the Secret exists")


def test_kubeconfig_pointing_at_a_closed_port(k: o.Kueue, integration_clusters: Clusters, namespace: str) -> None:
    config = worker_kubeconfig(integration_clusters.manager)
    port = free_port()
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    secret(integration_clusters.manager, f"closed-{namespace}", config)
    mk_cluster(k, f"closed-{namespace}", f"closed-{namespace}")
    status, reason, message = o.wait_for(lambda: active(k, "MultiKueueCluster", f"closed-{namespace}"), 30, what="condition")
    assert (status, reason) == ("False", "ClientConnectionFailed")
    assert f"127.0.0.1:{port}" in message


def test_secret_edit_reconnects(k: o.Kueue, integration_clusters: Clusters, namespace: str) -> None:
    name = f"edit-{namespace}"
    config = worker_kubeconfig(integration_clusters.manager)
    good_server = config["clusters"][0]["cluster"]["server"]
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    secret(integration_clusters.manager, name, config)
    mk_cluster(k, name, name)
    o.wait_for(lambda: (active(k, "MultiKueueCluster", name) or ("", ""))[1] == "ClientConnectionFailed", 30, what="failing")
    config["clusters"][0]["cluster"]["server"] = good_server
    client.CoreV1Api(integration_clusters.manager).patch_namespaced_secret(
        name, NS, {"data": {"kubeconfig": base64.b64encode(yaml.safe_dump(config).encode()).decode()}}
    )
    o.wait_for(lambda: (active(k, "MultiKueueCluster", name) or ("",))[0] == "True", 60, what="reconnected after the edit")


def test_config_naming_a_missing_cluster_and_check_naming_a_missing_config(k: o.Kueue, namespace: str) -> None:
    check, config = f"mk-{namespace}", f"cfg-{namespace}"
    k.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": check},
              "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config}}})
    status, reason, message = o.wait_for(lambda: active(k, "AdmissionCheck", check), 20, what="check condition")
    assert (status, reason, message) == ("False", "BadConfig", f"MultiKueueConfig {config!r} not found")
    k.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": config},
              "spec": {"clusters": [f"ghost-{namespace}"]}})
    o.wait_for(lambda: (active(k, "AdmissionCheck", check) or ("", ""))[1] == "NoUsableClusters", 20, what="no usable clusters")
    assert f"ghost-{namespace} (MultiKueueCluster not found)" in active(k, "AdmissionCheck", check)[2]
    k.patch("MultiKueueConfig", config, {"spec": {"clusters": [f"ghost-{namespace}", "worker1"]}})
    o.wait_for(lambda: (active(k, "AdmissionCheck", check) or ("",))[0] == "True", 30, what="active with worker1")
    assert "Inactive clusters: ghost-" in active(k, "AdmissionCheck", check)[2]


def test_controller_survived_all_of_it(integration_controller: ControllerProcess) -> None:
    assert integration_controller.alive
    assert "Traceback" not in integration_controller.logs()


def test_namespace_missing_on_the_worker_shows_in_the_check_message(
    k: o.Kueue, integration_clusters: Clusters, namespace: str
) -> None:
    solo = f"solo-{namespace}"  # exists on the manager only
    client.CoreV1Api(integration_clusters.manager).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=solo)))
    check, config = f"mk-{solo}", f"cfg-{solo}"
    k.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": config}, "spec": {"clusters": ["worker1"]}})
    k.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": check},
              "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config}}})
    k.create(o.resource_flavor(f"default-{solo}"))
    k.create(o.cluster_queue(f"cq-{solo}", {f"default-{solo}": {"cpu": 4}}, checks=[check]))
    k.create(o.local_queue(solo, "user-queue", f"cq-{solo}"))
    o.wait_for(lambda: (active(k, "AdmissionCheck", check) or ("",))[0] == "True", 30, what="check active")
    job = o.batch_job(solo, "lonely", "user-queue", {"cpu": "1"}, managed_by="kueue.x-k8s.io/multikueue")
    client.BatchV1Api(integration_clusters.manager).create_namespaced_job(solo, job)

    def message() -> str:
        for wl in k.list("Workload", solo):
            for state in (wl.get("status") or {}).get("admissionChecks") or []:
                if "Worker 'worker1'" in state.get("message", ""):
                    return str(state["message"])
        return ""

    text = o.wait_for(message, 30, what="the worker's error on the check")
    assert "not found" in text and solo in text
