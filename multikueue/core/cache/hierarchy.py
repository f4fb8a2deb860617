"""The quota tree: ClusterQueues and cohorts as quota nodes, and the quota each Workload holds.

ClusterQueues are the leaves; cohorts, named by ``spec.cohortName`` or
given by Cohort objects (own quota, ``parentName``), are the inner nodes
(:mod:`multikueue.core.quota` does the arithmetic on them). Next to the
tree it keeps every Workload's *contribution* (the quota its admission or
assumed admission takes) so that a change is applied as "take back the old,
add the new" in O(pod sets + cohort depth), and the per-queue counters the
status views report.

It is separate from the object store because it is derived state with its
own invariants (usage propagated up the tree, trees re-shaped when cohorts
or ClusterQueues move), and from the pending queues because quota concerns
only the Workloads that hold it. Its mutators return the ClusterQueues
whose quota changed; the :class:`~multikueue.core.cache.Cache` facade marks
them for the next scheduling cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from multikueue.api.clusterqueue import ClusterQueueSpec
from multikueue.api.cohort import Cohort
from multikueue.api.quota import FairSharing
from multikueue.api.workload import Admission
from multikueue.core.cache.store import LocalQueueKey, WorkloadKey
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

__all__ = ["Contribution", "QueueStats", "QuotaTree", "admission_usage"]


def admission_usage(admission: Admission) -> dict[FlavorResource, Decimal]:
    """The quota an admission takes: each pod set's ``resourceUsage`` in its assigned flavor."""
    usage: dict[FlavorResource, Decimal] = {}
    for assignment in admission.pod_set_assignments or ():
        resource_usage = assignment.resource_usage or {}
        for resource, flavor in (assignment.flavors or {}).items():
            amount = Decimal(resource_usage.get(resource, ZERO))
            usage[(flavor, resource)] = usage.get((flavor, resource), ZERO) + amount
    return usage


@dataclass(frozen=True)
class Contribution:
    """The quota one Workload takes, recorded so it can be taken back exactly."""

    cluster_queue: str
    local_queue: LocalQueueKey
    usage: dict[FlavorResource, Decimal]
    admitted: bool


@dataclass
class QueueStats:
    """Counters and usage of the Workloads holding quota in one queue.

    ``version`` grows with every change, so a reader can tell the same
    object changed in place (the status views are memoized on it).
    """

    reserving: int = 0
    admitted: int = 0
    reservation: dict[FlavorResource, Decimal] = field(default_factory=dict)
    admitted_usage: dict[FlavorResource, Decimal] = field(default_factory=dict)
    version: int = 0

    def apply(self, contribution: Contribution, sign: int) -> None:
        """Count (``sign=+1``) or uncount (``-1``) one Workload's contribution."""
        self.version += 1
        self.reserving += sign
        _add_into(self.reservation, contribution.usage, sign)
        if contribution.admitted:
            self.admitted += sign
            _add_into(self.admitted_usage, contribution.usage, sign)


def _add_into(target: dict[FlavorResource, Decimal], usage: Mapping[FlavorResource, Decimal], sign: int) -> None:
    for fr, amount in usage.items():
        target[fr] = target.get(fr, ZERO) + amount * sign


def fair_weight(fair_sharing: FairSharing | None) -> Decimal:
    """A ClusterQueue's or Cohort's ``fairSharing.weight``; 1 when unset (upstream's ``parseFairWeight``)."""
    if fair_sharing is None:
        return Decimal(1)
    return Decimal(fair_sharing.weight)


def _leaf_names(node: QuotaNode) -> set[str]:
    return {leaf.name for leaf in leaves(node)}


