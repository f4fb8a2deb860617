"""The scheduling loop: the pure scheduler's decisions, written.

The loop runs while this replica leads (``operator/wiring.py``,
``Controller.lead_until``, run by the Lease loop): on every change of the
cache (the feeds call :meth:`SchedulingLoop.notify`) it asks
:func:`multikueue.core.scheduler.schedule` for one cycle's decisions and has
the Workload writer write them, and it keeps ClusterQueue/LocalQueue status
current. So it starts only once the cache is complete (kopf runs indexers
first; a new leader waits for the cache to catch up with the API server) and
stops, its writes in flight cancelled, when this replica stops leading.

Writes run in the background, bounded, so one slow write never holds a cycle;
a reservation that fails drops its assumption so the next cycle sees the
quota free again. A preemption evicts its victim on the resourceVersion its
plan was made on, and not at all if the cache has a newer one by then: a
cycle that runs before the eviction is seen plans the same victim again, and
that second write is skipped while the first is in flight (or refused as
stale after it).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import structlog
from kubernetes.client.rest import ApiException

from multikueue.api.configuration import Configuration
from multikueue.api.meta import utcnow
from multikueue.core import lifecycle
from multikueue.core.cache import Cache, WorkloadKey
from multikueue.core.fairsharing import FairSharing
from multikueue.core.scheduler import AdmissionDecision, CycleMemo, PendingUpdate, PreemptionDecision, schedule
from multikueue.runtime import metrics
from multikueue.runtime.leaderelection import Stopped
from multikueue.runtime.queue_status import QueueStatusWriter
from multikueue.runtime.writer import WorkloadWriter

log = structlog.get_logger(__name__)

#: Coalesce bursts of events into one scheduling cycle: wait at least this long after a wake-up ...
CYCLE_COALESCE_SECONDS = 0.05
#: ... or as long as the last cycle took, up to this: when cycles are slow (thousands pending), the events
#: they wait for are taken in larger batches and the event loop keeps about half its time for them.
CYCLE_COALESCE_MAX_SECONDS = 0.1
#: A cycle stops walking a ClusterQueue after this many of its Workloads were not admitted in their round
#: (those that do not fit are parked; the next cycle goes on after them). Upstream looks at one head per queue per
#: cycle; walking every pending Workload of every changed queue at each cycle was most of our CPU.
HEADS_PER_QUEUE = 8
#: A cycle looks at whole quota trees until about this many ClusterQueues and leaves the other changed trees to
#: the next one, so the event loop (quota given back, writes answered) is not held for the whole of a large
#: installation's cycle (upstream's large-scale generator: 1,000 ClusterQueues, 0.2-0.6 s cycles).
MAX_QUEUES_PER_CYCLE = 200
#: Bound on concurrent admission writes. Under a loaded API server (upstream's large-scale generator: the
#: runner creating 50,000 Workloads, 2.8 s per status patch in the first minute) a write's time is mostly
#: waiting, and 32 at a time left the decisions a minute behind their writes; 128 drains the same backlog in a
#: quarter of the time (decisions, stop 53). Each write in flight holds one connection (``CONNECTIONS``).
WRITE_CONCURRENCY = 128
#: Bound on concurrent evictions, apart from the admissions': an eviction is decided on a victim that may be
#: finishing right then, so it is not queued behind a cycle's worth of reservations (its plan goes stale).
EVICTION_CONCURRENCY = 8
#: Bound on concurrent "why it waits" writes: informative, so they yield to admissions.
PENDING_WRITE_CONCURRENCY = 4
#: Connections (and client threads) to the API server: every write bound above, plus the watches, lists,
#: releases, Events and status writes of the other controllers.
CONNECTIONS = WRITE_CONCURRENCY + EVICTION_CONCURRENCY + PENDING_WRITE_CONCURRENCY + 20
#: A "why it waits" message whose only change is a figure ("3 more needed" -> "2 more needed") is written
#: at most this often per Workload (lifecycle.only_numbers_differ); any other change is written at once.
PENDING_REFRESH_SECONDS = 300.0
#: When this many Workloads' last "why it waits" write times are kept, those older than the above are dropped.
REFRESHED_KEPT = 4096
#: After a "why it waits" write refused as stale, look at the Workload again this much later.
RECHECK_SECONDS = 0.5
#: How often queue status is compared and written at most.
QUEUE_STATUS_SECONDS = 1.0
#: When the loop stops, how long reservations and evictions already sent may take to be answered.
DRAIN_SECONDS = 2.0



def fair_sharing_of(config: Configuration) -> FairSharing | None:
    """What the scheduler takes of the Configuration's ``fairSharing``: ``None`` when it is off."""
    if not config.fair_sharing_enabled:
        return None
    return FairSharing(config.fair_sharing_strategies)


