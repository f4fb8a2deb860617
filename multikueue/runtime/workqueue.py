"""A rate-limited, delaying work queue for controllers that are not kopf handlers.

Controllers react to many events about the same object (a Workload, its remote
copies, a worker connecting...). Reconciling once per event would race and
waste API calls; dropping events would lose work. This queue, modelled on
client-go's rate-limited delaying work queue, gives every controller the same
contract:

- **at least once per add**: a key added after its last handling started is
  handled again (adds that arrive while it waits coalesce into one entry, the
  earliest due time wins; adds while it runs mark it to run once more after);
- **never concurrent per key**: one key is handled by at most one worker;
- **failures are never dropped**: any exception from the handler is logged and
  the key retried with per-key exponential backoff (reset once it succeeds).
  A plain ``add`` is not held back by the backoff, as in client-go: new
  information is worth a try now.

Time comes from an injectable :class:`Clock`, so tests drive delays with
:class:`FakeClock` and never really sleep. Due times live in a heap (stale
entries are skipped lazily), so adding never scans all keys.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import math
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Generic, Protocol, TypeVar

import structlog

log = structlog.get_logger(__name__)

K = TypeVar("K", bound=Hashable)
Handler = Callable[[K], Awaitable[float | None]]


class Clock(Protocol):
    """Where the queue reads time and waits for due times."""

    def now(self) -> float:
        """Seconds on a monotonic scale (only differences matter)."""
        ...

    async def wait(self, deadline: float | None, wakeup: asyncio.Event) -> None:
        """Return once ``now() >= deadline`` (``None``: no deadline) or ``wakeup`` is set."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and the event loop's timers."""

    def now(self) -> float:
        return time.monotonic()

    async def wait(self, deadline: float | None, wakeup: asyncio.Event) -> None:
        timeout = None if deadline is None else max(0.0, deadline - self.now())
        try:
            async with asyncio.timeout(timeout):
                await wakeup.wait()
        except TimeoutError:
            pass


