"""ClusterQueue and LocalQueue status: counters, flavor usage, ``Active``.

The views come from the core cache; this module only turns them into status
patches and writes those that changed. The last written body per queue is
remembered so a quiet system makes no writes at all, and the object's own
status (as last seen) is compared too, so a restart does not rewrite every
queue. The same views feed the per-ClusterQueue gauges (pending, reserving,
admitted, quota and usage per flavor and resource), reported at each sync.
A ClusterQueue's settings that the controller accepts but does not act on
(:mod:`multikueue.core.unimplemented`) are named here too, once per spec: a
log line and a Warning Event on the queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import structlog
from kubernetes.client.rest import ApiException

from multikueue.api.constants import ACTIVE, API_VERSION, ConditionStatus
from multikueue.api.meta import Condition, find_condition
from multikueue.api.clusterqueue import ClusterQueue, ClusterQueueSpec, ClusterQueueStatus
from multikueue.api.localqueue import LocalQueueStatus
from multikueue.api.quantity import parse_quantity
from multikueue.core.cache import Cache, ClusterQueueStatusView, QueueStatusView
from multikueue.core.quota import ResourceQuota
from multikueue.core.unimplemented import EVENT_REASON, unimplemented_message, unimplemented_settings
from multikueue.runtime import metrics
from multikueue.runtime.events import EventRecorder, ObjectRef
from multikueue.runtime.kube import AsyncKube
from multikueue.api.resources import CLUSTER_QUEUES, LOCAL_QUEUES

log = structlog.get_logger(__name__)


def _active_condition(current: list[Condition] | None, active: bool, reason: str, message: str) -> dict[str, Any]:
    status = ConditionStatus.TRUE if active else ConditionStatus.FALSE
    previous = find_condition(current, ACTIVE)
    when = (
        previous.last_transition_time
        if previous is not None and previous.status == status
        else datetime.now(timezone.utc)
    )
    return Condition(type=ACTIVE, status=status, reason=reason, message=message, last_transition_time=when).to_dict()


def _comparable(status: dict[str, Any]) -> dict[str, Any]:
    """The status without timestamps, to decide whether anything changed."""
    out = dict(status)
    out["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions", [])]
    return out


def _comparable_seen(
    memo: dict[_QueueKey, _SeenAs],
    key: _QueueKey,
    seen: ClusterQueueStatus | LocalQueueStatus,
    fields: tuple[str, ...],
) -> dict[str, Any]:
    """``seen``'s ``fields`` (and its conditions) without timestamps, as :func:`_comparable`; kept in ``memo`` per
    queue ``key`` while the same status object with the same fields is asked about."""
    remembered = memo.get(key)
    if remembered is not None and remembered[0] is seen and remembered[1] == fields:
        return remembered[2]
    seen_body = seen.to_dict()
    current = {k: seen_body.get(k) for k in fields}
    current["conditions"] = seen_body.get("conditions", [])
    comparable = _comparable(current)
    memo[key] = (seen, fields, comparable)
    return comparable


def _queue_samples(
    cq: ClusterQueue,
    view: ClusterQueueStatusView,
    inadmissible: int,
    quotas: Mapping[tuple[str, str], ResourceQuota],
) -> list[metrics.Sample]:
    """The queue gauges of one ClusterQueue, from the cache (no API call)."""
    name = cq.metadata.name or ""

    def amounts(usage_list: list[dict[str, Any]]) -> dict[tuple[str, str], Decimal]:
        return {(f["name"], r["name"]): parse_quantity(r["total"]) for f in usage_list for r in f["resources"]}

    usage, reservation = amounts(view.flavors_usage), amounts(view.flavors_reservation)
    if cq.metadata.deletion_timestamp is not None:
        status = metrics.CQ_TERMINATING
    else:
        status = metrics.CQ_ACTIVE if view.active else metrics.CQ_PENDING
    return metrics.cluster_queue_samples(
        name,
        cohort=cq.spec.cohort_name or "",
        status=status,
        pending_active=max(0, view.pending_workloads - inadmissible),
        pending_inadmissible=inadmissible,
        reserving=view.reserving_workloads,
        admitted=view.admitted_workloads,
        weighted_share=view.precise_weighted_share,
        quotas=[
            metrics.QuotaLine(
                flavor=flavor,
                resource=resource,
                nominal=quota.nominal,
                borrowing_limit=quota.borrowing_limit,
                lending_limit=quota.lending_limit,
                usage=usage.get((flavor, resource), Decimal(0)),
                reservation=reservation.get((flavor, resource), Decimal(0)),
            )
            for (flavor, resource), quota in sorted(quotas.items())
        ],
    )


#: At most this many queue status writes per sync (one sync a second): when more queues changed, those
#: written longest ago go first and the rest wait for the next sync. Why: on upstream's full scalability
#: baseline (30 ClusterQueues, 30 LocalQueues, all changing every second) a write per changed queue per
#: second was 60 writes a second, more than every Workload write of ours together, on the API server
#: the runner and the scheduler wait on (upstream's event-driven status comes to about 15 a second
#: there). A handful of queues is still written every second.
WRITES_PER_SYNC = 16

#: ("cq", "", name) or ("lq", namespace, name).
_QueueKey = tuple[str, str, str]


#: A queue's status object as seen, the status fields compared and that status's comparable form.
_SeenAs = tuple["ClusterQueueStatus | LocalQueueStatus", tuple[str, ...], dict[str, Any]]
#: A queue whose view or status as seen changed since nothing was due for it: key, uid, status as seen, view.
_Changed = tuple[_QueueKey, str, "ClusterQueueStatus | LocalQueueStatus", QueueStatusView]


@dataclass(frozen=True)
class _Due:
    """A queue whose status is to be written: the patch, and its form without timestamps (what is compared)."""

    key: _QueueKey
    status: dict[str, Any]
    #: The queue object's uid and its status without timestamps: what is remembered once written.
    wanted: tuple[str, dict[str, Any]]


class QueueStatusWriter:
    def __init__(
        self, kube: AsyncKube, cache: Cache, writes_per_sync: int = WRITES_PER_SYNC, events: EventRecorder | None = None
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.writes_per_sync = writes_per_sync
        self.events = events
        #: Per queue, the uid of the object written and what was written (a queue deleted and made again
        #: under the same name is another object: its status is written even when it says the same).
        self._written: dict[_QueueKey, tuple[str, dict[str, Any]]] = {}
        #: Per queue, the sync that last tried to write it: the order among queues waiting for the budget
        #: (a queue whose write keeps failing goes behind the others, not ahead of them every time).
        self._written_at: dict[_QueueKey, int] = {}
        self._syncs = 0
        #: A sync is writing: the next one waits for its turn rather than running beside it (see :meth:`sync`).
        self._busy = False
        #: Status writes made, by kind (``ClusterQueue``, ``LocalQueue``): logged at stop, read by the benchmarks.
        self.writes: dict[str, int] = {"ClusterQueue": 0, "LocalQueue": 0}
        #: Per queue, the view and the object's status (as seen) for which nothing was due: while the cache
        #: hands out the same two objects, the queue is skipped without building its status. Why: a sync
        #: reads every queue each second; with 1,000 ClusterQueues and 1,000 LocalQueues, building and
        #: comparing every status each time was a fifth of the controller's CPU with nothing to write.
        self._settled: dict[_QueueKey, tuple[QueueStatusView, ClusterQueueStatus | LocalQueueStatus]] = {}
        #: Per queue, the object's status (as seen), the status fields compared and the comparable form of
        #: that status: while the cache hands out the same status object it is not converted again. Why: with
        #: more queues changing than a sync may write (1,000 ClusterQueues), every sync compared each
        #: waiting queue's status as seen, unchanged since the last sync, to what it wanted again.
        self._seen_as: dict[_QueueKey, _SeenAs] = {}
        #: Per ClusterQueue, what its gauges were last reported from (see :meth:`_report_gauges`).
        self._gauged: dict[str, tuple[object, ...]] = {}
        self._gauges_epoch = metrics.queue_gauges_epoch()
        #: Per ClusterQueue, the object's uid, the spec last checked for settings not acted on, and what was
        #: found (see :meth:`_report_unimplemented`): a spec is checked once, a finding reported once per uid.
        self._checked: dict[str, tuple[str, ClusterQueueSpec, tuple[str, ...]]] = {}

    async def sync(self) -> None:
        """Write the queues whose status changed, at most :attr:`writes_per_sync` of them, longest unwritten first.

        The queue gauges are reported first, in the same pass and before any
        await: one consistent set. Both skip a queue whose view did not change.
        The writes of a sync go out together, and a sync called while another
        is still writing returns at once. Why: with the API server slow
        (upstream's large-scale generator, 0.4 s a write) one-by-one writes
        made a sync last longer than the second between two, syncs ran side by
        side, each picked the queues the others were about to write, and the
        LocalQueues behind 1,000 ever-changing ClusterQueues were never written.
        """
        if self._busy:
            return
        self._busy = True
        try:
            await self._sync()
        finally:
            self._busy = False

    async def _sync(self) -> None:
        self._syncs += 1
        if (epoch := metrics.queue_gauges_epoch()) != self._gauges_epoch:
            self._gauges_epoch = epoch
            self._gauged.clear()
        now = datetime.now(timezone.utc)
        changed: list[_Changed] = []
        names = self.cache.cluster_queue_names()
        for name in names:
            cq = self.cache.cluster_queue(name)
            view = self.cache.cluster_queue_status(name)
            if cq is not None and view is not None:
                self._report_unimplemented(name, cq)
                self._report_gauges(name, cq, view, now)
                self._note_changed(("cq", "", name), cq.metadata.uid or "", cq.status, view, changed)
        metrics.keep_queue_gauges(names)
        local_queues = self.cache.local_queue_keys()
        for namespace, name in local_queues:
            lq = self.cache.local_queue(namespace, name)
            view = self.cache.local_queue_status(namespace, name)
            if lq is not None and view is not None:
                self._note_changed(("lq", namespace, name), lq.metadata.uid or "", lq.status, view, changed)
        self._forget_deleted(len(names) + len(local_queues), names, local_queues)
        # Longest unwritten first (stable: ClusterQueues first among equals); a status is built only for the
        # queues looked at until the budget is full. Why: with 2,000 queues changing every second and 16
        # writes a sync, building and comparing every changed queue's status each time was most of a sync.
        changed.sort(key=lambda item: self._written_at.get(item[0], 0))
        due: list[_Due] = []
        for key, uid, seen, view in changed:
            if len(due) >= self.writes_per_sync:
                break
            self._consider(key, uid, seen, view, due)
        for item in due:
            self._written_at[item.key] = self._syncs
        await asyncio.gather(*(self._write(item) for item in due))

    def _report_gauges(self, name: str, cq: ClusterQueue, view: ClusterQueueStatusView, now: datetime) -> None:
        """Report the ClusterQueue's gauges, unless what they are computed from is what they were last time."""
        inadmissible = self.cache.inadmissible_in_cluster_queue(name, now)
        state = self.cache.cluster_queue_state(name)
        quotas = state.node.quotas if state is not None else {}
        inputs = (view, inadmissible, cq.metadata.deletion_timestamp is not None, cq.spec.cohort_name, quotas)
        if self._gauged.get(name) == inputs:
            return
        metrics.report_queue_gauges(name, _queue_samples(cq, view, inadmissible, quotas))
        self._gauged[name] = inputs

    def _report_unimplemented(self, name: str, cq: ClusterQueue) -> None:
        """Name the settings of the ClusterQueue that the controller does not act on: a log line and a Warning
        Event, when its spec first says so and whenever what it says changes (not at every status change)."""
        uid = cq.metadata.uid or ""
        seen_uid, seen_spec, seen_notes = self._checked.get(name, (None, None, None))
        same_object = seen_uid == uid
        if same_object and seen_spec is cq.spec:
            return
        notes = unimplemented_settings(cq.spec)
        self._checked[name] = (uid, cq.spec, notes)
        if not notes or (same_object and seen_notes == notes):
            return
        message = unimplemented_message(notes)
        log.warning("ClusterQueue settings not acted on", cluster_queue=name, settings=list(notes))
        if self.events is not None:
            self.events.record(ObjectRef(API_VERSION, "ClusterQueue", None, name, uid or None), "Warning", EVENT_REASON, message)

    def _forget_deleted(self, queues: int, cq_names: list[str], lq_keys: list[tuple[str, str]]) -> None:
        """Drop what is remembered of queues no longer in the cache (kept, it grew with every queue ever seen).

        Only when more is remembered than there are queues: what is left over is then at most one entry
        per queue, and a quiet sync costs no set difference."""
        memories: list[dict[_QueueKey, Any]] = [self._written, self._written_at, self._settled, self._seen_as]
        if (
            all(len(memory) <= queues for memory in memories)
            and len(self._gauged) <= len(cq_names)
            and len(self._checked) <= len(cq_names)
        ):
            return
        present = {("cq", "", name) for name in cq_names} | {("lq", ns, name) for ns, name in lq_keys}
        for memory in memories:
            for key in memory.keys() - present:
                del memory[key]
        cq_present = set(cq_names)
        for per_name in (self._gauged, self._checked):
            for name in per_name.keys() - cq_present:
                del per_name[name]

    def _consider(
        self,
        key: _QueueKey,
        uid: str,
        seen: ClusterQueueStatus | LocalQueueStatus,
        view: QueueStatusView,
        due: list[_Due],
    ) -> None:
        """Add the queue to ``due`` if its wanted status differs from what was last written and from ``seen``.

        ``seen`` is the queue's status model as last seen, ``view`` the cache's status view of it.
        """
        status = {
            "conditions": [_active_condition(seen.conditions, view.active, view.reason, view.message)],
            **view.status_fields(),
        }
        wanted = (uid, _comparable(status))
        if self._written.get(key) == wanted:
            self._settled[key] = (view, seen)
            return
        if _comparable_seen(self._seen_as, key, seen, tuple(status)) == wanted[1]:
            self._written[key] = wanted
            self._settled[key] = (view, seen)
            return
        self._settled.pop(key, None)
        due.append(_Due(key, status, wanted))

    def _note_changed(
        self,
        key: _QueueKey,
        uid: str,
        seen: ClusterQueueStatus | LocalQueueStatus,
        view: QueueStatusView,
        changed: list[_Changed],
    ) -> None:
        """Add the queue to ``changed`` unless nothing was due for this very view and status as seen (settled)."""
        settled = self._settled.get(key)
        if settled is None or settled[0] is not view or settled[1] is not seen:
            changed.append((key, uid, seen, view))

    def remembered(self) -> int:
        """How many queues' last writes are remembered (at most one per queue in the cache, after a sync)."""
        return len(self._written)

    async def _write(self, item: _Due) -> None:
        kind, namespace, name = item.key
        ref = CLUSTER_QUEUES if kind == "cq" else LOCAL_QUEUES
        try:
            await self.kube.patch(ref, namespace or None, name, {"status": item.status}, status=True)
            self._written[item.key] = item.wanted
            self.writes["ClusterQueue" if kind == "cq" else "LocalQueue"] += 1
        except ApiException as exc:
            if exc.status != 404:
                log.warning("queue status not written", queue=name, kind=kind, status=exc.status, error=exc.reason)
        except OSError as exc:  # unreachable API server (TransportError): the next sync writes it
            log.warning("queue status not written: API server unreachable", queue=name, kind=kind, error=str(exc)[:200])
