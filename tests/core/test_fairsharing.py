"""Dominant resource share: the cases of upstream Kueue's ``pkg/cache/scheduler/fair_sharing_test.go``.

``TestDominantResourceShare``, ``TestIsBorrowingOn`` and
``TestPreciseWeightedShareSerialized`` (v0.19.2), case by case. Trees are
built the way the cache builds them (:class:`~multikueue.core.cache.hierarchy.QuotaTree`
from ClusterQueue specs and Cohort objects, so ``fairSharing.weight`` is read
from the API objects), and a workload's usage is added to the ClusterQueue
``cq`` as its admission would be. CPU amounts are in cores (upstream's
milli-CPU ``NewAmount(3_000)`` is 3 here); shares are scale-free.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from multikueue.api.clusterqueue import ClusterQueueSpec
from multikueue.api.cohort import Cohort
from multikueue.core.cache.hierarchy import QuotaTree
from multikueue.core.fairsharing import (
    DRS,
    MAX_INT64,
    NEGATIVE_DRS,
    compare_drs,
    dominant_resource_share,
)
from multikueue.core.quota import FlavorResource, QuotaNode, add_usage

pytestmark = pytest.mark.unit

D = Decimal
CPU = ("default", "cpu")
GPU = ("default", "example.com/gpu")
GPU_RESOURCE = "example.com/gpu"


def groups(quotas: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One resource group; ``quotas`` maps flavor -> {resource: nominal or a quota dict}."""
    covered = sorted({r for resources in quotas.values() for r in resources})
    flavors = []
    for flavor, resources in quotas.items():
        entries = []
        for resource, quota in resources.items():
            entry: dict[str, Any] = {"name": resource}
            entry.update(quota if isinstance(quota, dict) else {"nominalQuota": str(quota)})
            entries.append(entry)
        flavors.append({"name": flavor, "resources": entries})
    return [{"coveredResources": covered, "flavors": flavors}]


def cq_spec(cohort: str | None, quotas: dict[str, dict[str, Any]], weight: str | None = None) -> ClusterQueueSpec:
    body: dict[str, Any] = {"resourceGroups": groups(quotas)}
    if cohort:
        body["cohortName"] = cohort
    if weight is not None:
        body["fairSharing"] = {"weight": weight}
    return ClusterQueueSpec.model_validate(body)


def cohort_obj(name: str, parent: str | None = None, quotas: dict[str, dict[str, Any]] | None = None, weight: str | None = None) -> Cohort:
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if quotas:
        spec["resourceGroups"] = groups(quotas)
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return Cohort.from_k8s({"metadata": {"name": name}, "spec": spec})


def build(
    cq: ClusterQueueSpec,
    lending: ClusterQueueSpec | None = None,
    cohorts: list[Cohort] | None = None,
    usage: dict[FlavorResource, Any] | None = None,
) -> dict[str, QuotaNode]:
    """The tree's nodes by name, with ``usage`` admitted in ``cq``."""
    cohort_map = {c.name: c for c in cohorts or ()}
    tree = QuotaTree(cohort_map)
    for name in cohort_map:
        tree.reshape_cohort(name)
    node, _ = tree.put_cluster_queue("cq", cq)
    nodes = {"cq": node}
    if lending is not None:
        nodes["lending-cq"], _ = tree.put_cluster_queue("lending-cq", lending)
    for fr, amount in (usage or {}).items():
        add_usage(node, fr, D(str(amount)))
    current = node.parent
    while current is not None:
        nodes[current.name] = current
        current = current.parent
    return nodes


def result(nodes: dict[str, QuotaNode], request: dict[FlavorResource, Any] | None = None) -> dict[str, tuple[int, str, bool]]:
    """Per node: (rounded weighted share, dominant resource, borrowing), as upstream's ``fairSharingResult``."""
    req = {fr: D(str(v)) for fr, v in (request or {}).items()}
    out = {}
    for name, node in nodes.items():
        drs = dominant_resource_share(node, req)
        out[name] = (drs.rounded_weighted_share(), drs.dominant_resource, drs.borrowing)
    return out


ZERO_RESULT = (0, "", False)
STANDARD = {"default": {"cpu": 2, GPU_RESOURCE: 5}}
LENDER = {"default": {"cpu": 8, GPU_RESOURCE: 5}}


