"""Flavor assignment: which ResourceFlavor each requested resource of a Workload gets.

For every pod set, each requested resource belongs to one resource group of
the ClusterQueue; the group's flavors are tried in order, and a flavor is
taken for all the group's resources at once when

1. the ResourceFlavor exists,
2. its NoSchedule/NoExecute ``nodeTaints`` are tolerated by the pod set
   (the flavor's own ``tolerations`` count too),
3. its ``nodeLabels`` agree with the pod set's ``nodeSelector`` and required
   node affinity (see :mod:`multikueue.core.matching`), and
4. the quota has room for the request plus what earlier pod sets of the
   same Workload were already assigned in that flavor
   (:mod:`multikueue.core.quota`).

``flavorFungibility.whenCanBorrow``: ``MayStopSearch`` (default) takes the
first flavor that fits, borrowing or not; ``TryNextFlavor`` keeps looking for
a later flavor that fits without borrowing and falls back to the first
borrowing fit. A requested resource (non-zero) that no group covers means the
Workload cannot be admitted.

When nothing fits, :attr:`FlavorAssignment.message` explains why with
upstream Kueue's wording (``pkg/scheduler/flavorassigner``): the reasons of
every flavor tried for the failing resource group, sorted, after
``couldn't assign flavors to pod set <name>: ``.

Preemption mode: with ``preemption=True``, a resource group where no flavor
fits but one would within the ClusterQueue's maximum capacity (only unused
quota is missing, upstream's mode ``Preempt``) gets the first such flavor,
and the assignment comes back not fitting but :attr:`~FlavorAssignment.preemptible`,
with its pod sets and usage filled in: what the Workload would take once
others are preempted. A group with no such flavor still ends the assignment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import cached_property
from typing import Any

from pydantic import ValidationError

from multikueue.api.clusterqueue import ClusterQueueSpec, FlavorFungibilityPolicy
from multikueue.api.core import Toleration
from multikueue.api.quantity import format_quantity
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import Admission, PodSet, PodSetAssignment
from multikueue.core import messages
from multikueue.core.matching import (
    NodeSelectorTerm,
    flavor_matches_pod,
    format_taint,
    required_affinity_terms,
    untolerated_taint,
)
from multikueue.core.quota import ZERO, FlavorResource, QuotaNode, available, borrows, potential_available
from multikueue.core.resources import Requests, pod_requests, scaled

__all__ = [
    "PODS",
    "AssignedPodSet",
    "FlavorAssignment",
    "PodSetRequest",
    "ResourceGroupView",
    "assign_flavors",
    "pod_spec_of",
    "resource_groups_of",
]

#: The resource a ClusterQueue may cover to limit the number of pods.
PODS = "pods"


@dataclass(frozen=True)
class ResourceGroupView:
    """A ClusterQueue resource group reduced to what assignment needs: covered resources and flavor order."""

    covered: frozenset[str]
    flavors: tuple[str, ...]


def resource_groups_of(spec: ClusterQueueSpec) -> tuple[ResourceGroupView, ...]:
    """The resource groups of a ClusterQueue spec, in order."""
    return tuple(
        ResourceGroupView(frozenset(group.covered_resources), tuple(f.name for f in group.flavors))
        for group in spec.resource_groups or ()
    )


def pod_spec_of(pod_set: PodSet) -> Mapping[str, Any]:
    """The ``spec`` of a pod set's template, ``{}`` when missing or not an object."""
    spec = (pod_set.template or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}


