"""``multikueue status``: tables for people, JSON and YAML for scripts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from multikueue.api.multikueue import KubeConfig
from multikueue.status.render import (
    ELLIPSIS,
    Column,
    Row,
    format_age,
    render_table,
    render_tables,
    to_json,
    to_yaml,
    truncate,
)
from multikueue.status.report import (
    CheckRow,
    ClusterRow,
    QuotaState,
    QuotaStatus,
    StatusReport,
    WorkloadCheck,
    WorkloadRow,
)

pytestmark = pytest.mark.unit

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
LONG = "The workload could not be copied to worker2 because " + "the worker refused it again and again " * 10


def report() -> StatusReport:
    return StatusReport(
        workloads=[
            WorkloadRow(
                namespace="team-a",
                name="train-1",
                queue="user-queue",
                cluster_queue="cq",
                quota=QuotaStatus(state=QuotaState.ADMITTED, reason="Admitted", message="The workload is admitted"),
                checks=[
                    WorkloadCheck(name="mk", state="Ready", message='The workload got reservation on "worker1"'),
                    WorkloadCheck(name="prov", state="Ready", message=LONG),
                ],
                cluster="worker1",
                remote="Admitted on worker1",
            ),
            WorkloadRow(
                namespace="team-a",
                name="train-2",
                queue="user-queue",
                quota=QuotaStatus(state=QuotaState.PENDING, reason="Inadmissible", message="LocalQueue missing"),
            ),
            WorkloadRow(
                namespace="team-b",
                name="sweep",
                queue="q",
                cluster_queue="cq",
                quota=QuotaStatus(state=QuotaState.QUOTA_RESERVED, reason="QuotaReserved"),
                checks=[WorkloadCheck(name="mk", state="Pending")],
                nominated=["worker1", "worker2"],
            ),
        ],
        clusters=[
            ClusterRow(
                name="worker1",
                active="True",
                reason="Active",
                message="Connected",
                since=NOW - timedelta(minutes=12),
                kube_config=KubeConfig(location="worker1-secret"),
            ),
            ClusterRow(name="worker9", reason="", message=""),
        ],
        checks=[
            CheckRow(
                name="mk",
                controller="kueue.x-k8s.io/multikueue",
                parameters="MultiKueueConfig/cfg",
                active="True",
                reason="Active",
                message="The admission check is active",
            )
        ],
    )


def test_truncate_marks_the_cut() -> None:
    assert truncate("abcdef", 6) == "abcdef"
    assert truncate("abcdefg", 6) == "abcde" + ELLIPSIS
    assert len(truncate(LONG, 30)) == 30


def test_table_shrinks_flexible_columns_first() -> None:
    columns = [Column("NAME"), Column("MESSAGE", flexible=True, min_width=10)]
    text = render_table(columns, [["a-rather-long-object-name", LONG]], width=60)
    header, line = text.splitlines()
    assert len(line) == 60
    assert line.startswith("a-rather-long-object-name  ")
    assert line.endswith(ELLIPSIS)
    assert header.split() == ["NAME", "MESSAGE"]


def test_multi_line_cells_stack_in_their_column() -> None:
    text = render_table([Column("A"), Column("B")], [["x", "one\ntwo"], ["y", "three"]])
    assert text.splitlines() == ["A  B", "x  one", "   two", "y  three"]


def test_details_go_under_their_row_and_use_the_whole_width() -> None:
    rows = [Row(cells=["ns", "a", "1"], details=["first detail", LONG]), Row(cells=["ns", "b", "2"])]
    text = render_table([Column("NS"), Column("NAME"), Column("N")], rows, width=50, detail_column=1)
    lines = text.splitlines()
    assert lines[:3] == ["NS  NAME  N", "ns  a     1", "      first detail"]
    assert len(lines[3]) == 50 and lines[3].endswith(ELLIPSIS)
    assert lines[4] == "ns  b     2"


def test_tables_fit_120_columns_and_cut_long_messages() -> None:
    text = render_tables(report(), now=NOW)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 120
    assert ELLIPSIS in text
    assert LONG not in text
    assert lines[0] == "Workloads:"
    assert lines[1].split() == ["NAMESPACE", "NAME", "QUEUE", "QUOTA", "CHECKS", "NOMINATED", "CLUSTER", "REMOTE"]
    assert lines[2].split()[:4] == ["team-a", "train-1", "user-queue", "Admitted"]
    assert lines[2].endswith("worker1  Admitted on worker1")
    assert "mk=Ready,prov=Rea" in lines[2]
    # Each check message on its own line under the Workload's name, cut at the width.
    indent = lines[1].index(" NAME ") + 1 + 2
    assert lines[3] == " " * indent + 'mk: The workload got reservation on "worker1"'
    assert lines[4].startswith(" " * indent + "prov: The workload could not") and lines[4].endswith(ELLIPSIS)
    assert len(lines[4]) == 120
    assert lines[5].split()[:4] == ["team-a", "train-2", "user-queue", "Pending"]
    assert lines[6] == " " * indent + "quota: Inadmissible: LocalQueue missing"
    assert "worker1,worker2" in lines[7] and "mk=Pending" in lines[7]
    assert lines[8] == ""  # no message on a Pending check: no detail line


def test_an_unreadable_remote_state_is_spelled_out_under_the_row() -> None:
    row = WorkloadRow(
        namespace="n", name="w", quota=QuotaStatus(state=QuotaState.ADMITTED), cluster="worker1",
        remote="unknown: cannot read Secret kueue-system/worker1-secret (403)",
    )
    lines = render_tables(StatusReport(workloads=[row]), now=NOW, namespace="n").splitlines()
    assert lines[2].split() == ["w", "-", "Admitted", "-", "-", "worker1", "unknown"]
    assert lines[3] == "  remote (worker1): cannot read Secret kueue-system/worker1-secret (403)"


def test_tables_drop_the_namespace_column_with_a_namespace() -> None:
    text = render_tables(report(), now=NOW, namespace="team-a")
    assert text.splitlines()[1].split()[:2] == ["NAME", "QUEUE"]


def test_cluster_and_check_tables() -> None:
    lines = render_tables(report(), now=NOW).splitlines()
    start = lines.index("MultiKueueClusters:")
    assert lines[start + 1].split() == ["NAME", "ACTIVE", "REASON", "SINCE", "KUBECONFIG", "MESSAGE"]
    assert lines[start + 2].split() == ["worker1", "True", "Active", "12m", "Secret", "worker1-secret", "Connected"]
    assert lines[start + 3].split() == ["worker9", "Unknown", "-", "-", "-", "-"]
    checks = lines.index("AdmissionChecks:")
    assert lines[checks + 2].split()[:5] == ["mk", "kueue.x-k8s.io/multikueue", "MultiKueueConfig/cfg", "True", "Active"]


def test_empty_sections_say_so() -> None:
    text = render_tables(StatusReport(), now=NOW, namespace="team-a")
    assert text == "Workloads: none in namespace team-a\n\nMultiKueueClusters: none\n\nAdmissionChecks: none\n"


@pytest.mark.parametrize(
    ("seconds", "age"),
    [(5, "5s"), (119, "119s"), (200, "3m20s"), (600, "10m"), (3 * 3600 + 600, "3h10m"), (30 * 3600, "30h"), (3 * 86400 + 7200, "3d2h"), (20 * 86400, "20d")],
)
def test_ages_read_like_kubectl(seconds: int, age: str) -> None:
    assert format_age(NOW - timedelta(seconds=seconds), NOW) == age


def test_json_has_kubernetes_style_keys_and_complete_messages() -> None:
    document = json.loads(to_json(report()))
    assert list(document) == ["workloads", "multiKueueClusters", "admissionChecks"]
    first = document["workloads"][0]
    assert list(first) == [
        "namespace", "name", "queue", "clusterQueue", "quota", "admissionChecks", "nominatedClusterNames", "clusterName", "remote",
    ]
    assert first["quota"] == {"state": "Admitted", "reason": "Admitted", "message": "The workload is admitted"}
    assert first["admissionChecks"][1] == {"name": "prov", "state": "Ready", "message": LONG}
    assert document["workloads"][1]["clusterName"] is None  # keys are always present
    assert document["multiKueueClusters"][0] == {
        "name": "worker1",
        "active": "True",
        "reason": "Active",
        "message": "Connected",
        "since": "2025-03-01T11:48:00Z",
        "kubeConfig": {"location": "worker1-secret", "locationType": "Secret"},
    }
    assert document["admissionChecks"][0]["controllerName"] == "kueue.x-k8s.io/multikueue"


def test_compact_json_is_one_line() -> None:
    text = to_json(report(), compact=True)
    assert text.count("\n") == 1 and json.loads(text) == json.loads(to_json(report()))


def test_yaml_is_the_same_document() -> None:
    text = to_yaml(report())
    assert yaml.safe_load(text) == json.loads(to_json(report()))
    assert text.startswith("workloads:")
