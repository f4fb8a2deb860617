"""Decisions of the MultiKueue admission check for one manager Workload (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from multikueue.controllers.multikueue.dispatch import (
    INCREMENTAL_BATCH_SIZE,
    INCREMENTAL_ROUND_TIMEOUT,
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
    SyncJobStatus,
    decide,
    evicted_on_worker_message,
    reservation_message,
)
from multikueue.controllers.multikueue.remote_workload import RemoteCopy, remote_workload_copy
from multikueue.api import Workload
from multikueue.api.constants import CheckState, ConditionStatus, Dispatcher, Labels
from multikueue.api.meta import Condition, format_time, set_condition
from multikueue.api.workload import AdmissionCheckState
from multikueue.core.lifecycle import next_update

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
RESERVED_AT = NOW - timedelta(seconds=30)
TIMEOUT = timedelta(minutes=15)
CHECK = "mk"
ORIGIN = "manager"
#: The local Workload's spec; a worker's copy carries the same (``remote_workload_copy``).
SPEC: dict[str, Any] = {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {}}]}


def cond(kind: str, status: str = "True", *, at: datetime = RESERVED_AT, reason: str = "R", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": format_time(at)}


def local_wl(
    state: CheckState = CheckState.PENDING,
    *,
    message: str = "",
    reserved: bool = True,
    reserved_at: datetime = RESERVED_AT,
    check_at: datetime = RESERVED_AT,
    cluster_name: str | None = None,
    nominated: Sequence[str] | None = None,
    finished: bool = False,
    deleting: bool = False,
    other_checks: Sequence[tuple[str, CheckState, datetime]] = (),
) -> Workload:
    """The manager's Workload of a Job, carrying the MultiKueue check ``mk``."""
    conditions = [cond("QuotaReserved", at=reserved_at, reason="QuotaReserved")] if reserved else []
    if finished:
        conditions.append(cond("Finished", reason="Succeeded", message="done"))
    checks = [{"name": CHECK, "state": state, "message": message, "lastTransitionTime": format_time(check_at)}]
    checks += [{"name": n, "state": s, "message": "", "lastTransitionTime": format_time(t)} for n, s, t in other_checks]
    status: dict[str, Any] = {"conditions": conditions, "admissionChecks": checks}
    if reserved:
        status["admission"] = {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "flavors": {"cpu": "default"}, "count": 1}]}
    if cluster_name is not None:
        status["clusterName"] = cluster_name
    if nominated is not None:
        status["nominatedClusterNames"] = list(nominated)
    metadata: dict[str, Any] = {
        "name": "job-pi",
        "namespace": "ns",
        "labels": {Labels.JOB_UID: "uid-1"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": "uid-1", "controller": True}],
    }
    if deleting:
        metadata["deletionTimestamp"] = format_time(NOW)
    return Workload.from_k8s({"metadata": metadata, "spec": SPEC, "status": status})


def remote(kind: str = "pending", *, at: datetime = RESERVED_AT) -> Workload:
    """A worker's copy: ``pending``, ``reserved``, ``admitted``, ``evicted`` or ``finished``."""
    conditions: list[dict[str, Any]] = {
        "pending": [cond("QuotaReserved", "False", at=at, reason="Pending")],
        "reserved": [cond("QuotaReserved", at=at)],
        "admitted": [cond("QuotaReserved", at=at), cond("Admitted", at=at)],
        "evicted": [cond("QuotaReserved", "False", at=at, reason="Pending"), cond("Evicted", at=at, reason="Preempted")],
        "finished": [cond("QuotaReserved", at=at), cond("Finished", at=at, reason="Succeeded", message="Job finished successfully")],
    }[kind]
    return Workload.from_k8s({"metadata": {"name": "job-pi", "namespace": "ns"}, "spec": SPEC, "status": {"conditions": conditions}})


def view(name: str, wl: Workload | None = None, *, job: bool = False, active: bool = True, since: datetime | None = None) -> ClusterView:
    copy = None if wl is None else RemoteCopy.of(wl)
    return ClusterView(name=name, active=active, inactive_since=since, workload=copy, job_exists=job)


def context(
    *views: ClusterView,
    clusters: Sequence[str] | None = None,
    dispatcher: str = Dispatcher.ALL_AT_ONCE,
    adapter_problem: str | None = None,
    now: datetime = NOW,
) -> DispatchContext:
    return DispatchContext(
        check_name=CHECK,
        clusters=tuple(clusters if clusters is not None else (v.name for v in views)),
        views={v.name: v for v in views},
        dispatcher=dispatcher,
        worker_lost_timeout=TIMEOUT,
        origin=ORIGIN,
        now=now,
        adapter_problem=adapter_problem,
    )


def waiting(*names: str) -> SetCheckState:
    quoted = ", ".join(f'"{n}"' for n in names)
    return SetCheckState(CheckState.PENDING, f"Nominated worker clusters: {quoted}; waiting for one of them to reserve quota")


# --- 1. only reserved Workloads are dispatched -----------------------------------------


def test_a_workload_without_the_check_is_left_alone() -> None:
    wl = local_wl()
    ctx = replace(context(view("w1", remote(), job=True)), check_name="other")
    assert decide(wl, ctx) == Plan()


@pytest.mark.parametrize("state", list(CheckState))
def test_not_reserved_deletes_remote_objects_on_active_clusters_and_clears_placement(state: CheckState) -> None:
    wl = local_wl(state, reserved=False, cluster_name="w1")
    ctx = context(
        view("w1", remote("reserved"), job=True),
        view("w2", remote()),
        view("w3", remote(), active=False, since=NOW),
        view("w4"),
    )
    assert decide(wl, ctx).actions == (
        DeleteRemoteJob("w1"),
        DeleteRemoteWorkload("w1"),
        DeleteRemoteWorkload("w2"),
        SetClusterName(None),
    )


def test_not_reserved_clears_nominated_clusters() -> None:
    wl = local_wl(reserved=False, nominated=["w1", "w2"])
    assert decide(wl, context(view("w1"), view("w2"))).actions == (SetNominatedClusters(()),)


def test_not_reserved_and_clean_is_settled() -> None:
    assert decide(local_wl(reserved=False), context(view("w1"), view("w2"))) == Plan()


def test_adapter_problem_is_not_reported_before_the_reservation() -> None:
    assert decide(local_wl(reserved=False), context(view("w1"), adapter_problem="no adapter")) == Plan()


def test_finished_workload_deletes_remote_objects_and_keeps_its_cluster_name() -> None:
    wl = local_wl(CheckState.READY, finished=True, cluster_name="w2")
    ctx = context(view("w1"), view("w2", remote("finished"), job=True))
    assert decide(wl, ctx).actions == (DeleteRemoteJob("w2"), DeleteRemoteWorkload("w2"))


def test_deleted_workload_deletes_remote_objects() -> None:
    wl = local_wl(CheckState.READY, deleting=True, cluster_name="w1")
    assert decide(wl, context(view("w1", remote("admitted"), job=True))).actions == (DeleteRemoteJob("w1"), DeleteRemoteWorkload("w1"))


# --- 2. adapter problems -------------------------------------------------------------------


def test_pending_with_adapter_problem_is_rejected_and_nothing_else() -> None:
    problem = 'No multikueue adapter found for owner kind "Foo.example.com"'
    ctx = context(view("w1", remote(), job=True), view("w2"), adapter_problem=problem)
    assert decide(local_wl(nominated=["w1"]), ctx).actions == (SetCheckState(CheckState.REJECTED, problem),)


def test_adapter_problem_rejects_a_running_workload_too() -> None:
    """Item E: ``managedBy`` flipped after dispatch is seen on every reconcile (upstream rejects in any state)."""
    wl = local_wl(CheckState.READY, cluster_name="w1", message=reservation_message("w1"))
    ctx = context(view("w1", remote("admitted"), job=True), adapter_problem="The owner is not managed by Kueue: x")
    assert decide(wl, ctx).actions == (SetCheckState(CheckState.REJECTED, "The owner is not managed by Kueue: x"),)
    # The lifecycle deactivates it; the next plan (Rejected) deletes the remote objects.
    rejected = local_wl(CheckState.REJECTED, cluster_name="w1")
    assert decide(rejected, ctx).actions == (DeleteRemoteJob("w1"), DeleteRemoteWorkload("w1"))


# --- 3. nomination: all at once ------------------------------------------------------------------


def test_all_at_once_nominates_every_active_cluster_and_creates_copies() -> None:
    ctx = context(view("w1"), view("w2", active=False, since=NOW), view("w3"), clusters=["w1", "w2", "w3", "w4"])
    assert decide(local_wl(), ctx).actions == (
        CreateRemoteWorkload("w1"),
        CreateRemoteWorkload("w3"),
        SetNominatedClusters(("w1", "w3")),
        waiting("w1", "w3"),
    )


def test_all_at_once_is_settled_once_copies_exist() -> None:
    wl = local_wl(nominated=["w3", "w1"], message=waiting("w1", "w3").message)
    ctx = context(view("w1", remote()), view("w3", remote()))
    # Same set in another order: no write (upstream compares the nominated lists as sets).
    assert decide(wl, ctx) == Plan()


def test_all_at_once_drops_a_cluster_that_became_inactive_without_touching_it() -> None:
    wl = local_wl(nominated=["w1", "w2"], message=waiting("w1", "w2").message)
    ctx = context(view("w1", remote()), view("w2", remote(), active=False, since=NOW))
    assert decide(wl, ctx).actions == (SetNominatedClusters(("w1",)), waiting("w1"))


def test_no_active_cluster_keeps_the_check_pending_with_a_message() -> None:
    wl = local_wl(nominated=["w1"])
    ctx = context(view("w1", active=False, since=NOW), clusters=["w1", "w2"])
    assert decide(wl, ctx).actions == (
        SetNominatedClusters(()),
        SetCheckState(CheckState.PENDING, 'No active clusters in MultiKueueConfig (inactive: "w1", "w2")'),
    )


def test_no_cluster_at_all() -> None:
    assert decide(local_wl(), context()).actions == (SetCheckState(CheckState.PENDING, "No active clusters in MultiKueueConfig"),)


def test_a_leftover_job_is_deleted_while_no_worker_won() -> None:
    wl = local_wl(nominated=["w1"], message=waiting("w1").message)
    assert decide(wl, context(view("w1", remote(), job=True))).actions == (DeleteRemoteJob("w1"),)


def test_nomination_waits_for_the_other_admission_checks() -> None:
    wl = local_wl(other_checks=[("prov", CheckState.PENDING, RESERVED_AT)])
    assert decide(wl, context(view("w1"), view("w2"))) == Plan()


def test_nomination_starts_once_the_other_checks_are_ready() -> None:
    wl = local_wl(other_checks=[("prov", CheckState.READY, RESERVED_AT)])
    assert decide(wl, context(view("w1"))).actions == (CreateRemoteWorkload("w1"), SetNominatedClusters(("w1",)), waiting("w1"))


@pytest.mark.parametrize("kind", ["pending", "evicted", None])
def test_stale_cluster_name_is_cleared_in_a_write_of_its_own(kind: str | None) -> None:
    wl = local_wl(cluster_name="w1")
    copy = remote(kind) if kind else None
    assert decide(wl, context(view("w1", copy), view("w2"))).actions == (SetClusterName(None),)


def test_an_external_dispatcher_owns_the_nominated_list() -> None:
    wl = local_wl(nominated=["w2"])
    ctx = context(view("w1", remote()), view("w2"), dispatcher="example.com/my-dispatcher")
    assert decide(wl, ctx).actions == (DeleteRemoteWorkload("w1"), CreateRemoteWorkload("w2"), waiting("w2"))


# --- 3. nomination: incremental ---------------------------------------------------------------


INCREMENTAL = Dispatcher.INCREMENTAL
FIVE = ["w5", "w4", "w3", "w2", "w1"]


def test_incremental_constants_are_upstreams() -> None:
    assert INCREMENTAL_BATCH_SIZE == 3
    assert INCREMENTAL_ROUND_TIMEOUT == timedelta(minutes=5)


def test_incremental_first_round_nominates_three_in_name_order() -> None:
    plan = decide(local_wl(), context(*(view(c) for c in FIVE), dispatcher=INCREMENTAL))
    assert plan.actions == (
        CreateRemoteWorkload("w3"),
        CreateRemoteWorkload("w2"),
        CreateRemoteWorkload("w1"),
        SetNominatedClusters(("w1", "w2", "w3")),
        waiting("w1", "w2", "w3"),
    )
    assert plan.requeue_after == INCREMENTAL_ROUND_TIMEOUT - (NOW - RESERVED_AT)


def test_incremental_round_is_not_over_just_before_five_minutes() -> None:
    wl = local_wl(nominated=["w1", "w2", "w3"], message=waiting("w1", "w2", "w3").message)
    views = [view(c, remote() if c in ("w1", "w2", "w3") else None) for c in FIVE]
    now = RESERVED_AT + INCREMENTAL_ROUND_TIMEOUT - timedelta(seconds=1)
    plan = decide(wl, context(*views, dispatcher=INCREMENTAL, now=now))
    assert plan.actions == ()
    assert plan.requeue_after == timedelta(seconds=1)


def test_incremental_next_round_adds_the_next_batch() -> None:
    wl = local_wl(nominated=["w1", "w2", "w3"], message=waiting("w1", "w2", "w3").message)
    views = [view(c, remote() if c in ("w1", "w2", "w3") else None) for c in FIVE]
    now = RESERVED_AT + INCREMENTAL_ROUND_TIMEOUT
    plan = decide(wl, context(*views, dispatcher=INCREMENTAL, now=now))
    assert plan.actions == (
        CreateRemoteWorkload("w5"),
        CreateRemoteWorkload("w4"),
        SetNominatedClusters(("w1", "w2", "w3", "w4", "w5")),
        waiting("w1", "w2", "w3", "w4", "w5"),
    )
    assert plan.requeue_after is None  # every cluster of the config is nominated


def test_incremental_rounds_count_from_the_reservation_not_from_our_own_writes() -> None:
    # The check's own transition time (and message) do not move the round: a restart or a
    # message update resumes the same round.
    wl = local_wl(nominated=["w1", "w2", "w3"], message=waiting("w1", "w2", "w3").message, check_at=NOW)
    views = [view(c, remote() if c in ("w1", "w2", "w3") else None) for c in FIVE]
    plan = decide(wl, context(*views, dispatcher=INCREMENTAL, now=RESERVED_AT + timedelta(minutes=6)))
    assert SetNominatedClusters(("w1", "w2", "w3", "w4", "w5")) in plan.actions


def test_incremental_round_starts_when_the_last_other_check_became_ready() -> None:
    ready_at = RESERVED_AT + timedelta(minutes=4)
    wl = local_wl(nominated=["w1", "w2", "w3"], message=waiting("w1", "w2", "w3").message,
                  other_checks=[("prov", CheckState.READY, ready_at)])
    views = [view(c, remote() if c in ("w1", "w2", "w3") else None) for c in FIVE]
    plan = decide(wl, context(*views, dispatcher=INCREMENTAL, now=ready_at + timedelta(minutes=4)))
    assert plan.actions == ()
    assert plan.requeue_after == timedelta(minutes=1)


def test_incremental_nominates_only_active_clusters_and_lets_late_ones_join() -> None:
    views = [view("w1", active=False, since=NOW), view("w2"), view("w3")]
    plan = decide(local_wl(), context(*views, dispatcher=INCREMENTAL))
    assert SetNominatedClusters(("w2", "w3")) in plan.actions
    assert plan.requeue_after is not None  # w1 may still come
    wl = local_wl(nominated=["w2", "w3"], message=waiting("w2", "w3").message)
    views = [view("w1"), view("w2", remote()), view("w3", remote())]
    assert decide(wl, context(*views, dispatcher=INCREMENTAL)).actions == (
        CreateRemoteWorkload("w1"),
        SetNominatedClusters(("w2", "w3", "w1")),
        waiting("w2", "w3", "w1"),
    )


def test_incremental_deletes_copies_on_clusters_not_nominated() -> None:
    wl = local_wl(nominated=["w1", "w2", "w3"], message=waiting("w1", "w2", "w3").message)
    views = [view(c, remote()) for c in FIVE]
    assert decide(wl, context(*views, dispatcher=INCREMENTAL)).actions == (DeleteRemoteWorkload("w5"), DeleteRemoteWorkload("w4"))


def test_incremental_drops_nominated_clusters_removed_from_the_config() -> None:
    wl = local_wl(nominated=["gone", "w1"], message=waiting("w1").message)
    plan = decide(wl, context(view("w1", remote()), dispatcher=INCREMENTAL))
    assert plan.actions == (SetNominatedClusters(("w1",)),)


# --- 4. the first reservation wins ---------------------------------------------------------------


def test_first_reserving_cluster_wins() -> None:
    wl = local_wl(nominated=["w1", "w2", "w3"], message=waiting("w1", "w2", "w3").message)
    ctx = context(
        view("w1", remote("reserved", at=NOW - timedelta(seconds=5))),
        view("w2", remote("reserved", at=NOW - timedelta(seconds=10))),
        view("w3", remote()),
    )
    assert decide(wl, ctx).actions == (
        DeleteRemoteWorkload("w1"),
        DeleteRemoteWorkload("w3"),
        SetNominatedClusters(()),
        SetClusterName("w2"),
        SetCheckState(CheckState.PENDING, 'The workload got reservation on "w2"; creating its job there'),
        CreateRemoteJob("w2"),
    )


def test_simultaneous_reservations_go_to_the_first_cluster_of_the_config() -> None:
    wl = local_wl(nominated=["w1", "w2"])
    ctx = context(view("w2", remote("admitted")), view("w1", remote("reserved")))
    actions = decide(wl, ctx).actions
    assert SetClusterName("w2") in actions
    assert DeleteRemoteWorkload("w1") in actions


def test_an_evicted_copy_does_not_win() -> None:
    wl = local_wl(nominated=["w1", "w2"], message=waiting("w1", "w2").message)
    assert decide(wl, context(view("w1", remote("evicted")), view("w2", remote()))) == Plan()


def test_a_copy_being_deleted_does_not_win_and_is_waited_for() -> None:
    """The previous attempt's copy, deleted when it ended, may still reserve quota while it goes (issue 10)."""
    wl = local_wl(nominated=["w1", "w2"], message=waiting("w1", "w2").message)
    going = remote("reserved")
    going = going.model_copy(update={"metadata": going.metadata.model_copy(update={"deletion_timestamp": NOW})})
    assert decide(wl, context(view("w1", going), view("w2", remote()))) == Plan()


def test_the_winner_with_its_job_already_there_is_not_given_another() -> None:
    wl = local_wl(nominated=["w1"])
    actions = decide(wl, context(view("w1", remote("reserved"), job=True))).actions
    assert actions == (SetNominatedClusters(()), SetClusterName("w1"), SetCheckState(CheckState.READY, reservation_message("w1")))


def test_an_inactive_cluster_cannot_win_and_is_not_touched() -> None:
    wl = local_wl(nominated=["w1"], message=waiting("w1").message)
    ctx = context(view("w1", remote()), view("w2", remote("reserved"), active=False, since=NOW))
    assert decide(wl, ctx) == Plan()


def test_ready_without_cluster_name_records_the_winner() -> None:
    wl = local_wl(CheckState.READY, message=reservation_message("w1"), nominated=["w1", "w2"])
    ctx = context(view("w1", remote("reserved"), job=True), view("w2", remote()))
    assert decide(wl, ctx).actions == (DeleteRemoteWorkload("w2"), SetNominatedClusters(()), SetClusterName("w1"))


def test_ready_without_cluster_name_and_no_reservation_waits_then_retries() -> None:
    ready_at = NOW - TIMEOUT + timedelta(seconds=1)
    wl = local_wl(CheckState.READY, message="x", check_at=ready_at)
    assert decide(wl, context(view("w1"))) == Plan(requeue_after=timedelta(seconds=1))
    wl = local_wl(CheckState.READY, message="x", check_at=NOW - TIMEOUT)
    assert decide(wl, context(view("w1"))).actions == (SetCheckState(CheckState.RETRY, "Reserving remote lost"),)


# --- 5. running on a worker ---------------------------------------------------------------------------


def running(**kwargs: Any) -> Workload:
    return local_wl(CheckState.READY, cluster_name="w2", message=reservation_message("w2"), **kwargs)


@pytest.mark.parametrize("kind", ["reserved", "admitted"])
def test_running_syncs_the_job_status(kind: str) -> None:
    plan = decide(running(), context(view("w1"), view("w2", remote(kind), job=True)))
    assert plan.actions == (SyncJobStatus("w2"),)
    assert plan.settled
    assert plan.requeue_after is None


def test_running_recreates_a_missing_job() -> None:
    assert decide(running(), context(view("w2", remote("admitted")))).actions == (CreateRemoteJob("w2"),)


def test_running_deletes_copies_left_on_other_workers() -> None:
    ctx = context(view("w1", remote("reserved"), job=True), view("w2", remote("admitted"), job=True))
    assert decide(running(), ctx).actions == (DeleteRemoteJob("w1"), DeleteRemoteWorkload("w1"), SyncJobStatus("w2"))


def test_remote_finished_finishes_the_local_workload_then_cleans_up() -> None:
    ctx = context(view("w1"), view("w2", remote("finished"), job=True))
    assert decide(running(), ctx).actions == (
        FinishLocal("w2", "Succeeded", "Job finished successfully"),
        DeleteRemoteJob("w2"),
        DeleteRemoteWorkload("w2"),
    )


def test_remote_eviction_puts_the_check_in_retry_with_upstreams_message() -> None:
    plan = decide(running(), context(view("w2", remote("evicted"), job=True)))
    assert plan.actions == (
        SetCheckState(CheckState.RETRY, 'Workload evicted on worker cluster: "w2", resetting for re-admission. Previously: "Ready"'),
    )
    assert evicted_on_worker_message("w2") == plan.actions[0].message  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("copy", "why"),
    [(None, "no longer exists"), (remote("pending"), "no longer has a quota reservation")],
)
def test_remote_copy_lost_puts_the_check_in_retry(copy: Workload | None, why: str) -> None:
    plan = decide(running(), context(view("w2", copy, job=True)))
    assert plan.actions == (SetCheckState(CheckState.RETRY, f'Reserving remote "w2": the workload {why} there'),)


