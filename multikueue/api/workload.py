"""Workload: the unit of admission, one per job.

A job integration creates a Workload describing the job's pods (``pod_sets``)
and its queue; the scheduler writes ``status.admission`` when it reserves
quota; admission-check controllers (MultiKueue among them) fill
``status.admission_checks``; the job starts once the Workload is Admitted.

Over 500 lines because the Workload's schema is large and its parts (pod
sets, admission, check states, status) are read together; splitting it would
scatter one CRD's model over several modules.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import Field

from multikueue.api.constants import CheckState, WorkloadConditionType
from multikueue.api.core import Tolerations
from multikueue.api.meta import (
    Condition,
    Conditions,
    KueueModel,
    KueueObject,
    Time,
    find_condition,
    is_condition_true,
    now,
)
from multikueue.api.quantity import Quantity
from multikueue.api.schema import Int32, ObjectName, PodSetName, Rule, Schema

__all__ = [
    "Admission",
    "AdmissionCheckState",
    "DelayedTopologyRequestState",
    "PodSet",
    "PodSetAssignment",
    "PodSetRequest",
    "PodSetTopologyRequest",
    "PodSetUpdate",
    "PreemptionGate",
    "PreemptionGatePosition",
    "PreemptionGateState",
    "PriorityClassGroup",
    "PriorityClassKind",
    "PriorityClassRef",
    "ReclaimablePod",
    "RequeueState",
    "SchedulingStats",
    "SliceTopologyConstraint",
    "TopologyAssignment",
    "TopologyAssignmentSlice",
    "TopologyAssignmentSliceLevelIndividualValues",
    "TopologyAssignmentSliceLevelValues",
    "TopologyAssignmentSlicePodCounts",
    "UnhealthyNode",
    "Workload",
    "WorkloadSchedulingStatsEviction",
    "WorkloadSpec",
    "WorkloadStatus",
]


def _condition_true(obj: str, condition_type: str) -> str:
    """CEL: ``obj`` (``self`` or ``oldSelf``) has ``condition_type`` with status True."""
    return (
        f"has({obj}.status) && has({obj}.status.conditions) && "
        f"{obj}.status.conditions.exists(c, c.type == '{condition_type}' && c.status == 'True')"
    )


_OLD_RESERVED = _condition_true("oldSelf", "QuotaReserved")
_NEW_RESERVED = _condition_true("self", "QuotaReserved")
_OLD_ADMITTED = _condition_true("oldSelf", "Admitted")
_NEW_ADMITTED = _condition_true("self", "Admitted")
_BOTH_REFS = "has(oldSelf.spec.priorityClassRef) && has(self.spec.priorityClassRef)"


# --- spec ------------------------------------------------------------------


class SliceTopologyConstraint(KueueModel):
    """Pods of a slice must share one domain of this topology level."""

    topology: Annotated[str, Schema(min_length=1, max_length=63)]
    size: Annotated[Int32, Schema(minimum=1)]


class PodSetTopologyRequest(KueueModel):
    """Topology-aware scheduling request of a pod set (node labels naming topology levels)."""

    required: Annotated[str, Schema(max_length=63)] | None = None
    preferred: Annotated[str, Schema(max_length=63)] | None = None
    unconstrained: bool | None = None
    pod_index_label: Annotated[str, Schema(max_length=317)] | None = None
    sub_group_index_label: Annotated[str, Schema(max_length=317)] | None = None
    sub_group_count: Annotated[Int32, Schema(minimum=0)] | None = None
    pod_set_group_name: Annotated[str, Schema(max_length=256)] | None = None
    pod_set_slice_required_topology: Annotated[str, Schema(max_length=63)] | None = None
    pod_set_slice_size: Annotated[Int32, Schema(minimum=1)] | None = None
    podset_slice_required_topology_constraints: (
        Annotated[list[SliceTopologyConstraint], Schema(list_type="atomic", max_items=3)] | None
    ) = None


class PodSet(KueueModel):
    """A group of identical pods: a pod template and how many of it.

    The template is kept as the raw ``PodTemplateSpec`` dict; the API server
    does not prune or default inside it (opaque in our CRD).
    """

    crd_rules = (
        Rule(
            "has(self.minCount) ? self.minCount <= self.count : true",
            "minCount must not exceed count",
        ),
    )

    name: PodSetName = "main"
    template: dict[str, Any]
    count: Annotated[Int32, Schema(minimum=0)] = 1
    #: With partial admission: the fewest pods the job can run with.
    min_count: Annotated[Int32, Schema(minimum=1)] | None = None
    topology_request: PodSetTopologyRequest | None = None


class PriorityClassGroup(StrEnum):
    """API group of the priority class a Workload refers to."""

    KUEUE = "kueue.x-k8s.io"
    SCHEDULING = "scheduling.k8s.io"


class PriorityClassKind(StrEnum):
    """Kind of the priority class a Workload refers to."""

    WORKLOAD_PRIORITY_CLASS = "WorkloadPriorityClass"
    PRIORITY_CLASS = "PriorityClass"


class PriorityClassRef(KueueModel):
    """The priority class ``spec.priority`` was taken from."""

    crd_rules = (
        Rule(
            "self.group == 'scheduling.k8s.io' ? self.kind == 'PriorityClass' : true",
            "the scheduling.k8s.io group only has kind PriorityClass",
        ),
        Rule(
            "self.group == 'kueue.x-k8s.io' ? self.kind == 'WorkloadPriorityClass' : true",
            "the kueue.x-k8s.io group only has kind WorkloadPriorityClass",
        ),
    )

    group: PriorityClassGroup
    kind: PriorityClassKind
    name: Annotated[ObjectName, Schema(min_length=1)]


class PreemptionGate(KueueModel):
    """A gate that must open before the Workload may preempt others."""

    name: Annotated[str, Schema(min_length=1, max_length=63)]


_ByName = Schema(list_type="map", list_map_keys=("name",))


class WorkloadSpec(KueueModel):
    """What the Workload needs and where it is queued."""

    crd_rules = (
        Rule(
            "!has(self.priorityClassRef) || has(self.priority)",
            "priority must be set when priorityClassRef is set",
        ),
    )

    pod_sets: Annotated[list[PodSet], Schema(list_type="map", list_map_keys=("name",), min_items=1, max_items=18)] = (
        Field(default_factory=list)
    )
    queue_name: ObjectName | None = None
    priority_class_ref: PriorityClassRef | None = None
    priority: Int32 | None = None
    #: ``False`` deactivates the Workload: it is evicted and not admitted again.
    active: bool = True
    maximum_execution_time_seconds: Annotated[Int32, Schema(minimum=1)] | None = None
    preemption_gates: (
        Annotated[list[PreemptionGate], Schema(list_type="map", list_map_keys=("name",), max_items=8)] | None
    ) = None


# --- status: admission -------------------------------------------------------


class TopologyAssignmentSlicePodCounts(KueueModel):
    """Pods per domain: the same for all (``universal``) or one per domain (``individual``)."""

    crd_rules = (
        Rule(
            "[has(self.universal), has(self.individual)].filter(x, x).size() == 1",
            "set exactly one of universal and individual",
        ),
    )

    universal: Annotated[Int32, Schema(minimum=1)] | None = None
    individual: (
        Annotated[
            list[Annotated[Int32, Schema(minimum=1)]],
            Schema(list_type="atomic", min_items=1, max_items=100000),
        ]
        | None
    ) = None


class TopologyAssignmentSliceLevelIndividualValues(KueueModel):
    """One value per domain, written as prefix + root + suffix to keep status small."""

    prefix: Annotated[str, Schema(max_length=63)] | None = None
    roots: Annotated[
        list[Annotated[str, Schema(max_length=63)]],
        Schema(list_type="atomic", min_items=1, max_items=100000),
    ]
    suffix: Annotated[str, Schema(max_length=63)] | None = None


class TopologyAssignmentSliceLevelValues(KueueModel):
    """The values of one topology level across a slice's domains."""

    crd_rules = (
        Rule(
            "has(self.universal) != has(self.individual)",
            "set exactly one of universal and individual",
        ),
    )

    universal: Annotated[str, Schema(max_length=63)] | None = None
    individual: TopologyAssignmentSliceLevelIndividualValues | None = None


