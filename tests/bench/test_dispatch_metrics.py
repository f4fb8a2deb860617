"""The pure parts of ``bench/_dispatch_metrics.py``: the apiserver's request counts and a process's CPU ticks.

The requests-per-Job figure is compared against upstream's manager, so its
parse is checked on a real ``/metrics`` excerpt: subresources kept apart,
codes and scopes summed, the streaming verbs left out of the total.
"""

from __future__ import annotations

import pytest

from multikueue.dev.pytest_plugin import bench_module

pytestmark = pytest.mark.unit


m = bench_module("_dispatch_metrics")

METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 100
apiserver_request_total{code="409",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kueue.x-k8s.io",resource="workloads",scope="resource",subresource="status",verb="PATCH",version="v1beta2"} 250
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kueue.x-k8s.io",resource="workloads",scope="resource",subresource="",verb="PATCH",version="v1beta2"} 100
apiserver_request_total{code="200",component="apiserver",dry_run="",group="batch",resource="jobs",scope="namespace",subresource="",verb="LIST",version="v1"} 2
apiserver_request_total{code="0",component="apiserver",dry_run="",group="batch",resource="jobs",scope="namespace",subresource="",verb="WATCH",version="v1"} 7
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 103
"""


def test_counts_are_summed_by_verb_and_resource_with_subresources_apart() -> None:
    counts = m.parse_request_totals(METRICS)
    assert counts == {
        ("POST", "jobs"): 103,
        ("PATCH", "workloads/status"): 250,
        ("PATCH", "workloads"): 100,
        ("LIST", "jobs"): 2,
        ("WATCH", "jobs"): 7,
    }


def test_the_total_leaves_out_watches_but_counts_plain_lists() -> None:
    counts = m.parse_request_totals(METRICS)
    assert m.requests_total(counts) == 103 + 250 + 100 + 2
    assert m.by_verb(counts) == {"PATCH": 350, "POST": 103, "LIST": 2}


def test_delta_counts_only_what_happened_between_scrapes() -> None:
    before = {("POST", "jobs"): 3.0, ("LIST", "jobs"): 2.0}
    after = {("POST", "jobs"): 103.0, ("LIST", "jobs"): 2.0, ("DELETE", "workloads"): 5.0}
    assert m.delta(before, after) == {("POST", "jobs"): 100.0, ("DELETE", "workloads"): 5.0}


def test_the_table_is_per_job_largest_first_above_the_floor() -> None:
    counts = {("PATCH", "workloads/status"): 250.0, ("POST", "jobs"): 100.0, ("GET", "secrets"): 2.0}
    assert m.table(counts, 100) == [(2.5, "PATCH", "workloads/status"), (1.0, "POST", "jobs")]


def test_cpu_ticks_count_from_the_last_parenthesis() -> None:
    # A command name with a space and a parenthesis, as python's can be renamed to.
    stat = "4242 (multi kueue) run) S 1 4242 4242 0 -1 4194560 1000 0 0 0 150 25 0 0 20 0 9 0 100 0 0"
    assert m.cpu_ticks(stat) == 175


def test_cpu_of_this_process_is_read_from_proc() -> None:
    import os

    assert m.process_cpu_ms(os.getpid()) > 0
    assert m.process_cpu_ms(2**22 + 12345) == 0.0


def test_percentiles_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert m.pct(values, 0.5) == 51.0  # round(49.5) -> 50 (banker's) -> the 51st value
    assert m.pct(values, 0.99) == 99.0
    assert m.pct([3.0], 0.99) == 3.0