def test_unreachable_winner_keeps_the_check_ready_until_just_before_the_timeout() -> None:
    since = NOW - TIMEOUT + timedelta(seconds=1)
    plan = decide(running(), context(view("w1", remote("reserved")), view("w2", remote("admitted"), active=False, since=since)))
    assert plan.actions == (DeleteRemoteWorkload("w1"),)  # a stray copy elsewhere goes; the check stays Ready
    assert plan.requeue_after == timedelta(seconds=1)


@pytest.mark.parametrize("late", [timedelta(0), timedelta(seconds=1), timedelta(hours=1)])
def test_unreachable_winner_is_given_up_once_the_timeout_expired(late: timedelta) -> None:
    since = NOW - TIMEOUT - late
    plan = decide(running(), context(view("w2", remote("admitted"), active=False, since=since)))
    assert plan.actions == (
        SetCheckState(CheckState.RETRY, f'Reserving remote lost: worker cluster "w2" unreachable since {format_time(since)}'),
    )
    assert plan.requeue_after is None


@pytest.mark.parametrize("views", [[view("w2", active=False, since=None)], [view("w1")]])
def test_unreachable_winner_with_unknown_loss_time_waits_a_full_timeout(views: list[ClusterView]) -> None:
    plan = decide(running(), context(*views, clusters=["w1", "w2"]))
    assert plan == Plan(requeue_after=TIMEOUT)


