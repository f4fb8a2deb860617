"""The MultiKueue admission check's decisions for one manager Workload (pure).

:func:`decide` takes the local Workload and a snapshot of what the manager
knows about the worker clusters (:class:`DispatchContext`) and returns a
:class:`Plan`: the actions to take, in order, and when to call again. No I/O,
no clock (``ctx.now``), no state between calls: everything that must survive
a restart is read from the local Workload's status, so any replica deciding
on the same snapshot decides the same thing.

The behaviour reference is upstream Kueue's MultiKueue Workload reconciler
(``pkg/controller/admissionchecks/multikueue/workload.go``, ``reconcileGroup``
and ``nominateAndSynchronizeWorkers``) and its incremental dispatcher
(``pkg/controller/workloaddispatcher/incrementaldispatcher.go``). Where this
module differs, the docstring of the function concerned says so.

Contract with the I/O layer that applies a plan:

- actions are applied in order; on the first failure the rest of the plan is
  dropped and the next event decides again (every action is level-triggered,
  so nothing is lost);
- consecutive local status actions (:class:`SetNominatedClusters`,
  :class:`SetClusterName`, :class:`SetCheckState`) are written as one status
  patch: ``clusterName`` and ``nominatedClusterNames`` may not both be set
  (CRD rule), so clearing one and setting the other must be one write;
- :class:`SetCheckState` moves the check's ``lastTransitionTime`` only when the
  state changes (as upstream's ``SetAdmissionCheckState``);
- actions are only ever emitted for *active* clusters; copies on unreachable
  workers are left for later (or for the GC);
- :class:`DeleteRemoteJob` deletes the job only if it carries this manager's
  origin label (upstream's ``DeleteRemoteObjectIfOwned``);
- ``decide`` must be called again when a worker's ``Active`` state changes, for
  every Workload whose check is Pending or whose ``clusterName`` is that worker:
  the plan asks for a timed call (``requeue_after``) only for timers that run
  out without any event (worker-lost timeout, incremental dispatch rounds).

Over 500 lines on purpose: it is one state machine, and its contract with
the I/O layer is only checkable when all its branches are read together.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from multikueue.api.constants import CheckState, Dispatcher, WorkloadConditionType
from multikueue.api.meta import format_time
from multikueue.api.workload import AdmissionCheckState, Workload
from multikueue.controllers.multikueue.remote_workload import RemoteState, remote_state

__all__ = [
    "INCREMENTAL_BATCH_SIZE",
    "INCREMENTAL_ROUND_TIMEOUT",
    "Action",
    "ClusterView",
    "CreateRemoteJob",
    "CreateRemoteWorkload",
    "DeleteRemoteJob",
    "DeleteRemoteWorkload",
    "DispatchContext",
    "FinishLocal",
    "Plan",
    "SetCheckState",
    "SetClusterName",
    "SetNominatedClusters",
    "SyncJobStatus",
    "decide",
    "evicted_on_worker_message",
    "reservation_message",
]

#: Upstream's incremental dispatcher nominates this many more workers per round.
INCREMENTAL_BATCH_SIZE = 3
#: Upstream's ``incrementalDispatcherRoundTimeout``: a new round starts when none reserved by then.
INCREMENTAL_ROUND_TIMEOUT = timedelta(minutes=5)

#: Remote states in which a copy holds a reservation on its worker (may win the Workload).
_RESERVING = frozenset({RemoteState.RESERVED, RemoteState.ADMITTED})


# --- inputs ------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterView:
    """What the manager knows about one worker cluster, for one Workload."""

    name: str
    #: Connected and usable now.
    active: bool
    #: When it stopped being active (``None`` if active, or if the I/O layer does not know).
    inactive_since: datetime | None
    #: The Workload copy there (same namespace and name) as last seen; ``None`` if absent.
    workload: Workload | None
    #: The adapter's job object (this manager's) exists there.
    job_exists: bool


@dataclass(frozen=True)
class DispatchContext:
    """Everything :func:`decide` needs besides the local Workload."""

    #: The MultiKueue AdmissionCheck this Workload carries.
    check_name: str
    #: The MultiKueueConfig's clusters, in order.
    clusters: tuple[str, ...]
    #: A view for every cluster of the config; a missing key means the cluster object is missing or unknown.
    views: Mapping[str, ClusterView]
    #: A :class:`~multikueue.api.constants.Dispatcher` value (anything else: an external dispatcher).
    dispatcher: str
    worker_lost_timeout: timedelta
    origin: str
    now: datetime
    #: ``None`` when an adapter exists and the owner is managed by MultiKueue; else why not.
    adapter_problem: str | None


# --- actions -----------------------------------------------------------------------


@dataclass(frozen=True)
class CreateRemoteWorkload:
    """Create :func:`~multikueue.controllers.multikueue.remote_workload.remote_workload_copy` on ``cluster``."""

    cluster: str


@dataclass(frozen=True)
class DeleteRemoteWorkload:
    """Delete the Workload copy on ``cluster`` (dropping its ``resource-in-use`` finalizer first, as upstream)."""

    cluster: str


@dataclass(frozen=True)
class CreateRemoteJob:
    """Create the job on ``cluster`` through the adapter, bound to the Workload copy there."""

    cluster: str


@dataclass(frozen=True)
class DeleteRemoteJob:
    """Delete the adapter's job on ``cluster`` if it is this manager's."""

    cluster: str


@dataclass(frozen=True)
class SetCheckState:
    """Set the MultiKueue check's state and message on the local Workload."""

    state: CheckState
    message: str


