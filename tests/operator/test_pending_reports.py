"""The scheduling loop's "why it waits" reports: the latest per Workload, oldest first, one write per Workload at a time.

Issue 16: one task per report piled up thousands of tasks (a tenth of the
controller's CPU) each writing a message already outdated. These check the
queue that replaced them; what the writes do on a real API server is covered
by the integration tests (tests/operator/test_admission.py and others).
"""

from __future__ import annotations

import asyncio

from multikueue.core.scheduler import PendingUpdate
from multikueue.operator.scheduling import FigureRefresh, PendingReports


def report(name: str, message: str) -> PendingUpdate:
    return PendingUpdate(("ns", name), "Pending", message)


def test_a_newer_report_replaces_the_queued_one_and_goes_to_the_back() -> None:
    reports = PendingReports()
    reports.add(report("a", "old"))
    reports.add(report("b", "b"))
    reports.add(report("a", "new"))
    assert len(reports) == 2
    first, second = reports.take_now(), reports.take_now()
    assert first is not None and second is not None
    assert (first.key[1], second.key[1], second.message) == ("b", "a", "new")
    assert reports.take_now() is None


def test_a_workload_being_written_is_held_back_until_its_write_ends() -> None:
    reports = PendingReports()
    reports.add(report("a", "m1"))
    taken = reports.take_now()
    assert taken is not None and taken.message == "m1"
    reports.add(report("a", "m2"))  # reported again while m1 is being written
    reports.add(report("b", "m3"))
    taken = reports.take_now()
    assert taken is not None and taken.key[1] == "b"
    assert reports.take_now() is None
    reports.done(("ns", "a"))
    taken = reports.take_now()
    assert taken is not None and taken.message == "m2"


def test_take_waits_for_a_report() -> None:
    async def scenario() -> PendingUpdate:
        reports = PendingReports()
        waiter = asyncio.ensure_future(reports.take())
        await asyncio.sleep(0)
        assert not waiter.done()
        reports.add(report("a", "m"))
        return await asyncio.wait_for(waiter, 1)

    assert asyncio.run(scenario()).message == "m"


def test_settled_waits_for_the_report_being_written_only() -> None:
    async def scenario() -> None:
        reports = PendingReports()
        await asyncio.wait_for(reports.settled(("ns", "a")), 1)  # nothing written: at once
        reports.add(report("a", "m"))
        await asyncio.wait_for(reports.settled(("ns", "a")), 1)  # queued, not yet taken: at once
        assert reports.take_now() is not None
        waiter = asyncio.ensure_future(reports.settled(("ns", "a")))
        other = asyncio.ensure_future(reports.settled(("ns", "b")))
        await asyncio.sleep(0)
        assert other.done() and not waiter.done()
        reports.done(("ns", "a"))
        await asyncio.wait_for(waiter, 1)

    asyncio.run(scenario())


def test_figures_wait_for_the_period_after_the_last_write_of_the_workload() -> None:
    figures = FigureRefresh(period=10.0, kept=100)
    assert figures.wait(("ns", "a"), 100.0) <= 0  # never written: at once
    figures.written(("ns", "a"), 100.0)
    assert figures.wait(("ns", "a"), 103.0) == 7.0
    assert figures.wait(("ns", "b"), 103.0) <= 0  # per Workload
    assert figures.wait(("ns", "a"), 110.0) <= 0


def test_figures_forget_old_writes_once_too_many_are_kept() -> None:
    figures = FigureRefresh(period=10.0, kept=3)
    for i in range(3):
        figures.written(("ns", f"old{i}"), 0.0)
    figures.written(("ns", "new"), 50.0)  # the fourth: those past the period go
    assert len(figures) == 1 and figures.wait(("ns", "new"), 55.0) == 5.0


def test_figures_kept_within_the_period_are_not_rescanned_at_every_write() -> None:
    figures = FigureRefresh(period=10.0, kept=3)
    for i in range(4):
        figures.written(("ns", f"w{i}"), 1.0)  # the fourth passes the bound: nothing is old, all stay
    assert len(figures) == 4
    for i in range(4, 8):
        figures.written(("ns", f"w{i}"), 2.0)  # no drop before twice as many
    assert len(figures) == 8
    figures.written(("ns", "late"), 20.0)  # the ninth: the old ones go
    assert len(figures) == 1
