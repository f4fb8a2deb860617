"""When a watch the API server ended cleanly is renewed from the last version rather than relisted."""

from __future__ import annotations

import pytest

from multikueue.runtime.informer import renew_after_close

pytestmark = pytest.mark.unit


def test_a_watch_that_ran_its_course_is_renewed() -> None:
    assert renew_after_close(60.0, 0, 60)
    assert renew_after_close(30.0, 0, 60)


def test_a_watch_closed_early_after_delivering_events_is_renewed_not_relisted() -> None:
    """The API server ends a slow watcher early (its buffer in the watch cache filled up); nothing
    is lost, so the next watch starts from the last version seen: a relist of thousands of objects
    is not needed (seen in the 10,000-Job benchmark: 128 MiB and 90 s of stalled dispatch)."""
    assert renew_after_close(1.0, 1, 60)
    assert renew_after_close(0.01, 250, 60)


def test_a_watch_closed_early_with_no_event_is_broken() -> None:
    """Relisted after a backoff, so a server that ends every watch at once is not asked in a tight loop."""
    assert not renew_after_close(1.0, 0, 60)
    assert not renew_after_close(29.9, 0, 60)