@dataclass(frozen=True)
class SetNominatedClusters:
    """Set ``status.nominatedClusterNames``; an empty tuple clears it."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class SetClusterName:
    """Set ``status.clusterName``; ``None`` clears it."""

    name: str | None


@dataclass(frozen=True)
class SyncJobStatus:
    """Copy the job's status on ``cluster`` to the local job through the adapter.

    Emitted on every decision while the Workload runs on ``cluster``: the
    snapshot does not hold job statuses, so whether they differ is the
    adapter's business (its sync is a no-op when they are equal).
    """

    cluster: str


@dataclass(frozen=True)
class FinishLocal:
    """Copy the final job status from ``cluster`` and mark the local Workload Finished with this reason and message."""

    cluster: str
    reason: str
    message: str


Action = (
    CreateRemoteWorkload
    | DeleteRemoteWorkload
    | CreateRemoteJob
    | DeleteRemoteJob
    | SetCheckState
    | SetNominatedClusters
    | SetClusterName
    | SyncJobStatus
    | FinishLocal
)


@dataclass(frozen=True)
class Plan:
    """The outcome of one decision: actions in order, and when to decide again without an event."""

    actions: tuple[Action, ...] = ()
    requeue_after: timedelta | None = None

    @property
    def changes(self) -> tuple[Action, ...]:
        """The actions that change something (all but the level-triggered :class:`SyncJobStatus`)."""
        return tuple(a for a in self.actions if not isinstance(a, SyncJobStatus))

    @property
    def settled(self) -> bool:
        """Nothing to change: the snapshot is where it should be."""
        return not self.changes


# --- messages ----------------------------------------------------------------------


def _q(name: str) -> str:
    """A name quoted as Go's ``%q`` does (upstream's messages quote cluster names so)."""
    return json.dumps(name)


def _names(names: Iterable[str]) -> str:
    return ", ".join(_q(n) for n in names)


def reservation_message(cluster: str) -> str:
    """Upstream's Ready message, verbatim."""
    return f"The workload got reservation on {_q(cluster)}"


def evicted_on_worker_message(cluster: str) -> str:
    """Upstream's Retry message after an eviction on the worker, verbatim (the previous state is always Ready)."""
    return f"Workload evicted on worker cluster: {_q(cluster)}, resetting for re-admission. Previously: {_q(CheckState.READY)}"


def _no_longer_reserved_message(cluster: str, state: RemoteState) -> str:
    # Upstream: "Reserving remote no longer exists or is not admitted"; we name the worker and say which.
    why = "no longer exists" if state == RemoteState.ABSENT else "no longer has a quota reservation"
    return f"Reserving remote {_q(cluster)}: the workload {why} there"


