"""Quota arithmetic: nominal quota, cohort borrowing, borrowingLimit and lendingLimit."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multikueue.api.clusterqueue import ClusterQueue
from multikueue.core.quota import (
    QuotaNode,
    ResourceQuota,
    above_quota,
    add_usage,
    available,
    borrows,
    guaranteed,
    potential_available,
    quotas_from_groups,
    refresh_tree,
    remove_usage,
    set_usage,
)

pytestmark = pytest.mark.unit

CPU = ("default-flavor", "cpu")
D = Decimal


def queue(name: str, nominal: int, borrowing: int | None = None, lending: int | None = None) -> QuotaNode:
    quota = ResourceQuota(D(nominal), None if borrowing is None else D(borrowing), None if lending is None else D(lending))
    return QuotaNode(name, is_cohort=False, quotas={CPU: quota})


def cohort(*members: QuotaNode, nominal: int = 0) -> QuotaNode:
    node = QuotaNode("cohort", is_cohort=True, quotas={CPU: ResourceQuota(D(nominal))} if nominal else None)
    for member in members:
        member.set_parent(node)
    refresh_tree(node)
    return node


def fits(node: QuotaNode, amount: int) -> bool:
    return D(amount) <= available(node, CPU)


def test_without_a_cohort_nominal_quota_is_the_limit() -> None:
    cq = queue("a", 9)
    refresh_tree(cq)
    add_usage(cq, CPU, D(8))
    assert available(cq, CPU) == 1
    assert potential_available(cq, CPU) == 9
    assert fits(cq, 1) and not fits(cq, 2)
    assert not borrows(cq, CPU, D(20))  # a queue without a cohort never borrows


def test_cohort_members_borrow_unused_quota() -> None:
    a, b = queue("a", 5), queue("b", 5)
    cohort(a, b)
    assert available(a, CPU) == 10
    assert borrows(a, CPU, D(6)) and not borrows(a, CPU, D(5))
    add_usage(a, CPU, D(7))  # a borrows 2 from b
    assert available(b, CPU) == 3
    assert fits(b, 3) and not fits(b, 4)
    remove_usage(a, CPU, D(7))
    assert available(b, CPU) == 10


def test_borrowing_limit_caps_what_a_member_takes_from_the_cohort() -> None:
    a, b = queue("a", 5, borrowing=2), queue("b", 5)
    cohort(a, b)
    assert available(a, CPU) == 7
    assert potential_available(a, CPU) == 7
    add_usage(a, CPU, D(6))
    assert available(a, CPU) == 1
    assert available(b, CPU) == 4


def test_lending_limit_protects_the_lenders_guaranteed_part() -> None:
    a, b = queue("a", 5), queue("b", 6, lending=2)
    cohort(a, b)
    assert guaranteed(b, CPU) == 4
    # a can use its own 5 plus the 2 b lends; b's other 4 are b's alone.
    assert available(a, CPU) == 7
    assert potential_available(a, CPU) == 7
    add_usage(a, CPU, D(7))
    assert available(b, CPU) == 4
    assert fits(b, 4) and not fits(b, 5)
    remove_usage(a, CPU, D(7))
    # b may still borrow all of a's unused quota.
    assert available(b, CPU) == 11


def test_lender_usage_within_its_guaranteed_part_does_not_reduce_the_pool() -> None:
    a, b = queue("a", 5), queue("b", 6, lending=2)
    root = cohort(a, b)
    add_usage(b, CPU, D(3))
    assert root.usage[CPU] == 0
    assert available(a, CPU) == 7
    add_usage(b, CPU, D(3))  # 6 used: 2 of them from the pool
    assert root.usage[CPU] == 2
    assert available(a, CPU) == 5
    remove_usage(b, CPU, D(6))
    assert root.usage[CPU] == 0


def test_the_flat_formula_of_the_module_docstring() -> None:
    """usage_c + q <= N_c + B_c and sum(max(0, u_m - g_m)) <= sum(N_m - g_m)."""
    members = [queue("a", 4, borrowing=3), queue("b", 6, lending=2), queue("c", 2, lending=0)]
    cohort(*members)
    usages = {"a": 2, "b": 5, "c": 1}
    for member in members:
        add_usage(member, CPU, D(usages[member.name]))
    a = members[0]
    pool = sum(m.quotas[CPU].nominal - guaranteed(m, CPU) for m in members)
    for q in range(0, 12):
        used = dict(usages, a=usages["a"] + q)
        within_limit = used["a"] <= 4 + 3
        taken = sum(max(D(0), D(used[m.name]) - guaranteed(m, CPU)) for m in members)
        assert fits(a, q) == (within_limit and taken <= pool), q


def test_cohort_with_its_own_quota() -> None:
    a = queue("a", 2)
    cohort(a, nominal=3)  # a joins a cohort with quota of its own
    assert available(a, CPU) == 5
    assert potential_available(a, CPU) == 5


def test_hierarchical_cohorts() -> None:
    a, b = queue("a", 2), queue("b", 2)
    child = QuotaNode("child", is_cohort=True)
    root = QuotaNode("root", is_cohort=True, quotas={CPU: ResourceQuota(D(4))})
    a.set_parent(child)
    child.set_parent(root)
    b.set_parent(root)
    refresh_tree(root)
    assert available(a, CPU) == 8
    add_usage(b, CPU, D(5))
    assert available(a, CPU) == 3
    assert root.usage[CPU] == 5


def test_cycles_are_refused() -> None:
    x, y = QuotaNode("x", is_cohort=True), QuotaNode("y", is_cohort=True)
    assert y.set_parent(x)
    assert not x.set_parent(y)
    assert x.parent is None


def test_quotas_from_cluster_queue_groups() -> None:
    cq = ClusterQueue.from_k8s(
        {
            "metadata": {"name": "cq"},
            "spec": {
                "cohortName": "team",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 9, "borrowingLimit": "1"},
                                    {"name": "memory", "nominalQuota": "36Gi", "lendingLimit": "4Gi"},
                                ],
                            }
                        ],
                    }
                ],
            },
        }
    )
    quotas = quotas_from_groups(cq.spec.resource_groups)
    assert quotas[CPU] == ResourceQuota(D(9), D(1), None)
    assert quotas[("default-flavor", "memory")] == ResourceQuota(D(36 * 2**30), None, D(4 * 2**30))


# --- the index of children above their quota ---------------------------------------------------------------

MEM = ("default-flavor", "memory")


def _brute_force_above(node: QuotaNode) -> dict[tuple[str, str], set[str]]:
    found: dict[tuple[str, str], set[str]] = {}
    for child in node.children:
        for fr in (CPU, MEM):
            if child.usage.get(fr, D(0)) > child.subtree_quota.get(fr, D(0)):
                found.setdefault(fr, set()).add(child.name)
    return found


def _indexed(node: QuotaNode) -> dict[tuple[str, str], set[str]]:
    return {fr: {c.name for c in members} for fr, members in node.above.items() if members}


_operations = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "move", "save-restore"]),
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from([CPU, MEM]),
        st.integers(1, 7),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(operations=_operations)
def test_the_index_of_children_above_quota_follows_every_change(
    operations: list[tuple[str, str, tuple[str, str], int]],
) -> None:
    """After any sequence of usage changes, moves between cohorts (with the refresh the cache does) and saved
    entries put back, each cohort's index is exactly its children above their subtree quota."""
    top = QuotaNode("top", is_cohort=True)
    left, right = QuotaNode("left", is_cohort=True), QuotaNode("right", is_cohort=True)
    for sub in (left, right):
        sub.set_parent(top)
    leaves = {
        "a": queue("a", 3, lending=1), "b": queue("b", 2), "c": queue("c", 4, borrowing=2), "d": queue("d", 1, lending=0),
    }  # fmt: skip
    for name, leaf in leaves.items():
        leaf.quotas = {**leaf.quotas, MEM: ResourceQuota(D(2))}
        leaf.set_parent(left if name in "ab" else right)
    refresh_tree(top)
    held: dict[str, dict[tuple[str, str], D]] = {name: {} for name in leaves}
    for op, name, fr, amount in operations:
        leaf = leaves[name]
        if op == "add":
            add_usage(leaf, fr, D(amount))
            held[name][fr] = held[name].get(fr, D(0)) + amount
        elif op == "remove" and held[name].get(fr, D(0)) >= amount:
            remove_usage(leaf, fr, D(amount))
            held[name][fr] -= amount
        elif op == "move":
            leaf.set_parent(right if leaf.parent is left else left)
            refresh_tree(top)
        elif op == "save-restore":  # what a preemption simulation does: change, then put every entry back
            path, saved = [], []
            node: QuotaNode | None = leaf
            while node is not None:
                path.append(node)
                saved.append(node.usage.get(fr))
                node = node.parent
            add_usage(leaf, fr, D(amount))
            for node, before in zip(path, saved, strict=True):
                set_usage(node, fr, before)
        for cohort_node in (top, left, right):
            assert _indexed(cohort_node) == _brute_force_above(cohort_node), (op, name, cohort_node.name)
    assert {c.name for c in above_quota(top, [CPU, MEM])} == {n for names in _brute_force_above(top).values() for n in names}
