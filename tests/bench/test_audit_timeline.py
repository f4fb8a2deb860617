"""``bench/audit_timeline.py --evictions``: each eviction read from a kept run's audit log (request bodies)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from multikueue.dev.pytest_plugin import bench_module

pytestmark = pytest.mark.unit

timeline = bench_module("audit_timeline")

START = "2026-11-29T06:00:00.000000Z"


def _write(at: float, namespace: str, name: str, agent: str, status: dict[str, object], code: int = 200) -> str:
    stamp = f"2026-11-29T06:00:{at:09.6f}Z"
    return json.dumps({
        "verb": "patch", "stageTimestamp": stamp, "userAgent": agent, "responseStatus": {"code": code},
        "objectRef": {"resource": "workloads", "namespace": namespace, "name": name, "subresource": "status"},
        "requestObject": {"status": status},
    })


def _preempted(reason: str, preemptor_queue: str) -> dict[str, object]:
    message = f"Preempted to accommodate a workload (UID: u, JobUID: UNKNOWN) due to x; preemptor path: /cohort/{preemptor_queue}; preemptee path: /cohort/q"
    return {"conditions": [
        {"type": "Preempted", "status": "True", "reason": reason, "message": message},
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": message},
    ]}


def test_each_eviction_of_a_held_workload_with_its_reason_preemptors_queue_and_hold(tmp_path: Path) -> None:
    (tmp_path / "runner.log").write_text(f"{START}\tINFO\trunner/main.go:111\tStart runner\t{{}}\n")
    admission = {"admission": {"clusterQueue": "q"}}
    lines = [
        _write(1.0, "q", "medium-1-0-0", "multikueue/0.1.0", admission),
        _write(1.2, "q", "medium-1-0-0", "multikueue/0.1.0", _preempted("InClusterQueue", "q")),
        _write(1.5, "q", "medium-1-0-0", "perf-runner", {}),  # the runner's release of the evicted one
        _write(2.0, "q", "medium-1-0-0", "multikueue/0.1.0", admission),
        _write(2.1, "q", "medium-1-0-0", "multikueue/0.1.0", admission),  # a restated admission: the hold began at 2.0
        _write(2.5, "q", "medium-1-0-0", "multikueue/0.1.0", _preempted("InCohortReclamation", "p"), code=409),
        _write(2.6, "q", "medium-1-0-0", "multikueue/0.1.0", _preempted("InCohortReclamation", "p")),
        _write(2.7, "q", "medium-1-0-0", "multikueue/0.1.0", _preempted("InCohortReclamation", "p")),  # not held: no eviction
        _write(3.0, "q", "small-0-0-0", "multikueue/0.1.0", admission),
        _write(3.2, "q", "small-0-0-0", "perf-runner", {"conditions": [{"type": "Finished", "status": "True"}]}),
        _write(3.3, "q", "small-0-0-0", "multikueue/0.1.0", _preempted("InClusterQueue", "q")),  # finished first
    ]
    (tmp_path / "audit.log").write_text("\n".join(lines) + "\n")

    found = list(timeline._evictions(tmp_path, timeline._start(tmp_path)))

    assert [(at, kind, reason, own, round(hold, 3)) for at, kind, reason, own, hold in found] == [
        (1.2, "medium", "InClusterQueue", "own", 0.2),
        (2.6, "medium", "InCohortReclamation", "other", 0.6),
    ]