def test_winner_removed_from_the_config_is_given_up() -> None:
    plan = decide(running(), replace(context(view("w1", remote("reserved"))), config_name="cfg"))
    assert plan.actions == (
        SetCheckState(
            CheckState.RETRY, 'Reserving remote lost: worker cluster "w2" is no longer listed in the MultiKueueConfig "cfg"'
        ),
    )


def test_running_clears_a_leftover_nominated_list() -> None:
    wl = local_wl(CheckState.READY, cluster_name="w2", message=reservation_message("w2"))
    wl.status.nominated_cluster_names = ["w1", "w2"]
    assert decide(wl, context(view("w2", remote("admitted"), job=True))).actions == (SetNominatedClusters(()), SyncJobStatus("w2"))


# --- 6. Retry and Rejected ------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [CheckState.RETRY, CheckState.REJECTED])
def test_retry_and_rejected_only_clean_up(state: CheckState) -> None:
    wl = local_wl(state, cluster_name="w2", message="why")
    ctx = context(view("w1", remote()), view("w2", remote("evicted"), job=True), view("w3", remote(), active=False, since=NOW),
                  adapter_problem="no adapter")
    assert decide(wl, ctx).actions == (DeleteRemoteWorkload("w1"), DeleteRemoteJob("w2"), DeleteRemoteWorkload("w2"))
    assert decide(wl, context(view("w1"), view("w2"))) == Plan()


