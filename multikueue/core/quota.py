"""Quota arithmetic: how much a ClusterQueue may still use, alone or in a cohort.

Quota lives in a tree. ClusterQueues are leaves; a cohort (named by a
ClusterQueue's ``spec.cohortName``, optionally a ``Cohort`` object with its
own ``resourceGroups`` and ``parentName``) is an inner node. Everything is
per (flavor, resource) pair; for one pair and one node ``m``:

- ``N_m``: nominal quota (a cohort's own ``resourceGroups``, else 0);
- ``B_m``: ``borrowingLimit``, ``None`` = unlimited;
- ``L_m``: ``lendingLimit``, ``None`` = all of its quota may be lent;
- ``subtree_m``: ``N_m`` for a ClusterQueue; for a cohort, its own ``N``
  plus what each child puts in: ``subtree_child - guaranteed_child``;
- ``guaranteed_m = max(0, subtree_m - L_m)`` when ``L_m`` is set, else 0:
  the part of a node's quota that only the node itself may use;
- ``usage_m``: what its admitted Workloads use (for a cohort: what its
  children take from it, ``sum(max(0, usage_child - guaranteed_child))``).

For a flat cohort (ClusterQueues directly under one cohort without quota of
its own) a request ``q`` fits in ClusterQueue ``c`` when

1. without a cohort: ``usage_c + q <= N_c``;
2. with a cohort: ``usage_c + q <= N_c + B_c`` when ``B_c`` is set, and
   ``sum_m max(0, usage_m - guaranteed_m) <= sum_m (N_m - guaranteed_m)``
   with ``usage_c`` increased by ``q`` (the cohort's pool is what its
   members lend; nobody may dip into another member's guaranteed part).

``c`` *borrows* when ``usage_c + q > N_c``; a ClusterQueue without a cohort
never borrows. This is upstream Kueue's ``available``/``potentialAvailable``
(``pkg/cache/scheduler/resource_node.go``), which :func:`available` and
:func:`potential_available` implement recursively so that deeper cohort trees
work the same way: at every level a node may use its guaranteed part plus
whatever its parent can still give it, capped by its borrowing limit.

Usage changes propagate upward incrementally (:func:`add_usage`,
:func:`remove_usage`, O(depth)); :func:`refresh_tree` recomputes a whole tree
and is only needed when quotas or the tree's shape change.

Each cohort also indexes, per pair, its children whose usage is above their
(subtree) quota (:func:`above_quota`), kept current by every function here
that changes usage, quotas or shape; usage is therefore only changed through
them (:func:`set_usage` puts back a value saved earlier). Why: preemption
looks for ClusterQueues above their nominal quota in a cohort, and with
upstream's large-scale generator (cohorts of 100 ClusterQueues, a plan for
every waiting head each time its cohort changes) looking at every child was
the largest single cost of the controller.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from multikueue.api.quota import ResourceGroup

__all__ = [
    "ZERO",
    "FlavorResource",
    "QuotaNode",
    "ResourceQuota",
    "above_quota",
    "add_usage",
    "available",
    "borrows",
    "guaranteed",
    "leaves",
    "potential_available",
    "quotas_from_groups",
    "refresh_tree",
    "remove_usage",
    "root_of",
    "set_usage",
]

ZERO = Decimal(0)

#: (flavor name, resource name): the unit quota is counted in.
FlavorResource = tuple[str, str]


@dataclass(frozen=True)
class ResourceQuota:
    """Quota of one resource in one flavor; ``None`` limits mean "no limit"."""

    nominal: Decimal
    borrowing_limit: Decimal | None = None
    lending_limit: Decimal | None = None


def quotas_from_groups(groups: Sequence[ResourceGroup] | None) -> dict[FlavorResource, ResourceQuota]:
    """The quota map declared by ClusterQueue or Cohort ``resourceGroups``."""
    quotas: dict[FlavorResource, ResourceQuota] = {}
    for group in groups or ():
        for flavor in group.flavors:
            for resource in flavor.resources:
                quotas[(flavor.name, resource.name)] = ResourceQuota(
                    nominal=Decimal(resource.nominal_quota),
                    borrowing_limit=None if resource.borrowing_limit is None else Decimal(resource.borrowing_limit),
                    lending_limit=None if resource.lending_limit is None else Decimal(resource.lending_limit),
                )
    return quotas


class QuotaNode:
    """A ClusterQueue (leaf) or a cohort in the quota tree.

    ``usage`` of a leaf is the ClusterQueue's own usage; of a cohort, what
    its children take from it. ``subtree_quota`` is kept current by
    :func:`refresh_tree`.
    ``weight`` is the object's ``fairSharing.weight`` (1 when unset), read
    only by :mod:`multikueue.core.fairsharing`. ``above`` is the index
    :func:`above_quota` reads (change usage only through this module).
    """

    __slots__ = (
        "above", "child_cohorts", "children", "is_cohort", "name", "parent", "quotas", "subtree_quota", "usage", "weight",
    )  # fmt: skip

    def __init__(
        self,
        name: str,
        *,
        is_cohort: bool,
        quotas: Mapping[FlavorResource, ResourceQuota] | None = None,
        usage: Mapping[FlavorResource, Decimal] | None = None,
        weight: Decimal = Decimal(1),
    ) -> None:
        self.name = name
        self.weight = weight
        self.is_cohort = is_cohort
        self.quotas: dict[FlavorResource, ResourceQuota] = dict(quotas or {})
        self.parent: QuotaNode | None = None
        self.children: list[QuotaNode] = []
        #: The children that are cohorts (most cohorts have none: a walk down need not look at every child).
        self.child_cohorts: list[QuotaNode] = []
        self.subtree_quota: dict[FlavorResource, Decimal] = {}
        self.usage: dict[FlavorResource, Decimal] = dict(usage or {})
        #: Per pair, the children whose usage is above their subtree quota in it.
        self.above: dict[FlavorResource, set[QuotaNode]] = {}

    def __repr__(self) -> str:
        kind = "Cohort" if self.is_cohort else "ClusterQueue"
        return f"QuotaNode({kind} {self.name!r})"

    def set_parent(self, parent: QuotaNode | None) -> bool:
        """Move this node under ``parent``; refuses (returns False) a move that would make a cycle."""
        ancestor = parent
        while ancestor is not None:
            if ancestor is self:
                return False
            ancestor = ancestor.parent
        if self.parent is not None:
            self.parent.children.remove(self)
            if self.is_cohort:
                self.parent.child_cohorts.remove(self)
            for members in self.parent.above.values():
                members.discard(self)
        self.parent = parent
        if parent is not None:
            parent.children.append(self)
            if self.is_cohort:
                parent.child_cohorts.append(self)
            for fr in self.usage:
                _index(self, fr)
        return True


def guaranteed(node: QuotaNode, fr: FlavorResource) -> Decimal:
    """The part of the node's quota nobody else may use (0 without a lending limit)."""
    quota = node.quotas.get(fr)
    if quota is None or quota.lending_limit is None:
        return ZERO
    return max(ZERO, node.subtree_quota.get(fr, ZERO) - quota.lending_limit)


