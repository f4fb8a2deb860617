"""Fair sharing: the dominant resource share (DRS) of a ClusterQueue or cohort (pure).

With ``fairSharing`` in the Configuration, the scheduler orders its entries
and chooses preemption victims by how much each node of the quota tree
borrows, relative to what its cohort tree could lend it, divided by its
``fairSharing.weight``. This module computes that number as upstream Kueue
does (``pkg/cache/scheduler/fair_sharing.go``, v0.19):

- a node without a parent (a ClusterQueue outside any cohort, a root
  cohort) has share 0 and never borrows;
- per (flavor, resource) the node has quota for (its ``subtree_quota``,
  which for a cohort includes every pair of its subtree), it *borrows*
  ``usage + request - subtree_quota`` when that is positive; the amounts
  borrowed are summed per resource name across flavors;
- the *lendable* amount of a resource is, summed over every flavor of the
  tree (the root's pairs), what the node's parent could ever give
  (:func:`multikueue.core.quota.potential_available` of the parent, so
  lending and borrowing limits count);
- the share of a resource is ``borrowed * 1000 / lendable`` (resources with
  nothing lendable are skipped); the dominant resource is the one with the
  largest share (alphabetically first on ties);
- the weighted share divides it by the weight; a weight of 0 makes the
  share of a borrowing node infinite (such nodes compare among themselves
  by their unweighted share, and above every other node).

Arithmetic is exact (``Decimal``) where upstream uses int64 amounts and
float64 ratios; the rounded value reported in ``status.fairSharing``
(:meth:`DRS.rounded_weighted_share`) is the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from multikueue.api.configuration import DEFAULT_PREEMPTION_STRATEGIES, PreemptionStrategy
from multikueue.core.quota import ZERO, FlavorResource, QuotaNode, potential_available, root_of

__all__ = [
    "DEFAULT_WEIGHT",
    "DRS",
    "FairSharing",
    "MAX_INT64",
    "NEGATIVE_DRS",
    "compare_drs",
    "dominant_resource_share",
    "lendable",
]

DEFAULT_WEIGHT = Decimal(1)
#: Upstream's ``math.MaxInt64``: the rounded share of a borrowing node with weight 0.
MAX_INT64 = 2**63 - 1
_PER_MILLE = Decimal(1000)
_INFINITY = Decimal("Infinity")


@dataclass(frozen=True)
class FairSharing:
    """The Configuration's ``fairSharing``, as the scheduler takes it: present means enabled."""

    #: Tried in order until the preemptor fits (``parseStrategies``); upstream's default is both.
    preemption_strategies: tuple[PreemptionStrategy, ...] = DEFAULT_PREEMPTION_STRATEGIES


@dataclass(frozen=True)
class DRS:
    """A node's dominant resource share; compare two with :func:`compare_drs` (lower = more deserving)."""

    weight: Decimal = DEFAULT_WEIGHT
    #: ``borrowed * 1000 / lendable`` of the dominant resource (0 when not borrowing or nothing lendable).
    unweighted_ratio: Decimal = ZERO
    dominant_resource: str = ""
    #: The (flavor, resource) pairs in which the node's usage (with the request) exceeds its quota.
    borrowed: frozenset[FlavorResource] = frozenset()

    @property
    def borrowing(self) -> bool:
        """Whether usage exceeds quota in any pair (true even when nothing is lendable: ratio 0)."""
        return bool(self.borrowed)

    @property
    def is_zero(self) -> bool:
        return self.unweighted_ratio == 0

    def borrowing_on(self, requested: Mapping[FlavorResource, Decimal] | None) -> bool:
        """Whether the node borrows in a pair the request uses (upstream's ``IsBorrowingOn``)."""
        return any(requested.get(fr, ZERO) > 0 for fr in self.borrowed) if requested else False

    @property
    def zero_weight_borrows(self) -> bool:
        return self.weight == 0 and not self.is_zero

    @property
    def weighted_share(self) -> Decimal:
        """The share divided by the weight; ``Infinity`` for weight 0 (0 when the share is 0)."""
        if self.is_zero:
            return ZERO
        if self.weight == 0:
            return _INFINITY
        return self.unweighted_ratio / self.weight

    def rounded_weighted_share(self) -> int:
        """What ``status.fairSharing.weightedShare`` reports: the share rounded up, or max int64 for weight 0."""
        if self.zero_weight_borrows:
            return MAX_INT64
        return int(self.weighted_share.to_integral_value(rounding=ROUND_CEILING))

    def serialized(self) -> str:
        """The precise weighted share as text (``+Inf`` for weight 0), upstream's ``PreciseWeightedShareSerialized``."""
        share = self.weighted_share
        if share.is_infinite():
            return "+Inf"
        return _format_float(float(share))


def _format_float(value: float) -> str:
    """Go's ``strconv.FormatFloat(f, 'f', -1, 64)``: shortest digits, never an exponent."""
    if value == int(value):
        return str(int(value))
    return format(Decimal(repr(value)), "f")


#: A share below every real one: the starting point of "find the highest" loops (upstream's ``NegativeDRS``).
NEGATIVE_DRS = DRS(unweighted_ratio=Decimal(-1))


def compare_drs(a: DRS, b: DRS) -> int:
    """-1, 0 or 1 as ``a`` is lower, equal or higher than ``b`` (upstream's ``CompareDRS``).

    Lower is preferred for admission; higher is preempted first.
    """
    if a.zero_weight_borrows and b.zero_weight_borrows:
        x, y = a.unweighted_ratio, b.unweighted_ratio
    elif a.zero_weight_borrows:
        return 1
    elif b.zero_weight_borrows:
        return -1
    else:
        x, y = a.weighted_share, b.weighted_share
    return (x > y) - (x < y)


def lendable(node: QuotaNode) -> dict[str, Decimal]:
    """Per resource name, what ``node`` could ever get from its tree, summed over the tree's flavors."""
    result: dict[str, Decimal] = {}
    for fr in root_of(node).subtree_quota:
        result[fr[1]] = result.get(fr[1], ZERO) + potential_available(node, fr)
    return result


def dominant_resource_share(node: QuotaNode, request: Mapping[FlavorResource, Decimal] | None = None) -> DRS:
    """The node's DRS, with ``request`` counted as extra usage of the node (see the module docstring)."""
    if node.parent is None:
        return DRS(weight=node.weight)
    request = request or {}
    borrowing: dict[str, Decimal] = {}
    borrowed: list[FlavorResource] = []
    for fr, quota in node.subtree_quota.items():
        amount = request.get(fr, ZERO) + node.usage.get(fr, ZERO) - quota
        if amount > 0:
            borrowing[fr[1]] = borrowing.get(fr[1], ZERO) + amount
            borrowed.append(fr)
    if not borrowing:
        return DRS(weight=node.weight)
    can_lend = lendable(node.parent)
    ratio, dominant = ZERO, ""
    for resource in sorted(borrowing):
        available = can_lend.get(resource, ZERO)
        if available > 0:
            share = borrowing[resource] * _PER_MILLE / available
            if share > ratio:
                ratio, dominant = share, resource
    return DRS(weight=node.weight, unweighted_ratio=ratio, dominant_resource=dominant, borrowed=frozenset(borrowed))
