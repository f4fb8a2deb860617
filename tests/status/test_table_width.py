"""``multikueue status`` on a terminal fits its width; to a pipe or a file it cuts nothing (issue 15)."""

from __future__ import annotations

import io

import pytest

from multikueue.cli.status import table_width
from multikueue.status.render import ELLIPSIS, Column, Row, render_table, render_tables
from multikueue.status.report import QuotaState, QuotaStatus, StatusReport, WorkloadCheck, WorkloadRow
from datetime import UTC, datetime

pytestmark = pytest.mark.unit

LONG = "The workload could not be copied to worker2 because " + "the worker refused it again and again " * 10


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def report() -> StatusReport:
    return StatusReport(
        workloads=[
            WorkloadRow(
                namespace="a-namespace-with-a-long-name",
                name="a-workload-with-a-rather-long-name-too",
                queue="user-queue",
                quota=QuotaStatus(state=QuotaState.FINISHED, reason="Succeeded", message="Job finished successfully"),
                checks=[WorkloadCheck(name="multikueue-check", state="Ready", message=LONG)],
                cluster="worker1",
                remote="Finished: Succeeded on worker1",
            )
        ]
    )


def test_not_a_terminal_means_no_width() -> None:
    assert table_width(io.StringIO()) is None


def test_a_terminal_gets_its_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "87")
    assert table_width(Terminal()) == 87


def test_without_a_width_nothing_is_cut() -> None:
    text = render_tables(report(), now=datetime(2025, 3, 1, tzinfo=UTC), width=None)
    assert ELLIPSIS not in text
    assert LONG in text
    row = text.splitlines()[2]
    assert row.split()[:4] == ["a-namespace-with-a-long-name", "a-workload-with-a-rather-long-name-too", "user-queue", "Finished:"]
    assert row.endswith("worker1  Finished: Succeeded on worker1")
    assert max(len(line) for line in text.splitlines()) > 120


def test_without_a_width_columns_still_align() -> None:
    rows = [Row(cells=["x", LONG], details=[LONG]), Row(cells=["longer-name", "short"])]
    lines = render_table([Column("NAME"), Column("MESSAGE", flexible=True, min_width=10)], rows, None).splitlines()
    assert lines[0] == "NAME         MESSAGE"
    assert lines[1] == ("x            " + LONG).rstrip()
    assert lines[2] == "  " + LONG  # details are not stripped
    assert lines[3] == "longer-name  short"


def test_a_width_still_cuts() -> None:
    text = render_tables(report(), now=datetime(2025, 3, 1, tzinfo=UTC), width=100)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert ELLIPSIS in text
