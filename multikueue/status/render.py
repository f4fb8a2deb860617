"""Turn a :class:`~multikueue.status.report.StatusReport` into text (pure).

People get kubectl-style tables: aligned columns, one line per object, and
long cells cut with an ellipsis so the tables fit the terminal; with no width
(output to a file or a pipe) nothing is cut, as kubectl does. Admission-check
messages are what explains a stuck Workload but are long, so each gets an indented line of its own under the
Workload's row, with the whole width to itself, rather than a narrow column. Scripts get JSON or YAML with every value complete and
every key present, in a fixed order, so a diff of two documents shows only
what changed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import yaml

from multikueue.status.report import (
    UNKNOWN_PREFIX,
    CheckRow,
    ClusterRow,
    QuotaState,
    QuotaStatus,
    StatusReport,
    WorkloadRow,
)

__all__ = [
    "DEFAULT_WIDTH",
    "ELLIPSIS",
    "Column",
    "Row",
    "format_age",
    "render_table",
    "render_tables",
    "to_json",
    "to_yaml",
    "truncate",
]

DEFAULT_WIDTH = 120
ELLIPSIS = "…"
SEPARATOR = "  "
NONE = "-"


@dataclass(frozen=True)
class Column:
    """A table column.

    ``flexible`` columns hold free text and give up width first, down to
    ``min_width`` (what keeps them readable); only when that is not enough
    does every column shrink, widest first.
    """

    header: str
    flexible: bool = False
    min_width: int = 6


def truncate(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the last one an ellipsis when anything was cut."""
    if len(text) <= width:
        return text
    if width <= 0:
        return ""
    return text[: width - 1] + ELLIPSIS


def _fit(columns: Sequence[Column], natural: list[int], width: int) -> list[int]:
    """Column widths whose total (with separators) fits ``width`` when the headers allow it."""
    budget = width - len(SEPARATOR) * (len(columns) - 1)
    widths = [min(w, max(budget, 1)) for w in natural]
    # Pass 1: flexible columns shrink toward their readable width, the one furthest above it first.
    while sum(widths) > budget:
        excess = [(widths[i] - c.min_width, i) for i, c in enumerate(columns) if c.flexible and widths[i] > c.min_width]
        if not excess:
            break
        widths[max(excess)[1]] -= 1
    # Pass 2: any column down to its header, the widest first (flexible ones on a tie).
    while sum(widths) > budget:
        candidates = [(widths[i], c.flexible, i) for i, c in enumerate(columns) if widths[i] > len(c.header)]
        if not candidates:
            break
        widths[max(candidates)[2]] -= 1
    return widths


@dataclass(frozen=True)
class Row:
    """One object's line, and the indented detail lines printed under it."""

    cells: Sequence[str]
    details: Sequence[str] = ()


def render_table(
    columns: Sequence[Column],
    rows: Sequence[Row | Sequence[str]],
    width: int | None = DEFAULT_WIDTH,
    *,
    detail_column: int = 0,
) -> str:
    """An aligned table.

    A cell may hold several lines (``\\n``), which stack in its column. A
    row's details start two characters right of column ``detail_column``
    and may use the rest of the width; they do not widen any column.
    ``width=None``: no limit, every cell and detail whole.
    """
    table = [row if isinstance(row, Row) else Row(cells=row) for row in rows]
    cells = [[cell.split("\n") for cell in row.cells] for row in table]
    natural = [
        max([len(column.header)] + [len(line) for row in cells for line in row[i]]) for i, column in enumerate(columns)
    ]
    widths = natural if width is None else _fit(columns, natural, width)
    indent = " " * (sum(widths[:detail_column]) + len(SEPARATOR) * detail_column + 2)
    lines = [_line([c.header for c in columns], widths)]
    for row, split in zip(table, cells):
        for index in range(max(len(cell) for cell in split)):
            lines.append(_line([cell[index] if index < len(cell) else "" for cell in split], widths))
        lines.extend(indent + (detail if width is None else truncate(detail, width - len(indent))) for detail in row.details)
    return "\n".join(lines)


def _line(values: Sequence[str], widths: Sequence[int]) -> str:
    return SEPARATOR.join(truncate(v, w).ljust(w) for v, w in zip(values, widths)).rstrip()


def format_age(since: datetime, now: datetime) -> str:
    """A duration the way kubectl prints ages: ``45s``, ``3m20s``, ``12m``, ``5h10m``, ``3d``."""
    seconds = max(0, int((now - since).total_seconds()))
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


# --- the three tables ----------------------------------------------------------

_WORKLOAD_COLUMNS = (
    Column("NAMESPACE"),
    Column("NAME"),
    Column("QUEUE"),
    Column("QUOTA", flexible=True, min_width=13),
    Column("CHECKS", flexible=True, min_width=20),
    Column("NOMINATED", flexible=True, min_width=15),
    Column("CLUSTER"),
    Column("REMOTE", flexible=True, min_width=19),
)

_CLUSTER_COLUMNS = (
    Column("NAME"),
    Column("ACTIVE"),
    Column("REASON", flexible=True, min_width=22),
    Column("SINCE"),
    Column("KUBECONFIG", flexible=True, min_width=24),
    Column("MESSAGE", flexible=True, min_width=30),
)

