"""``bench/churn_sim.py`` on the one-queue generator: the scheduler does not admit parked Workloads into a gap.

The simulation drives the pure scheduler (no API server), so this guards the
wake rules of the pending queues (``PendingQueues.mark_cluster_queues``) and
the parking of candidates behind a preemption without victims against the
churn they were built to stop: with them, only new arrivals get into the
0.2 s gaps between back-to-back large Workloads (as upstream's do); without
the requeue batch, the same four medium Workloads were admitted and evicted
in every gap.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import yaml

from multikueue.dev.pytest_plugin import bench_module

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    return bench_module("churn_sim")


def _run(sim: ModuleType, requeue_batch: float) -> object:
    config = yaml.safe_load((BENCH / "generators" / "one-queue-large-medium.yaml").read_text())
    return sim.Simulation(config, latency=0.02, coalesce=0.05, requeue_batch=requeue_batch).run()


def test_parked_medium_workloads_stay_out_of_the_gaps(sim: ModuleType) -> None:
    figures = _run(sim, 1.0)
    assert figures.finished == 140
    assert figures.evicted_by_class["large"] == 0
    # New arrivals equal to a parked Workload wait with it (stop 33: 21 evictions before, 7 after); what is
    # left are the first few of their kind, and no Workload is evicted again and again.
    assert sum(figures.evictions.values()) <= 12, figures.evictions
    assert max(figures.evictions.values(), default=0) <= 3, figures.evictions.most_common(3)
    assert figures.end < 70  # the medium ones still recycle their own quota at once


def test_without_the_requeue_batch_the_same_workloads_churn(sim: ModuleType) -> None:
    figures = _run(sim, 0.0)
    assert figures.finished == 140
    assert max(figures.evictions.values()) >= 15, figures.evictions.most_common(3)