class TopologyAssignmentSlice(KueueModel):
    """A run of topology domains and the pods assigned to each."""

    crd_rules = (
        Rule(
            "!has(self.podCounts.individual) || size(self.podCounts.individual) == self.domainCount",
            "podCounts.individual must have domainCount entries",
        ),
        Rule(
            "self.valuesPerLevel.all(v, !has(v.individual) || size(v.individual.roots) == self.domainCount)",
            "valuesPerLevel[].individual.roots must have domainCount entries",
        ),
    )

    domain_count: Annotated[Int32, Schema(minimum=1)]
    values_per_level: Annotated[
        list[TopologyAssignmentSliceLevelValues],
        Schema(list_type="atomic", min_items=1, max_items=16),
    ]
    pod_counts: TopologyAssignmentSlicePodCounts


class TopologyAssignment(KueueModel):
    """Where in the topology a pod set's pods were placed."""

    crd_rules = (
        Rule(
            "self.slices.all(s, size(s.valuesPerLevel) == size(self.levels))",
            "every slice needs one valuesPerLevel entry per level",
        ),
    )

    levels: Annotated[
        list[Annotated[str, Schema(max_length=317)]],
        Schema(list_type="atomic", min_items=1, max_items=16),
    ]
    slices: Annotated[list[TopologyAssignmentSlice], Schema(list_type="atomic", max_items=1000)]