def _lost_message(cluster: str, since: datetime) -> str:
    # Upstream: "Reserving remote lost"; kept as the prefix.
    return f"Reserving remote lost: worker cluster {_q(cluster)} unreachable since {format_time(since)}"


def _not_in_config_message(cluster: str) -> str:
    return f"Reserving remote lost: worker cluster {_q(cluster)} is no longer in the MultiKueueConfig"


def _no_active_message(ctx: DispatchContext) -> str:
    # Upstream has no message here (the reconcile errors with "no active clusters" and retries).
    return "No active clusters in MultiKueueConfig" + (f" (inactive: {_names(ctx.clusters)})" if ctx.clusters else "")


def _waiting_message(nominated: Sequence[str]) -> str:
    if not nominated:
        return "Waiting for worker clusters to be nominated"
    return f"Nominated worker clusters: {_names(nominated)}; waiting for one of them to reserve quota"


# --- reading the snapshot ------------------------------------------------------------


def _active_view(ctx: DispatchContext, cluster: str) -> ClusterView | None:
    view = ctx.views.get(cluster)
    return view if view is not None and view.active else None


def _active_clusters(ctx: DispatchContext) -> list[str]:
    """The config's active clusters, in config order."""
    return [c for c in ctx.clusters if _active_view(ctx, c) is not None]


def _state(ctx: DispatchContext, cluster: str) -> RemoteState:
    view = _active_view(ctx, cluster)
    return remote_state(view.workload) if view is not None else RemoteState.ABSENT


def _holds_reservation(local: Workload) -> bool:
    """Dispatchable: ``QuotaReserved=True`` with ``status.admission`` set.

    As upstream, only the reservation counts. An evicted or deactivated
    Workload loses it in the same write (see :mod:`multikueue.core.lifecycle`),
    so those are "not reserved" too.
    """
    return local.has_quota_reservation and local.status.admission is not None


def _other_checks_ready(local: Workload, check_name: str) -> bool:
    """Upstream (``allNonMKAdmissionChecksReady``) nominates only once every other check is Ready."""
    return all(c.state == CheckState.READY for c in local.status.admission_checks or () if c.name != check_name)


# --- building actions ----------------------------------------------------------------


def _delete_remote(view: ClusterView) -> list[Action]:
    """Remove what this Workload has on one worker: the job first, then the copy (upstream's order)."""
    actions: list[Action] = []
    if view.job_exists:
        actions.append(DeleteRemoteJob(view.name))
    if view.workload is not None and view.workload.metadata.deletion_timestamp is None:
        # A copy already being deleted (a finalizer holds it) needs no second request.
        actions.append(DeleteRemoteWorkload(view.name))
    return actions


def _cleanup(ctx: DispatchContext, *, keep: str | None = None) -> list[Action]:
    """Delete the remote objects on every active cluster of the config but ``keep``."""
    actions: list[Action] = []
    for cluster in ctx.clusters:
        view = _active_view(ctx, cluster)
        if view is not None and cluster != keep:
            actions += _delete_remote(view)
    return actions


def _finish_local(view: ClusterView) -> FinishLocal:
    """Finish with the remote copy's ``Finished`` reason and message (upstream's ``workloadfinish.Finish``)."""
    condition = view.workload.condition(WorkloadConditionType.FINISHED) if view.workload is not None else None
    if condition is None:  # not reached: callers check remote_state() == FINISHED first
        return FinishLocal(view.name, "Finished", "")
    return FinishLocal(view.name, condition.reason, condition.message)


def _set_check(check: AdmissionCheckState, state: CheckState, message: str) -> list[Action]:
    return [] if (check.state, check.message) == (state, message) else [SetCheckState(state, message)]


def _set_cluster_name(local: Workload, name: str | None) -> list[Action]:
    return [] if (local.status.cluster_name or None) == name else [SetClusterName(name)]


def _set_nominated(local: Workload, names: Sequence[str]) -> list[Action]:
    """Set the nominated list when its *set* of names changes (upstream's ``nominatedClusterSetsEqual``)."""
    current = local.status.nominated_cluster_names or []
    return [] if set(current) == set(names) else [SetNominatedClusters(tuple(names))]


# --- decide --------------------------------------------------------------------------


