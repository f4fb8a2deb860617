"""JSON merge patches (RFC 7386) computed from two documents."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def merge_patch(current: Any, wanted: Any) -> Any:
    """The merge patch that turns ``current`` into ``wanted``.

    Keys missing from ``wanted`` become ``null`` (deleted), nested objects are
    diffed recursively so a key that vanished deep inside (e.g.
    ``uncountedTerminatedPods.succeeded``) is deleted too; lists and scalars
    are replaced whole. Returns ``{}`` for two equal objects.
    """
    if not isinstance(current, Mapping) or not isinstance(wanted, Mapping):
        return wanted
    patch: dict[str, Any] = {}
    for key in current.keys() - wanted.keys():
        if current[key] is not None:
            patch[key] = None
    for key, value in wanted.items():
        old = current.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            nested = merge_patch(old, value)
            if nested:
                patch[key] = nested
        elif value is None:
            if old is not None:
                patch[key] = None
        elif old != value:
            patch[key] = value
    return patch
