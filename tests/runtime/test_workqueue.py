"""The work queue's contract, driven by a fake clock (no test really sleeps for a delay)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Hashable, Iterator
from contextlib import asynccontextmanager

import pytest
from structlog.testing import capture_logs

from multikueue.runtime import workqueue
from multikueue.runtime.workqueue import FakeClock, MonotonicClock, WorkQueue

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def logs() -> Iterator[list[dict[str, object]]]:
    """The queue's log entries; also keeps them off whatever stream another test configured."""
    with capture_logs() as entries:
        yield entries


async def settle(rounds: int = 100) -> None:
    """Let every ready task run until the loop has nothing left to do right now."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class Recorder:
    """A handler that records calls and concurrency, and can be held mid-run per key.

    ``script[key]`` is a list of outcomes consumed one per call: an exception to
    raise, a float to return (requeue after), or ``None``.
    """

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[tuple[Hashable, float]] = []
        self.active: Counter[Hashable] = Counter()
        self.max_active = 0
        self.max_active_per_key = 0
        self.gates: dict[Hashable, asyncio.Event] = {}
        self.script: dict[Hashable, list[object]] = {}
        self.cancelled: list[Hashable] = []

    def hold(self, *keys: Hashable) -> None:
        for key in keys:
            self.gates[key] = asyncio.Event()

    def release(self, *keys: Hashable) -> None:
        for key in keys:
            self.gates.pop(key).set()

    def keys(self) -> list[Hashable]:
        return [key for key, _ in self.calls]

    async def __call__(self, key: Hashable) -> float | None:
        self.calls.append((key, self.clock.now()))
        self.active[key] += 1
        self.max_active = max(self.max_active, sum(self.active.values()))
        self.max_active_per_key = max(self.max_active_per_key, self.active[key])
        try:
            gate = self.gates.get(key)
            if gate is not None:
                await gate.wait()
            outcomes = self.script.get(key)
            outcome = outcomes.pop(0) if outcomes else None
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome  # type: ignore[return-value]
        except asyncio.CancelledError:
            self.cancelled.append(key)
            raise
        finally:
            self.active[key] -= 1


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def handler(clock: FakeClock) -> Recorder:
    return Recorder(clock)


@asynccontextmanager
async def started(queue: WorkQueue[str]) -> AsyncIterator[WorkQueue[str]]:
    queue.start()
    try:
        yield queue
    finally:
        await queue.stop(grace=1.0)


def make(handler: Recorder, clock: FakeClock, **kwargs: object) -> WorkQueue[str]:
    return WorkQueue("test", handler, clock=clock, **kwargs)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_add_before_start_waits_then_runs(handler: Recorder, clock: FakeClock) -> None:
    queue = make(handler, clock)
    queue.add("a")
    await settle()
    assert handler.calls == [] and len(queue) == 1
    async with started(queue):
        await settle()
        assert handler.calls == [("a", 0.0)]
        assert len(queue) == 0 and queue.running == frozenset()


@pytest.mark.asyncio
async def test_one_key_is_never_handled_twice_at_once(handler: Recorder, clock: FakeClock) -> None:
    async with started(make(handler, clock, workers=8)) as queue:
        handler.hold("a")
        queue.add("a")
        await settle()
        assert queue.running == {"a"}
        for _ in range(5):  # many adds while running: one more run, not five, and not now
            queue.add("a")
            await settle()
        assert handler.keys() == ["a"] and handler.max_active_per_key == 1
        assert len(queue) == 1 and queue.waiting() == {"a": 0.0}
        handler.release("a")
        await settle()
        assert handler.keys() == ["a", "a"]
        assert handler.max_active_per_key == 1 and len(queue) == 0


@pytest.mark.asyncio
async def test_different_keys_run_concurrently_up_to_the_worker_bound(handler: Recorder, clock: FakeClock) -> None:
    keys = [f"k{i}" for i in range(5)]
    async with started(make(handler, clock, workers=2)) as queue:
        handler.hold(*keys)
        for key in keys:
            queue.add(key)
        await settle()
        assert len(queue.running) == 2 and len(queue) == 3
        handler.release(*keys)
        await settle()
        assert sorted(handler.keys()) == keys
        assert handler.max_active == 2


@pytest.mark.asyncio
async def test_adds_while_waiting_coalesce_and_the_earliest_due_wins(handler: Recorder, clock: FakeClock) -> None:
    async with started(make(handler, clock)) as queue:
        queue.add("a", delay=10)
        queue.add("a", delay=3)
        queue.add("a", delay=7)  # later than the current due time: no effect
        queue.add("b", delay=5)
        assert len(queue) == 2 and queue.waiting() == {"a": 3.0, "b": 5.0}
        clock.advance(2.9)
        await settle()
        assert handler.calls == []
        clock.advance(0.1)
        await settle()
        assert handler.calls == [("a", 3.0)]
        clock.advance(2)
        await settle()
        clock.advance(10)
        await settle()
        assert handler.keys() == ["a", "b"] and len(queue) == 0


@pytest.mark.asyncio
async def test_an_immediate_add_overtakes_a_delayed_one(handler: Recorder, clock: FakeClock) -> None:
    async with started(make(handler, clock)) as queue:
        queue.add("a", delay=60)
        await settle()
        queue.add("a")
        await settle()
        assert handler.calls == [("a", 0.0)]
        clock.advance(60)
        await settle()
        assert handler.keys() == ["a"]


@pytest.mark.asyncio
async def test_a_delayed_add_while_running_keeps_its_delay(handler: Recorder, clock: FakeClock) -> None:
    async with started(make(handler, clock)) as queue:
        handler.hold("a")
        queue.add("a")
        await settle()
        queue.add("a", delay=5)
        queue.add("a", delay=8)
        handler.release("a")
        await settle()
        assert handler.keys() == ["a"] and queue.waiting() == {"a": 5.0}
        clock.advance(5)
        await settle()
        assert handler.calls == [("a", 0.0), ("a", 5.0)]


@pytest.mark.asyncio
async def test_the_handler_returned_delay_requeues(handler: Recorder, clock: FakeClock) -> None:
    handler.script["a"] = [5.0, 0.0, None]
    async with started(make(handler, clock)) as queue:
        queue.add("a")
        await settle()
        assert queue.waiting() == {"a": 5.0}
        clock.advance(5)
        await settle()  # returned 0.0: handled again at once, then done
        clock.advance(100)
        await settle()
        assert handler.calls == [("a", 0.0), ("a", 5.0), ("a", 5.0)]
        assert len(queue) == 0


@pytest.mark.asyncio
async def test_any_exception_backs_off_exponentially_up_to_the_cap_then_resets(
    handler: Recorder, clock: FakeClock, logs: list[dict[str, object]]
) -> None:
    handler.script["a"] = [
        ValueError("bad value"),
        RuntimeError("boom"),
        AssertionError(),
        RecursionError("too deep"),
        KeyError("x"),
        None,  # success: the backoff is forgotten
        ValueError("again"),
        None,
    ]
    async with started(make(handler, clock, backoff_base=1.0, backoff_cap=4.0)) as queue:
        queue.add("a")
        await settle()
        for step in (1, 2, 4, 4, 4):  # 1, 2, 4 then capped at 4
            assert queue.waiting() == {"a": clock.now() + step}
            clock.advance(step)
            await settle()
        assert queue.failures("a") == 0 and len(queue) == 0
        queue.add("a")
        await settle()
        assert queue.failures("a") == 1 and queue.waiting() == {"a": clock.now() + 1}  # restarted at the base
        clock.advance(1)
        await settle()
    assert [t for _, t in handler.calls] == [0, 1, 3, 7, 11, 15, 15, 16]
    failures = [e for e in logs if e["event"] == "work queue handler failed"]
    assert [(e["attempt"], e["error_type"], e["retry_in"]) for e in failures] == [
        (1, "ValueError", 1.0),
        (2, "RuntimeError", 2.0),
        (3, "AssertionError", 4.0),
        (4, "RecursionError", 4.0),
        (5, "KeyError", 4.0),
        (1, "ValueError", 1.0),
    ]
    assert failures[0]["queue"] == "test" and failures[0]["key"] == "a" and failures[0]["error"] == "bad value"
    assert failures[0]["log_level"] == "warning"


@pytest.mark.asyncio
async def test_expected_failures_log_one_line_and_others_carry_their_traceback_once(
    handler: Recorder, clock: FakeClock, logs: list[dict[str, object]]
) -> None:
    handler.script["a"] = [ConnectionError("worker down"), ConnectionError("still down")]
    handler.script["b"] = [AssertionError("a bug"), AssertionError("a bug")]
    async with started(make(handler, clock, backoff_base=1.0, expected=(ConnectionError,))) as queue:
        queue.add("a")
        queue.add("b")
        await settle()
        clock.advance(1)
        await settle()
    failures = {(e["key"], e["attempt"]): e for e in logs if e["event"] == "work queue handler failed"}
    assert failures[("a", 1)].get("exc_info") is None and failures[("a", 2)].get("exc_info") is None
    assert isinstance(failures[("b", 1)]["exc_info"], AssertionError) and failures[("b", 2)].get("exc_info") is None


@pytest.mark.asyncio
async def test_a_failure_is_retried_even_when_logging_it_fails(
    handler: Recorder, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    class BrokenLog:
        def warning(self, *args: object, **kwargs: object) -> None:
            raise OSError("log stream closed")

    monkeypatch.setattr(workqueue, "log", BrokenLog())
    handler.script["a"] = [RuntimeError("no")]
    async with started(make(handler, clock, backoff_base=1.0)) as queue:
        queue.add("a")
        await settle()
        assert queue.waiting() == {"a": 1.0}
        clock.advance(1)
        await settle()
        assert handler.keys() == ["a", "a"]


@pytest.mark.asyncio
async def test_a_failing_key_does_not_hold_up_the_others(handler: Recorder, clock: FakeClock) -> None:
    handler.script["bad"] = [RuntimeError("no")] * 3
    async with started(make(handler, clock, workers=1)) as queue:
        queue.add("bad")
        queue.add("good")
        await settle()
        assert handler.keys() == ["bad", "good"] and queue.failures("bad") == 1


@pytest.mark.asyncio
async def test_an_add_while_failing_runs_again_without_waiting_for_the_backoff(
    handler: Recorder, clock: FakeClock
) -> None:
    handler.script["a"] = [RuntimeError("no")]
    async with started(make(handler, clock, backoff_base=10.0)) as queue:
        handler.hold("a")
        queue.add("a")
        await settle()
        queue.add("a")  # new information arrived during the failing run
        handler.release("a")
        await settle()
        assert handler.calls == [("a", 0.0), ("a", 0.0)]


def test_backoff_is_base_doubling_capped_and_never_overflows() -> None:
    queue: WorkQueue[str] = WorkQueue("q", lambda key: asyncio.sleep(0), backoff_base=0.5, backoff_cap=30.0)
    assert [queue.backoff(n) for n in (1, 2, 3, 4, 6, 7, 10_000)] == [0.5, 1.0, 2.0, 4.0, 16.0, 30.0, 30.0]
    with pytest.raises(ValueError):
        WorkQueue("q", lambda key: asyncio.sleep(0), workers=0)


@pytest.mark.asyncio
async def test_a_stray_cancelled_error_propagates_but_the_key_is_retried(handler: Recorder, clock: FakeClock) -> None:
    handler.script["a"] = [asyncio.CancelledError()]
    async with started(make(handler, clock, backoff_base=2.0)) as queue:
        with capture_logs() as logs:
            queue.add("a")
            await settle()
        assert queue.failures("a") == 1 and queue.waiting() == {"a": 2.0}
        [failed] = [entry for entry in logs if entry["event"] == "work queue handler failed"]
        assert failed["error_type"] == "CancelledError" and failed.get("exc_info") is None, "one line, no traceback"
        clock.advance(2)
        await settle()
        assert handler.keys() == ["a", "a"] and queue.failures("a") == 0


@pytest.mark.asyncio
async def test_stop_cancels_running_handlers_and_drops_waiting_keys(handler: Recorder, clock: FakeClock) -> None:
    queue = make(handler, clock, workers=1)
    queue.start()
    handler.hold("a")
    queue.add("a")
    await settle()
    queue.add("a")  # marked to run again
    queue.add("b")
    queue.add("c", delay=5)
    assert queue.running == {"a"} and len(queue) == 3
    before = time.monotonic()
    await queue.stop()
    assert time.monotonic() - before < 1.0
    assert handler.cancelled == ["a"] and queue.stopped
    assert len(queue) == 0 and queue.running == frozenset() and queue.failures("a") == 0
    queue.add("d")  # ignored once stopped
    clock.advance(10)
    await settle()
    assert handler.keys() == ["a"] and len(queue) == 0
    await queue.stop()  # idempotent


@pytest.mark.asyncio
async def test_a_started_queue_cannot_be_started_twice(handler: Recorder, clock: FakeClock) -> None:
    async with started(make(handler, clock)) as queue:
        assert queue.started
        with pytest.raises(RuntimeError):
            queue.start()
    assert not queue.started and queue.stopped


@pytest.mark.asyncio
async def test_a_stopped_queue_restarts_empty_and_handles_new_adds(handler: Recorder, clock: FakeClock) -> None:
    """A replica that loses and regains leadership stops and restarts the same queue."""
    queue = make(handler, clock, workers=2)
    queue.start()
    queue.add("a")
    queue.add("later", delay=5)
    await settle()
    await queue.stop()
    queue.add("while-stopped")  # dropped: the restarting owner resyncs what it owns
    queue.start()
    assert queue.started and not queue.stopped
    queue.add("b")
    queue.add("c", delay=3)
    await settle()
    clock.advance(10)
    await settle()
    assert handler.keys() == ["a", "b", "c"]
    await queue.stop()
    queue.start()  # and again: the worker slots of each run are its own
    for key in "defg":
        queue.add(key)
    await settle()
    assert handler.keys()[3:] == ["d", "e", "f", "g"] and handler.max_active <= 2
    await queue.stop()


@pytest.mark.asyncio
async def test_a_restart_never_runs_a_key_beside_a_handler_left_over_from_the_last_run(
    clock: FakeClock, logs: list[dict[str, object]]
) -> None:
    release = asyncio.Event()
    calls: list[str] = []
    active: Counter[str] = Counter()
    overlap = 0

    async def stubborn(key: str) -> None:
        nonlocal overlap
        calls.append(key)
        active[key] += 1
        overlap = max(overlap, active[key])
        try:
            while key == "a" and len(calls) == 1 and not release.is_set():
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    pass
        finally:
            active[key] -= 1

    queue: WorkQueue[str] = WorkQueue("stubborn", stubborn, clock=clock, workers=1)
    queue.start()
    queue.add("a")
    await settle()
    await queue.stop(grace=0.01)  # "a" ignores its cancellation and keeps running
    queue.start()
    queue.add("a")
    queue.add("b")  # the leftover holds no slot of the new run
    await settle()
    assert calls == ["a", "b"] and queue.running == {"a"}
    release.set()
    await settle()
    assert calls == ["a", "b", "a"] and overlap == 1
    await queue.stop()


@pytest.mark.asyncio
async def test_stop_frees_a_key_whose_handling_was_cancelled_before_it_began(
    handler: Recorder, clock: FakeClock
) -> None:
    queue = make(handler, clock)
    queue.add("a")
    queue.start()
    await asyncio.sleep(0)  # the dispatcher hands "a" to a task that has not run yet
    assert queue.running == {"a"}
    await queue.stop()
    assert queue.running == frozenset() and len(queue) == 0 and handler.calls == []


@pytest.mark.asyncio
async def test_stop_gives_up_on_a_handler_that_ignores_cancellation(
    clock: FakeClock, logs: list[dict[str, object]]
) -> None:
    release = asyncio.Event()

    async def stubborn(key: str) -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                pass

    queue: WorkQueue[str] = WorkQueue("stubborn", stubborn, clock=clock)
    queue.start()
    queue.add("a")
    await settle()
    await queue.stop(grace=0.01)
    assert any(e["event"] == "work queue handlers did not stop in time" and e["handlers"] == 1 for e in logs)
    release.set()
    await settle()


@pytest.mark.asyncio
async def test_stop_before_start_drops_everything(handler: Recorder, clock: FakeClock) -> None:
    queue = make(handler, clock)
    queue.add("a")
    await queue.stop()
    assert len(queue) == 0
    queue.add("b")
    assert len(queue) == 0


@pytest.mark.asyncio
async def test_superseded_heap_entries_do_not_pile_up(handler: Recorder, clock: FakeClock) -> None:
    async with started(make(handler, clock)) as queue:
        for delay in range(1000, 0, -1):  # each add is earlier than the last: a new heap entry
            queue.add("a", delay=delay)
        assert len(queue) == 1 and len(queue._heap) < 200
        clock.advance(1000)
        await settle()
        assert handler.keys() == ["a"]


@pytest.mark.asyncio
async def test_the_real_clock_waits_for_deadlines_and_wakeups() -> None:
    clock = MonotonicClock()
    wakeup = asyncio.Event()
    start = clock.now()
    await clock.wait(start + 0.01, wakeup)
    assert clock.now() - start >= 0.009
    asyncio.get_running_loop().call_later(0.01, wakeup.set)
    await asyncio.wait_for(clock.wait(None, wakeup), timeout=2)

    handled = asyncio.Event()

    async def handle(key: str) -> None:
        handled.set()

    queue: WorkQueue[str] = WorkQueue("real", handle)
    queue.start()
    queue.add("a", delay=0.01)
    await asyncio.wait_for(handled.wait(), timeout=2)
    await queue.stop()


@pytest.mark.asyncio
async def test_resync_adds_the_owned_keys_at_start_and_every_period_until_stop(handler: Recorder, clock: FakeClock) -> None:
    owned = ["a", "b"]
    queue = make(handler, clock)
    queue.start(resync=lambda: list(owned), every=60)
    try:
        await settle()
        assert sorted(handler.keys()) == ["a", "b"]
        owned.append("c")
        clock.advance(59)
        await settle()
        assert len(handler.calls) == 2  # not due yet
        clock.advance(1)
        await settle()
        assert handler.keys()[2:] == ["a"]  # the pass spreads its keys over half a period
        clock.advance(20)
        await settle()
        assert handler.keys()[2:] == ["a", "b", "c"]
    finally:
        await queue.stop(grace=1.0)
    clock.advance(60)
    await settle()
    assert len(handler.calls) == 5  # the timer ended with the stop
    # A restart resyncs at once again (what the stopped queue dropped is owned again).
    queue.start(resync=lambda: ["z"])
    try:
        await settle()
        assert handler.keys()[-1] == "z"
    finally:
        await queue.stop(grace=1.0)


@pytest.mark.asyncio
async def test_a_resync_pass_skips_keys_handled_meanwhile_and_lets_new_events_go_first(
    handler: Recorder, clock: FakeClock
) -> None:
    owned = [f"k{i:03d}" for i in range(100)]
    queue = make(handler, clock)
    queue.start(resync=lambda: list(owned), every=60)
    try:
        await settle()
        assert len(handler.calls) == 100
        clock.advance(40)
        queue.add("k050")  # an event: handled 20 s before the next pass, which leaves it out
        await settle()
        clock.advance(20)  # the pass: 99 keys, spread over 30 s
        await settle()
        assert handler.keys()[101:] == ["k000"]
        queue.add("event")  # due now, not behind the pass
        clock.advance(0.31)  # the next key of the pass is due 30/99 s after the first
        await settle()
        assert handler.keys()[101:] == ["k000", "event", "k001"]
        clock.advance(30)
        await settle()
        resynced = handler.keys()[101:]
        assert sorted(resynced) == sorted([k for k in owned if k != "k050"] + ["event"])
        # Keys no longer owned are forgotten by the next pass.
        owned[:] = ["k000"]
        clock.advance(60)
        await settle()
        assert queue._handled_at is not None and set(queue._handled_at) <= {"k000"}
    finally:
        await queue.stop(grace=1.0)


@pytest.mark.asyncio
async def test_urgent_keys_go_ahead_of_every_due_key_that_is_not(handler: Recorder, clock: FakeClock) -> None:
    """With one worker busy, the keys due meanwhile run urgent first, then by due time. The owner's
    ``urgent`` is asked at each add: a waiting key that became urgent goes ahead at its earlier time, an
    urgent key not due yet waits for its time, a running key's rerun is urgent if it is when queued."""
    urgent: set[str] = set()
    async with started(make(handler, clock, workers=1, urgent=urgent.__contains__)) as queue:
        handler.hold("busy")
        queue.add("busy")
        await settle()
        for index in range(5):
            queue.add(f"old-{index}")
            clock.advance(1)
        urgent.update({"later", "old-3", "end-a", "end-b", "busy"})
        queue.add("later", delay=100)  # urgent, but not due for a while
        queue.add("old-3")  # was waiting: now urgent, at its earlier due time
        queue.add("end-a")
        queue.add("end-b")
        queue.add("busy")  # running: its rerun is queued urgent once it ends
        urgent.discard("old-3")
        queue.add("old-3")  # once urgent, urgent until handled
        assert len(queue) == 9
        handler.release("busy")
        await settle()
        assert handler.keys() == ["busy", "old-3", "end-a", "end-b", "busy", "old-0", "old-1", "old-2", "old-4"]
        clock.advance(100)
        await settle()
        assert handler.keys()[-1] == "later" and len(queue) == 0


