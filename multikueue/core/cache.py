"""The scheduler's in-memory state, fed object by object from watch events.

The I/O layer calls ``upsert_*`` / ``delete_*`` for every watch event (the
objects are the ``multikueue.api`` pydantic models) and reads the status
views to write ClusterQueue and LocalQueue status. The scheduler
(:func:`multikueue.core.scheduler.schedule`) reads the cache, and records
each admission it decides with :meth:`Cache.assume` so the quota is counted
before the API server confirms it.

Every update is incremental: an event touches the few indexes it concerns
(a workload event costs O(pod sets + cohort depth)), and marks *dirty* the
queues whose scheduling inputs it changed. A cycle only looks at dirty
queues, so a cycle with nothing new costs next to nothing.

Workload states, as upstream Kueue defines them:

- *reserving*: ``status.admission`` is set, ``QuotaReserved=True`` and not
  ``Finished=True``; its ``admission`` counts as usage of
  ``admission.clusterQueue``;
- *admitted*: reserving and ``Admitted=True``;
- *assumed*: admitted by the scheduler, not yet confirmed by the watch;
  counts as usage until the Workload comes back reserving (the assumption
  is then dropped, so nothing is counted twice) or :meth:`Cache.forget` is
  called after a failed write;
- *pending*: none of the above, ``spec.active`` not false, not finished, no
  ``deletionTimestamp``.

Namespaces never upserted are treated as existing without labels.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from multikueue.api.admissioncheck import AdmissionCheck
from multikueue.api.clusterqueue import ClusterQueue, ClusterQueueSpec, QueueingStrategy, StopPolicy
from multikueue.api.cohort import Cohort
from multikueue.api.constants import (
    ACTIVE,
    ClusterQueueReason,
    ConditionStatus,
    Labels,
    LocalQueueReason,
    WorkloadConditionType,
)
from multikueue.api.localqueue import LocalQueue
from multikueue.api.meta import is_condition_true
from multikueue.api.quantity import format_quantity
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import Admission, PriorityClassKind, Workload
from multikueue.api.workloadpriorityclass import WorkloadPriorityClass
from multikueue.core import messages
from multikueue.core.flavors import PodSetRequest, ResourceGroupView, pod_spec_of, resource_groups_of
from multikueue.core.quota import (
    ZERO,
    FlavorResource,
    QuotaNode,
    add_usage,
    leaves,
    quotas_from_groups,
    refresh_tree,
    remove_usage,
    root_of,
)
from multikueue.core.resources import pod_spec_errors

__all__ = [
    "Cache",
    "ClusterQueueState",
    "ClusterQueueStatusView",
    "DirtyQueues",
    "LocalQueueKey",
    "LocalQueueStatusView",
    "PendingWorkload",
    "WorkloadKey",
    "admission_usage",
]

#: (namespace, name) of a Workload.
WorkloadKey = tuple[str, str]
#: (namespace, name) of a LocalQueue.
LocalQueueKey = tuple[str, str]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --- public value types ----------------------------------------------------------


@dataclass(frozen=True)
class PendingWorkload:
    """A Workload waiting for quota, with what the scheduler needs precomputed."""

    key: WorkloadKey
    workload: Workload
    local_queue: LocalQueueKey
    priority: int
    created: datetime
    pod_sets: tuple[PodSetRequest, ...]
    #: ``status.requeueState.requeueAt``: not to be admitted before then (backoff after eviction).
    requeue_at: datetime | None
    #: (reason, message) of its ``QuotaReserved=False`` condition, if it has one.
    condition: tuple[str, str] | None
    #: The WorkloadPriorityClass its priority came from when ``spec.priority`` is unset.
    priority_class: str | None = None
    #: Why its pod templates cannot be counted (bad quantities, requests above limits), if so.
    invalid: str | None = None

    @property
    def order(self) -> tuple[int, datetime, str, str]:
        """Queue order: higher priority first, then older first, then by namespace/name."""
        return (-self.priority, self.created, self.key[0], self.key[1])

    def same_for_scheduling(self, other: PendingWorkload) -> bool:
        """Whether the scheduler would decide the same for both (only the condition differs)."""
        return (
            self.local_queue == other.local_queue
            and self.priority == other.priority
            and self.created == other.created
            and self.requeue_at == other.requeue_at
            and self.pod_sets == other.pod_sets
            and self.invalid == other.invalid
        )


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
    """


@dataclass(frozen=True)
class LocalQueueStatusView(QueueStatusView):
    """A LocalQueue's status: counts and usage of its own Workloads.

    Usage lists have the API's LocalQueue shape ``[{"name", "resources":
    [{"name", "total"}]}]`` over the flavors of its ClusterQueue (empty
    when that ClusterQueue does not exist).
    """


