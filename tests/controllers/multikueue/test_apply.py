"""The MultiKueue check's I/O layer against real apiservers: the plan applier and the controller's queue.

Everything runs in-process on the integration clusters (a manager and two
workers, apiserver only): the tests create Workloads and Jobs with the client,
build the :class:`PlanApplier` / :class:`MultiKueueController` themselves and
await them. The workers are small stand-ins for
:class:`~multikueue.controllers.multikueue.connection.RemoteCluster` (no
informers) around a real :class:`AsyncKube`; ``jobs`` is filled from the
worker's API, as the informer would.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import pytest_asyncio
from kubernetes import client
from kubernetes.client.rest import ApiException
from structlog.testing import capture_logs

from multikueue.api import Workload
from multikueue.api.constants import CheckState, Dispatcher, Finalizers, Labels, MultiKueue
from multikueue.api.resources import JOBS
from multikueue.controllers.multikueue import apply as apply_module
from multikueue.controllers.multikueue.apply import PlanApplier, WorkerCallFailed
from multikueue.controllers.multikueue.clusters import Membership
from multikueue.controllers.multikueue.remote_workload import RemoteCopy, remote_workload_copy
from multikueue.controllers.multikueue.connection import ConnectionState
from multikueue.controllers.multikueue.dispatch import (
    CreateRemoteJob,
    CreateRemoteWorkload,
    DeleteRemoteJob,
    DeleteRemoteWorkload,
    FinishLocal,
    Plan,
    SetCheckState,
    SetClusterName,
    SetNominatedClusters,
    SyncJobStatus,
    reservation_message,
)
from multikueue.controllers.multikueue.workloads import (
    CONFLICT_RETRY_SECONDS,
    UNKNOWN_CHECK_GRACE_SECONDS,
    DispatchSettings,
    MultiKueueController,
)
from multikueue.core.cache import Cache
from multikueue.dev import objects as o
from multikueue.dev.controllers import free_port
from multikueue.dev.pytest_plugin import Clusters
from multikueue.integrations.base import Integration
from multikueue.integrations.batchjob.adapter import BatchJobAdapter
from multikueue.integrations.registry import IntegrationSet
from multikueue.runtime.events import EventRecorder
from multikueue.runtime.expectations import PendingDeletes
from multikueue.runtime.kube import AsyncKube, TransportError, load_api_client
from multikueue.runtime.workqueue import FakeClock, WorkQueue
from multikueue.runtime.writer import WorkloadWriter

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ORIGIN = "apply-test"
CHECK = "mk-apply"
WORKERS = ("worker1", "worker2")
WAITING = 'Nominated worker clusters: "worker1", "worker2"; waiting for one of them to reserve quota'


# --- time and objects ------------------------------------------------------------------


def ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(seconds: float) -> str:
    return ts(datetime.now(timezone.utc) - timedelta(seconds=seconds))


def cond(ctype: str, status: str, reason: str, message: str = "", at: str | None = None) -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason, "message": message, "lastTransitionTime": at or ago(60)}


def job_cond(ctype: str, reason: str, message: str = "") -> dict[str, Any]:
    now = ago(1)
    return {"type": ctype, "status": "True", "reason": reason, "message": message, "lastProbeTime": now, "lastTransitionTime": now}


def completed_status(started: str, completed: str) -> dict[str, Any]:
    """A worker Job's status once it completed (one pod succeeded), as its Job controller writes it."""
    return {
        "startTime": started,
        "completionTime": completed,
        "active": None,
        "succeeded": 1,
        "uncountedTerminatedPods": {},
        "conditions": [
            job_cond("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods"),
            job_cond("Complete", "CompletionsReached", "Reached expected number of succeeded pods"),
        ],
    }


def raw(response: Any) -> dict[str, Any]:
    """The API server's JSON of a client call made with ``_preload_content=False`` (as an informer sees it)."""
    return json.loads(response.data)  # type: ignore[no-any-return]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@dataclass
class Worker:
    """What the applier uses of a RemoteCluster (name, kube, jobs, watched), plus what the controller reads."""

    name: str
    kube: AsyncKube | None
    jobs: dict[tuple[str, tuple[str, str]], dict[str, Any]] = field(default_factory=dict)
    watched: set[str] = field(default_factory=lambda: {JOBS.plural})
    workloads: dict[tuple[str, str], Workload] = field(default_factory=dict)
    state: ConnectionState = field(default_factory=lambda: ConnectionState(True, "Active", "connected"))
    pending_deletes: PendingDeletes = field(default_factory=PendingDeletes)


