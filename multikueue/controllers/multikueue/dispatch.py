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
- :class:`DeleteRemoteJob` deletes the job bound to the Workload (found by the
  Workload's namespace and name, not through the owner, which may be gone
  already) only if it carries this manager's origin label (upstream's
  ``DeleteRemoteObjectIfOwned``); ``ClusterView.job_exists`` is answered the
  same way;
- :class:`DeleteRemoteWorkload` drops the copy's ``resource-in-use`` finalizer
  (a patch on the copy's resourceVersion) and deletes it unless it is already
  being deleted; a copy that is gone already is not an error and not logged;
- :class:`CreateRemoteJob` failing permanently on the worker (403, 404, 422)
  a few times in a row ends the attempt: the I/O layer puts the check in
  ``Retry`` with the worker's message (the decision cannot count failures);
- ``ctx.config_known`` is False when the check's MultiKueueConfig is missing,
  unparsable or not seen yet: unknown is not empty, so nothing is changed
  (see :func:`decide`);
- a cluster named by the config whose MultiKueueCluster is missing gets an
  inactive view whose ``inactive_since`` is when the I/O layer first missed
  it, so a winner whose cluster object was deleted runs into the
  worker-lost timeout like one that disconnected;
- a Workload being deleted keeps its ``resource-in-use`` finalizer while it
  has a ``clusterName`` or ``nominatedClusterNames`` (see
  :mod:`multikueue.core.lifecycle`); the I/O layer drops it once a plan for
  it asks for no worker-side action and no active view shows a copy or a
  job (:func:`remote_objects_left`), so the remote job goes with the manager's;
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
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from multikueue.api.constants import CheckState, ConditionStatus, Dispatcher, Finalizers, WorkloadConditionType, WorkloadReason
from multikueue.api.meta import format_time
from multikueue.api.workload import AdmissionCheckState, Workload
from multikueue.controllers.multikueue.remote_workload import RemoteCopy, RemoteState, pod_template_requests, remote_state
from multikueue.core.lifecycle import awaits_release

__all__ = [
    "INCREMENTAL_BATCH_SIZE",
    "INCREMENTAL_ROUND_TIMEOUT",
    "CONFIG_UNKNOWN_RECHECK",
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
    "SetRemotePriority",
    "SyncJobStatus",
    "decide",
    "remote_objects_left",
    "spec_drift",
    "evicted_on_worker_message",
    "reservation_message",
]

#: Upstream's incremental dispatcher nominates this many more workers per round.
INCREMENTAL_BATCH_SIZE = 3
#: Upstream's ``incrementalDispatcherRoundTimeout``: a new round starts when none reserved by then.
INCREMENTAL_ROUND_TIMEOUT = timedelta(minutes=5)

#: How often to look again at a Workload whose MultiKueueConfig is unknown (its events also wake it).
CONFIG_UNKNOWN_RECHECK = timedelta(minutes=1)

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
    workload: RemoteCopy | None
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
    #: The MultiKueueConfig exists and parses (``clusters`` is what it lists); False: missing, unparsable, not seen yet.
    config_known: bool = True
    #: The MultiKueueConfig's name, for messages.
    config_name: str = ""


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
class SetRemotePriority:
    """Set ``spec.priority`` of the Workload copy on ``cluster`` (the manager's priority changed)."""

    cluster: str
    priority: int | None


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
    | SetRemotePriority
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


def _not_in_config_message(ctx: DispatchContext, cluster: str) -> str:
    config = f" {_q(ctx.config_name)}" if ctx.config_name else ""
    return f"Reserving remote lost: worker cluster {_q(cluster)} is no longer listed in the MultiKueueConfig{config}"


def _config_unknown_message(ctx: DispatchContext) -> str:
    config = f" {_q(ctx.config_name)}" if ctx.config_name else ""
    return (
        f"MultiKueueConfig{config} is missing or cannot be read: dispatching is paused and nothing is changed "
        "on the workers until it is back (see the AdmissionCheck's Active condition)"
    )


def _starting_message(cluster: str) -> str:
    return f"The workload got reservation on {_q(cluster)}; creating its job there"


def _out_of_sync_message(cluster: str) -> str:
    # Upstream's message, verbatim.
    return f"Remote workload on worker cluster {_q(cluster)} is out of sync with its user job, resetting for re-dispatch"


def _drift_message(cluster: str, what: str) -> str:
    return f"Reserving remote {_q(cluster)}: the copy there no longer matches the workload ({what} differ); resetting for re-dispatch"


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


def spec_drift(local: Workload, copy: RemoteCopy) -> str | None:
    """What differs between the manager's Workload and a worker's copy of it, or None.

    Upstream (``isRemoteSpecOutOfSync``) compares the whole spec but the
    preemption gates. We compare what decides where and how much quota the
    copy reserves, so that a worker's defaulting of the opaque pod template
    never reads as drift: the queue name and, per pod set, its name, count,
    minimum count and each container's requests. A copy left from another
    Workload of the same name (deleted and re-created) is caught this way.
    Priority is not drift: it is propagated (:class:`SetRemotePriority`),
    as upstream updates the copy instead of replacing it.
    """
    if (local.spec.queue_name or None) != (copy.queue_name or None):
        return "queue name"
    if [(ps.name, ps.count, ps.min_count) for ps in local.spec.pod_sets] != [(ps.name, ps.count, ps.min_count) for ps in copy.pod_sets]:
        return "pod set counts"
    if [pod_template_requests(ps.template) for ps in local.spec.pod_sets] != [ps.requests for ps in copy.pod_sets]:
        return "resource requests"
    return None


def _out_of_sync(copy: RemoteCopy | None) -> bool:
    """The copy finished with reason ``OutOfSync``: a sync failure on the worker, not a completion."""
    condition = copy.condition(WorkloadConditionType.FINISHED) if copy is not None else None
    return condition is not None and condition.status == ConditionStatus.TRUE and condition.reason == WorkloadReason.OUT_OF_SYNC


def _usable(local: Workload, copy: RemoteCopy | None) -> bool:
    """A copy that may win: active, not being deleted, not drifted from the local spec, not finished out of sync.

    A copy being deleted is never adopted: it is usually the previous attempt's,
    which this manager deleted when that attempt ended, and a job created next
    to it would run where the Workload is about to lose its reservation. A
    deactivated copy (``spec.active: false``: the worker fenced this origin
    while its Lease expired, as when the manager was down longer than the
    Lease) is never admitted there again; while nominated it is replaced.
    """
    return (
        copy is not None
        and copy.active
        and not copy.deleting
        and not _out_of_sync(copy)
        and spec_drift(local, copy) is None
    )


def remote_objects_left(ctx: DispatchContext) -> bool:
    """Whether an active worker still shows a copy or a job of this Workload (used to release a deleted one)."""
    return any(v.active and (v.workload is not None or v.job_exists) for v in ctx.views.values())


def _holds_reservation(local: Workload) -> bool:
    """Dispatchable: ``QuotaReserved=True`` with ``status.admission`` set.

    As upstream, only the reservation counts. A deactivated Workload, or one
    evicted by a check, loses it in the same write (see
    :mod:`multikueue.core.lifecycle`), so those are "not reserved" too; a
    preempted one keeps it until its job has stopped, and is not dispatched
    meanwhile (:func:`decide`).
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
    copy = view.workload
    if copy is not None and (
        not copy.deleting or Finalizers.RESOURCE_IN_USE in copy.finalizers
    ):
        # A copy already being deleted needs no second request, unless the in-use finalizer
        # (the worker's Kueue) still holds it: the I/O layer drops it and skips the delete.
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
    2. the MultiKueueConfig is unknown (``ctx.config_known`` False: missing,
       unparsable, not seen yet): nothing is touched, a ``Pending`` check
       says why, look again after :data:`CONFIG_UNKNOWN_RECHECK` (unknown is
       not empty: only a config that exists and no longer lists the winner
       gives it up, see :func:`_running`). The check itself is inactive and
       its ``Active`` condition says why;
    3. being deleted or Finished: delete the remote objects everywhere;
    4. no quota reservation (pending, evicted, deactivated): delete the remote
       objects everywhere and clear ``clusterName``/``nominatedClusterNames``;
       preempted but still holding quota (its release is the Job
       integration's, once the manager's Job is stopped): delete the remote
       objects, leave the rest to the release;
    5. check ``Retry`` or ``Rejected``: this attempt is over, delete the remote
       objects everywhere (the local lifecycle evicts or deactivates; upstream
       keeps the winner's copy until then, deleting a little earlier changes
       nothing);
    6. ``ctx.adapter_problem`` (no adapter, or the owner is not managed by
       MultiKueue, e.g. its mutable ``managedBy`` was flipped after dispatch):
       ``Rejected`` with that message, in any state, as upstream re-checks on
       every reconcile; the lifecycle then deactivates the Workload and the
       next plan (step 5) deletes the remote objects, so the job never runs on
       the manager and a worker at once;
    7. check ``Ready`` with ``clusterName`` set: :func:`_running`;
    8. check ``Pending`` with ``clusterName`` set: :func:`_starting` (the
       winner is recorded, its job is being created);
    9. otherwise (``Pending``, or ``Ready`` without ``clusterName``):
       :func:`_dispatching`.
    """
    check = local.admission_check(ctx.check_name)
    if check is None:
        return Plan()
    if not ctx.config_known:
        keep = check.state == CheckState.PENDING and _holds_reservation(local) and local.metadata.deletion_timestamp is None
        message = _set_check(check, CheckState.PENDING, _config_unknown_message(ctx)) if keep else []
        return Plan(tuple(message), requeue_after=CONFIG_UNKNOWN_RECHECK)
    if local.metadata.deletion_timestamp is not None or local.is_finished:
        return Plan(tuple(_cleanup(ctx)))
    if not _holds_reservation(local):
        return Plan(tuple(_cleanup(ctx) + _set_nominated(local, ()) + _set_cluster_name(local, None)))
    if awaits_release(local):
        # Preempted, its quota not released yet: the remote job stops now; the release clears clusterName.
        return Plan(tuple(_cleanup(ctx)))
    if check.state in (CheckState.RETRY, CheckState.REJECTED):
        return Plan(tuple(_cleanup(ctx)))
    if ctx.adapter_problem is not None:
        return Plan((SetCheckState(CheckState.REJECTED, ctx.adapter_problem),))
    if check.state == CheckState.READY and local.status.cluster_name:
        return _running(local, check, ctx, local.status.cluster_name)
    if check.state == CheckState.PENDING and local.status.cluster_name:
        return _starting(local, check, ctx, local.status.cluster_name)
    return _dispatching(local, check, ctx)


def _running(local: Workload, check: AdmissionCheckState, ctx: DispatchContext, winner: str) -> Plan:
    """The Workload runs on ``winner``: follow it until it finishes, or give it up.

    Copies elsewhere (a worker that was unreachable when the winner was
    chosen) are deleted, as upstream does whenever the reserving copy is
    visible. The winner's copy decides:

    - ``FINISHED``: :class:`FinishLocal` with its Finished reason and message,
      then delete the job and the copy there (upstream deletes them on the next
      reconcile, once the local Workload is Finished; same result); but a
      copy finished with reason ``OutOfSync`` (the worker could not keep it in
      sync with its job) is a failure, not a completion: ``Retry`` with
      upstream's message, and the Workload is dispatched again;
    - the copy no longer matches the local spec (:func:`spec_drift`):
      ``Retry`` (upstream deletes it, and then finds it gone);
    - ``EVICTED``: ``Retry`` with upstream's message;
    - ``ABSENT`` or ``PENDING`` (the copy is gone or lost its reservation
      without an eviction): ``Retry`` (upstream: "Reserving remote no longer
      exists or is not admitted");
    - ``RESERVED``/``ADMITTED``: create the job if missing, else sync its
      status; propagate a changed priority to the copy.

    A winner not listed by the config (which exists: see :func:`decide`)
    is given up at once, as upstream. A winner whose cluster is inactive or
    whose MultiKueueCluster is gone (the I/O layer gives it an inactive view)
    is kept for ``worker_lost_timeout``.
    """
    if winner not in ctx.clusters:
        # Upstream: not among the config's clusters, so neither reachable nor "unavailable": Retry at once.
        return Plan(tuple(_set_check(check, CheckState.RETRY, _not_in_config_message(ctx, winner))))
    view = _active_view(ctx, winner)
    if view is None:
        return _winner_unreachable(check, ctx, winner)
    actions = _cleanup(ctx, keep=winner) + _set_nominated(local, ())
    state = remote_state(view.workload)
    drift = spec_drift(local, view.workload) if view.workload is not None else None
    if state == RemoteState.FINISHED and _out_of_sync(view.workload):
        actions += _set_check(check, CheckState.RETRY, _out_of_sync_message(winner))
    elif state == RemoteState.FINISHED:
        actions += [_finish_local(view), *_delete_remote(view)]
    elif drift is not None:
        actions += _set_check(check, CheckState.RETRY, _drift_message(winner, drift))
    elif state == RemoteState.EVICTED:
        actions += _set_check(check, CheckState.RETRY, evicted_on_worker_message(winner))
    elif state in (RemoteState.ABSENT, RemoteState.PENDING):
        actions += _set_check(check, CheckState.RETRY, _no_longer_reserved_message(winner, state))
    else:
        actions += _set_priority(local, view)
        actions.append(SyncJobStatus(winner) if view.job_exists else CreateRemoteJob(winner))
    return Plan(tuple(actions))


def _set_priority(local: Workload, view: ClusterView) -> list[Action]:
    """Propagate the manager's ``spec.priority`` to the copy (upstream updates the copy in place)."""
    if view.workload is None or view.workload.priority == local.spec.priority:
        return []
    return [SetRemotePriority(view.name, local.spec.priority)]


def _starting(local: Workload, check: AdmissionCheckState, ctx: DispatchContext, winner: str) -> Plan:
    """The winner is recorded (``clusterName``) but the check is still ``Pending``: its job is being created.

    The check turns ``Ready`` (and the Workload ``Admitted``) only once the
    job exists on the winner (:func:`_converge`). A ``clusterName`` whose
    copy no longer reserves quota (gone, evicted, drifted, or left from an
    earlier attempt that was evicted and reserved again before the clean-up)
    is cleared in a write of its own (the API refuses to change it from one
    worker to another), and dispatching starts over; a job already created
    there is deleted by the next nomination. An unreachable winner is
    waited for as while running: its job may exist. A copy that finished
    already is handled by :func:`_finish_early`.
    """
    if winner not in ctx.clusters:
        return Plan((SetClusterName(None),))
    view = _active_view(ctx, winner)
    if view is None:
        return _winner_unreachable(check, ctx, winner)
    state = remote_state(view.workload)
    if state == RemoteState.FINISHED and not _out_of_sync(view.workload):
        return _finish_early(local, check, ctx, winner)
    if state in _RESERVING and _usable(local, view.workload):
        return _converge(local, check, ctx, winner)
    return Plan((SetClusterName(None),))


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


def _pick_winner(local: Workload, ctx: DispatchContext) -> str | None:
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
        if not _usable(local, view.workload):
            continue  # a drifted copy is replaced, never adopted
        reserved = view.workload.condition(WorkloadConditionType.QUOTA_RESERVED)
        if reserved is not None:  # always, in the reserving states
            candidates.append((reserved.last_transition_time, index, cluster))
    return min(candidates)[2] if candidates else None


def _first_finished(ctx: DispatchContext) -> str | None:
    """An active cluster whose copy already finished (config order); a finish ``OutOfSync`` does not count."""
    return next(
        (c for c in ctx.clusters if _state(ctx, c) == RemoteState.FINISHED and not _out_of_sync(ctx.views[c].workload)),
        None,
    )


def _dispatching(local: Workload, check: AdmissionCheckState, ctx: DispatchContext) -> Plan:
    """No winner recorded yet: converge on one if a copy reserved quota, else nominate workers.

    A ``clusterName`` with a ``Ready`` check but no winner in sight (only
    after an external write) is cleared first, in a write of its own: the
    API refuses to change it from one worker to another.
    """
    if local.status.cluster_name:
        return Plan((SetClusterName(None),))
    finished = _first_finished(ctx)
    if finished is not None:
        return _finish_early(local, check, ctx, finished)
    winner = _pick_winner(local, ctx)
    if winner is not None:
        return _converge(local, check, ctx, winner)
    if check.state == CheckState.READY:
        return _ready_without_winner(check, ctx)
    if not _other_checks_ready(local, ctx.check_name):
        return Plan()
    return _nominate(local, check, ctx)


def _finish_early(local: Workload, check: AdmissionCheckState, ctx: DispatchContext, cluster: str) -> Plan:
    """The copy on ``cluster`` finished before the check turned ``Ready``.

    This happens when the job is shorter than the way back of the news that
    it exists (a busy manager), or when the manager restarted between
    creating the job and writing ``Ready``. Upstream finishes the Workload at
    once; but the manager's job object is then still suspended (it starts
    only once its Workload is admitted), and a suspended Job cannot take the
    worker's final status, so it would never show Complete. When the job
    exists there, the worker is made the winner and the check ``Ready``
    (:func:`_converge`): the owner starts, and the next plan
    (:func:`_running`) copies the final status and finishes. A finished copy
    whose job is gone has no status left to copy: finish at once.
    """
    if ctx.views[cluster].job_exists:
        return _converge(local, check, ctx, cluster)
    return Plan((_finish_local(ctx.views[cluster]), *_cleanup(ctx)))


def _converge(local: Workload, check: AdmissionCheckState, ctx: DispatchContext, winner: str) -> Plan:
    """``winner`` reserved quota: drop the other copies, record it, create the job there; ``Ready`` once it exists.

    The winner is recorded (``clusterName``, the commit point) in the same
    plan that creates the job; the check stays ``Pending`` with a message
    saying so until a later snapshot shows the job on the winner (the
    worker's watch, or the create's answer), so a job the worker refuses
    never leaves an admitted Workload holding quota. The I/O layer turns a
    permanent refusal into ``Retry`` with the worker's message. A check that
    is ``Ready`` already (an external write) is left ``Ready``.
    """
    actions = _cleanup(ctx, keep=winner)
    actions += _set_nominated(local, ())
    actions += _set_cluster_name(local, winner)
    view = ctx.views[winner]
    if view.job_exists or check.state == CheckState.READY:
        actions += _set_check(check, CheckState.READY, reservation_message(winner))
    else:
        actions += _set_check(check, CheckState.PENDING, _starting_message(winner))
    actions += _set_priority(local, view)
    if not view.job_exists:
        actions.append(CreateRemoteJob(winner))
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
    deleted, and so are nominated copies that drifted from the local spec
    (:func:`spec_drift`) or finished ``OutOfSync``: the next plan creates
    them again. A job on any of them is a leftover (no worker won yet) and is
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
        elif _out_of_sync(view.workload) or (
            not _usable(local, view.workload) and remote_state(view.workload) != RemoteState.FINISHED
        ):
            # Drifted from the local spec, or finished out of sync: replaced (created again once gone).
            actions += _delete_remote(replace(view, job_exists=False))
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
