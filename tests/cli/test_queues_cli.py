"""``multikueue list|stop|resume|version`` against a real apiserver (the integration manager)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from multikueue import __version__
from multikueue.cli.main import main
from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters

pytestmark = pytest.mark.integration


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def objects(integration_clusters: Clusters, namespace: str) -> dict[str, Any]:
    kueue = o.Kueue(integration_clusters.manager)
    flavor, cq = f"flavor-{namespace}", f"cq-{namespace}"
    kueue.create(o.resource_flavor(flavor))
    kueue.create(o.cluster_queue(cq, {flavor: {"cpu": 1}}))
    kueue.create(o.local_queue(namespace, "user-queue", cq))
    kueue.create(o.workload(namespace, "wl-one", "user-queue", {"cpu": "1"}))
    return {"kueue": kueue, "cq": cq, "kubeconfig": str(integration_clusters.kubeconfigs[0])}


def test_list_shows_each_kind_with_kueuectl_columns(capsys: pytest.CaptureFixture[str], objects: dict[str, Any], namespace: str) -> None:
    kubeconfig = objects["kubeconfig"]
    code, out, _ = run(capsys, "list", "workloads", "--kubeconfig", kubeconfig, "-n", namespace)
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:4] == ["NAME", "JOB", "TYPE", "JOB"]
    assert row.split()[0] == "wl-one" and "user-queue" in row and objects["cq"] in row

    code, out, _ = run(capsys, "list", "cq", "--kubeconfig", kubeconfig)
    assert code == 0 and any(line.split()[0] == objects["cq"] for line in out.splitlines()[1:])

    code, out, _ = run(capsys, "list", "lq", "-A", "--kubeconfig", kubeconfig, "--no-headers")
    assert code == 0 and [namespace, "user-queue", objects["cq"]] in [line.split()[:3] for line in out.splitlines()]

    code, out, _ = run(capsys, "list", "wl", "--kubeconfig", kubeconfig, "-n", namespace, "-o", "json", "--status", "finished")
    assert code == 0 and out.strip() == "[]"

    code, out, err = run(capsys, "list", "wl", "--kubeconfig", kubeconfig, "-n", f"{namespace}-empty")
    assert code == 0 and out == "" and err.strip() == f"No workloads found in {namespace}-empty namespace."


def test_stop_and_resume_write_upstreams_fields(capsys: pytest.CaptureFixture[str], objects: dict[str, Any], namespace: str) -> None:
    kueue, cq, kubeconfig = objects["kueue"], objects["cq"], objects["kubeconfig"]

    assert run(capsys, "stop", "clusterqueue", cq, "--kubeconfig", kubeconfig)[:2] == (0, f"clusterqueue.kueue.x-k8s.io/{cq} stopped\n")
    assert kueue.get("ClusterQueue", cq)["spec"]["stopPolicy"] == "HoldAndDrain"
    assert run(capsys, "stop", "cq", cq, "--keep-already-running", "--kubeconfig", kubeconfig)[0] == 0
    assert kueue.get("ClusterQueue", cq)["spec"]["stopPolicy"] == "Hold"
    assert run(capsys, "resume", "cq", cq, "--kubeconfig", kubeconfig)[:2] == (0, f"clusterqueue.kueue.x-k8s.io/{cq} resumed\n")
    assert kueue.get("ClusterQueue", cq)["spec"]["stopPolicy"] == "None"

    assert run(capsys, "stop", "lq", "user-queue", "-n", namespace, "--kubeconfig", kubeconfig)[0] == 0
    assert kueue.get("LocalQueue", "user-queue", namespace)["spec"]["stopPolicy"] == "HoldAndDrain"
    code, out, _ = run(capsys, "list", "lq", "-n", namespace, "--kubeconfig", kubeconfig)
    assert "HoldAndDrain" in out.splitlines()[1].split()
    assert run(capsys, "resume", "lq", "user-queue", "-n", namespace, "--kubeconfig", kubeconfig)[0] == 0
    assert kueue.get("LocalQueue", "user-queue", namespace)["spec"]["stopPolicy"] == "None"

    assert run(capsys, "stop", "workload", "wl-one", "-n", namespace, "--kubeconfig", kubeconfig)[:2] == (
        0, "workload.kueue.x-k8s.io/wl-one stopped\n")
    assert kueue.get("Workload", "wl-one", namespace)["spec"]["active"] is False
    code, out, _ = run(capsys, "list", "wl", "-n", namespace, "--kubeconfig", kubeconfig, "-o", "json")
    assert code == 0 and '"ACTIVE": "false"' in out
    assert run(capsys, "resume", "wl", "wl-one", "-n", namespace, "--kubeconfig", kubeconfig)[0] == 0
    assert kueue.get("Workload", "wl-one", namespace)["spec"]["active"] is True


def test_missing_object_and_unreachable_manager_are_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], objects: dict[str, Any], namespace: str, tmp_path: Path
) -> None:
    kubeconfig = objects["kubeconfig"]
    code, out, err = run(capsys, "stop", "wl", "nope", "-n", namespace, "--kubeconfig", kubeconfig)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"multikueue: error: Workload {namespace}/nope not found on the manager at https://")

    code, _, err = run(capsys, "stop", "wl", "wl-one", "--keep-already-running", "-n", namespace, "--kubeconfig", kubeconfig)
    assert code == 1 and "queues only" in err

    document = yaml.safe_load(Path(kubeconfig).read_text())
    document["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    unreachable = tmp_path / "kubeconfig"
    unreachable.write_text(yaml.safe_dump(document))
    for argv in (["list", "cq"], ["resume", "cq", "x"], ["version"]):
        code, _, err = run(capsys, *argv, "--kubeconfig", str(unreachable))
        assert code == 1, argv
        assert err.count("\n") == 1 and "cannot reach the manager at https://127.0.0.1:1: connection refused" in err, err


def test_version_asks_the_controller(
    capsys: pytest.CaptureFixture[str], integration_clusters: Clusters, integration_controller: ControllerProcess
) -> None:
    assert run(capsys, "version", "--client") == (0, f"Client Version: {__version__}\n", "")
    code, out, _ = run(capsys, "version", "--controller-url", f"http://127.0.0.1:{integration_controller.health_port}")
    assert code == 0
    assert out.splitlines()[1].startswith(f"Controller Version: {__version__} (http://127.0.0.1:{integration_controller.health_port}/version")
    # No controller is deployed as pods here: said, not an error.
    code, out, _ = run(capsys, "version", "--kubeconfig", str(integration_clusters.kubeconfigs[0]))
    assert code == 0 and "no controller pods in namespace kueue-system" in out
    code, _, err = run(capsys, "version", "--controller-url", "http://127.0.0.1:1")
    assert code == 1 and "did not answer: connection refused" in err


def _outward_address() -> str | None:
    """This machine's address on its default route (the apiserver refuses to proxy to loopback)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent for a UDP connect
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def test_version_reaches_a_deployed_controller_through_the_pod_proxy(
    capsys: pytest.CaptureFixture[str], integration_clusters: Clusters, integration_controller: ControllerProcess
) -> None:
    """A pod object standing for the Deployment's pod, whose IP is where the integration controller listens.

    The apiserver proxies to the pod's IP and named port as for a real pod
    (no kubelet is involved in the pod proxy), so this is the path
    ``multikueue version`` takes against config/default.
    """
    from kubernetes import client

    address = _outward_address()
    if address is None:
        pytest.skip("no non-loopback address to stand for a pod IP")
    core = client.CoreV1Api(integration_clusters.manager)
    namespace, name = "kueue-system", "multikueue-controller-manager-test"
    try:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    pod = {
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "multikueue", "app.kubernetes.io/component": "controller-manager"}},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [{"name": "manager", "image": "multikueue:test",
                            "ports": [{"name": "health", "containerPort": integration_controller.health_port}]}],
        },
    }
    core.create_namespaced_pod(namespace, pod)
    try:
        core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Running", "podIP": address, "podIPs": [{"ip": address}]}})
        code, out, err = run(capsys, "version", "--kubeconfig", str(integration_clusters.kubeconfigs[0]))
        assert code == 0, err
        assert out.splitlines()[1] == f"Controller Version: {__version__} (pod {namespace}/{name}, image multikueue:test)"
    finally:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