_CHECK_COLUMNS = (
    Column("NAME"),
    Column("CONTROLLER", flexible=True, min_width=25),
    Column("PARAMETERS", flexible=True, min_width=24),
    Column("ACTIVE"),
    Column("REASON", flexible=True, min_width=16),
    Column("MESSAGE", flexible=True, min_width=30),
)

#: States where the quota condition's reason and message say why (it waits, ended, left).
_STATES_WITH_REASON = (QuotaState.PENDING, QuotaState.FINISHED, QuotaState.EVICTED, QuotaState.INACTIVE)


def _quota_cell(quota: QuotaStatus) -> str:
    """The state; a Finished one with how it ended, which people look for at a glance."""
    if quota.state == QuotaState.FINISHED and quota.reason and quota.reason != quota.state:
        return f"{quota.state}: {quota.reason}"
    return str(quota.state)


def _remote_cell(remote: str | None) -> str:
    """The remote state; why it is unknown goes to a detail line, where it has room."""
    if remote is None:
        return NONE
    return UNKNOWN_PREFIX.rstrip(": ") if remote.startswith(UNKNOWN_PREFIX) else remote


def _checks_cell(row: WorkloadRow) -> str:
    if not row.checks:
        return NONE
    return ",".join(f"{c.name}={c.state}" for c in row.checks)


def _workload_details(row: WorkloadRow) -> list[str]:
    """Why the Workload is where it is, one line each: the quota condition when it is not
    (or no longer) running, each check's message, and why the copy on the worker is unknown."""
    details = []
    quota = row.quota
    if quota.state in _STATES_WITH_REASON and (quota.reason or quota.message):
        details.append("quota: " + ": ".join(part for part in (quota.reason, quota.message) if part))
    details.extend(f"{c.name}: {c.message}" for c in row.checks if c.message)
    if row.remote and row.remote.startswith(UNKNOWN_PREFIX):
        details.append(f"remote ({row.cluster}): {row.remote[len(UNKNOWN_PREFIX):]}")
    return details


def _workload_row(row: WorkloadRow, show_namespace: bool) -> Row:
    cells = [
        row.namespace,
        row.name,
        row.queue or NONE,
        _quota_cell(row.quota),
        _checks_cell(row),
        ",".join(row.nominated) or NONE,
        row.cluster or NONE,
        _remote_cell(row.remote),
    ]
    return Row(cells=cells if show_namespace else cells[1:], details=_workload_details(row))


def _cluster_cells(row: ClusterRow, now: datetime) -> list[str]:
    source = f"{row.kube_config.location_type} {row.kube_config.location}" if row.kube_config else NONE
    return [
        row.name,
        str(row.active),
        row.reason or NONE,
        format_age(row.since, now) if row.since else NONE,
        source,
        row.message or NONE,
    ]


def _check_cells(row: CheckRow) -> list[str]:
    return [row.name, row.controller or NONE, row.parameters or NONE, str(row.active), row.reason or NONE, row.message or NONE]


def _section(
    title: str, columns: Sequence[Column], rows: Sequence[Row | Sequence[str]], width: int | None, empty: str, detail_column: int = 0
) -> str:
    if not rows:
        return f"{title}: {empty}"
    return f"{title}:\n{render_table(columns, rows, width, detail_column=detail_column)}"


def render_tables(
    report: StatusReport,
    *,
    now: datetime,
    namespace: str | None = None,
    width: int | None = DEFAULT_WIDTH,
) -> str:
    """The three tables for people, ending with a newline.

    With ``namespace`` set (``-n``) the NAMESPACE column is left out, as
    kubectl does. ``now`` turns the clusters' transition times into ages.
    ``width``: the terminal's columns, long cells cut to fit; None (not a
    terminal) cuts nothing.
    """
    show_namespace = namespace is None
    columns = _WORKLOAD_COLUMNS if show_namespace else _WORKLOAD_COLUMNS[1:]
    where = f"in namespace {namespace}" if namespace else "in any namespace"
    sections = [
        _section(
            "Workloads",
            columns,
            [_workload_row(r, show_namespace) for r in report.workloads],
            width,
            f"none {where}",
            detail_column=1 if show_namespace else 0,
        ),
        _section("MultiKueueClusters", _CLUSTER_COLUMNS, [_cluster_cells(r, now) for r in report.clusters], width, "none"),
        _section("AdmissionChecks", _CHECK_COLUMNS, [_check_cells(r) for r in report.checks], width, "none"),
    ]
    return "\n\n".join(sections) + "\n"


# --- documents for scripts ---------------------------------------------------------


def to_json(report: StatusReport, *, compact: bool = False) -> str:
    """The report as one JSON document (one line when ``compact``), ending with a newline."""
    document = report.to_document()
    if compact:
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False) + "\n"
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def to_yaml(report: StatusReport) -> str:
    """The report as one YAML document, keys in the report's order."""
    return yaml.safe_dump(report.to_document(), sort_keys=False, allow_unicode=True, width=1_000_000)
