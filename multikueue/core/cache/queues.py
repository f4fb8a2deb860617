"""The pending queues: which Workloads wait for quota, in what order, and what changed since the last cycle.

It holds one :class:`PendingWorkload` per Workload waiting for quota, indexed
by LocalQueue (what a cycle reads), by namespace (a namespace's labels
decide selector matches) and by priority class (a class's value decides
order); a heap of requeue times, so a backoff that ends wakes its queue
without a scan; the admissions the scheduler *assumed* and the watch has
not confirmed yet; the record of dirty queues a cycle starts from; and the
*parked* Workloads, upstream's inadmissible ones (see :meth:`PendingQueues.park`).

It is separate from the quota tree because pending Workloads hold no quota
(a Workload is in exactly one of the two), and from the object store
because every entry is derived: it is rebuilt from the Workload object, the
priority classes and the assumption whenever one of them changes.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from functools import cached_property
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TypeVar

from multikueue.api.constants import ConditionStatus, Labels, WorkloadConditionType
from multikueue.api.workload import Admission, PriorityClassKind, Workload
from multikueue.core import messages
from multikueue.core.cache.store import LocalQueueKey, WorkloadKey, local_queue_of
from multikueue.core.flavors import PodSetRequest, pod_spec_of
from multikueue.core.resources import Requests, add, pod_spec_errors

__all__ = ["REQUEUE_BATCH", "DirtyQueues", "PendingQueues", "PendingWorkload"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_K = TypeVar("_K")

#: How long after a Workload gives quota back its tree's parked Workloads wake (upstream's
#: ``requeueBatchPeriod``, see :meth:`PendingQueues.mark_cluster_queues`).
REQUEUE_BATCH = timedelta(seconds=1)
#: How many pending Workloads of a ClusterQueue one release looks at when it wakes those that can take
#: what it gave back (:meth:`PendingQueues.wake_to_fill`): a bound per event, whatever the queue's length.
WAKE_TO_FILL_LOOKS = 32


@dataclass(frozen=True)
class PendingWorkload:
    """A Workload waiting for quota, with what the scheduler needs precomputed."""

    key: WorkloadKey
    workload: Workload
    local_queue: LocalQueueKey
    priority: int
    created: datetime
    pod_sets: tuple[PodSetRequest, ...]
    #: ``status.requeueState.requeueAt``: not to be admitted before then (backoff after eviction).
    requeue_at: datetime | None
    #: (reason, message) of its ``QuotaReserved=False`` condition, if it has one.
    condition: tuple[str, str] | None
    #: The WorkloadPriorityClass its priority came from when ``spec.priority`` is unset.
    priority_class: str | None = None
    #: Why its pod templates cannot be counted (bad quantities, requests above limits), if so.
    invalid: str | None = None

    @cached_property
    def order(self) -> tuple[int, datetime, str, str]:
        """Queue order: higher priority first, then older first, then by namespace/name."""
        return (-self.priority, self.created, self.key[0], self.key[1])

    @cached_property
    def shape(self) -> str:
        """Its pod sets as one string: equal for Workloads whose pod sets are equal (cheap to compare, hashable).

        Two Workloads with the same shape ask the same of a ClusterQueue; the
        converse does not always hold (requests listed in another order), which
        only costs a missed shortcut.
        """
        return repr(self.pod_sets)

    @cached_property
    def requests(self) -> Requests:
        """What all its pod sets ask together, per resource (full counts)."""
        return add(*(p.total for p in self.pod_sets))

    @cached_property
    def may_be_partial(self) -> bool:
        """Whether a pod set has a ``minCount`` (partial admission may reduce its counts)."""
        return any(p.min_count is not None for p in self.pod_sets)

    def same_for_scheduling(self, other: PendingWorkload) -> bool:
        """Whether the scheduler would decide the same for both (only the condition differs)."""
        return (
            self.local_queue == other.local_queue
            and self.priority == other.priority
            and self.created == other.created
            and self.requeue_at == other.requeue_at
            and self.pod_sets == other.pod_sets
            and self.invalid == other.invalid
        )


@dataclass
class DirtyQueues:
    """What changed since the last cycle: ClusterQueues to re-evaluate, and LocalQueues whose Workloads to re-check."""

    cluster_queues: set[str] = field(default_factory=set)
    local_queues: set[LocalQueueKey] = field(default_factory=set)
    #: ClusterQueues of the quota trees where a Workload gave quota back (see :meth:`PendingQueues.mark_cluster_queues`).
    released: set[str] = field(default_factory=set, compare=False)


def _quota_reserved_condition(workload: Workload) -> tuple[str, str] | None:
    condition = workload.condition(WorkloadConditionType.QUOTA_RESERVED)
    if condition is None or condition.status != ConditionStatus.FALSE:
        return None
    return (condition.reason, condition.message)


def _read_pod_sets(workload: Workload) -> tuple[tuple[PodSetRequest, ...], str | None]:
    """The pod sets' requests, or why they cannot be read (upstream's resource validation message)."""
    errors: list[str] = []
    for index, pod_set in enumerate(workload.spec.pod_sets):
        errors.extend(pod_spec_errors(pod_spec_of(pod_set), f"spec.podSets[{index}].template.spec"))
    if errors:
        return (), messages.INVALID_RESOURCES.format(errors=messages.aggregate(errors))
    return tuple(PodSetRequest.from_pod_set(p) for p in workload.spec.pod_sets), None


@dataclass(frozen=True)
class _Park:
    """Where and when a Workload was parked (see :meth:`PendingQueues.park`)."""

    cluster_queue: str
    tick: int
    #: It would fit with preemption and found no victims: a Workload starting to hold quota in the tree
    #: may be one (see :meth:`PendingQueues.mark_cluster_queues`).
    for_victims: bool = False


def _tried(entry: PendingWorkload) -> bool:
    """Whether the scheduler told the Workload why it waits, or cannot count what it asks."""
    return entry.condition is not None or entry.invalid is not None


#: The fewest entries of ``_released_at`` that start a sweep of those past their batch.
_RELEASED_SWEEP_MIN = 256


def _decrement(counts: dict[_K, int], name: _K) -> None:
    left = counts[name] - 1
    if left:
        counts[name] = left
    else:
        del counts[name]


def _hold_back(held_back: list[int], priority: int) -> None:
    """Keep in ``held_back`` (empty, or one item) the highest priority a walk passed over as parked for
    victims (see :meth:`PendingQueues.candidates`)."""
    if not held_back:
        held_back.append(priority)
    elif priority > held_back[0]:
        held_back[0] = priority


def _still_parked(park: _Park, cq_name: str, woken: int) -> bool:
    """Whether a Workload parked at ``park`` still is, for ``cq_name``, whose parked Workloads last woke at
    tick ``woken``."""
    return park.cluster_queue == cq_name and park.tick >= woken


def _fits_in(need: Mapping[str, Decimal], budget: Mapping[str, Decimal]) -> bool:
    """Whether ``need`` takes some of ``budget`` and no more than it of any resource it has."""
    shared = [name for name in need if name in budget]
    return bool(shared) and all(need[name] <= budget[name] for name in shared)


class PendingQueues:
    """Pending Workloads by queue, requeue backoffs, assumed admissions and the dirty record.

    ``priority_classes`` is the store's read-only map of WorkloadPriorityClass
    values, read when an entry is built.
    """

    def __init__(self, priority_classes: Mapping[str, int], *, requeue_batch: timedelta = REQUEUE_BATCH) -> None:
        self._priority_classes = priority_classes
        self._requeue_batch = requeue_batch
        self._pending: dict[WorkloadKey, PendingWorkload] = {}
        #: Per LocalQueue, (queue order, key) of its Workloads, kept sorted as they come, go or move (a cycle
        #: reads the heads of every open queue; sorting thousands of unchanged entries for each cycle was
        #: most of the scheduler's CPU, and most changes of a pending entry are its own condition, written back).
        self._ordered: dict[LocalQueueKey, list[tuple[tuple[int, datetime, str, str], WorkloadKey]]] = {}
        #: Per LocalQueue, per priority, how many of its Workloads have each shape: a priority band of one
        #: shape whose kind is parked is passed over in one step by :meth:`candidates`.
        self._bands: dict[LocalQueueKey, dict[int, dict[str, int]]] = {}
        self._lqs_by_namespace: dict[str, set[LocalQueueKey]] = {}
        #: Per LocalQueue, how many of its Workloads were tried (see :meth:`inadmissible_count`), and those
        #: not tried that back off (whether they still do depends on the time asked about).
        self._tried: dict[LocalQueueKey, int] = {}
        self._backing_off: dict[LocalQueueKey, set[WorkloadKey]] = {}
        self._by_priority_class: dict[str, set[WorkloadKey]] = {}
        self._backoff: list[tuple[datetime, WorkloadKey]] = []
        self._assumed: dict[WorkloadKey, Admission] = {}
        #: Assumed admissions whose write has begun (:meth:`start_writing`).
        self._writing: set[WorkloadKey] = set()
        self._dirty = DirtyQueues()
        #: Counts the events that wake parked Workloads, and the parkings, so each knows which came first.
        self._tick = 0
        #: Per ClusterQueue, the tick its parked Workloads last woke (all of them).
        self._woken: dict[str, int] = {}
        #: Parked Workloads: the ClusterQueue and when (the tick).
        self._parked: dict[WorkloadKey, _Park] = {}
        #: Per ClusterQueue, how many entries of ``_parked`` name it (some may have been woken since), and
        #: how many of them are ``for_victims``: a requeue batch is not started for a queue with none.
        self._parked_in: dict[str, int] = {}
        self._for_victims_in: dict[str, int] = {}
        #: Per ClusterQueue, per (priority, shape), the last parking of a Workload of that kind: the pending
        #: Workloads equal to it are parked with it (see :meth:`park`), those a cycle reaches one by one get
        #: a mark of their own. A mark stands until the ClusterQueue's parked Workloads all wake, as
        #: upstream's bulk-move hashes until its next requeue, and alone starts that wake
        #: (:meth:`_waits_for_release`); the map goes once it is empty and nothing is parked there.
        self._kinds_parked: dict[str, dict[tuple[int, str], _Park]] = {}
        #: Pending Workloads :meth:`unpark`-ed by name: looked at once more even if an equal one is parked;
        #: each with its LocalQueue, and the same by LocalQueue (a walk reads its queues' only).
        self._rechecked: dict[WorkloadKey, LocalQueueKey] = {}
        self._rechecked_in: dict[LocalQueueKey, set[WorkloadKey]] = {}
        #: ClusterQueues where a Workload gave quota back or took some, to when all their parked Workloads wake
        #: (``None``: no cycle has started since, the time is set by the next :meth:`take_dirty`).
        self._batched: dict[str, datetime | None] = {}
        #: Per ClusterQueue, the cycle time by which a Workload had last given quota back in its tree; the
        #: entries past their batch are swept once the map doubles (see :meth:`take_dirty`).
        self._released_at: dict[str, datetime] = {}
        self._released_sweep_at = _RELEASED_SWEEP_MIN

    # --- entries ------------------------------------------------------------------------------

    def entry_for(self, key: WorkloadKey, workload: Workload) -> PendingWorkload:
        """The pending entry a Workload would have now (pod sets are re-read only when they changed)."""
        previous = self._pending.get(key)
        if previous is not None and previous.workload.spec.pod_sets == workload.spec.pod_sets:
            pod_sets, invalid = previous.pod_sets, previous.invalid
        else:
            pod_sets, invalid = _read_pod_sets(workload)
        priority, priority_class = self.priority_of(workload)
        requeue_state = workload.status.requeue_state
        return PendingWorkload(
            key=key,
            workload=workload,
            local_queue=local_queue_of(workload),
            priority=priority,
            created=workload.metadata.creation_timestamp or _EPOCH,
            pod_sets=pod_sets,
            requeue_at=requeue_state.requeue_at if requeue_state is not None else None,
            condition=_quota_reserved_condition(workload),
            priority_class=priority_class,
            invalid=invalid,
        )

    def priority_of(self, workload: Workload) -> tuple[int, str | None]:
        """``spec.priority``; else the value of its WorkloadPriorityClass (reference or label); else 0."""
        if workload.spec.priority is not None:
            return workload.spec.priority, None
        ref = workload.spec.priority_class_ref
        name: str | None = None
        if ref is not None and ref.kind == PriorityClassKind.WORKLOAD_PRIORITY_CLASS:
            name = ref.name
        elif workload.metadata.labels and Labels.PRIORITY_CLASS in workload.metadata.labels:
            name = workload.metadata.labels[Labels.PRIORITY_CLASS]
        if name is None:
            return 0, None
        return self._priority_classes.get(name, 0), name

    def set_pending(self, key: WorkloadKey, new: PendingWorkload | None, *, quiet: bool) -> None:
        """Make ``new`` the Workload's entry (None: not pending); marks its queues unless ``quiet``.

        Queues are marked only when something the scheduler reads changed,
        so writing a Workload's own ``QuotaReserved=False`` back is free.
        """
        old = self._pending.get(key)
        if old is None and new is None:
            return
        if (
            old is None
            or new is None
            or old.local_queue != new.local_queue
            or old.order != new.order
            or (old.pod_sets is not new.pod_sets and old.shape != new.shape)  # its band counts its shape
        ):
            if old is not None:
                self._leave_queue(old)
            if new is not None:
                self._enter_queue(new)
        if old is not None:
            self._unindex(old)
        if new is not None:
            self._index(new)
            if new.requeue_at is not None and (old is None or old.requeue_at != new.requeue_at):
                heapq.heappush(self._backoff, (new.requeue_at, new.key))
        changed = old is None or new is None or not old.same_for_scheduling(new)
        if changed:
            self._unpark(key)  # what it asks, or whether it waits at all, changed
        if new is None:
            self._drop_recheck(key)
        elif self._rechecked.get(key, new.local_queue) != new.local_queue:
            self._drop_recheck(key)  # it moved to another LocalQueue: still looked at once more, there
            self._add_recheck(key, new.local_queue)
        if changed and not quiet:
            for entry in (old, new):
                if entry is not None:
                    self._dirty.local_queues.add(entry.local_queue)

    def _enter_queue(self, entry: PendingWorkload) -> None:
        """Place the entry in its LocalQueue's order (and the queue among its namespace's)."""
        bisect.insort(self._ordered.setdefault(entry.local_queue, []), (entry.order, entry.key))
        shapes = self._bands.setdefault(entry.local_queue, {}).setdefault(entry.priority, {})
        shapes[entry.shape] = shapes.get(entry.shape, 0) + 1
        self._lqs_by_namespace.setdefault(entry.local_queue[0], set()).add(entry.local_queue)

    def _leave_queue(self, entry: PendingWorkload) -> None:
        """Take the entry out of its LocalQueue's order; forget the queue once it is empty."""
        ordered = self._ordered[entry.local_queue]
        index = bisect.bisect_left(ordered, (entry.order, entry.key))
        if index >= len(ordered) or ordered[index][1] != entry.key:
            index = ordered.index((entry.order, entry.key))
        ordered.pop(index)
        bands = self._bands[entry.local_queue]
        _decrement(bands[entry.priority], entry.shape)
        if not bands[entry.priority]:
            del bands[entry.priority]
        if ordered:
            return
        del self._ordered[entry.local_queue]
        del self._bands[entry.local_queue]
        lqs = self._lqs_by_namespace.get(entry.local_queue[0])
        if lqs is not None:
            lqs.discard(entry.local_queue)
            if not lqs:
                del self._lqs_by_namespace[entry.local_queue[0]]

    def _index(self, entry: PendingWorkload) -> None:
        self._pending[entry.key] = entry
        if entry.priority_class is not None:
            self._by_priority_class.setdefault(entry.priority_class, set()).add(entry.key)
        if _tried(entry):
            self._tried[entry.local_queue] = self._tried.get(entry.local_queue, 0) + 1
        elif entry.requeue_at is not None:
            self._backing_off.setdefault(entry.local_queue, set()).add(entry.key)

    def _unindex(self, entry: PendingWorkload) -> None:
        del self._pending[entry.key]
        if _tried(entry):
            _decrement(self._tried, entry.local_queue)
        elif entry.requeue_at is not None:
            keys = self._backing_off.get(entry.local_queue)  # gone when inadmissible_count saw its backoff end
            if keys is not None:
                keys.discard(entry.key)
                if not keys:
                    del self._backing_off[entry.local_queue]
        if entry.priority_class is not None:
            keys = self._by_priority_class.get(entry.priority_class)
            if keys is not None:
                keys.discard(entry.key)
                if not keys:
                    del self._by_priority_class[entry.priority_class]

    # --- reading -----------------------------------------------------------------------------------

    def pending_in_local_queue(self, key: LocalQueueKey) -> list[PendingWorkload]:
        """Pending Workloads naming this LocalQueue (which may not exist), in queue order."""
        pending = self._pending
        return [pending[k] for _, k in self._ordered.get(key, ())]

    def candidates(
        self,
        cq_name: str,
        local_queues: Iterable[LocalQueueKey],
        now: datetime,
        on_hold: Callable[[], None] | None = None,
    ) -> Iterator[PendingWorkload]:
        """The ClusterQueue's Workloads a cycle may admit, in queue order across ``local_queues``, lazily.

        Left out: those whose requeue backoff runs past ``now`` and those
        parked for the queue (:meth:`park`). Lazy because a cycle usually
        reads a few heads of a queue of thousands; admissions made meanwhile
        do not shift the walk (each queue is resumed after the last entry it
        gave, by bisection).

        A priority band of a LocalQueue whose Workloads all have one shape and
        whose kind is parked is passed over in one step (:meth:`_walk`): every
        Workload in it would be left out but those :meth:`unpark`-ed by name,
        which the walk still gives. Before, a cycle stepped over every parked Workload of every
        queue it looked at, each time: with a backlog of thousands (upstream's
        full scalability baseline) that walk was most of the scheduler's CPU,
        work that grew with the number of pending Workloads.

        With ``on_hold``: the walk ends, and ``on_hold`` is called, at the first
        Workload of a lower priority than one passed over as parked for lack of
        victims (it would fit were others' quota free): the scheduler asks this
        while quota is being given back in the queue's tree (see
        :func:`multikueue.core.scheduler._park`).
        """
        pending, parked = self._pending, self._parked
        held_back: list[int] = []  # the highest priority passed over as parked for victims, once there is one
        # The queue's kinds as the walk starts, seen as they grow in this cycle; a queue with none parked
        # yet has its first head's equals looked at (and told why they wait) in this cycle.
        kinds = self._kinds_parked.get(cq_name)
        woken = self._woken.get(cq_name, 0)
        # Workloads unparked by name, by band: a band passed over still gives them (taken once: the set only
        # shrinks during a cycle, and one that left is skipped below).
        # Only the walked LocalQueues' (all of them was a pass over every Workload unparked anywhere, for each
        # ClusterQueue of a cycle).
        local_queues = tuple(local_queues)
        rechecked: dict[tuple[LocalQueueKey, int], list[tuple[tuple[int, datetime, str, str], WorkloadKey]]] = {}
        for lq in local_queues:
            for key in self._rechecked_in.get(lq, ()):
                if (entry := pending.get(key)) is not None:
                    rechecked.setdefault((entry.local_queue, entry.priority), []).append((entry.order, key))
        for items in rechecked.values():
            items.sort()
        hold = held_back if on_hold is not None else None
        walks = [self._walk(lq, cq_name, kinds, woken, rechecked, hold) for lq in local_queues if lq in self._ordered]
        merged: Iterable[tuple[tuple[int, datetime, str, str], WorkloadKey]] = (
            walks[0] if len(walks) == 1 else heapq.merge(*walks)
        )
        for _, key in merged:
            entry = pending.get(key)
            if entry is None or (entry.requeue_at is not None and entry.requeue_at > now):
                continue
            if held_back and entry.priority < held_back[0]:
                assert on_hold is not None
                on_hold()
                return
            mark = parked.get(key)
            if mark is not None and _still_parked(mark, cq_name, woken):
                if on_hold is not None and mark.for_victims:
                    _hold_back(held_back, entry.priority)
                continue
            like = self._parked_like(entry, kinds, cq_name, woken) if kinds else None
            if like is not None and like is not mark:
                self._park_as(key, like)
                if on_hold is not None and like.for_victims:
                    _hold_back(held_back, entry.priority)
                continue
            yield entry

    def _walk(
        self,
        lq: LocalQueueKey,
        cq_name: str,
        kinds: Mapping[tuple[int, str], _Park] | None,
        woken: int,
        rechecked: Mapping[tuple[LocalQueueKey, int], list[tuple[tuple[int, datetime, str, str], WorkloadKey]]],
        held_back: list[int] | None = None,
    ) -> Iterator[tuple[tuple[int, datetime, str, str], WorkloadKey]]:
        """One LocalQueue's order for :meth:`candidates`, without the priority bands it may pass over whole
        (but for their Workloads unparked by name, in ``rechecked``).

        Reads the live order and resumes after the last entry it gave, so
        entries leaving meanwhile (admitted in this cycle) shift nothing; a
        band is looked at again each time the walk is in it, so the head
        parked just before (and its kind with it) makes the rest of its
        band go at once.
        """
        index = 0
        while True:
            ordered = self._ordered.get(lq)
            if not ordered or index >= len(ordered):
                return
            item = ordered[index]
            priority = -item[0][0]
            if kinds:
                shapes = self._bands[lq][priority]
                if len(shapes) == 1:
                    mark = kinds.get((priority, next(iter(shapes))))
                    if mark is not None and _still_parked(mark, cq_name, woken):
                        if held_back is not None and mark.for_victims:
                            _hold_back(held_back, priority)
                        for unparked in rechecked.get((lq, priority), ()):
                            if unparked >= item:
                                yield unparked
                        # Past the band: the first entry of a lower priority (a shorter tuple sorts first).
                        ordered = self._ordered.get(lq)
                        if not ordered:
                            return
                        index = bisect.bisect_left(ordered, ((1 - priority,),))
                        continue
            yield item
            ordered = self._ordered.get(lq)
            if not ordered:
                return
            index = bisect.bisect_right(ordered, item)

    def pending_count(self, key: LocalQueueKey) -> int:
        """How many Workloads wait in this LocalQueue."""
        return len(self._ordered.get(key, ()))

    def inadmissible_count(self, key: LocalQueueKey, now: datetime) -> int:
        """How many of the LocalQueue's Workloads upstream would count as inadmissible at ``now``.

        Upstream parks a Workload as inadmissible once it was tried and did
        not fit, until something changes. Here: the scheduler wrote why it
        waits (``QuotaReserved=False``, also written on eviction), or its
        requests cannot be counted, or it is in requeue backoff; the rest
        have not been tried since they were queued. Counted as entries
        change, so the queue gauges read every queue each second without a
        pass over every pending Workload (with upstream's large-scale
        generator, 50,000 of them, that pass was a tenth of the controller's CPU).
        """
        keys = self._backing_off.get(key)
        if not keys:
            return self._tried.get(key, 0)
        ended = [k for k in keys if (at := self._pending[k].requeue_at) is None or at <= now]
        if ended:  # a backoff that ended does not start again without a new entry: forgotten, not counted again
            keys.difference_update(ended)
            if not keys:
                del self._backing_off[key]
        return self._tried.get(key, 0) + len(keys)

    def with_priority_class(self, name: str) -> list[WorkloadKey]:
        """Pending Workloads whose priority comes from this WorkloadPriorityClass (a snapshot list)."""
        return list(self._by_priority_class.get(name, ()))

    # --- assumed admissions ------------------------------------------------------------------------

    def assume(self, key: WorkloadKey, admission: Admission) -> None:
        """Record an admission the scheduler decided and the watch has not confirmed yet."""
        self._assumed[key] = admission

    def assumption(self, key: WorkloadKey) -> Admission | None:
        """The assumed admission of the Workload, or None."""
        return self._assumed.get(key)

    def drop_assumption(self, key: WorkloadKey) -> bool:
        """Forget the Workload's assumed admission; whether there was one."""
        self._writing.discard(key)
        return self._assumed.pop(key, None) is not None

    def start_writing(self, key: WorkloadKey, admission: Admission) -> bool:
        """Note that ``admission``'s write begins; False when it is no longer the Workload's assumption
        (withdrawn, or replaced by a later decision): then it is not to be written."""
        if self._assumed.get(key) is not admission:
            return False
        self._writing.add(key)
        return True

    def is_writing(self, key: WorkloadKey) -> bool:
        """Whether the write of the Workload's assumed admission has begun (it can no longer be withdrawn)."""
        return key in self._writing

    # --- parking ------------------------------------------------------------------------------------

    def park(self, key: WorkloadKey, cq_name: str, *, for_victims: bool = False) -> None:
        """Leave a pending Workload that does not fit out of the ClusterQueue's cycles until that can change.

        Upstream's inadmissible Workloads: a head that does not fit is not
        looked at again while nothing in its quota tree could make it fit,
        so a cycle after an unrelated event costs the Workloads that may
        move, not every one that waits. It comes back when the tree changed,
        a requeue batch after quota was freed in the tree (see
        :meth:`mark_cluster_queues`; at once when a Workload of its priority
        or a lower one finished in its ClusterQueue and what it gave back can
        take it, see :meth:`wake_to_fill`), when the
        Workload itself changes what it asks (:meth:`set_pending`), or on
        :meth:`unpark`; ``for_victims`` (it would fit with preemption and
        found no victims): also a requeue batch after a Workload started
        holding quota in another ClusterQueue of the tree (its borrowing may
        make that queue's Workloads reclaimable; see ``victims_in`` of
        :meth:`mark_cluster_queues`).

        Its equals (same priority, same pod sets) in the ClusterQueue are
        parked with it, until the same wake: those already queued and those
        arriving later, as soon as a cycle reaches them (so without a write
        of their own, and a new one keeps the condition it has, none at
        first). Upstream's scheduling equivalence does the same
        (``SchedulingEquivalenceHashing``, on by default since v0.18: a
        BestEffortFIFO head found inadmissible for lack of quota or of
        victims moves the Workloads of its hash to the inadmissible ones,
        and new ones of that hash go there until the next requeue). Without
        it, a Workload arriving just after a higher-priority one finished
        took the quota its next peer was about to arrive for, and was
        evicted by it (decisions, "Equals of a parked Workload").
        """
        mark = _Park(cq_name, self._tick, for_victims)
        self._park_as(key, mark)
        entry = self._pending.get(key)
        if entry is not None:
            self._kinds_parked.setdefault(cq_name, {})[(entry.priority, entry.shape)] = mark

    def _park_as(self, key: WorkloadKey, mark: _Park) -> None:
        cq_name = mark.cluster_queue
        # Counted before the old mark is dropped: the count reaching zero on the way would drop the kinds.
        self._parked_in[cq_name] = self._parked_in.get(cq_name, 0) + 1
        if mark.for_victims:
            self._for_victims_in[cq_name] = self._for_victims_in.get(cq_name, 0) + 1
        self._unpark(key)
        self._parked[key] = mark
        self._drop_recheck(key)

    def is_parked(self, key: WorkloadKey, cq_name: str) -> bool:
        """Whether the Workload is parked for this ClusterQueue, or an equal one is (see :meth:`park`), and
        nothing that would wake it happened since."""
        entry = self._pending.get(key)
        return entry is not None and self._is_parked(entry, cq_name, self._woken.get(cq_name, 0))

    def _is_parked(self, entry: PendingWorkload, cq_name: str, woken: int) -> bool:
        mark = self._parked.get(entry.key)
        if mark is not None and _still_parked(mark, cq_name, woken):
            return True
        kinds = self._kinds_parked.get(cq_name)
        return bool(kinds) and self._parked_like(entry, kinds, cq_name, woken) is not None

    def _parked_like(
        self, entry: PendingWorkload, kinds: Mapping[tuple[int, str], _Park], cq_name: str, woken: int
    ) -> _Park | None:
        """The still-standing mark of an equal of ``entry`` parked in ``cq_name`` (see :meth:`park`), if any
        (never for one :meth:`unpark`-ed by name since)."""
        if entry.key in self._rechecked:
            return None
        like = kinds.get((entry.priority, entry.shape))
        return like if like is not None and _still_parked(like, cq_name, woken) else None

    def unpark(self, key: WorkloadKey) -> None:
        """Have cycles look at the Workload again (once, even if an equal one is parked)."""
        self._unpark(key)
        entry = self._pending.get(key)
        if entry is not None:
            self._add_recheck(key, entry.local_queue)

    def _add_recheck(self, key: WorkloadKey, local_queue: LocalQueueKey) -> None:
        self._rechecked[key] = local_queue
        self._rechecked_in.setdefault(local_queue, set()).add(key)

    def _drop_recheck(self, key: WorkloadKey) -> None:
        local_queue = self._rechecked.pop(key, None)
        if local_queue is None:
            return
        keys = self._rechecked_in[local_queue]
        keys.discard(key)
        if not keys:
            del self._rechecked_in[local_queue]

    def _unpark(self, key: WorkloadKey) -> None:
        old = self._parked.pop(key, None)
        if old is None:
            return
        _decrement(self._parked_in, old.cluster_queue)
        if old.cluster_queue not in self._parked_in and not self._kinds_parked.get(old.cluster_queue):
            self._kinds_parked.pop(old.cluster_queue, None)  # nothing parked there any more
        if old.for_victims:
            _decrement(self._for_victims_in, old.cluster_queue)

    # --- dirty tracking -----------------------------------------------------------------------------

    def mark_cluster_queues(
        self,
        names: Iterable[str],
        *,
        by_workload: bool = False,
        released: bool = True,
        victims_in: Collection[str] | None = None,
    ) -> None:
        """Have the next cycle re-evaluate these ClusterQueues (a quota tree) and wake their parked Workloads.

        Without ``by_workload`` (the tree changed: a ClusterQueue, Cohort, flavor, check or LocalQueue
        of it) the parked Workloads wake at once. With it, a Workload gave quota back in the tree
        (``released``: it finished, was evicted or deleted, an assumption was dropped) or started
        holding quota there (not ``released``), and every parked Workload of the tree wakes
        ``requeue_batch`` after the first cycle that follows, once for every such event in between, as
        upstream moves its inadmissible Workloads back to the queues a batch period (1 s) after such an
        event. A finished Workload's own ClusterQueue also wakes at once those that can take what it
        gave back (:meth:`wake_to_fill`).

        A new holder of quota starts that batch only for the Workloads parked for lack of victims, and
        only in the ClusterQueues of ``victims_in`` (default: all of ``names``), where it may have
        brought them some: the cache passes the other ClusterQueues of the tree that may reclaim quota
        (borrowing, the new holder may make its queue's Workloads reclaimable; in its own queue,
        preempting it would give back only what it took). Upstream starts no batch when a Workload is
        admitted.

        Why a batch and not at once: when a higher-priority Workload runs back to back in a ClusterQueue
        (the next one arrives just after the last one finished), the lower-priority Workloads parked
        behind it, woken by that release or any other in the tree, were admitted into the gap and
        evicted by the next one, every time (decisions, "Waking parked Workloads").
        """
        names = set(names)
        self._dirty.cluster_queues.update(names)
        if by_workload and released:
            self._dirty.released.update(names)
        self._tick += 1
        batched = by_workload and bool(self._requeue_batch)
        for name in names:
            if not batched:
                self._woken[name] = self._tick
                self._batched.pop(name, None)
                if (kinds := self._kinds_parked.get(name)) is not None:
                    kinds.clear()  # every mark made before is stale now (the map stays: see candidates)
            elif released:
                if self._waits_for_release(name):
                    self._batched.setdefault(name, None)
            elif (victims_in is None or name in victims_in) and self._waits_for_victims(name):
                self._batched.setdefault(name, None)

    def forget_cluster_queue(self, name: str) -> None:
        """Drop what is kept for a deleted ClusterQueue (a name created and deleted over and over grew these
        maps by one entry each time).

        Call it after the tree's wake for the deletion (:meth:`mark_cluster_queues`), which woke the queue's
        parked Workloads: their marks go too, so a ClusterQueue of the same name created later starts with
        them awake and its wake tick unset, as a new queue.
        """
        for key in [key for key, mark in self._parked.items() if mark.cluster_queue == name]:
            self._unpark(key)
        self._kinds_parked.pop(name, None)
        self._woken.pop(name, None)
        self._batched.pop(name, None)
        self._released_at.pop(name, None)

    def tracked_cluster_queues(self) -> set[str]:
        """The ClusterQueues something is kept for here (parking, wakes, releases): the footprint a deleted
        queue must not leave."""
        return (
            set(self._woken) | set(self._parked_in) | set(self._for_victims_in) | set(self._kinds_parked)
            | set(self._batched) | set(self._released_at)
        )

    def _waits_for_release(self, cq_name: str) -> bool:
        """Whether a Workload may be parked in the ClusterQueue (woken by a release in its tree)."""
        return cq_name in self._parked_in or bool(self._kinds_parked.get(cq_name))

    def _waits_for_victims(self, cq_name: str) -> bool:
        """Whether a Workload may be parked in the ClusterQueue for lack of victims (woken by a new one)."""
        return cq_name in self._for_victims_in or any(m.for_victims for m in self._kinds_parked.get(cq_name, {}).values())

    def wake_to_fill(
        self, cq_name: str, local_queues: Iterable[LocalQueueKey], priority: int, released: Mapping[str, Decimal]
    ) -> None:
        """Wake at once, by name, the parked Workloads of ``cq_name`` that can take what a finished Workload
        of ``priority`` gave back there (``released``, per resource).

        Walks the ClusterQueue's pending Workloads in queue order, those of
        ``priority`` or higher only, and at most :data:`WAKE_TO_FILL_LOOKS`
        of them. Each that asks no more than what is left of ``released``
        (of the resources it names) takes its share, whether parked (then
        woken) or not (a cycle looks at it anyway, and before those behind
        it). The rest stay parked until the requeue batch.

        Why not all of that priority or higher, as this did before: a
        Workload ending every few milliseconds (short ones recycling their
        own quota) woke all of them each time, so quota another Workload had
        just freed (a large higher-priority one, whose next peer is about to
        arrive) was taken at once by the lower-priority ones parked behind
        it, and they were evicted by that peer; and every wake had a cycle
        look at a parked Workload that did not fit, write why, and park it
        again (most of our "why it waits" writes in upstream's scalability
        test). Why not none, as upstream: the short ones would wait a batch
        (1 s) each time, for quota their own kind gave back (decisions,
        "Waking parked Workloads").
        """
        if not self._requeue_batch:
            return  # every release wakes all of them at once
        budget = dict(released)
        woken = self._woken.get(cq_name, 0)
        looks = 0
        for _, key in heapq.merge(*(self._ordered.get(lq, ()) for lq in local_queues)):
            entry = self._pending.get(key)
            if entry is None or entry.priority < priority or looks >= WAKE_TO_FILL_LOOKS:
                return
            looks += 1
            if entry.requeue_at is not None:
                continue  # backing off after an eviction: its own timer wakes it
            need = entry.requests
            if not _fits_in(need, budget):
                continue
            for name in need:
                if name in budget:
                    budget[name] -= need[name]
            if self._is_parked(entry, cq_name, woken):
                self.unpark(key)
            if all(left <= 0 for left in budget.values()):
                return

    def revisit(self, name: str) -> None:
        """Have the next cycle go on with a ClusterQueue whose walk this one cut short (wakes nothing)."""
        self._dirty.cluster_queues.add(name)

    def mark_local_queue(self, key: LocalQueueKey) -> None:
        """Have the next cycle re-check this LocalQueue's Workloads."""
        self._dirty.local_queues.add(key)

    def mark_namespace(self, namespace: str) -> None:
        """Have the next cycle re-check the LocalQueues of the namespace that have pending Workloads."""
        self._dirty.local_queues.update(self._lqs_by_namespace.get(namespace, ()))

    def take_dirty(self, now: datetime) -> DirtyQueues:
        """What changed since the last call (backoffs and batched wakes that ended by ``now`` included);
        resets the record."""
        while self._backoff and self._backoff[0][0] <= now:
            requeue_at, key = heapq.heappop(self._backoff)
            entry = self._pending.get(key)
            if entry is not None and entry.requeue_at == requeue_at:
                self._dirty.local_queues.add(entry.local_queue)
        if self._batched:
            due = [name for name, at in self._batched.items() if at is not None and at <= now]
            if due:
                self.mark_cluster_queues(due)
            for name, at in self._batched.items():
                if at is None:
                    self._batched[name] = now + self._requeue_batch
        for name in self._dirty.released:
            self._released_at[name] = now
        if len(self._released_at) >= self._released_sweep_at:
            # An entry goes when a cycle asks :meth:`releasing` about its ClusterQueue after the batch; one
            # no cycle asks about (a deleted queue's, whose admitted Workloads still finish; an idle one's)
            # would stay. Swept here, amortized: the map doubles between two sweeps.
            self._released_at = {name: at for name, at in self._released_at.items() if now - at < self._requeue_batch}
            self._released_sweep_at = max(_RELEASED_SWEEP_MIN, 2 * len(self._released_at))
        dirty, self._dirty = self._dirty, DirtyQueues()
        return dirty

    def releasing(self, cq_name: str, now: datetime) -> bool:
        """Whether quota was given back in the ClusterQueue's tree within a requeue batch before ``now``
        (the cycles since the release are counted from the first that took it)."""
        at = self._released_at.get(cq_name)
        if at is None:
            return False
        if now - at < self._requeue_batch:
            return True
        del self._released_at[cq_name]
        return False

    def next_requeue_at(self) -> datetime | None:
        """When the earliest requeue backoff of a pending Workload or batched wake of parked ones ends
        (not yet handled by :meth:`take_dirty`)."""
        wake = min((at for at in self._batched.values() if at is not None), default=None)
        while self._backoff:
            requeue_at, key = self._backoff[0]
            entry = self._pending.get(key)
            if entry is not None and entry.requeue_at == requeue_at:
                return requeue_at if wake is None else min(requeue_at, wake)
            heapq.heappop(self._backoff)  # stale: the Workload changed or left the queue
        return wake