# --- 7. idempotence ------------------------------------------------------------------------------------


SNAPSHOTS: list[tuple[Workload, DispatchContext]] = [
    (local_wl(), context(view("w1"), view("w2"))),
    (local_wl(nominated=["w1", "w2"]), context(view("w1", remote("reserved")), view("w2", remote("reserved", at=NOW)))),
    (running(), context(view("w2", remote("finished"), job=True))),
    (running(), context(view("w2", remote("admitted"), active=False, since=NOW - timedelta(minutes=3)))),
    (local_wl(), context(*(view(c) for c in FIVE), dispatcher=INCREMENTAL)),
    (local_wl(reserved=False, cluster_name="w1"), context(view("w1", remote(), job=True))),
]


@pytest.mark.parametrize(("wl", "ctx"), SNAPSHOTS)
def test_deciding_twice_on_the_same_snapshot_gives_the_same_plan(wl: Workload, ctx: DispatchContext) -> None:
    before = wl.model_dump()
    assert decide(wl, ctx) == decide(wl, ctx)
    assert wl.model_dump() == before  # the input is never changed


# --- a small simulator ----------------------------------------------------------------------------------


class Simulation:
    """The manager's Workload and two workers, changed only by applying plans (and by the test, as the workers)."""

    def __init__(self, local: Workload, clusters: Iterable[str], dispatcher: str = Dispatcher.ALL_AT_ONCE) -> None:
        self.local = local
        self.clusters = tuple(clusters)
        self.copies: dict[str, Workload | None] = dict.fromkeys(self.clusters)
        self.jobs: dict[str, bool] = dict.fromkeys(self.clusters, False)
        self.dispatcher = dispatcher
        self.now = NOW
        self.applied: list[Action] = []

    def context(self) -> DispatchContext:
        views = [view(c, self.copies[c], job=self.jobs[c]) for c in self.clusters]
        return context(*views, dispatcher=self.dispatcher, now=self.now)

    def apply(self, plan: Plan) -> None:
        for action in plan.actions:
            self.applied.append(action)
            self._apply(action)

    def _apply(self, action: Action) -> None:
        status = self.local.status
        match action:
            case CreateRemoteWorkload(cluster):
                assert self.copies[cluster] is None
                self.copies[cluster] = Workload.from_k8s(remote_workload_copy(self.local, origin=ORIGIN))
            case DeleteRemoteWorkload(cluster):
                assert self.copies[cluster] is not None
                self.copies[cluster] = None
            case CreateRemoteJob(cluster):
                assert not self.jobs[cluster]
                self.jobs[cluster] = True
            case DeleteRemoteJob(cluster):
                assert self.jobs[cluster]
                self.jobs[cluster] = False
            case SetNominatedClusters(names):
                status.nominated_cluster_names = list(names) or None
            case SetClusterName(name):
                status.cluster_name = name
            case SetCheckState(state, message):
                checks = []
                for check in status.admission_checks or []:
                    if check.name == CHECK:
                        moved = self.now if check.state != state else check.last_transition_time
                        check = AdmissionCheckState(name=CHECK, state=state, message=message, last_transition_time=moved)
                    checks.append(check)
                status.admission_checks = checks
            case SyncJobStatus():
                pass
            case FinishLocal(_, reason, message):
                conditions = list(status.conditions or [])
                set_condition(conditions, Condition(type="Finished", status=ConditionStatus.TRUE, reason=reason,
                                                    message=message, last_transition_time=self.now))
                status.conditions = conditions

    def settle(self) -> list[Plan]:
        """Decide and apply until nothing changes; return the plans that changed something."""
        plans = []
        for _ in range(5):
            plan = decide(self.local, self.context())
            assert decide(self.local, self.context()) == plan
            if plan.settled:
                return plans
            plans.append(plan)
            self.apply(plan)
        raise AssertionError(f"no convergence: {plans}")

    def worker(self, cluster: str, kind: str, at: datetime) -> None:
        """The worker's own Kueue changes its copy."""
        self.copies[cluster] = remote(kind, at=at)

    def lifecycle(self) -> None:
        """The manager's local lifecycle (evict on Retry, ...)."""
        update = next_update(self.local, self.now)
        if update is None or update.status is None:
            return
        body = self.local.to_k8s()
        for key, value in update.status.items():
            if value is None:
                body["status"].pop(key, None)
            else:
                body["status"][key] = value
        self.local = Workload.from_k8s(body)


