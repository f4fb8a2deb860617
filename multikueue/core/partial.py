"""Partial admission: the largest pod counts, down to each pod set's ``minCount``, that can be admitted.

Upstream Kueue (feature gate ``PartialAdmission``, on by default) admits a
Workload with fewer pods when the full counts cannot be admitted and some pod
set declares a ``minCount`` below its ``count`` (for a batch Job, the
annotation ``kueue.x-k8s.io/job-min-parallelism``). The Job then runs with
the admitted ``parallelism``.

Why a one-dimensional search: every pod set shrinks *together*. With
``delta[i] = count[i] - minCount[i]`` and ``D = sum(delta)``, step ``k`` of
``0..D`` gives pod set ``i`` the count ``count[i] - delta[i] * k // D``;
step 0 is the full Workload and step ``D`` every pod set at its minimum.
Quota needed only falls as ``k`` grows, so "admissible at step k" is
monotone and a bisection finds the smallest admissible step, the largest
Workload, in ``log2(D)`` flavor assignments. This is upstream's reduction
(``flavorassigner.PodSetReducer``), so the counts a Workload gets are the
ones upstream would give it.

Pure: the caller passes the test (``attempt``), which assigns flavors (and,
when it allows preemption, checks that victims exist); nothing here touches
the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["can_be_partially_admitted", "counts_at_step", "reduce_counts"]

T = TypeVar("T")


def can_be_partially_admitted(counts: Sequence[int], min_counts: Sequence[int | None]) -> bool:
    """Whether some pod set may run with fewer pods than it asks for (upstream's ``CanBePartiallyAdmitted``)."""
    return any(m is not None and m < c for c, m in zip(counts, min_counts, strict=True))


def counts_at_step(counts: Sequence[int], min_counts: Sequence[int | None], step: int) -> list[int]:
    """The pod counts at ``step`` of the reduction (0: full counts; the total delta: every minimum)."""
    deltas = [c - (c if m is None else m) for c, m in zip(counts, min_counts, strict=True)]
    total = sum(deltas)
    if total <= 0:
        return list(counts)
    return [c - d * step // total for c, d in zip(counts, deltas, strict=True)]


def reduce_counts(
    counts: Sequence[int], min_counts: Sequence[int | None], attempt: Callable[[list[int]], T | None]
) -> T | None:
    """The result of ``attempt`` for the largest reduced counts it accepts, or ``None`` when none is accepted.

    ``attempt(counts)`` returns something (an assignment) when the Workload
    can be admitted with ``counts``, else ``None``. The full counts are not
    tried: the caller asks only after they failed. ``attempt`` is called
    about ``log2(total delta)`` times.
    """
    total = sum(c - (c if m is None else m) for c, m in zip(counts, min_counts, strict=True))
    if total <= 0:
        return None
    low, high = 1, total  # the answer is the smallest accepted step in [low, high], if any
    best: T | None = None
    while low <= high:
        step = (low + high) // 2
        found = attempt(counts_at_step(counts, min_counts, step))
        if found is not None:
            best = found
            high = step - 1
        else:
            low = step + 1
    return best
