"""Carrying out a dispatch plan: the local commit point, then the workers.

:func:`~.dispatch.decide` returns a typed plan; this module performs it in
the order its contract asks:

1. **The local status first** (clusterName, nominated clusters, the check's
   state, and ``Admitted`` when the check's Ready completes it), written
   through the Workload writer with the resourceVersion the plan was made
   on. A plan made on a stale copy fails here (409) before it touches any
   worker, and once a winner is recorded every later decision sees it, even
   after a restart.
2. **Remote copy creation and deletion** on the workers, side by side when
   the actions are independent (in plan order on each worker).
3. **Status sync** of the worker's job to the manager's, and the final copy
   before the local Workload is marked Finished.

Failures propagate to the work queue, which retries with backoff; a failure
the user can act on (a missing namespace, CRD or permission on the worker)
is also put on the check's message.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Mapping
from typing import Any

import structlog
from kubernetes.client.rest import ApiException

from multikueue.api import Workload
from multikueue.api.constants import ConditionStatus, Labels
from multikueue.api.meta import Condition, utcnow
from multikueue.api.resources import WORKLOADS, ResourceRef
from multikueue.controllers.multikueue import dispatch
from multikueue.controllers.multikueue.connection import RemoteCluster
from multikueue.controllers.multikueue.remote_workload import remote_workload_copy
from multikueue.core import lifecycle
from multikueue.integrations.base import Integration, SyncLater
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.writer import EventSpec, WorkloadWriter

log = structlog.get_logger(__name__)

#: How soon to retry a status copy that had to wait (the manager's job not started yet).
SYNC_RETRY_SECONDS = 1.0

#: Worker-side actions that touch only their own worker (not the local Workload): safe to run side by side.
_INDEPENDENT_ACTIONS = (
    dispatch.CreateRemoteWorkload,
    dispatch.DeleteRemoteWorkload,
    dispatch.CreateRemoteJob,
    dispatch.DeleteRemoteJob,
)



class WorkerCallFailed(Exception):
    """A worker refused or failed one action; the work queue retries with backoff.

    Kept apart from the manager's own 404/409 (a plan made on a stale copy,
    retried at once): a worker's missing namespace, CRD or permission is not
    fixed in a fraction of a second.
    """

    def __init__(self, cluster: str, action: str, cause: BaseException) -> None:
        detail = api_message(cause) if isinstance(cause, ApiException) else (str(cause).splitlines() or [type(cause).__name__])[0]
        super().__init__(f"worker {cluster!r}: {action} failed: {detail}")
        self.cluster = cluster
        self.cause = cause


class _Retry(Exception):
    """Stop this plan here and look again after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__(delay)
        self.delay = delay


class PlanApplier:
    def __init__(self, kube: AsyncKube, writer: WorkloadWriter, *, origin: str) -> None:
        self.kube = kube
        self.writer = writer
        self.origin = origin

    async def apply(
        self,
        wl: Workload,
        plan: dispatch.Plan,
        check: str,
        clusters: Mapping[str, RemoteCluster],
        integration: Integration | None,
        owner: Mapping[str, Any] | None,
    ) -> float | None:
        """Perform ``plan``; return seconds after which to look again (a status copy had to wait), or None."""
        status: dict[str, Any] = {}
        checks = [c.model_copy() for c in (wl.status.admission_checks or [])] if wl.status else []
        events: list[EventSpec] = []
        remote_actions: list[Any] = []
        for action in plan.actions:
            if isinstance(action, dispatch.SetCheckState):
                _set_check(checks, check, action)
                status["admissionChecks"] = [c.to_dict() for c in checks]
                kind = "Warning" if action.state in ("Rejected", "Retry") else "Normal"
                events.append((kind, f"MultiKueue{action.state}", action.message))
            elif isinstance(action, dispatch.SetNominatedClusters):
                status["nominatedClusterNames"] = list(action.names) or None
            elif isinstance(action, dispatch.SetClusterName):
                status["clusterName"] = action.name
            else:
                remote_actions.append(action)
        if status:
            admitted = _fold_admitted(wl, checks, status, events)
            wl = await self.writer.write(wl, status, events=events, admitted=admitted)
            for _, reason, message in events:
                log.info("multikueue", workload=f"{wl.namespace}/{wl.name}", reason=reason, message=message)
        runner = _Runner(self, wl, check, clusters, integration, owner)
        try:
            if remote_actions and all(isinstance(a, _INDEPENDENT_ACTIONS) for a in remote_actions):
                # Workers are independent: act on them at once (in plan order on each one), so
                # the second copy is not a round trip behind the first and no worker gets a head start.
                by_cluster: dict[str, list[Any]] = {}
                for action in remote_actions:
                    by_cluster.setdefault(action.cluster, []).append(action)
                results = await asyncio.gather(*(runner.run(a) for a in by_cluster.values()), return_exceptions=True)
                for result in results:
                    if isinstance(result, BaseException):
                        raise result
            else:
                await runner.run(remote_actions)
        except _Retry as retry:
            return retry.delay
        return runner.retry_after


