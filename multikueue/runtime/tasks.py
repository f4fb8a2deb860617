"""Ending background tasks the same way everywhere."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def cancel_and_wait(task: asyncio.Task[object] | asyncio.Future[object] | None) -> None:
    """Cancel ``task`` and wait until it has ended; whatever it raised while ending is dropped.

    Used when stopping: the task's own failure was reported by the task, and a
    stop must finish whatever state the task was in.
    """
    if task is None:
        return
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping anyway
        pass


async def first_of(*waits: Awaitable[Any]) -> None:
    """Wait until the first of ``waits`` (e.g. two ``Event.wait()``) is done; cancel the others."""
    futures = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future in futures:
            future.cancel()