def test_simulated_run_dispatches_picks_the_first_reserving_worker_and_finishes() -> None:
    sim = Simulation(local_wl(), ["worker1", "worker2"])
    # The local Workload is reserved: copies go to both workers.
    [plan] = sim.settle()
    assert plan.actions == (
        CreateRemoteWorkload("worker1"),
        CreateRemoteWorkload("worker2"),
        SetNominatedClusters(("worker1", "worker2")),
        waiting("worker1", "worker2"),
    )
    copy = sim.copies["worker1"]
    assert copy is not None and copy.metadata.labels == {Labels.MULTIKUEUE_ORIGIN: ORIGIN}
    assert sim.settle() == []

    # worker2 reserves first.
    sim.now += timedelta(seconds=10)
    sim.worker("worker2", "reserved", at=sim.now)
    [plan, ready] = sim.settle()
    assert plan.actions == (
        DeleteRemoteWorkload("worker1"),
        SetNominatedClusters(()),
        SetClusterName("worker2"),
        SetCheckState(CheckState.PENDING, 'The workload got reservation on "worker2"; creating its job there'),
        CreateRemoteJob("worker2"),
    )
    # Ready (and Admitted) only once the job shows on the winner.
    assert ready.actions == (SetCheckState(CheckState.READY, 'The workload got reservation on "worker2"'),)
    assert sim.copies["worker1"] is None and sim.jobs == {"worker1": False, "worker2": True}
    assert sim.local.status.cluster_name == "worker2" and not sim.local.status.nominated_cluster_names
    # Running: only the level-triggered status sync.
    assert decide(sim.local, sim.context()).actions == (SyncJobStatus("worker2"),)

    # worker1's Kueue admitting a copy it no longer has changes nothing; worker2 admits, then finishes.
    sim.worker("worker2", "admitted", at=sim.now)
    assert sim.settle() == []
    sim.now += timedelta(minutes=3)
    sim.worker("worker2", "finished", at=sim.now)
    [plan] = sim.settle()
    assert plan.actions == (
        FinishLocal("worker2", "Succeeded", "Job finished successfully"),
        DeleteRemoteJob("worker2"),
        DeleteRemoteWorkload("worker2"),
    )
    assert sim.local.is_finished
    assert sim.copies == {"worker1": None, "worker2": None} and not any(sim.jobs.values())
    assert decide(sim.local, sim.context()) == Plan()


