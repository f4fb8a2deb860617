"""What the demo leaves behind (issue 15): its controllers keep running, recorded so `dev clusters down`
stops them, and its closing lines are commands that work as printed in the user's shell."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from multikueue.dev.demo import closing_lines, cli_command, record_controller, running_controller, shell_path
from multikueue.dev.localcluster import ClusterPorts, LocalCluster, read_state, write_state
from multikueue.dev.process import ManagedProcess, spawn

pytestmark = pytest.mark.unit


def test_shell_path_abbreviates_the_home_folder_and_quotes_the_rest(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert shell_path(home / ".cache/multikueue/venv/bin/multikueue", home) == "~/.cache/multikueue/venv/bin/multikueue"
    assert shell_path(Path("/opt/mk/bin/multikueue"), home) == "/opt/mk/bin/multikueue"
    assert shell_path(home / "my dir/multikueue", home) == f"'{home}/my dir/multikueue'"
    assert shell_path(Path("/srv/a b"), home) == "'/srv/a b'"


def test_cli_command_is_the_script_beside_this_python(tmp_path: Path) -> None:
    home = tmp_path
    bindir = tmp_path / ".cache/multikueue/venv/bin"
    bindir.mkdir(parents=True)
    python = bindir / "python"
    assert cli_command(str(python), home) == "~/.cache/multikueue/venv/bin/python -m multikueue.cli.main"
    (bindir / "multikueue").write_text("#!/bin/sh\n")
    assert cli_command(str(python), home) == "~/.cache/multikueue/venv/bin/multikueue"


def test_cli_command_of_this_installation_runs() -> None:
    command = cli_command(home=Path("/nonexistent-home"))  # no ~: run without a shell
    argv = command.split()
    result = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "status" in result.stdout
    assert argv[0].startswith(str(Path(sys.executable).parent))


def test_closing_lines_use_the_full_command() -> None:
    lines = closing_lines(
        command="~/.cache/multikueue/venv/bin/multikueue", manager_kubeconfig="~/k/manager", ns="demo-ab12",
        logs="~/c/demo-logs",
    )  # fmt: skip
    assert lines[0].startswith("--- the clusters and the controllers keep running")
    assert lines[1] == "    ~/.cache/multikueue/venv/bin/multikueue status --kubeconfig ~/k/manager -n demo-ab12"
    assert lines[2] == (
        "    sed 's/namespace: default/namespace: demo-ab12/' examples/jobs/job.yaml | kubectl --kubeconfig ~/k/manager create -f -"
    )
    assert lines[3].startswith("    ~/.cache/multikueue/venv/bin/multikueue dev clusters down   #")
    assert not any(line.lstrip().startswith("multikueue ") for line in lines)
    named = closing_lines(command="mk", manager_kubeconfig="k", ns="n", name="other", checkout="/src/mk/")
    assert "mk dev clusters down --name other" in named[3] and "/src/mk/examples/jobs/job.yaml" in named[2]
    kind = closing_lines(command="mk", manager_kubeconfig="k", ns="n", kind=True, checkout="/src/mk/")
    assert kind[1:] == ["    mk status --kubeconfig k -n n", "    /src/mk/kind-configs/down.sh"]


def test_the_job_the_closing_lines_suggest_fits_the_demo_queue() -> None:
    """examples/jobs/job.yaml, with the sed of the closing lines: the demo's namespace and queue, resources it has quota for."""
    import yaml

    text = (Path(__file__).parents[2] / "examples/jobs/job.yaml").read_text()
    assert "namespace: default" in text
    job = yaml.safe_load(text.replace("namespace: default", "namespace: demo-ab12"))
    assert job["metadata"]["namespace"] == "demo-ab12"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "user-queue"
    requests = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert set(requests) <= {"cpu", "memory"}


def test_a_controller_is_recorded_reused_and_stopped_with_its_cluster(tmp_path: Path) -> None:
    cluster = LocalCluster(name="manager", directory=tmp_path / "manager", ports=ClusterPorts(40000), full=True)
    assert running_controller(cluster.processes, "manager") is None
    dead = ManagedProcess(name="manager/controller", pid=999_999_999, argv=["/nonexistent/python"], log=tmp_path / "old.log")
    cluster.processes.append(ManagedProcess(name="manager/etcd", pid=1, argv=["/x"], log=tmp_path / "etcd.log"))
    cluster.processes.append(dead)
    assert running_controller(cluster.processes, "manager") is None  # an earlier demo's, gone: started again

    process = spawn("manager/controller", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "ctl.log")
    try:
        record_controller(cluster, process)
        assert [p.name for p in cluster.processes] == ["manager/etcd", "manager/controller"]
        assert cluster.processes[-1] is process  # the dead record replaced
        state = tmp_path / "state.json"
        write_state(state, [cluster], {"name": "t"})
        [loaded] = read_state(state)  # what the next demo and `dev clusters down` see
        found = None
        for _ in range(50):  # its /proc entry names this Python once exec'd: give a loaded machine a moment
            found = running_controller(loaded.processes, "manager")
            if found is not None:
                break
            time.sleep(0.1)
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes() if Path(f"/proc/{process.pid}").exists() else b"(gone)"
        assert found is not None, (process.popen.poll() if process.popen else None, cmdline, process.log_tail())
        assert found.pid == process.pid
        assert running_controller(loaded.processes, "worker1") is None
        found.stop(timeout=5)  # as LocalCluster.stop does for every recorded process
        process.popen.wait(timeout=5)  # type: ignore[union-attr]
        assert not process.alive()
    finally:
        process.stop(timeout=5)