class DelayedTopologyRequestState(StrEnum):
    """Whether a delayed topology assignment is still to be made."""

    PENDING = "Pending"
    READY = "Ready"


class PodSetAssignment(KueueModel):
    """The flavors and quota one pod set was admitted with."""

    name: PodSetName = "main"
    #: Resource name -> ResourceFlavor name.
    flavors: dict[str, ObjectName] | None = None
    #: Resource name -> total quota reserved for the pod set (count x per-pod request).
    resource_usage: dict[str, Quantity] | None = None
    #: Pods admitted (less than the pod set's count with partial admission).
    count: Annotated[Int32, Schema(minimum=0)] | None = None
    topology_assignment: TopologyAssignment | None = None
    delayed_topology_request: Annotated[DelayedTopologyRequestState, Schema(max_length=7)] | None = None


class Admission(KueueModel):
    """Where the Workload reserved quota: its ClusterQueue and per-pod-set flavors."""

    cluster_queue: ObjectName | None = None
    pod_set_assignments: Annotated[list[PodSetAssignment], _ByName, Schema(max_items=18)] | None = None


# --- status: everything else --------------------------------------------------


class PodSetUpdate(KueueModel):
    """Additions an admission check asks for on one pod set's pods."""

    name: PodSetName
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    node_selector: dict[str, str] | None = None
    tolerations: Tolerations | None = None


class AdmissionCheckState(KueueModel):
    """The state of one admission check on this Workload.

    ``message`` and ``last_transition_time`` are required by the API but have
    Python defaults ("" and now).
    """

    name: Annotated[str, Schema(min_length=1, max_length=316)]
    state: CheckState
    last_transition_time: Annotated[Time, Schema(required=True)] = Field(default_factory=now)
    message: Annotated[str, Schema(max_length=32768, required=True)] = ""
    pod_set_updates: Annotated[list[PodSetUpdate], Schema(list_type="atomic", max_items=18)] | None = None
    requeue_after_seconds: Annotated[Int32, Schema(minimum=0)] | None = None
    retry_count: Annotated[Int32, Schema(minimum=0)] | None = None


