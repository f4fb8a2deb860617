"""The built-in adapter for ``batch/v1`` Jobs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from multikueue.adapters.patch import merge_patch
from multikueue.api.constants import MultiKueue
from multikueue.jobs import batchjob
from multikueue.jobs.batchjob_multikueue import StatusSync, remote_copy, status_for_manager, status_sync_action
from multikueue.runtime.resources import JOBS


class BatchJobAdapter:
    gvk = "Job.v1.batch"
    kind = "Job"
    api_version = "batch/v1"
    ref = JOBS

    def managed_by_multikueue(self, obj: Mapping[str, Any]) -> bool:
        return batchjob.managed_by(obj) == MultiKueue.MANAGED_BY

    def remote_copy(self, obj: Mapping[str, Any], *, origin: str, workload_name: str) -> dict[str, Any]:
        return remote_copy(obj, origin=origin, workload_name=workload_name)

    def status_patch(self, local: Mapping[str, Any], remote: Mapping[str, Any]) -> dict[str, Any] | None:
        if status_sync_action(local, remote) is not StatusSync.SYNC:
            return None
        wanted = {k: v for k, v in status_for_manager(remote).items() if v is not None}
        patch = merge_patch(local.get("status") or {}, wanted)
        return {"status": patch} if patch else None
