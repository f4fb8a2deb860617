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
is also put on the check's message. The job's creation failing so
(403, 404 or 422) :data:`JOB_CREATE_ATTEMPTS` times in a row ends the
attempt: the check goes to ``Retry`` with the worker's message, the
Workload is evicted and its quota released, instead of holding quota while
retrying forever. The count is kept in memory (a restart starts it again:
at most a few more attempts).

Remote objects are found by the Workload's namespace and name and this
manager's origin (:func:`bound_job`), never through the owner job, which is
often gone already when its Workload is deleted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Mapping
from typing import Any

import structlog
from kubernetes.client.rest import ApiException

from multikueue.api import Workload
from multikueue.api.constants import CheckState, ConditionStatus, Finalizers, Labels
from multikueue.api.meta import Condition, utcnow
from multikueue.api.resources import WORKLOADS, ResourceRef
from multikueue.controllers.multikueue import dispatch
from multikueue.controllers.multikueue.connection import RemoteCluster
from multikueue.controllers.multikueue.remote_workload import remote_workload_copy
from multikueue.core import lifecycle
from multikueue.integrations.base import Integration, SyncLater
from multikueue.integrations.binding import bound_workload_name
from multikueue.runtime import metrics
from multikueue.runtime.expectations import PendingDeletes, uid_of
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.writer import EventSpec, WorkloadWriter

log = structlog.get_logger(__name__)

#: How soon to retry a status copy that had to wait (the manager's job not started yet).
SYNC_RETRY_SECONDS = 1.0
#: Permanent refusals (403/404/422) of a job's creation on the winner before the check goes to Retry.
#: Three attempts spaced by the work queue's backoff: a few seconds, enough for a racing namespace
#: or RBAC creation to land, short enough not to hold quota for a job that cannot start.
JOB_CREATE_ATTEMPTS = 3
#: Worker answers that retrying the same request will not change.
PERMANENT_STATUSES = (403, 404, 422)


def bound_job(
    remote: Any, plural: str, namespace: str, workload: str, origin: str, *, hint: str | None = None
) -> dict[str, Any] | None:
    """The job of kind ``plural`` on ``remote`` bound to Workload ``namespace/workload`` with this origin.

    Found by binding (:func:`~multikueue.integrations.binding.bound_workload_name`)
    and origin label, so no owner object is needed; ``hint`` (the owner's
    name, when known) is tried first to avoid a scan.
    """
    jobs: Mapping[tuple[str, tuple[str, str]], dict[str, Any]] = remote.jobs
    pending: PendingDeletes = remote.pending_deletes

    def ours(job: Mapping[str, Any] | None) -> bool:
        meta = (job or {}).get("metadata") or {}
        return bool(
            job is not None
            and bound_workload_name(job) == workload
            and (meta.get("labels") or {}).get(Labels.MULTIKUEUE_ORIGIN) == origin
            and not pending.pending(meta.get("uid"))
        )

    if hint is not None:
        job = jobs.get((plural, (namespace, hint)))
        if ours(job):
            return job
    for (kind, (ns, _)), job in list(jobs.items()):
        if kind == plural and ns == namespace and ours(job):
            return job
    return None

