"""Properties of the MultiKueue dispatch decision over random worker views (hypothesis).

The world is a model: the manager's Workload, and per worker whether it is
reachable, its copy of the Workload (absent, pending, reserved, admitted,
evicted, finished, finished out of sync, drifted) and whether its job
exists. Plans are applied to the model as the I/O layer would; the workers'
own Kueue does not act in between (their copies only change by the plans).

Generated worlds are the reachable ones in one respect: a job exists on an
unreachable worker only if it is the recorded winner (``clusterName``),
because jobs are only ever created on the recorded winner and deleted from
every reachable worker otherwise; a job left on a worker that was
unreachable at the time is the worker-lost case, whose timeout is tested in
``test_dispatch.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multikueue.api import Workload
from multikueue.api.constants import CheckState, ConditionStatus, Dispatcher
from multikueue.api.meta import Condition, format_time, set_condition
from multikueue.api.workload import AdmissionCheckState
from multikueue.controllers.multikueue.dispatch import (
    Action,
    ClusterView,
    CreateRemoteJob,
    CreateRemoteWorkload,
    DeleteRemoteJob,
    DeleteRemoteWorkload,
    DispatchContext,
    FinishLocal,
    Plan,
    SetCheckState,
    SetClusterName,
    SetNominatedClusters,
    SetRemotePriority,
    SyncJobStatus,
    decide,
)
from multikueue.controllers.multikueue.remote_workload import RemoteCopy, remote_workload_copy

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CHECK = "mk"
CLUSTERS = ("w1", "w2", "w3")
SPEC: dict[str, Any] = {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {}}]}
COPY_KINDS = ("absent", "pending", "reserved", "admitted", "evicted", "finished", "out-of-sync", "drifted")
#: Plans applied before a world must have settled (each state change needs at most a few writes).
MAX_STEPS = 8
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def cond(kind: str, status: str = "True", *, at: datetime, reason: str = "R") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": "", "lastTransitionTime": format_time(at)}


def copy_of(kind: str, at: datetime) -> Workload | None:
    if kind == "absent":
        return None
    conditions = {
        "pending": [cond("QuotaReserved", "False", at=at, reason="Pending")],
        "reserved": [cond("QuotaReserved", at=at)],
        "drifted": [cond("QuotaReserved", at=at)],
        "admitted": [cond("QuotaReserved", at=at), cond("Admitted", at=at)],
        "evicted": [cond("QuotaReserved", "False", at=at, reason="Pending"), cond("Evicted", at=at, reason="Preempted")],
        "finished": [cond("QuotaReserved", at=at), cond("Finished", at=at, reason="Succeeded")],
        "out-of-sync": [cond("QuotaReserved", at=at), cond("Finished", at=at, reason="OutOfSync")],
    }[kind]
    spec = {**SPEC, "podSets": [{"name": "main", "count": 64 if kind == "drifted" else 1, "template": {}}]}
    return Workload.from_k8s({"metadata": {"name": "wl", "namespace": "ns"}, "spec": spec, "status": {"conditions": conditions}})


@dataclass
class World:
    local: Workload
    clusters: tuple[str, ...]
    active: dict[str, bool]
    copies: dict[str, Workload | None]
    jobs: dict[str, bool]
    dispatcher: str
    now: datetime = NOW
    applied: list[Action] = field(default_factory=list)

    def context(self) -> DispatchContext:
        views = {
            c: ClusterView(
                name=c,
                active=self.active[c],
                inactive_since=None if self.active[c] else NOW - timedelta(minutes=1),
                workload=None if self.copies[c] is None else RemoteCopy.of(self.copies[c]),  # type: ignore[arg-type]
                job_exists=self.jobs[c],
            )
            for c in self.clusters
        }
        return DispatchContext(
            check_name=CHECK,
            clusters=self.clusters,
            views=views,
            dispatcher=self.dispatcher,
            worker_lost_timeout=timedelta(minutes=15),
            origin="manager",
            now=self.now,
            adapter_problem=None,
        )

    def apply(self, plan: Plan) -> None:
        for action in plan.actions:
            self.applied.append(action)
            self._apply(action)

    def _apply(self, action: Action) -> None:
        status = self.local.status
        match action:
            case CreateRemoteWorkload(cluster):
                assert self.active[cluster] and self.copies[cluster] is None, action
                self.copies[cluster] = Workload.from_k8s(remote_workload_copy(self.local, origin="manager"))
            case DeleteRemoteWorkload(cluster):
                assert self.active[cluster] and self.copies[cluster] is not None, action
                self.copies[cluster] = None
            case CreateRemoteJob(cluster):
                assert self.active[cluster] and not self.jobs[cluster], action
                self.jobs[cluster] = True
            case DeleteRemoteJob(cluster):
                assert self.active[cluster] and self.jobs[cluster], action
                self.jobs[cluster] = False
            case SetRemotePriority(cluster, priority):
                copy = self.copies[cluster]
                assert copy is not None
                copy.spec.priority = priority
            case SetNominatedClusters(names):
                status.nominated_cluster_names = list(names) or None
            case SetClusterName(name):
                status.cluster_name = name
            case SetCheckState(state, message):
                status.admission_checks = [
                    AdmissionCheckState(
                        name=CHECK,
                        state=state,
                        message=message,
                        last_transition_time=self.now if c.state != state else c.last_transition_time,
                    )
                    if c.name == CHECK
                    else c
                    for c in status.admission_checks or []
                ]
            case SyncJobStatus():
                pass
            case FinishLocal(_, reason, message):
                conditions = list(status.conditions or [])
                set_condition(
                    conditions,
                    Condition(type="Finished", status=ConditionStatus.TRUE, reason=reason, message=message, last_transition_time=self.now),
                )
                status.conditions = conditions

    def settle(self) -> list[Plan]:
        """Decide and apply until a plan changes nothing; fail if that takes more than MAX_STEPS plans."""
        plans: list[Plan] = []
        for _ in range(MAX_STEPS):
            plan = decide(self.local, self.context())
            check_plan(self, plan)
            if plan.settled:
                return plans
            plans.append(plan)
            self.apply(plan)
        raise AssertionError(f"no convergence after {MAX_STEPS} plans: {plans}")


def local_workload(state: CheckState, *, cluster_name: str | None, nominated: list[str] | None, finished: bool, deleting: bool) -> Workload:
    at = NOW - timedelta(seconds=30)
    conditions = [cond("QuotaReserved", at=at, reason="QuotaReserved")]
    if finished:
        conditions.append(cond("Finished", at=at, reason="Succeeded"))
    status: dict[str, Any] = {
        "conditions": conditions,
        "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "flavors": {"cpu": "default"}, "count": 1}]},
        "admissionChecks": [{"name": CHECK, "state": state, "message": "", "lastTransitionTime": format_time(at)}],
    }
    if cluster_name is not None:
        status["clusterName"] = cluster_name
    elif nominated:
        status["nominatedClusterNames"] = nominated
    metadata: dict[str, Any] = {"name": "wl", "namespace": "ns"}
    if deleting:
        metadata["deletionTimestamp"] = format_time(NOW)
    return Workload.from_k8s({"metadata": metadata, "spec": SPEC, "status": status})


@st.composite
def worlds(draw: st.DrawFn, *, finished: bool | None = None) -> World:
    clusters = CLUSTERS[: draw(st.sampled_from([1, 2, 3, 3]))]
    active = {c: draw(st.booleans()) for c in clusters}
    copies = {
        c: copy_of(draw(st.sampled_from(COPY_KINDS)), NOW - timedelta(seconds=draw(st.integers(1, 100)))) for c in clusters
    }
    state = draw(st.sampled_from([CheckState.PENDING, CheckState.READY]))
    cluster_name = draw(st.sampled_from([None, *clusters]))
    nominated = draw(st.lists(st.sampled_from(clusters), unique=True, max_size=len(clusters)))
    # Jobs only ever exist on the recorded winner, or (leftovers) on reachable workers.
    jobs = {c: draw(st.booleans()) and (active[c] or c == cluster_name) for c in clusters}
    if sum(jobs.values()) > 1:
        keep = cluster_name if cluster_name is not None and jobs[cluster_name] else next(c for c in clusters if jobs[c])
        jobs = {c: c == keep for c in clusters}
    is_finished = draw(st.booleans()) if finished is None else finished
    local = local_workload(state, cluster_name=cluster_name, nominated=nominated, finished=is_finished, deleting=draw(st.booleans()))
    dispatcher = draw(st.sampled_from([Dispatcher.ALL_AT_ONCE, Dispatcher.INCREMENTAL]))
    return World(local, clusters, active, copies, jobs, dispatcher)


def check_plan(world: World, plan: Plan) -> None:
    """Never a plan that leaves two remote jobs."""
    creates = [a.cluster for a in plan.actions if isinstance(a, CreateRemoteJob)]
    assert len(creates) <= 1, plan
    deleted = {a.cluster for a in plan.actions if isinstance(a, DeleteRemoteJob)}
    after = {c for c, exists in world.jobs.items() if exists and c not in deleted} | set(creates)
    if creates:
        assert after == set(creates), f"job created on {creates[0]} while another exists: {world.jobs}, {plan}"
    assert len(after) <= max(1, sum(world.jobs.values())), plan


@SETTINGS
@given(worlds())
def test_a_plan_never_leaves_two_remote_jobs(world: World) -> None:
    check_plan(world, decide(world.local, world.context()))


@SETTINGS
@given(worlds())
def test_deciding_twice_on_the_same_inputs_gives_the_same_plan(world: World) -> None:
    assert decide(world.local, world.context()) == decide(world.local, world.context())


@SETTINGS
@given(worlds())
def test_applying_the_plans_converges(world: World) -> None:
    world.settle()
    # Settled means settled: one more decision changes nothing.
    assert decide(world.local, world.context()).settled


@SETTINGS
@given(worlds(finished=True))
def test_a_finished_workload_converges_to_no_remote_objects(world: World) -> None:
    world.settle()
    for cluster in world.clusters:
        if world.active[cluster]:
            assert world.copies[cluster] is None and not world.jobs[cluster], (cluster, world.applied)


@SETTINGS
@given(worlds(), st.permutations(range(3)))
def test_event_order_does_not_change_where_the_world_settles(world: World, order: list[int]) -> None:
    """Workers reporting their copies' reservations in any order: the world settles with at most one job."""
    world.settle()
    events = [("w1", "reserved"), ("w2", "admitted"), ("w3", "evicted")]
    for index in order:
        cluster, kind = events[index]
        if cluster in world.clusters and world.active[cluster] and world.copies[cluster] is not None:
            world.now += timedelta(seconds=1)
            world.copies[cluster] = replace_conditions(world.copies[cluster], kind, world.now)
            world.settle()
    assert sum(world.jobs.values()) <= 1


