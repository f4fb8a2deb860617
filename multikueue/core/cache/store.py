"""The object store: the parsed API objects the cache was fed, by key, and their lookups.

It holds what the watches report (flavors, ClusterQueues, Cohorts,
LocalQueues, priority classes, AdmissionChecks, namespace labels and
Workloads) and the indexes that answer "which ClusterQueues use this flavor
or check" and "which LocalQueues point at this ClusterQueue".

It is kept apart from the quota tree, the pending queues and the status
views because it derives nothing from Workloads: it only keeps objects and
the one thing that follows from references between them, a ClusterQueue's
``Active`` state (its flavors and admission checks exist and are active).
Its mutators say what changed (a bool, or the ClusterQueues affected) so
that the :class:`~multikueue.core.cache.Cache` facade decides what to
re-evaluate; the store itself never marks anything dirty.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from multikueue.api.admissioncheck import AdmissionCheck
from multikueue.api.clusterqueue import ClusterQueue, ClusterQueueSpec, QueueingStrategy, StopPolicy
from multikueue.api.cohort import Cohort
from multikueue.api.constants import ACTIVE, ClusterQueueReason
from multikueue.api.localqueue import LocalQueue
from multikueue.api.meta import is_condition_true, version_number
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import Workload
from multikueue.api.workloadpriorityclass import WorkloadPriorityClass
from multikueue.core import messages
from multikueue.core.flavors import ResourceGroupView, resource_groups_of
from multikueue.core.quota import QuotaNode

__all__ = [
    "ClusterQueueState",
    "LocalQueueKey",
    "ObjectStore",
    "WorkloadKey",
    "local_queue_of",
]

#: (namespace, name) of a Workload.
WorkloadKey = tuple[str, str]
#: (namespace, name) of a LocalQueue.
LocalQueueKey = tuple[str, str]

_NO_LOCAL_QUEUES: frozenset[LocalQueueKey] = frozenset()


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


def local_queue_of(workload: Workload) -> LocalQueueKey:
    """The LocalQueue a Workload names (which may not exist)."""
    return (workload.namespace or "", workload.spec.queue_name or "")


def _flavor_names(spec: ClusterQueueSpec) -> list[str]:
    """The flavors a ClusterQueue's ``resourceGroups`` name, each once, in spec order."""
    names: list[str] = []
    for group in spec.resource_groups or ():
        for flavor in group.flavors:
            if flavor.name not in names:
                names.append(flavor.name)
    return names


def _check_names(spec: ClusterQueueSpec) -> list[str]:
    strategy = spec.admission_checks_strategy
    return [rule.name for rule in strategy.admission_checks] if strategy else []


def _older(candidate: str | None, current: str | None) -> bool:
    """Whether ``candidate`` is an older resourceVersion than ``current`` (False when not comparable)."""
    older, newer = version_number(candidate), version_number(current)
    return older is not None and newer is not None and older < newer