@dataclass
class ClusterQueueState:
    """The cache's view of one ClusterQueue: its spec, quota node and Active state.

    Read it, never change it: the cache keeps it current.
    """

    name: str
    obj: ClusterQueue
    groups: tuple[ResourceGroupView, ...]
    node: QuotaNode
    active: bool = False
    reason: str = ""
    message: str = ""

    @property
    def spec(self) -> ClusterQueueSpec:
        return self.obj.spec

    @property
    def strict_fifo(self) -> bool:
        return self.spec.queueing_strategy == QueueingStrategy.STRICT_FIFO

    def admission_checks_for(self, flavors: Iterable[str]) -> list[str]:
        """Names of the queue's admission checks that apply to Workloads assigned ``flavors``.

        A rule without ``onFlavors`` applies to every Workload.
        """
        assigned = set(flavors)
        strategy = self.spec.admission_checks_strategy
        names: list[str] = []
        for rule in strategy.admission_checks if strategy else ():
            if not rule.on_flavors or assigned.intersection(rule.on_flavors):
                names.append(rule.name)
        return names


@dataclass
class DirtyQueues:
    """What changed since the last cycle: ClusterQueues to re-evaluate, and LocalQueues whose Workloads to re-check."""

    cluster_queues: set[str] = field(default_factory=set)
    local_queues: set[LocalQueueKey] = field(default_factory=set)


def admission_usage(admission: Admission) -> dict[FlavorResource, Decimal]:
    """The quota an admission takes: each pod set's ``resourceUsage`` in its assigned flavor."""
    usage: dict[FlavorResource, Decimal] = {}
    for assignment in admission.pod_set_assignments or ():
        resource_usage = assignment.resource_usage or {}
        for resource, flavor in (assignment.flavors or {}).items():
            amount = Decimal(resource_usage.get(resource, ZERO))
            usage[(flavor, resource)] = usage.get((flavor, resource), ZERO) + amount
    return usage


# --- internal records ----------------------------------------------------------------


@dataclass(frozen=True)
class _Contribution:
    """The quota one Workload takes, recorded so it can be taken back exactly."""

    cluster_queue: str
    local_queue: LocalQueueKey
    usage: dict[FlavorResource, Decimal]
    admitted: bool


@dataclass
class _QueueStats:
    """Counters and usage of the Workloads holding quota in one queue."""

    reserving: int = 0
    admitted: int = 0
    reservation: dict[FlavorResource, Decimal] = field(default_factory=dict)
    admitted_usage: dict[FlavorResource, Decimal] = field(default_factory=dict)

    def apply(self, contribution: _Contribution, sign: int) -> None:
        self.reserving += sign
        _add_into(self.reservation, contribution.usage, sign)
        if contribution.admitted:
            self.admitted += sign
            _add_into(self.admitted_usage, contribution.usage, sign)


def _add_into(target: dict[FlavorResource, Decimal], usage: Mapping[FlavorResource, Decimal], sign: int) -> None:
    for fr, amount in usage.items():
        target[fr] = target.get(fr, ZERO) + amount * sign


def _older(candidate: str | None, current: str | None) -> bool:
    """Whether ``candidate`` is an older resourceVersion than ``current`` (False when not comparable)."""
    try:
        return int(candidate or "") < int(current or "")
    except ValueError:
        return False


def _holds_quota(workload: Workload) -> bool:
    return workload.status.admission is not None and workload.has_quota_reservation and not workload.is_finished


def _wants_quota(workload: Workload) -> bool:
    return workload.spec.active and not workload.is_finished and workload.metadata.deletion_timestamp is None


def _local_queue_of(workload: Workload) -> LocalQueueKey:
    return (workload.namespace or "", workload.spec.queue_name or "")


def _quota_reserved_condition(workload: Workload) -> tuple[str, str] | None:
    condition = workload.condition(WorkloadConditionType.QUOTA_RESERVED)
    if condition is None or condition.status != ConditionStatus.FALSE:
        return None
    return (condition.reason, condition.message)


def _read_pod_sets(workload: Workload) -> tuple[tuple[PodSetRequest, ...], str | None]:
    """The pod sets' requests, or why they cannot be read (upstream's resource validation message)."""
    errors: list[str] = []
    for index, pod_set in enumerate(workload.spec.pod_sets):
        errors.extend(pod_spec_errors(pod_spec_of(pod_set), f"spec.podSets[{index}].template.spec"))
    if errors:
        return (), messages.INVALID_RESOURCES.format(errors=messages.aggregate(errors))
    return tuple(PodSetRequest.from_pod_set(p) for p in workload.spec.pod_sets), None


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


# --- the cache ---------------------------------------------------------------------------


