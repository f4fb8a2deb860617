"""Bad MultiKueue input is reported where the user looks, and fixing it recovers."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess, free_port
from multikueue.dev.pytest_plugin import Clusters, workers_report

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


def test_a_missing_config_evicts_nothing(
    kueue: o.Kueue, multikueue_setup: Any, integration_clusters: Clusters, namespace: str
) -> None:
    """Issue 10, item A: deleting the MultiKueueConfig and creating it again keeps the running Workload.

    Unknown is not empty: the Workload stays Ready on its worker, nothing is
    suspended or re-dispatched (before, every running Workload went to Retry).
    """
    import time

    ns = namespace
    check, config = f"mk-{ns}", f"cfg-{ns}"
    multikueue_setup.put_config(config, ["worker1"])
    multikueue_setup.put_check(check, config)
    kueue.create(o.resource_flavor(f"default-{ns}"))
    kueue.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 4}}, checks=[check]))
    kueue.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    o.wait_for(lambda: (active(kueue, "AdmissionCheck", check) or ("",))[0] == "True", 30, what="check active")
    job = o.batch_job(ns, "steady", "user-queue", {"cpu": "1"}, managed_by="kueue.x-k8s.io/multikueue")
    client.BatchV1Api(integration_clusters.manager).create_namespaced_job(ns, job)
    worker = o.Kueue(integration_clusters.worker(1))
    copy = o.wait_for(lambda: next(iter(worker.list("Workload", ns)), None), 30, what="the copy on worker1")
    name = copy["metadata"]["name"]
    # Play the worker's Kueue: it reserves quota for the copy.
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    worker.patch("Workload", name, {"status": {
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": now}],
        "admission": {"clusterQueue": f"cq-{ns}", "podSetAssignments": [{"name": "main", "flavors": {"cpu": f"default-{ns}"}, "count": 1}]},
    }}, ns, status=True)

    def running() -> dict[str, Any] | None:
        wl = kueue.get("Workload", name, ns)
        state = next(c for c in wl["status"]["admissionChecks"] if c["name"] == check)
        return wl if state["state"] == "Ready" and wl["status"].get("clusterName") == "worker1" else None

    before = o.wait_for(running, 30, what="Ready on worker1")
    remote_job = client.BatchV1Api(integration_clusters.worker(1)).read_namespaced_job("steady", ns)

    kueue.delete("MultiKueueConfig", config)
    o.wait_for(lambda: (active(kueue, "AdmissionCheck", check) or ("",))[0] == "False", 20, what="check inactive")
    time.sleep(5)
    assert running() is not None, "the running Workload was given up while its config was missing"
    assert not o.is_true(kueue.get("Workload", name, ns), "Evicted")

    multikueue_setup.put_config(config, ["worker1"])
    o.wait_for(lambda: (active(kueue, "AdmissionCheck", check) or ("",))[0] == "True", 30, what="check active again")
    time.sleep(2)
    after = running()
    assert after is not None and not o.is_true(after, "Evicted")
    assert next(c for c in after["status"]["admissionChecks"] if c["name"] == check)["lastTransitionTime"] == next(
        c for c in before["status"]["admissionChecks"] if c["name"] == check
    )["lastTransitionTime"]
    again = client.BatchV1Api(integration_clusters.worker(1)).read_namespaced_job("steady", ns)
    assert again.metadata.uid == remote_job.metadata.uid, "the remote Job was replaced"


def test_a_failure_report_says_how_the_manager_sees_its_workers(
    kueue: o.Kueue, multikueue_setup: Any, namespace: str, integration_clusters: Clusters
) -> None:
    """What an e2e failure report adds (workers_report): each MultiKueueCluster's Active condition and the load."""
    name = f"report-{namespace}"
    multikueue_setup.put_cluster(name, name)
    o.wait_for(lambda: active(kueue, "MultiKueueCluster", name), 20, what="condition")
    lines = workers_report(integration_clusters).splitlines()
    [line] = [line for line in lines if line.startswith(f"{name}: ")]
    assert line.startswith(f"{name}: Active=False BadConfig since ") and line.endswith(f"Secret kueue-system/{name} not found")
    assert lines[-1].startswith("load average (1, 5, 15 min): ")