class ObjectStore:
    """The objects by key, with the reverse indexes the cache's events need."""

    def __init__(self) -> None:
        self._flavors: dict[str, ResourceFlavor] = {}
        self._cluster_queues: dict[str, ClusterQueueState] = {}
        self._cohorts: dict[str, Cohort] = {}
        self._local_queues: dict[LocalQueueKey, LocalQueue] = {}
        self._local_queues_by_cq: dict[str, set[LocalQueueKey]] = {}
        self._local_queues_sorted: dict[str, tuple[LocalQueueKey, ...]] = {}
        self._priority_classes: dict[str, int] = {}
        #: scheduling.k8s.io PriorityClasses: name -> (value, globalDefault).
        self._pod_priority_classes: dict[str, tuple[int, bool]] = {}
        self._admission_checks: dict[str, bool] = {}
        self._check_controllers: dict[str, str] = {}
        self._namespaces: dict[str, dict[str, str]] = {}
        self._workloads: dict[WorkloadKey, Workload] = {}
        self._cqs_by_flavor: dict[str, set[str]] = {}
        self._cqs_by_check: dict[str, set[str]] = {}

    # --- read-only maps (what the other parts of the cache are built on) ------------------

    @property
    def flavors(self) -> Mapping[str, ResourceFlavor]:
        """ResourceFlavors by name (read-only view)."""
        return self._flavors

    @property
    def cohorts(self) -> Mapping[str, Cohort]:
        """Cohort objects by name (read-only view; cohorts only named by ClusterQueues are not here)."""
        return self._cohorts

    @property
    def priority_classes(self) -> Mapping[str, int]:
        """WorkloadPriorityClass values by name (read-only view)."""
        return self._priority_classes

    # --- ResourceFlavor ------------------------------------------------------------------

    def put_flavor(self, flavor: ResourceFlavor) -> list[str]:
        """Store a flavor; returns the ClusterQueues using it when its spec changed (their Active is refreshed)."""
        previous = self._flavors.get(flavor.name)
        self._flavors[flavor.name] = flavor
        if previous is not None and previous.spec == flavor.spec:
            return []
        return self._refresh_users(self._cqs_by_flavor, flavor.name)

    def remove_flavor(self, name: str) -> list[str]:
        """Forget a flavor; returns the ClusterQueues using it (their Active is refreshed)."""
        if self._flavors.pop(name, None) is None:
            return []
        return self._refresh_users(self._cqs_by_flavor, name)

    # --- AdmissionCheck -------------------------------------------------------------------

    def put_admission_check(self, check: AdmissionCheck) -> list[str]:
        """Store a check; returns the ClusterQueues using it when its activity changed (Active refreshed)."""
        active = is_condition_true(check.status.conditions, ACTIVE)
        self._check_controllers[check.name] = check.spec.controller_name or ""
        if self._admission_checks.get(check.name) is active:
            return []
        self._admission_checks[check.name] = active
        return self._refresh_users(self._cqs_by_check, check.name)

    def remove_admission_check(self, name: str) -> list[str]:
        """Forget a check; returns the ClusterQueues using it (their Active is refreshed)."""
        self._check_controllers.pop(name, None)
        if self._admission_checks.pop(name, None) is None:
            return []
        return self._refresh_users(self._cqs_by_check, name)

    def admission_check_controller(self, name: str) -> str | None:
        """``spec.controllerName`` of an AdmissionCheck, or None when it is unknown."""
        return self._check_controllers.get(name)

    def _refresh_users(self, index: Mapping[str, set[str]], name: str) -> list[str]:
        users = list(index.get(name, ()))
        for cq_name in users:
            state = self._cluster_queues.get(cq_name)
            if state is not None:
                self._refresh_active(state)
        return users

    # --- ClusterQueue ---------------------------------------------------------------------

    def keep_if_same_spec(self, cluster_queue: ClusterQueue) -> bool:
        """When the ClusterQueue is stored with this spec, keep the new object (metadata or status changed)."""
        state = self._cluster_queues.get(cluster_queue.name)
        if state is None or state.spec != cluster_queue.spec:
            return False
        state.obj = cluster_queue
        return True

    def put_cluster_queue(self, cluster_queue: ClusterQueue, node: QuotaNode) -> ClusterQueueState:
        """Store a ClusterQueue with its quota node, re-index it and recompute its Active state."""
        state = self._cluster_queues.get(cluster_queue.name)
        if state is None:
            state = ClusterQueueState(cluster_queue.name, cluster_queue, (), node)
            self._cluster_queues[cluster_queue.name] = state
        else:
            self._unindex_cluster_queue(state)
        state.obj = cluster_queue
        state.node = node
        state.groups = resource_groups_of(cluster_queue.spec)
        self._index_cluster_queue(state)
        self._refresh_active(state)
        return state

    def remove_cluster_queue(self, name: str) -> bool:
        """Forget a ClusterQueue; whether it was stored."""
        state = self._cluster_queues.pop(name, None)
        if state is None:
            return False
        self._unindex_cluster_queue(state)
        return True

    def cluster_queue_state(self, name: str) -> ClusterQueueState | None:
        return self._cluster_queues.get(name)

    def cluster_queue_names(self) -> list[str]:
        return sorted(self._cluster_queues)

    def _index_cluster_queue(self, state: ClusterQueueState) -> None:
        for flavor in _flavor_names(state.spec):
            self._cqs_by_flavor.setdefault(flavor, set()).add(state.name)
        for check in _check_names(state.spec):
            self._cqs_by_check.setdefault(check, set()).add(state.name)

    def _unindex_cluster_queue(self, state: ClusterQueueState) -> None:
        for flavor in _flavor_names(state.spec):
            self._cqs_by_flavor.get(flavor, set()).discard(state.name)
        for check in _check_names(state.spec):
            self._cqs_by_check.get(check, set()).discard(state.name)

    def _refresh_active(self, state: ClusterQueueState) -> None:
        """Recompute ``Active``, with upstream's reasons and messages (the first problem gives the reason)."""
        reasons: list[str] = []
        details: list[str] = []
        if state.spec.stop_policy != StopPolicy.NONE:
            reasons.append(ClusterQueueReason.STOPPED)
            details.append(messages.CQ_STOPPED)
        missing_flavors = [f for f in _flavor_names(state.spec) if f not in self._flavors]
        if missing_flavors:
            reasons.append(ClusterQueueReason.FLAVOR_NOT_FOUND)
            details.append(messages.CQ_MISSING_FLAVORS.format(names=",".join(missing_flavors)))
        checks = _check_names(state.spec)
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

    # --- Cohort ------------------------------------------------------------------------------

    def put_cohort(self, cohort: Cohort) -> bool:
        """Store a Cohort object; whether its spec changed (a new one counts as changed)."""
        previous = self._cohorts.get(cohort.name)
        if previous is not None and previous.spec == cohort.spec:
            return False
        self._cohorts[cohort.name] = cohort
        return True

    def remove_cohort(self, name: str) -> bool:
        """Forget a Cohort object; whether it was stored."""
        return self._cohorts.pop(name, None) is not None

    # --- LocalQueue ---------------------------------------------------------------------------

    def put_local_queue(self, local_queue: LocalQueue) -> tuple[str, ...]:
        """Store a LocalQueue; the ClusterQueues it left or joined (empty when its spec did not change)."""
        key = (local_queue.namespace or "", local_queue.name)
        previous = self._local_queues.get(key)
        self._local_queues[key] = local_queue
        if previous is not None and previous.spec == local_queue.spec:
            return ()
        left = self._unlink_local_queue(key, previous) if previous is not None else ()
        cq_name = local_queue.spec.cluster_queue or ""
        self._local_queues_by_cq.setdefault(cq_name, set()).add(key)
        self._local_queues_sorted.pop(cq_name, None)
        return (*left, cq_name)

    def remove_local_queue(self, key: LocalQueueKey) -> tuple[str, ...]:
        """Forget a LocalQueue; the ClusterQueue it left (empty when it was not stored)."""
        previous = self._local_queues.pop(key, None)
        return self._unlink_local_queue(key, previous) if previous is not None else ()

    def _unlink_local_queue(self, key: LocalQueueKey, previous: LocalQueue) -> tuple[str]:
        cq_name = previous.spec.cluster_queue or ""
        self._local_queues_by_cq.get(cq_name, set()).discard(key)
        self._local_queues_sorted.pop(cq_name, None)
        return (cq_name,)

    def local_queue(self, key: LocalQueueKey) -> LocalQueue | None:
        return self._local_queues.get(key)

    def local_queue_keys(self) -> list[LocalQueueKey]:
        return sorted(self._local_queues)

    def local_queues_in(self, cq_name: str) -> Collection[LocalQueueKey]:
        """The stored LocalQueues pointing at a ClusterQueue, unordered (do not change it)."""
        return self._local_queues_by_cq.get(cq_name, _NO_LOCAL_QUEUES)

    def local_queues_sorted(self, cq_name: str) -> tuple[LocalQueueKey, ...]:
        """:meth:`local_queues_in`, sorted; kept until a LocalQueue joins or leaves the ClusterQueue (a cycle
        asks for every ClusterQueue it looks at, a thousand a second with upstream's large-scale generator)."""
        found = self._local_queues_sorted.get(cq_name)
        if found is None:
            found = self._local_queues_sorted[cq_name] = tuple(sorted(self.local_queues_in(cq_name)))
        return found

    # --- WorkloadPriorityClass -----------------------------------------------------------------

    def put_priority_class(self, priority_class: WorkloadPriorityClass) -> bool:
        """Store a priority class's value; whether it changed."""
        if self._priority_classes.get(priority_class.name) == priority_class.value:
            return False
        self._priority_classes[priority_class.name] = priority_class.value
        return True

    def remove_priority_class(self, name: str) -> bool:
        """Forget a priority class; whether it was stored."""
        return self._priority_classes.pop(name, None) is not None

    # --- PriorityClass (scheduling.k8s.io) ---------------------------------------------------------

    def put_pod_priority_class(self, name: str, value: int, global_default: bool) -> None:
        self._pod_priority_classes[name] = (value, global_default)

    def remove_pod_priority_class(self, name: str) -> None:
        self._pod_priority_classes.pop(name, None)

    def pod_priority_class_value(self, name: str) -> int | None:
        entry = self._pod_priority_classes.get(name)
        return entry[0] if entry is not None else None

    def default_pod_priority_class(self) -> str | None:
        """The ``globalDefault`` PriorityClass (the highest value if several claim it, as the admission plugin does)."""
        defaults = [(value, name) for name, (value, default) in self._pod_priority_classes.items() if default]
        return max(defaults)[1] if defaults else None

    # --- Namespace -------------------------------------------------------------------------------

    def put_namespace(self, name: str, labels: Mapping[str, str] | None) -> bool:
        """Store a namespace's labels; whether they changed."""
        new_labels = dict(labels or {})
        if self._namespaces.get(name) == new_labels:
            return False
        self._namespaces[name] = new_labels
        return True

    def remove_namespace(self, name: str) -> bool:
        """Forget a namespace's labels; whether it was stored."""
        return self._namespaces.pop(name, None) is not None

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """A namespace's labels ({} when unknown)."""
        return self._namespaces.get(namespace, {})

    # --- Workload -----------------------------------------------------------------------------------

    def put_workload(self, workload: Workload) -> WorkloadKey | None:
        """Store a Workload unless the stored copy has a newer resourceVersion; its key, or None when ignored.

        The store takes the object as it is (no copy) and drops its
        ``metadata.managedFields`` in place: kept for the Workload's whole
        life they were about half of its memory, nothing here reads them,
        and a write that omits them leaves the server's untouched.
        """
        key = (workload.namespace or "", workload.name)
        current = self._workloads.get(key)
        if current is not None and _older(workload.metadata.resource_version, current.metadata.resource_version):
            return None
        extra = workload.metadata.model_extra
        if extra:
            extra.pop("managedFields", None)
        self._workloads[key] = workload
        return key

    def remove_workload(self, key: WorkloadKey) -> bool:
        """Forget a Workload; whether it was stored."""
        return self._workloads.pop(key, None) is not None

    def workload(self, key: WorkloadKey) -> Workload | None:
        return self._workloads.get(key)

    def workloads_items(self) -> list[tuple[WorkloadKey, Workload]]:
        """Every Workload (a snapshot list, safe to iterate while the store changes)."""
        return list(self._workloads.items())
