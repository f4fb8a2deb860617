"""The controller process runs with its own garbage-collector thresholds (why: ``app.GC_THRESHOLDS``)."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from multikueue.operator import app

pytestmark = pytest.mark.unit


def test_the_controller_sets_its_gc_thresholds_before_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int, int]] = []

    def refuse(coro: Any) -> None:
        coro.close()
        seen.append(gc.get_threshold())
        raise app.StartupError("stopped by the test")

    before = gc.get_threshold()
    monkeypatch.setattr(asyncio, "run", refuse)
    try:
        assert app.main(app.ControllerOptions()) == 1
    finally:
        gc.set_threshold(*before)
    assert seen == [app.GC_THRESHOLDS]
