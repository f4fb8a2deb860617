"""Flavor assignment: flavor order, node labels, taints, pod sets, whenCanBorrow, messages."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from multikueue.api.clusterqueue import ClusterQueue
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import PodSet
from multikueue.core.flavors import FlavorAssignment, PodSetRequest, assign_flavors, resource_groups_of
from multikueue.core.quota import QuotaNode, ResourceQuota, add_usage, quotas_from_groups, refresh_tree

pytestmark = pytest.mark.unit


def flavor(name: str, labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None) -> ResourceFlavor:
    spec: dict[str, Any] = {}
    if labels:
        spec["nodeLabels"] = labels
    if taints:
        spec["nodeTaints"] = taints
    return ResourceFlavor.from_k8s({"metadata": {"name": name}, "spec": spec})


def cluster_queue(groups: list[tuple[list[str], list[tuple[str, dict[str, Any]]]]], **spec: Any) -> ClusterQueue:
    """A ClusterQueue from ``[(covered resources, [(flavor, {resource: nominal quota})])]``."""
    return ClusterQueue.from_k8s(
        {
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": covered,
                        "flavors": [
                            {"name": name, "resources": [{"name": r, "nominalQuota": q} for r, q in quotas.items()]}
                            for name, quotas in flavors
                        ],
                    }
                    for covered, flavors in groups
                ],
                **spec,
            },
        }
    )


def pod_set(name: str = "main", count: int = 1, pod_spec_extra: dict[str, Any] | None = None, **requests: Any):
    resources = {"nvidia.com/gpu" if k == "gpu" else k: v for k, v in requests.items()}
    spec = {"containers": [{"name": "c", "image": "x", "resources": {"requests": resources}}], **(pod_spec_extra or {})}
    return PodSetRequest.from_pod_set(PodSet.model_validate({"name": name, "count": count, "template": {"spec": spec}}))


class Setup:
    """A ClusterQueue (optionally in a cohort with a lender) and its flavors."""

    def __init__(
        self, cq: ClusterQueue, flavors: list[ResourceFlavor], lender_nominal: dict[Any, ResourceQuota] | None = None
    ) -> None:
        self.cq = cq
        self.flavors = {f.name: f for f in flavors}
        self.node = QuotaNode("cq", is_cohort=False, quotas=quotas_from_groups(cq.spec.resource_groups))
        if lender_nominal is not None:
            root = QuotaNode("cohort", is_cohort=True)
            lender = QuotaNode("lender", is_cohort=False, quotas=lender_nominal)
            self.node.set_parent(root)
            lender.set_parent(root)
            refresh_tree(root)
        else:
            refresh_tree(self.node)

    def assign(self, *pod_sets: PodSetRequest) -> FlavorAssignment:
        return assign_flavors(
            pod_sets,
            resource_groups_of(self.cq.spec),
            self.flavors,
            self.node,
            self.cq.spec.flavor_fungibility.when_can_borrow,
        )


def two_flavors(**spec: Any) -> ClusterQueue:
    return cluster_queue(
        [(["cpu"], [("on-demand", {"cpu": 4}), ("spot", {"cpu": 8})])],
        **spec,
    )


def test_first_flavor_that_fits_wins_in_order() -> None:
    setup = Setup(two_flavors(), [flavor("on-demand"), flavor("spot")])
    result = setup.assign(pod_set(cpu="3"))
    assert result.fits
    assert result.pod_sets[0].flavors == {"cpu": "on-demand"}
    assert result.usage == {("on-demand", "cpu"): Decimal(3)}

    result = setup.assign(pod_set(cpu="6"))
    assert result.pod_sets[0].flavors == {"cpu": "spot"}


def test_message_when_nothing_fits() -> None:
    setup = Setup(two_flavors(), [flavor("on-demand"), flavor("spot")])
    add_usage(setup.node, ("on-demand", "cpu"), Decimal(3))
    add_usage(setup.node, ("spot", "cpu"), Decimal(7))
    result = setup.assign(pod_set(cpu="2"))
    assert not result.fits
    assert result.message == (
        "couldn't assign flavors to pod set main: "
        "insufficient unused quota for cpu in flavor on-demand, 1 more needed, "
        "insufficient unused quota for cpu in flavor spot, 1 more needed"
    )


def test_request_above_maximum_capacity() -> None:
    setup = Setup(cluster_queue([(["cpu"], [("default-flavor", {"cpu": 9})])]), [flavor("default-flavor")])
    result = setup.assign(pod_set(cpu="10"))
    assert result.message == (
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default-flavor, "
        "previously considered podsets requests (0) + current podset request (10) > maximum capacity (9)"
    )


def test_node_selector_against_flavor_labels() -> None:
    flavors = [flavor("on-demand", {"instance": "on-demand"}), flavor("spot", {"instance": "spot"})]
    setup = Setup(two_flavors(), flavors)
    result = setup.assign(pod_set(cpu="1", pod_spec_extra={"nodeSelector": {"instance": "spot"}}))
    assert result.pod_sets[0].flavors == {"cpu": "spot"}
    # Keys the flavor does not label are ignored.
    result = setup.assign(pod_set(cpu="1", pod_spec_extra={"nodeSelector": {"zone": "a"}}))
    assert result.pod_sets[0].flavors == {"cpu": "on-demand"}
    result = setup.assign(pod_set(cpu="1", pod_spec_extra={"nodeSelector": {"instance": "gpu"}}))
    assert result.message == (
        "couldn't assign flavors to pod set main: "
        "flavor on-demand doesn't match node affinity, flavor spot doesn't match node affinity"
    )


def affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": list(t)} for t in terms]
                }
            }
        }
    }


def test_required_node_affinity() -> None:
    flavors = [flavor("on-demand", {"instance": "on-demand"}), flavor("spot", {"instance": "spot"})]
    setup = Setup(two_flavors(), flavors)
    not_on_demand = affinity([{"key": "instance", "operator": "NotIn", "values": ["on-demand"]}])
    assert setup.assign(pod_set(cpu="1", pod_spec_extra=not_on_demand)).pod_sets[0].flavors == {"cpu": "spot"}
    # Several terms: any one that agrees is enough.
    either = affinity(
        [{"key": "instance", "operator": "In", "values": ["gpu"]}],
        [{"key": "instance", "operator": "In", "values": ["spot"]}],
    )
    assert setup.assign(pod_set(cpu="1", pod_spec_extra=either)).pod_sets[0].flavors == {"cpu": "spot"}
    missing = affinity([{"key": "instance", "operator": "DoesNotExist"}])
    assert "flavor spot doesn't match node affinity" in setup.assign(pod_set(cpu="1", pod_spec_extra=missing)).message
    exists = affinity([{"key": "instance", "operator": "Exists"}])
    assert setup.assign(pod_set(cpu="1", pod_spec_extra=exists)).pod_sets[0].flavors == {"cpu": "on-demand"}


def test_taints_need_tolerations() -> None:
    spot = flavor("spot", taints=[{"key": "instance", "value": "spot", "effect": "NoSchedule"}])
    setup = Setup(cluster_queue([(["cpu"], [("spot", {"cpu": 8})])]), [spot])
    result = setup.assign(pod_set(cpu="1"))
    assert result.message == (
        "couldn't assign flavors to pod set main: untolerated taint {instance spot NoSchedule <nil>} in flavor spot"
    )
    tolerate = {"tolerations": [{"key": "instance", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}]}
    assert setup.assign(pod_set(cpu="1", pod_spec_extra=tolerate)).fits
    tolerate_all = {"tolerations": [{"operator": "Exists"}]}
    assert setup.assign(pod_set(cpu="1", pod_spec_extra=tolerate_all)).fits
    wrong_value = {"tolerations": [{"key": "instance", "operator": "Equal", "value": "on-demand"}]}
    assert not setup.assign(pod_set(cpu="1", pod_spec_extra=wrong_value)).fits


def test_a_pod_sets_placement_is_read_again_when_the_flavor_changes() -> None:
    """The pod set keeps its verdict per flavor object: the same pod set against a ResourceFlavor that gained
    a taint (a new object from the watch) is refused, and admitted again once the taint is gone."""
    request = pod_set(cpu="1")
    plain = Setup(cluster_queue([(["cpu"], [("spot", {"cpu": 8})])]), [flavor("spot")])
    assert plain.assign(request).fits
    assert plain.assign(request).fits  # the kept verdict
    tainted = Setup(
        cluster_queue([(["cpu"], [("spot", {"cpu": 8})])]),
        [flavor("spot", taints=[{"key": "instance", "value": "spot", "effect": "NoSchedule"}])],
    )
    assert "untolerated taint" in tainted.assign(request).message
    assert plain.assign(request).fits


def test_prefer_no_schedule_taints_do_not_block() -> None:
    soft = flavor("soft", taints=[{"key": "k", "value": "v", "effect": "PreferNoSchedule"}])
    setup = Setup(cluster_queue([(["cpu"], [("soft", {"cpu": 8})])]), [soft])
    assert setup.assign(pod_set(cpu="1")).fits


def test_multiple_pod_sets_accumulate_in_the_same_flavor() -> None:
    setup = Setup(two_flavors(), [flavor("on-demand"), flavor("spot")])
    result = setup.assign(pod_set("driver", cpu="2"), pod_set("workers", count=2, cpu="1"), pod_set("extra", cpu="1"))
    assert [p.flavors for p in result.pod_sets] == [{"cpu": "on-demand"}, {"cpu": "on-demand"}, {"cpu": "spot"}]
    assert [p.resource_usage for p in result.pod_sets] == [{"cpu": 2}, {"cpu": 2}, {"cpu": 1}]
    assert result.usage == {("on-demand", "cpu"): Decimal(4), ("spot", "cpu"): Decimal(1)}


def test_previous_pod_sets_appear_in_the_capacity_message() -> None:
    setup = Setup(cluster_queue([(["cpu"], [("default-flavor", {"cpu": 4})])]), [flavor("default-flavor")])
    result = setup.assign(pod_set("driver", cpu="3"), pod_set("workers", count=2, cpu="1"))
    assert result.message == (
        "couldn't assign flavors to pod set workers: insufficient quota for cpu in flavor default-flavor, "
        "previously considered podsets requests (3) + current podset request (2) > maximum capacity (4)"
    )


def test_resource_group_resources_get_the_same_flavor() -> None:
    cq = cluster_queue(
        [(["cpu", "memory"], [("small", {"cpu": 4, "memory": "1Gi"}), ("large", {"cpu": 4, "memory": "16Gi"})])]
    )
    setup = Setup(cq, [flavor("small"), flavor("large")])
    result = setup.assign(pod_set(cpu="1", memory="2Gi"))
    assert result.pod_sets[0].flavors == {"cpu": "large", "memory": "large"}
    assert result.message == ""


def test_uncovered_resource_means_no_fit() -> None:
    setup = Setup(two_flavors(), [flavor("on-demand"), flavor("spot")])
    result = setup.assign(pod_set(cpu="1", gpu="1"))
    assert result.message == "couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in ClusterQueue"
    # A zero request for an uncovered resource is irrelevant.
    assert setup.assign(pod_set(cpu="1", gpu="0")).fits


def test_missing_flavor_is_reported() -> None:
    setup = Setup(two_flavors(), [flavor("spot")])
    assert setup.assign(pod_set(cpu="6")).pod_sets[0].flavors == {"cpu": "spot"}
    setup = Setup(two_flavors(), [])
    assert setup.assign(pod_set(cpu="1")).message == (
        "couldn't assign flavors to pod set main: flavor on-demand not found, flavor spot not found"
    )


def test_pods_resource_counts_pods() -> None:
    cq = cluster_queue([(["cpu", "pods"], [("default-flavor", {"cpu": 100, "pods": 3})])])
    setup = Setup(cq, [flavor("default-flavor")])
    result = setup.assign(pod_set(count=3, cpu="1"))
    assert result.pod_sets[0].resource_usage == {"cpu": Decimal(3), "pods": Decimal(3)}
    assert not setup.assign(pod_set(count=4, cpu="1")).fits


def borrowing_setup(when_can_borrow: str) -> Setup:
    """The queue (4 on-demand, 8 spot) in a cohort with a lender of 10 of each."""
    cq = two_flavors(cohortName="team", flavorFungibility={"whenCanBorrow": when_can_borrow})
    lender = {("on-demand", "cpu"): ResourceQuota(Decimal(10)), ("spot", "cpu"): ResourceQuota(Decimal(10))}
    return Setup(cq, [flavor("on-demand"), flavor("spot")], lender_nominal=lender)


def test_may_stop_search_takes_the_first_flavor_even_if_it_borrows() -> None:
    setup = borrowing_setup("MayStopSearch")
    result = setup.assign(pod_set(cpu="6"))
    assert result.pod_sets[0].flavors == {"cpu": "on-demand"}
    assert result.borrows


def test_try_next_flavor_prefers_a_flavor_without_borrowing() -> None:
    setup = borrowing_setup("TryNextFlavor")
    result = setup.assign(pod_set(cpu="6"))
    assert result.pod_sets[0].flavors == {"cpu": "spot"}
    assert not result.borrows
    # When every flavor needs borrowing, the first one that fits is taken.
    result = setup.assign(pod_set(cpu="9"))
    assert result.pod_sets[0].flavors == {"cpu": "on-demand"}
    assert result.borrows


def test_to_admission() -> None:
    setup = Setup(two_flavors(), [flavor("on-demand"), flavor("spot")])
    admission = setup.assign(pod_set("main", count=2, cpu="500m")).to_admission("cq")
    assert admission.to_dict() == {
        "clusterQueue": "cq",
        "podSetAssignments": [
            {"name": "main", "flavors": {"cpu": "on-demand"}, "resourceUsage": {"cpu": "1"}, "count": 2}
        ],
    }


def test_preemption_mode_takes_the_first_flavor_that_only_lacks_unused_quota() -> None:
    setup = Setup(two_flavors(), [flavor("on-demand"), flavor("spot")])
    add_usage(setup.node, ("on-demand", "cpu"), Decimal(3))
    add_usage(setup.node, ("spot", "cpu"), Decimal(7))
    request = pod_set(cpu="6")  # above on-demand's capacity (4), within spot's (8)
    plain = setup.assign(request)
    assert not plain.fits and not plain.preemptible and plain.pod_sets == ()
    preempting = assign_flavors(
        [request], resource_groups_of(setup.cq.spec), setup.flavors, setup.node, preemption=True
    )
    assert not preempting.fits and preempting.preemptible
    assert preempting.message == plain.message, "the Workload is told why it does not fit now"
    assert preempting.pod_sets[0].flavors == {"cpu": "spot"}
    assert preempting.usage == {("spot", "cpu"): Decimal(6)}
    # Above every flavor's capacity: nothing to preempt for.
    too_big = assign_flavors([pod_set(cpu="9")], resource_groups_of(setup.cq.spec), setup.flavors, setup.node, preemption=True)
    assert not too_big.preemptible
