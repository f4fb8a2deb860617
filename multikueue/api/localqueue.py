"""LocalQueue: the namespaced queue users submit jobs to.

A job names a LocalQueue with the ``kueue.x-k8s.io/queue-name`` label; the
LocalQueue points at the ClusterQueue whose quota its Workloads use. Its
status mirrors the ClusterQueue's counters for the namespace's users.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from multikueue.api.clusterqueue import StopPolicy
from multikueue.api.meta import Conditions, KueueModel, KueueObject, Time
from multikueue.api.quantity import Quantity
from multikueue.api.quota import FairSharing, FairSharingStatus
from multikueue.api.schema import Int32, ObjectName, Rule, Schema

__all__ = [
    "AdmissionFairSharingStatus",
    "LocalQueue",
    "LocalQueueFairSharingStatus",
    "LocalQueueFlavorUsage",
    "LocalQueueResourceUsage",
    "LocalQueueSpec",
    "LocalQueueStatus",
]


class LocalQueueSpec(KueueModel):
    """The ClusterQueue behind this queue, and whether the queue is stopped."""

    cluster_queue: (
        Annotated[ObjectName, Schema(rules=(Rule("self == oldSelf", "clusterQueue cannot be changed"),))] | None
    ) = None
    stop_policy: StopPolicy = StopPolicy.NONE
    fair_sharing: FairSharing | None = None


class LocalQueueResourceUsage(KueueModel):
    """Quota of one resource used by this queue's Workloads."""

    name: str
    total: Quantity | None = None


class LocalQueueFlavorUsage(KueueModel):
    """Usage of one flavor by this queue's Workloads."""

    name: ObjectName
    resources: Annotated[
        list[LocalQueueResourceUsage],
        Schema(list_type="map", list_map_keys=("name",), max_items=64),
    ]


class AdmissionFairSharingStatus(KueueModel):
    """Decayed past usage that admission fair sharing orders queues by."""

    consumed_resources: dict[str, Quantity]
    last_update: Time


class LocalQueueFairSharingStatus(FairSharingStatus):
    """Fair-sharing state of a LocalQueue."""

    admission_fair_sharing_status: AdmissionFairSharingStatus | None = None


_FlavorsUsage = Annotated[list[LocalQueueFlavorUsage], Schema(list_type="map", list_map_keys=("name",), max_items=64)]


class LocalQueueStatus(KueueModel):
    """Counters and usage of this queue's Workloads."""

    conditions: Conditions | None = None
    pending_workloads: Int32 | None = None
    reserving_workloads: Int32 | None = None
    admitted_workloads: Int32 | None = None
    flavors_reservation: _FlavorsUsage | None = None
    flavors_usage: _FlavorsUsage | None = None
    fair_sharing: LocalQueueFairSharingStatus | None = None


class LocalQueue(KueueObject):
    """A namespaced queue that feeds one ClusterQueue."""

    kind: ClassVar[str] = "LocalQueue"
    plural: ClassVar[str] = "localqueues"
    namespaced: ClassVar[bool] = True
    short_names: ClassVar[tuple[str, ...]] = ("queue", "queues", "lq")

    spec: LocalQueueSpec = Field(default_factory=LocalQueueSpec)
    status: LocalQueueStatus = Field(default_factory=LocalQueueStatus)