def decide(local: Workload, ctx: DispatchContext) -> Plan:
    """What to do next for ``local``, the manager's Workload, given ``ctx``.

    In order (first match decides):

    1. no MultiKueue check ``ctx.check_name`` on it: nothing;
    2. being deleted or Finished: delete the remote objects everywhere;
    3. no quota reservation (pending, evicted, deactivated): delete the remote
       objects everywhere and clear ``clusterName``/``nominatedClusterNames``;
    4. check ``Retry`` or ``Rejected``: this attempt is over, delete the remote
       objects everywhere (the local lifecycle evicts or deactivates; upstream
       keeps the winner's copy until then, deleting a little earlier changes
       nothing);
    5. check ``Pending`` and ``ctx.adapter_problem``: ``Rejected`` with that
       message, nothing else (upstream also rejects in other states and before
       the reservation; we only do it before dispatching);
    6. check ``Ready`` with ``clusterName`` set: :func:`_running`;
    7. otherwise (``Pending``, or ``Ready`` without ``clusterName``):
       :func:`_dispatching`.
    """
    check = local.admission_check(ctx.check_name)
    if check is None:
        return Plan()
    if local.metadata.deletion_timestamp is not None or local.is_finished:
        return Plan(tuple(_cleanup(ctx)))
    if not _holds_reservation(local):
        return Plan(tuple(_cleanup(ctx) + _set_nominated(local, ()) + _set_cluster_name(local, None)))
    if check.state in (CheckState.RETRY, CheckState.REJECTED):
        return Plan(tuple(_cleanup(ctx)))
    if check.state == CheckState.PENDING and ctx.adapter_problem is not None:
        return Plan((SetCheckState(CheckState.REJECTED, ctx.adapter_problem),))
    if check.state == CheckState.READY and local.status.cluster_name:
        return _running(local, check, ctx, local.status.cluster_name)
    return _dispatching(local, check, ctx)


def _running(local: Workload, check: AdmissionCheckState, ctx: DispatchContext, winner: str) -> Plan:
    """The Workload runs on ``winner``: follow it until it finishes, or give it up.

    Copies elsewhere (a worker that was unreachable when the winner was
    chosen) are deleted, as upstream does whenever the reserving copy is
    visible. The winner's copy decides:

    - ``FINISHED``: :class:`FinishLocal` with its Finished reason and message,
      then delete the job and the copy there (upstream deletes them on the next
      reconcile, once the local Workload is Finished; same result);
    - ``EVICTED``: ``Retry`` with upstream's message;
    - ``ABSENT`` or ``PENDING`` (the copy is gone or lost its reservation
      without an eviction): ``Retry`` (upstream: "Reserving remote no longer
      exists or is not admitted");
    - ``RESERVED``/``ADMITTED``: create the job if missing, else sync its status.
    """
    if winner not in ctx.clusters:
        # Upstream: not among the config's clusters, so neither reachable nor "unavailable": Retry at once.
        return Plan(tuple(_set_check(check, CheckState.RETRY, _not_in_config_message(winner))))
    view = _active_view(ctx, winner)
    if view is None:
        return _winner_unreachable(check, ctx, winner)
    actions = _cleanup(ctx, keep=winner) + _set_nominated(local, ())
    state = remote_state(view.workload)
    if state == RemoteState.FINISHED:
        actions += [_finish_local(view), *_delete_remote(view)]
    elif state == RemoteState.EVICTED:
        actions += _set_check(check, CheckState.RETRY, evicted_on_worker_message(winner))
    elif state in (RemoteState.ABSENT, RemoteState.PENDING):
        actions += _set_check(check, CheckState.RETRY, _no_longer_reserved_message(winner, state))
    else:
        actions.append(SyncJobStatus(winner) if view.job_exists else CreateRemoteJob(winner))
    return Plan(tuple(actions))


