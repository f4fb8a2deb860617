"""The partial-admission reduction (upstream's ``PodSetReducer``): steps, bisection, and its edges."""

from __future__ import annotations

import pytest

from multikueue.core.partial import can_be_partially_admitted, counts_at_step, reduce_counts

pytestmark = pytest.mark.unit


def test_only_a_pod_set_with_min_count_below_count_can_shrink() -> None:
    assert can_be_partially_admitted([4, 3], [None, 2])
    assert not can_be_partially_admitted([4, 3], [None, None])
    assert not can_be_partially_admitted([4], [4])


def test_steps_shrink_every_variable_pod_set_together() -> None:
    counts, mins = [20, 30, 15], [None, 10, 5]
    assert counts_at_step(counts, mins, 0) == [20, 30, 15]
    assert counts_at_step(counts, mins, 15) == [20, 20, 10]
    assert counts_at_step(counts, mins, 30) == [20, 10, 5]
    assert counts_at_step(counts, mins, 14) == [20, 21, 11], "integer division rounds each delta down"


@pytest.mark.parametrize("capacity", [10, 11, 23, 37, 49])
def test_the_largest_admissible_counts_are_found(capacity: int) -> None:
    tried: list[list[int]] = []

    def attempt(counts: list[int]) -> list[int] | None:
        tried.append(counts)
        return counts if sum(counts) <= capacity else None

    assert reduce_counts([50], [10], attempt) == [min(capacity, 50)]
    assert len(tried) <= 6, "a bisection over 40 steps"
    assert [50] not in tried, "the full counts are the caller's first try, not repeated"


def test_nothing_when_even_the_minimum_is_refused_or_nothing_can_shrink() -> None:
    assert reduce_counts([50], [10], lambda counts: None) is None
    assert reduce_counts([5, 5], [None, 5], lambda counts: counts) is None