@dataclass(frozen=True)
class PodSetRequest:
    """What one pod set needs and where its pods may run, computed once per Workload version."""

    name: str
    count: int
    per_pod: Requests
    node_selector: Mapping[str, str]
    affinity_terms: tuple[NodeSelectorTerm, ...]
    tolerations: tuple[Toleration, ...]
    #: The fewest pods it may run with (partial admission, :mod:`multikueue.core.partial`); ``None``: all of them.
    min_count: int | None = None

    @cached_property
    def total(self) -> Mapping[str, Decimal]:
        """Per-pod requests times the pod count (computed once: read by every flavor assignment of the
        Workload, each cycle it is a candidate; do not change it)."""
        return scaled(self.per_pod, self.count)

    @cached_property
    def _refusals(self) -> dict[str, tuple[ResourceFlavor, str | None]]:
        return {}

    def refusal(self, name: str, flavor: ResourceFlavor) -> str | None:
        """Why the pods may not run on flavor ``name``'s nodes (a taint they do not tolerate, node labels
        their selector or affinity does not match), ``None`` when they may.

        Kept per flavor object (a changed ResourceFlavor is another object): it depends only on the pod set
        and the flavor, and every flavor assignment of the Workload, each cycle it is a candidate, asked again.
        """
        known = self._refusals.get(name)
        if known is not None and known[0] is flavor:
            return known[1]
        reason: str | None = None
        tolerations = self.tolerations + tuple(flavor.spec.tolerations or ())
        taint = untolerated_taint(flavor.spec.node_taints or (), tolerations)
        if taint is not None:
            reason = messages.UNTOLERATED_TAINT.format(taint=format_taint(taint), flavor=name)
        elif not flavor_matches_pod(flavor.spec.node_labels or {}, self.node_selector, self.affinity_terms):
            reason = messages.NODE_AFFINITY_MISMATCH.format(flavor=name)
        self._refusals[name] = (flavor, reason)
        return reason

    @classmethod
    def from_pod_set(cls, pod_set: PodSet) -> PodSetRequest:
        """Read a Workload pod set (its template is a ``PodTemplateSpec`` dict).

        Raises ``ValueError`` on an unparsable quantity; check with
        :func:`multikueue.core.resources.pod_spec_errors` first.
        """
        spec = pod_spec_of(pod_set)
        tolerations: list[Toleration] = []
        for item in spec.get("tolerations") or ():
            try:
                tolerations.append(Toleration.model_validate(item))
            except ValidationError:
                continue  # a toleration the API server would have refused tolerates nothing
        return cls(
            name=pod_set.name,
            count=pod_set.count,
            per_pod=pod_requests(spec),
            node_selector={str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
            affinity_terms=required_affinity_terms(spec),
            tolerations=tuple(tolerations),
            min_count=pod_set.min_count,
        )

    def with_count(self, count: int) -> PodSetRequest:
        """The same pod set asking for ``count`` pods (a partial-admission attempt)."""
        return replace(self, count=count)


@dataclass(frozen=True)
class AssignedPodSet:
    """The flavors and quota of one pod set in a successful assignment."""

    name: str
    count: int
    flavors: dict[str, str]
    resource_usage: Requests

    def to_api(self) -> PodSetAssignment:
        """As ``status.admission.podSetAssignments[]``."""
        return PodSetAssignment.model_validate(
            {
                "name": self.name,
                "flavors": dict(self.flavors),
                "resourceUsage": {r: format_quantity(v) for r, v in self.resource_usage.items()},
                "count": self.count,
            }
        )


@dataclass(frozen=True)
class FlavorAssignment:
    """The result of :func:`assign_flavors`: either every pod set has flavors, or a message says why not."""

    pod_sets: tuple[AssignedPodSet, ...] = ()
    #: Total quota the Workload would use, per (flavor, resource).
    usage: dict[FlavorResource, Decimal] = field(default_factory=dict)
    #: Whether any resource would be taken above the ClusterQueue's nominal quota.
    borrows: bool = False
    #: Empty when it fits; else upstream's "couldn't assign flavors to pod set ..." text.
    message: str = ""
    #: Not fitting, but every pod set got a flavor in which preempting others could make room
    #: (``pod_sets`` and ``usage`` are that assignment). Only with ``assign_flavors(preemption=True)``.
    preemptible: bool = False

    @property
    def fits(self) -> bool:
        return not self.message

    def to_admission(self, cluster_queue: str) -> Admission:
        """The ``status.admission`` to write for this assignment."""
        return Admission(cluster_queue=cluster_queue, pod_set_assignments=[p.to_api() for p in self.pod_sets])

    @property
    def flavor_names(self) -> frozenset[str]:
        """Every flavor any pod set was assigned."""
        return frozenset(f for p in self.pod_sets for f in p.flavors.values())


def _group_for(groups: Sequence[ResourceGroupView], resource: str) -> ResourceGroupView | None:
    for group in groups:
        if resource in group.covered:
            return group
    return None


@dataclass(frozen=True)
class _FlavorChoice:
    flavor: str | None
    borrows: bool
    reasons: tuple[str, ...]
    #: When nothing fits: the first flavor that only lacks unused quota (it fits the maximum capacity).
    preempt: str | None = None


def _quota_reasons(
    node: QuotaNode,
    flavor: str,
    requests: Mapping[str, Decimal],
    assigned: Mapping[FlavorResource, Decimal],
) -> tuple[list[str], bool, bool]:
    """Why the flavor's quota cannot take ``requests`` (empty when it can), whether it would borrow,
    and whether some request is above the maximum capacity (no preemption can make room)."""
    reasons: list[str] = []
    borrowing = False
    over_capacity = False
    for resource in sorted(requests):
        fr = (flavor, resource)
        previous = assigned.get(fr, ZERO)
        wanted = previous + requests[resource]
        capacity = potential_available(node, fr)
        if wanted > capacity:
            reasons.append(
                messages.EXCEEDS_MAX_CAPACITY.format(
                    resource=resource,
                    flavor=flavor,
                    previous=format_quantity(previous),
                    request=format_quantity(requests[resource]),
                    capacity=format_quantity(capacity),
                )
            )
            over_capacity = True
            continue
        free = available(node, fr)
        if wanted > free:
            reasons.append(
                messages.INSUFFICIENT_UNUSED_QUOTA.format(
                    resource=resource, flavor=flavor, missing=format_quantity(wanted - free)
                )
            )
            continue
        borrowing = borrowing or borrows(node, fr, wanted)
    return reasons, borrowing, over_capacity


def _choose_flavor(
    group: ResourceGroupView,
    requests: Mapping[str, Decimal],
    pod_set: PodSetRequest,
    flavors: Mapping[str, ResourceFlavor],
    node: QuotaNode,
    assigned: Mapping[FlavorResource, Decimal],
    when_can_borrow: FlavorFungibilityPolicy,
) -> _FlavorChoice:
    reasons: list[str] = []
    borrowing_fit: str | None = None
    preempt: str | None = None
    for name in group.flavors:
        flavor = flavors.get(name)
        if flavor is None:
            reasons.append(messages.FLAVOR_NOT_FOUND.format(flavor=name))
            continue
        refusal = pod_set.refusal(name, flavor)
        if refusal is not None:
            reasons.append(refusal)
            continue
        quota_reasons, borrowing, over_capacity = _quota_reasons(node, name, requests, assigned)
        if quota_reasons:
            reasons.extend(quota_reasons)
            if not over_capacity and preempt is None:
                preempt = name
            continue
        if not borrowing or when_can_borrow == FlavorFungibilityPolicy.MAY_STOP_SEARCH:
            return _FlavorChoice(name, borrowing, ())
        if borrowing_fit is None:
            borrowing_fit = name
    if borrowing_fit is not None:
        return _FlavorChoice(borrowing_fit, True, ())
    return _FlavorChoice(None, False, tuple(reasons), preempt)


def _no_fit(pod_set: str, reasons: Sequence[str]) -> FlavorAssignment:
    return FlavorAssignment(message=messages.POD_SET_NO_FIT.format(pod_set=pod_set, reasons=", ".join(sorted(reasons))))


def assign_flavors(
    pod_sets: Sequence[PodSetRequest],
    groups: Sequence[ResourceGroupView],
    flavors: Mapping[str, ResourceFlavor],
    node: QuotaNode,
    when_can_borrow: FlavorFungibilityPolicy = FlavorFungibilityPolicy.MAY_STOP_SEARCH,
    *,
    preemption: bool = False,
) -> FlavorAssignment:
    """Assign flavors to every pod set of a Workload against the ClusterQueue quota ``node``.

    Pure: reads ``node`` and ``flavors``, changes nothing. Pod sets are
    assigned in order and each sees the quota the earlier ones took.
    ``preemption``: see the module docstring (preemption mode).
    """
    counts_pods = _group_for(groups, PODS) is not None
    assigned: dict[FlavorResource, Decimal] = {}
    result: list[AssignedPodSet] = []
    any_borrowing = False
    no_fit: FlavorAssignment | None = None
    for pod_set in pod_sets:
        total = pod_set.total
        if counts_pods:
            total = {**total, PODS: Decimal(pod_set.count)}
        chosen: dict[str, str] = {}
        for resource in sorted(total):
            if resource in chosen:
                continue
            group = _group_for(groups, resource)
            if group is None:
                if total[resource] == 0:
                    continue  # a zero request for a resource the queue does not manage is irrelevant
                return _no_fit(pod_set.name, [messages.RESOURCE_UNAVAILABLE.format(resource=resource)])
            requests = {r: q for r, q in total.items() if r in group.covered}
            choice = _choose_flavor(group, requests, pod_set, flavors, node, assigned, when_can_borrow)
            flavor = choice.flavor
            if flavor is None:
                failed = _no_fit(pod_set.name, choice.reasons or [messages.NO_FLAVORS])
                if not preemption or choice.preempt is None:
                    return failed
                no_fit = no_fit or failed  # the first failure is what the Workload is told
                flavor = choice.preempt
            any_borrowing = any_borrowing or choice.borrows
            for covered in requests:
                chosen[covered] = flavor
        usage = {resource: total[resource] for resource in chosen}
        for resource, flavor in chosen.items():
            assigned[(flavor, resource)] = assigned.get((flavor, resource), ZERO) + usage[resource]
        result.append(AssignedPodSet(pod_set.name, pod_set.count, chosen, usage))
    if no_fit is not None:
        return FlavorAssignment(pod_sets=tuple(result), usage=assigned, message=no_fit.message, preemptible=True)
    return FlavorAssignment(pod_sets=tuple(result), usage=assigned, borrows=any_borrowing)
