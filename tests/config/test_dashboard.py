"""The Grafana dashboard (``config/grafana``) reads only what the controller exports.

Every panel's PromQL and every variable's query is parsed for the metrics
it selects, their label matchers and its ``by (...)`` labels; each must be
a series name the controller's registry exposes with those labels. So a
renamed metric or label breaks this test, not a dashboard in production.
(``hack/dashboard-check.py`` runs the same queries against a real
Prometheus scraping running controllers.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from multikueue.runtime import metrics

pytestmark = pytest.mark.unit

DASHBOARD = Path(__file__).resolve().parents[2] / "config" / "grafana" / "multikueue-dashboard.json"
#: Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"instance", "job"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_SELECTOR = re.compile(r"(?<![\w:$])([a-zA-Z_:][\w:]*)\s*(\{[^}]*\})?")
_MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")


def parse(expr: str) -> tuple[list[tuple[str, set[str]]], set[str]]:
    """(metric name, label names matched) of each selector in ``expr``, and the labels it groups by."""
    bare = _STRING.sub('""', expr)
    grouping: set[str] = set()
    for match in _GROUPING.finditer(bare):
        grouping |= {label.strip() for label in match.group(2).split(",") if label.strip()}
    bare = _GROUPING.sub(" ", bare)
    bare = re.sub(r"\[[^\]]*\]", " ", bare)  # range durations, Grafana's $__rate_interval included
    selectors = []
    for match in _SELECTOR.finditer(bare):
        name, braces = match.group(1), match.group(2)
        rest = bare[match.end():].lstrip()
        if name in KEYWORDS or (braces is None and rest.startswith("(")):
            continue  # a function call or a keyword
        selectors.append((name, set(_MATCHER.findall(braces or ""))))
    return selectors, grouping


def exported() -> dict[str, set[str]]:
    """Every series name the registry exposes, with its label names."""
    names: dict[str, set[str]] = {}
    for name, collector in metrics.REGISTRY._names_to_collectors.items():  # noqa: SLF001 - no public listing
        labels = set(getattr(collector, "_labelnames", ()))
        names[name] = labels | ({"le"} if name.endswith("_bucket") else set())
    return names


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and query variable."""
    found = [(f"panel {p['title']!r}", t["expr"]) for p in panels() for t in p["targets"]]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            inner = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable["definition"])
            assert inner, variable["definition"]
            found.append((f"variable {variable['name']}", inner.group(1)))
    return found


def test_the_parser_finds_metrics_labels_and_groupings() -> None:
    selectors, grouping = parse(
        'histogram_quantile(0.95, sum by (instance, le) (rate(mkpy_dispatch_latency_seconds_bucket{instance=~"$instance", '
        'cluster_queue=~"a,b"}[$__rate_interval]))) / on() group_left sum(x_total) > 0 and bool y'
    )
    assert selectors == [("mkpy_dispatch_latency_seconds_bucket", {"instance", "cluster_queue"}), ("x_total", set()), ("y", set())]
    assert grouping == {"instance", "le"}


def test_every_panel_has_a_query() -> None:
    assert panels()
    for panel in panels():
        assert panel["targets"] and all(t.get("expr") for t in panel["targets"]), panel["title"]


@pytest.mark.parametrize("where,expr", queries())
def test_every_query_reads_only_exported_metrics_and_labels(where: str, expr: str) -> None:
    names = exported()
    selectors, grouping = parse(expr)
    assert selectors, f"{where}: no metric in {expr!r}"
    available = set(TARGET_LABELS) | {"le"}
    for name, matched in selectors:
        assert name in names, f"{where}: {name} is not exported by the controller"
        assert matched <= names[name] | TARGET_LABELS, f"{where}: {name} has no label {sorted(matched - names[name])}"
        available |= names[name]
    assert grouping <= available, f"{where}: grouped by labels no selected metric has: {sorted(grouping - available)}"


def test_the_dashboard_covers_what_operators_asked_for() -> None:
    """Quota against usage, pending and admitted Workloads, dispatch latency, per-worker state."""
    used = {name for _, expr in queries() for name, _ in parse(expr)[0]}
    for needed in (
        "kueue_cluster_queue_resource_usage",
        "kueue_cluster_queue_nominal_quota",
        "kueue_pending_workloads",
        "kueue_admitted_active_workloads",
        "mkpy_dispatch_latency_seconds_bucket",
        "mkpy_worker_cluster_active",
        "multikueue_workloads_dispatched_total",
    ):
        assert needed in used, needed


def test_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard()["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]