class PendingReports:
    """"Why it waits" reports not yet written: the latest per Workload, oldest first, one write per Workload at a time.

    A cycle reports every candidate whose condition differs from what it
    decided (best-effort FIFO tries every pending Workload, and messages
    quote free quota that changes with each admission), so a busy queue
    produces far more reports than a few writers can write. One task per
    report piled up thousands of tasks waiting on a semaphore (creating them
    was a tenth of the controller's CPU in upstream's scalability test), each
    writing a message already outdated: only the latest report per Workload
    matters.
    """

    def __init__(self) -> None:
        self._queued: dict[WorkloadKey, PendingUpdate] = {}
        #: Workloads whose report is being written -> set when that write ends.
        self._writing: dict[WorkloadKey, asyncio.Event] = {}
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, update: PendingUpdate) -> None:
        """Queue ``update``; it replaces a report of the same Workload not yet taken, and goes to the back."""
        self._queued.pop(update.key, None)
        self._queued[update.key] = update
        self._ready.set()

    def take_now(self) -> PendingUpdate | None:
        """The oldest report whose Workload is not being written (then it is, until :meth:`done`); None if none."""
        for key in self._queued:
            if key not in self._writing:
                self._writing[key] = asyncio.Event()
                return self._queued.pop(key)
        return None

    async def take(self) -> PendingUpdate:
        """Wait for :meth:`take_now` to have one."""
        while True:
            update = self.take_now()
            if update is not None:
                return update
            self._ready.clear()
            await self._ready.wait()

    def done(self, key: WorkloadKey) -> None:
        """The write of ``key``'s report ended: a newer report of it may be taken."""
        ended = self._writing.pop(key, None)
        if ended is not None:
            ended.set()
        if self._queued:
            self._ready.set()

    async def settled(self, key: WorkloadKey) -> None:
        """Return once no report of ``key`` is being written (at once when none is).

        A reservation decided while the Workload's report was in flight
        waits for it: read before the report's answer, the Workload's
        resourceVersion is the one the report replaces, and the reservation
        would be refused as stale (a 409 and a cycle lost: most of our own
        conflicts in upstream's scalability test). A report writes only this
        controller's explanation of the wait, so the decision still holds on
        the version the report made.
        """
        writing = self._writing.get(key)
        if writing is not None:
            await writing.wait()

    def clear(self) -> None:
        self._queued.clear()


class FigureRefresh:
    """How long a figure-only change of a Workload's "why it waits" message waits (see PENDING_REFRESH_SECONDS).

    Keeps the time of each Workload's last such write; when more than
    :data:`REFRESHED_KEPT` are kept, those older than the period are dropped
    (they no longer hold anything back). The next drop waits until twice as
    many as remain are kept, so thousands written within one period cost one
    pass per doubling, not one per write.
    """

    def __init__(self, period: float = PENDING_REFRESH_SECONDS, kept: int = REFRESHED_KEPT) -> None:
        self.period = period
        self.kept = kept
        self._written: dict[WorkloadKey, float] = {}
        self._drop_above = kept

    def __len__(self) -> int:
        return len(self._written)

    def wait(self, key: WorkloadKey, now: float) -> float:
        """Seconds until the Workload's figures may be written (0 or less: now)."""
        last = self._written.get(key)
        return 0.0 if last is None else self.period - (now - last)

    def written(self, key: WorkloadKey, now: float) -> None:
        self._written[key] = now
        if len(self._written) > self._drop_above:
            self._written = {k: t for k, t in self._written.items() if now - t < self.period}
            self._drop_above = max(self.kept, 2 * len(self._written))