#: Worker-side actions that touch only their own worker (not the local Workload): safe to run side by side.
_INDEPENDENT_ACTIONS = (
    dispatch.CreateRemoteWorkload,
    dispatch.DeleteRemoteWorkload,
    dispatch.CreateRemoteJob,
    dispatch.DeleteRemoteJob,
    dispatch.SetRemotePriority,
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
        #: Permanent refusals of a job's creation in a row, per (namespace, workload, cluster).
        self.create_failures: dict[tuple[str, str, str], int] = {}

    async def release(self, wl: Workload) -> bool:
        """Drop the ``resource-in-use`` finalizer of a deleted Workload whose remote objects are gone.

        The lifecycle keeps it on a deleted Workload placed on workers
        (:func:`multikueue.core.lifecycle.next_update`) so this controller
        still sees the Workload and deletes the remote job and copy by name.
        """
        if Finalizers.RESOURCE_IN_USE not in (wl.metadata.finalizers or ()):
            return False
        released = await self.writer.apply(wl, lifecycle.WorkloadUpdate(transition="release", remove_finalizer=True))
        if released:
            log.debug("remote objects gone: workload released", workload=f"{wl.namespace}/{wl.name}")
        return released

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
            was_ready = _check_state(wl, check) == CheckState.READY
            wl = await self.writer.write(wl, status, events=events, admitted=admitted)
            if not was_ready and _check_state(wl, check) == CheckState.READY and wl.status.cluster_name:
                metrics.remote_workload_admitted(wl, wl.status.cluster_name)
            for kind, reason, message in events:  # a Warning (Rejected, Retry) at info, the rest at debug
                (log.info if kind == "Warning" else log.debug)("multikueue", workload=f"{wl.namespace}/{wl.name}", reason=reason, message=message)
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
            if exc.status in PERMANENT_STATUSES:
                message = f"Worker {remote.name!r}: {type(action).__name__} failed: {api_message(exc)}"
                if isinstance(action, dispatch.CreateRemoteJob) and self._count_refusal(remote.name):
                    await self._give_up(message)
                    return None
                # A missing namespace, CRD or permission on the worker: say so where the user looks.
                await self._report(message)
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
            created = await self._on_worker(remote, action, _create(remote, WORKLOADS, namespace, remote_workload_copy(wl, origin=origin)))
            if created:
                metrics.remote_workload_created(wl, remote.name)
                log.debug("remote workload created", workload=f"{namespace}/{name}", cluster=remote.name)
        elif isinstance(action, dispatch.DeleteRemoteWorkload):
            if await self._on_worker(remote, action, self._delete_copy(remote, namespace, name)):
                log.debug("remote workload deleted", workload=f"{namespace}/{name}", cluster=remote.name)
        elif isinstance(action, dispatch.SetRemotePriority):
            patch = {"spec": {"priority": action.priority}}
            await self._on_worker(remote, action, _patch_if_present(remote, WORKLOADS, namespace, name, patch))
            log.debug("remote workload priority set", workload=f"{namespace}/{name}", cluster=remote.name, priority=action.priority)
        elif isinstance(action, dispatch.CreateRemoteJob):
            if integration is None or owner is None:
                raise _Retry(SYNC_RETRY_SECONDS)
            # Off the event loop: an external kind's copy evaluates the entry's expressions on tenant data.
            body = await asyncio.to_thread(integration.adapter.remote_copy, owner, origin=origin, workload_name=name)
            if await self._on_worker(remote, action, _create(remote, integration.ref, namespace, body)):
                self.applier.create_failures.pop((namespace, name, remote.name), None)
                metrics.remote_job_created(wl, remote.name)
                # The Ready event of the next plan names the worker: a log line, not a second Event.
                log.debug("remote job created", workload=f"{namespace}/{name}", cluster=remote.name, kind=integration.adapter.kind)
            else:
                await self._name_taken(remote, action, integration, body)
        elif isinstance(action, dispatch.DeleteRemoteJob):
            if integration is None:
                return
            hint = owner["metadata"]["name"] if owner is not None else None
            job = bound_job(remote, integration.ref.plural, namespace, name, origin, hint=hint)
            if job is not None and await self._on_worker(remote, action, kube.delete(integration.ref, namespace, job["metadata"]["name"])):
                remote.pending_deletes.expect(uid_of(job))
                log.debug("remote job deleted", workload=f"{namespace}/{name}", cluster=remote.name, kind=integration.adapter.kind)
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
            log.debug("multikueue", workload=f"{namespace}/{name}", reason=event[1], message=event[2])

    async def _sync_job(self, remote: RemoteCluster, *, final: bool = False) -> bool:
        """Copy the worker job's status to the manager's; False when it has to wait."""
        integration, owner = self.integration, self.owner
        if integration is None:
            return True
        if owner is None:
            if not final:
                return True  # the next event of the owner brings it
            owner = self.owner = await self._read_owner(integration)
            if owner is None:
                return True  # gone: no status left to copy
        meta = owner["metadata"]
        remote_job = bound_job(
            remote, integration.ref.plural, meta["namespace"], self.wl.name, self.applier.origin, hint=meta["name"]
        )
        if remote_job is None:
            # Unknown because this kind is not watched there yet (a new CRD, missing RBAC): the
            # final status would be lost, so wait. Truly gone: nothing left to copy.
            return not final or integration.ref.plural in remote.watched
        adapter = integration.adapter
        if not final:
            await self._sync_spec(remote, adapter, remote_job)
        # Off the event loop, as the copy above: CEL and JSONPath on tenant objects (bounded, but not free).
        if final and adapter.tells_finished and not await asyncio.to_thread(adapter.is_finished, remote_job):
            return False  # the job's own final event is still on its way
        try:
            patch = await asyncio.to_thread(adapter.status_patch, owner, remote_job)
        except SyncLater:
            return False
        if patch is not None:
            await self.applier.kube.patch(integration.ref, meta["namespace"], meta["name"], patch, status=True)
            if await asyncio.to_thread(adapter.is_finished, remote_job):
                metrics.remote_job_finished(remote_job, remote.name)  # the final status reached the manager's job
        return True

    async def _read_owner(self, integration: Integration) -> Mapping[str, Any] | None:
        """The manager's owner object from the API server, when the integration's store does not hold it.

        Not held means gone, or not seen yet: a replica that just took the lead
        decides on Workloads before its watch of the job kind has listed every
        object (seen in CI: a Workload finished on its worker right after a
        manager restart was finished here without its Job's final status, and
        the Job stayed incomplete for good). Only the API server tells the two
        apart; an object of the same name but another UID is not the owner.
        """
        ref = next((r for r in self.wl.metadata.owner_references or [] if r.controller), None)
        if ref is None:
            return None
        found = await self.applier.kube.get_or_none(integration.ref, self.wl.namespace, ref.name)
        if found is None or (ref.uid and found["metadata"].get("uid") != ref.uid):
            return None
        log.debug("owner read from the API server for the final status", workload=f"{self.wl.namespace}/{self.wl.name}", owner=ref.name)
        return found

    async def _sync_spec(self, remote: RemoteCluster, adapter: Any, remote_job: Mapping[str, Any]) -> None:
        """Push the spec changes the adapter carries (a PipelineRun cancelled on the manager) to the worker's copy.

        The other direction of the status copy, for kinds a user acts on
        through the spec while they run. A refusal by the worker (no ``patch``
        in the manager's role there) is said on the check like any other.
        """
        assert self.owner is not None and remote.kube is not None
        patch = await asyncio.to_thread(adapter.spec_patch, self.owner, remote_job)
        if patch is None:
            return
        meta = remote_job["metadata"]
        call = remote.kube.patch(adapter.ref, meta["namespace"], meta["name"], patch)
        await self._on_worker(remote, dispatch.SyncJobStatus(remote.name), call)
        log.debug("remote job spec synced", workload=f"{meta['namespace']}/{self.wl.name}", cluster=remote.name, patch=patch)

    async def _delete_copy(self, remote: RemoteCluster, namespace: str, name: str) -> bool:
        """Drop the copy's ``resource-in-use`` finalizer, then delete it; False when it was gone already.

        As upstream's ``RemoveRemoteObjects``: the worker's Kueue puts the
        finalizer on a copy it reserved quota for; dropping it first means a
        deleted copy does not linger on a worker whose controller is down. The
        patch carries the copy's resourceVersion (a copy changed meanwhile is
        read again once); a copy already being deleted is not deleted again.
        """
        kube = remote.kube
        assert kube is not None
        copy = await kube.get_or_none(WORKLOADS, namespace, name)
        for _ in range(2):
            if copy is None:
                return False
            meta = copy["metadata"]
            finalizers = list(meta.get("finalizers") or [])
            if Finalizers.RESOURCE_IN_USE not in finalizers:
                break
            finalizers.remove(Finalizers.RESOURCE_IN_USE)
            patch = {"metadata": {"finalizers": finalizers or None, "resourceVersion": meta["resourceVersion"]}}
            try:
                copy = await kube.patch(WORKLOADS, namespace, name, patch)
                break
            except ApiException as exc:
                if exc.status == 404:
                    return False
                if exc.status != 409:
                    raise
                copy = await kube.get_or_none(WORKLOADS, namespace, name)
        if copy is None:
            return False
        if copy["metadata"].get("deletionTimestamp"):
            if not copy["metadata"].get("finalizers"):
                remote.pending_deletes.expect(uid_of(copy))  # gone with its last finalizer
            return False  # or its deletion was asked for already: it goes when its finalizers do
        deleted = await kube.delete(WORKLOADS, namespace, name)
        if deleted:
            remote.pending_deletes.expect(uid_of(copy))
        return deleted

    async def _name_taken(self, remote: RemoteCluster, action: Any, integration: Integration, body: Mapping[str, Any]) -> None:
        """The job's create answered 409: is the object of that name this Workload's (a lagging watch) or another's?

        Read by a list with a ``metadata.name`` field selector: the worker
        role grants list, not get. Ours: nothing to do, the watch brings it.
        Another's (another manager's, or a user's, of the same name): a
        refusal like a 403, said on the check and counted, so the Workload
        ends in ``Retry`` instead of waiting for good.
        """
        kube = remote.kube
        assert kube is not None
        namespace, job_name = self.wl.namespace or "", str(body["metadata"]["name"])
        found = await self._on_worker(
            remote, action, kube.list(integration.ref, namespace, field_selector=f"metadata.name={job_name}")
        )
        existing = next(iter(found or []), None)
        origin = ((existing or {}).get("metadata", {}).get("labels") or {}).get(Labels.MULTIKUEUE_ORIGIN)
        if existing is None or (origin == self.applier.origin and bound_workload_name(existing) == self.wl.name):
            return  # ours, or gone meanwhile: the next plan sees which
        whose = f"of origin {origin!r}" if origin else "not created by a MultiKueue manager"
        message = (
            f"Worker {remote.name!r}: CreateRemoteJob failed: a {integration.adapter.kind} named {job_name!r} "
            f"already exists in namespace {namespace!r} ({whose}); delete or rename one of them"
        )
        if self._count_refusal(remote.name):
            await self._give_up(message)
            return
        await self._report(message)
        raise WorkerCallFailed(remote.name, type(action).__name__, RuntimeError(message))

    def _count_refusal(self, cluster: str) -> bool:
        """Count one permanent refusal of the job's creation on ``cluster``; True when it is time to give up."""
        key = (self.wl.namespace or "", self.wl.name, cluster)
        count = self.applier.create_failures.get(key, 0) + 1
        if count >= JOB_CREATE_ATTEMPTS:
            self.applier.create_failures.pop(key, None)
            return True
        self.applier.create_failures[key] = count
        return False

    async def _give_up(self, message: str) -> None:
        """The winner keeps refusing the job: ``Retry`` with its message (evicted, quota released, dispatched again)."""
        wl = self.wl
        checks = [c.model_copy() for c in (wl.status.admission_checks or [])] if wl.status else []
        _set_check(checks, self.check, dispatch.SetCheckState(CheckState.RETRY, message))
        self.wl = await self.applier.writer.write(
            wl, {"admissionChecks": [c.to_dict() for c in checks]}, events=[("Warning", "MultiKueueRetry", message)]
        )
        log.warning(
            "multikueue job refused by the winner: check set to Retry",
            workload=f"{wl.namespace}/{wl.name}",
            message=message,
            fix="make the job creatable on that worker (namespace, RBAC, webhooks); the workload is dispatched again",
        )

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


def _check_state(wl: Workload, name: str) -> str | None:
    """The state of check ``name`` on ``wl``, or None."""
    return next((c.state for c in (wl.status.admission_checks or []) if c.name == name), None) if wl.status else None


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


async def _create(remote: RemoteCluster, ref: ResourceRef, namespace: str, body: dict[str, Any]) -> bool:
    """Create ``body``; False when it existed already (not an error, nothing to log)."""
    assert remote.kube is not None
    try:
        await remote.kube.create(ref, namespace, body)
        return True
    except ApiException as exc:
        if exc.status != 409:
            raise
        return False


async def _patch_if_present(remote: RemoteCluster, ref: ResourceRef, namespace: str, name: str, patch: dict[str, Any]) -> None:
    assert remote.kube is not None
    try:
        await remote.kube.patch(ref, namespace, name, patch)
    except ApiException as exc:
        if exc.status != 404:
            raise
