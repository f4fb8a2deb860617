"""When a new leader's cache has caught up with the API server (pure comparisons of resourceVersions)."""

from __future__ import annotations

import pytest

from multikueue.operator.wiring import lagging_workloads, unlisted_workloads

pytestmark = pytest.mark.unit


def test_a_workload_missing_or_older_in_the_cache_is_lagging() -> None:
    listed = {("ns", "same"): "10", ("ns", "newer"): "10", ("ns", "older"): "10", ("ns", "missing"): "10"}
    cached = {("ns", "same"): "10", ("ns", "newer"): "12", ("ns", "older"): "9"}
    assert lagging_workloads(listed, cached) == [("ns", "missing"), ("ns", "older")]


def test_versions_that_are_not_revisions_count_only_when_equal() -> None:
    listed = {("ns", "a"): "x1", ("ns", "b"): "x1", ("ns", "c"): None}
    cached = {("ns", "a"): "x1", ("ns", "b"): "x2", ("ns", "c"): None}
    assert lagging_workloads(listed, cached) == [("ns", "b"), ("ns", "c")]


def test_cached_workloads_the_listing_lacks_are_the_ones_to_look_up() -> None:
    listed = [("ns", "a")]
    cached = [("ns", "b"), ("ns", "a"), ("other", "a")]
    assert unlisted_workloads(listed, cached) == [("ns", "b"), ("other", "a")]