def available(node: QuotaNode, fr: FlavorResource) -> Decimal:
    """How much more of ``fr`` the node may use right now (may be negative when over-committed)."""
    if node.parent is None:
        return node.subtree_quota.get(fr, ZERO) - node.usage.get(fr, ZERO)
    own_guaranteed = guaranteed(node, fr)
    usage = node.usage.get(fr, ZERO)
    local = max(ZERO, own_guaranteed - usage)
    from_parent = available(node.parent, fr)
    quota = node.quotas.get(fr)
    if quota is not None and quota.borrowing_limit is not None:
        stored_in_parent = node.subtree_quota.get(fr, ZERO) - own_guaranteed
        used_in_parent = max(ZERO, usage - own_guaranteed)
        from_parent = min(stored_in_parent - used_in_parent + quota.borrowing_limit, from_parent)
    return local + from_parent


def potential_available(node: QuotaNode, fr: FlavorResource) -> Decimal:
    """The most of ``fr`` the node could ever use if nothing else used any (its maximum capacity)."""
    if node.parent is None:
        return node.subtree_quota.get(fr, ZERO)
    result = guaranteed(node, fr) + potential_available(node.parent, fr)
    quota = node.quotas.get(fr)
    if quota is not None and quota.borrowing_limit is not None:
        result = min(node.subtree_quota.get(fr, ZERO) + quota.borrowing_limit, result)
    return result