def test_simulated_remote_eviction_requeues_and_dispatches_again() -> None:
    sim = Simulation(local_wl(), ["worker1", "worker2"])
    sim.settle()
    sim.worker("worker1", "reserved", at=sim.now)
    sim.settle()
    assert sim.local.status.cluster_name == "worker1"

    # worker1 evicts its copy: Retry, then the local lifecycle evicts and requeues.
    sim.now += timedelta(minutes=1)
    sim.worker("worker1", "evicted", at=sim.now)
    [retry, cleanup] = sim.settle()
    assert retry.actions == (SetCheckState(CheckState.RETRY, evicted_on_worker_message("worker1")),)
    assert cleanup.actions == (DeleteRemoteJob("worker1"), DeleteRemoteWorkload("worker1"))
    sim.lifecycle()
    assert not sim.local.has_quota_reservation
    # The eviction cleared clusterName (as upstream): nothing left to plan.
    assert sim.local.status.cluster_name is None
    assert sim.settle() == []
    assert sim.copies == {"worker1": None, "worker2": None} and not any(sim.jobs.values())


def test_simulated_incremental_run_converges_each_round() -> None:
    clusters = ["w1", "w2", "w3", "w4"]
    sim = Simulation(local_wl(), clusters, dispatcher=INCREMENTAL)
    [plan] = sim.settle()
    assert sim.local.status.nominated_cluster_names == ["w1", "w2", "w3"]
    assert plan.requeue_after is not None
    sim.now += plan.requeue_after
    [plan] = sim.settle()
    assert sim.local.status.nominated_cluster_names == clusters
    assert [c for c in clusters if sim.copies[c] is not None] == clusters
    sim.worker("w4", "reserved", at=sim.now)
    sim.settle()
    assert sim.local.status.cluster_name == "w4"
    assert [c for c in clusters if sim.copies[c] is not None] == ["w4"]


