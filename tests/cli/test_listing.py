"""The rows of ``multikueue list``, the stop/resume patches and the plain table (pure)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from multikueue.cli.completion import bash_script, levels, zsh_script
from multikueue.cli.main import build_parser
from multikueue.cli.queues import render_plain, write_table
from multikueue.status.listing import (
    cluster_queue_table,
    exec_time,
    job_type,
    kind_named,
    local_queue_table,
    resume_patch,
    stop_patch,
    workload_status,
    workload_table,
)
from multikueue.status.version import health_port

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)


def cond(ctype: str, status: str = "True", at: str = "2026-11-23T11:50:00Z") -> dict[str, Any]:
    return {"type": ctype, "status": status, "lastTransitionTime": at, "reason": ctype, "message": ""}


def workload(name: str, conditions: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    wl: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "creationTimestamp": "2026-11-23T11:00:00Z",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name.removeprefix("job-"), "uid": "u"}],
        },
        "spec": {"queueName": "user-queue", **extra.pop("spec", {})},
        "status": {"conditions": conditions, **extra.pop("status", {})},
    }
    return wl


def test_workload_status_follows_upstream_precedence() -> None:
    assert workload_status(workload("a", [])) == "PENDING"
    assert workload_status(workload("a", [cond("QuotaReserved")])) == "QUOTARESERVED"
    assert workload_status(workload("a", [cond("QuotaReserved"), cond("Admitted")])) == "ADMITTED"
    assert workload_status(workload("a", [cond("Admitted"), cond("Finished")])) == "FINISHED"
    assert workload_status(workload("a", [cond("QuotaReserved", "False")])) == "PENDING"


def test_job_type_is_kind_dot_group() -> None:
    assert job_type({"apiVersion": "batch/v1", "kind": "Job"}) == "job.batch"
    assert job_type({"apiVersion": "tekton.dev/v1", "kind": "PipelineRun"}) == "pipelinerun.tekton.dev"
    assert job_type({"apiVersion": "v1", "kind": "Pod"}) == "pod"


def test_exec_time_runs_from_admitted_to_finished_or_now() -> None:
    running = workload("a", [cond("Admitted", at="2026-11-23T11:58:00Z")])
    assert exec_time(running, NOW) == "2m"
    done = workload("a", [cond("Admitted", at="2026-11-23T11:58:00Z"), cond("Finished", at="2026-11-23T11:58:30Z")])
    assert exec_time(done, NOW) == "30s"
    assert exec_time(workload("a", []), NOW) == ""


def test_workload_table_columns_and_cluster_queue_from_local_queue() -> None:
    admitted = workload(
        "job-b",
        [cond("QuotaReserved"), cond("Admitted", at="2026-11-23T11:59:00Z")],
        status={"admission": {"clusterQueue": "cq-admitted"}, "clusterName": "worker2"},
    )
    pending = workload("job-a", [], spec={"active": False})
    local_queues = [{"metadata": {"namespace": "team-a", "name": "user-queue"}, "spec": {"clusterQueue": "cq-from-lq"}}]
    table = workload_table([admitted, pending], local_queues, now=NOW, show_namespace=True)
    assert [c.header for c in table.columns] == [
        "NAMESPACE", "NAME", "JOB TYPE", "JOB NAME", "LOCALQUEUE", "CLUSTERQUEUE", "STATUS", "ACTIVE", "CLUSTER", "EXEC TIME", "AGE",
    ]
    assert table.rows == [
        ["team-a", "job-a", "job.batch", "a", "user-queue", "cq-from-lq", "PENDING", "false", "-", "-", "60m"],
        ["team-a", "job-b", "job.batch", "b", "user-queue", "cq-admitted", "ADMITTED", "true", "worker2", "60s", "60m"],
    ]
    without_ns = workload_table([pending], local_queues, now=NOW, show_namespace=False)
    assert without_ns.columns[0].header == "NAME" and without_ns.rows[0][0] == "job-a"


def test_queue_tables() -> None:
    cq = {
        "metadata": {"name": "cq", "creationTimestamp": "2026-11-23T09:00:00Z"},
        "spec": {"cohortName": "org", "stopPolicy": "Hold"},
        "status": {"pendingWorkloads": 3, "admittedWorkloads": 2, "conditions": [cond("Active", "False")]},
    }
    table = cluster_queue_table([cq], now=NOW)
    assert [c.header for c in table.columns] == [
        "NAME", "COHORT", "PENDING WORKLOADS", "ADMITTED WORKLOADS", "ACTIVE", "STOP POLICY", "AGE",
    ]
    assert table.rows == [["cq", "org", "3", "2", "false", "Hold", "3h"]]
    lq = {"metadata": {"name": "user-queue", "namespace": "team-a", "creationTimestamp": "2026-11-23T11:59:50Z"},
          "spec": {"clusterQueue": "cq"}, "status": {"conditions": [cond("Active")]}}
    assert local_queue_table([lq], now=NOW, show_namespace=True).rows == [
        ["team-a", "user-queue", "cq", "0", "0", "true", "None", "10s"]
    ]


def test_stop_and_resume_patches_are_upstreams() -> None:
    wl, cq, lq = kind_named("wl"), kind_named("clusterqueues"), kind_named("LocalQueue")
    assert stop_patch(wl) == {"spec": {"active": False}}
    assert resume_patch(wl) == {"spec": {"active": True}}
    assert stop_patch(cq) == {"spec": {"stopPolicy": "HoldAndDrain"}}
    assert stop_patch(lq, keep_running=True) == {"spec": {"stopPolicy": "Hold"}}
    assert resume_patch(lq) == {"spec": {"stopPolicy": "None"}}
    with pytest.raises(ValueError, match="queues only"):
        stop_patch(wl, keep_running=True)
    with pytest.raises(ValueError, match="unknown kind"):
        kind_named("pods")


def test_plain_output_is_never_cut_and_json_records_are_complete() -> None:
    long_name = "w" * 300
    table = workload_table([workload(long_name, [])], [], now=NOW, show_namespace=False)
    text = render_plain(table)
    assert long_name in text and "…" not in text
    assert render_plain(table, headers=False).startswith(long_name)
    out = io.StringIO()  # not a terminal: plain
    write_table(table, out)
    assert out.getvalue() == text
    assert json.loads(json.dumps(table.records()))[0]["NAME"] == long_name


def test_terminal_output_is_fitted_by_rich() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    table = workload_table([workload("w" * 300, [])], [], now=NOW, show_namespace=False)
    out = Terminal()
    write_table(table, out, width=100)
    import re

    lines = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()).splitlines()
    assert lines[0].split()[:2] == ["NAME", "JOB"]
    assert "…" in lines[1], "cut to fit the terminal"
    assert all(len(line) <= 100 for line in lines)


def test_completion_covers_the_parser() -> None:
    parser = build_parser()
    tree = levels(parser)
    assert {"list", "stop", "resume", "version", "completion", "status"} <= set(tree["multikueue"].words)
    assert "workloads" in tree["multikueue list"].words and "--all-namespaces" in tree["multikueue list"].options
    assert tree["multikueue list"].values["--output"] == ["table", "json"]
    script = bash_script(parser)
    assert "complete -o default -F _multikueue multikueue kubectl-multikueue" in script
    assert '"multikueue stop") words="' in script
    assert "bashcompinit" in zsh_script(parser)


def test_bash_completion_script_completes(tmp_path: Any) -> None:
    """The script run by bash: COMP_WORDS in, COMPREPLY out."""
    import shutil
    import subprocess

    if shutil.which("bash") is None:
        pytest.skip("no bash")
    script = tmp_path / "completion.bash"
    script.write_text(bash_script(build_parser()))

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in words)
        out = subprocess.run(
            ["bash", "-c", f'source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _multikueue; printf "%s\\n" "${{COMPREPLY[@]}}"'],
            capture_output=True, text=True, check=True,
        ).stdout
        return [w for w in out.splitlines() if w]

    assert complete("multikueue", "li") == ["list"]
    assert set(complete("multikueue", "list", "c")) == {"clusterqueue", "clusterqueues", "cq"}
    assert complete("multikueue", "list", "wl", "--out") == ["--output"]
    assert complete("multikueue", "list", "wl", "-o", "j") == ["json"]
    assert complete("multikueue", "stop", "cq", "x", "--keep") == ["--keep-already-running"]


def test_zsh_completion_script_completes(tmp_path: Any) -> None:
    """Through zsh's bashcompinit, which fills COMP_WORDS 1-based (its compgen leaves filtering to compadd)."""
    import shutil
    import subprocess

    if shutil.which("zsh") is None:
        pytest.skip("no zsh (apt-get install zsh)")
    script = tmp_path / "completion.zsh"
    script.write_text(zsh_script(build_parser()))
    out = subprocess.run(
        ["zsh", "-c", f"source {script}; COMP_WORDS=(multikueue stop cq x --keep); COMP_CWORD=4; _multikueue; print -l -- $COMPREPLY"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    assert "--keep-already-running" in out and "--all-namespaces" not in out, "the options of stop, not of list"


def test_health_port_of_the_controller_pod() -> None:
    pod = {"spec": {"containers": [
        {"name": "sidecar", "image": "other"},
        {"name": "manager", "image": "multikueue:0.1.0", "ports": [{"name": "metrics", "containerPort": 8080}, {"name": "health", "containerPort": 8081}]},
    ]}}
    assert health_port(pod) == (8081, "multikueue:0.1.0")
    assert health_port({"spec": {"containers": [{"name": "x", "image": "i"}]}}) == (None, "i")


def test_default_namespace_is_the_contexts(tmp_path: Any) -> None:
    from multikueue.status.objects import context_namespace

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: a, context: {cluster: c, user: u, namespace: team-a}}, {name: b, context: {cluster: c, user: u}}]\n"
    )
    assert context_namespace(str(kubeconfig), None) == "team-a"
    assert context_namespace(str(kubeconfig), "b") == "default"
    assert context_namespace(str(tmp_path / "missing"), None) == "default"