def test_no_cohort() -> None:
    """TestDominantResourceShare "no cohort": a ClusterQueue without a cohort has share 0."""
    nodes = build(cq_spec(None, {"default": {"cpu": 2000, GPU_RESOURCE: 5}}), usage={CPU: 1, GPU: 2})
    assert result(nodes) == {"cq": ZERO_RESULT}


def test_usage_below_nominal() -> None:
    """TestDominantResourceShare "usage below nominal"."""
    nodes = build(cq_spec("test-cohort", STANDARD, "1"), cq_spec("test-cohort", LENDER, "1"), usage={CPU: 1, GPU: 2})
    assert result(nodes) == {"cq": ZERO_RESULT, "lending-cq": ZERO_RESULT, "test-cohort": ZERO_RESULT}


def test_usage_above_nominal() -> None:
    """TestDominantResourceShare "usage above nominal": (7-5)*1000/10 gpu beats (3-2)*1000/10 cpu."""
    nodes = build(cq_spec("test-cohort", STANDARD, "1"), cq_spec("test-cohort", LENDER, "1"), usage={CPU: 3, GPU: 7})
    assert result(nodes) == {
        "cq": (200, GPU_RESOURCE, True),
        "lending-cq": ZERO_RESULT,
        "test-cohort": ZERO_RESULT,
    }


def test_usage_slightly_above_nominal_in_a_cohort_with_large_quotas() -> None:
    """TestDominantResourceShare "usage slightly above nominal in a cohort with large quotas": 1000/1500 rounds up to 1."""
    nodes = build(
        cq_spec("test-cohort", {"default": {GPU_RESOURCE: 500}}, "1"),
        cq_spec("test-cohort", {"default": {GPU_RESOURCE: 1000}}, "300"),
        usage={GPU: 501},
    )
    assert result(nodes) == {"cq": (1, GPU_RESOURCE, True), "lending-cq": ZERO_RESULT, "test-cohort": ZERO_RESULT}


def test_usage_way_above_nominal_in_a_cohort_with_large_quotas_and_weights() -> None:
    """TestDominantResourceShare "usage way above nominal in a cohort with large quotas and weights": 200/300 -> 1."""
    nodes = build(
        cq_spec("test-cohort", {"default": {GPU_RESOURCE: 500}}, "300"),
        cq_spec("test-cohort", {"default": {GPU_RESOURCE: 1000}}, "300"),
        usage={GPU: 800},
    )
    assert result(nodes) == {"cq": (1, GPU_RESOURCE, True), "lending-cq": ZERO_RESULT, "test-cohort": ZERO_RESULT}


def test_one_resource_above_nominal() -> None:
    """TestDominantResourceShare "one resource above nominal": (3-2)*1000/10."""
    nodes = build(cq_spec("test-cohort", STANDARD, "1"), cq_spec("test-cohort", LENDER, "1"), usage={CPU: 3, GPU: 3})
    assert result(nodes)["cq"] == (100, "cpu", True)


def test_usage_with_workload_above_nominal() -> None:
    """TestDominantResourceShare "usage with workload above nominal": the request counts, (1+4-2)*1000/10."""
    nodes = build(cq_spec("test-cohort", STANDARD, "1"), cq_spec("test-cohort", LENDER, "1"), usage={CPU: 1, GPU: 2})
    assert result(nodes, {CPU: 4, GPU: 4}) == {
        "cq": (300, "cpu", True),
        "lending-cq": ZERO_RESULT,
        "test-cohort": ZERO_RESULT,
    }


def test_a_resource_with_zero_lendable() -> None:
    """TestDominantResourceShare "A resource with zero lendable": gpu borrows nothing lendable, cpu dominates."""
    nodes = build(
        cq_spec("test-cohort", {"default": {"cpu": 2, GPU_RESOURCE: {"nominalQuota": "2", "lendingLimit": "0"}}}, "1"),
        cq_spec("test-cohort", {"default": {"cpu": 8, GPU_RESOURCE: {"nominalQuota": "64", "lendingLimit": "0"}}}, "1"),
        usage={CPU: 1, GPU: 1},
    )
    assert result(nodes, {CPU: 4, GPU: 4}) == {
        "cq": (300, "cpu", True),
        "lending-cq": ZERO_RESULT,
        "test-cohort": ZERO_RESULT,
    }