# --- issue 10: trust ---------------------------------------------------------------------------


def test_an_unknown_config_keeps_a_running_workload_and_touches_nothing() -> None:
    """Item A: a missing, unparsable or not yet seen MultiKueueConfig is not an empty one."""
    wl = running()
    ctx = replace(context(clusters=[]), config_known=False, config_name="cfg")
    plan = decide(wl, ctx)
    assert plan.actions == () and plan.requeue_after is not None


def test_an_unknown_config_says_why_a_pending_workload_waits() -> None:
    wl = local_wl(nominated=["w1"], message=waiting("w1").message)
    plan = decide(wl, replace(context(clusters=[]), config_known=False, config_name="cfg"))
    [action] = plan.actions
    assert isinstance(action, SetCheckState) and action.state == CheckState.PENDING
    assert 'MultiKueueConfig "cfg" is missing or cannot be read' in action.message
    assert plan.requeue_after is not None


def test_a_config_that_exists_and_no_longer_lists_the_winner_says_so() -> None:
    plan = decide(running(), replace(context(view("w1", remote("reserved"))), config_name="cfg"))
    [action] = plan.actions
    assert isinstance(action, SetCheckState) and action.state == CheckState.RETRY
    assert 'is no longer listed in the MultiKueueConfig "cfg"' in action.message


def out_of_sync() -> Workload:
    copy = remote("finished")
    condition = copy.condition("Finished")
    assert condition is not None
    condition.reason = "OutOfSync"
    return copy


def test_a_remote_finish_out_of_sync_is_a_retry_not_a_completion() -> None:
    """Item B: upstream resets the check to Retry and dispatches again."""
    plan = decide(running(), context(view("w1"), view("w2", out_of_sync(), job=True)))
    assert plan.actions == (
        SetCheckState(
            CheckState.RETRY,
            'Remote workload on worker cluster "w2" is out of sync with its user job, resetting for re-dispatch',
        ),
    )
    assert not any(isinstance(a, FinishLocal) for a in plan.actions)


def test_a_copy_finished_out_of_sync_is_not_taken_for_a_finish_while_dispatching() -> None:
    wl = local_wl(nominated=["w1", "w2"], message=waiting("w1", "w2").message)
    actions = decide(wl, context(view("w1", out_of_sync()), view("w2", remote()))).actions
    assert not any(isinstance(a, FinishLocal) for a in actions)
    assert DeleteRemoteWorkload("w1") in actions  # replaced: created again once gone


def starting(**kwargs: Any) -> Workload:
    """The winner is recorded, its job is being created: the check is still Pending."""
    return local_wl(cluster_name="w2", message='The workload got reservation on "w2"; creating its job there', **kwargs)


def test_a_copy_that_finished_before_ready_first_makes_its_job_start_on_the_manager() -> None:
    """Seen in CI: a short job finished on the winner while the manager restarted before writing Ready.

    Finishing at once (as upstream) leaves the manager's Job suspended for
    good: it starts only once admitted, and a suspended Job cannot take the
    worker's final status. So the check turns Ready first, then the running
    plan copies the status and finishes.
    """
    ctx = context(view("w1"), view("w2", remote("finished"), job=True))
    assert decide(starting(), ctx).actions == (SetCheckState(CheckState.READY, reservation_message("w2")),)
    assert decide(running(), ctx).actions[0] == FinishLocal("w2", "Succeeded", "Job finished successfully")


def test_a_copy_that_finished_before_its_winner_was_recorded_is_made_the_winner() -> None:
    wl = local_wl(nominated=["w1", "w2"], message=waiting("w1", "w2").message)
    plan = decide(wl, context(view("w1", remote("reserved")), view("w2", remote("finished"), job=True)))
    assert plan.actions == (
        DeleteRemoteWorkload("w1"),
        SetNominatedClusters(()),
        SetClusterName("w2"),
        SetCheckState(CheckState.READY, reservation_message("w2")),
    )


@pytest.mark.parametrize("wl", [starting(), local_wl(nominated=["w2"], message=waiting("w2").message)], ids=["starting", "dispatching"])
def test_a_finished_copy_without_a_job_finishes_at_once(wl: Workload) -> None:
    """No job left on the worker: there is no final status to wait for."""
    plan = decide(wl, context(view("w2", remote("finished"))))
    assert plan.actions[0] == FinishLocal("w2", "Succeeded", "Job finished successfully")
    assert DeleteRemoteWorkload("w2") in plan.actions


