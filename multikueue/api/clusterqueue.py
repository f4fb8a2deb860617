"""ClusterQueue: a pool of quota that Workloads are admitted against.

The scheduler admits a Workload into a ClusterQueue when a flavor of each
resource group has room for it (``nominal_quota``, plus borrowing within the
cohort up to ``borrowing_limit``). The status counters and usage lists are
what the scheduler reports back.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import Field

from multikueue.api.meta import Conditions, KueueModel, KueueObject, LabelSelector
from multikueue.api.quantity import Quantity
from multikueue.api.quota import FairSharing, FairSharingStatus, ResourceGroups
from multikueue.api.schema import Int32, ObjectName, Rule, Schema

__all__ = [
    "AdmissionCheckStrategyRule",
    "AdmissionChecksStrategy",
    "AdmissionMode",
    "AdmissionScope",
    "BorrowWithinCohort",
    "BorrowWithinCohortPolicy",
    "ClusterQueue",
    "ClusterQueuePreemption",
    "ClusterQueueSpec",
    "ClusterQueueStatus",
    "ConcurrentAdmissionConstraints",
    "ConcurrentAdmissionMigration",
    "ConcurrentAdmissionMigrationMode",
    "ConcurrentAdmissionPolicy",
    "FlavorFungibility",
    "FlavorFungibilityPolicy",
    "FlavorFungibilityPreference",
    "FlavorUsage",
    "FlavorsUsage",
    "QueueingStrategy",
    "ReclaimWithinCohortPolicy",
    "ResourceUsage",
    "StopPolicy",
    "WithinClusterQueuePolicy",
]


class QueueingStrategy(StrEnum):
    """How pending Workloads of equal priority are ordered."""

    #: Oldest first; an old Workload that does not fit blocks newer ones.
    STRICT_FIFO = "StrictFIFO"
    #: Oldest first, but a Workload that fits may pass one that does not.
    BEST_EFFORT_FIFO = "BestEffortFIFO"


class StopPolicy(StrEnum):
    """Whether a queue is stopped, and what happens to what it already admitted."""

    NONE = "None"
    #: No new admissions; running Workloads finish.
    HOLD = "Hold"
    #: No new admissions; admitted Workloads are evicted.
    HOLD_AND_DRAIN = "HoldAndDrain"


class WithinClusterQueuePolicy(StrEnum):
    """Which Workloads of the same ClusterQueue a pending one may preempt."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimWithinCohortPolicy(StrEnum):
    """Which borrowing Workloads of other ClusterQueues may be preempted to reclaim quota."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowWithinCohortPolicy(StrEnum):
    """Whether a Workload may preempt in the cohort in order to borrow."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class FlavorFungibilityPolicy(StrEnum):
    """Whether to stop at a flavor that needs borrowing/preemption or try the next flavor."""

    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FlavorFungibilityPreference(StrEnum):
    """When every flavor needs borrowing or preemption, which one is preferred."""

    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


class AdmissionMode(StrEnum):
    """Whether admission fair sharing orders LocalQueues by their past usage."""

    USAGE_BASED_ADMISSION_FAIR_SHARING = "UsageBasedAdmissionFairSharing"
    NO_ADMISSION_FAIR_SHARING = "NoAdmissionFairSharing"


class ConcurrentAdmissionMigrationMode(StrEnum):
    """Whether an admitted Workload may move to a more preferred flavor later."""

    TRY_PREFERRED_FLAVORS = "TryPreferredFlavors"
    RETAIN_FIRST_ADMISSION = "RetainFirstAdmission"


class AdmissionCheckStrategyRule(KueueModel):
    """One admission check of the queue, optionally only for some flavors."""

    name: Annotated[str, Schema(min_length=1, max_length=316)]
    #: Run the check only for Workloads assigned one of these flavors; empty means always.
    on_flavors: Annotated[list[ObjectName], Schema(list_type="set", max_items=64)] | None = None


class AdmissionChecksStrategy(KueueModel):
    """The admission checks every Workload of the queue must pass."""

    admission_checks: Annotated[
        list[AdmissionCheckStrategyRule],
        Schema(list_type="map", list_map_keys=("name",), min_items=1, max_items=64),
    ]


class AdmissionScope(KueueModel):
    """Admission fair sharing settings."""

    admission_mode: AdmissionMode


class ConcurrentAdmissionConstraints(KueueModel):
    """Limits on where a Workload may migrate."""

    last_acceptable_flavor_name: ObjectName | None = None


class ConcurrentAdmissionMigration(KueueModel):
    """How Workloads migrate between flavors after admission."""

    mode: Annotated[ConcurrentAdmissionMigrationMode, Schema(max_length=253)]
    constraints: ConcurrentAdmissionConstraints | None = None


