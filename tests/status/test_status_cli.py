"""`multikueue status` against real apiservers: tables, JSON/YAML, remote states read through Secrets, errors.

Other tests share the session's clusters and a controller may be running on
the manager, so every object here is named after the test's namespace,
assertions look only at those objects, and the Workloads' statuses are ones
the controller leaves alone (their check has no controller, and each status
is where the Workload lifecycle stops).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from multikueue.cli.main import main
from multikueue.dev import objects as o
from multikueue.dev.clusterset import ClusterSetOptions
from multikueue.dev.controllers import free_port
from multikueue.dev.kubeconfig import build_kubeconfig, write
from multikueue.dev.pytest_plugin import Clusters, _start

pytestmark = pytest.mark.integration

NS = "kueue-system"
T0 = "2025-03-01T10:00:00Z"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def cond(ctype: str, status: str = "True", reason: str | None = None, message: str = "") -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason or ctype, "message": message, "lastTransitionTime": T0}


def admission(cq: str) -> dict[str, Any]:
    return {"clusterQueue": cq, "podSetAssignments": [{"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1"}, "count": 1}]}


def check_state(name: str, state: str, message: str = "") -> dict[str, Any]:
    return {"name": name, "state": state, "message": message, "lastTransitionTime": T0}


RESERVED = cond("QuotaReserved", message="Quota reserved in ClusterQueue")
ADMITTED = cond("Admitted", message="The workload is admitted")


def put_workload(k: o.Kueue, namespace: str, name: str, status: dict[str, Any] | None = None, *, active: bool = True) -> None:
    body = o.workload(namespace, name, "user-queue", {"cpu": "1"})
    body["spec"]["active"] = active
    k.create(body)
    if status:
        k.patch("Workload", name, {"status": status}, namespace=namespace, status=True)


@dataclass
class Scene:
    """What the tests set up, by name."""

    namespace: str
    kubeconfig: Path
    check: str  # the MultiKueue AdmissionCheck
    probe: str  # the check the Workloads carry (no controller handles it)
    lost: str  # MultiKueueCluster whose Secret does not exist
    closed: str  # MultiKueueCluster whose kubeconfig points at a closed port
    insecure: str  # MultiKueueCluster whose kubeconfig runs an exec plugin
    from_file: str  # MultiKueueCluster whose kubeconfig is a file (locationType Path)


@pytest.fixture
def scene(integration_clusters: Clusters, multikueue_setup: Any, namespace: str, tmp_path: Path) -> Iterator[Scene]:
    manager = integration_clusters.manager
    k, k1 = o.Kueue(manager), o.Kueue(integration_clusters.worker(1))
    tag = namespace[2:7]  # short names keep the table's columns readable; unique within the session
    s = Scene(
        namespace=namespace,
        kubeconfig=integration_clusters.kubeconfigs[0],
        check=f"mk-{tag}",
        probe=f"ac-{tag}",
        lost=f"lost-{tag}",
        closed=f"closed-{tag}",
        insecure=f"insecure-{tag}",
        from_file=f"file-{tag}",
    )
    config_name = f"cfg-{tag}"
    mk = multikueue_setup
    mk.put_config(config_name, ["worker1", "worker2"])
    mk.put_check(s.check, config_name)
    # What the controller writes for a config whose workers are both connected (it may get there first).
    k.patch("AdmissionCheck", s.check, {"status": {"conditions": [cond("Active", reason="Active", message="The admission check is active")]}}, status=True)
    k.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": s.probe},
              "spec": {"controllerName": "example.com/status-probe"}})

    good = mk.worker_kubeconfig()
    mk.put_cluster(s.lost, f"{s.lost}-secret")
    closed = yaml.safe_load(yaml.safe_dump(good))
    closed["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    mk.put_secret(f"{s.closed}-secret", closed)
    mk.put_cluster(s.closed, f"{s.closed}-secret")
    insecure = yaml.safe_load(yaml.safe_dump(good))
    insecure["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/false"}}
    mk.put_secret(f"{s.insecure}-secret", insecure)
    mk.put_cluster(s.insecure, f"{s.insecure}-secret")
    mk.put_cluster(s.from_file, str(write(good, tmp_path / "worker1.kubeconfig")), "Path")

    ns, cq = namespace, f"cq-{tag}"
    ready = [check_state(s.probe, "Ready", 'The workload got reservation on "worker1"')]
    put_workload(k, ns, "waiting")
    put_workload(k, ns, "nominated", {"conditions": [RESERVED], "admission": admission(cq),
                                      "admissionChecks": [check_state(s.probe, "Pending")], "nominatedClusterNames": ["worker1", "worker2"]})
    placed = {"conditions": [RESERVED, ADMITTED], "admission": admission(cq), "admissionChecks": ready}
    put_workload(k, ns, "running", {**placed, "clusterName": "worker1"})
    put_workload(k, ns, "done", {**placed, "conditions": [RESERVED, ADMITTED, cond("Finished", reason="Succeeded", message="Job finished successfully")],
                                 "clusterName": "worker1"})
    put_workload(k, ns, "gone", {**placed, "clusterName": "worker2"})
    put_workload(k, ns, "lost", {**placed, "clusterName": s.lost})
    put_workload(k, ns, "closed", {**placed, "clusterName": s.closed})
    put_workload(k, ns, "insecure", {**placed, "clusterName": s.insecure})
    put_workload(k, ns, "via-file", {**placed, "clusterName": s.from_file})
    put_workload(k, ns, "rejected", {"conditions": [cond("QuotaReserved", "False", "Pending", "Rejected"),
                                                    cond("Evicted", reason="DeactivatedDueToAdmissionCheck", message="Admission check rejected it")],
                                     "admissionChecks": [check_state(s.probe, "Rejected", "no capacity anywhere")]}, active=False)
    # The copies on worker 1 (worker 2 has none: "gone" is not found there).
    put_workload(k1, ns, "running", {"conditions": [RESERVED, ADMITTED], "admission": admission("worker-cq")})
    put_workload(k1, ns, "done", {"conditions": [RESERVED, ADMITTED, cond("Finished", reason="Succeeded")], "admission": admission("worker-cq")})
    put_workload(k1, ns, "via-file", {"conditions": [RESERVED], "admission": admission("worker-cq")})
    yield s
    for kind, name in [("AdmissionCheck", s.check), ("AdmissionCheck", s.probe), ("MultiKueueConfig", config_name),
                       ("MultiKueueCluster", s.lost), ("MultiKueueCluster", s.closed), ("MultiKueueCluster", s.insecure),
                       ("MultiKueueCluster", s.from_file)]:
        k.delete(kind, name)
    for secret in (f"{s.closed}-secret", f"{s.insecure}-secret"):
        client.CoreV1Api(manager).delete_namespaced_secret(secret, NS)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["status", *args])
    out, err = capsys.readouterr()
    return code, out, err


def document(capsys: pytest.CaptureFixture[str], scene: Scene, *extra: str) -> dict[str, Any]:
    code, out, err = run(capsys, "--kubeconfig", str(scene.kubeconfig), "-n", scene.namespace, "-o", "json", *extra)
    assert (code, err) == (0, "")
    return json.loads(out)  # type: ignore[no-any-return]


def by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in rows}


def test_json_document_has_every_workload_cluster_and_check(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    doc = document(capsys, scene)
    assert list(doc) == ["workloads", "multiKueueClusters", "admissionChecks"]
    workloads = by_name(doc["workloads"])
    assert sorted(workloads) == sorted(["waiting", "nominated", "running", "done", "gone", "lost", "closed", "insecure", "via-file", "rejected"])
    assert workloads["running"] == {
        "namespace": scene.namespace,
        "name": "running",
        "queue": "user-queue",
        "clusterQueue": f"cq-{scene.namespace[2:7]}",
        "quota": {"state": "Admitted", "reason": "Admitted", "message": "The workload is admitted"},
        "admissionChecks": [{"name": scene.probe, "state": "Ready", "message": 'The workload got reservation on "worker1"'}],
        "nominatedClusterNames": [],
        "clusterName": "worker1",
        "remote": "Admitted on worker1",
    }
    assert workloads["waiting"]["quota"]["state"] == "Pending"  # a controller may add why it waits
    assert workloads["waiting"]["remote"] is None
    nominated = workloads["nominated"]
    assert (nominated["quota"]["state"], nominated["nominatedClusterNames"], nominated["clusterName"], nominated["remote"]) == (
        "QuotaReserved", ["worker1", "worker2"], None, None
    )
    assert nominated["admissionChecks"] == [{"name": scene.probe, "state": "Pending", "message": ""}]
    assert workloads["rejected"]["quota"] == {
        "state": "Inactive", "reason": "DeactivatedDueToAdmissionCheck", "message": "Admission check rejected it"
    }
    assert workloads["rejected"]["admissionChecks"][0]["state"] == "Rejected"
    assert workloads["done"]["quota"]["state"] == "Finished"
    remotes = {name: row["remote"] for name, row in workloads.items()}
    assert remotes["done"] == "Finished: Succeeded"
    assert remotes["gone"] == "not found"
    assert remotes["via-file"] == "QuotaReserved"
    assert remotes["lost"] == f"unknown: Secret kueue-system/{scene.lost}-secret not found"
    assert remotes["closed"].startswith("unknown: cannot reach https://127.0.0.1:")
    assert remotes["closed"].endswith(": connection refused")
    assert remotes["insecure"] == "unknown: insecure kubeconfig: user 'multikueue-manager@worker1' uses an exec plugin"

    clusters = by_name(doc["multiKueueClusters"])
    assert {"worker1", "worker2", scene.lost, scene.closed} <= set(clusters)
    assert clusters[scene.lost]["kubeConfig"] == {"location": f"{scene.lost}-secret", "locationType": "Secret"}
    assert clusters[scene.lost]["active"] in ("Unknown", "False")  # False once a controller looked at it
    assert set(clusters[scene.lost]) == {"name", "active", "reason", "message", "since", "kubeConfig"}

    checks = by_name(doc["admissionChecks"])
    assert checks[scene.check]["controllerName"] == MULTIKUEUE
    assert checks[scene.check]["parameters"] == f"MultiKueueConfig/cfg-{scene.namespace[2:7]}"
    assert (checks[scene.check]["active"], checks[scene.check]["reason"]) == ("True", "Active")
    assert (checks[scene.probe]["controllerName"], checks[scene.probe]["active"]) == ("example.com/status-probe", "Unknown")


def test_table_for_people(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--kubeconfig", str(scene.kubeconfig), "-n", scene.namespace)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert "…" not in out, "not a terminal: no cell is cut"
    assert lines[0] == "Workloads:"
    assert lines[1].split() == ["NAME", "QUEUE", "QUOTA", "CHECKS", "NOMINATED", "CLUSTER", "REMOTE"]
    end = lines.index("")
    rows = {line.split()[0]: i for i, line in enumerate(lines[:end]) if i > 1 and not line.startswith(" ")}
    running = lines[rows["running"]]
    assert running.split()[:4] == ["running", "user-queue", "Admitted", f"{scene.probe}=Ready"]
    assert running.split()[-4:] == ["worker1", "Admitted", "on", "worker1"]
    assert lines[rows["running"] + 1] == f'  {scene.probe}: The workload got reservation on "worker1"'
    assert lines[rows["done"]].split()[-3:] == ["worker1", "Finished:", "Succeeded"]
    assert lines[rows["gone"]].split()[-3:] == ["worker2", "not", "found"]
    assert "worker1,worker2" in lines[rows["nominated"]]
    assert lines[rows["rejected"]].split()[:4] == ["rejected", "user-queue", "Inactive", f"{scene.probe}=Rejected"]
    assert lines[rows["rejected"] + 1] == "  quota: DeactivatedDueToAdmissionCheck: Admission check rejected it"
    assert lines[rows["rejected"] + 2] == f"  {scene.probe}: no capacity anywhere"
    assert lines[rows["lost"]].split()[-2:] == [scene.lost, "unknown"]
    assert lines[rows["lost"] + 2] == f"  remote ({scene.lost}): Secret kueue-system/{scene.lost}-secret not found"

    clusters = lines.index("MultiKueueClusters:")
    assert lines[clusters + 1].split() == ["NAME", "ACTIVE", "REASON", "SINCE", "KUBECONFIG", "MESSAGE"]
    lost_cluster = next(line for line in lines[clusters:] if line.startswith(scene.lost + " "))
    assert f"Secret {scene.lost}-secret" in lost_cluster
    checks = lines.index("AdmissionChecks:")
    mk = next(line for line in lines[checks:] if line.startswith(scene.check + " "))
    assert mk.split()[1] == MULTIKUEUE
    parameters = mk.split()[2]
    assert parameters == f"MultiKueueConfig/cfg-{scene.namespace[2:7]}"
    assert mk.split()[3:5] == ["True", "Active"]


def test_no_remote_skips_the_workers(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    workloads = by_name(document(capsys, scene, "--no-remote")["workloads"])
    assert workloads["running"]["clusterName"] == "worker1"
    assert all(row["remote"] is None for row in workloads.values())


def test_yaml_is_the_json_document(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    """The two outputs are the same document.

    Each call reads the cluster afresh, and a controller running in the session may write why
    "waiting" waits between two reads; so the YAML is read before and after the JSON, and the
    JSON must equal one of them (the write happens once).
    """
    def as_yaml() -> list[dict[str, object]]:
        code, out, _ = run(capsys, "--kubeconfig", str(scene.kubeconfig), "-n", scene.namespace, "-o", "yaml", "--no-remote")
        assert code == 0
        return yaml.safe_load(out)["workloads"]  # type: ignore[no-any-return]

    before = as_yaml()
    as_json = document(capsys, scene, "--no-remote")["workloads"]
    after = as_yaml()
    assert as_json in (before, after)


def test_secret_the_user_cannot_read(
    scene: Scene, integration_clusters: Clusters, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A user allowed to read Kueue objects but not Secrets gets the report, with the reason in REMOTE."""
    manager = integration_clusters.manager
    core, rbac = client.CoreV1Api(manager), client.RbacAuthorizationV1Api(manager)
    name = f"status-reader-{scene.namespace}"
    core.create_namespaced_service_account(scene.namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    rbac.create_cluster_role(client.V1ClusterRole(
        metadata=client.V1ObjectMeta(name=name),
        rules=[client.V1PolicyRule(api_groups=["kueue.x-k8s.io"], resources=["workloads", "multikueueclusters", "admissionchecks"],
                                   verbs=["get", "list", "watch"])],
    ))
    try:
        rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=name),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=name),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=scene.namespace)],
        ))
        token = core.create_namespaced_service_account_token(
            name, scene.namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))
        ).status.token
        admin = yaml.safe_load(scene.kubeconfig.read_text())
        ca = base64.b64decode(admin["clusters"][0]["cluster"]["certificate-authority-data"])
        path = write(build_kubeconfig(name="manager", server=integration_clusters.server(0), ca_pem=ca, user=name, token=token),
                     tmp_path / "reader.kubeconfig")
        code, out, err = run(capsys, "--kubeconfig", str(path), "-n", scene.namespace, "-o", "json")
        assert (code, err) == (0, "")
        remotes = {row["name"]: row["remote"] for row in json.loads(out)["workloads"]}
        assert remotes["running"] == "unknown: cannot read Secret kueue-system/worker1-secret (403)"
        assert remotes["via-file"] == "QuotaReserved"  # a file needs no Secret
    finally:
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                delete(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def test_unreachable_manager_exits_1_with_one_line(
    integration_clusters: Clusters, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = yaml.safe_load(integration_clusters.kubeconfigs[0].read_text())
    port = free_port()
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path = write(config, tmp_path / "closed.kubeconfig")
    code, out, err = run(capsys, "--kubeconfig", str(path))
    assert (code, out) == (1, "")
    assert err == f"multikueue: error: cannot reach the manager at https://127.0.0.1:{port}: connection refused\n"


def test_bad_kubeconfig_exits_1(integration_clusters: Clusters, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "--kubeconfig", str(tmp_path / "nowhere"))
    assert (code, out, err) == (1, "", f"multikueue: error: kubeconfig {tmp_path / 'nowhere'} not found\n")
    code, out, err = run(capsys, "--kubeconfig", str(integration_clusters.kubeconfigs[0]), "--context", "no-such-context")
    assert (code, out) == (1, "")
    assert err.startswith(f"multikueue: error: cannot use kubeconfig {integration_clusters.kubeconfigs[0]}: ")
    assert "no-such-context" in err and err.count("\n") == 1


@pytest.fixture(scope="module")
def bare_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An apiserver without the kueue.x-k8s.io CRDs."""
    clusters = _start(tmp_path_factory.mktemp("clusters"), "bare", ClusterSetOptions(workers=0, full=False, wire=False, install_crds=False))
    try:
        yield clusters.manager.kubeconfig_path
    finally:
        clusters.down()


def test_missing_crds_are_named(bare_apiserver: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--kubeconfig", str(bare_apiserver))
    assert (code, out) == (1, "")
    assert err.startswith("multikueue: error: the Kueue CRDs are not installed on the manager at https://")
    assert err.endswith(
        ": workloads.kueue.x-k8s.io, multikueueclusters.kueue.x-k8s.io, admissionchecks.kueue.x-k8s.io (v1beta2) not found\n"
    )


def _lines(stream: Any, into: Queue[str]) -> None:
    for line in stream:
        into.put(line)


def _ctrl_c_heard() -> None:
    """In the child before exec: SIGINT as a terminal's Ctrl-C finds it, whatever pytest was started under.

    A shell without job control starts background commands with SIGINT ignored, and Python then keeps
    it ignored (no KeyboardInterrupt): the test would wait for a stop that cannot come.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_watch_prints_a_document_per_change_and_stops_on_ctrl_c(
    scene: Scene, integration_clusters: Clusters
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "multikueue.cli.main", "status", "--kubeconfig", str(scene.kubeconfig),
         "-n", scene.namespace, "-o", "json", "--watch", "--no-remote"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_heard,
    )
    lines: Queue[str] = Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        first = json.loads(lines.get(timeout=60))
        assert "late" not in by_name(first["workloads"])
        put_workload(o.Kueue(integration_clusters.manager), scene.namespace, "late")
        deadline = time.monotonic() + 30
        while True:
            try:
                doc = json.loads(lines.get(timeout=max(0.1, deadline - time.monotonic())))
            except Empty:
                pytest.fail("no document with the new Workload within 30s")
            if "late" in by_name(doc["workloads"]):
                break
        assert by_name(doc["workloads"])["late"]["quota"]["state"] == "Pending"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_kubectl_plugin(scene: Scene) -> None:
    """`kubectl multikueue status` runs the same command (kubectl finds kubectl-multikueue on PATH)."""
    kubectl, plugin = shutil.which("kubectl"), Path(sys.executable).parent / "kubectl-multikueue"
    if kubectl is None or not plugin.exists():
        pytest.skip("kubectl or the installed kubectl-multikueue script is not available")
    env = {**os.environ, "PATH": f"{plugin.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [kubectl, "multikueue", "status", "--kubeconfig", str(scene.kubeconfig), "-n", scene.namespace, "-o", "json", "--no-remote"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert by_name(json.loads(result.stdout)["workloads"])["running"]["clusterName"] == "worker1"