class QuotaTree:
    """The cohort forest, the ClusterQueues' quota nodes, and the usage Workloads put in them.

    ``cohorts`` is the store's read-only map of Cohort objects: it gives a
    cohort node its own quota and parent when the node is first needed.
    """

    def __init__(self, cohorts: Mapping[str, Cohort]) -> None:
        self._cohorts = cohorts
        self._leaves: dict[str, QuotaNode] = {}
        self._cohort_nodes: dict[str, QuotaNode] = {}
        self._contributions: dict[WorkloadKey, Contribution] = {}
        #: ClusterQueue -> the Workloads holding quota in it (the index of ``_contributions``).
        self._holders: dict[str, set[WorkloadKey]] = {}
        self._cq_stats: dict[str, QueueStats] = {}
        self._lq_stats: dict[LocalQueueKey, QueueStats] = {}
        #: Grows whenever quotas, weights or the shape of any tree change (what a share depends on besides usage;
        #: see :meth:`_refresh`).
        self.shape_version = 0
        #: Root cohort name -> the names of its tree's ClusterQueues (see :meth:`tree_of`); emptied on every
        #: change of shape, which is what can make an entry stale, so a deleted cohort's does not outlive it.
        self._tree_names: dict[str, frozenset[str]] = {}

    # --- shape: ClusterQueues -------------------------------------------------------------

    def put_cluster_queue(self, name: str, spec: ClusterQueueSpec) -> tuple[QuotaNode, set[str]]:
        """Give a ClusterQueue its quota and cohort; its node, and the ClusterQueues of the trees involved.

        A new node starts with the usage Workloads already hold there (they
        may have been admitted before the ClusterQueue was known).
        """
        affected: set[str] = set()
        node = self._leaves.get(name)
        old_root = root_of(node) if node is not None else None
        if node is None:
            stats = self._cq_stats.setdefault(name, QueueStats())
            node = QuotaNode(name, is_cohort=False, usage=stats.reservation)  # a copy: usage held before it existed
            self._leaves[name] = node
        else:
            affected |= self.tree_of(name)
        node.quotas = quotas_from_groups(spec.resource_groups)
        node.weight = fair_weight(spec.fair_sharing)
        old_cohort = node.parent
        node.set_parent(self._cohort_node(spec.cohort_name) if spec.cohort_name else None)
        if old_cohort is not None and old_cohort is not node.parent:
            self._prune_cohort(old_cohort.name)
        if old_root is not None and old_root is not root_of(node):
            self._refresh(old_root)
            affected |= _leaf_names(old_root)
        self._refresh(root_of(node))
        affected |= self.tree_of(name)
        return node, affected

    def remove_cluster_queue(self, name: str) -> set[str]:
        """Drop a ClusterQueue's node (its Workloads' usage is kept); it and its former cohort peers."""
        affected = {name}
        node = self._leaves.pop(name, None)
        if node is None:
            return affected
        cohort = node.parent
        node.set_parent(None)
        if cohort is not None:
            root = root_of(cohort)
            self._refresh(root)
            affected |= _leaf_names(root)
            self._prune_cohort(cohort.name)
        return affected

    # --- shape: cohorts ---------------------------------------------------------------------

    def reshape_cohort(self, name: str) -> set[str]:
        """Apply the (new or changed) Cohort object ``name``; the ClusterQueues of the trees involved."""
        return self._reshape(self._cohort_node(name), self._cohorts.get(name))

    def remove_cohort(self, name: str) -> set[str]:
        """The Cohort object is gone: its node keeps only what ClusterQueues give it; the ClusterQueues involved."""
        node = self._cohort_nodes.get(name)
        if node is None:
            return set()
        affected = self._reshape(node, None)
        self._prune_cohort(name)
        return affected

    def _cohort_node(self, name: str) -> QuotaNode:
        """The node of a cohort, created (with its ancestors) on first reference."""
        node = self._cohort_nodes.get(name)
        if node is None:
            node = QuotaNode(name, is_cohort=True)
            self._cohort_nodes[name] = node
            cohort = self._cohorts.get(name)
            if cohort is not None:
                node.quotas = quotas_from_groups(cohort.spec.resource_groups)
                node.weight = fair_weight(cohort.spec.fair_sharing)
                if cohort.spec.parent_name:
                    node.set_parent(self._cohort_node(cohort.spec.parent_name))
        return node

    def _reshape(self, node: QuotaNode, cohort: Cohort | None) -> set[str]:
        """Apply a Cohort object's quota and parent to its node, then refresh the trees involved."""
        old_root = root_of(node)
        old_parent = node.parent
        node.quotas = quotas_from_groups(cohort.spec.resource_groups) if cohort else {}
        node.weight = fair_weight(cohort.spec.fair_sharing if cohort else None)
        parent_name = cohort.spec.parent_name if cohort else None
        parent = self._cohort_node(parent_name) if parent_name else None
        if not node.set_parent(parent):
            node.set_parent(None)  # a parent that would make a cycle is ignored
        if old_parent is not None and old_parent is not node.parent:
            self._prune_cohort(old_parent.name)
        new_root = root_of(node)
        affected: set[str] = set()
        for root in [old_root] if old_root is new_root else [old_root, new_root]:
            self._refresh(root)
            affected |= _leaf_names(root)
        return affected

    def _refresh(self, root: QuotaNode) -> None:
        """Recompute a tree after its quotas or shape changed (every such change ends here)."""
        refresh_tree(root)
        self.shape_version += 1
        self._tree_names.clear()

    def _prune_cohort(self, name: str) -> None:
        """Drop an implicit cohort node nothing refers to any more."""
        node = self._cohort_nodes.get(name)
        if node is None or node.children or name in self._cohorts:
            return
        parent = node.parent
        node.set_parent(None)
        del self._cohort_nodes[name]
        if parent is not None:
            self._refresh(root_of(parent))
            self._prune_cohort(parent.name)

    # --- reading the shape ------------------------------------------------------------------

    def tree_of(self, cq_name: str) -> frozenset[str]:
        """The ClusterQueue and every ClusterQueue sharing its cohort tree.

        The names of a tree are kept until the shape changes: every Workload admitted or released
        asks for them, and a cohort of 100 ClusterQueues made that a walk of 100 nodes each time.
        """
        node = self._leaves.get(cq_name)
        if node is None or node.parent is None:
            return frozenset((cq_name,))
        root = root_of(node)
        names = self._tree_names.get(root.name)
        if names is None:
            names = self._tree_names[root.name] = frozenset(_leaf_names(root))
        return names

    def cohort_root(self, cq_name: str) -> str:
        """A name identifying the ClusterQueue's quota tree (the queue itself without a cohort)."""
        node = self._leaves.get(cq_name)
        if node is None or node.parent is None:
            return f"clusterqueue/{cq_name}"
        return f"cohort/{root_of(node).name}"

    # --- usage ---------------------------------------------------------------------------------

    def contribution_of(self, key: WorkloadKey) -> Contribution | None:
        """The quota the Workload is counted as holding (real or assumed), or None."""
        return self._contributions.get(key)

    def set_contribution(self, key: WorkloadKey, new: Contribution | None) -> tuple[str, ...]:
        """Count ``new`` as the Workload's quota instead of what it held; the ClusterQueues whose quota changed.

        Only the counters change (nothing is returned) when the Workload
        keeps the same quota in the same ClusterQueue, e.g. when it goes
        from reserving to admitted.
        """
        old = self._contributions.get(key)
        if old == new:
            return ()
        same_quota = old is not None and new is not None and (old.cluster_queue, old.usage) == (
            new.cluster_queue,
            new.usage,
        )
        if old is not None:
            self._apply(old, -1, touch_quota=not same_quota)
            del self._contributions[key]
            holders = self._holders.get(old.cluster_queue)
            if holders is not None:
                holders.discard(key)
                if not holders:
                    del self._holders[old.cluster_queue]
        if new is not None:
            self._apply(new, +1, touch_quota=not same_quota)
            self._contributions[key] = new
            self._holders.setdefault(new.cluster_queue, set()).add(key)
        if same_quota:
            return ()
        return tuple(c.cluster_queue for c in (old, new) if c is not None)

    def _apply(self, contribution: Contribution, sign: int, *, touch_quota: bool) -> None:
        """Add (``sign=+1``) or take back (``-1``) a Workload's quota in the counters and the quota tree."""
        self._cq_stats.setdefault(contribution.cluster_queue, QueueStats()).apply(contribution, sign)
        self._lq_stats.setdefault(contribution.local_queue, QueueStats()).apply(contribution, sign)
        node = self._leaves.get(contribution.cluster_queue)
        if not touch_quota or node is None:
            return
        for fr, amount in contribution.usage.items():
            if sign > 0:
                add_usage(node, fr, amount)
            else:
                remove_usage(node, fr, amount)

    def holders_in_tree(self, cq_name: str) -> list[tuple[WorkloadKey, Contribution]]:
        """Every Workload holding quota in the ClusterQueue's quota tree (its cohort's ClusterQueues), by key."""
        return sorted(
            (key, self._contributions[key]) for name in self.tree_of(cq_name) for key in self._holders.get(name, ())
        )

    def usage(self, cq_name: str) -> dict[FlavorResource, Decimal]:
        """Quota held in the ClusterQueue (admitted, reserving and assumed Workloads), non-zero entries only."""
        stats = self._cq_stats.get(cq_name)
        if stats is None:
            return {}
        return {fr: amount for fr, amount in stats.reservation.items() if amount != 0}

    def cluster_queue_stats(self, cq_name: str) -> QueueStats:
        """Counters of the Workloads holding quota in a ClusterQueue (read only)."""
        return self._cq_stats.get(cq_name) or QueueStats()

    def local_queue_stats(self, key: LocalQueueKey) -> QueueStats:
        """Counters of the Workloads of a LocalQueue holding quota (read only)."""
        return self._lq_stats.get(key) or QueueStats()
