"""The job kinds one controller knows, and which of them owns a given Workload.

Built-in kinds (``batch/v1`` Job) are fixed at start; external frameworks
come and go with the ConfigMap. Whoever needs "the integration of this
kind" or "the object behind this Workload" asks this set, so no caller
keeps its own list or checks adapter types. Subscribers hear about changes
to the set (the MultiKueue check re-plans and re-watches worker kinds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from multikueue.api import Workload
from multikueue.integrations.base import Integration

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class OwnerLookup:
    """The job behind a Workload, or why there is none to dispatch.

    ``integration`` set and ``owner`` None means the kind is known but the
    object has not been seen yet (its watch may lag): wait, do not reject.
    """

    integration: Integration | None
    owner: Mapping[str, Any] | None
    problem: str | None


class IntegrationSet:
    def __init__(self, builtin: Iterable[Integration] = ()) -> None:
        self._builtin = {(i.adapter.api_version, i.adapter.kind): i for i in builtin}
        self._external: dict[tuple[str, str], Integration] = {}
        self._subscribers: list[Callable[[], None]] = []

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every change of the external kinds."""
        self._subscribers.append(callback)

    def set_external(self, integrations: Iterable[Integration]) -> None:
        """Replace the external frameworks' integrations (a ConfigMap reload)."""
        self._external = {(i.adapter.api_version, i.adapter.kind): i for i in integrations}
        for callback in self._subscribers:
            try:
                callback()
            except Exception as exc:  # noqa: BLE001 - one subscriber's bug must not stop the others
                log.error("integration change not handled", subscriber=repr(callback), error=repr(exc)[:300])

    def all(self) -> list[Integration]:
        """Built-in integrations first, then the external frameworks configured now."""
        return [*self._builtin.values(), *self._external.values()]

    def for_kind(self, api_version: str, kind: str) -> Integration | None:
        key = (api_version, kind)
        return self._builtin.get(key) or self._external.get(key)

    def owner_of(self, wl: Workload) -> OwnerLookup:
        """The integration and object owning ``wl`` (its controller owner reference)."""
        owners = [r for r in wl.metadata.owner_references or [] if r.controller]
        if not owners:
            return OwnerLookup(None, None, "The workload has no owner job to dispatch")
        ref = owners[0]
        integration = self.for_kind(ref.api_version, ref.kind)
        if integration is None:
            return OwnerLookup(None, None, f'No multikueue adapter found for owner kind "{ref.kind}.{ref.api_version}"')
        owner = integration.objects.get(wl.namespace or "", ref.name)
        if owner is None:
            return OwnerLookup(integration, None, None)
        return OwnerLookup(integration, owner, integration.adapter.unmanaged_reason(owner))