class FakeClock:
    """A clock for tests: time stands still until :meth:`advance` moves it.

    ``advance`` only releases the waits that are due; the test then yields to
    the loop (a few ``await asyncio.sleep(0)``) to let the woken tasks run.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._timers: list[tuple[float, asyncio.Event]] = []

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward and release the waits whose deadline has come."""
        self._now += seconds
        for deadline, fired in self._timers:
            if deadline <= self._now:
                fired.set()

    async def wait(self, deadline: float | None, wakeup: asyncio.Event) -> None:
        if wakeup.is_set() or (deadline is not None and deadline <= self._now):
            return
        fired = asyncio.Event()
        timer = (deadline, fired) if deadline is not None else None
        if timer is not None:
            self._timers.append(timer)
        waits = {asyncio.ensure_future(wakeup.wait()), asyncio.ensure_future(fired.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            if timer is not None:
                self._timers.remove(timer)


class WorkQueue(Generic[K]):
    """Keys waiting to be handled by ``handler`` with at most ``workers`` at once.

    ``handler(key)`` returns ``None`` when done, or a delay in seconds to be
    handled again after (a periodic re-check). Create it anywhere; :meth:`start`
    it on the running loop; :meth:`stop` it. It may be started again after a
    stop (a replica that regains leadership): keys added while it was stopped
    were dropped, so whoever restarts it re-adds what it owns (a resync).
    """

    def __init__(
        self,
        name: str,
        handler: Handler[K],
        *,
        workers: int = 4,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        clock: Clock | None = None,
        format_key: Callable[[K], str] = str,
        expected: tuple[type[BaseException], ...] = (),
        urgent: Callable[[K], bool] | None = None,
    ) -> None:
        """``expected``: failures the handler's domain foresees (a worker refusing, an API error);
        they are logged in one line, while anything else carries its traceback once.

        ``urgent(key)``, asked whenever a key is queued (an add, a retry, a
        rerun): an urgent key, once due, goes ahead of every due key that is
        not, however long those waited; once urgent it stays so until
        handled. It must be cheap (a cache lookup). For work that ends what
        was started rather than starting more (a MultiKueue Workload running
        on a worker): with thousands of keys due, first come first served put
        the status and the end of running Workloads minutes behind the
        dispatch of new ones. A periodic resync pass's adds are never
        urgent: the safety net does not jump the queue (every finished
        Workload still held would otherwise go ahead of every dispatch, once
        a period).
        """
        if workers < 1:
            raise ValueError("a work queue needs at least one worker")
        self.name = name
        self.workers = workers
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self._handler = handler
        self._clock: Clock = clock or MonotonicClock()
        self._format_key = format_key
        self._expected = expected
        self._urgent = urgent
        #: Waiting keys -> (due time, id of their live heap entry, urgent).
        self._due: dict[K, tuple[float, int, bool]] = {}
        #: Entries (due, id, key) of the keys added as urgent, and of the others.
        self._urgent_heap: list[tuple[float, int, K]] = []
        self._heap: list[tuple[float, int, K]] = []
        self._ids = itertools.count()
        #: Keys added while running -> when to run them again once the run ends.
        self._rerun: dict[K, float] = {}
        self._running: set[K] = set()
        self._failures: dict[K, int] = {}
        self._wakeup = asyncio.Event()
        #: Worker slots of the current run; a fresh one per start, so handlers left behind by a
        #: stop that timed out release the old run's slots, never the new run's.
        self._slots = asyncio.Semaphore(workers)
        self._dispatcher: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._resync_task: asyncio.Task[None] | None = None
        #: With a periodic resync: when each owned key's handling last started (pruned at each pass).
        self._handled_at: dict[K, float] | None = None
        self._stopped = False

    # -- adding -----------------------------------------------------------------

    def add(self, key: K, delay: float = 0.0) -> None:
        """Have ``key`` handled in ``delay`` seconds or sooner; ignored once stopped."""
        self._add(key, delay, may_be_urgent=True)

    def _add(self, key: K, delay: float, *, may_be_urgent: bool) -> None:
        if self._stopped:
            return
        due = self._clock.now() + max(0.0, delay)
        if key in self._running:
            self._mark_rerun(key, due)
            return
        self._push(key, due, may_be_urgent=may_be_urgent)

    def _push(self, key: K, due: float, *, may_be_urgent: bool = True) -> None:
        """Queue ``key`` at ``due`` (or keep its earlier time); asks the owner's ``urgent`` here (see __init__)."""
        urgent = may_be_urgent and self._urgent is not None and self._urgent(key)
        current = self._due.get(key)
        if current is not None:
            urgent = urgent or current[2]
            if current[0] <= due and urgent == current[2]:
                return
            due = min(due, current[0])
        entry_id = next(self._ids)
        self._due[key] = (due, entry_id, urgent)
        heapq.heappush(self._urgent_heap if urgent else self._heap, (due, entry_id, key))
        if len(self._heap) + len(self._urgent_heap) > 2 * len(self._due) + 64:
            # Too many superseded entries: rebuild (amortised, not on every add).
            self._heap = [(d, i, k) for k, (d, i, u) in self._due.items() if not u]
            self._urgent_heap = [(d, i, k) for k, (d, i, u) in self._due.items() if u]
            heapq.heapify(self._heap)
            heapq.heapify(self._urgent_heap)
        self._wakeup.set()

    # -- failures ---------------------------------------------------------------

    def backoff(self, failures: int) -> float:
        """The delay before retry number ``failures``: base, doubling, capped."""
        return min(self.backoff_cap, self.backoff_base * 2.0 ** min(max(failures, 1) - 1, 64))

    def failures(self, key: K) -> int:
        """How many times in a row ``key``'s handler has failed."""
        return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        """Reset ``key``'s backoff (done automatically when its handler succeeds)."""
        self._failures.pop(key, None)

    # -- introspection ------------------------------------------------------------

    def __len__(self) -> int:
        """Keys waiting to be handled, whether due now, later or after their current run."""
        return len(self._due) + len(self._rerun)

    def waiting(self) -> dict[K, float]:
        """Each waiting key and the clock time it is due at."""
        return {**{k: due for k, (due, _, _) in self._due.items()}, **self._rerun}

    @property
    def running(self) -> frozenset[K]:
        """Keys whose handler is running now."""
        return frozenset(self._running)

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def clock(self) -> Clock:
        """The clock the queue reads, for callers that time their own periodic work on it."""
        return self._clock

    @property
    def started(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._dispatcher is not None and not self._stopped

    # -- lifecycle ----------------------------------------------------------------

    def start(self, *, resync: Callable[[], Iterable[K]] | None = None, every: float | None = None) -> None:
        """Start handling keys on the running event loop; also after a :meth:`stop`.

        A restart begins empty (a stop dropped the waiting keys) with fresh
        worker slots. A handler of the previous run that ignored its
        cancellation still holds its key: an add of that key waits for it to
        end, so a key is never handled twice at once even across a restart.

        ``resync`` lists the keys the owner holds: they are added at once (what
        a stopped queue dropped is owned again) and, with ``every``, a pass
        runs every ``every`` seconds of the queue's clock until :meth:`stop`.
        The periodic pass makes a controller level-triggered: a key whose last
        handling decided on a picture that changed without an event is looked
        at again. A pass adds only the keys not handled for half a period (one
        handled for an event meanwhile decided on a fresh picture), and
        spreads them over half a period rather than making them all due at
        once: adds for new events, due now, go ahead of most of them. With
        10,000 MultiKueue Workloads, a pass due at once put every event
        behind 10,000 handlings, once a minute. So each owned key is handled
        at least every period and a half.
        """
        if self.started:
            raise RuntimeError(f"work queue {self.name!r} is already started")
        self._stopped = False
        self._failures.clear()
        self._slots = asyncio.Semaphore(self.workers)
        loop = asyncio.get_running_loop()
        self._dispatcher = loop.create_task(self._dispatch(), name=f"workqueue:{self.name}")
        self._handled_at = None
        if resync is not None:
            self.add_all(resync())
            if every is not None:
                self._handled_at = {}
                self._resync_task = loop.create_task(self._resync(resync, every), name=f"workqueue:{self.name}:resync")

    def add_all(self, keys: Iterable[K]) -> None:
        for key in keys:
            self.add(key)

    async def _resync(self, resync: Callable[[], Iterable[K]], period: float) -> None:
        never = asyncio.Event()
        while True:
            await self._clock.wait(self._clock.now() + period, never)
            self._resync_pass(list(resync()), period)

    def _resync_pass(self, owned: list[K], period: float) -> None:
        """Add the owned keys not handled for half a period, spread over half a period (see :meth:`start`)."""
        now = self._clock.now()
        handled = self._handled_at or {}
        self._handled_at = {key: handled[key] for key in owned if key in handled}  # forget keys no longer owned
        half = period / 2
        stale = [key for key in owned if now - handled.get(key, -math.inf) >= half]
        for index, key in enumerate(stale):
            self._add(key, half * index / len(stale), may_be_urgent=False)
        log.debug("work queue resync", queue=self.name, owned=len(owned), added=len(stale), waiting=len(self))

    async def stop(self, grace: float = 5.0) -> None:
        """Stop now: waiting keys are dropped and running handlers are **cancelled**.

        Cancelling is safe because handlers reconcile towards the observed state
        (whoever runs next redoes the work). Up to ``grace`` real seconds are
        given to handlers to finish unwinding; one that ignores cancellation is
        then left behind with a warning instead of blocking shutdown.
        """
        self._stopped = True
        self._heap.clear()
        self._urgent_heap.clear()
        self._due.clear()
        self._rerun.clear()
        current = asyncio.current_task()
        tasks = [
            t for t in (self._dispatcher, self._resync_task, *self._tasks) if t is not None and t is not current and not t.done()
        ]
        self._dispatcher = None
        self._resync_task = None
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        done, pending = await asyncio.wait(tasks, timeout=grace)
        for task in done:
            if not task.cancelled():
                task.exception()  # retrieved: a stop is not the place to re-raise
        if pending:
            log.warning("work queue handlers did not stop in time", queue=self.name, handlers=len(pending))

    # -- workers ------------------------------------------------------------------

    async def _dispatch(self) -> None:
        """Hand each due key to a free worker slot, one task per handling."""
        slots = self._slots
        while True:
            await slots.acquire()
            try:
                key = await self._next_due()
            except BaseException:
                slots.release()
                raise
            self._running.add(key)
            task = asyncio.get_running_loop().create_task(self._process(key))
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._finished, key, slots))

    async def _next_due(self) -> K:
        while True:
            self._wakeup.clear()
            now = self._clock.now()
            nexts = []
            for heap in (self._urgent_heap, self._heap):
                due = self._live_top(heap)
                if due is not None and due <= now:
                    _, _, key = heapq.heappop(heap)
                    del self._due[key]
                    return key
                if due is not None:
                    nexts.append(due)
            await self._clock.wait(min(nexts) if nexts else None, self._wakeup)

    def _live_top(self, heap: list[tuple[float, int, K]]) -> float | None:
        """The due time of the heap's first live entry (superseded ones are dropped on the way), or None."""
        while heap:
            due, entry_id, key = heap[0]
            live = self._due.get(key)
            if live is not None and live[1] == entry_id:
                return due
            heapq.heappop(heap)
        return None

    async def _process(self, key: K) -> None:
        if self._handled_at is not None:
            self._handled_at[key] = self._clock.now()
        try:
            delay = await self._handler(key)
        except asyncio.CancelledError as exc:
            self._failed(key, exc)  # not swallowed; but unless the queue is stopping, not lost either
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is retried, whatever its type
            self._failed(key, exc)
        else:
            self.forget(key)
            if delay is not None:
                self.add(key, delay)  # still running: becomes its rerun (earliest wins)

    def _finished(self, key: K, slots: asyncio.Semaphore, task: asyncio.Task[None]) -> None:
        """Free the key and its slot, then queue its rerun if one was asked for.

        A done callback rather than a ``finally``: it also runs for a task
        cancelled before its first step, whose body never ran.
        """
        self._tasks.discard(task)
        self._running.discard(key)
        slots.release()
        rerun = self._rerun.pop(key, None)
        if rerun is not None and not self._stopped:
            self._push(key, rerun)

    def _mark_rerun(self, key: K, due: float) -> None:
        if key not in self._rerun or due < self._rerun[key]:
            self._rerun[key] = due

    def _failed(self, key: K, exc: BaseException) -> None:
        """Count a failure, schedule the retry after the backoff, then log it."""
        if self._stopped:
            return
        attempt = self._failures[key] = self._failures.get(key, 0) + 1
        retry_in = self.backoff(attempt)
        # Scheduled before logging: even a failing log call must not lose the key.
        self._mark_rerun(key, self._clock.now() + retry_in)
        message = str(exc).strip().splitlines()
        log.warning(
            "work queue handler failed",
            queue=self.name,
            key=self._format_key(key),
            attempt=attempt,
            error_type=type(exc).__name__,
            error=message[0][:500] if message else "",
            retry_in=round(retry_in, 3),
            # The first unexpected failure in a row carries the traceback (a bug's only clue); the
            # rest stay one line. A stray cancellation's traceback shows only where it was awaited,
            # not who cancelled it (a worker connection closing under a call, a timeout): one line too.
            exc_info=exc if attempt == 1 and not isinstance(exc, (asyncio.CancelledError, *self._expected)) else None,
        )