def test_multiple_flavors() -> None:
    """TestDominantResourceShare "multiple flavors": ((15+10-20)+0)*1000/200 (spot under nominal)."""
    nodes = build(
        cq_spec("test-cohort", {"on-demand": {"cpu": 20}, "spot": {"cpu": 80}}, "1"),
        cq_spec("test-cohort", {"default": {"cpu": 100}}, "1"),
        usage={("on-demand", "cpu"): 15, ("spot", "cpu"): 5},
    )
    assert result(nodes, {("on-demand", "cpu"): 10}) == {
        "cq": (25, "cpu", True),
        "lending-cq": ZERO_RESULT,
        "test-cohort": ZERO_RESULT,
    }


@pytest.mark.parametrize(
    ("weight", "expected"),
    [
        ("2", 100),  # "above nominal with integer weight": ((7-5)*1000/10)/2
        ("0.5", 400),  # "above nominal with decimal weight": ((7-5)*1000/10)/(1/2)
    ],
)
def test_above_nominal_with_weight(weight: str, expected: int) -> None:
    """TestDominantResourceShare "above nominal with integer weight" and "... with decimal weight"."""
    nodes = build(
        cq_spec("test-cohort", {"default": {GPU_RESOURCE: 5}}, weight),
        cq_spec("test-cohort", {"default": {GPU_RESOURCE: 5}}, "1"),
        usage={GPU: 7},
    )
    assert result(nodes)["cq"] == (expected, GPU_RESOURCE, True)


def test_above_nominal_with_zero_weight() -> None:
    """TestDominantResourceShare "above nominal with zero weight": a borrowing node of weight 0 reports max int64."""
    nodes = build(
        cq_spec("test-cohort", {"default": {GPU_RESOURCE: 5}}, "0"),
        cq_spec("test-cohort", {"default": {GPU_RESOURCE: 10}}, "1"),
        usage={GPU: 7},
    )
    assert result(nodes) == {
        "cq": (MAX_INT64, GPU_RESOURCE, True),
        "lending-cq": ZERO_RESULT,
        "test-cohort": ZERO_RESULT,
    }
    assert dominant_resource_share(nodes["cq"]).serialized() == "+Inf"


def test_cohort_has_resource_share() -> None:
    """TestDominantResourceShare "cohort has resource share": the child cohort's share is divided by its weight 2."""
    nodes = build(
        cq_spec("child-cohort", {"default": {GPU_RESOURCE: 5}}, "1"),
        cohorts=[
            cohort_obj("child-cohort", parent="root", weight="2"),
            cohort_obj("root", quotas={"default": {GPU_RESOURCE: 45}}),
        ],
        usage={GPU: 10},
    )
    assert result(nodes) == {
        "cq": (100, GPU_RESOURCE, True),  # (5 / 50) * 1000
        "child-cohort": (50, GPU_RESOURCE, True),  # (5 / 50) * 1000 / 2
        "root": ZERO_RESULT,
    }


def test_resource_share_defined_for_resources_only_available_at_the_root_cohort() -> None:
    """TestDominantResourceShare "resource share defined for resources only available at the root cohort"."""
    nodes = build(
        cq_spec("child-cohort", {"default": {GPU_RESOURCE: 0}}, "1"),
        cohorts=[
            cohort_obj("child-cohort", parent="root", weight="2"),
            cohort_obj("root", quotas={"default": {GPU_RESOURCE: 50}}),
        ],
        usage={GPU: 10},
    )
    assert result(nodes) == {
        "cq": (200, GPU_RESOURCE, True),
        "child-cohort": (100, GPU_RESOURCE, True),
        "root": ZERO_RESULT,
    }


def test_resource_share_affected_by_borrowing_limit() -> None:
    """TestDominantResourceShare "resource share affected by borrowing limit": the cohort lends the queue 10, its parent 50."""
    nodes = build(
        cq_spec("child-cohort", {"default": {GPU_RESOURCE: 0}}),
        cohorts=[
            cohort_obj(
                "child-cohort", parent="root", quotas={"default": {GPU_RESOURCE: {"nominalQuota": "0", "borrowingLimit": "10"}}}
            ),
            cohort_obj("root", quotas={"default": {GPU_RESOURCE: 50}}),
        ],
        usage={GPU: 10},
    )
    assert result(nodes) == {
        "cq": (1000, GPU_RESOURCE, True),
        "child-cohort": (200, GPU_RESOURCE, True),
        "root": ZERO_RESULT,
    }


