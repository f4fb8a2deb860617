"""A Job's Workload priority source, in upstream's order: WorkloadPriorityClass label, pod priorityClassName, globalDefault."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.integrations.batchjob.priority import priority_of

pytestmark = pytest.mark.unit

WPC = {"batch-high": 1000}.get
PC = {"critical": 2000, "cluster-default": 5}.get


def job(label: str | None = None, pod_class: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"labels": {}}, "spec": {"template": {"spec": {"containers": []}}}}
    if label:
        body["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = label
    if pod_class:
        body["spec"]["template"]["spec"]["priorityClassName"] = pod_class
    return body


def ref(value: int | None, source: Any) -> tuple[int | None, tuple[str, str, str] | None]:
    return value, (source.group, source.kind, source.name) if source else None


def test_the_workload_priority_class_label_wins() -> None:
    assert ref(*priority_of(job("batch-high", "critical"), WPC, PC, "cluster-default")) == (
        1000, ("kueue.x-k8s.io", "WorkloadPriorityClass", "batch-high"))  # fmt: skip


def test_else_the_pods_priority_class() -> None:
    assert ref(*priority_of(job(pod_class="critical"), WPC, PC, "cluster-default")) == (
        2000, ("scheduling.k8s.io", "PriorityClass", "critical"))  # fmt: skip


def test_else_the_global_default_then_nothing() -> None:
    assert ref(*priority_of(job(), WPC, PC, "cluster-default")) == (5, ("scheduling.k8s.io", "PriorityClass", "cluster-default"))
    assert priority_of(job(), WPC, PC, None) == (None, None)


def test_an_unknown_class_gives_no_priority_yet() -> None:
    assert priority_of(job("nope"), WPC, PC, "cluster-default") == (None, None), "a named WorkloadPriorityClass is not overridden"
    assert priority_of(job(pod_class="nope"), WPC, PC, None) == (None, None)