@pytest.mark.asyncio
async def test_superseded_urgent_entries_do_not_pile_up(handler: Recorder, clock: FakeClock) -> None:
    flip = iter(range(10_000))
    async with started(make(handler, clock, urgent=lambda _key: next(flip) % 2 == 0)) as queue:
        for delay in range(1000, 0, -1):
            queue.add("a", delay=delay)
        assert len(queue) == 1 and len(queue._heap) + len(queue._urgent_heap) < 200
        clock.advance(1000)
        await settle()
        assert handler.keys() == ["a"]


@pytest.mark.asyncio
async def test_a_resync_pass_does_not_make_keys_urgent(handler: Recorder, clock: FakeClock) -> None:
    """The periodic safety net does not jump the queue: its adds are never urgent, an event's are."""
    urgent = {"n", "m"}
    queue = make(handler, clock, workers=1, urgent=urgent.__contains__)
    queue.start(resync=lambda: ["f", "n"], every=10)
    try:
        await settle()
        assert sorted(handler.keys()) == ["f", "n"]
        handler.hold("busy")
        queue.add("busy")
        await settle()
        clock.advance(10)  # the pass: f due at once, n 2.5 s later
        await settle()
        clock.advance(3)
        queue.add("e")  # an event, not urgent, due after both
        queue.add("m")  # an event for an urgent key: first
        handler.release("busy")
        await settle()
        assert handler.keys()[2:] == ["busy", "m", "f", "n", "e"]
    finally:
        await queue.stop(grace=1.0)