def drifted(kind: str = "reserved", count: int = 64) -> Workload:
    copy = remote(kind)
    copy.spec.pod_sets[0].count = count
    return copy


def test_a_drifted_reserved_copy_is_not_adopted_but_replaced() -> None:
    """Item C: a stale copy with count 64 of a re-created Workload with count 1."""
    wl = local_wl(nominated=["w1", "w2"], message=waiting("w1", "w2").message)
    actions = decide(wl, context(view("w1", drifted()), view("w2", remote()))).actions
    assert not any(isinstance(a, (CreateRemoteJob, SetClusterName)) for a in actions)
    assert DeleteRemoteWorkload("w1") in actions


def test_a_nominated_copy_deactivated_by_fencing_is_replaced() -> None:
    """The manager was down longer than the origin Lease: the worker deactivated its pending copies."""
    wl = local_wl(nominated=["w1", "w2"], message=waiting("w1", "w2").message)
    fenced = remote()
    fenced.spec.active = False
    actions = decide(wl, context(view("w1", fenced), view("w2", remote()))).actions
    assert DeleteRemoteWorkload("w1") in actions  # created again by the next plan, once gone
    assert DeleteRemoteWorkload("w2") not in actions


def test_a_drifted_winner_is_given_up() -> None:
    actions = decide(running(), context(view("w1"), view("w2", drifted("admitted"), job=True))).actions
    [check] = [a for a in actions if isinstance(a, SetCheckState)]
    assert check.state == CheckState.RETRY and "pod set counts differ" in check.message


def test_spec_drift_compares_queue_counts_and_requests_not_priority() -> None:
    from multikueue.controllers.multikueue.dispatch import spec_drift

    local = local_wl()
    same = remote("reserved")
    assert spec_drift(local, RemoteCopy.of(same)) is None
    same.spec.priority = 7
    assert spec_drift(local, RemoteCopy.of(same)) is None
    other_queue = remote("reserved")
    other_queue.spec.queue_name = "elsewhere"
    assert spec_drift(local, RemoteCopy.of(other_queue)) == "queue name"
    bigger = remote("reserved")
    bigger.spec.pod_sets[0].template = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "8"}}}]}}
    assert spec_drift(local, RemoteCopy.of(bigger)) == "resource requests"


def test_a_priority_change_is_propagated_to_the_running_copy() -> None:
    from multikueue.controllers.multikueue.dispatch import SetRemotePriority

    wl = running()
    wl.spec.priority = 100
    actions = decide(wl, context(view("w1"), view("w2", remote("admitted"), job=True))).actions
    assert actions == (SetRemotePriority("w2", 100), SyncJobStatus("w2"))


def test_ready_waits_for_the_job_on_the_winner() -> None:
    """Item D: the check stays Pending (nothing Admitted) until the job exists on the winner."""
    starting = local_wl(cluster_name="w2", message='The workload got reservation on "w2"; creating its job there')
    # The job is not there yet (the create failed or its event is on the way): create again, stay Pending.
    assert decide(starting, context(view("w1"), view("w2", remote("reserved")))).actions == (CreateRemoteJob("w2"),)
    # The watch shows the job: Ready, and the lifecycle's Admitted follows in the same write.
    plan = decide(starting, context(view("w1"), view("w2", remote("reserved"), job=True)))
    assert plan.actions == (SetCheckState(CheckState.READY, reservation_message("w2")),)
    assert next_update(starting, NOW) is None or next_update(starting, NOW).transition != "admitted"  # type: ignore[union-attr]


def test_an_unreachable_winner_while_its_job_is_created_is_waited_for() -> None:
    starting = local_wl(cluster_name="w2", message='The workload got reservation on "w2"; creating its job there')
    plan = decide(starting, context(view("w1"), view("w2", active=False, since=NOW - TIMEOUT)))
    assert [a.state for a in plan.actions if isinstance(a, SetCheckState)] == [CheckState.RETRY]


def test_a_winner_whose_cluster_object_is_gone_runs_into_the_worker_lost_timeout() -> None:
    """Item G: the I/O layer gives a missing MultiKueueCluster an inactive view with the time it went missing."""
    gone = view("w2", active=False, since=NOW - timedelta(minutes=1))
    plan = decide(running(), context(view("w1"), gone))
    assert plan.actions == () and plan.requeue_after == TIMEOUT - timedelta(minutes=1)
    later = context(view("w1"), gone, now=NOW + TIMEOUT)
    [action] = decide(running(), later).actions
    assert isinstance(action, SetCheckState) and action.state == CheckState.RETRY


def test_a_copy_already_being_deleted_is_not_deleted_again() -> None:
    """Item H: unless the in-use finalizer still holds it (then the I/O layer drops it)."""
    terminating = remote("pending")
    terminating.metadata.deletion_timestamp = NOW
    wl = local_wl(reserved=False)
    assert decide(wl, context(view("w1", terminating))).actions == ()
    terminating.metadata.finalizers = ["kueue.x-k8s.io/resource-in-use"]
    assert decide(wl, context(view("w1", terminating))).actions == (DeleteRemoteWorkload("w1"),)


def test_a_deleted_workload_has_objects_left_until_every_active_view_is_clean() -> None:
    """Item I: the I/O layer releases the in-use finalizer of a deleted Workload only then."""
    from multikueue.controllers.multikueue.dispatch import remote_objects_left

    assert remote_objects_left(context(view("w1"), view("w2", job=True)))
    assert remote_objects_left(context(view("w1", remote())))
    assert not remote_objects_left(context(view("w1"), view("w2", remote(), active=False, since=NOW)))
