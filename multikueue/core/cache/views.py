"""Queue status views: what the status writer writes back to ClusterQueues and LocalQueues.

A view is computed on demand from a queue's stored object, its quota
counters (:class:`~multikueue.core.cache.hierarchy.QueueStats`) and its
number of pending Workloads, in the API's shapes and with upstream Kueue's
reasons and messages.

It is separate from the rest of the cache because it is presentation: it
changes nothing, the scheduler never reads it, and it is the only place that
knows the status fields' wire format. The functions take their inputs as
arguments, so they are pure and tested without building a cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from multikueue.api.clusterqueue import ClusterQueueSpec, StopPolicy
from multikueue.api.constants import LocalQueueReason
from multikueue.api.localqueue import LocalQueue
from multikueue.api.quantity import format_quantity
from multikueue.core import messages
from multikueue.core.cache.hierarchy import QueueStats
from multikueue.core.cache.store import ClusterQueueState
from multikueue.core.fairsharing import dominant_resource_share
from multikueue.core.quota import ZERO, FlavorResource

__all__ = [
    "ClusterQueueStatusView",
    "LocalQueueStatusView",
    "QueueStatusView",
    "cluster_queue_view",
    "local_queue_view",
]


@dataclass(frozen=True)
class QueueStatusView:
    """What to write to a queue's status (besides condition timestamps)."""

    active: bool
    reason: str
    message: str
    pending_workloads: int
    reserving_workloads: int
    admitted_workloads: int
    flavors_reservation: list[dict[str, Any]]
    flavors_usage: list[dict[str, Any]]

    def status_fields(self) -> dict[str, Any]:
        """The status fields other than ``conditions``, camelCase, ready for a merge patch."""
        return {
            "pendingWorkloads": self.pending_workloads,
            "reservingWorkloads": self.reserving_workloads,
            "admittedWorkloads": self.admitted_workloads,
            "flavorsReservation": self.flavors_reservation,
            "flavorsUsage": self.flavors_usage,
        }


@dataclass(frozen=True)
class ClusterQueueStatusView(QueueStatusView):
    """A ClusterQueue's status.

    ``flavors_reservation`` counts every Workload holding quota (assumed
    ones included); ``flavors_usage`` only admitted ones. Both are in the
    API's shape, ``[{"name", "resources": [{"name", "total", "borrowed"}]}]``,
    one entry per flavor and covered resource of ``spec.resourceGroups``.
    ``weighted_share`` is ``status.fairSharing.weightedShare`` (upstream
    writes it only with fair sharing on; ``None`` leaves the field alone).
    """

    weighted_share: int | None = None
    #: The precise weighted share (``inf`` for a borrowing queue of weight 0), for the metric; not in the status.
    precise_weighted_share: float | None = None

    def status_fields(self) -> dict[str, Any]:
        fields = super().status_fields()
        if self.weighted_share is not None:
            fields["fairSharing"] = {"weightedShare": self.weighted_share}
        return fields


@dataclass(frozen=True)
class LocalQueueStatusView(QueueStatusView):
    """A LocalQueue's status: counts and usage of its own Workloads.

    Usage lists have the API's LocalQueue shape ``[{"name", "resources":
    [{"name", "total"}]}]`` over the flavors of its ClusterQueue (empty
    when that ClusterQueue does not exist).
    """


def _usage_list(
    spec: ClusterQueueSpec, usage: Mapping[FlavorResource, Decimal], *, with_borrowed: bool
) -> list[dict[str, Any]]:
    """Usage in the API's per-flavor shape, over the flavors and resources the spec declares."""
    result: list[dict[str, Any]] = []
    for group in spec.resource_groups or ():
        for flavor in group.flavors:
            resources: list[dict[str, Any]] = []
            for quota in flavor.resources:
                total = usage.get((flavor.name, quota.name), ZERO)
                entry: dict[str, Any] = {"name": quota.name, "total": format_quantity(total)}
                if with_borrowed:
                    entry["borrowed"] = format_quantity(max(ZERO, total - Decimal(quota.nominal_quota)))
                resources.append(entry)
            result.append({"name": flavor.name, "resources": resources})
    return result


def cluster_queue_view(
    state: ClusterQueueState, stats: QueueStats, pending: int, *, fair_sharing: bool = False
) -> ClusterQueueStatusView:
    """A ClusterQueue's status from its state, its counters and the number of Workloads waiting in it.

    With ``fair_sharing``, also its weighted share: the dominant resource
    share of its quota node rounded up, max int64 for a borrowing queue of
    weight 0 (upstream's ``WeightedShare`` of ``PreciseWeightedShare``).
    """
    drs = dominant_resource_share(state.node) if fair_sharing else None
    return ClusterQueueStatusView(
        active=state.active,
        reason=state.reason,
        message=state.message,
        pending_workloads=pending,
        reserving_workloads=stats.reserving,
        admitted_workloads=stats.admitted,
        flavors_reservation=_usage_list(state.spec, stats.reservation, with_borrowed=True),
        flavors_usage=_usage_list(state.spec, stats.admitted_usage, with_borrowed=True),
        weighted_share=drs.rounded_weighted_share() if drs is not None else None,
        precise_weighted_share=float(drs.weighted_share) if drs is not None else None,
    )


def local_queue_view(
    local_queue: LocalQueue, state: ClusterQueueState | None, stats: QueueStats, pending: int
) -> LocalQueueStatusView:
    """A LocalQueue's status; ``state`` is its ClusterQueue's (None when that does not exist)."""
    if local_queue.spec.stop_policy != StopPolicy.NONE:
        active, reason, message = False, LocalQueueReason.STOPPED, messages.LQ_STOPPED
    elif state is None:
        active, reason = False, LocalQueueReason.CLUSTER_QUEUE_DOES_NOT_EXIST
        message = messages.LQ_CLUSTER_QUEUE_INACTIVE
    elif not state.active:
        active, reason = False, LocalQueueReason.CLUSTER_QUEUE_IS_INACTIVE
        message = messages.LQ_CLUSTER_QUEUE_INACTIVE
    else:
        active, reason, message = True, LocalQueueReason.READY, messages.LQ_ACTIVE
    return LocalQueueStatusView(
        active=active,
        reason=reason,
        message=message,
        pending_workloads=pending,
        reserving_workloads=stats.reserving,
        admitted_workloads=stats.admitted,
        flavors_reservation=_usage_list(state.spec, stats.reservation, with_borrowed=False) if state else [],
        flavors_usage=_usage_list(state.spec, stats.admitted_usage, with_borrowed=False) if state else [],
    )