class ConcurrentAdmissionPolicy(KueueModel):
    """Admission to several flavors at once (upstream's concurrent admission)."""

    migration: ConcurrentAdmissionMigration


class FlavorFungibility(KueueModel):
    """Whether the scheduler looks at the next flavor before borrowing or preempting."""

    crd_rules = (
        Rule(
            "!has(self.preference) || "
            "(self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')",
            "preference needs whenCanBorrow and whenCanPreempt both set to TryNextFlavor",
        ),
    )

    preference: FlavorFungibilityPreference | None = None
    when_can_borrow: FlavorFungibilityPolicy = FlavorFungibilityPolicy.MAY_STOP_SEARCH
    when_can_preempt: FlavorFungibilityPolicy = FlavorFungibilityPolicy.TRY_NEXT_FLAVOR


class BorrowWithinCohort(KueueModel):
    """Preemption while borrowing from the cohort."""

    policy: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    #: Only Workloads with priority at or below this may be preempted while borrowing.
    max_priority_threshold: Int32 | None = None


class ClusterQueuePreemption(KueueModel):
    """Which Workloads a pending Workload of this queue may preempt."""

    crd_rules = (
        Rule(
            "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) "
            "&& self.borrowWithinCohort.policy != 'Never')",
            "borrowWithinCohort.policy must be Never when reclaimWithinCohort is Never",
        ),
    )

    reclaim_within_cohort: ReclaimWithinCohortPolicy = ReclaimWithinCohortPolicy.NEVER
    borrow_within_cohort: Annotated[BorrowWithinCohort, Schema(default={})] = Field(default_factory=BorrowWithinCohort)
    within_cluster_queue: WithinClusterQueuePolicy = WithinClusterQueuePolicy.NEVER


class ClusterQueueSpec(KueueModel):
    """Quota, queueing and preemption settings of a ClusterQueue.

    Without a ``namespace_selector`` no namespace may submit; ``{}`` lets all in.
    """

    crd_rules = (
        Rule(
            "!has(self.cohortName) && has(self.resourceGroups) ? "
            "self.resourceGroups.all(g, g.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit)))) : true",
            "borrowingLimit needs a cohortName",
        ),
    )

    resource_groups: ResourceGroups | None = None
    cohort_name: ObjectName | None = None
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    namespace_selector: Annotated[LabelSelector, Schema(map_type="atomic")] | None = None
    flavor_fungibility: Annotated[FlavorFungibility, Schema(default={})] = Field(default_factory=FlavorFungibility)
    preemption: Annotated[ClusterQueuePreemption, Schema(default={})] = Field(default_factory=ClusterQueuePreemption)
    admission_checks_strategy: AdmissionChecksStrategy | None = None
    stop_policy: StopPolicy = StopPolicy.NONE
    fair_sharing: FairSharing | None = None
    admission_scope: AdmissionScope | None = None
    concurrent_admission_policy: ConcurrentAdmissionPolicy | None = None


class ResourceUsage(KueueModel):
    """Quota of one resource in use (or reserved), and how much of it is borrowed."""

    name: str
    total: Quantity | None = None
    borrowed: Quantity | None = None


class FlavorUsage(KueueModel):
    """Usage of one flavor's resources."""

    name: ObjectName
    resources: Annotated[list[ResourceUsage], Schema(list_type="map", list_map_keys=("name",), max_items=64)]


#: Per-flavor usage lists, keyed by flavor name.
FlavorsUsage = Annotated[list[FlavorUsage], Schema(list_type="map", list_map_keys=("name",), max_items=64)]


class ClusterQueueStatus(KueueModel):
    """What the scheduler reports about the queue.

    ``flavors_reservation`` counts Workloads holding quota (QuotaReserved);
    ``flavors_usage`` only admitted ones.
    """

    conditions: Conditions | None = None
    flavors_reservation: FlavorsUsage | None = None
    flavors_usage: FlavorsUsage | None = None
    pending_workloads: Int32 | None = None
    reserving_workloads: Int32 | None = None
    admitted_workloads: Int32 | None = None
    fair_sharing: FairSharingStatus | None = None


class ClusterQueue(KueueObject):
    """A cluster-wide pool of quota that LocalQueues submit Workloads to."""

    kind: ClassVar[str] = "ClusterQueue"
    plural: ClassVar[str] = "clusterqueues"
    namespaced: ClassVar[bool] = False
    short_names: ClassVar[tuple[str, ...]] = ("cq",)

    spec: ClusterQueueSpec = Field(default_factory=ClusterQueueSpec)
    status: ClusterQueueStatus = Field(default_factory=ClusterQueueStatus)