class RequeueState(KueueModel):
    """Backoff bookkeeping after evictions."""

    count: Annotated[Int32, Schema(minimum=0)] | None = None
    requeue_at: Time | None = None


class ReclaimablePod(KueueModel):
    """Pods of a pod set that finished, whose quota can be given back."""

    name: PodSetName
    count: Annotated[Int32, Schema(minimum=0)]


class PodSetRequest(KueueModel):
    """Total resources one pod set needs (after defaults and overheads)."""

    name: PodSetName
    resources: dict[str, Quantity] | None = None


class WorkloadSchedulingStatsEviction(KueueModel):
    """How often the Workload was evicted for one reason."""

    reason: Annotated[str, Schema(max_length=316)]
    underlying_cause: Annotated[str, Schema(max_length=316)]
    count: Annotated[Int32, Schema(minimum=0)]


class SchedulingStats(KueueModel):
    """Eviction counters."""

    evictions: (
        Annotated[
            list[WorkloadSchedulingStatsEviction],
            Schema(list_type="map", list_map_keys=("reason", "underlyingCause"), max_items=256),
        ]
        | None
    ) = None


class UnhealthyNode(KueueModel):
    """A node the Workload's pods ran on that became unhealthy."""

    name: Annotated[str, Schema(max_length=63)]


class PreemptionGatePosition(StrEnum):
    """Whether a preemption gate lets the Workload preempt."""

    CLOSED = "Closed"
    OPEN = "Open"


class PreemptionGateState(KueueModel):
    """The current position of one preemption gate."""

    name: Annotated[str, Schema(min_length=1, max_length=63)]
    position: PreemptionGatePosition
    last_transition_time: Annotated[Time, Schema(required=True)] = Field(default_factory=now)


class WorkloadStatus(KueueModel):
    """Admission state, admission checks and MultiKueue placement of the Workload."""

    crd_rules = (
        Rule(
            "!has(oldSelf.clusterName) || !has(self.clusterName) || oldSelf.clusterName == self.clusterName",
            "clusterName cannot change once set",
        ),
        Rule(
            "!has(self.clusterName) || !has(self.nominatedClusterNames) || size(self.nominatedClusterNames) == 0",
            "clusterName and nominatedClusterNames cannot both be set",
        ),
    )

    conditions: Conditions | None = None
    admission: Admission | None = None
    requeue_state: RequeueState | None = None
    reclaimable_pods: Annotated[list[ReclaimablePod], _ByName, Schema(max_items=18)] | None = None
    admission_checks: Annotated[list[AdmissionCheckState], _ByName, Schema(max_items=8)] | None = None
    resource_requests: Annotated[list[PodSetRequest], _ByName, Schema(max_items=18)] | None = None
    accumulated_past_execution_time_seconds: Int32 | None = None
    scheduling_stats: SchedulingStats | None = None
    #: MultiKueue: the workers a copy was sent to while no worker has won yet.
    nominated_cluster_names: (
        Annotated[list[Annotated[str, Schema(max_length=256)]], Schema(list_type="atomic", max_items=20)] | None
    ) = None
    #: MultiKueue: the worker the Workload runs on.
    cluster_name: Annotated[str, Schema(max_length=256)] | None = None
    unhealthy_nodes: Annotated[list[UnhealthyNode], _ByName, Schema(max_items=8)] | None = None
    preemption_gates: Annotated[list[PreemptionGateState], _ByName, Schema(max_items=8)] | None = None


