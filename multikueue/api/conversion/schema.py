"""How the v1beta1 schema differs from the v1beta2 one the models generate.

The CRD generator (``multikueue.api.crdgen``) builds v1beta1's schema from
v1beta2's by applying these edits, so the two versions cannot drift apart
anywhere they agree. Each edit is one of upstream's differences (the same
list as :mod:`multikueue.api.conversion.kinds`); the v1beta1-only
structures are small models here. Where upstream's v1beta1 schema is looser
than its v1beta2 (a missing ``minLength``, ``maxItems``), ours keeps the
v1beta2 limit: the object is stored as v1beta2 anyway, so a v1beta1 write
that broke it would be refused at the next v1beta2 update.

Two v1beta1 defaults of upstream's are left out on purpose:
``AdmissionCheck.spec.retryDelayMinutes`` (15) and
``Workload.spec.priorityClassSource`` (``""``). Both fields mean nothing in
v1beta2; a default would put them in every object written as v1beta1, and
the conversion would then have to carry them in its annotation for ever.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

from multikueue.api.meta import KueueModel, Time
from multikueue.api.multikueue import ClusterProfileReference, KubeConfig
from multikueue.api.quantity import Quantity
from multikueue.api.schema import DNS1123_SUBDOMAIN_PATTERN, Int32, Int64, ObjectName, Rule, Schema

__all__ = ["DEPRECATION_WARNING", "EDITS", "Add", "Edit", "ExtraValues", "Remove", "Rename", "Required", "Rules"]

#: What ``kubectl`` prints for every v1beta1 request (upstream's wording).
DEPRECATION_WARNING = "This version is deprecated. Use v1beta2 instead."


# --- v1beta1-only structures ---------------------------------------------------


class ClusterQueuePendingWorkload(KueueModel):
    """A pending workload of the ClusterQueue (v1beta1's deprecated pending list)."""

    name: str
    namespace: str


class ClusterQueuePendingWorkloadsStatus(KueueModel):
    """Deprecated in upstream's v1beta1 and never written; accepted so that its manifests apply."""

    cluster_queue_pending_workload: (
        Annotated[list[ClusterQueuePendingWorkload], Schema(list_type="atomic")] | None
    ) = None
    last_change_time: Time


class AdmissionFairSharingStatus(KueueModel):
    """Admission fair sharing usage (v1beta1 only; v1beta2 has no counterpart)."""

    consumed_resources: dict[str, Quantity]
    last_update: Time


class Taint(KueueModel):
    """A node taint, as LocalQueue's v1beta1 ``status.flavors`` reported it."""

    effect: str
    key: str
    time_added: Time | None = None
    value: str | None = None


class TopologyInfo(KueueModel):
    """The topology of a flavor, as LocalQueue's v1beta1 ``status.flavors`` reported it."""

    levels: Annotated[list[str], Schema(list_type="atomic", min_items=1, max_items=16)]
    name: ObjectName


class LocalQueueFlavorStatus(KueueModel):
    """A flavor the LocalQueue may use (v1beta1's deprecated ``status.flavors``)."""

    name: ObjectName
    node_labels: Annotated[dict[str, str], Schema(map_type="atomic", max_properties=8)] | None = None
    node_taints: Annotated[list[Taint], Schema(list_type="atomic", max_items=8)] | None = None
    resources: Annotated[list[str], Schema(list_type="set", max_items=64)] | None = None
    topology: TopologyInfo | None = None


class TopologyDomainAssignment(KueueModel):
    """One topology domain and how many pods it got (v1beta1's form of a topology assignment)."""

    count: Annotated[Int32, Schema(minimum=1)]
    values: Annotated[list[str], Schema(list_type="atomic", min_items=1, max_items=16)]


class PriorityClassSource(StrEnum):
    """v1beta1 ``Workload.spec.priorityClassSource``: where the priority class comes from (``""``: none)."""

    WORKLOAD = "kueue.x-k8s.io/workloadpriorityclass"
    POD = "scheduling.k8s.io/priorityclass"
    NONE = ""


# --- edits -----------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One change to a schema node; ``path`` is dotted properties, ``[]`` for a list's items (``a.b[].c``)."""

    path: str


@dataclass(frozen=True)
class Rename(Edit):
    """Property ``path`` is called ``name`` in v1beta1; CEL rules of its parent follow the new name."""

    name: str


@dataclass(frozen=True)
class Remove(Edit):
    """Property ``path`` does not exist in v1beta1."""


@dataclass(frozen=True)
class Add(Edit):
    """Property ``path`` exists only in v1beta1, with the schema of ``annotation`` (a type, as on a model field)."""

    annotation: Any
    description: str


@dataclass(frozen=True)
class ExtraValues(Edit):
    """v1beta1 also accepts ``values`` (deprecated ones the conversion maps)."""

    values: tuple[str, ...]


@dataclass(frozen=True)
class Required(Edit):
    """The object at ``path`` requires exactly ``names`` in v1beta1."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class Rules(Edit):
    """Drop the CEL rules at ``path`` that mention any of ``drop``; add ``add``."""

    drop: tuple[str, ...]
    add: tuple[Rule, ...] = field(default=())


_QUOTA_RESERVED = (
    "has(oldSelf.status) && has(oldSelf.status.conditions) && "
    "oldSelf.status.conditions.exists(c, c.type == 'QuotaReserved' && c.status == 'True')"
)

#: The edits, by kind; a kind not listed has the same schema in both versions.
EDITS: dict[str, tuple[Edit, ...]] = {
    "AdmissionCheck": (
        Add("spec.retryDelayMinutes", Int64 | None, "Deprecated and ignored; not in v1beta2"),
    ),
    "ClusterQueue": (
        Rename("spec.cohortName", "cohort"),
        Remove("spec.concurrentAdmissionPolicy"),
        Add(
            "spec.admissionChecks",
            list[Annotated[str, Schema(max_length=316)]] | None,
            "AdmissionChecks every Workload must pass (v1beta2: admissionChecksStrategy)",
        ),
        ExtraValues("spec.flavorFungibility.whenCanBorrow", ("Borrow",)),
        ExtraValues("spec.flavorFungibility.whenCanPreempt", ("Preempt",)),
        Add(
            "status.pendingWorkloadsStatus",
            ClusterQueuePendingWorkloadsStatus | None,
            "Deprecated; not in v1beta2",
        ),
        Add(
            "status.fairSharing.admissionFairSharingStatus",
            AdmissionFairSharingStatus | None,
            "Admission fair sharing usage; not in v1beta2",
        ),
    ),
    "Cohort": (
        Add(
            "status.fairSharing.admissionFairSharingStatus",
            AdmissionFairSharingStatus | None,
            "Admission fair sharing usage; not in v1beta2",
        ),
    ),
    "LocalQueue": (
        Rename("status.flavorsUsage", "flavorUsage"),
        Add(
            "status.flavors",
            Annotated[list[LocalQueueFlavorStatus], Schema(list_type="map", list_map_keys=("name",), max_items=64)]
            | None,
            "Deprecated; not in v1beta2",
        ),
    ),
    "MultiKueueCluster": (
        Remove("spec.clusterSource"),
        Add("spec.kubeConfig", KubeConfig | None, "Where to read the worker's kubeconfig (v1beta2: clusterSource)"),
        Add(
            "spec.clusterProfileRef",
            ClusterProfileReference | None,
            "A ClusterProfile describing how to reach the worker (v1beta2: clusterSource)",
        ),
        Required("spec", ("kubeConfig",)),
    ),
    "MultiKueueConfig": (Remove("spec.quotaManagement"),),
    "Workload": (
        Remove("spec.priorityClassRef"),
        Remove("spec.preemptionGates"),
        Add(
            "spec.priorityClassName",
            Annotated[str, Schema(max_length=253, pattern=DNS1123_SUBDOMAIN_PATTERN)] | None,
            "Name of the priority class (v1beta2: priorityClassRef.name)",
        ),
        Add(
            "spec.priorityClassSource",
            PriorityClassSource | None,
            "Where the priority class comes from (v1beta2: priorityClassRef.group and kind)",
        ),
        Rules(
            "spec",
            drop=("priorityClassRef",),
            add=(
                Rule(
                    "has(self.priorityClassName) ? has(self.priority) : true",
                    "priority should not be nil when priorityClassName is set",
                ),
            ),
        ),
        Rules(
            "",
            drop=("priorityClassRef",),
            add=(
                Rule(
                    f"({_QUOTA_RESERVED} && has(oldSelf.spec.priorityClassSource) && has(self.spec.priorityClassSource))"
                    " ? (oldSelf.spec.priorityClassSource == self.spec.priorityClassSource) : true",
                    "priorityClassSource is immutable while workload quota reserved",
                ),
                Rule(
                    f"({_QUOTA_RESERVED} && has(oldSelf.spec.priorityClassSource) && has(self.spec.priorityClassSource)"
                    " && (self.spec.priorityClassSource != 'kueue.x-k8s.io/workloadpriorityclass')"
                    " && has(oldSelf.spec.priorityClassName) && has(self.spec.priorityClassName))"
                    " ? (oldSelf.spec.priorityClassName == self.spec.priorityClassName) : true",
                    "priorityClassName is immutable while workload quota reserved and priorityClassSource "
                    "is not equal to kueue.x-k8s.io/workloadpriorityclass",
                ),
            ),
        ),
        Remove("spec.podSets[].topologyRequest.podsetSliceRequiredTopologyConstraints"),
        Rename("status.accumulatedPastExecutionTimeSeconds", "accumulatedPastExexcutionTimeSeconds"),
        Remove("status.preemptionGates"),
        Remove("status.admission.podSetAssignments[].topologyAssignment.slices"),
        Add(
            "status.admission.podSetAssignments[].topologyAssignment.domains",
            list[TopologyDomainAssignment],
            "The domains and their pod counts (v1beta2: slices)",
        ),
        Rules("status.admission.podSetAssignments[].topologyAssignment", drop=("slices",)),
        Required("status.admission.podSetAssignments[].topologyAssignment", ("domains", "levels")),
    ),
}
