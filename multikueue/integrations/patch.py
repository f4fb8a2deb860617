"""JSON merge patches (RFC 7386) computed from two documents."""

from __future__ import annotations

import copy
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


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with the merge patch ``patch`` applied (RFC 7386), as a new document.

    A ``null`` in the patch deletes the key, a map is merged key by key
    (replacing a target value that is not a map), anything else replaces the
    target value whole. Neither argument is modified; the result shares no
    mutable part with them.
    """
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    base: Mapping[str, Any] = target if isinstance(target, Mapping) else {}
    result: dict[str, Any] = {}
    for key, value in base.items():  # keep the target's key order
        if key not in patch:
            result[key] = copy.deepcopy(value)
        elif patch[key] is not None:
            result[key] = apply_merge_patch(value, patch[key])
    for key, value in patch.items():
        if key not in base and value is not None:
            result[key] = apply_merge_patch(None, value)
    return result
