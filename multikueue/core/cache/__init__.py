"""The scheduler's in-memory state, fed object by object from watch events.

The I/O layer calls ``upsert_*`` / ``delete_*`` for every watch event (the
objects are the ``multikueue.api`` pydantic models) and reads the status
views to write ClusterQueue and LocalQueue status. The scheduler
(:func:`multikueue.core.scheduler.schedule`) reads the cache, and records
each admission it decides with :meth:`Cache.assume` so the quota is counted
before the API server confirms it.

Every update is incremental: an event touches the few indexes it concerns
(a workload event costs O(pod sets + cohort depth)), and marks *dirty* the
queues whose scheduling inputs it changed. A cycle only looks at dirty
queues, so a cycle with nothing new costs next to nothing.

Workload states, as upstream Kueue defines them:

- *reserving*: ``status.admission`` is set, ``QuotaReserved=True`` and not
  ``Finished=True``; its ``admission`` counts as usage of
  ``admission.clusterQueue``;
- *admitted*: reserving and ``Admitted=True``;
- *assumed*: admitted by the scheduler, not yet confirmed by the watch;
  counts as usage until the Workload comes back reserving (the assumption
  is then dropped, so nothing is counted twice) or :meth:`Cache.forget` is
  called after a failed write;
- *pending*: none of the above, ``spec.active`` not false, not finished, no
  ``deletionTimestamp``.

Namespaces never upserted are treated as existing without labels.

:class:`Cache` is a facade over four parts, each in its own module:

- :mod:`~multikueue.core.cache.store`: the objects and their lookups;
- :mod:`~multikueue.core.cache.hierarchy`: the cohort/ClusterQueue quota
  tree and the quota each Workload holds;
- :mod:`~multikueue.core.cache.queues`: pending Workloads, backoffs,
  assumed admissions and the dirty record;
- :mod:`~multikueue.core.cache.views`: the queue status views.

The facade routes each event to the parts it concerns and turns what they
report changed into dirty marks; the parts never call each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from multikueue.api.admissioncheck import AdmissionCheck
from multikueue.api.clusterqueue import ClusterQueue, ReclaimWithinCohortPolicy
from multikueue.api.cohort import Cohort
from multikueue.api.localqueue import LocalQueue
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import Admission, Workload
from multikueue.api.workloadpriorityclass import WorkloadPriorityClass
from multikueue.core.cache.hierarchy import Contribution, QuotaTree, admission_usage
from multikueue.core.cache.queues import REQUEUE_BATCH, DirtyQueues, PendingQueues, PendingWorkload
from multikueue.core.cache.store import ClusterQueueState, LocalQueueKey, ObjectStore, WorkloadKey, local_queue_of
from multikueue.core.cache.views import (
    ClusterQueueStatusView,
    LocalQueueStatusView,
    QueueStatusView,
    cluster_queue_view,
    local_queue_view,
)
from multikueue.core.quota import FlavorResource

__all__ = [
    "Cache",
    "ClusterQueueState",
    "ClusterQueueStatusView",
    "DirtyQueues",
    "LocalQueueKey",
    "LocalQueueStatusView",
    "PendingWorkload",
    "QueueStatusView",
    "QuotaHolder",
    "WorkloadKey",
    "admission_usage",
]


@dataclass(frozen=True)
class QuotaHolder:
    """A Workload holding quota (admitted, reserving, or assumed this cycle), as preemption weighs it."""

    key: WorkloadKey
    workload: Workload
    cluster_queue: str
    usage: Mapping[FlavorResource, Decimal]
    #: Effective priority (``spec.priority``, else its WorkloadPriorityClass's value, else 0).
    priority: int
    #: Decided by a cycle and not yet confirmed by the watch.
    assumed: bool = False
    #: Assumed, and its write has not begun: preempting it withdraws the decision, nothing is written
    #: (:meth:`Cache.start_writing`).
    withdrawable: bool = False


def _holds_quota(workload: Workload) -> bool:
    return workload.status.admission is not None and workload.has_quota_reservation and not workload.is_finished


def _wants_quota(workload: Workload) -> bool:
    return workload.spec.active and not workload.is_finished and workload.metadata.deletion_timestamp is None


class Cache:
    """Flavors, queues, cohorts, priority classes, admission checks, namespaces and Workloads.

    Not thread-safe: feed it and run cycles from one thread (or one event
    loop task); the scheduler is synchronous and never yields mid-cycle.
    """

    def __init__(self, *, requeue_batch: timedelta = REQUEUE_BATCH) -> None:
        """``requeue_batch``: how long after a Workload gives quota back its tree's parked Workloads wake
        (zero: at once; see :meth:`PendingQueues.mark_cluster_queues
        <multikueue.core.cache.queues.PendingQueues.mark_cluster_queues>`)."""
        self._store = ObjectStore()
        self._tree = QuotaTree(self._store.cohorts)
        self._queues = PendingQueues(self._store.priority_classes, requeue_batch=requeue_batch)
        #: Report ``status.fairSharing.weightedShare`` in ClusterQueue status views (fair sharing is on);
        #: set by whoever runs the scheduler with fair sharing.
        self.fair_sharing_status = False
        #: Per Workload, the holder :meth:`quota_holders` last built and what it was built from: the same
        #: object comes back while none of that changed, so consumers may key their own work on it.
        self._holders: dict[WorkloadKey, tuple[Workload, Contribution, tuple[bool, bool], int, QuotaHolder]] = {}
        #: Bumped when a WorkloadPriorityClass changes (holders' priorities may have).
        self._priorities_version = 0
        #: Per queue, the last status view and what it was computed from (see :meth:`cluster_queue_status`).
        self._cq_views: dict[str, tuple[tuple[object, ...], ClusterQueueStatusView]] = {}
        self._lq_views: dict[LocalQueueKey, tuple[tuple[object, ...], LocalQueueStatusView]] = {}

    def _mark_trees(self, cq_names: Iterable[str], *, by_workload: bool = False) -> None:
        """Mark each ClusterQueue and every ClusterQueue sharing its cohort tree, which wakes their parked
        Workloads: at once when the tree changed, else (``by_workload``) a requeue batch after a Workload
        gave quota back there (see :meth:`park`; one that starts holding quota: :meth:`_mark_new_holder`)."""
        for cq_name in cq_names:
            self._queues.mark_cluster_queues(self._tree.tree_of(cq_name), by_workload=by_workload)

    def _mark_new_holder(self, cq_name: str) -> None:
        """Mark the quota tree of a ClusterQueue where a Workload started holding quota; the Workloads parked
        there for lack of victims wake a requeue batch later in the other ClusterQueues of the tree that
        may reclaim quota (``reclaimWithinCohort`` not ``Never``), none in ``cq_name`` itself.

        Why not its own queue: to preempt the new holder gives back only what it took, so a Workload of
        that queue that found no set of victims making it fit before finds none now. In another queue it
        may: by borrowing, the new holder can make its queue's other Workloads reclaimable. Waking its
        own queue too (as this did before) started that queue's batch each time a Workload was admitted
        there: where a large high-priority Workload runs back to back (1 s, the next one created 1.2 s
        after the last), the batch begun at its admission ended as it finished, and the medium Workloads
        parked behind it woke into the gap before the next one and were evicted by it (decisions, stop
        50). Upstream starts no batch when a Workload is admitted.
        """
        tree = self._tree.tree_of(cq_name)
        victims_in = {
            name
            for name in tree
            if name != cq_name
            and (state := self._store.cluster_queue_state(name)) is not None
            and state.spec.preemption.reclaim_within_cohort != ReclaimWithinCohortPolicy.NEVER
        }
        self._queues.mark_cluster_queues(tree, by_workload=True, released=False, victims_in=victims_in)

    # --- ResourceFlavor --------------------------------------------------------------

    def upsert_flavor(self, flavor: ResourceFlavor) -> None:
        """Add or replace a ResourceFlavor; the queues using it are re-evaluated."""
        self._mark_trees(self._store.put_flavor(flavor))

    def delete_flavor(self, name: str) -> None:
        """Forget a ResourceFlavor; the queues using it become inactive."""
        self._mark_trees(self._store.remove_flavor(name))

    # --- ClusterQueue -------------------------------------------------------------------

    def upsert_cluster_queue(self, cluster_queue: ClusterQueue) -> None:
        """Add or replace a ClusterQueue (quota, cohort, strategy, checks, stop policy)."""
        if self._store.keep_if_same_spec(cluster_queue):
            return  # only metadata or status changed
        node, affected = self._tree.put_cluster_queue(cluster_queue.name, cluster_queue.spec)
        self._store.put_cluster_queue(cluster_queue, node)
        self._queues.mark_cluster_queues(affected)

    def delete_cluster_queue(self, name: str) -> None:
        """Forget a ClusterQueue; its pending Workloads become inadmissible, its cohort peers are re-evaluated.

        Usage of Workloads still admitted there is kept and counts again if
        the ClusterQueue comes back.
        """
        self._cq_views.pop(name, None)
        if self._store.remove_cluster_queue(name):
            self._queues.mark_cluster_queues(self._tree.remove_cluster_queue(name))
            self._queues.forget_cluster_queue(name)

    # --- Cohort ---------------------------------------------------------------------------

    def upsert_cohort(self, cohort: Cohort) -> None:
        """Add or replace a Cohort object (its own quota and parent)."""
        if self._store.put_cohort(cohort):
            self._queues.mark_cluster_queues(self._tree.reshape_cohort(cohort.name))

    def delete_cohort(self, name: str) -> None:
        """Forget a Cohort object; ClusterQueues naming it still form an (implicit) cohort."""
        if self._store.remove_cohort(name):
            self._queues.mark_cluster_queues(self._tree.remove_cohort(name))

    # --- LocalQueue ---------------------------------------------------------------------------

    def upsert_local_queue(self, local_queue: LocalQueue) -> None:
        """Add or replace a LocalQueue; its pending Workloads are re-checked."""
        # The queue's Workloads join (or leave) a ClusterQueue: a StrictFIFO head may change.
        self._local_queue_moved((local_queue.namespace or "", local_queue.name), self._store.put_local_queue(local_queue))

    def delete_local_queue(self, namespace: str, name: str) -> None:
        """Forget a LocalQueue; its pending Workloads become inadmissible."""
        self._lq_views.pop((namespace, name), None)
        self._local_queue_moved((namespace, name), self._store.remove_local_queue((namespace, name)))

    def _local_queue_moved(self, key: LocalQueueKey, cluster_queues: tuple[str, ...]) -> None:
        if cluster_queues:
            self._queues.mark_cluster_queues(cluster_queues)
            self._queues.mark_local_queue(key)

    # --- WorkloadPriorityClass -----------------------------------------------------------------

    def upsert_priority_class(self, priority_class: WorkloadPriorityClass) -> None:
        """Add or replace a WorkloadPriorityClass; Workloads whose priority comes from it are re-ordered."""
        if self._store.put_priority_class(priority_class):
            self._priority_class_changed(priority_class.name)

    def delete_priority_class(self, name: str) -> None:
        """Forget a WorkloadPriorityClass (its Workloads without ``spec.priority`` get priority 0)."""
        if self._store.remove_priority_class(name):
            self._priority_class_changed(name)

    def _priority_class_changed(self, name: str) -> None:
        self._priorities_version += 1
        for key in self._queues.with_priority_class(name):
            self._sync_workload(key)

    # --- PriorityClass (scheduling.k8s.io) -------------------------------------------------------

    def upsert_pod_priority_class(self, name: str, value: int, global_default: bool = False) -> None:
        """Add or replace a pod PriorityClass: a priority source for Workloads of Jobs naming it (or of
        every Job without one, when it is the ``globalDefault``). Existing Workloads keep the priority
        they were created with, as upstream's do."""
        self._store.put_pod_priority_class(name, value, global_default)

    def delete_pod_priority_class(self, name: str) -> None:
        self._store.remove_pod_priority_class(name)

    def pod_priority_class_value(self, name: str) -> int | None:
        """The value of a pod PriorityClass, or None when it is unknown."""
        return self._store.pod_priority_class_value(name)

    def default_pod_priority_class(self) -> str | None:
        """The name of the ``globalDefault`` pod PriorityClass, if any."""
        return self._store.default_pod_priority_class()

    # --- AdmissionCheck -------------------------------------------------------------------------

    def upsert_admission_check(self, check: AdmissionCheck) -> None:
        """Add or replace an AdmissionCheck; it is active when its ``Active`` condition is True."""
        self._mark_trees(self._store.put_admission_check(check))

    def delete_admission_check(self, name: str) -> None:
        """Forget an AdmissionCheck; the queues using it become inactive."""
        self._mark_trees(self._store.remove_admission_check(name))

    # --- Namespace -------------------------------------------------------------------------------

    def upsert_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        """Add or replace a namespace's labels (what ClusterQueue ``namespaceSelector`` matches)."""
        if self._store.put_namespace(name, labels):
            self._queues.mark_namespace(name)

    def delete_namespace(self, name: str) -> None:
        """Forget a namespace's labels."""
        if self._store.remove_namespace(name):
            self._queues.mark_namespace(name)

    # --- Workload -----------------------------------------------------------------------------------

    def upsert_workload(self, workload: Workload) -> None:
        """Add or replace a Workload as the watch reports it.

        The controller also stores what its own writes return, so a watch event
        can arrive after a newer copy is already here: an older resourceVersion
        never replaces a newer one (they are etcd revisions in practice).
        """
        key = self._store.put_workload(workload)
        if key is not None:
            self._sync_workload(key)

    def delete_workload(self, key: WorkloadKey) -> None:
        """Forget a Workload; the quota it held (or was assumed to hold) is released."""
        workload = self._store.workload(key)
        priority = self._queues.priority_of(workload)[0] if workload is not None else None
        removed = self._store.remove_workload(key)
        if self._queues.drop_assumption(key) or removed:
            self._sync_workload(key, priority=priority)

    def assume(self, key: WorkloadKey, admission: Admission) -> None:
        """Count ``admission`` as the Workload's usage until the watch confirms it (or :meth:`forget`).

        Called by the scheduler for each admission it decides, so later
        decisions in the same cycle see the quota taken. It does not mark
        anything dirty: the cycle that assumes has already accounted for it.
        """
        workload = self._store.workload(key)
        if workload is None:
            raise KeyError(f"workload {key[0]}/{key[1]} is not in the cache")
        if _holds_quota(workload):
            raise ValueError(f"workload {key[0]}/{key[1]} already holds quota")
        if not admission.cluster_queue:
            raise ValueError("admission.clusterQueue must be set")
        self._queues.assume(key, admission)
        self._sync_workload(key, quiet=True)

    def forget(self, key: WorkloadKey) -> None:
        """Drop an assumption whose write failed or that preemption withdrew (:meth:`start_writing`); the
        Workload is pending again and its quota freed."""
        if self._queues.drop_assumption(key):
            self._sync_workload(key)

    def recheck(self, key: WorkloadKey) -> None:
        """Have the next cycle look at a pending Workload again, parked or not (a "why it waits" write of it
        was refused as stale, or its figures are due a refresh)."""
        workload = self._store.workload(key)
        if workload is not None:
            self._queues.unpark(key)
            self._queues.mark_local_queue(local_queue_of(workload))

    def park(self, key: WorkloadKey, cq_name: str, *, for_victims: bool = False) -> None:
        """Leave a pending Workload that does not fit out of the cycles until its quota tree frees quota or
        changes (see :meth:`PendingQueues.park <multikueue.core.cache.queues.PendingQueues.park>`)."""
        self._queues.park(key, cq_name, for_victims=for_victims)

    def revisit(self, cq_name: str) -> None:
        """Have the next cycle look at the ClusterQueue's pending Workloads again (its walk was cut short)."""
        self._queues.revisit(cq_name)

    def is_parked(self, key: WorkloadKey, cq_name: str) -> bool:
        """Whether the scheduler parked the Workload (or an equal one, see :meth:`PendingQueues.park
        <multikueue.core.cache.queues.PendingQueues.park>`) for this ClusterQueue and nothing woke it since."""
        return self._queues.is_parked(key, cq_name)

    def holds_quota(self, key: WorkloadKey) -> bool:
        """Whether the Workload's quota counts in its tree (admitted, reserving, or assumed this cycle)."""
        return self._tree.contribution_of(key) is not None

    def start_writing(self, key: WorkloadKey, admission: Admission) -> bool:
        """Called by the writer as the write of an admission begins: whether it is still to be written.

        Until then a later cycle may preempt the assumed admission by withdrawing it (:meth:`forget`, the
        scheduler's ``CycleResult.withdrawn``): nothing was written, so nothing is evicted. Why: when the
        API server is slow, admissions wait their turn to be written for up to a minute (upstream's
        large-scale generator, its first minute: 25 to 26 CPUs assumed in a queue of 20, none confirmed),
        and an assumption out of preemption's reach for that long let lower-priority Workloads fill a
        queue while a higher-priority one of it found no victims. Upstream's assumed Workloads are in
        its snapshot and may be preempted like any other."""
        return self._queues.start_writing(key, admission)

    def is_assumed(self, key: WorkloadKey) -> bool:
        """Whether the Workload's admission is assumed and not yet confirmed by the watch."""
        return self._queues.assumption(key) is not None

    def _sync_workload(self, key: WorkloadKey, *, quiet: bool = False, priority: int | None = None) -> None:
        """Derive the Workload's contribution and pending entry from its object and assumption, apply the change.

        ``priority``: the Workload's, when it is no longer in the store (deleted)."""
        # The holder built from the previous object is stale, and would keep that object alive (a finished
        # Workload stays in the store: its admitted version would stay too, ~11 KB each).
        self._holders.pop(key, None)
        workload = self._store.workload(key)
        contribution = self._contribution_of(key, workload) if workload is not None else None
        confirmed = False
        if contribution is None or (workload is not None and _holds_quota(workload)):
            # nothing to assume, or the real admission replaces the assumption
            confirmed = self._queues.drop_assumption(key) and contribution is not None
        held = self._tree.contribution_of(key)
        changed = self._tree.set_contribution(key, contribution)
        if not quiet and (changed or confirmed):
            # Only a Workload that held nothing before can take quota without giving any back; one whose
            # assumed admission is confirmed takes nothing more, but may be preempted from now on.
            if workload is not None:
                priority = self._queues.priority_of(workload)[0]
            if held is not None:
                self._mark_trees(changed, by_workload=True)
            elif contribution is not None:
                self._mark_new_holder(contribution.cluster_queue)
            # Finished or deleted, what it gave back may go at once to those of its kind (see
            # PendingQueues.wake_to_fill); evicted, its quota is its preemptor's.
            if held is not None and contribution is None and (workload is None or workload.is_finished):
                released: dict[str, Decimal] = {}
                for (_, name), amount in held.usage.items():
                    released[name] = released.get(name, Decimal(0)) + amount
                queues = self._store.local_queues_in(held.cluster_queue)
                self._queues.wake_to_fill(held.cluster_queue, queues, priority or 0, released)
            if confirmed and not changed and contribution is not None:
                self._mark_new_holder(contribution.cluster_queue)
        pending: PendingWorkload | None = None
        if workload is not None and contribution is None and _wants_quota(workload):
            pending = self._queues.entry_for(key, workload)
        self._queues.set_pending(key, pending, quiet=quiet)

    def _contribution_of(self, key: WorkloadKey, workload: Workload) -> Contribution | None:
        """The quota the Workload holds (its real admission first, else its assumed one), or None."""
        local_queue = local_queue_of(workload)
        reserved = workload.status.admission if _holds_quota(workload) else None
        if reserved is not None:
            return Contribution(reserved.cluster_queue or "", local_queue, admission_usage(reserved), workload.is_admitted)
        assumed = self._queues.assumption(key)
        if assumed is None or not _wants_quota(workload):
            return None
        cq_name = assumed.cluster_queue or ""
        state = self._store.cluster_queue_state(cq_name)
        flavors = {f for a in assumed.pod_set_assignments or () for f in (a.flavors or {}).values()}
        checks = state.admission_checks_for(flavors) if state is not None else []
        return Contribution(cq_name, local_queue, admission_usage(assumed), not checks)

    # --- queries for the I/O layer ---------------------------------------------------------------

    def workload(self, key: WorkloadKey) -> Workload | None:
        """The Workload as last upserted, or ``None``."""
        return self._store.workload(key)

    def cluster_queue(self, name: str) -> ClusterQueue | None:
        """The ClusterQueue as last upserted, or ``None``."""
        state = self._store.cluster_queue_state(name)
        return state.obj if state is not None else None

    def cluster_queue_names(self) -> list[str]:
        """Names of every ClusterQueue in the cache, sorted."""
        return self._store.cluster_queue_names()

    def local_queue(self, namespace: str, name: str) -> LocalQueue | None:
        """The LocalQueue as last upserted, or ``None``."""
        return self._store.local_queue((namespace, name))

    def local_queue_keys(self) -> list[LocalQueueKey]:
        """(namespace, name) of every LocalQueue in the cache, sorted."""
        return self._store.local_queue_keys()

    def usage(self, cq_name: str) -> dict[FlavorResource, Decimal]:
        """Quota held in the ClusterQueue (admitted, reserving and assumed Workloads), non-zero entries only."""
        return self._tree.usage(cq_name)

    def cluster_queue_status(self, name: str) -> ClusterQueueStatusView | None:
        """The status to write for a ClusterQueue, or ``None`` if it is not in the cache.

        The same view object comes back while nothing it is computed from
        changed (the queue's state, its counters, its pending count, and
        with fair sharing its usage and the trees' shape), so readers may
        skip a queue whose view is the one they saw last. Why: the status
        writer reads every queue each second, and with upstream's
        large-scale generator (1,000 ClusterQueues, 1,000 LocalQueues)
        computing every view each time was a tenth of the controller's CPU.
        """
        state = self._store.cluster_queue_state(name)
        if state is None:
            return None
        stats = self._tree.cluster_queue_stats(name)
        pending = sum(self._queues.pending_count(lq) for lq in self._store.local_queues_in(name))
        share = (self._tree.shape_version, tuple(state.node.usage.items())) if self.fair_sharing_status else None
        # Compared element by element, identity first: unchanged objects cost no deep comparison.
        inputs = (state, state.obj, state.active, state.reason, state.message, stats, stats.version, pending, share)
        known = self._cq_views.get(name)
        if known is not None and known[0] == inputs:
            return known[1]
        view = cluster_queue_view(state, stats, pending, fair_sharing=self.fair_sharing_status)
        self._cq_views[name] = (inputs, view)
        return view

    def local_queue_status(self, namespace: str, name: str) -> LocalQueueStatusView | None:
        """The status to write for a LocalQueue, or ``None`` if it is not in the cache (memoized as
        :meth:`cluster_queue_status` is)."""
        key = (namespace, name)
        local_queue = self._store.local_queue(key)
        if local_queue is None:
            return None
        state = self._store.cluster_queue_state(local_queue.spec.cluster_queue or "")
        stats = self._tree.local_queue_stats(key)
        pending = self._queues.pending_count(key)
        cq = (state, state.obj, state.active, state.reason, state.message) if state is not None else None
        inputs = (local_queue, cq, stats, stats.version, pending)
        known = self._lq_views.get(key)
        if known is not None and known[0] == inputs:
            return known[1]
        view = local_queue_view(local_queue, state, stats, pending)
        self._lq_views[key] = (inputs, view)
        return view

    def inadmissible_in_cluster_queue(self, cq_name: str, now: datetime) -> int:
        """How many of the ClusterQueue's pending Workloads upstream would count as inadmissible at ``now``
        (summed over its LocalQueues, see :meth:`PendingQueues.inadmissible_count
        <multikueue.core.cache.queues.PendingQueues.inadmissible_count>`)."""
        return sum(self._queues.inadmissible_count(lq, now) for lq in self._store.local_queues_in(cq_name))

    # --- the scheduler's view ---------------------------------------------------------------------

    def take_dirty(self, now: datetime) -> DirtyQueues:
        """What changed since the last call (backoffs that ended by ``now`` included); resets the record."""
        return self._queues.take_dirty(now)

    def next_requeue_at(self) -> datetime | None:
        """When the earliest requeue backoff of a pending Workload ends (not yet handled by :meth:`take_dirty`)."""
        return self._queues.next_requeue_at()

    def cluster_queue_state(self, name: str) -> ClusterQueueState | None:
        """The ClusterQueue's spec, quota node and Active state, or ``None``."""
        return self._store.cluster_queue_state(name)

    def local_queues_of(self, cq_name: str) -> Sequence[LocalQueueKey]:
        """Existing LocalQueues pointing at the ClusterQueue, sorted."""
        return self._store.local_queues_sorted(cq_name)

    def candidates(
        self, cq_name: str, local_queues: Iterable[LocalQueueKey], now: datetime, on_hold: Callable[[], None] | None = None
    ) -> Iterator[PendingWorkload]:
        """The ClusterQueue's pending Workloads a cycle may admit now (not parked, not backing off), in queue
        order, lazily (see :meth:`PendingQueues.candidates <multikueue.core.cache.queues.PendingQueues.candidates>`)."""
        return self._queues.candidates(cq_name, local_queues, now, on_hold)

    def releasing(self, cq_name: str, now: datetime) -> bool:
        """Whether quota was given back in the ClusterQueue's quota tree within a requeue batch before ``now``
        (see :meth:`PendingQueues.releasing <multikueue.core.cache.queues.PendingQueues.releasing>`)."""
        return self._queues.releasing(cq_name, now)

    def pending_in_local_queue(self, key: LocalQueueKey) -> list[PendingWorkload]:
        """Pending Workloads naming this LocalQueue (which may not exist), in queue order."""
        return self._queues.pending_in_local_queue(key)

    def workloads_items(self) -> list[tuple[WorkloadKey, Workload]]:
        """Every Workload in the cache (a snapshot list, safe to iterate while the cache changes)."""
        return self._store.workloads_items()

    def quota_holders(self, cq_name: str) -> list[QuotaHolder]:
        """Every Workload holding quota in the ClusterQueue's quota tree, with what preemption weighs.

        Assumed admissions (decided this cycle, not yet written) are included
        and flagged: their quota counts, but they are not for preempting.
        A holder whose Workload, contribution, assumption and priority classes
        are unchanged is the same object as last time (built once, not per
        cycle: a busy tree has hundreds of holders and a cycle every 50 ms).
        """
        holders = []
        version = self._priorities_version
        for key, contribution in self._tree.holders_in_tree(cq_name):
            workload = self._store.workload(key)
            if workload is None:
                continue
            assumed = self._queues.assumption(key) is not None
            flags = (assumed, assumed and not self._queues.is_writing(key))
            known = self._holders.get(key)
            if known is not None and known[0] is workload and known[1] is contribution and known[2] == flags and known[3] == version:
                holders.append(known[4])
                continue
            priority, _ = self._queues.priority_of(workload)
            holder = QuotaHolder(
                key, workload, contribution.cluster_queue, contribution.usage, priority, assumed=assumed, withdrawable=flags[1]
            )
            self._holders[key] = (workload, contribution, flags, version, holder)
            holders.append(holder)
        return holders

    def priority_class_value(self, name: str) -> int | None:
        """The value of a WorkloadPriorityClass, or None when it is unknown."""
        return self._store.priority_classes.get(name)

    def admission_check_controller(self, name: str) -> str | None:
        """``spec.controllerName`` of an AdmissionCheck, or None when it is unknown."""
        return self._store.admission_check_controller(name)

    @property
    def flavors(self) -> Mapping[str, ResourceFlavor]:
        """ResourceFlavors by name (read-only view)."""
        return self._store.flavors

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """A namespace's labels ({} when unknown)."""
        return self._store.namespace_labels(namespace)

    def cohort_root(self, cq_name: str) -> str:
        """A name identifying the ClusterQueue's quota tree (the queue itself without a cohort)."""
        return self._tree.cohort_root(cq_name)
