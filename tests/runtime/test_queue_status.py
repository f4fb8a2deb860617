"""Queue status writes against a real kube-apiserver: what changed is written, within a budget per sync.

Why a budget: on upstream's full scalability baseline every one of 60 queues
changed every second, and writing each was more API traffic than all of the
scheduler's Workload writes (decisions, "The full baseline ... generation").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from multikueue.api.clusterqueue import ClusterQueue
from multikueue.api.localqueue import LocalQueue
from multikueue.api.resources import CLUSTER_QUEUES, LOCAL_QUEUES
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import Workload
from multikueue.runtime import metrics
from multikueue.core.cache import Cache
from multikueue.dev import objects as o
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.queue_status import QueueStatusWriter

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


def _cluster_queue(kueue: o.Kueue, cache: Cache, name: str, ns: str) -> None:
    """A ClusterQueue of 1 cpu in the API server and in the cache."""
    body = kueue.create(o.cluster_queue(name, {f"default-{ns}": {"cpu": 1}}, scale_cpu=False))
    cache.upsert_cluster_queue(ClusterQueue.from_k8s(body))


def _cache_with_cluster_queues(kueue: o.Kueue, ns: str, count: int) -> tuple[Cache, list[str]]:
    """A cache holding the test's flavor and ``count`` ClusterQueues, made in the API server too; their names."""
    cache = Cache()
    cache.upsert_flavor(ResourceFlavor.from_k8s(kueue.create(o.resource_flavor(f"default-{ns}"))))
    names = [f"cq-{i}-{ns}" for i in range(count)]
    for name in names:
        _cluster_queue(kueue, cache, name, ns)
    return cache, names


async def _written(kube: AsyncKube, names: list[str]) -> set[str]:
    """The ClusterQueues among ``names`` whose status says Active (our writer set it)."""
    found = set()
    for name in names:
        body = await kube.get(CLUSTER_QUEUES, None, name)
        if o.is_true(body, "Active"):
            found.add(name)
    return found


async def test_changed_queues_beyond_the_budget_are_written_at_the_next_sync(
    kueue: o.Kueue, admin_kube: Callable[[int], AsyncKube], namespace: str
) -> None:
    kube = admin_kube(0)
    cache, names = _cache_with_cluster_queues(kueue, namespace, 3)
    writer = QueueStatusWriter(kube, cache, writes_per_sync=2)

    await writer.sync()
    assert writer.writes["ClusterQueue"] == 2, "two of three changed queues: the budget"

    await writer.sync()
    assert writer.writes["ClusterQueue"] == 3, "the one left over at the next sync, the first two not again"
    assert await _written(kube, names) == set(names)

    await writer.sync()
    assert writer.writes["ClusterQueue"] == 3, "a quiet system makes no writes"


async def test_a_deleted_queue_is_forgotten_and_one_made_again_under_its_name_is_written(
    kueue: o.Kueue, admin_kube: Callable[[int], AsyncKube], namespace: str
) -> None:
    kube = admin_kube(0)
    cache, names = _cache_with_cluster_queues(kueue, namespace, 2)
    writer = QueueStatusWriter(kube, cache)
    await writer.sync()
    assert writer.writes["ClusterQueue"] == 2 and writer.remembered() == 2

    gone = names[0]
    await kube.delete(CLUSTER_QUEUES, None, gone)
    cache.delete_cluster_queue(gone)
    await writer.sync()
    assert writer.remembered() == 1, "what was written for the deleted queue is not kept"

    # Deleted and made again between two syncs: another object, whose status says nothing yet.
    await kube.delete(CLUSTER_QUEUES, None, names[1])
    cache.delete_cluster_queue(names[1])
    _cluster_queue(kueue, cache, names[1], namespace)
    await writer.sync()
    assert writer.writes["ClusterQueue"] == 3, "the new queue's status is written though it says what the old one's did"
    assert await _written(kube, [names[1]]) == {names[1]}


def _pending_gauge(cq: str) -> float | None:
    role = metrics.replica_role()
    return metrics.REGISTRY.get_sample_value("kueue_pending_workloads", {"cluster_queue": cq, "status": "active", "replica_role": role})


async def test_a_quiet_queue_is_skipped_and_a_change_is_written_and_reported(
    kueue: o.Kueue, admin_kube: Callable[[int], AsyncKube], namespace: str
) -> None:
    """A sync skips queues whose view did not change; a new pending Workload changes both queues' status and
    the gauge; after a role change (which clears the gauges) the next sync reports them again."""
    kube = admin_kube(0)
    cache, [name] = _cache_with_cluster_queues(kueue, namespace, 1)
    cache.upsert_local_queue(LocalQueue.from_k8s(kueue.create(o.local_queue(namespace, "lq", name))))
    writer = QueueStatusWriter(kube, cache)
    await writer.sync()
    assert writer.writes == {"ClusterQueue": 1, "LocalQueue": 1} and _pending_gauge(name) == 0
    await writer.sync()
    assert writer.writes == {"ClusterQueue": 1, "LocalQueue": 1}, "nothing changed"

    cache.upsert_workload(Workload.from_k8s(kueue.create(o.workload(namespace, "w", "lq", {"cpu": "1"}))))
    await writer.sync()
    assert writer.writes == {"ClusterQueue": 2, "LocalQueue": 2} and _pending_gauge(name) == 1
    cq_body = await kube.get(CLUSTER_QUEUES, None, name)
    lq_body = await kube.get(LOCAL_QUEUES, namespace, "lq")
    assert cq_body["status"]["pendingWorkloads"] == 1 and lq_body["status"]["pendingWorkloads"] == 1

    role = metrics.replica_role()
    try:
        metrics.set_replica_role(metrics.ROLE_LEADER)
        assert _pending_gauge(name) is None, "the role change cleared the gauges"
        await writer.sync()
        assert _pending_gauge(name) == 1 and writer.writes["ClusterQueue"] == 2
    finally:
        metrics.set_replica_role(role)


async def test_changing_cluster_queues_do_not_starve_a_local_queue_and_syncs_do_not_overlap(
    kueue: o.Kueue, admin_kube: Callable[[int], AsyncKube], namespace: str
) -> None:
    """A ClusterQueue whose status changes at every sync is written in turn with the others, not before them
    every time; a sync called while one is writing returns at once (side by side, both picked the same queues)."""
    kube = admin_kube(0)
    cache, names = _cache_with_cluster_queues(kueue, namespace, 2)
    cache.upsert_local_queue(LocalQueue.from_k8s(kueue.create(o.local_queue(namespace, "lq", names[0]))))
    writer = QueueStatusWriter(kube, cache, writes_per_sync=1)

    await asyncio.gather(writer.sync(), writer.sync())
    assert sum(writer.writes.values()) == 1, "the second sync found the first one writing and left"
    for i in range(3):  # one Workload more each time: the first ClusterQueue and the LocalQueue change
        cache.upsert_workload(Workload.from_k8s(kueue.create(o.workload(namespace, f"w-{i}", "lq", {"cpu": "1"}))))
        await writer.sync()
    assert writer.writes == {"ClusterQueue": 3, "LocalQueue": 1}, "each queue's turn came, the changing one's again"
