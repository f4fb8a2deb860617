"""The adapter protocol: what MultiKueue needs to know about one job kind."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from multikueue.api.resources import ResourceRef


class Adapter(Protocol):
    """One job kind (GVK) that MultiKueue can dispatch.

    All methods are pure: the admission-check controller does the I/O.
    """

    #: ``Kind.version.group``, e.g. ``Job.v1.batch``.
    gvk: str
    kind: str
    api_version: str
    ref: ResourceRef

    def managed_by_multikueue(self, obj: Mapping[str, Any]) -> bool:
        """Whether the manager's object is to be run by MultiKueue (not by its local controller)."""
        ...

    def remote_copy(self, obj: Mapping[str, Any], *, origin: str, workload_name: str) -> dict[str, Any]:
        """The object to create on the worker."""
        ...

    #: Whether :meth:`is_finished` can tell at all. When it cannot (an upstream-style entry
    #: without ``finished``), the final status copy does not wait for it.
    tells_finished: bool

    def is_finished(self, remote: Mapping[str, Any]) -> bool:
        """Whether the worker's object reached its final state (its last status can be copied)."""
        ...

    def status_patch(self, local: Mapping[str, Any], remote: Mapping[str, Any]) -> dict[str, Any] | None:
        """Merge patch of the local object's ``/status`` from the worker's copy; None when nothing changes.

        Raises :class:`SyncLater` when the local object is not ready to take
        the worker's status yet (e.g. a Job still suspended on the manager).
        """
        ...


class SyncLater(Exception):
    """The status cannot be copied yet; try again shortly."""
