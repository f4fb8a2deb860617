"""The figures of ``bench/dispatch.py`` and ``bench/scalability.py``: apiserver request counts, CPU ticks, percentiles.

Pure but for :func:`request_counts` (one GET of ``/metrics``), so they are
unit-tested without clusters (``tests/bench/test_dispatch_metrics.py``): a
wrong parse would silently make the requests-per-Job figure, the one compared
against upstream, wrong.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

#: Verbs that hold a connection open rather than answer one request: left out of "requests per Job".
#: The apiserver reports a LIST with ``watch=true`` under ``WATCH`` (and a streaming list under ``WATCHLIST``).
STREAMING_VERBS = frozenset({"WATCH", "WATCHLIST", "CONNECT"})

Counts = dict[tuple[str, str], float]


def _labels(text: str) -> dict[str, str]:
    """``a="x",b="y"`` into a dict; label values here never contain commas or quotes."""
    labels: dict[str, str] = {}
    for part in text.split(","):
        if "=" in part:
            key, value = part.split("=", 1)
            labels[key.strip()] = value.strip().strip('"')
    return labels


def parse_request_totals(metrics: str) -> Counts:
    """``apiserver_request_total`` of a ``/metrics`` text, summed by (verb, resource[/subresource]).

    Summed over codes, scopes, components and groups: a 409 is a request the
    server answered as much as a 200 is, and the figure is what the server did.
    """
    counts: Counts = {}
    for line in metrics.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = _labels(line[line.index("{") + 1 : line.rindex("}")])
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        key = (labels.get("verb", ""), resource)
        counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def request_counts(api: Any) -> Counts:
    """``apiserver_request_total`` of the API server behind ``api`` (a ``kubernetes.client.ApiClient``), parsed."""
    _, url, headers, _, _ = api.param_serialize(method="GET", resource_path="/metrics", auth_settings=["BearerToken"])
    response = api.call_api("GET", url, header_params=headers)
    response.read()
    return parse_request_totals(response.data.decode())


def delta(before: Mapping[tuple[str, str], float], after: Mapping[tuple[str, str], float]) -> Counts:
    """What was counted between two scrapes (keys only in ``after`` count from zero)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def requests_total(counts: Mapping[tuple[str, str], float]) -> float:
    """Every request but the streaming ones (:data:`STREAMING_VERBS`)."""
    return sum(v for (verb, _), v in counts.items() if verb not in STREAMING_VERBS)


def by_verb(counts: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """The non-streaming requests summed by verb, largest first."""
    verbs: dict[str, float] = {}
    for (verb, _), v in counts.items():
        if verb not in STREAMING_VERBS:
            verbs[verb] = verbs.get(verb, 0.0) + v
    return dict(sorted(verbs.items(), key=lambda kv: -kv[1]))


def table(counts: Mapping[tuple[str, str], float], per: int, floor: float = 0.05) -> list[tuple[float, str, str]]:
    """(per Job, verb, resource) rows of at least ``floor`` per Job, largest first (the streaming verbs too, marked by their verb)."""
    rows = [(v / per, verb, resource) for (verb, resource), v in counts.items() if v / per >= floor]
    return sorted(rows, key=lambda row: (-row[0], row[1], row[2]))


def cpu_ticks(stat: str) -> int:
    """utime + stime of a ``/proc/PID/stat`` line, in clock ticks.

    The command name (field 2) may hold spaces and parentheses, so fields are
    counted from the last ``)``: utime and stime are fields 14 and 15.
    """
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def process_cpu_ms(pid: int) -> float:
    """A live process's CPU time so far in milliseconds (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            ticks = cpu_ticks(handle.read())
    except OSError:
        return 0.0
    return ticks * 1000.0 / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile by nearest rank (the benchmark's p50/p99)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]