def borrows(node: QuotaNode, fr: FlavorResource, amount: Decimal) -> bool:
    """Whether using ``amount`` more would take the node above its own quota (only possible in a cohort)."""
    if node.parent is None:
        return False
    return node.usage.get(fr, ZERO) + amount > node.subtree_quota.get(fr, ZERO)


def _index(node: QuotaNode, fr: FlavorResource) -> None:
    """Put ``node`` in (or out of) its parent's :func:`above_quota` index for ``fr``."""
    parent = node.parent
    if parent is None:
        return
    members = parent.above.get(fr)
    if node.usage.get(fr, ZERO) > node.subtree_quota.get(fr, ZERO):
        if members is None:
            parent.above[fr] = {node}
        else:
            members.add(node)
    elif members:
        members.discard(node)


def above_quota(cohort: QuotaNode, frs: Iterable[FlavorResource]) -> set[QuotaNode]:
    """The cohort's children whose usage is above their (subtree) quota in at least one pair of ``frs``
    (a new set, unordered; a ClusterQueue's subtree quota is its nominal quota)."""
    found: set[QuotaNode] = set()
    for fr in frs:
        members = cohort.above.get(fr)
        if members:
            found |= members
    return found


def set_usage(node: QuotaNode, fr: FlavorResource, value: Decimal | None) -> None:
    """Put back a usage entry saved earlier (``None``: there was none), with the index; the caller restores
    every entry it changed, on the whole path, so the tree is consistent again."""
    if value is None:
        node.usage.pop(fr, None)
    else:
        node.usage[fr] = value
    _index(node, fr)


def add_usage(node: QuotaNode, fr: FlavorResource, amount: Decimal) -> None:
    """Record ``amount`` more usage at ``node``; what its guaranteed part cannot hold is taken from the parent."""
    local_available = max(ZERO, guaranteed(node, fr) - node.usage.get(fr, ZERO))
    node.usage[fr] = node.usage.get(fr, ZERO) + amount
    if node.parent is not None:
        _index(node, fr)
        add_usage(node.parent, fr, max(ZERO, amount - local_available))


def remove_usage(node: QuotaNode, fr: FlavorResource, amount: Decimal) -> None:
    """Undo :func:`add_usage`: give back to the parent only what was taken from it."""
    stored_in_parent = node.usage.get(fr, ZERO) - guaranteed(node, fr)
    node.usage[fr] = node.usage.get(fr, ZERO) - amount
    if node.parent is not None:
        _index(node, fr)
        if stored_in_parent > 0:
            remove_usage(node.parent, fr, min(amount, stored_in_parent))


def root_of(node: QuotaNode) -> QuotaNode:
    """The top of the node's tree."""
    while node.parent is not None:
        node = node.parent
    return node


def leaves(node: QuotaNode) -> Iterator[QuotaNode]:
    """Every ClusterQueue in the subtree of ``node`` (the node itself if it is one)."""
    if not node.is_cohort:
        yield node
        return
    for child in node.children:
        yield from leaves(child)


def refresh_tree(node: QuotaNode) -> None:
    """Recompute ``subtree_quota`` everywhere below ``node`` and cohorts' ``usage`` from their leaves.

    Call it on the root after quotas or the tree's shape changed.
    """
    if not node.is_cohort:
        node.subtree_quota = {fr: quota.nominal for fr, quota in node.quotas.items()}
        return
    subtree = {fr: quota.nominal for fr, quota in node.quotas.items()}
    usage: dict[FlavorResource, Decimal] = {}
    above: dict[FlavorResource, set[QuotaNode]] = {}
    for child in node.children:
        refresh_tree(child)
        for fr, child_quota in child.subtree_quota.items():
            subtree[fr] = subtree.get(fr, ZERO) + child_quota - guaranteed(child, fr)
        for fr, child_usage in child.usage.items():
            usage[fr] = usage.get(fr, ZERO) + max(ZERO, child_usage - guaranteed(child, fr))
            if child_usage > child.subtree_quota.get(fr, ZERO):
                above.setdefault(fr, set()).add(child)
    node.subtree_quota = subtree
    node.usage = usage
    node.above = above
