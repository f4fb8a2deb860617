"""The ``batch/v1`` Job's answers to MultiKueue (:class:`multikueue.integrations.base.Adapter`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from multikueue.integrations.base import SyncLater, not_managed_message
from multikueue.integrations.batchjob.decide import workload_name_for
from multikueue.integrations.patch import merge_patch
from multikueue.api.constants import MultiKueue
from multikueue.integrations.batchjob import job as batchjob
from multikueue.integrations.batchjob.remote import StatusSync, remote_copy, status_for_manager, status_sync_action
from multikueue.api.resources import JOBS


class BatchJobAdapter:
    gvk = "Job.v1.batch"
    kind = "Job"
    api_version = "batch/v1"
    ref = JOBS
    tells_finished = True

    def managed_by_multikueue(self, obj: Mapping[str, Any]) -> bool:
        return batchjob.managed_by(obj) == MultiKueue.MANAGED_BY

    def unmanaged_reason(self, obj: Mapping[str, Any]) -> str | None:
        if self.managed_by_multikueue(obj):
            return None
        meta = obj.get("metadata") or {}
        return not_managed_message(
            self.kind, meta.get("namespace", ""), meta.get("name", ""), "spec.managedBy", batchjob.managed_by(obj), MultiKueue.MANAGED_BY
        )

    def workload_name(self, obj: Mapping[str, Any]) -> str:
        return workload_name_for(obj)

    def remote_copy(self, obj: Mapping[str, Any], *, origin: str, workload_name: str) -> dict[str, Any]:
        return remote_copy(obj, origin=origin, workload_name=workload_name)

    def is_finished(self, remote: Mapping[str, Any]) -> bool:
        return batchjob.is_finished(remote) is not None

    def spec_patch(self, local: Mapping[str, Any], remote: Mapping[str, Any]) -> dict[str, Any] | None:
        """None: a worker Job's spec is fixed once created (suspension is the worker's Kueue's business)."""
        return None

    def status_patch(self, local: Mapping[str, Any], remote: Mapping[str, Any]) -> dict[str, Any] | None:
        action = status_sync_action(local, remote)
        if action is StatusSync.RETRY_LATER:
            raise SyncLater(f"the manager's Job {local['metadata']['name']} is still suspended")
        if action is not StatusSync.SYNC:
            return None
        wanted = {k: v for k, v in status_for_manager(remote).items() if v is not None}
        current = local.get("status") or {}
        patch = merge_patch(current, wanted)
        if not patch:
            return None
        if patch.get("startTime", "") is None and not batchjob.is_suspended(local):
            # The API refuses to clear a running Job's startTime; a worker Job that was suspended and
            # resumed around its end can report none. Keep the manager's.
            del patch["startTime"]
        # The API refuses a finished Job with uncounted pods: clear them explicitly, even if our copy
        # of the manager's Job is older than what the API server has.
        uncounted = wanted.get("uncountedTerminatedPods") or {}
        patch["uncountedTerminatedPods"] = {key: uncounted.get(key) for key in ("succeeded", "failed")}
        # Likewise it refuses a finished Job with active pods; our copy may not show the count the
        # last sync wrote yet, and a merge patch without the key would leave it (seen once in CI).
        patch["active"] = wanted.get("active")
        return {"status": patch}
