"""Rows of ``multikueue list workloads|clusterqueues|localqueues`` and the patches of ``stop``/``resume`` (pure).

The columns are kueuectl's (``kubectl kueue list ...``), so people who know
upstream Kueue read them at once, with what MultiKueue adds: the worker a
Workload was dispatched to (``CLUSTER``), and each queue's ``stopPolicy``.
kueuectl's ``POSITION IN QUEUE`` needs upstream's visibility API, which this
project does not serve, so it is left out rather than shown empty.

Rows are built from the objects as the apiserver returns them (dicts), not
from the pydantic models: a listing must show an object even when a field
of it does not fit the model, and it reads only a few fields.

The stop semantics are upstream's: a Workload is stopped by
``spec.active: false`` (its admission is released, its job suspended), a
queue by ``spec.stopPolicy``: ``HoldAndDrain`` (kueuectl's default: admit
nothing new and evict what runs) or ``Hold`` (``--keep-already-running``:
admit nothing new); ``None`` resumes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from multikueue.api.constants import GROUP
from multikueue.status.render import Column, format_age

__all__ = [
    "KINDS",
    "ListKind",
    "Table",
    "cluster_queue_table",
    "condition_true",
    "exec_time",
    "job_type",
    "kind_named",
    "local_queue_table",
    "parse_time",
    "resume_patch",
    "stop_patch",
    "workload_status",
    "workload_table",
]

NONE = "-"


@dataclass(frozen=True)
class ListKind:
    """A kind the verbs act on, with the names people type for it (kueuectl's, plus plurals)."""

    kind: str
    plural: str
    namespaced: bool
    aliases: tuple[str, ...]

    @property
    def resource(self) -> str:
        """``workload.kueue.x-k8s.io``: how kubectl names an object's kind in messages."""
        return f"{self.kind.lower()}.{GROUP}"


KINDS = (
    ListKind("Workload", "workloads", True, ("workload", "workloads", "wl")),
    ListKind("ClusterQueue", "clusterqueues", False, ("clusterqueue", "clusterqueues", "cq")),
    ListKind("LocalQueue", "localqueues", True, ("localqueue", "localqueues", "lq")),
)


def kind_named(name: str) -> ListKind:
    """The kind ``name`` stands for (``wl``, ``workloads``, ``ClusterQueue``...); ValueError if none."""
    for kind in KINDS:
        if name.lower() in kind.aliases:
            return kind
    raise ValueError(f"unknown kind {name!r}: one of " + ", ".join(k.aliases[0] for k in KINDS))


@dataclass(frozen=True)
class Table:
    """Columns and rows of one listing; each row also as a record (column header -> value) for ``-o json``."""

    columns: tuple[Column, ...]
    rows: list[list[str]]

    def records(self) -> list[dict[str, str]]:
        return [{c.header: v for c, v in zip(self.columns, row)} for row in self.rows]


# --- fields ----------------------------------------------------------------------


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp of the API (``2026-11-23T06:40:47Z``), or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _condition(obj: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == ctype:
            return condition  # type: ignore[no-any-return]
    return None


def condition_true(obj: Mapping[str, Any], ctype: str) -> bool:
    return (_condition(obj, ctype) or {}).get("status") == "True"


def workload_status(wl: Mapping[str, Any]) -> str:
    """Upstream's ``workload.Status``, upper-cased as kueuectl prints it: FINISHED, ADMITTED, QUOTARESERVED or PENDING."""
    if condition_true(wl, "Finished"):
        return "FINISHED"
    if condition_true(wl, "Admitted"):
        return "ADMITTED"
    if condition_true(wl, "QuotaReserved"):
        return "QUOTARESERVED"
    return "PENDING"


def job_type(owner: Mapping[str, Any]) -> str:
    """``job.batch``, ``pipelinerun.tekton.dev``: the owner's kind and group as kueuectl shows them.

    kueuectl asks discovery for the singular name; the lower-cased kind is
    that name for every kind in practice, and needs no extra request.
    """
    api_version = str(owner.get("apiVersion") or "")
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    kind = str(owner.get("kind") or "").lower()
    return f"{kind}.{group}" if group else kind


def exec_time(wl: Mapping[str, Any], now: datetime) -> str:
    """How long it has run (or ran): from Admitted to Finished, or to now; empty if never admitted."""
    admitted = _condition(wl, "Admitted")
    if not admitted or admitted.get("status") != "True":
        return ""
    start = parse_time(admitted.get("lastTransitionTime"))
    if start is None:
        return ""
    finished = _condition(wl, "Finished")
    end = parse_time((finished or {}).get("lastTransitionTime")) if condition_true(wl, "Finished") else None
    return format_age(start, end or now)


def _age(obj: Mapping[str, Any], now: datetime) -> str:
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    return format_age(created, now) if created else NONE


def _owners(wl: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((wl.get("metadata") or {}).get("ownerReferences") or [])


def _unique(values: Iterable[str]) -> str:
    return ", ".join(dict.fromkeys(v for v in values if v)) or NONE


def _stop_policy(obj: Mapping[str, Any]) -> str:
    return str((obj.get("spec") or {}).get("stopPolicy") or "None")


def _namespaced(columns: Sequence[Column], show_namespace: bool) -> tuple[Column, ...]:
    return tuple(columns) if show_namespace else tuple(columns[1:])


# --- tables ----------------------------------------------------------------------

_WORKLOAD_COLUMNS = (
    Column("NAMESPACE"),
    Column("NAME"),
    Column("JOB TYPE"),
    Column("JOB NAME"),
    Column("LOCALQUEUE"),
    Column("CLUSTERQUEUE"),
    Column("STATUS"),
    Column("ACTIVE"),
    Column("CLUSTER"),
    Column("EXEC TIME"),
    Column("AGE"),
)

_CLUSTER_QUEUE_COLUMNS = (
    Column("NAME"),
    Column("COHORT"),
    Column("PENDING WORKLOADS"),
    Column("ADMITTED WORKLOADS"),
    Column("ACTIVE"),
    Column("STOP POLICY"),
    Column("AGE"),
)

_LOCAL_QUEUE_COLUMNS = (
    Column("NAMESPACE"),
    Column("NAME"),
    Column("CLUSTERQUEUE"),
    Column("PENDING WORKLOADS"),
    Column("ADMITTED WORKLOADS"),
    Column("ACTIVE"),
    Column("STOP POLICY"),
    Column("AGE"),
)


def _sorted(objects: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(objects, key=lambda o: ((o.get("metadata") or {}).get("namespace") or "", (o.get("metadata") or {}).get("name") or ""))


def workload_table(
    workloads: Iterable[Mapping[str, Any]],
    local_queues: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    show_namespace: bool,
) -> Table:
    """The Workloads' rows; ``local_queues`` give the ClusterQueue of those not admitted yet (as kueuectl does)."""
    queue_of = {
        ((lq.get("metadata") or {}).get("namespace"), (lq.get("metadata") or {}).get("name")): (lq.get("spec") or {}).get("clusterQueue")
        for lq in local_queues
    }
    rows = []
    for wl in _sorted(workloads):
        meta, spec, status = wl.get("metadata") or {}, wl.get("spec") or {}, wl.get("status") or {}
        queue = spec.get("queueName") or ""
        cluster_queue = (status.get("admission") or {}).get("clusterQueue") or queue_of.get((meta.get("namespace"), queue)) or ""
        row = [
            meta.get("namespace") or "",
            meta.get("name") or "",
            _unique(job_type(o) for o in _owners(wl)),
            _unique(str(o.get("name") or "") for o in _owners(wl)),
            queue or NONE,
            cluster_queue or NONE,
            workload_status(wl),
            "false" if spec.get("active") is False else "true",
            status.get("clusterName") or NONE,
            exec_time(wl, now) or NONE,
            _age(wl, now),
        ]
        rows.append(row if show_namespace else row[1:])
    return Table(_namespaced(_WORKLOAD_COLUMNS, show_namespace), rows)


def cluster_queue_table(cluster_queues: Iterable[Mapping[str, Any]], *, now: datetime) -> Table:
    rows = []
    for cq in _sorted(cluster_queues):
        spec, status = cq.get("spec") or {}, cq.get("status") or {}
        rows.append([
            (cq.get("metadata") or {}).get("name") or "",
            spec.get("cohortName") or spec.get("cohort") or NONE,
            str(status.get("pendingWorkloads") or 0),
            str(status.get("admittedWorkloads") or 0),
            "true" if condition_true(cq, "Active") else "false",
            _stop_policy(cq),
            _age(cq, now),
        ])
    return Table(_CLUSTER_QUEUE_COLUMNS, rows)


def local_queue_table(local_queues: Iterable[Mapping[str, Any]], *, now: datetime, show_namespace: bool) -> Table:
    rows = []
    for lq in _sorted(local_queues):
        meta, spec, status = lq.get("metadata") or {}, lq.get("spec") or {}, lq.get("status") or {}
        row = [
            meta.get("namespace") or "",
            meta.get("name") or "",
            spec.get("clusterQueue") or NONE,
            str(status.get("pendingWorkloads") or 0),
            str(status.get("admittedWorkloads") or 0),
            "true" if condition_true(lq, "Active") else "false",
            _stop_policy(lq),
            _age(lq, now),
        ]
        rows.append(row if show_namespace else row[1:])
    return Table(_namespaced(_LOCAL_QUEUE_COLUMNS, show_namespace), rows)


# --- stop / resume -----------------------------------------------------------------


def stop_patch(kind: ListKind, *, keep_running: bool = False) -> dict[str, Any]:
    """The merge patch that stops an object of ``kind``.

    A Workload has no "keep running" variant upstream: deactivating it
    releases its quota and suspends its job.
    """
    if kind.kind == "Workload":
        if keep_running:
            raise ValueError("--keep-already-running applies to queues only: a stopped Workload is evicted")
        return {"spec": {"active": False}}
    return {"spec": {"stopPolicy": "Hold" if keep_running else "HoldAndDrain"}}


def resume_patch(kind: ListKind) -> dict[str, Any]:
    if kind.kind == "Workload":
        return {"spec": {"active": True}}
    return {"spec": {"stopPolicy": "None"}}