def replace_conditions(copy: Workload | None, kind: str, at: datetime) -> Workload | None:
    """The worker's Kueue moves its copy to ``kind`` (same spec)."""
    if copy is None:
        return None
    fresh = copy_of(kind, at)
    assert fresh is not None
    return fresh.model_copy(update={"spec": copy.spec})



@SETTINGS
@given(worlds(finished=False), st.data())
def test_a_workload_is_finished_from_a_worker_job_only_once_it_was_admitted(world: World, data: st.DataObject) -> None:
    """The manager's job starts only when its Workload is admitted (check Ready), and a
    suspended Job cannot take the worker's final status: a finish copied from a
    job that exists comes after Ready, never instead of it.

    The world is steered to the case that matters: one reachable worker holds
    a finished copy and the only job.
    """
    done = data.draw(st.sampled_from(world.clusters))
    world.active[done] = True
    world.copies[done] = copy_of("finished", NOW - timedelta(seconds=data.draw(st.integers(1, 100))))
    world.jobs = {c: c == done for c in world.clusters}
    initial = world.local.admission_check(CHECK)
    assert initial is not None
    state = initial.state
    world.settle()
    for action in world.applied:
        if isinstance(action, SetCheckState):
            state = action.state
        if isinstance(action, FinishLocal) and action.cluster == done:
            assert state == CheckState.READY, world.applied
