"""``bench/scalability.py`` reads every Workload after a run a page at a time, against a real API server.

Why: after upstream's large-scale generator (50,000 Workloads) one list of
all of them took longer than the API server's 60 s and the bench stopped
with a 504 instead of reporting the run.
"""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from multikueue.dev import objects as o
from multikueue.dev.pytest_plugin import bench_module

pytestmark = pytest.mark.integration

scalability = bench_module("scalability")


def test_every_workload_is_listed_across_pages(
    upstream_crd_cluster: client.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = "scalability-list"
    client.CoreV1Api(upstream_crd_cluster).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    k = o.Kueue(upstream_crd_cluster)
    names = {f"wl-{i}" for i in range(5)}
    for name in names:
        k.create(o.workload(ns, name, "user-queue", {"cpu": "1"}))
    monkeypatch.setattr(scalability, "LIST_PAGE", 2)

    listed = scalability.list_workloads(upstream_crd_cluster)

    mine = [w["metadata"]["name"] for w in listed if w["metadata"]["namespace"] == ns]
    assert sorted(mine) == sorted(names), "each Workload once, over three pages"


def test_only_a_busy_api_servers_answers_are_asked_again() -> None:
    assert scalability.is_busy_answer(ApiException(status=504))
    assert scalability.is_busy_answer(ApiException(status=429))
    assert not scalability.is_busy_answer(ApiException(status=403))
    assert not scalability.is_busy_answer(ValueError("not an API answer"))