class SchedulingLoop:
    def __init__(
        self,
        cache: Cache,
        writer: WorkloadWriter,
        queue_status: QueueStatusWriter,
        fair_sharing: FairSharing | None = None,
    ) -> None:
        self.cache = cache
        #: The Configuration's ``fairSharing`` when enabled (read at start, as the other settings).
        self.fair_sharing = fair_sharing
        cache.fair_sharing_status = fair_sharing is not None  # ClusterQueue status.fairSharing, as upstream
        self.writer = writer
        self.queue_status = queue_status
        self._memo = CycleMemo()
        self.cycles = 0
        #: Preemption plans run, plans answered without running (no candidate can exist), and seconds
        #: spent in cycles: logged at stop, read by the benchmarks.
        self.preemption_plans = 0
        self.preemption_plans_skipped = 0
        #: Assumed admissions preemption took back before their write began (``CycleResult.withdrawn``).
        self.withdrawn = 0
        self.cycle_seconds = 0.0
        self._wake = asyncio.Event()
        #: Victims whose eviction is written or in flight -> the resourceVersion it was decided on:
        #: while the cache still holds that version, planning the victim again repeats nothing.
        self._evicting: dict[tuple[str, str], str | None] = {}
        #: "Why it waits" reports not yet written.
        self.pending_reports = PendingReports()
        #: When each Workload's "why it waits" figures may be written again, and those to look at then.
        self._figures = FigureRefresh()
        self._refresh_due: set[WorkloadKey] = set()

    def notify(self) -> None:
        """Something the scheduler reads changed: run a cycle soon."""
        self._wake.set()

    async def _admit(self, decision: AdmissionDecision, gate: asyncio.Semaphore) -> None:
        await self.pending_reports.settled(decision.key)
        async with gate:
            if not self.cache.start_writing(decision.key, decision.admission):
                log.debug("reservation withdrawn before its write", workload=f"{decision.key[0]}/{decision.key[1]}")
                return  # a later cycle's preemption took it back (or decided again): nothing to write
            wl = self.cache.workload(decision.key)
            if wl is None:
                self.cache.forget(decision.key)
                return
            status = lifecycle.reservation_status(wl, decision.admission, list(decision.admission_checks), utcnow())
            try:
                written = await self.writer.reserve(
                    wl, status, cluster_queue=decision.cluster_queue, checks=list(decision.admission_checks)
                )
            except ApiException as exc:
                log.error("reservation failed", workload=f"{wl.namespace}/{wl.name}", status=exc.status, error=exc.reason)
                written = False
            except OSError as exc:  # the API server is unreachable (TransportError): drop the assumption, retry next cycle
                log.error("reservation failed: API server unreachable", workload=f"{wl.namespace}/{wl.name}", error=str(exc)[:200])
                written = False
            if not written:
                self.cache.forget(decision.key)
                self.notify()

    async def _preempt(self, decision: PreemptionDecision, gate: asyncio.Semaphore) -> None:
        """Evict one victim on the resourceVersion the plan was made on, or drop the plan if the victim moved on.

        The cache is read again once the gate is held: a victim that finished
        (or changed in any way) since the cycle planned is not evicted. The
        write would be refused as stale anyway, after a round trip, and the
        quota it gave back may be all the preemptor needed; the next cycle
        plans on what the cache holds now.
        """
        version = decision.victim_version
        if decision.victim in self._evicting and self._evicting[decision.victim] in (None, version):
            return  # in flight, or written and not yet seen by the cache
        self._evicting[decision.victim] = None
        written: str | None = None  # the version evicted
        try:
            async with gate:
                wl = self.cache.workload(decision.victim)
                if wl is None or not lifecycle.holds_quota(wl):
                    return
                if lifecycle.awaits_release(wl):
                    # Evicted already (by this preemptor's earlier cycle, or another): its release is on its
                    # way, and that change wakes the preemptor. Noted as written on this version, so neither
                    # a second eviction nor a recheck of the preemptor (which would plan it again at once).
                    written = wl.metadata.resource_version
                    return
                if version is not None and wl.metadata.resource_version != version:
                    log.debug("preemption dropped: the victim changed since it was planned",
                              workload=f"{wl.namespace}/{wl.name}")  # fmt: skip
                    return
                update = lifecycle.preempted(wl, decision.reason, decision.message, utcnow())
                name = f"{wl.namespace}/{wl.name}"
                try:
                    if await self.writer.apply(wl, update):
                        written = wl.metadata.resource_version
                except (ApiException, OSError) as exc:
                    log.error("preemption not written; the next cycle plans again", workload=name, error=str(exc)[:200])
                if written is not None:
                    metrics.workload_preempted(decision.preempting_cluster_queue, decision.reason)
                    log.debug("preempted", workload=name, reason=decision.reason,
                             preemptor=f"{decision.preemptor[0]}/{decision.preemptor[1]}")  # fmt: skip
        finally:
            if written is not None:
                self._evicting[decision.victim] = written
            else:
                self._evicting.pop(decision.victim, None)
                # The preemptor waits for this plan: have the next cycle look at it again even if
                # what changed (the victim, in another ClusterQueue) does not mark its queue.
                self._recheck(decision.preemptor)

    def _recheck(self, key: tuple[str, str]) -> None:
        self.cache.recheck(key)
        self.notify()

    def _refresh(self, key: tuple[str, str]) -> None:
        self._refresh_due.discard(key)
        self._recheck(key)

    def _forget_seen_evictions(self) -> None:
        """Drop the written evictions the cache has caught up with (the Workload changed since)."""
        for key, rv in list(self._evicting.items()):
            wl = self.cache.workload(key)
            if rv is not None and (wl is None or wl.metadata.resource_version != rv):
                del self._evicting[key]

    async def _pending_writer(self) -> None:
        """Write queued "why it waits" reports, one at a time, until cancelled."""
        while True:
            update = await self.pending_reports.take()
            try:
                await self._pending(update)
            finally:
                self.pending_reports.done(update.key)

    async def _pending(self, update: PendingUpdate) -> None:
        wl = self.cache.workload(update.key)
        if wl is None or not lifecycle.may_report_pending(wl, assumed=self.cache.is_assumed(update.key)):
            return
        if lifecycle.says_pending(wl, update.reason, update.message):
            return  # an earlier report of the same words was written after this one was decided
        now = time.monotonic()
        if lifecycle.only_numbers_differ(wl, update.reason, update.message):
            wait = self._figures.wait(update.key, now)
            if wait > 0:
                # Looked at again once the figures may be written (a quiet queue has no later cycle of its own).
                if update.key not in self._refresh_due:
                    self._refresh_due.add(update.key)
                    asyncio.get_running_loop().call_later(wait, self._refresh, update.key)
                return
        status = lifecycle.pending_status(wl, update.reason, update.message, utcnow())
        self._figures.written(update.key, now)
        try:
            if not await self.writer.pending(wl, status):
                # Changed meanwhile (e.g. a second write of the same transition): a change the
                # scheduler does not read marks no queue, so ask for a look once the cache has it.
                asyncio.get_running_loop().call_later(RECHECK_SECONDS, self._recheck, update.key)
        except ApiException as exc:
            log.error("pending status not written", workload=f"{wl.namespace}/{wl.name}", status=exc.status)
        except OSError as exc:  # unreachable (TransportError)
            log.warning("pending status not written: API server unreachable", workload=f"{wl.namespace}/{wl.name}", error=str(exc)[:200])

    async def run(self, stopped: Stopped) -> None:
        """Schedule until ``stopped``; then let the decisions already being written finish, briefly.

        Reservations and evictions in flight get :data:`DRAIN_SECONDS` to be
        answered, so their bookkeeping (the Event, the metric, the assumption
        dropped on a refusal) is not cut off by a shutdown: the request itself
        runs in a thread and reaches the API server whether or not its task is
        cancelled, and a write nobody waited for is one whose Event is lost.
        What is still unanswered then is cancelled (a new leader decides
        again, on the resourceVersion it sees); "why it waits" and queue
        status writes are informative and cancelled at once.
        """
        log.info("scheduling loop started")
        gate = asyncio.Semaphore(WRITE_CONCURRENCY)
        eviction_gate = asyncio.Semaphore(EVICTION_CONCURRENCY)
        inflight: set[asyncio.Task[None]] = set()
        background: set[asyncio.Task[None]] = set()

        def spawn(coro: Any, tasks: set[asyncio.Task[None]] = inflight) -> None:
            task = asyncio.create_task(coro)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        last_status = 0.0
        next_cycle_at: datetime | None = None
        coalesce = CYCLE_COALESCE_SECONDS
        for _ in range(PENDING_WRITE_CONCURRENCY):
            spawn(self._pending_writer(), background)
        self.notify()
        # Woken by a stop too, not only by the next change: a replica that lost the lead admits nothing more.
        stop_wait = asyncio.ensure_future(stopped.wait())
        try:
            while not stopped:
                timeout = 1.0
                if next_cycle_at is not None:
                    timeout = max(0.0, min(timeout, (next_cycle_at - utcnow()).total_seconds()))
                wake = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait({wake, stop_wait}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                wake.cancel()
                if stopped:
                    break
                await asyncio.sleep(coalesce)
                self._wake.clear()
                started = time.monotonic()
                with metrics.SCHEDULING_CYCLE.time():
                    result = schedule(
                        self.cache, utcnow(), self.fair_sharing, heads_per_queue=HEADS_PER_QUEUE, memo=self._memo,
                        max_queues=MAX_QUEUES_PER_CYCLE,
                    )
                took = time.monotonic() - started
                coalesce = min(CYCLE_COALESCE_MAX_SECONDS, max(CYCLE_COALESCE_SECONDS, took))
                next_cycle_at = result.next_cycle_at
                self.cycles += 1
                self.cycle_seconds += took
                self.preemption_plans += result.plans
                self.preemption_plans_skipped += result.plans_skipped
                self.withdrawn += len(result.withdrawn)
                if result.more:
                    self.notify()
                for decision in result.admitted:
                    spawn(self._admit(decision, gate))
                self._forget_seen_evictions()
                for preemption in result.preempted:
                    spawn(self._preempt(preemption, eviction_gate))
                for update in result.pending:
                    self.pending_reports.add(update)
                if time.monotonic() - last_status > QUEUE_STATUS_SECONDS:
                    last_status = time.monotonic()
                    spawn(self.queue_status.sync(), background)
        finally:
            stop_wait.cancel()
            for task in background:
                task.cancel()
            drained = len(inflight)
            if inflight:
                await asyncio.wait(set(inflight), timeout=DRAIN_SECONDS)
            unanswered = len(inflight)
            cancelled = list(inflight) + list(background)
            for task in cancelled:
                task.cancel()
            if cancelled:
                await asyncio.gather(*cancelled, return_exceptions=True)
            self.pending_reports.clear()  # decided while leading: a next lead decides again
        log.info("scheduling loop stopped", writes_in_flight=drained, cancelled_writes=unanswered)