class Cache:
    """Flavors, queues, cohorts, priority classes, admission checks, namespaces and Workloads.

    Not thread-safe: feed it and run cycles from one thread (or one event
    loop task); the scheduler is synchronous and never yields mid-cycle.
    """

    def __init__(self) -> None:
        self._flavors: dict[str, ResourceFlavor] = {}
        self._cluster_queues: dict[str, ClusterQueueState] = {}
        self._cohorts: dict[str, Cohort] = {}
        self._cohort_nodes: dict[str, QuotaNode] = {}
        self._local_queues: dict[LocalQueueKey, LocalQueue] = {}
        self._local_queues_by_cq: dict[str, set[LocalQueueKey]] = {}
        self._priority_classes: dict[str, int] = {}
        self._admission_checks: dict[str, bool] = {}
        self._check_controllers: dict[str, str] = {}
        self._namespaces: dict[str, dict[str, str]] = {}
        self._workloads: dict[WorkloadKey, Workload] = {}
        self._pending: dict[WorkloadKey, PendingWorkload] = {}
        self._pending_by_lq: dict[LocalQueueKey, set[WorkloadKey]] = {}
        self._pending_lqs_by_namespace: dict[str, set[LocalQueueKey]] = {}
        self._pending_by_priority_class: dict[str, set[WorkloadKey]] = {}
        self._assumed: dict[WorkloadKey, Admission] = {}
        self._contributions: dict[WorkloadKey, _Contribution] = {}
        self._cq_stats: dict[str, _QueueStats] = {}
        self._lq_stats: dict[LocalQueueKey, _QueueStats] = {}
        self._cqs_by_flavor: dict[str, set[str]] = {}
        self._cqs_by_check: dict[str, set[str]] = {}
        self._backoff: list[tuple[datetime, WorkloadKey]] = []
        self._dirty = DirtyQueues()

    # --- ResourceFlavor --------------------------------------------------------------

    def upsert_flavor(self, flavor: ResourceFlavor) -> None:
        """Add or replace a ResourceFlavor; the queues using it are re-evaluated."""
        previous = self._flavors.get(flavor.name)
        self._flavors[flavor.name] = flavor
        if previous is None or previous.spec != flavor.spec:
            self._flavor_changed(flavor.name)

    def delete_flavor(self, name: str) -> None:
        """Forget a ResourceFlavor; the queues using it become inactive."""
        if self._flavors.pop(name, None) is not None:
            self._flavor_changed(name)

    def _flavor_changed(self, name: str) -> None:
        for cq_name in self._cqs_by_flavor.get(name, ()):
            self._refresh_cluster_queue_status(cq_name)
            self._mark_tree(cq_name)

    # --- ClusterQueue -------------------------------------------------------------------

    def upsert_cluster_queue(self, cluster_queue: ClusterQueue) -> None:
        """Add or replace a ClusterQueue (quota, cohort, strategy, checks, stop policy)."""
        name = cluster_queue.name
        state = self._cluster_queues.get(name)
        if state is not None and state.spec == cluster_queue.spec:
            state.obj = cluster_queue  # only metadata or status changed
            return
        old_root = root_of(state.node) if state is not None else None
        if state is None:
            stats = self._cq_stats.setdefault(name, _QueueStats())
            node = QuotaNode(name, is_cohort=False, usage=stats.reservation)  # a copy: usage held before it existed
            state = ClusterQueueState(name, cluster_queue, (), node)
            self._cluster_queues[name] = state
        else:
            self._unindex_cluster_queue(state)
            self._mark_tree(name)
        state.obj = cluster_queue
        state.groups = resource_groups_of(cluster_queue.spec)
        state.node.quotas = quotas_from_groups(cluster_queue.spec.resource_groups)
        old_cohort = state.node.parent
        cohort = self._cohort_node(cluster_queue.spec.cohort_name) if cluster_queue.spec.cohort_name else None
        state.node.set_parent(cohort)
        if old_cohort is not None and old_cohort is not cohort:
            self._prune_cohort(old_cohort.name)
        if old_root is not None and old_root is not root_of(state.node):
            refresh_tree(old_root)
            self._mark_leaves(old_root)
        refresh_tree(root_of(state.node))
        self._index_cluster_queue(state)
        self._refresh_cluster_queue_status(name)
        self._mark_tree(name)

    def delete_cluster_queue(self, name: str) -> None:
        """Forget a ClusterQueue; its pending Workloads become inadmissible, its cohort peers are re-evaluated.

        Usage of Workloads still admitted there is kept and counts again if
        the ClusterQueue comes back.
        """
        state = self._cluster_queues.pop(name, None)
        if state is None:
            return
        self._unindex_cluster_queue(state)
        cohort = state.node.parent
        state.node.set_parent(None)
        if cohort is not None:
            root = root_of(cohort)
            refresh_tree(root)
            self._mark_leaves(root)
            self._prune_cohort(cohort.name)
        self._dirty.cluster_queues.add(name)

    def _index_cluster_queue(self, state: ClusterQueueState) -> None:
        for flavor in self._flavor_names(state.spec):
            self._cqs_by_flavor.setdefault(flavor, set()).add(state.name)
        for check in self._check_names(state.spec):
            self._cqs_by_check.setdefault(check, set()).add(state.name)

    def _unindex_cluster_queue(self, state: ClusterQueueState) -> None:
        for flavor in self._flavor_names(state.spec):
            self._cqs_by_flavor.get(flavor, set()).discard(state.name)
        for check in self._check_names(state.spec):
            self._cqs_by_check.get(check, set()).discard(state.name)

    @staticmethod
    def _flavor_names(spec: ClusterQueueSpec) -> list[str]:
        names: list[str] = []
        for group in spec.resource_groups or ():
            for flavor in group.flavors:
                if flavor.name not in names:
                    names.append(flavor.name)
        return names

    @staticmethod
    def _check_names(spec: ClusterQueueSpec) -> list[str]:
        strategy = spec.admission_checks_strategy
        return [rule.name for rule in strategy.admission_checks] if strategy else []

    def _refresh_cluster_queue_status(self, name: str) -> None:
        """Recompute ``Active``, with upstream's reasons and messages (the first problem gives the reason)."""
        state = self._cluster_queues.get(name)
        if state is None:
            return
        reasons: list[str] = []
        details: list[str] = []
        if state.spec.stop_policy != StopPolicy.NONE:
            reasons.append(ClusterQueueReason.STOPPED)
            details.append(messages.CQ_STOPPED)
        missing_flavors = [f for f in self._flavor_names(state.spec) if f not in self._flavors]
        if missing_flavors:
            reasons.append(ClusterQueueReason.FLAVOR_NOT_FOUND)
            details.append(messages.CQ_MISSING_FLAVORS.format(names=",".join(missing_flavors)))
        checks = self._check_names(state.spec)
        missing_checks = [c for c in checks if c not in self._admission_checks]
        if missing_checks:
            reasons.append(ClusterQueueReason.ADMISSION_CHECK_NOT_FOUND)
            details.append(messages.CQ_MISSING_ADMISSION_CHECKS.format(names=",".join(missing_checks)))
        inactive_checks = [c for c in checks if self._admission_checks.get(c) is False]
        if inactive_checks:
            reasons.append(ClusterQueueReason.ADMISSION_CHECK_INACTIVE)
            details.append(messages.CQ_INACTIVE_ADMISSION_CHECKS.format(names=",".join(inactive_checks)))
        state.active = not reasons
        if state.active:
            state.reason, state.message = ClusterQueueReason.READY, messages.CQ_ACTIVE
        else:
            state.reason = reasons[0]
            state.message = messages.truncate(messages.CQ_INACTIVE.format(details=", ".join(details)))

    # --- Cohort ---------------------------------------------------------------------------

    def upsert_cohort(self, cohort: Cohort) -> None:
        """Add or replace a Cohort object (its own quota and parent)."""
        previous = self._cohorts.get(cohort.name)
        if previous is not None and previous.spec == cohort.spec:
            return
        self._cohorts[cohort.name] = cohort
        node = self._cohort_node(cohort.name)
        self._reshape_cohort(node, cohort)

    def delete_cohort(self, name: str) -> None:
        """Forget a Cohort object; ClusterQueues naming it still form an (implicit) cohort."""
        if self._cohorts.pop(name, None) is None:
            return
        node = self._cohort_nodes.get(name)
        if node is not None:
            self._reshape_cohort(node, None)
            self._prune_cohort(name)

    def _cohort_node(self, name: str) -> QuotaNode:
        """The node of a cohort, created (with its ancestors) on first reference."""
        node = self._cohort_nodes.get(name)
        if node is None:
            node = QuotaNode(name, is_cohort=True)
            self._cohort_nodes[name] = node
            cohort = self._cohorts.get(name)
            if cohort is not None:
                node.quotas = quotas_from_groups(cohort.spec.resource_groups)
                if cohort.spec.parent_name:
                    node.set_parent(self._cohort_node(cohort.spec.parent_name))
        return node

    def _reshape_cohort(self, node: QuotaNode, cohort: Cohort | None) -> None:
        """Apply a Cohort object's quota and parent to its node, then refresh the trees involved."""
        old_root = root_of(node)
        old_parent = node.parent
        node.quotas = quotas_from_groups(cohort.spec.resource_groups) if cohort else {}
        parent_name = cohort.spec.parent_name if cohort else None
        parent = self._cohort_node(parent_name) if parent_name else None
        if not node.set_parent(parent):
            node.set_parent(None)  # a parent that would make a cycle is ignored
        if old_parent is not None and old_parent is not node.parent:
            self._prune_cohort(old_parent.name)
        new_root = root_of(node)
        roots = [old_root] if old_root is new_root else [old_root, new_root]
        for root in roots:
            refresh_tree(root)
            self._mark_leaves(root)

    def _prune_cohort(self, name: str) -> None:
        """Drop an implicit cohort node nothing refers to any more."""
        node = self._cohort_nodes.get(name)
        if node is None or node.children or name in self._cohorts:
            return
        parent = node.parent
        node.set_parent(None)
        del self._cohort_nodes[name]
        if parent is not None:
            refresh_tree(root_of(parent))
            self._prune_cohort(parent.name)

    # --- LocalQueue ---------------------------------------------------------------------------

    def upsert_local_queue(self, local_queue: LocalQueue) -> None:
        """Add or replace a LocalQueue; its pending Workloads are re-checked."""
        key = (local_queue.namespace or "", local_queue.name)
        previous = self._local_queues.get(key)
        self._local_queues[key] = local_queue
        if previous is not None and previous.spec == local_queue.spec:
            return
        if previous is not None:
            self._unlink_local_queue(key, previous)
        cq_name = local_queue.spec.cluster_queue or ""
        self._local_queues_by_cq.setdefault(cq_name, set()).add(key)
        # The queue's Workloads join (or leave) the ClusterQueue: a StrictFIFO head may change.
        self._dirty.cluster_queues.add(cq_name)
        self._dirty.local_queues.add(key)

    def delete_local_queue(self, namespace: str, name: str) -> None:
        """Forget a LocalQueue; its pending Workloads become inadmissible."""
        key = (namespace, name)
        previous = self._local_queues.pop(key, None)
        if previous is not None:
            self._unlink_local_queue(key, previous)
            self._dirty.local_queues.add(key)

    def _unlink_local_queue(self, key: LocalQueueKey, previous: LocalQueue) -> None:
        cq_name = previous.spec.cluster_queue or ""
        self._local_queues_by_cq.get(cq_name, set()).discard(key)
        self._dirty.cluster_queues.add(cq_name)

    # --- WorkloadPriorityClass -----------------------------------------------------------------

    def upsert_priority_class(self, priority_class: WorkloadPriorityClass) -> None:
        """Add or replace a WorkloadPriorityClass; Workloads whose priority comes from it are re-ordered."""
        if self._priority_classes.get(priority_class.name) == priority_class.value:
            return
        self._priority_classes[priority_class.name] = priority_class.value
        self._priority_class_changed(priority_class.name)

    def delete_priority_class(self, name: str) -> None:
        """Forget a WorkloadPriorityClass (its Workloads without ``spec.priority`` get priority 0)."""
        if self._priority_classes.pop(name, None) is not None:
            self._priority_class_changed(name)

    def _priority_class_changed(self, name: str) -> None:
        for key in list(self._pending_by_priority_class.get(name, ())):
            self._sync_workload(key)

    # --- AdmissionCheck -------------------------------------------------------------------------

    def upsert_admission_check(self, check: AdmissionCheck) -> None:
        """Add or replace an AdmissionCheck; it is active when its ``Active`` condition is True."""
        active = is_condition_true(check.status.conditions, ACTIVE)
        self._check_controllers[check.name] = check.spec.controller_name or ""
        if self._admission_checks.get(check.name) is active:
            return
        self._admission_checks[check.name] = active
        self._check_changed(check.name)

    def delete_admission_check(self, name: str) -> None:
        """Forget an AdmissionCheck; the queues using it become inactive."""
        self._check_controllers.pop(name, None)
        if self._admission_checks.pop(name, None) is not None:
            self._check_changed(name)

    def _check_changed(self, name: str) -> None:
        for cq_name in self._cqs_by_check.get(name, ()):
            self._refresh_cluster_queue_status(cq_name)
            self._mark_tree(cq_name)

    # --- Namespace -------------------------------------------------------------------------------

    def upsert_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        """Add or replace a namespace's labels (what ClusterQueue ``namespaceSelector`` matches)."""
        new_labels = dict(labels or {})
        if self._namespaces.get(name) == new_labels:
            return
        self._namespaces[name] = new_labels
        self._dirty.local_queues.update(self._pending_lqs_by_namespace.get(name, ()))

    def delete_namespace(self, name: str) -> None:
        """Forget a namespace's labels."""
        if self._namespaces.pop(name, None) is not None:
            self._dirty.local_queues.update(self._pending_lqs_by_namespace.get(name, ()))

    # --- Workload -----------------------------------------------------------------------------------

    def upsert_workload(self, workload: Workload) -> None:
        """Add or replace a Workload as the watch reports it.

        The controller also stores what its own writes return, so a watch event
        can arrive after a newer copy is already here: an older resourceVersion
        never replaces a newer one (they are etcd revisions in practice).
        """
        key = (workload.namespace or "", workload.name)
        current = self._workloads.get(key)
        if current is not None and _older(workload.metadata.resource_version, current.metadata.resource_version):
            return
        self._workloads[key] = workload
        self._sync_workload(key)

    def delete_workload(self, key: WorkloadKey) -> None:
        """Forget a Workload; the quota it held (or was assumed to hold) is released."""
        if self._workloads.pop(key, None) is not None or key in self._assumed:
            self._assumed.pop(key, None)
            self._sync_workload(key)

    def assume(self, key: WorkloadKey, admission: Admission) -> None:
        """Count ``admission`` as the Workload's usage until the watch confirms it (or :meth:`forget`).

        Called by the scheduler for each admission it decides, so later
        decisions in the same cycle see the quota taken. It does not mark
        anything dirty: the cycle that assumes has already accounted for it.
        """
        workload = self._workloads.get(key)
        if workload is None:
            raise KeyError(f"workload {key[0]}/{key[1]} is not in the cache")
        if _holds_quota(workload):
            raise ValueError(f"workload {key[0]}/{key[1]} already holds quota")
        if not admission.cluster_queue:
            raise ValueError("admission.clusterQueue must be set")
        self._assumed[key] = admission
        self._sync_workload(key, quiet=True)

    def forget(self, key: WorkloadKey) -> None:
        """Drop an assumption whose write failed; the Workload is pending again and its quota freed."""
        if self._assumed.pop(key, None) is not None:
            self._sync_workload(key)

    def is_assumed(self, key: WorkloadKey) -> bool:
        """Whether the Workload's admission is assumed and not yet confirmed by the watch."""
        return key in self._assumed

    def _sync_workload(self, key: WorkloadKey, *, quiet: bool = False) -> None:
        """Derive the Workload's contribution and pending entry from its object and assumption, apply the change."""
        workload = self._workloads.get(key)
        reserved = workload.status.admission if workload is not None and _holds_quota(workload) else None
        contribution: _Contribution | None = None
        if workload is not None and reserved is not None:
            self._assumed.pop(key, None)  # the real admission replaces the assumption
            contribution = _Contribution(
                cluster_queue=reserved.cluster_queue or "",
                local_queue=_local_queue_of(workload),
                usage=admission_usage(reserved),
                admitted=workload.is_admitted,
            )
        elif workload is not None and key in self._assumed and _wants_quota(workload):
            admission = self._assumed[key]
            cq_name = admission.cluster_queue or ""
            state = self._cluster_queues.get(cq_name)
            flavors = {f for a in admission.pod_set_assignments or () for f in (a.flavors or {}).values()}
            checks = state.admission_checks_for(flavors) if state is not None else []
            contribution = _Contribution(cq_name, _local_queue_of(workload), admission_usage(admission), not checks)
        else:
            self._assumed.pop(key, None)
        self._set_contribution(key, contribution, quiet=quiet)

        pending: PendingWorkload | None = None
        if workload is not None and contribution is None and _wants_quota(workload):
            pending = self._pending_entry(key, workload)
        self._set_pending(key, pending, quiet=quiet)

    def _set_contribution(self, key: WorkloadKey, new: _Contribution | None, *, quiet: bool) -> None:
        old = self._contributions.get(key)
        if old == new:
            return
        same_quota = old is not None and new is not None and (old.cluster_queue, old.usage) == (
            new.cluster_queue,
            new.usage,
        )
        if old is not None:
            self._apply_contribution(old, -1, touch_quota=not same_quota)
            del self._contributions[key]
        if new is not None:
            self._apply_contribution(new, +1, touch_quota=not same_quota)
            self._contributions[key] = new
        if not same_quota and not quiet:
            for contribution in (old, new):
                if contribution is not None:
                    self._mark_tree(contribution.cluster_queue)

    def _apply_contribution(self, contribution: _Contribution, sign: int, *, touch_quota: bool) -> None:
        """Add (``sign=+1``) or take back (``-1``) a Workload's quota in the counters and the quota tree."""
        self._cq_stats.setdefault(contribution.cluster_queue, _QueueStats()).apply(contribution, sign)
        self._lq_stats.setdefault(contribution.local_queue, _QueueStats()).apply(contribution, sign)
        state = self._cluster_queues.get(contribution.cluster_queue)
        if not touch_quota or state is None:
            return
        for fr, amount in contribution.usage.items():
            if sign > 0:
                add_usage(state.node, fr, amount)
            else:
                remove_usage(state.node, fr, amount)

    def _pending_entry(self, key: WorkloadKey, workload: Workload) -> PendingWorkload:
        previous = self._pending.get(key)
        if previous is not None and previous.workload.spec.pod_sets == workload.spec.pod_sets:
            pod_sets, invalid = previous.pod_sets, previous.invalid
        else:
            pod_sets, invalid = _read_pod_sets(workload)
        priority, priority_class = self._priority_of(workload)
        requeue_state = workload.status.requeue_state
        return PendingWorkload(
            key=key,
            workload=workload,
            local_queue=_local_queue_of(workload),
            priority=priority,
            created=workload.metadata.creation_timestamp or _EPOCH,
            pod_sets=pod_sets,
            requeue_at=requeue_state.requeue_at if requeue_state is not None else None,
            condition=_quota_reserved_condition(workload),
            priority_class=priority_class,
            invalid=invalid,
        )

    def _priority_of(self, workload: Workload) -> tuple[int, str | None]:
        """``spec.priority``; else the value of its WorkloadPriorityClass (reference or label); else 0."""
        if workload.spec.priority is not None:
            return workload.spec.priority, None
        ref = workload.spec.priority_class_ref
        name: str | None = None
        if ref is not None and ref.kind == PriorityClassKind.WORKLOAD_PRIORITY_CLASS:
            name = ref.name
        elif workload.metadata.labels and Labels.PRIORITY_CLASS in workload.metadata.labels:
            name = workload.metadata.labels[Labels.PRIORITY_CLASS]
        if name is None:
            return 0, None
        return self._priority_classes.get(name, 0), name

    def _set_pending(self, key: WorkloadKey, new: PendingWorkload | None, *, quiet: bool) -> None:
        old = self._pending.get(key)
        if old is None and new is None:
            return
        if old is not None:
            self._unindex_pending(old)
        if new is not None:
            self._index_pending(new)
            if new.requeue_at is not None and (old is None or old.requeue_at != new.requeue_at):
                heapq.heappush(self._backoff, (new.requeue_at, new.key))
        changed = old is None or new is None or not old.same_for_scheduling(new)
        if changed and not quiet:
            for entry in (old, new):
                if entry is not None:
                    self._dirty.local_queues.add(entry.local_queue)

    def _index_pending(self, entry: PendingWorkload) -> None:
        self._pending[entry.key] = entry
        self._pending_by_lq.setdefault(entry.local_queue, set()).add(entry.key)
        self._pending_lqs_by_namespace.setdefault(entry.local_queue[0], set()).add(entry.local_queue)
        if entry.priority_class is not None:
            self._pending_by_priority_class.setdefault(entry.priority_class, set()).add(entry.key)

    def _unindex_pending(self, entry: PendingWorkload) -> None:
        del self._pending[entry.key]
        in_queue = self._pending_by_lq.get(entry.local_queue)
        if in_queue is not None:
            in_queue.discard(entry.key)
            if not in_queue:
                del self._pending_by_lq[entry.local_queue]
                lqs = self._pending_lqs_by_namespace.get(entry.local_queue[0])
                if lqs is not None:
                    lqs.discard(entry.local_queue)
                    if not lqs:
                        del self._pending_lqs_by_namespace[entry.local_queue[0]]
        if entry.priority_class is not None:
            keys = self._pending_by_priority_class.get(entry.priority_class)
            if keys is not None:
                keys.discard(entry.key)
                if not keys:
                    del self._pending_by_priority_class[entry.priority_class]

    # --- dirty tracking ------------------------------------------------------------------------

    def _mark_tree(self, cq_name: str) -> None:
        """Mark a ClusterQueue and every ClusterQueue sharing its cohort tree."""
        self._dirty.cluster_queues.add(cq_name)
        state = self._cluster_queues.get(cq_name)
        if state is not None and state.node.parent is not None:
            self._mark_leaves(root_of(state.node))

    def _mark_leaves(self, node: QuotaNode) -> None:
        self._dirty.cluster_queues.update(leaf.name for leaf in leaves(node))

    # --- queries for the I/O layer ---------------------------------------------------------------

    def workload(self, key: WorkloadKey) -> Workload | None:
        """The Workload as last upserted, or ``None``."""
        return self._workloads.get(key)

    def cluster_queue(self, name: str) -> ClusterQueue | None:
        """The ClusterQueue as last upserted, or ``None``."""
        state = self._cluster_queues.get(name)
        return state.obj if state is not None else None

    def cluster_queue_names(self) -> list[str]:
        """Names of every ClusterQueue in the cache, sorted."""
        return sorted(self._cluster_queues)

    def local_queue(self, namespace: str, name: str) -> LocalQueue | None:
        """The LocalQueue as last upserted, or ``None``."""
        return self._local_queues.get((namespace, name))

    def local_queue_keys(self) -> list[LocalQueueKey]:
        """(namespace, name) of every LocalQueue in the cache, sorted."""
        return sorted(self._local_queues)

    def usage(self, cq_name: str) -> dict[FlavorResource, Decimal]:
        """Quota held in the ClusterQueue (admitted, reserving and assumed Workloads), non-zero entries only."""
        stats = self._cq_stats.get(cq_name)
        if stats is None:
            return {}
        return {fr: amount for fr, amount in stats.reservation.items() if amount != 0}

    def cluster_queue_status(self, name: str) -> ClusterQueueStatusView | None:
        """The status to write for a ClusterQueue, or ``None`` if it is not in the cache."""
        state = self._cluster_queues.get(name)
        if state is None:
            return None
        stats = self._cq_stats.get(name, _QueueStats())
        pending = sum(len(self._pending_by_lq.get(lq, ())) for lq in self._local_queues_by_cq.get(name, ()))
        return ClusterQueueStatusView(
            active=state.active,
            reason=state.reason,
            message=state.message,
            pending_workloads=pending,
            reserving_workloads=stats.reserving,
            admitted_workloads=stats.admitted,
            flavors_reservation=_usage_list(state.spec, stats.reservation, with_borrowed=True),
            flavors_usage=_usage_list(state.spec, stats.admitted_usage, with_borrowed=True),
        )

    def local_queue_status(self, namespace: str, name: str) -> LocalQueueStatusView | None:
        """The status to write for a LocalQueue, or ``None`` if it is not in the cache."""
        key = (namespace, name)
        local_queue = self._local_queues.get(key)
        if local_queue is None:
            return None
        state = self._cluster_queues.get(local_queue.spec.cluster_queue or "")
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
        stats = self._lq_stats.get(key, _QueueStats())
        return LocalQueueStatusView(
            active=active,
            reason=reason,
            message=message,
            pending_workloads=len(self._pending_by_lq.get(key, ())),
            reserving_workloads=stats.reserving,
            admitted_workloads=stats.admitted,
            flavors_reservation=_usage_list(state.spec, stats.reservation, with_borrowed=False) if state else [],
            flavors_usage=_usage_list(state.spec, stats.admitted_usage, with_borrowed=False) if state else [],
        )

    # --- the scheduler's view ---------------------------------------------------------------------

    def take_dirty(self, now: datetime) -> DirtyQueues:
        """What changed since the last call (backoffs that ended by ``now`` included); resets the record."""
        while self._backoff and self._backoff[0][0] <= now:
            requeue_at, key = heapq.heappop(self._backoff)
            entry = self._pending.get(key)
            if entry is not None and entry.requeue_at == requeue_at:
                self._dirty.local_queues.add(entry.local_queue)
        dirty, self._dirty = self._dirty, DirtyQueues()
        return dirty

    def next_requeue_at(self) -> datetime | None:
        """When the earliest requeue backoff of a pending Workload ends (not yet handled by :meth:`take_dirty`)."""
        while self._backoff:
            requeue_at, key = self._backoff[0]
            entry = self._pending.get(key)
            if entry is not None and entry.requeue_at == requeue_at:
                return requeue_at
            heapq.heappop(self._backoff)  # stale: the Workload changed or left the queue
        return None

    def cluster_queue_state(self, name: str) -> ClusterQueueState | None:
        """The ClusterQueue's spec, quota node and Active state, or ``None``."""
        return self._cluster_queues.get(name)

    def local_queues_of(self, cq_name: str) -> list[LocalQueueKey]:
        """Existing LocalQueues pointing at the ClusterQueue, sorted."""
        return sorted(self._local_queues_by_cq.get(cq_name, ()))

    def pending_in_local_queue(self, key: LocalQueueKey) -> list[PendingWorkload]:
        """Pending Workloads naming this LocalQueue (which may not exist), in queue order."""
        entries = [self._pending[k] for k in self._pending_by_lq.get(key, ())]
        entries.sort(key=lambda e: e.order)
        return entries

    def workloads_items(self) -> list[tuple[WorkloadKey, Workload]]:
        """Every Workload in the cache (a snapshot list, safe to iterate while the cache changes)."""
        return list(self._workloads.items())

    def priority_class_value(self, name: str) -> int | None:
        """The value of a WorkloadPriorityClass, or None when it is unknown."""
        return self._priority_classes.get(name)

    def admission_check_controller(self, name: str) -> str | None:
        """``spec.controllerName`` of an AdmissionCheck, or None when it is unknown."""
        return self._check_controllers.get(name)

    @property
    def flavors(self) -> Mapping[str, ResourceFlavor]:
        """ResourceFlavors by name (read-only view)."""
        return self._flavors

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """A namespace's labels ({} when unknown)."""
        return self._namespaces.get(namespace, {})

    def cohort_root(self, cq_name: str) -> str:
        """A name identifying the ClusterQueue's quota tree (the queue itself without a cohort)."""
        state = self._cluster_queues.get(cq_name)
        if state is None or state.node.parent is None:
            return f"clusterqueue/{cq_name}"
        return f"cohort/{root_of(state.node).name}"