def _winner_unreachable(check: AdmissionCheckState, ctx: DispatchContext, winner: str) -> Plan:
    """Keep ``Ready`` for ``worker_lost_timeout`` after the winner became unreachable, then ``Retry``.

    The timer starts at the view's ``inactive_since`` (upstream anchors it the
    same way, on the first observation of the loss, in the
    ``kueue.x-k8s.io/multikueue-worker-lost-since`` annotation; older upstream
    used the check's ``lastTransitionTime``, which evicted long-running jobs
    at once). Expired when ``now >= inactive_since + timeout``, as upstream
    (``remaining > 0`` waits). Unknown ``inactive_since`` (or no view at all)
    counts as "lost just now": the Workload stays Ready and the caller asks
    again after a full timeout; the I/O layer must report when it first
    failed to reach the worker for the timeout to ever run out. Copies on
    other reachable workers are deleted meanwhile, as while running.
    """
    strays = _cleanup(ctx, keep=winner)
    view = ctx.views.get(winner)
    since = view.inactive_since if view is not None else None
    remaining = ctx.worker_lost_timeout if since is None else since + ctx.worker_lost_timeout - ctx.now
    if since is None or remaining > timedelta(0):
        return Plan(tuple(strays), requeue_after=remaining)
    return Plan(tuple(strays + _set_check(check, CheckState.RETRY, _lost_message(winner, since))))


def _pick_winner(ctx: DispatchContext) -> str | None:
    """The active cluster whose copy reserved quota first; ties go to config order.

    Upstream picks the earliest ``QuotaReserved`` transition among all the
    connected workers' copies (not only the nominated ones); so do we, with
    the config order making ties deterministic. Recent upstream waits for
    ``Admitted`` instead (issue #8585, for worker-side admission checks such
    as ProvisioningRequest); the project follows the older, documented rule.
    """
    candidates: list[tuple[datetime, int, str]] = []
    for index, cluster in enumerate(ctx.clusters):
        view = _active_view(ctx, cluster)
        if view is None or view.workload is None or remote_state(view.workload) not in _RESERVING:
            continue
        reserved = view.workload.condition(WorkloadConditionType.QUOTA_RESERVED)
        if reserved is not None:  # always, in the reserving states
            candidates.append((reserved.last_transition_time, index, cluster))
    return min(candidates)[2] if candidates else None


def _first_finished(ctx: DispatchContext) -> str | None:
    """An active cluster whose copy already finished (config order)."""
    return next((c for c in ctx.clusters if _state(ctx, c) == RemoteState.FINISHED), None)


def _dispatching(local: Workload, check: AdmissionCheckState, ctx: DispatchContext) -> Plan:
    """No winner recorded yet: converge on one if a copy reserved quota, else nominate workers.

    A ``clusterName`` left from an earlier attempt (the Workload was evicted
    and reserved again before the cleanup ran) is cleared first, in a write of
    its own: the API refuses to change it from one worker to another.
    """
    if local.status.cluster_name:
        return Plan((SetClusterName(None),))
    finished = _first_finished(ctx)
    if finished is not None:
        return _finish_from(ctx, finished)
    winner = _pick_winner(ctx)
    if winner is not None:
        return _converge(local, check, ctx, winner)
    if check.state == CheckState.READY:
        return _ready_without_winner(check, ctx)
    if not _other_checks_ready(local, ctx.check_name):
        return Plan()
    return _nominate(local, check, ctx)


def _finish_from(ctx: DispatchContext, cluster: str) -> Plan:
    """A copy finished before its worker was recorded as the winner (a lost status write): finish anyway, as upstream."""
    return Plan((_finish_local(ctx.views[cluster]), *_cleanup(ctx)))


def _converge(local: Workload, check: AdmissionCheckState, ctx: DispatchContext, winner: str) -> Plan:
    """``winner`` reserved quota: drop the other copies, create the job there, record it, check ``Ready``."""
    actions = _cleanup(ctx, keep=winner)
    if not ctx.views[winner].job_exists:
        actions.append(CreateRemoteJob(winner))
    actions += _set_nominated(local, ())
    actions += _set_cluster_name(local, winner)
    actions += _set_check(check, CheckState.READY, reservation_message(winner))
    return Plan(tuple(actions))


