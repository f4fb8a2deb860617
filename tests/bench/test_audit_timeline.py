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


def test_usage_replays_holds_into_each_cluster_queues_borrowing(tmp_path: Path) -> None:
    """``--usage``: a reservation holds its CPUs until the runner writes or the controller releases; an eviction alone does not."""
    (tmp_path / "runner.log").write_text(f"{START}\tINFO\trunner/main.go:111\tStart runner\t{{}}\n")
    (tmp_path.parent / "generator.yaml").write_text(
        "cohorts:\n- className: cohort\n  count: 1\n  queuesSets:\n  - className: cq\n    count: 2\n    nominalQuota: 20\n"
    )

    def reserve(cpus: str) -> dict[str, object]:
        return {"admission": {"clusterQueue": "cq-0-0-cohort-0", "podSetAssignments": [{"resourceUsage": {"cpu": cpus}}]}}

    released = {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending"}]}
    lines = [
        _write(1.0, "ns", "large-2-0-0", "multikueue/0.1.0", reserve("20")),
        _write(2.0, "ns", "medium-1-0-0", "multikueue/0.1.0", reserve("5000m")),  # borrows 5
        _write(3.0, "ns", "small-0-0-0", "multikueue/0.1.0", reserve("1"), code=409),  # refused: no hold
        _write(11.0, "ns", "medium-1-0-0", "multikueue/0.1.0", _preempted("InCohortReclamation", "p")),  # still held
        _write(21.0, "ns", "medium-1-0-0", "multikueue/0.1.0", released),  # released by the controller
        _write(22.0, "ns", "large-2-0-0", "perf-runner", {"conditions": [{"type": "Finished", "status": "True"}]}),
    ]
    (tmp_path / "audit.log").write_text("\n".join(lines) + "\n")

    assert timeline.usage(tmp_path, 10.0, 30.0) == {0: (1, 5.0, 1), 1: (1, 5.0, 1), 2: (0, 0.0, 0)}