def test_borrowing_against_unlimited_lendable_capacity() -> None:
    """TestDominantResourceShare "borrowing against unlimited lendable capacity (exabyte-scale quota)": a tiny share rounds up to 1."""
    nodes = build(
        cq_spec("test-cohort", {"default": {"cpu": 0}}, "1"),
        cq_spec("test-cohort", {"default": {"cpu": "1E"}}, "1"),
        usage={CPU: 1},
    )
    assert result(nodes) == {"cq": (1, "cpu", True), "lending-cq": ZERO_RESULT, "test-cohort": ZERO_RESULT}


@pytest.mark.parametrize(
    ("usage", "requested", "on_requested", "borrowing"),
    [
        ({CPU: 3}, {CPU: 1}, True, True),  # "borrows on requested flavor"
        ({CPU: 1, GPU: 7}, {CPU: 1}, False, True),  # "borrows on unrequested flavor only"
        ({CPU: 3, GPU: 7}, {GPU: 1}, True, True),  # "borrows on both, requests one"
        ({CPU: 1, GPU: 2}, {CPU: 1}, False, False),  # "no borrowing"
        ({CPU: 3}, None, False, True),  # "nil requestedFRs"
    ],
)
def test_is_borrowing_on(
    usage: dict[FlavorResource, int], requested: dict[FlavorResource, int] | None, on_requested: bool, borrowing: bool
) -> None:
    """TestIsBorrowingOn: borrowing in a pair the request uses, versus borrowing at all."""
    nodes = build(cq_spec("cohort", STANDARD, "1"), cq_spec("cohort", LENDER), usage=usage)
    drs = dominant_resource_share(nodes["cq"])
    assert drs.borrowing is borrowing
    req = None if requested is None else {fr: D(v) for fr, v in requested.items()}
    assert drs.borrowing_on(req) is on_requested


@pytest.mark.parametrize(
    ("drs", "text"),
    [
        (DRS(weight=D(0), unweighted_ratio=D(100)), "+Inf"),  # "zero weight returning Inf"
        (DRS(weight=D(1), unweighted_ratio=D(0)), "0"),  # "zero unweighted ratio returns 0"
        (DRS(weight=D(2), unweighted_ratio=D(400)), "200"),  # "regular integer division"
        (DRS(weight=D(4), unweighted_ratio=D(10)), "2.5"),  # "decimal division"
    ],
)
def test_precise_weighted_share_serialized(drs: DRS, text: str) -> None:
    """TestPreciseWeightedShareSerialized."""
    assert drs.serialized() == text


def test_compare_drs_puts_zero_weight_borrowers_above_everything() -> None:
    """CompareDRS: borrowing with weight 0 is above any finite share; among themselves, by unweighted share."""
    finite = DRS(unweighted_ratio=D(900))
    zero_small = DRS(weight=D(0), unweighted_ratio=D(1))
    zero_large = DRS(weight=D(0), unweighted_ratio=D(2))
    assert compare_drs(zero_small, finite) == 1
    assert compare_drs(finite, zero_small) == -1
    assert compare_drs(zero_small, zero_large) == -1
    assert compare_drs(DRS(), DRS(weight=D(0))) == 0  # weight 0 without borrowing is share 0
    assert compare_drs(NEGATIVE_DRS, DRS()) == -1


def test_a_cohort_weight_change_reaches_its_node() -> None:
    """Our cache: a Cohort object's ``fairSharing.weight`` updates the cohort node (and 1 when removed)."""
    cohorts: dict[str, Cohort] = {}
    tree = QuotaTree(cohorts)
    node, _ = tree.put_cluster_queue("cq", cq_spec("team", STANDARD, "3"))
    assert node.weight == 3
    assert node.parent is not None and node.parent.weight == 1
    cohorts["team"] = cohort_obj("team", weight="0.5")
    tree.reshape_cohort("team")
    assert node.parent.weight == D("0.5")
    del cohorts["team"]
    tree.remove_cohort("team")
    assert node.parent.weight == 1
