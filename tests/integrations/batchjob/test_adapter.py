"""The built-in Job adapter's status copy (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.integrations.batchjob.adapter import BatchJobAdapter

pytestmark = pytest.mark.unit


def _job(suspend: bool, status: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a", "namespace": "ns"}, "spec": {"suspend": suspend}, "status": status}


def test_a_running_manager_job_keeps_its_start_time_when_the_worker_reports_none() -> None:
    local = _job(False, {"startTime": "2026-11-22T00:00:00Z", "active": 1})
    remote = _job(True, {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    patch = BatchJobAdapter().status_patch(local, remote)
    assert patch is not None
    assert "startTime" not in patch["status"]
    assert patch["status"]["succeeded"] == 1
    assert patch["status"]["active"] is None


def test_the_worker_start_time_is_copied() -> None:
    local = _job(False, {})
    remote = _job(False, {"startTime": "2026-11-22T00:00:01Z", "active": 1})
    patch = BatchJobAdapter().status_patch(local, remote)
    assert patch is not None and patch["status"]["startTime"] == "2026-11-22T00:00:01Z"


def test_a_finished_worker_job_clears_active_even_when_our_copy_shows_none() -> None:
    """Our copy of the manager's Job may lag the last sync (which set ``active``); the API
    refuses a finished Job with active pods, so the final patch names ``active`` anyway."""
    local = _job(False, {"startTime": "2026-11-22T00:00:00Z"})
    remote = _job(False, {"startTime": "2026-11-22T00:00:00Z", "succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    patch = BatchJobAdapter().status_patch(local, remote)
    assert patch is not None and "active" in patch["status"] and patch["status"]["active"] is None
