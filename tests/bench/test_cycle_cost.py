"""``bench/cycle_cost.py`` runs, and a cycle after an arrival leaves the parked backlog parked.

The figures themselves are the benchmark's (timings are not asserted here);
this guards that the scenario it times is the one its docstring describes:
nothing admitted, every Workload of the backlog and every arrival parked.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cycle_cost", BENCH / "cycle_cost.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_times_cycles_over_a_parked_backlog() -> None:
    cycle_cost = _load()
    median, p90 = cycle_cost.cycle_cost(backlog=200, events=5)
    assert 0 < median <= p90


def test_the_benchmark_prints_its_table_and_target(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    cycle_cost = _load()
    monkeypatch.setattr(sys, "argv", ["cycle_cost.py", "--sizes", "50", "100", "--events", "3", "--max-growth", "1000"])
    assert cycle_cost.main() == 0
    out = capsys.readouterr().out
    assert "| 50 |" in out.replace(",", "") and "growth from 50 to 100 parked" in out and ": met" in out