class Workload(KueueObject):
    """A job's request for quota, and the record of its admission."""

    kind: ClassVar[str] = "Workload"
    plural: ClassVar[str] = "workloads"
    namespaced: ClassVar[bool] = True
    short_names: ClassVar[tuple[str, ...]] = ("kwl", "kueueworkload", "kueueworkloads")

    crd_rules = (
        Rule(
            f"{_NEW_RESERVED} && has(self.status.admission) ? "
            "size(self.spec.podSets) == size(self.status.admission.podSetAssignments) : true",
            "status.admission needs one podSetAssignment per pod set",
        ),
        Rule(
            f"({_OLD_RESERVED}) ? has(oldSelf.spec.priorityClassRef) == has(self.spec.priorityClassRef) : true",
            "priorityClassRef cannot be added or removed while quota is reserved",
        ),
        Rule(
            f"({_OLD_RESERVED} && {_BOTH_REFS}) ? "
            "oldSelf.spec.priorityClassRef.group == self.spec.priorityClassRef.group : true",
            "priorityClassRef.group cannot change while quota is reserved",
        ),
        Rule(
            f"({_OLD_RESERVED} && {_BOTH_REFS}) ? "
            "oldSelf.spec.priorityClassRef.kind == self.spec.priorityClassRef.kind : true",
            "priorityClassRef.kind cannot change while quota is reserved",
        ),
        Rule(
            f"({_OLD_RESERVED} && {_BOTH_REFS} && self.spec.priorityClassRef.group == 'scheduling.k8s.io' "
            "&& self.spec.priorityClassRef.kind == 'PriorityClass') ? "
            "oldSelf.spec.priorityClassRef.name == self.spec.priorityClassRef.name : true",
            "a PriorityClass priorityClassRef.name cannot change while quota is reserved",
        ),
        Rule(
            f"(({_OLD_RESERVED}) && ({_NEW_RESERVED})) ? "
            "(has(oldSelf.spec.queueName) == has(self.spec.queueName) && "
            "(!has(oldSelf.spec.queueName) || oldSelf.spec.queueName == self.spec.queueName)) : true",
            "queueName cannot change while quota is reserved",
        ),
        Rule(
            f"(({_OLD_ADMITTED}) && ({_NEW_ADMITTED})) ? "
            "(has(oldSelf.spec.maximumExecutionTimeSeconds) ? oldSelf.spec.maximumExecutionTimeSeconds : 0) == "
            "(has(self.spec.maximumExecutionTimeSeconds) ? self.spec.maximumExecutionTimeSeconds : 0) : true",
            "maximumExecutionTimeSeconds cannot change while admitted",
        ),
    )

    spec: WorkloadSpec = Field(default_factory=WorkloadSpec)
    status: WorkloadStatus = Field(default_factory=WorkloadStatus)

    def condition(self, condition_type: str) -> Condition | None:
        """The status condition of this type, or ``None``."""
        return find_condition(self.status.conditions, condition_type)

    def is_condition_true(self, condition_type: str) -> bool:
        """Whether the status condition of this type is ``True``."""
        return is_condition_true(self.status.conditions, condition_type)

    @property
    def has_quota_reservation(self) -> bool:
        """Quota is reserved (``QuotaReserved=True``)."""
        return self.is_condition_true(WorkloadConditionType.QUOTA_RESERVED)

    @property
    def is_admitted(self) -> bool:
        """Quota is reserved and every admission check passed (``Admitted=True``)."""
        return self.is_condition_true(WorkloadConditionType.ADMITTED)

    @property
    def is_finished(self) -> bool:
        """The job is done (``Finished=True``)."""
        return self.is_condition_true(WorkloadConditionType.FINISHED)

    @property
    def is_evicted(self) -> bool:
        """The Workload was evicted (``Evicted=True``)."""
        return self.is_condition_true(WorkloadConditionType.EVICTED)

    def admission_check(self, name: str) -> AdmissionCheckState | None:
        """The state of the named admission check, or ``None``."""
        for check in self.status.admission_checks or ():
            if check.name == name:
                return check
        return None
