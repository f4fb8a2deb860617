"""managedJobsNamespaceSelector: which Jobs the Job integration leaves alone (no cluster)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from multikueue.api.meta import LabelSelector
from multikueue.core.cache import Cache
from multikueue.integrations.batchjob.reconciler import JobReconciler

pytestmark = pytest.mark.unit

OPT_IN = LabelSelector.model_validate({"matchLabels": {"kueue.openshift.io/managed": "true"}})


class Namespaces:
    """The API server's namespaces, for the live read."""

    def __init__(self, labels: dict[str, dict[str, str]]) -> None:
        self.labels = labels
        self.reads: list[str] = []

    async def get_or_none(self, ref: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        assert ref.plural == "namespaces"
        self.reads.append(name)
        if name not in self.labels:
            return None
        return {"metadata": {"name": name, "labels": self.labels[name]}}


def _job(namespace: str, *, suspend: bool, prebuilt: bool = False) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": "user-queue"}
    if prebuilt:
        labels["kueue.x-k8s.io/prebuilt-workload-name"] = "wl"
    return {"metadata": {"namespace": namespace, "name": "job", "labels": labels}, "spec": {"suspend": suspend}}


def _reconciler(cache: Cache, kube: Namespaces, selector: LabelSelector | None = OPT_IN) -> JobReconciler:
    return JobReconciler(kube, cache, None, None, managed_namespaces=selector)  # type: ignore[arg-type]


def test_without_a_selector_every_namespace_is_managed() -> None:
    kube = Namespaces({})
    assert asyncio.run(_reconciler(Cache(), kube, None)._namespace_managed(_job("any", suspend=False)))
    assert kube.reads == []


def test_matching_and_non_matching_namespaces() -> None:
    cache = Cache()
    cache.upsert_namespace("in", {"kubernetes.io/metadata.name": "in", "kueue.openshift.io/managed": "true"})
    cache.upsert_namespace("out", {"kubernetes.io/metadata.name": "out"})
    kube = Namespaces({"out": {"kubernetes.io/metadata.name": "out"}})
    reconciler = _reconciler(cache, kube)
    assert asyncio.run(reconciler._namespace_managed(_job("in", suspend=True)))
    assert not asyncio.run(reconciler._namespace_managed(_job("out", suspend=False)))
    assert kube.reads == []  # an unsuspended Job in a known namespace: no read
    assert not asyncio.run(reconciler._namespace_managed(_job("out", suspend=True)))
    assert kube.reads == ["out"]
    # A MultiKueue copy bound to its prebuilt Workload is always managed.
    assert asyncio.run(reconciler._namespace_managed(_job("out", suspend=True, prebuilt=True)))


def test_a_namespace_that_just_opted_in_is_read_live() -> None:
    cache = Cache()
    cache.upsert_namespace("fresh", {"kubernetes.io/metadata.name": "fresh"})  # the watch has not seen the label yet
    kube = Namespaces({"fresh": {"kubernetes.io/metadata.name": "fresh", "kueue.openshift.io/managed": "true"}})
    assert asyncio.run(_reconciler(cache, kube)._namespace_managed(_job("fresh", suspend=True)))
    # Unknown to the cache: read live as well.
    assert asyncio.run(_reconciler(Cache(), kube)._namespace_managed(_job("fresh", suspend=False)))
    assert not asyncio.run(_reconciler(Cache(), kube)._namespace_managed(_job("gone", suspend=False)))


def test_a_job_whose_workload_was_admitted_is_urgent_in_the_queue() -> None:
    """Starting an admitted Job (and the status MultiKueue copies back to it) goes ahead of creating
    Workloads for new Jobs; one without a Workload yet, or whose Workload waits, is not urgent."""
    from multikueue.api.workload import Workload

    cache = Cache()
    reconciler = _reconciler(cache, Namespaces({}), None)
    job = _job("ns", suspend=True, prebuilt=True)
    reconciler._store(("ns", "job"), job)
    assert not reconciler.started(("ns", "job")), "no Workload yet"
    waiting = {"metadata": {"name": "wl", "namespace": "ns"}, "spec": {"podSets": [{"name": "main", "template": {}}]}}
    cache.upsert_workload(Workload.from_k8s(waiting))
    assert not reconciler.started(("ns", "job")), "its Workload waits for quota"
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    cache.upsert_workload(Workload.from_k8s({**waiting, "status": {"conditions": [admitted]}}))
    assert reconciler.started(("ns", "job"))
    assert not reconciler.started(("ns", "unknown"))
    reconciler._store(("ns", "new"), {"metadata": {"namespace": "ns", "name": "new"}})  # no uid: no Workload name
    assert not reconciler.started(("ns", "new"))
