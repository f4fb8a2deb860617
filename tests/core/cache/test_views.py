"""Queue status views: Active reasons and the usage lists in the API's shapes."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from multikueue.api.clusterqueue import ClusterQueue
from multikueue.core.cache.hierarchy import QueueStats
from multikueue.core.cache.store import ClusterQueueState
from multikueue.core.cache.views import ClusterQueueStatusView, LocalQueueStatusView, cluster_queue_view, local_queue_view
from multikueue.core.quota import QuotaNode

pytestmark = pytest.mark.unit

#: The ``build`` fixture (``Builders`` in this folder's conftest).
Build = Any


def state_of(cluster_queue: ClusterQueue, *, active: bool = True) -> ClusterQueueState:
    reason, message = ("Ready", "Can admit new workloads") if active else ("Stopped", "Can't admit new workloads: is stopped.")
    node = QuotaNode(cluster_queue.name, is_cohort=False)
    return ClusterQueueState(cluster_queue.name, cluster_queue, (), node, active, reason, message)


def stats() -> QueueStats:
    """Three Workloads holding 12 CPUs of ``on-demand``, two of them (8 CPUs) admitted."""
    return QueueStats(
        reserving=3,
        admitted=2,
        reservation={("on-demand", "cpu"): Decimal(12)},
        admitted_usage={("on-demand", "cpu"): Decimal(8)},
    )


QUOTAS = {"on-demand": {"cpu": 10, "memory": "1Gi"}, "spot": {"cpu": 5}}


def test_cluster_queue_view(build: Build) -> None:
    view = cluster_queue_view(state_of(build.cluster_queue("cq", QUOTAS)), stats(), pending=4)
    assert isinstance(view, ClusterQueueStatusView)
    assert (view.active, view.reason, view.message) == (True, "Ready", "Can admit new workloads")
    assert view.flavors_reservation == [
        {
            "name": "on-demand",
            "resources": [
                {"name": "cpu", "total": "12", "borrowed": "2"},
                {"name": "memory", "total": "0", "borrowed": "0"},
            ],
        },
        {"name": "spot", "resources": [{"name": "cpu", "total": "0", "borrowed": "0"}]},
    ]
    assert view.flavors_usage[0]["resources"][0] == {"name": "cpu", "total": "8", "borrowed": "0"}
    assert view.status_fields() == {
        "pendingWorkloads": 4,
        "reservingWorkloads": 3,
        "admittedWorkloads": 2,
        "flavorsReservation": view.flavors_reservation,
        "flavorsUsage": view.flavors_usage,
    }


def test_an_inactive_cluster_queue_says_why(build: Build) -> None:
    view = cluster_queue_view(state_of(build.cluster_queue(), active=False), QueueStats(), pending=0)
    assert (view.active, view.reason, view.message) == (False, "Stopped", "Can't admit new workloads: is stopped.")
    assert (view.pending_workloads, view.reserving_workloads, view.admitted_workloads) == (0, 0, 0)


def test_local_queue_view_of_a_ready_queue(build: Build) -> None:
    view = local_queue_view(build.local_queue(), state_of(build.cluster_queue("cq", QUOTAS)), stats(), pending=1)
    assert isinstance(view, LocalQueueStatusView)
    assert (view.active, view.reason, view.message) == (True, "Ready", "Can submit new workloads to localQueue")
    assert (view.pending_workloads, view.reserving_workloads, view.admitted_workloads) == (1, 3, 2)
    assert view.flavors_reservation[0] == {
        "name": "on-demand",
        "resources": [{"name": "cpu", "total": "12"}, {"name": "memory", "total": "0"}],
    }
    assert view.flavors_usage[0]["resources"][0] == {"name": "cpu", "total": "8"}


@pytest.mark.parametrize(
    ("stopped", "cq_active", "cq_exists", "reason", "message"),
    [
        (True, True, True, "Stopped", "LocalQueue is stopped"),
        (False, True, False, "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue"),
        (False, False, True, "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue"),
    ],
)
def test_local_queue_view_of_an_inactive_queue(
    build: Build, stopped: bool, cq_active: bool, cq_exists: bool, reason: str, message: str
) -> None:
    local_queue = build.local_queue(stopPolicy="Hold") if stopped else build.local_queue()
    state = state_of(build.cluster_queue(), active=cq_active) if cq_exists else None
    view = local_queue_view(local_queue, state, stats(), pending=0)
    assert (view.active, view.reason, view.message) == (False, reason, message)
    if state is None:
        assert (view.flavors_reservation, view.flavors_usage) == ([], [])
