"""Bad MultiKueue input is reported where the user looks, and fixing it recovers."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess, free_port
from multikueue.dev.pytest_plugin import Clusters

pytestmark = pytest.mark.integration

def active(k: o.Kueue, kind: str, name: str) -> tuple[str, str, str] | None:
    c = o.condition(k.get_or_none(kind, name), "Active")
    return (c["status"], c["reason"], c["message"]) if c else None


def test_exec_plugin_kubeconfig_is_refused(kueue: o.Kueue, multikueue_setup: Any, namespace: str) -> None:
    config = multikueue_setup.worker_kubeconfig()
    config["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/steal-credentials"}}
    multikueue_setup.put_secret(f"exec-{namespace}", config)
    multikueue_setup.put_cluster(f"exec-{namespace}", f"exec-{namespace}")
    status, reason, message = o.wait_for(lambda: active(kueue, "MultiKueueCluster", f"exec-{namespace}"), 20, what="condition")
    assert (status, reason) == ("False", "InsecureKubeConfig")
    assert "exec plugin" in message


def test_missing_secret_then_created(kueue: o.Kueue, multikueue_setup: Any, namespace: str) -> None:
    name = f"late-{namespace}"
    multikueue_setup.put_cluster(name, name)
    status, reason, message = o.wait_for(lambda: active(kueue, "MultiKueueCluster", name), 20, what="condition")
    assert (status, reason) == ("False", "BadConfig")
    assert message == f"Secret kueue-system/{name} not found"
    multikueue_setup.put_secret(name, multikueue_setup.worker_kubeconfig())
    o.wait_for(lambda: (active(kueue, "MultiKueueCluster", name) or ("",))[0] == "True", 60, what="Active once the Secret exists")


def test_kubeconfig_pointing_at_a_closed_port(kueue: o.Kueue, multikueue_setup: Any, namespace: str) -> None:
    config = multikueue_setup.worker_kubeconfig()
    port = free_port()
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    multikueue_setup.put_secret(f"closed-{namespace}", config)
    multikueue_setup.put_cluster(f"closed-{namespace}", f"closed-{namespace}")
    status, reason, message = o.wait_for(lambda: active(kueue, "MultiKueueCluster", f"closed-{namespace}"), 30, what="condition")
    assert (status, reason) == ("False", "ClientConnectionFailed")
    assert f"127.0.0.1:{port}" in message


def test_secret_edit_reconnects(kueue: o.Kueue, multikueue_setup: Any, namespace: str) -> None:
    name = f"edit-{namespace}"
    config = multikueue_setup.worker_kubeconfig()
    good_server = config["clusters"][0]["cluster"]["server"]
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    multikueue_setup.put_secret(name, config)
    multikueue_setup.put_cluster(name, name)
    o.wait_for(lambda: (active(kueue, "MultiKueueCluster", name) or ("", ""))[1] == "ClientConnectionFailed", 30, what="failing")
    config["clusters"][0]["cluster"]["server"] = good_server
    multikueue_setup.update_secret(name, config)
    o.wait_for(lambda: (active(kueue, "MultiKueueCluster", name) or ("",))[0] == "True", 60, what="reconnected after the edit")


def test_config_naming_a_missing_cluster_and_check_naming_a_missing_config(kueue: o.Kueue, multikueue_setup: Any, namespace: str) -> None:
    check, config = f"mk-{namespace}", f"cfg-{namespace}"
    multikueue_setup.put_check(check, config)
    status, reason, message = o.wait_for(lambda: active(kueue, "AdmissionCheck", check), 20, what="check condition")
    assert (status, reason, message) == ("False", "BadConfig", f"MultiKueueConfig {config!r} not found")
    multikueue_setup.put_config(config, [f"ghost-{namespace}"])
    o.wait_for(lambda: (active(kueue, "AdmissionCheck", check) or ("", ""))[1] == "NoUsableClusters", 20, what="no usable clusters")
    assert f"ghost-{namespace} (MultiKueueCluster not found)" in active(kueue, "AdmissionCheck", check)[2]
    kueue.patch("MultiKueueConfig", config, {"spec": {"clusters": [f"ghost-{namespace}", "worker1"]}})
    o.wait_for(lambda: (active(kueue, "AdmissionCheck", check) or ("",))[0] == "True", 30, what="active with worker1")
    assert "Inactive clusters: ghost-" in active(kueue, "AdmissionCheck", check)[2]


def test_controller_survived_all_of_it(integration_controller: ControllerProcess) -> None:
    assert integration_controller.alive
    assert "Traceback" not in integration_controller.logs()


def test_namespace_missing_on_the_worker_shows_in_the_check_message(
    kueue: o.Kueue, multikueue_setup: Any, integration_clusters: Clusters, namespace: str
) -> None:
    solo = f"solo-{namespace}"  # exists on the manager only
    client.CoreV1Api(integration_clusters.manager).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=solo)))
    check, config = f"mk-{solo}", f"cfg-{solo}"
    multikueue_setup.put_config(config, ["worker1"])
    multikueue_setup.put_check(check, config)
    kueue.create(o.resource_flavor(f"default-{solo}"))
    kueue.create(o.cluster_queue(f"cq-{solo}", {f"default-{solo}": {"cpu": 4}}, checks=[check]))
    kueue.create(o.local_queue(solo, "user-queue", f"cq-{solo}"))
    o.wait_for(lambda: (active(kueue, "AdmissionCheck", check) or ("",))[0] == "True", 30, what="check active")
    job = o.batch_job(solo, "lonely", "user-queue", {"cpu": "1"}, managed_by="kueue.x-k8s.io/multikueue")
    client.BatchV1Api(integration_clusters.manager).create_namespaced_job(solo, job)

    def message() -> str:
        for wl in kueue.list("Workload", solo):
            for state in (wl.get("status") or {}).get("admissionChecks") or []:
                if "Worker 'worker1'" in state.get("message", ""):
                    return str(state["message"])
        return ""

    text = o.wait_for(message, 30, what="the worker's error on the check")
    assert "not found" in text and solo in text
