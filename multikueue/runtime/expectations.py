"""Deletions this controller made whose news has not come back through the watch yet.

A controller that decides from an informer's cache reads its own writes
late: for a moment after it deleted an object the cache still shows it, and
a decision made in that moment acts on an object that is gone. For the
MultiKueue check that moment is dangerous: a Workload evicted and reserved
again at once could adopt the previous attempt's copy on a worker, the one it
just deleted, and create the job there (and then again elsewhere, once the
deletion shows).

Upstream Kueue answers this with "expectations" (the UIDs a reconciler waits
to see go, as in its pod integration; controller-runtime's ReplicaSet does the
same): a reconciler records the UID of what it deleted, readers treat such an
object as gone, and the record is dropped when the watch delivers the
``DELETED`` event. :class:`PendingDeletes` is that record, by UID, so an
object re-created under the same name (a new UID) is never hidden.

Pure bookkeeping, no I/O; the clock is injectable for tests. A record whose
``DELETED`` never comes (the connection was replaced and its new listing
simply does not hold the object) expires after ``ttl`` seconds: by then
every watch has caught up, and hiding it any longer could only hide a
deletion that did not happen (a refused request is never recorded).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["PENDING_DELETE_TTL_SECONDS", "PendingDeletes", "uid_of"]

#: How long a deletion is waited for before the record is dropped.
PENDING_DELETE_TTL_SECONDS = 300.0


def uid_of(obj: Mapping[str, Any] | None) -> str | None:
    """``metadata.uid`` of a JSON object, or None."""
    meta = (obj or {}).get("metadata")
    uid = meta.get("uid") if isinstance(meta, Mapping) else None
    return uid if isinstance(uid, str) and uid else None


class PendingDeletes:
    """UIDs deleted by this controller and not yet seen deleted through the watch."""

    def __init__(self, ttl: float = PENDING_DELETE_TTL_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._since: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._since)

    def expect(self, uid: str | None) -> None:
        """The object with ``uid`` was deleted (the API server accepted the request)."""
        self._prune()
        if uid:
            self._since[uid] = self.clock()

    def observed(self, uid: str | None) -> None:
        """The watch delivered the object's ``DELETED``: nothing left to hide."""
        if uid:
            self._since.pop(uid, None)

    def pending(self, uid: str | None) -> bool:
        """Whether the object with ``uid`` is deleted but may still show in a cache."""
        if not uid:
            return False
        since = self._since.get(uid)
        if since is None:
            return False
        if self.clock() - since >= self.ttl:
            del self._since[uid]
            return False
        return True

    def _prune(self) -> None:
        now = self.clock()
        for uid in [u for u, since in self._since.items() if now - since >= self.ttl]:
            del self._since[uid]