@dataclass
class Env:
    clusters: Clusters
    manager: AsyncKube
    workers: dict[str, Worker]
    events: EventRecorder
    writer: WorkloadWriter
    applier: PlanApplier
    kueue: o.Kueue
    worker_kueue: dict[str, o.Kueue]
    api: client.ApiClient
    worker_api: dict[str, client.ApiClient]

    # -- the manager's Workloads --------------------------------------------------------

    def create_workload(
        self,
        namespace: str,
        name: str,
        *,
        check_state: str = CheckState.PENDING,
        check_message: str = "",
        status: Mapping[str, Any] | None = None,
        owner: Mapping[str, Any] | None = None,
    ) -> Workload:
        """A Workload holding a quota reservation with the MultiKueue check (as the scheduler leaves it); read back.

        It carries the ``resource-in-use`` finalizer and, with the check Ready, ``Admitted``: no
        lifecycle write is due, so a controller running in the same session leaves it alone.
        """
        body = o.workload(namespace, name, "user-queue", {"cpu": "1"})
        body["metadata"]["finalizers"] = [Finalizers.RESOURCE_IN_USE]
        body["metadata"]["labels"] = {"team": "a", Labels.JOB_UID: "0000-the-manager-job-uid"}
        if owner is not None:
            meta = owner["metadata"]
            body["metadata"]["ownerReferences"] = [
                {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"], "controller": True}
            ]
        self.kueue.create(body)
        conditions = [cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq")]
        if check_state == CheckState.READY:
            # As the lifecycle leaves it: nothing else would write to this Workload behind the test's back.
            conditions.append(cond("Admitted", "True", "Admitted", "The workload is admitted by ClusterQueue cq"))
        full: dict[str, Any] = {
            "conditions": conditions,
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [{"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1"}, "count": 1}],
            },
            "admissionChecks": [
                {"name": CHECK, "state": check_state, "message": check_message, "lastTransitionTime": ago(120)}
            ],
            **(status or {}),
        }
        self.kueue.patch("Workload", name, {"status": full}, namespace, status=True)
        return self.read(namespace, name)

    def read(self, namespace: str, name: str) -> Workload:
        return Workload.from_k8s(self.kueue.get("Workload", name, namespace))

    def touch(self, wl: Workload) -> None:
        """Change the Workload behind ``wl``'s back: ``wl`` is now stale."""
        self.kueue.patch("Workload", wl.name, {"metadata": {"labels": {"touched": uuid.uuid4().hex[:8]}}}, wl.namespace)

    def check(self, wl: Mapping[str, Any]) -> dict[str, Any]:
        return next(c for c in wl["status"]["admissionChecks"] if c["name"] == CHECK)

    # -- the workers --------------------------------------------------------------------

    def remote_workload(self, worker: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.worker_kueue[worker].get_or_none("Workload", name, namespace)

    def remote_job(self, worker: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return raw(client.BatchV1Api(self.worker_api[worker]).read_namespaced_job(name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def see_job(self, worker: str, namespace: str, name: str) -> None:
        """Put the worker's Job in the stand-in's ``jobs``, as its informer would."""
        job = self.remote_job(worker, namespace, name)
        assert job is not None
        self.workers[worker].jobs[(JOBS.plural, (namespace, name))] = job

    async def events_of(self, namespace: str, name: str, reason: str, timeout: float = 10) -> list[client.CoreV1Event]:
        def find() -> list[client.CoreV1Event]:
            events = client.CoreV1Api(self.api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
            return [e for e in events.items if e.reason == reason]

        return await until(find, f"a {reason} Event about {namespace}/{name}", timeout)


async def until(fn: Callable[[], Any], what: str, timeout: float = 10) -> Any:
    """Poll a blocking ``fn`` (in a thread, so the loop keeps posting Events) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        result = await asyncio.to_thread(fn)
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last value: {result!r}")
        await asyncio.sleep(0.05)


def kube_of(path: Any) -> AsyncKube:
    return AsyncKube(load_api_client(str(path), 8), workers=8)


def unreachable_kube(clusters: Clusters, index: int) -> AsyncKube:
    """A real client for a worker whose API server does not answer (a closed port): TransportError."""
    api = load_api_client(str(clusters.kubeconfigs[index]), 2)
    api.configuration.host = f"https://127.0.0.1:{free_port()}"
    return AsyncKube(api, workers=2)


@pytest.fixture(autouse=True)
def logs() -> Iterator[list[dict[str, Any]]]:
    with capture_logs() as entries:
        yield entries


@pytest_asyncio.fixture
async def env(integration_clusters: Clusters) -> AsyncIterator[Env]:
    manager = kube_of(integration_clusters.kubeconfigs[0])
    workers = {name: Worker(name, kube_of(integration_clusters.kubeconfigs[i])) for i, name in enumerate(WORKERS, start=1)}
    events = EventRecorder(manager)
    events.start()
    writer = WorkloadWriter(manager, events)
    api = integration_clusters.manager
    worker_api = {name: integration_clusters.worker(i) for i, name in enumerate(WORKERS, start=1)}
    environment = Env(
        clusters=integration_clusters,
        manager=manager,
        workers=workers,
        events=events,
        writer=writer,
        applier=PlanApplier(manager, writer, origin=ORIGIN),
        kueue=o.Kueue(api),
        worker_kueue={name: o.Kueue(a) for name, a in worker_api.items()},
        api=api,
        worker_api=worker_api,
    )
    try:
        yield environment
    finally:
        await events.stop()
        for kube in [manager, *(w.kube for w in workers.values())]:
            if kube is not None:
                await kube.close()
        for a in [api, *worker_api.values()]:
            a.close()


def nominate_plan() -> Plan:
    """What ``decide`` plans for a fresh Workload with both workers active (all at once)."""
    return Plan(
        (
            CreateRemoteWorkload("worker1"),
            CreateRemoteWorkload("worker2"),
            SetNominatedClusters(WORKERS),
            SetCheckState(CheckState.PENDING, WAITING),
        )
    )


# --- 1. the commit point ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_stale_plan_fails_with_409_before_any_worker_is_touched(env: Env, namespace: str) -> None:
    ns, name = namespace, "stale"
    stale = env.create_workload(ns, name)
    env.touch(stale)

    with pytest.raises(ApiException) as raised:
        await env.applier.apply(stale, nominate_plan(), CHECK, env.workers, None, None)
    assert raised.value.status == 409
    for worker in WORKERS:
        assert env.remote_workload(worker, ns, name) is None, f"a stale plan created a copy on {worker}"
    local = env.kueue.get("Workload", name, ns)
    assert "nominatedClusterNames" not in local["status"]
    assert (env.check(local)["state"], env.check(local)["message"]) == ("Pending", "")

    # The same plan on a fresh copy goes through: the local status first, then both copies.
    fresh = env.read(ns, name)
    before = env.check(env.kueue.get("Workload", name, ns))
    assert await env.applier.apply(fresh, nominate_plan(), CHECK, env.workers, None, None) is None
    local = env.kueue.get("Workload", name, ns)
    assert local["status"]["nominatedClusterNames"] == list(WORKERS)
    check = env.check(local)
    assert (check["state"], check["message"]) == ("Pending", WAITING)
    assert check["lastTransitionTime"] == before["lastTransitionTime"], "the state did not change: neither may its time"
    for worker in WORKERS:
        copy = env.remote_workload(worker, ns, name)
        assert copy is not None, f"no copy on {worker}"
        labels = copy["metadata"]["labels"]
        assert labels[Labels.MULTIKUEUE_ORIGIN] == ORIGIN
        assert labels["team"] == "a" and Labels.JOB_UID not in labels
        assert not copy["metadata"].get("ownerReferences") and not copy["metadata"].get("finalizers")
        assert "admission" not in (copy.get("status") or {})
        assert copy["spec"]["podSets"][0]["count"] == 1 and copy["spec"]["queueName"] == "user-queue"


@pytest.mark.asyncio
async def test_a_copy_that_exists_already_is_not_an_error(env: Env, namespace: str) -> None:
    ns, name = namespace, "again"
    wl = env.create_workload(ns, name)
    assert await env.applier.apply(wl, nominate_plan(), CHECK, env.workers, None, None) is None
    uid = env.remote_workload("worker1", ns, name)["metadata"]["uid"]  # type: ignore[index]
    # The watch had not shown the copy yet: the next plan creates it again (a 409 from the worker, ignored).
    again = Plan((CreateRemoteWorkload("worker1"),))
    assert await env.applier.apply(env.read(ns, name), again, CHECK, env.workers, None, None) is None
    assert env.remote_workload("worker1", ns, name)["metadata"]["uid"] == uid  # type: ignore[index]


# --- 2. order: the local write comes first, worker errors are reported on the check -----------


@pytest.mark.asyncio
async def test_local_status_is_written_before_the_worker_fails_and_the_error_is_reported(
    env: Env, integration_clusters: Clusters
) -> None:
    ns, name = unique("solo"), "lonely"
    # The namespace exists on the manager and worker1 only.
    for api in (env.api, env.worker_api["worker1"]):
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    wl = env.create_workload(ns, name)

    with pytest.raises(WorkerCallFailed) as raised:
        await env.applier.apply(wl, nominate_plan(), CHECK, env.workers, None, None)
    assert isinstance(raised.value.cause, ApiException) and raised.value.cause.status == 404
    assert raised.value.cluster == "worker2"

    local = env.kueue.get("Workload", name, ns)
    assert local["status"]["nominatedClusterNames"] == list(WORKERS), "the local status was not written first"
    check = env.check(local)
    assert check["state"] == "Pending"
    assert check["message"] == f"Worker 'worker2': CreateRemoteWorkload failed: namespaces \"{ns}\" not found"
    # The other worker was not held back by the failure.
    assert env.remote_workload("worker1", ns, name) is not None
    [event] = await env.events_of(ns, name, "MultiKueueWorkerError")
    assert event.type == "Warning" and event.message == check["message"]
    assert event.involved_object.uid == local["metadata"]["uid"]
    # The plan's own Event was posted too (with the first write).
    await env.events_of(ns, name, "MultiKueuePending")

    # The same failure again: the message already says so, no second write or Event.
    rv = local["metadata"]["resourceVersion"]
    with pytest.raises(WorkerCallFailed):
        await env.applier.apply(env.read(ns, name), Plan((CreateRemoteWorkload("worker2"),)), CHECK, env.workers, None, None)
    assert env.kueue.get("Workload", name, ns)["metadata"]["resourceVersion"] == rv
    await asyncio.sleep(0.5)
    assert len(await env.events_of(ns, name, "MultiKueueWorkerError")) == 1


@pytest.mark.asyncio
async def test_a_stale_plan_reports_nothing_on_the_check(env: Env, namespace: str) -> None:
    """A 409 at the commit point is not a worker error: the check's message stays as it was."""
    ns, name = namespace, "quiet"
    wl = env.create_workload(ns, name, check_message="as before")
    env.touch(wl)
    with pytest.raises(ApiException):
        await env.applier.apply(wl, nominate_plan(), CHECK, env.workers, None, None)
    assert env.check(env.kueue.get("Workload", name, ns))["message"] == "as before"


# --- 3. side by side --------------------------------------------------------------------------


class GatedKube(AsyncKube):
    """A real client whose ``create`` first waits until the other worker's ``create`` has started.

    Applied one worker after the other, the first call would wait forever: the
    plan only completes when both workers are acted on at the same time.
    """

    def __init__(self, api: client.ApiClient, mine: asyncio.Event, theirs: asyncio.Event) -> None:
        super().__init__(api, workers=2)
        self.mine, self.theirs = mine, theirs

    async def create(self, ref: Any, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        self.mine.set()
        await asyncio.wait_for(self.theirs.wait(), 5)
        return await super().create(ref, namespace, body)


@pytest.mark.asyncio
async def test_workers_are_acted_on_side_by_side(env: Env, namespace: str) -> None:
    ns, name = namespace, "together"
    first, second = asyncio.Event(), asyncio.Event()
    gated = {
        "worker1": Worker("worker1", GatedKube(load_api_client(str(env.clusters.kubeconfigs[1]), 2), first, second)),
        "worker2": Worker("worker2", GatedKube(load_api_client(str(env.clusters.kubeconfigs[2]), 2), second, first)),
    }
    try:
        wl = env.create_workload(ns, name)
        assert await asyncio.wait_for(env.applier.apply(wl, nominate_plan(), CHECK, gated, None, None), 15) is None
    finally:
        for w in gated.values():
            await w.kube.close()  # type: ignore[union-attr]
    assert all(env.remote_workload(w, ns, name) for w in WORKERS)


@pytest.mark.asyncio
async def test_one_worker_failing_does_not_stop_the_other(env: Env, namespace: str) -> None:
    ns, name = namespace, "one-down"
    down = Worker("worker1", unreachable_kube(env.clusters, 1))
    workers = {"worker1": down, "worker2": env.workers["worker2"]}
    try:
        wl = env.create_workload(ns, name)
        # The unreachable worker comes first in the plan: the other worker's copy is created all the same.
        with pytest.raises(WorkerCallFailed) as raised:
            await env.applier.apply(wl, nominate_plan(), CHECK, workers, None, None)
        assert isinstance(raised.value.cause, TransportError)
    finally:
        await down.kube.close()  # type: ignore[union-attr]
    assert env.remote_workload("worker2", ns, name) is not None
    local = env.kueue.get("Workload", name, ns)
    assert local["status"]["nominatedClusterNames"] == list(WORKERS)
    # Not a 403/404/422: nothing the user can act on, so the check's message is the plan's.
    assert env.check(local)["message"] == WAITING


@pytest.mark.asyncio
async def test_actions_on_one_worker_run_in_plan_order(env: Env, namespace: str) -> None:
    ns, name = namespace, "ordered"
    wl = env.create_workload(ns, name)
    old = env.worker_kueue["worker1"].create(
        {**o.workload(ns, name, "other-queue", {"cpu": "1"}), "metadata": {"name": name, "namespace": ns, "labels": {"old": "yes"}}}
    )
    plan = Plan((DeleteRemoteWorkload("worker1"), CreateRemoteWorkload("worker1"), CreateRemoteWorkload("worker2")))
    assert await env.applier.apply(wl, plan, CHECK, env.workers, None, None) is None
    new = env.remote_workload("worker1", ns, name)
    assert new is not None and new["metadata"]["uid"] != old["metadata"]["uid"], "the copy was not deleted, then created"
    assert new["metadata"]["labels"][Labels.MULTIKUEUE_ORIGIN] == ORIGIN and new["spec"]["queueName"] == "user-queue"
    assert env.remote_workload("worker2", ns, name) is not None


# --- 4. the winner: converge, status sync, finish ----------------------------------------------


def manager_job(env: Env, namespace: str, name: str) -> dict[str, Any]:
    body = o.batch_job(namespace, name, None, {"cpu": "1"}, managed_by=MultiKueue.MANAGED_BY)
    return raw(client.BatchV1Api(env.api).create_namespaced_job(namespace, body, _preload_content=False))


def read_job(env: Env, namespace: str, name: str) -> dict[str, Any]:
    return raw(client.BatchV1Api(env.api).read_namespaced_job(name, namespace, _preload_content=False))


def batch_integration() -> Integration:
    class NoObjects:
        def get(self, namespace: str, name: str) -> Mapping[str, Any] | None:
            return None

    return Integration(BatchJobAdapter(), NoObjects())


@pytest.mark.asyncio
async def test_converging_on_a_winner_admits_in_the_same_write(env: Env, namespace: str) -> None:
    ns, name = namespace, "winner"
    job = manager_job(env, ns, "sample")
    wl = env.create_workload(ns, name, owner=job, check_message=WAITING, status={"nominatedClusterNames": list(WORKERS)})
    assert await env.applier.apply(wl, nominate_plan(), CHECK, env.workers, None, None) is None
    wl = env.read(ns, name)

    plan = Plan(
        (
            DeleteRemoteWorkload("worker2"),
            CreateRemoteJob("worker1"),
            SetNominatedClusters(()),
            SetClusterName("worker1"),
            SetCheckState(CheckState.READY, reservation_message("worker1")),
        )
    )
    assert await env.applier.apply(wl, plan, CHECK, env.workers, batch_integration(), job) is None

    local = env.kueue.get("Workload", name, ns)
    assert local["status"]["clusterName"] == "worker1" and "nominatedClusterNames" not in local["status"]
    assert (env.check(local)["state"], env.check(local)["message"]) == ("Ready", 'The workload got reservation on "worker1"')
    assert o.is_true(local, "Admitted"), "Admitted was not folded into the check's write"
    assert env.remote_workload("worker2", ns, name) is None
    remote = env.remote_job("worker1", ns, "sample")
    assert remote is not None
    assert remote["metadata"]["labels"][Labels.MULTIKUEUE_ORIGIN] == ORIGIN
    assert remote["metadata"]["labels"][Labels.PREBUILT_WORKLOAD_NAME] == name
    assert "managedBy" not in remote["spec"] and remote["spec"]["suspend"] is True
    await env.events_of(ns, name, "MultiKueueReady")


@pytest.mark.asyncio
async def test_a_job_that_is_not_known_yet_is_created_later(env: Env, namespace: str) -> None:
    ns, name = namespace, "no-owner-yet"
    wl = env.create_workload(ns, name, check_state=CheckState.READY, status={"clusterName": "worker1"})
    # The owner's watch lags (integration known, object not seen): look again after a moment, create nothing.
    assert await env.applier.apply(wl, Plan((CreateRemoteJob("worker1"),)), CHECK, env.workers, batch_integration(), None) == (
        apply_module.SYNC_RETRY_SECONDS
    )


@pytest.mark.asyncio
async def test_status_sync_then_finish(env: Env, namespace: str) -> None:
    ns, name, job_name = namespace, "runs", "sample"
    owner = manager_job(env, ns, job_name)
    wl = env.create_workload(
        ns,
        name,
        owner=owner,
        check_state=CheckState.READY,
        check_message=reservation_message("worker1"),
        status={"clusterName": "worker1"},
    )
    integration = batch_integration()
    plan = Plan((CreateRemoteWorkload("worker1"), CreateRemoteJob("worker1")))
    assert await env.applier.apply(wl, plan, CHECK, env.workers, integration, owner) is None
    workers_api = client.BatchV1Api(env.worker_api["worker1"])

    # The worker's Kueue starts its Job; the manager's Job is still suspended: the copy waits.
    started = ago(30)
    workers_api.patch_namespaced_job(job_name, ns, {"spec": {"suspend": False}})
    workers_api.patch_namespaced_job_status(job_name, ns, {"status": {"startTime": started, "active": 1}})
    env.see_job("worker1", ns, job_name)
    assert await env.applier.apply(env.read(ns, name), Plan((SyncJobStatus("worker1"),)), CHECK, env.workers, integration, owner) == (
        apply_module.SYNC_RETRY_SECONDS
    )
    assert not read_job(env, ns, job_name).get("status")

    # The manager's Job controller started the manager's Job: the running status is copied.
    client.BatchV1Api(env.api).patch_namespaced_job(job_name, ns, {"spec": {"suspend": False}})
    owner = read_job(env, ns, job_name)
    assert await env.applier.apply(env.read(ns, name), Plan((SyncJobStatus("worker1"),)), CHECK, env.workers, integration, owner) is None
    owner = read_job(env, ns, job_name)
    assert owner["status"]["active"] == 1 and owner["status"]["startTime"] == started

    # The worker's Workload copy says Finished but its Job's final status is not there yet: wait, finish nothing.
    finish = Plan(
        (
            FinishLocal("worker1", "Succeeded", "Job finished successfully"),
            DeleteRemoteJob("worker1"),
            DeleteRemoteWorkload("worker1"),
        )
    )
    env.see_job("worker1", ns, job_name)
    wl = env.read(ns, name)
    assert await env.applier.apply(wl, finish, CHECK, env.workers, integration, owner) == apply_module.SYNC_RETRY_SECONDS
    assert not o.condition(env.kueue.get("Workload", name, ns), "Finished")
    assert env.remote_job("worker1", ns, job_name) is not None and env.remote_workload("worker1", ns, name) is not None

    # The worker's Job completes.
    completed = ago(1)
    workers_api.patch_namespaced_job_status(job_name, ns, {"status": completed_status(started, completed)})
    env.see_job("worker1", ns, job_name)
    assert await env.applier.apply(wl, finish, CHECK, env.workers, integration, owner) is None

    owner = read_job(env, ns, job_name)
    assert o.is_true(owner, "Complete") and o.is_true(owner, "SuccessCriteriaMet")
    assert owner["status"]["succeeded"] == 1 and owner["status"]["completionTime"] == completed
    assert owner["status"]["startTime"] == started and not owner["status"].get("active")
    local = env.kueue.get("Workload", name, ns)
    finished = o.condition(local, "Finished")
    assert finished is not None
    assert (finished["status"], finished["reason"], finished["message"]) == ("True", "Succeeded", "Job finished successfully")
    # Then the worker's objects go (the Job is this manager's: it carries its origin).
    assert env.remote_job("worker1", ns, job_name) is None
    assert env.remote_workload("worker1", ns, name) is None
    [event] = await env.events_of(ns, name, "MultiKueueFinished")
    assert event.message == "finished on worker worker1: Succeeded: Job finished successfully"


@pytest.mark.asyncio
async def test_finishing_reads_an_owner_the_store_has_not_seen_from_the_api_server(env: Env, namespace: str) -> None:
    """A new leader's store of Jobs may not hold the owner yet: its final status must still reach it."""
    ns, name, job_name = namespace, "unseen-owner", "sample"
    owner = manager_job(env, ns, job_name)
    wl = env.create_workload(
        ns, name, owner=owner, check_state=CheckState.READY, check_message=reservation_message("worker1"),
        status={"clusterName": "worker1"},
    )  # fmt: skip
    integration = batch_integration()  # its store holds no Job
    assert await env.applier.apply(wl, Plan((CreateRemoteJob("worker1"),)), CHECK, env.workers, integration, owner) is None
    client.BatchV1Api(env.api).patch_namespaced_job(job_name, ns, {"spec": {"suspend": False}})
    workers_api = client.BatchV1Api(env.worker_api["worker1"])
    workers_api.patch_namespaced_job(job_name, ns, {"spec": {"suspend": False}})
    completed = ago(1)
    workers_api.patch_namespaced_job_status(job_name, ns, {"status": completed_status(ago(20), completed)})
    env.see_job("worker1", ns, job_name)
    finish = Plan((FinishLocal("worker1", "Succeeded", "done"), DeleteRemoteJob("worker1")))
    assert await env.applier.apply(env.read(ns, name), finish, CHECK, env.workers, integration, None) is None
    job = read_job(env, ns, job_name)
    assert o.is_true(job, "Complete") and job["status"]["completionTime"] == completed
    assert o.is_true(env.kueue.get("Workload", name, ns), "Finished")


@pytest.mark.asyncio
async def test_finishing_without_an_owner_left_finishes_at_once(env: Env, namespace: str) -> None:
    ns, name = namespace, "owner-gone"
    owner = manager_job(env, ns, "sample")
    wl = env.create_workload(ns, name, owner=owner, check_state=CheckState.READY, status={"clusterName": "worker1"})
    client.BatchV1Api(env.api).delete_namespaced_job("sample", ns, propagation_policy="Orphan")
    plan = Plan((FinishLocal("worker1", "Succeeded", "done"),))
    assert await env.applier.apply(wl, plan, CHECK, env.workers, batch_integration(), None) is None
    assert o.is_true(env.kueue.get("Workload", name, ns), "Finished")


@pytest.mark.asyncio
async def test_finish_waits_while_the_job_kind_is_not_watched_on_the_worker(env: Env, namespace: str) -> None:
    ns, name = namespace, "unwatched"
    owner = manager_job(env, ns, "sample")
    wl = env.create_workload(ns, name, owner=owner, check_state=CheckState.READY, status={"clusterName": "worker1"})
    blind = {"worker1": Worker("worker1", env.workers["worker1"].kube, watched=set())}
    plan = Plan((FinishLocal("worker1", "Succeeded", "done"),))
    assert await env.applier.apply(wl, plan, CHECK, blind, batch_integration(), owner) == apply_module.SYNC_RETRY_SECONDS
    assert not o.condition(env.kueue.get("Workload", name, ns), "Finished")
    # Watched, and the Job is gone from the worker: nothing left to copy, the Workload finishes.
    assert await env.applier.apply(wl, plan, CHECK, env.workers, batch_integration(), owner) is None
    assert o.is_true(env.kueue.get("Workload", name, ns), "Finished")


@pytest.mark.asyncio
async def test_a_job_of_another_manager_is_not_deleted(env: Env, namespace: str) -> None:
    ns, name = namespace, "foreign"
    owner = manager_job(env, ns, "sample")
    wl = env.create_workload(ns, name, owner=owner)
    body = BatchJobAdapter().remote_copy(owner, origin="someone-else", workload_name=name)
    client.BatchV1Api(env.worker_api["worker1"]).create_namespaced_job(ns, body)
    env.see_job("worker1", ns, "sample")
    assert await env.applier.apply(wl, Plan((DeleteRemoteJob("worker1"),)), CHECK, env.workers, batch_integration(), owner) is None
    assert env.remote_job("worker1", ns, "sample") is not None


@pytest.mark.asyncio
async def test_deleting_a_remote_copy_drops_its_finalizer(env: Env, namespace: str) -> None:
    ns, name = namespace, "held"
    wl = env.create_workload(ns, name)
    body = o.workload(ns, name, "user-queue", {"cpu": "1"})
    body["metadata"]["finalizers"] = [Finalizers.RESOURCE_IN_USE]  # the worker's Kueue reserved quota for the copy
    body["metadata"]["labels"] = {Labels.MULTIKUEUE_ORIGIN: ORIGIN}
    env.worker_kueue["worker1"].create(body)
    try:
        assert await env.applier.apply(wl, Plan((DeleteRemoteWorkload("worker1"),)), CHECK, env.workers, None, None) is None
        assert env.remote_workload("worker1", ns, name) is None, "the copy is left terminating behind its finalizer"
    finally:
        if env.remote_workload("worker1", ns, name) is not None:
            env.worker_kueue["worker1"].patch("Workload", name, {"metadata": {"finalizers": None}}, ns)


async def refused_until_retry(env: Env, ns: str, name: str, owner: Mapping[str, Any], message: str) -> None:
    """Create the job on worker1 until the refusals end the attempt: ``message`` on a Pending check, then on Retry."""
    plan = Plan((CreateRemoteJob("worker1"),))
    for attempt in range(1, apply_module.JOB_CREATE_ATTEMPTS):
        with pytest.raises(WorkerCallFailed):
            await env.applier.apply(env.read(ns, name), plan, CHECK, env.workers, batch_integration(), owner)
        check = env.check(env.kueue.get("Workload", name, ns))
        assert (check["state"], check["message"]) == ("Pending", message), f"attempt {attempt}"
    assert await env.applier.apply(env.read(ns, name), plan, CHECK, env.workers, batch_integration(), owner) is None
    local = env.kueue.get("Workload", name, ns)
    check = env.check(local)
    if (check["state"], check["message"]) != ("Retry", message):
        # The session's controller (started by other tests on the same manager) may already have
        # acted on the Retry: evicted, check back to Pending. Its Evicted condition quotes our message.
        evicted = o.condition(local, "Evicted")
        assert evicted is not None and message in evicted["message"], (check, evicted)


@pytest.mark.asyncio
async def test_a_job_the_winner_keeps_refusing_ends_in_retry_with_its_message(env: Env) -> None:
    """Issue 10, item D: a permanent refusal does not leave the Workload holding quota, retried forever."""
    ns, name = unique("refused"), "refused"
    client.CoreV1Api(env.api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))  # not on worker1
    owner = manager_job(env, ns, "sample")
    starting = 'The workload got reservation on "worker1"; creating its job there'
    env.create_workload(ns, name, owner=owner, check_message=starting, status={"clusterName": "worker1"})
    refused = f"Worker 'worker1': CreateRemoteJob failed: namespaces \"{ns}\" not found"
    await refused_until_retry(env, ns, name, owner, refused)
    local = env.kueue.get("Workload", name, ns)
    assert not o.is_true(local, "Admitted")
    await env.events_of(ns, name, "MultiKueueRetry")


@pytest.mark.asyncio
async def test_a_job_name_taken_on_the_winner_by_another_origin_ends_in_retry(env: Env, namespace: str) -> None:
    """The name is taken there by someone else's Job: said on the check, counted as a refusal, then Retry."""
    ns, name = namespace, "taken"
    owner = manager_job(env, ns, "sample")
    other = BatchJobAdapter().remote_copy(owner, origin="another-manager", workload_name=name)
    client.BatchV1Api(env.worker_api["worker1"]).create_namespaced_job(ns, other)
    starting = 'The workload got reservation on "worker1"; creating its job there'
    env.create_workload(ns, name, owner=owner, check_message=starting, status={"clusterName": "worker1"})
    taken = (
        "Worker 'worker1': CreateRemoteJob failed: a Job named 'sample' already exists in namespace "
        f"'{ns}' (of origin 'another-manager'); delete or rename one of them"
    )
    await refused_until_retry(env, ns, name, owner, taken)
    assert env.remote_job("worker1", ns, "sample")["metadata"]["labels"][Labels.MULTIKUEUE_ORIGIN] == "another-manager"


@pytest.mark.asyncio
async def test_our_job_already_there_but_not_seen_yet_is_not_an_error(env: Env, namespace: str) -> None:
    """A 409 on the create while the watch lags our own Job: listed by name, found ours, nothing reported."""
    ns, name = namespace, "lagging"
    owner = manager_job(env, ns, "sample")
    ours = BatchJobAdapter().remote_copy(owner, origin=ORIGIN, workload_name=name)
    client.BatchV1Api(env.worker_api["worker1"]).create_namespaced_job(ns, ours)
    starting = 'The workload got reservation on "worker1"; creating its job there'
    env.create_workload(ns, name, owner=owner, check_message=starting, status={"clusterName": "worker1"})
    plan = Plan((CreateRemoteJob("worker1"),))
    assert await env.applier.apply(env.read(ns, name), plan, CHECK, env.workers, batch_integration(), owner) is None
    check = env.check(env.kueue.get("Workload", name, ns))
    assert (check["state"], check["message"]) == ("Pending", starting)


@pytest.mark.asyncio
async def test_deleting_copies_that_are_gone_or_going_logs_and_asks_nothing(
    env: Env, namespace: str, logs: list[dict[str, Any]]
) -> None:
    """Issue 10, item H: no "remote workload deleted" for a copy already gone or already being deleted."""
    ns, name = namespace, "gone"
    wl = env.create_workload(ns, name)
    assert await env.applier.apply(wl, Plan((DeleteRemoteWorkload("worker1"),)), CHECK, env.workers, None, None) is None
    body = o.workload(ns, name, "user-queue", {"cpu": "1"})
    body["metadata"]["finalizers"] = ["example.com/someone-elses"]
    env.worker_kueue["worker2"].create(body)
    try:
        env.worker_kueue["worker2"].delete("Workload", name, ns)
        assert await env.applier.apply(wl, Plan((DeleteRemoteWorkload("worker2"),)), CHECK, env.workers, None, None) is None
        assert env.remote_workload("worker2", ns, name) is not None  # held by its other finalizer, left alone
    finally:
        env.worker_kueue["worker2"].patch("Workload", name, {"metadata": {"finalizers": None}}, ns)
    assert not [e for e in logs if e.get("event") == "remote workload deleted"]


@pytest.mark.asyncio
async def test_a_new_priority_reaches_the_copy(env: Env, namespace: str) -> None:
    """Issue 10, item C: priority changes are propagated to the copies, not replaced."""
    from multikueue.controllers.multikueue.dispatch import SetRemotePriority

    ns, name = namespace, "urgent"
    wl = env.create_workload(ns, name)
    await env.applier.apply(wl, Plan((CreateRemoteWorkload("worker1"),)), CHECK, env.workers, None, None)
    await env.applier.apply(env.read(ns, name), Plan((SetRemotePriority("worker1", 1000),)), CHECK, env.workers, None, None)
    copy = env.remote_workload("worker1", ns, name)
    assert copy is not None and copy["spec"]["priority"] == 1000


# --- 5. the controller on its queue --------------------------------------------------------------


class StandInClusters:
    """The part of ClusterManager the controller uses: one MultiKueue check over the given workers."""

    def __init__(self, workers: Mapping[str, Worker]) -> None:
        self.workers = dict(workers)

    def on_topology(self, listener: Callable[[], None]) -> None:
        pass

    def on_remote(self, listener: Callable[..., None]) -> None:
        pass

    def check_of(self, wl: Workload) -> str | None:
        return CHECK if wl.admission_check(CHECK) is not None else None

    def membership(self, check: str) -> Membership:
        return Membership(check, tuple(self.workers), dict(self.workers))  # type: ignore[arg-type]


class Owners:
    """The batch Job integration's objects: the manager's Jobs as its watch would have them."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], Mapping[str, Any]] = {}

    def get(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.jobs.get((namespace, name))


@dataclass
class Controller:
    controller: MultiKueueController
    cache: Cache
    clock: FakeClock
    queue: WorkQueue[tuple[str, str]]
    owners: Owners
    handled: list[tuple[tuple[str, str], float]]

    async def settle(self, key: tuple[str, str], what: str, done: Callable[[], bool], timeout: float = 10) -> None:
        """Let the queue work (its handlers wait on real API calls) until ``done()`` and ``key`` is not running."""
        deadline = time.monotonic() + timeout
        while not (done() and key not in self.queue.running):
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}; handled: {self.handled}, waiting: {self.queue.waiting()}")
            await asyncio.sleep(0.02)


@pytest_asyncio.fixture
async def controller(env: Env) -> AsyncIterator[Controller]:
    cache = Cache()
    owners = Owners()
    writer = WorkloadWriter(env.manager, env.events, on_written=cache.upsert_workload)
    mk = MultiKueueController(
        cache,
        StandInClusters(env.workers),  # type: ignore[arg-type]
        IntegrationSet([Integration(BatchJobAdapter(), owners)]),
        PlanApplier(env.manager, writer, origin=ORIGIN),
        DispatchSettings(origin=ORIGIN, dispatcher=Dispatcher.ALL_AT_ONCE, worker_lost_timeout=timedelta(minutes=15)),
    )
    clock = FakeClock()
    handled: list[tuple[tuple[str, str], float]] = []

    async def handle(key: tuple[str, str]) -> float | None:
        handled.append((key, clock.now()))
        return await mk._handle(key)

    # The controller's own queue, on a fake clock: delays are checked, never slept.
    queue: WorkQueue[tuple[str, str]] = WorkQueue("multikueue", handle, workers=4, clock=clock)
    mk.queue = queue
    mk.start()
    try:
        yield Controller(mk, cache, clock, queue, owners, handled)
    finally:
        await mk.stop()


def dispatchable(env: Env, ctl: Controller, namespace: str, name: str) -> Workload:
    owner = manager_job(env, namespace, name)
    ctl.owners.jobs[(namespace, name)] = owner
    return env.create_workload(namespace, name, owner=owner)


@pytest.mark.asyncio
async def test_reconcile_on_a_stale_copy_asks_for_a_short_retry(env: Env, controller: Controller, namespace: str) -> None:
    ns, name = namespace, "raced"
    key = (ns, name)
    stale = dispatchable(env, controller, ns, name)
    env.touch(stale)
    controller.cache.upsert_workload(stale)

    with pytest.raises(ApiException) as raised:
        await controller.controller.reconcile(key)
    assert raised.value.status == 409

    controller.controller.schedule(key)
    await controller.settle(key, "the stale pass", lambda: len(controller.handled) == 1 and key in controller.queue.waiting())
    assert controller.queue.waiting()[key] == pytest.approx(controller.clock.now() + CONFLICT_RETRY_SECONDS)
    assert controller.queue.failures(key) == 0, "a lost race is not a failure"
    assert all(env.remote_workload(w, ns, name) is None for w in WORKERS)

    # The watch brings the new copy; the short retry decides on it and dispatches.
    controller.cache.upsert_workload(env.read(ns, name))
    controller.clock.advance(CONFLICT_RETRY_SECONDS)
    await controller.settle(key, "the retry", lambda: len(controller.handled) == 2)
    assert all(env.remote_workload(w, ns, name) is not None for w in WORKERS)
    assert env.kueue.get("Workload", name, ns)["status"]["nominatedClusterNames"] == list(WORKERS)
    assert key not in controller.queue.waiting()
    # What was written went to the cache: the next pass has nothing left to change.
    assert controller.cache.workload(key).status.nominated_cluster_names == list(WORKERS)  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_an_unexpected_error_is_retried_with_backoff(
    env: Env, controller: Controller, namespace: str, logs: list[dict[str, Any]]
) -> None:
    ns, name = namespace, "flaky"
    key = (ns, name)
    reachable = env.workers["worker2"].kube
    env.workers["worker2"].kube = unreachable_kube(env.clusters, 2)
    try:
        controller.cache.upsert_workload(dispatchable(env, controller, ns, name))
        controller.controller.schedule(key)
        await controller.settle(key, "the first pass", lambda: controller.queue.failures(key) == 1)
        assert controller.queue.waiting()[key] == pytest.approx(controller.clock.now() + controller.queue.backoff(1))
        assert env.remote_workload("worker1", ns, name) is not None
        failed = [e for e in logs if e.get("event") == "work queue handler failed"]
        assert failed and failed[0]["error_type"] == "WorkerCallFailed" and "worker2" in failed[0]["error"]

        # Nothing happens before the backoff is over.
        controller.clock.advance(controller.queue.backoff(1) / 2)
        await asyncio.sleep(0.2)
        assert len(controller.handled) == 1

        controller.clock.advance(controller.queue.backoff(1) / 2)
        await controller.settle(key, "the second pass", lambda: controller.queue.failures(key) == 2)
        assert len(controller.handled) == 2
        assert controller.queue.waiting()[key] == pytest.approx(controller.clock.now() + controller.queue.backoff(2))
    finally:
        await env.workers["worker2"].kube.close()  # type: ignore[union-attr]
        env.workers["worker2"].kube = reachable

    # The worker is back: the next retry dispatches there and the backoff is forgotten.
    controller.clock.advance(controller.queue.backoff(2))
    await controller.settle(key, "the third pass", lambda: len(controller.handled) == 3)
    assert env.remote_workload("worker2", ns, name) is not None
    assert controller.queue.failures(key) == 0 and key not in controller.queue.waiting()


@pytest.mark.asyncio
async def test_a_missing_namespace_on_a_worker_is_retried_with_backoff(env: Env, controller: Controller) -> None:
    ns, name = unique("solo"), "lonely"
    key = (ns, name)
    for api in (env.api, env.worker_api["worker1"]):
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    controller.cache.upsert_workload(dispatchable(env, controller, ns, name))
    controller.controller.schedule(key)
    await controller.settle(key, "the first pass", lambda: len(controller.handled) == 1 and key in controller.queue.waiting())
    message = env.check(env.kueue.get("Workload", name, ns))["message"]
    assert message == f"Worker 'worker2': CreateRemoteWorkload failed: namespaces \"{ns}\" not found"
    # What the user has to fix is not fixed in 0.2 s: the queue's backoff should space the retries.
    assert controller.queue.failures(key) == 1, (
        f"retried in {controller.queue.waiting()[key] - controller.clock.now():.1f}s, no failure counted"
    )


@pytest.mark.asyncio
async def test_a_copy_deleted_a_moment_ago_is_not_adopted_while_the_watch_still_shows_it(
    env: Env, controller: Controller, namespace: str
) -> None:
    """Issue 10: evicted and reserved again at once, a Workload must not win on the previous attempt's copy.

    The copy is deleted by this manager when the attempt ends; its watch says
    so a moment later. A decision in that moment (here: the stand-in's cache
    is never told) would see a copy reserving quota, make worker1 the winner
    and create the job there, next to a copy that is gone.
    """
    ns, name = namespace, "again"
    key = (ns, name)
    wl = dispatchable(env, controller, ns, name)
    body = remote_workload_copy(wl, origin=ORIGIN)
    env.worker_kueue["worker1"].create(body)
    reserved = {"conditions": [cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq")],
                "admission": env.kueue.get("Workload", name, ns)["status"]["admission"]}
    env.worker_kueue["worker1"].patch("Workload", name, {"status": reserved}, ns, status=True)
    previous = RemoteCopy.from_k8s(env.worker_kueue["worker1"].get("Workload", name, ns))
    worker = env.workers["worker1"]
    worker.workloads[key] = previous

    # The previous attempt ended: its copy is deleted (the watch has not said so yet).
    assert await env.applier.apply(wl, Plan((DeleteRemoteWorkload("worker1"),)), CHECK, env.workers, None, None) is None
    assert env.remote_workload("worker1", ns, name) is None
    assert worker.workloads[key] is previous, "the stand-in's cache still shows the copy, as a lagging watch would"

    # Reserved again: the decision nominates afresh instead of adopting the deleted copy.
    controller.cache.upsert_workload(env.read(ns, name))
    await controller.controller.reconcile(key)
    local = env.kueue.get("Workload", name, ns)["status"]
    assert "clusterName" not in local and local["nominatedClusterNames"] == list(WORKERS)
    assert env.remote_job("worker1", ns, name) is None
    fresh = env.remote_workload("worker1", ns, name)
    assert fresh is not None and fresh["metadata"]["uid"] != previous.uid

    # The DELETED event of the old copy comes: nothing is hidden any more.
    worker.pending_deletes.observed(previous.uid)
    assert len(worker.pending_deletes) == 0


@pytest.mark.asyncio
async def test_a_deleted_workload_takes_its_remote_job_and_copy_with_it(env: Env, controller: Controller, namespace: str) -> None:
    """Issue 10, item I: its owner is gone, its finalizer held by the lifecycle; deleted by name, then released."""
    ns, name = namespace, "orphaned"
    key = (ns, name)
    owner = manager_job(env, ns, "sample")
    env.create_workload(ns, name, owner=owner, check_state=CheckState.READY, check_message=reservation_message("worker1"),
                        status={"clusterName": "worker1"})
    copy = o.workload(ns, name, "user-queue", {"cpu": "1"})
    copy["metadata"]["labels"] = {Labels.MULTIKUEUE_ORIGIN: ORIGIN}
    copy["metadata"]["finalizers"] = [Finalizers.RESOURCE_IN_USE]
    env.worker_kueue["worker1"].create(copy)
    client.BatchV1Api(env.worker_api["worker1"]).create_namespaced_job(
        ns, BatchJobAdapter().remote_copy(owner, origin=ORIGIN, workload_name=name)
    )
    env.see_job("worker1", ns, "sample")
    worker = env.workers["worker1"]
    worker.workloads[key] = RemoteCopy.from_k8s(env.worker_kueue["worker1"].get("Workload", name, ns))
    # The owner is gone (the manager's Job deleted): the integration no longer has it.
    client.BatchV1Api(env.api).delete_namespaced_job("sample", ns, propagation_policy="Orphan")
    env.kueue.delete("Workload", name, ns)
    deleted = env.read(ns, name)
    assert deleted.metadata.deletion_timestamp is not None
    controller.cache.upsert_workload(deleted)

    await controller.controller.reconcile(key)
    assert env.remote_job("worker1", ns, "sample") is None or env.remote_job("worker1", ns, "sample")["metadata"].get("deletionTimestamp")
    assert env.remote_workload("worker1", ns, name) is None
    assert env.kueue.get_or_none("Workload", name, ns) is not None, "released before the worker's objects were gone"

    # Both deletions were accepted: the next pass counts them gone (the stand-in's caches, like lagging
    # watches, still show them) and releases the Workload.
    assert worker.jobs and worker.workloads
    await controller.controller.reconcile(key)
    assert env.kueue.get_or_none("Workload", name, ns) is None


@pytest.mark.asyncio
async def test_a_deleted_workload_whose_check_is_unknown_is_released_only_after_a_grace(
    env: Env, controller: Controller, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unknown is not gone: the AdmissionCheck may not be seen yet; only after the grace is the finalizer dropped."""
    ns, name = namespace, "unknown-check"
    key = (ns, name)
    owner = manager_job(env, ns, "sample")
    env.create_workload(ns, name, owner=owner, check_state=CheckState.READY, check_message=reservation_message("worker1"),
                        status={"clusterName": "worker1"})
    env.kueue.delete("Workload", name, ns)
    controller.cache.upsert_workload(env.read(ns, name))
    monkeypatch.setattr(controller.controller.clusters, "check_of", lambda wl: None)

    assert await controller.controller.reconcile(key) == pytest.approx(UNKNOWN_CHECK_GRACE_SECONDS)
    assert env.kueue.get_or_none("Workload", name, ns) is not None, "released while the check might still appear"
    controller.clock.advance(UNKNOWN_CHECK_GRACE_SECONDS / 2)
    assert await controller.controller.reconcile(key) == pytest.approx(UNKNOWN_CHECK_GRACE_SECONDS / 2)
    controller.clock.advance(UNKNOWN_CHECK_GRACE_SECONDS / 2)
    assert await controller.controller.reconcile(key) is None
    o.wait_for(lambda: env.kueue.get_or_none("Workload", name, ns) is None, 10, what="the released Workload gone")