def _ready_without_winner(check: AdmissionCheckState, ctx: DispatchContext) -> Plan:
    """``Ready`` but no ``clusterName`` and no reserving copy in sight (only after an external write).

    Upstream treats an empty ``clusterName`` as an unreachable worker; with
    nothing better to anchor on we use the check's ``lastTransitionTime``
    (upstream before the worker-lost-since annotation).
    """
    remaining = check.last_transition_time + ctx.worker_lost_timeout - ctx.now
    if remaining > timedelta(0):
        return Plan(requeue_after=remaining)
    return Plan(tuple(_set_check(check, CheckState.RETRY, "Reserving remote lost")))


def _nominate(local: Workload, check: AdmissionCheckState, ctx: DispatchContext) -> Plan:
    """Choose the nominated workers, then make the copies match the nomination.

    Nominated active workers get a copy; copies on other active workers are
    deleted. A job on any of them is a leftover (no worker won yet) and is
    deleted too. The check stays ``Pending``; its message says where the
    Workload waits, or that no worker is reachable.
    """
    active = _active_clusters(ctx)
    requeue_after: timedelta | None = None
    if ctx.dispatcher == Dispatcher.ALL_AT_ONCE:
        nominated: tuple[str, ...] = tuple(active)
    elif ctx.dispatcher == Dispatcher.INCREMENTAL:
        nominated, requeue_after = _incremental(local, ctx, active)
    else:
        # Upstream: any other dispatcher name is an external controller that writes the list itself.
        nominated = tuple(local.status.nominated_cluster_names or ())
    actions: list[Action] = []
    for cluster in ctx.clusters:
        view = _active_view(ctx, cluster)
        if view is None:
            continue
        if cluster not in nominated:
            actions += _delete_remote(view)
            continue
        if view.job_exists:
            actions.append(DeleteRemoteJob(cluster))
        if view.workload is None:
            actions.append(CreateRemoteWorkload(cluster))
    actions += _set_nominated(local, nominated)
    message = _waiting_message(nominated) if active else _no_active_message(ctx)
    actions += _set_check(check, CheckState.PENDING, message)
    return Plan(tuple(actions), requeue_after)


def _round_start(local: Workload, check_name: str, now: datetime) -> datetime:
    """When nomination began: the reservation, or the last other check turning Ready, whichever is later.

    Upstream keeps round start times in memory, so a restart starts over;
    ours are derived from the Workload's status and survive restarts and
    leader changes. The anchor only moves when the Workload is reserved again,
    which restarts the dispatch from scratch anyway. Our own writes (the
    check's message) never move it.
    """
    reserved = local.condition(WorkloadConditionType.QUOTA_RESERVED)
    times = [reserved.last_transition_time] if reserved is not None else []
    times += [c.last_transition_time for c in local.status.admission_checks or () if c.name != check_name]
    return max(times, default=now)


def _incremental(local: Workload, ctx: DispatchContext, active: Sequence[str]) -> tuple[tuple[str, ...], timedelta | None]:
    """Upstream's incremental dispatcher, derived from the clock instead of remembered.

    Round ``k`` (``k = elapsed // 5 min`` since :func:`_round_start`) allows
    ``3 * (k + 1)`` nominated workers; the nominated list only grows (as
    upstream, which appends) by active workers not nominated yet, in name
    order (upstream sorts by name). Differences: upstream nominates among all
    the config's clusters, reachable or not, so an unreachable worker can use
    up a round; a worker that connects mid-round joins at once if the round
    has room; after a restart, rounds that elapsed meanwhile are caught up in
    one go. A new round starts at exactly 5 minutes (upstream: just after).
    Nominated workers removed from the config are dropped from the list.
    """
    current = [c for c in local.status.nominated_cluster_names or () if c in ctx.clusters]
    elapsed = max(ctx.now - _round_start(local, ctx.check_name, ctx.now), timedelta(0))
    rounds = elapsed // INCREMENTAL_ROUND_TIMEOUT
    room = INCREMENTAL_BATCH_SIZE * (rounds + 1) - len(current)
    added = sorted(c for c in active if c not in current)[: max(room, 0)]
    nominated = (*current, *added)
    more_to_come = any(c not in nominated for c in ctx.clusters)
    requeue_after = INCREMENTAL_ROUND_TIMEOUT * (rounds + 1) - elapsed if more_to_come else None
    return nominated, requeue_after
