"""`multikueue dev clusters up/status/down` as a developer runs them."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client, config

from multikueue.runtime.kubeconfig import validate_kubeconfig

from multikueue.dev.binaries import ensure_binaries
from multikueue.dev.pytest_plugin import free_base_port

pytestmark = pytest.mark.integration


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "multikueue.cli.main", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
    )


def running(pid: int) -> bool:
    """True unless the process is gone or a zombie (exited, waiting to be reaped by init)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_up_status_down_leaves_nothing_behind(tmp_path: Path) -> None:
    binaries = ensure_binaries().binaries
    cache = tmp_path / "cache"
    # Reuse the already-built binaries: a second `up` must not rebuild.
    (cache / "bin").mkdir(parents=True)
    for path in (binaries.controlplane, binaries.kwok):
        (cache / "bin" / path.name).symlink_to(path)
    env = {**os.environ, "MULTIKUEUE_CACHE": str(cache), "GO": "/nonexistent/go"}
    base = free_base_port(3)
    up = cli("dev", "clusters", "up", "--name", "clitest", "--apiserver-only", "--base-port", str(base), env=env)
    assert up.returncode == 0, up.stderr
    assert "local clusters 'clitest' are up" in up.stdout
    state = json.loads((cache / "clusters" / "clitest" / "state.json").read_text())
    pids = [p["pid"] for c in state["clusters"] for p in c["processes"]]
    assert len(pids) == 6  # etcd + apiserver for manager, worker1, worker2

    again = cli("dev", "clusters", "up", "--name", "clitest", "--apiserver-only", "--base-port", str(base), env=env)
    assert again.returncode == 1 and "already running" in again.stderr

    status = cli("dev", "clusters", "status", "--name", "clitest", "-o", "json", env=env)
    assert status.returncode == 0, status.stderr
    assert [r["cluster"] for r in json.loads(status.stdout)] == ["manager", "worker1", "worker2"]

    manager_kubeconfig = cache / "clusters" / "clitest" / "manager" / "kubeconfig"
    kubectl = shutil.which("kubectl")
    if kubectl:  # the acceptance check as a person types it
        listed = subprocess.run(
            [kubectl, "--kubeconfig", str(manager_kubeconfig), "get", "multikueueclusters", "-o", "name"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60,
        )
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split() == ["multikueuecluster.kueue.x-k8s.io/worker1", "multikueuecluster.kueue.x-k8s.io/worker2"]

    # `dev wire` connects clusters it did not start (kind's, for instance) the same way.
    worker1_kubeconfig = cache / "clusters" / "clitest" / "worker1" / "kubeconfig"
    wired = cli(
        "dev", "wire", "--manager", str(manager_kubeconfig), "--worker", f"extra1={worker1_kubeconfig}", env=env
    )
    assert wired.returncode == 0, wired.stderr
    assert "worker extra1: Secret kueue-system/extra1-secret, MultiKueueCluster extra1" in wired.stdout
    manager = config.new_client_from_config(config_file=str(manager_kubeconfig))
    secret = client.CoreV1Api(manager).read_namespaced_secret("extra1-secret", "kueue-system")
    valid = validate_kubeconfig(base64.b64decode(secret.data["kubeconfig"]))
    assert valid.server == f"https://127.0.0.1:{base + 10}"
    bad = cli("dev", "wire", "--manager", str(manager_kubeconfig), "--worker", f"x={tmp_path / 'missing'}", env=env)
    assert bad.returncode == 1 and "cannot read the kubeconfig of worker 'x'" in bad.stderr

    down = cli("dev", "clusters", "down", "--name", "clitest", env=env)
    assert down.returncode == 0, down.stderr
    alive = [pid for pid in pids if running(pid)]
    assert alive == [], f"processes left behind: {alive}"
