"""``multikueue status``: where each Workload is in admission and dispatch, and why.

:mod:`~multikueue.status.report` derives the report from API objects and
:mod:`~multikueue.status.render` prints it; both are pure. Reading the
manager (:mod:`~multikueue.status.manager`) and the copies on the workers
(:mod:`~multikueue.status.workers`) is kept apart so the logic is tested
without clusters.
"""

from __future__ import annotations

from multikueue.status.render import render_tables, to_json, to_yaml
from multikueue.status.report import (
    CheckRow,
    ClusterRow,
    QuotaState,
    QuotaStatus,
    RemoteLookup,
    StatusReport,
    WorkloadCheck,
    WorkloadRow,
    build_report,
    quota_status,
    remote_state,
)

__all__ = [
    "CheckRow",
    "ClusterRow",
    "QuotaState",
    "QuotaStatus",
    "RemoteLookup",
    "StatusReport",
    "WorkloadCheck",
    "WorkloadRow",
    "build_report",
    "quota_status",
    "remote_state",
    "render_tables",
    "to_json",
    "to_yaml",
]
