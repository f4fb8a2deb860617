"""What every integration answers: the interface between a job kind and the rest.

Upstream Kueue puts each job kind behind ``jobframework``'s interfaces so that
the scheduler and the admission checks never name a concrete kind. The same
holds here: the MultiKueue admission check asks an :class:`Integration` every
kind-specific question (is this object for MultiKueue, and if not why; what to
create on a worker; how to bring its status back; whether it finished; which
Workload it belongs to) and never checks types. Adding a kind means adding a
folder under :mod:`multikueue.integrations` whose adapter satisfies
:class:`Adapter` and whose reconciler offers an :class:`ObjectSource`.

The adapter half is pure (it answers over plain dicts); the object source is
the integration's own store of local objects, kept by its reconciler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from multikueue.api.resources import ResourceRef


class Adapter(Protocol):
    """One job kind (GVK) that MultiKueue can dispatch. All methods are pure."""

    #: ``Kind.version.group``, e.g. ``Job.v1.batch``.
    gvk: str
    kind: str
    api_version: str
    ref: ResourceRef
    #: Whether :meth:`is_finished` can tell at all. When it cannot (an upstream-style entry
    #: without ``finished``), the final status copy does not wait for it.
    tells_finished: bool

    def managed_by_multikueue(self, obj: Mapping[str, Any]) -> bool:
        """Whether the manager's object is to be run by MultiKueue (not by its local controller)."""
        ...

    def unmanaged_reason(self, obj: Mapping[str, Any]) -> str | None:
        """Why ``obj`` is not for MultiKueue (the field and its value), or None when it is."""
        ...

    def workload_name(self, obj: Mapping[str, Any]) -> str:
        """The name of the Workload this project creates (or binds) for ``obj``."""
        ...

    def remote_copy(self, obj: Mapping[str, Any], *, origin: str, workload_name: str) -> dict[str, Any]:
        """The object to create on the worker."""
        ...

    def is_finished(self, remote: Mapping[str, Any]) -> bool:
        """Whether the worker's object reached its final state (its last status can be copied)."""
        ...

    def status_patch(self, local: Mapping[str, Any], remote: Mapping[str, Any]) -> dict[str, Any] | None:
        """Merge patch of the local object's ``/status`` from the worker's copy; None when nothing changes.

        Raises :class:`SyncLater` when the local object is not ready to take
        the worker's status yet (e.g. a Job still suspended on the manager).
        """
        ...

    def spec_patch(self, local: Mapping[str, Any], remote: Mapping[str, Any]) -> dict[str, Any] | None:
        """Merge patch of the worker's copy carrying spec changes made on the manager's object; None when none.

        Most kinds answer None (a copy's spec is fixed at creation). A kind a
        user acts on through its spec while it runs (a Tekton PipelineRun
        cancelled by ``spec.status``) answers with the fields to push.
        """
        ...


class ObjectSource(Protocol):
    """The local objects of one kind, as the integration's watch last saw them."""

    def get(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        ...


@dataclass(frozen=True)
class Integration:
    """A job kind as the admission check uses it: pure answers plus the objects seen."""

    adapter: Adapter
    objects: ObjectSource

    @property
    def ref(self) -> ResourceRef:
        return self.adapter.ref


class SyncLater(Exception):
    """The status cannot be copied yet; try again shortly."""


def not_managed_message(kind: str, namespace: str, name: str, where: str, value: Any, wanted: str) -> str:
    """The message the admission check shows for an object another controller runs."""
    return f"The owner is not managed by Kueue: {kind} {namespace}/{name} has {where} {value!r}, not {wanted!r}"