class _Runner:
    """The worker-side actions of one plan, on the Workload as last written."""

    def __init__(
        self,
        applier: PlanApplier,
        wl: Workload,
        check: str,
        clusters: Mapping[str, RemoteCluster],
        integration: Integration | None,
        owner: Mapping[str, Any] | None,
    ) -> None:
        self.applier = applier
        self.wl = wl
        self.check = check
        self.clusters = clusters
        self.integration = integration
        self.owner = owner
        self.retry_after: float | None = None

    async def run(self, actions: list[Any]) -> None:
        """Carry out worker-side actions in order."""
        for action in actions:
            remote = self.clusters.get(action.cluster)
            if remote is None or remote.kube is None:
                continue  # disconnected since the plan was made: its next plan accounts for it
            await self._one(action, remote)

    async def _on_worker(self, remote: RemoteCluster, action: Any, call: Awaitable[Any]) -> Any:
        """Await one call to ``remote``; its failure becomes :class:`WorkerCallFailed`.

        Only calls to the worker go through here: the manager's own writes in
        the same action (a status copy, Finished) keep their ApiException, so
        a stale local copy is still told apart from a worker that refuses.
        """
        try:
            return await call
        except ApiException as exc:
            if exc.status in (403, 404, 422):
                # A missing namespace, CRD or permission on the worker: say so where the user looks.
                await self._report(f"Worker {remote.name!r}: {type(action).__name__} failed: {api_message(exc)}")
            raise WorkerCallFailed(remote.name, type(action).__name__, exc) from exc
        except Exception as exc:  # noqa: BLE001 - network errors come in many types
            raise WorkerCallFailed(remote.name, type(action).__name__, exc) from exc

    async def _one(self, action: Any, remote: RemoteCluster) -> None:
        kube = remote.kube
        assert kube is not None  # checked by run()
        wl, origin = self.wl, self.applier.origin
        namespace, name = wl.namespace or "", wl.name
        integration, owner = self.integration, self.owner
        if isinstance(action, dispatch.CreateRemoteWorkload):
            await self._on_worker(remote, action, _create(remote, WORKLOADS, namespace, remote_workload_copy(wl, origin=origin)))
            log.info("remote workload created", workload=f"{namespace}/{name}", cluster=remote.name)
        elif isinstance(action, dispatch.DeleteRemoteWorkload):
            await self._on_worker(remote, action, kube.delete(WORKLOADS, namespace, name))
            log.info("remote workload deleted", workload=f"{namespace}/{name}", cluster=remote.name)
        elif isinstance(action, dispatch.CreateRemoteJob):
            if integration is None or owner is None:
                raise _Retry(SYNC_RETRY_SECONDS)
            body = integration.adapter.remote_copy(owner, origin=origin, workload_name=name)
            await self._on_worker(remote, action, _create(remote, integration.ref, namespace, body))
            # The Ready event of the same dispatch already names the worker: a log line, not a second Event.
            log.info("remote job created", workload=f"{namespace}/{name}", cluster=remote.name, kind=integration.adapter.kind)
        elif isinstance(action, dispatch.DeleteRemoteJob):
            if integration is None or owner is None:
                return
            job = remote.jobs.get((integration.ref.plural, (namespace, owner["metadata"]["name"])))
            if job is not None and (job["metadata"].get("labels") or {}).get(Labels.MULTIKUEUE_ORIGIN) == origin:
                await self._on_worker(remote, action, kube.delete(integration.ref, namespace, job["metadata"]["name"]))
        elif isinstance(action, dispatch.SyncJobStatus):
            if not await self._sync_job(remote):
                self.retry_after = SYNC_RETRY_SECONDS
        elif isinstance(action, dispatch.FinishLocal):
            # The final status must reach the manager's object before its Workload finishes.
            if not await self._sync_job(remote, final=True):
                raise _Retry(SYNC_RETRY_SECONDS)
            condition = Condition(
                type="Finished",
                status=ConditionStatus.TRUE,
                reason=action.reason,
                message=action.message,
                last_transition_time=utcnow(),
            )
            event = ("Normal", "MultiKueueFinished", f"finished on worker {action.cluster}: {action.reason}: {action.message}")
            self.wl = await self.applier.writer.finish(wl, condition.to_dict(), events=[event])
            log.info("multikueue", workload=f"{namespace}/{name}", reason=event[1], message=event[2])

    async def _sync_job(self, remote: RemoteCluster, *, final: bool = False) -> bool:
        """Copy the worker job's status to the manager's; False when it has to wait."""
        integration, owner = self.integration, self.owner
        if integration is None or owner is None:
            return True
        meta = owner["metadata"]
        remote_job = remote.jobs.get((integration.ref.plural, (meta["namespace"], meta["name"])))
        if remote_job is None:
            # Unknown because this kind is not watched there yet (a new CRD, missing RBAC): the
            # final status would be lost, so wait. Truly gone: nothing left to copy.
            return not final or integration.ref.plural in remote.watched
        adapter = integration.adapter
        if final and adapter.tells_finished and not adapter.is_finished(remote_job):
            return False  # the job's own final event is still on its way
        try:
            patch = adapter.status_patch(owner, remote_job)
        except SyncLater:
            return False
        if patch is not None:
            await self.applier.kube.patch(integration.ref, meta["namespace"], meta["name"], patch, status=True)
        return True

    async def _report(self, message: str) -> None:
        """Put ``message`` on the check (state unchanged) unless it already says so."""
        wl = self.wl
        checks = (wl.status.admission_checks or []) if wl.status else []
        current = next((c for c in checks if c.name == self.check), None)
        if current is None or current.message == message:
            return
        updated = [c.model_copy(update={"message": message}) if c.name == self.check else c for c in checks]
        try:
            self.wl = await self.applier.writer.write(
                wl, {"admissionChecks": [c.to_dict() for c in updated]}, events=[("Warning", "MultiKueueWorkerError", message)]
            )
        except ApiException:
            return  # the error itself propagates; the message is best effort
        log.info("multikueue", workload=f"{wl.namespace}/{wl.name}", reason="MultiKueueWorkerError", message=message)


