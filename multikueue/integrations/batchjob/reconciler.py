"""The ``batch/v1`` Job integration's I/O: a kopf handler feeding a work queue that applies :mod:`decide`.

A Job is reconciled when it changes and when its Workload changes (admitted,
evicted, finished), so it starts as soon as its Workload is admitted, and
every RESYNC_SECONDS. Each write carries the object's resourceVersion; a 409
makes the reconcile read the Job live and decide again on that. Any other
failure (an API server answering 500 while its etcd restarts, a network
error) is retried by the work queue with backoff: before it was only logged,
and the Job waited for an unrelated event (seen in the fault suite: two Jobs
never started).

With ``managedJobsNamespaceSelector`` set, a Job whose namespace does not
match is left alone (no Workload, never suspended), as the webhooks never see
it either; a Job that already has its Workload, or is bound to a prebuilt one,
stays managed whatever its namespace's labels become.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf
import structlog
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from multikueue.api import Workload
from multikueue.api.constants import WorkloadConditionType
from multikueue.api.meta import LabelSelector, utcnow, without_managed_fields
from multikueue.api.resources import NAMESPACES
from multikueue.api.workload import PriorityClassRef
from multikueue.integrations.batchjob import job as batchjob
from multikueue.integrations.batchjob.priority import priority_of
from multikueue.integrations.batchjob.startstop import MissingFlavorError, PodSetMergeConflict
from multikueue.integrations.batchjob.decide import JobAction, Step, decide, is_queued, workload_name_for
from multikueue.integrations.orphans import is_deleting
from multikueue.core import lifecycle
from multikueue.core.cache import Cache
from multikueue.core.matching import selector_matches
from multikueue.runtime.events import EventRecorder, ObjectRef
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.workqueue import WorkQueue
from multikueue.runtime.writer import WorkloadWriter
from multikueue.api.resources import JOBS, WORKLOADS

#: Every queued Job is reconciled again at least this often, whatever the events (level-triggered).
RESYNC_SECONDS = 60.0

log = structlog.get_logger(__name__)

JobKey = tuple[str, str]


class JobReconciler:
    """Creates Workloads for queued Jobs, starts and stops Jobs as their Workloads say.

    It is also the integration's :class:`~multikueue.integrations.base.ObjectSource`:
    the MultiKueue check reads the manager's Jobs through :meth:`get`.
    """

    def __init__(
        self,
        kube: AsyncKube,
        cache: Cache,
        writer: WorkloadWriter,
        events: EventRecorder,
        *,
        managed_namespaces: LabelSelector | None = None,
        manage_jobs_without_queue_name: bool = False,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.writer = writer
        self.events = events
        #: Upstream's ``managedJobsNamespaceSelector``; None manages every namespace.
        self.managed_namespaces = managed_namespaces
        #: Upstream's ``manageJobsWithoutQueueName``: Jobs without a queue name are managed too.
        self.without_queue_name = manage_jobs_without_queue_name
        #: Last seen body of every queued Job, to reconcile it when its Workload changes.
        self._jobs: dict[JobKey, dict[str, Any]] = {}
        #: (namespace, prebuilt Workload name) -> the Job bound to it (worker copies).
        self._prebuilt: dict[JobKey, JobKey] = {}
        #: One reconcile per Job at a time, the latest body, failures retried with backoff.
        self.queue: WorkQueue[JobKey] = WorkQueue(
            "jobs", self._handle, workers=8, expected=(ApiException, HTTPError, OSError), format_key=lambda k: f"{k[0]}/{k[1]}",
            urgent=self.started,
        )

    def started(self, key: JobKey) -> bool:
        """Urgent in the queue: a Job whose Workload was admitted, finished or is being deleted, or a
        Job being deleted that has a Workload (finished then, to give its quota back).

        Finish what was started before starting more: starting an admitted
        Job (and, on a MultiKueue manager, the status copied back to it,
        which waits for that start) goes ahead of creating Workloads for new
        Jobs. With 10,000 Jobs submitted at once, first come first served
        held admitted Jobs behind thousands of Workload creations (issue 16:
        Jobs done on the workers for minutes were not yet Complete on the
        manager until every Workload was created). Asked at every add: a
        name and a cache lookup.
        """
        job = self._jobs.get(key)
        if job is None:
            return False
        try:
            wl = self.cache.workload((key[0], workload_name_for(job)))
        except ValueError:  # no uid yet: no Workload either
            return False
        if wl is None:
            return False
        deleting = wl.metadata.deletion_timestamp is not None or is_deleting(job)
        return wl.is_admitted or wl.is_finished or deleting

    def _enqueue(self, key: JobKey) -> None:
        """Queue ``key``: handled once the queue runs (this replica leads), dropped while it is stopped."""
        self.queue.add(key)

    def start(self) -> None:
        """Start reconciling (this replica leads): every queued Job seen so far now, then every RESYNC_SECONDS.

        The periodic pass makes the integration level-triggered: a Job whose
        reconcile decided on a picture that changed without an event for it
        (seen once in CI: a worker copy whose admitted Workload never started
        it) is looked at again. The queue coalesces, so a pass adds at most one
        reconcile per Job, and an unchanged Job costs no API call.
        """
        if not self.queue.started:
            self.queue.start(resync=lambda: list(self._jobs), every=RESYNC_SECONDS)

    async def _handle(self, key: JobKey) -> float | None:
        job = self._jobs.get(key)
        if job is not None:
            await self.reconcile(job)
        return None

    async def stop(self) -> None:
        """Stop reconciling (leadership lost, or the process ends): no write after this returns."""
        await self.queue.stop()

    def get(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._jobs.get((namespace, name))

    def _store(self, key: JobKey, body: dict[str, Any]) -> None:
        """Keep the Job's last body (for as long as it exists: without the field managers' records)."""
        self._forget(key)
        self._jobs[key] = body = dict(without_managed_fields(body))
        prebuilt = batchjob.prebuilt_workload_name(body)
        if prebuilt:
            self._prebuilt[(key[0], prebuilt)] = key

    def _forget(self, key: JobKey) -> None:
        previous = self._jobs.pop(key, None)
        prebuilt = batchjob.prebuilt_workload_name(previous) if previous is not None else None
        if prebuilt and self._prebuilt.get((key[0], prebuilt)) == key:
            del self._prebuilt[(key[0], prebuilt)]

    def register(self, registry: kopf.OperatorRegistry) -> None:
        @kopf.on.event("batch", "v1", "jobs", registry=registry, id="job_integration")
        async def on_job(event: kopf.RawEvent, **_: Any) -> None:
            body = event["object"]
            meta = body.get("metadata", {})
            key = (meta.get("namespace", ""), meta.get("name", ""))
            log.debug("job event", job=f"{key[0]}/{key[1]}", type=event.get("type"), rv=meta.get("resourceVersion"))
            if event.get("type") == "DELETED" or not is_queued(body, without_queue_name=self.without_queue_name):
                self._forget(key)
                return
            self._store(key, body)
            self._enqueue(key)

    def bound_job(self, wl: Workload) -> tuple[str, str] | None:
        """The Job ``wl`` belongs to (its owner, or the Job naming it as its prebuilt Workload), if we know it."""
        for ref in wl.metadata.owner_references or []:
            if ref.kind == "Job" and ref.api_version == "batch/v1":
                key = (wl.namespace or "", ref.name)
                return key if key in self._jobs else None
        # A prebuilt Workload has no owner: the Job naming it, if any.
        prebuilt = self._prebuilt.get((wl.namespace or "", wl.name))
        return prebuilt if prebuilt is not None and prebuilt in self._jobs else None

    def releases(self, wl: Workload) -> bool:
        """Whether this integration stops ``wl``'s Job and then releases ``wl`` when it is preempted."""
        return self.bound_job(wl) is not None

    async def on_workload(self, wl: Workload) -> None:
        """Reconcile the Job bound to ``wl``, if we know it."""
        key = self.bound_job(wl)
        if key is not None:
            self._enqueue(key)

    def _priority(self, job: Mapping[str, Any]) -> tuple[int | None, PriorityClassRef | None]:
        return priority_of(
            job,
            self.cache.priority_class_value,
            self.cache.pod_priority_class_value,
            self.cache.default_pod_priority_class(),
        )

    async def reconcile(self, job: Mapping[str, Any]) -> None:
        """Decide on ``job`` and apply the decision; on a write conflict, decide again on the live Job.

        Writes carry the resourceVersion of the body decided on. A 409 means
        the Job changed since: usually its watch event is on its way, but a
        body that stays behind (an update the watch never delivered) would
        otherwise conflict on every resync, silently, for good (seen in CI: a
        worker's copy never started). So a conflict reads the Job live, keeps
        that body for later reconciles, and decides once more on it; a second
        conflict in a row is left to the work queue's retry with backoff.
        """
        meta = job.get("metadata", {})
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        key = (namespace, name)
        try:
            await self._reconcile(job)
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
        # A list by name, not a get: the controller's role grants list and watch on Jobs, never get.
        found = await self.kube.list(JOBS, namespace, field_selector=f"metadata.name={name}")
        live = found[0] if found else None
        if live is None:
            self._forget(key)
            return
        log.debug(
            "job changed since the version decided on; deciding again on the live Job",
            job=f"{namespace}/{name}",
            decided_on=meta.get("resourceVersion"),
            live=(live.get("metadata") or {}).get("resourceVersion"),
        )
        if not is_queued(live, without_queue_name=self.without_queue_name):
            self._forget(key)
            return
        self._store(key, live)
        await self._reconcile(live)  # a second 409 propagates: the queue retries with backoff

    async def _reconcile(self, job: Mapping[str, Any]) -> None:
        """One decision on ``job`` and its writes; a 409 from a write to the Job propagates."""
        meta = job.get("metadata", {})
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        wl = self.cache.workload((namespace, workload_name_for(job)))
        if wl is None and not await self._namespace_managed(job):
            return
        priority, priority_class = self._priority(job)
        try:
            action = decide(
                job, wl, flavors=self.cache.flavors, priority=priority, priority_class=priority_class,
                without_queue_name=self.without_queue_name,
            )  # fmt: skip
        except MissingFlavorError as exc:
            log.debug("job not started yet", job=f"{namespace}/{name}", reason=str(exc))
            return  # the flavor arrives with the next watch event, which reconciles again
        except PodSetMergeConflict as exc:
            self._event(job, "Warning", "FailedToStart", str(exc))
            return
        if action.step is Step.NONE:
            log.debug(
                "job reconciled: nothing to do",
                job=f"{namespace}/{name}",
                workload=wl.name if wl else None,
                workload_rv=wl.metadata.resource_version if wl else None,
                admitted=wl.is_condition_true(WorkloadConditionType.ADMITTED) if wl else None,
                suspended=batchjob.spec_of(job).get("suspend"),
            )
            return
        if action.step is Step.STOP and wl is not None and batchjob.prebuilt_workload_name(job):
            # A MultiKueue worker copy is created only once its Workload is admitted, but this
            # controller's watch of Workloads may lag behind its watch of Jobs: confirm with a live
            # read before suspending a Job that may be running for good reason.
            live = await self.kube.get_or_none(WORKLOADS, namespace, wl.name)  # a failure is retried by the queue
            if live is not None:
                fresh = Workload.from_k8s(live)
                self.cache.upsert_workload(fresh)
                action = decide(
                    job, fresh, flavors=self.cache.flavors, priority=priority, priority_class=priority_class,
                    without_queue_name=self.without_queue_name,
                )  # fmt: skip
                wl = fresh
                if action.step is Step.NONE:
                    return
        try:
            await self._apply(job, wl, action)
        except ApiException as exc:
            if exc.status == 404:
                return  # the Job is gone; its DELETED event forgets it
            if exc.status == 409:
                raise
            log.error("job reconcile failed", job=f"{namespace}/{name}", step=action.step.value, status=exc.status, error=exc.reason)
            self._event(job, "Warning", "ReconcileFailed", f"{action.step.value}: {exc.status} {exc.reason}")
            raise  # retried with backoff by the queue
        log.debug("job reconciled", job=f"{namespace}/{name}", step=action.step.value, message=action.message)

    async def _namespace_managed(self, job: Mapping[str, Any]) -> bool:
        """Whether a Job without a Workload yet is ours to manage: its namespace matches ``managed_namespaces``.

        A Job bound to a prebuilt Workload (a MultiKueue copy) always is. The
        cache's labels can lag a namespace that just opted in, while the
        webhooks (which the API server calls with the current labels) already
        suspended its Job: a suspended Job is checked against a live read
        before it is left alone. A failed read is retried by the queue.
        """
        if self.managed_namespaces is None or batchjob.prebuilt_workload_name(job):
            return True
        namespace = job.get("metadata", {}).get("namespace", "")
        # Every namespace carries kubernetes.io/metadata.name: no labels means not known yet.
        labels = self.cache.namespace_labels(namespace)
        if labels and selector_matches(self.managed_namespaces, labels):
            return True
        if labels and batchjob.spec_of(job).get("suspend") is not True:
            return False
        live = await self.kube.get_or_none(NAMESPACES, None, namespace)
        return live is not None and selector_matches(
            self.managed_namespaces, (live.get("metadata") or {}).get("labels") or {}
        )

    async def _apply(self, job: Mapping[str, Any], wl: Workload | None, action: JobAction) -> None:
        kube = self.kube
        meta = job["metadata"]
        namespace = meta["namespace"]
        if action.step is Step.CREATE_WORKLOAD:
            assert action.workload is not None
            try:
                await kube.create(WORKLOADS, namespace, action.workload.to_k8s())
            except ApiException as exc:
                if exc.status != 409:
                    raise
                return
            self._event(job, "Normal", "CreatedWorkload", f"Created Workload: {namespace}/{action.workload.name}")
        elif action.step is Step.RECREATE_WORKLOAD and wl is not None:
            await kube.delete(WORKLOADS, namespace, wl.name)
            self._event(job, "Normal", "DeletedWorkload", f"Deleted not matching Workload: {namespace}/{wl.name}")
        elif action.step in (Step.START, Step.STOP):
            rv = meta.get("resourceVersion")
            for step in action.job_patches:
                patch = dict(step.patch)
                patch["metadata"] = {**patch.get("metadata", {}), "resourceVersion": rv}
                result = await kube.patch(JOBS, namespace, meta["name"], patch, status=step.subresource == "status")
                rv = result["metadata"]["resourceVersion"]
            reason = "Started" if action.step is Step.START else "Stopped"
            self._event(job, "Normal", reason, action.message)
            if action.release and wl is not None:
                await self.writer.apply(wl, lifecycle.released(wl, utcnow()))
        elif action.step is Step.RELEASE_WORKLOAD and wl is not None:
            await self.writer.apply(wl, lifecycle.released(wl, utcnow()))
        elif action.step is Step.FINISH_WORKLOAD and wl is not None and action.finished_condition is not None:
            await self.writer.finish(wl, action.finished_condition)

    def _event(self, job: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.record(ObjectRef.of({"apiVersion": "batch/v1", "kind": "Job", **job}), type_, reason, message)
