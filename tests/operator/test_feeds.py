"""The feeds' parsing: what of a watched object the cache gets."""

from __future__ import annotations

import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Histogram

from multikueue.core.cache import Cache
from multikueue.api.meta import without_managed_fields
from multikueue.operator.feeds import WorkloadFeed
from multikueue.runtime import metrics

pytestmark = pytest.mark.unit


def test_managed_fields_are_dropped_before_parsing_and_the_body_is_left_alone() -> None:
    body = {
        "kind": "Workload",
        "metadata": {"name": "w", "labels": {"a": "b"}, "managedFields": [{"manager": "kueue", "fieldsV1": {}}]},
        "spec": {"queueName": "q"},
    }
    slim = without_managed_fields(body)
    assert slim == {"kind": "Workload", "metadata": {"name": "w", "labels": {"a": "b"}}, "spec": {"queueName": "q"}}
    assert "managedFields" in body["metadata"]  # kopf's body is not changed
    plain = {"metadata": {"name": "w"}}
    assert without_managed_fields(plain) is plain  # nothing to drop: no copy


def _workload(rv: str, **status: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns", "resourceVersion": rv, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}]},
        "status": status,
    }


def _condition(type_: str, reason: str) -> dict[str, Any]:
    return {"type": type_, "status": "True", "reason": reason, "message": "", "lastTransitionTime": "2026-01-01T00:00:01Z"}


def _observed() -> tuple[float, float]:
    """(count, sum) of the quota release delays observed so far."""
    [metric] = metrics.QUOTA_RELEASE_DELAY.collect()
    values = {s.name: s.value for s in metric.samples}
    return values["mkpy_quota_release_delay_seconds_count"], values["mkpy_quota_release_delay_seconds_sum"]


def test_an_event_that_ends_a_workloads_quota_observes_how_long_it_waited_for_the_loop() -> None:
    cache = Cache()
    feed = WorkloadFeed(None, cache, lambda: None, changed=lambda key: None, deleted=lambda key: None)  # type: ignore[arg-type]
    admission = {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1, "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": "1"}}]}
    reserved = _workload("1", admission=admission, conditions=[_condition("QuotaReserved", "QuotaReserved")])
    feed.informer.handler("ADDED", reserved)  # a listing: no read time, nothing to observe
    assert cache.holds_quota(("ns", "w"))
    count, total = _observed()

    finished = _workload("2", admission=admission, conditions=[_condition("QuotaReserved", "QuotaReserved"), _condition("Finished", "Succeeded")])
    feed.informer.event_read_at = time.monotonic() - 0.05  # read off the watch 50 ms ago
    feed.informer.handler("MODIFIED", finished)
    assert not cache.holds_quota(("ns", "w"))
    after_count, after_total = _observed()
    assert after_count == count + 1 and after_total - total >= 0.05

    feed.informer.handler("MODIFIED", _workload("3", admission=admission, conditions=finished["status"]["conditions"]))
    assert _observed()[0] == after_count  # held nothing any more: nothing released


def test_the_release_summary_reads_the_share_within_100ms_and_the_percentile_buckets() -> None:
    histogram = Histogram("t_release_seconds", "test", buckets=metrics.QUOTA_RELEASE_BUCKETS, registry=CollectorRegistry())
    assert metrics.quota_release_summary(histogram) == {"count": 0}
    for value in [0.002] * 60 + [0.04] * 38 + [0.3, 2.0]:
        histogram.observe(value)
    assert metrics.quota_release_summary(histogram) == {"count": 100, "within_100ms": 0.98, "p50_le": 0.005, "p99_le": 0.5}