def _set_check(checks: list[Any], name: str, action: dispatch.SetCheckState) -> None:
    """Update check ``name``; its transition time moves only when the state changes."""
    for index, current in enumerate(checks):
        if current.name == name:
            checks[index] = current.model_copy(
                update={
                    "state": action.state,
                    "message": action.message,
                    "last_transition_time": utcnow() if current.state != action.state else current.last_transition_time,
                }
            )
            return


def _fold_admitted(wl: Workload, checks: list[Any], status: dict[str, Any], events: list[EventSpec]) -> bool:
    """Fold the ``Admitted`` transition into this write when the new check states complete it.

    The lifecycle transition would write it one watch round trip later;
    doing it here saves a write and that delay on every dispatch. Only when
    no finalizer is missing (that write stays with the lifecycle transition).
    """
    if "admissionChecks" not in status or wl.status is None:
        return False
    preview = wl.model_copy(update={"status": wl.status.model_copy(update={"admission_checks": checks})})
    update = lifecycle.next_update(preview, utcnow())
    if update is None or update.transition != "admitted" or update.add_finalizer or update.status is None:
        return False
    status.update(update.status)
    events += [(e.type, e.reason, e.message) for e in update.events]
    return True


def api_message(exc: ApiException) -> str:
    """The API server's own message (what the user can act on), else the HTTP reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)[:500]
    except ValueError:
        return str(exc.reason)


async def _create(remote: RemoteCluster, ref: ResourceRef, namespace: str, body: dict[str, Any]) -> None:
    assert remote.kube is not None
    try:
        await remote.kube.create(ref, namespace, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
