"""``bench/cycle_cost.py`` runs, and a cycle after an arrival leaves the parked backlog parked.

The figures themselves are the benchmark's (timings are not asserted here);
this guards that the scenario it times is the one its docstring describes:
nothing admitted, every Workload of the backlog and every arrival parked.
"""

from __future__ import annotations

import sys

import pytest

from multikueue.dev.pytest_plugin import bench_module

pytestmark = pytest.mark.unit


def test_the_benchmark_times_cycles_over_a_parked_backlog() -> None:
    cycle_cost = bench_module("cycle_cost")
    median, p90 = cycle_cost.cycle_cost(backlog=200, events=5)
    assert 0 < median <= p90


def test_the_benchmark_prints_its_table_and_target(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    cycle_cost = bench_module("cycle_cost")
    monkeypatch.setattr(sys, "argv", ["cycle_cost.py", "--sizes", "50", "100", "--events", "3", "--max-growth", "1000"])
    assert cycle_cost.main() == 0
    out = capsys.readouterr().out
    assert "| 50 |" in out.replace(",", "") and "growth from 50 to 100 parked" in out and ": met" in out
