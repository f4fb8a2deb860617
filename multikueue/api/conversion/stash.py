"""Lossless round trips: what one version cannot say travels in an annotation of the other.

The plain conversions (:mod:`multikueue.api.conversion.kinds`) lose what
the target version has no field for, as upstream's do: a v1beta2
ClusterQueue's ``concurrentAdmissionPolicy`` read as v1beta1 and written
back would be gone. So, converting an object, we convert the result back
and compare: every top-level field of ``spec``/``status`` (and of the
object, for kinds without a spec) that does not come back is recorded in
the annotation :data:`ANNOTATION` of the converted object, with a digest of
what the plain conversion gave for it. Converting that object back, the
recorded fields are put back, all or none: only if, for each of them, the
plain conversion still gives what its digest says, that is, nobody changed
what they derive from in between (then the other version's edit wins, with
upstream's semantics). The annotation never survives a conversion: the
object it was made for is the only one that carries it.

The apiserver lets conversion webhooks change labels and annotations only,
so the annotation is the one place for it (the pattern Cluster API uses).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ANNOTATION", "keep_losses", "restore"]

Obj = dict[str, Any]

#: Annotation holding the fields the object's version cannot express, for the version it was converted from.
ANNOTATION = "multikueue.x-k8s.io/conversion-data"
#: Keys of an object that are not data: the conversion neither compares nor restores them.
_ENVELOPE = frozenset({"apiVersion", "kind", "metadata"})
_SECTIONS = ("spec", "status")
_ABSENT = {"absent": True}


def _fields(obj: Obj) -> Iterator[str]:
    """Dotted names of the comparable fields: ``spec.x``, ``status.y``, and other top-level keys."""
    for key, value in obj.items():
        if key in _ENVELOPE:
            continue
        if key in _SECTIONS and isinstance(value, dict):
            yield key  # the section itself, so an empty section is kept too
            for inner in value:
                yield f"{key}.{inner}"
        else:
            yield key


def _get(obj: Obj, name: str) -> Any:
    head, _, tail = name.partition(".")
    if head not in obj:
        return _ABSENT
    value = obj[head]
    if not tail:
        return {"value": value} if not (head in _SECTIONS and isinstance(value, dict)) else {"section": True}
    if not isinstance(value, dict) or tail not in value:
        return _ABSENT
    return {"value": value[tail]}


def _set(obj: Obj, name: str, recorded: Any) -> None:
    head, _, tail = name.partition(".")
    if not tail:
        if recorded == _ABSENT:
            obj.pop(head, None)
        elif "section" in recorded:
            if not isinstance(obj.get(head), dict):
                obj[head] = {}
        else:
            obj[head] = copy.deepcopy(recorded["value"])
        return
    if recorded == _ABSENT:
        section = obj.get(head)
        if isinstance(section, dict):
            section.pop(tail, None)
        return
    section = obj.get(head)
    if not isinstance(section, dict):
        section = obj[head] = {}
    section[tail] = copy.deepcopy(recorded["value"])


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _annotations(obj: Obj) -> dict[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _without_annotation(obj: Obj) -> Obj:
    annotations = _annotations(obj)
    if ANNOTATION not in annotations:
        return obj
    out = dict(obj)
    metadata = dict(out["metadata"])
    rest = {k: v for k, v in annotations.items() if k != ANNOTATION}
    if rest:
        metadata["annotations"] = rest
    else:
        metadata.pop("annotations", None)
    out["metadata"] = metadata
    return out


def restore(source: Obj, converted: Obj, target_version: str) -> Obj:
    """``converted`` (the plain conversion of ``source``) with the fields ``source``'s annotation kept for it.

    Restores nothing when the annotation was made for another version, is
    unreadable, or any recorded field's plain value changed since.
    """
    raw = _annotations(source).get(ANNOTATION)
    if not raw:
        return converted
    try:
        data = json.loads(raw)
        fields = data["fields"]
        if data.get("apiVersion") != target_version or not isinstance(fields, dict):
            return converted
        if any(_digest(_get(converted, name)) != entry["digest"] for name, entry in fields.items()):
            return converted
        restored = copy.deepcopy(converted)
        for name, entry in fields.items():
            _set(restored, name, entry["value"])
    except (ValueError, KeyError, TypeError):
        return converted
    return restored


def keep_losses(source: Obj, converted: Obj, back: Callable[[Obj], Obj]) -> Obj:
    """``converted`` with :data:`ANNOTATION` recording what ``back(converted)`` does not give back of ``source``.

    ``source``'s own annotation (made for another conversion) is never carried over.
    """
    source = _without_annotation(source)
    converted = _without_annotation(converted)
    returned = back(converted)
    names = sorted(set(_fields(source)) | set(_fields(returned)))
    lost = {
        name: {"value": _get(source, name), "digest": _digest(_get(returned, name))}
        for name in names
        if _get(source, name) != _get(returned, name)
    }
    if not lost:
        return converted
    out = dict(converted)
    metadata = dict(out.get("metadata") or {})
    annotations = dict(metadata.get("annotations") or {})
    annotations[ANNOTATION] = json.dumps(
        {"apiVersion": source.get("apiVersion"), "fields": lost}, sort_keys=True, separators=(",", ":")
    )
    metadata["annotations"] = annotations
    out["metadata"] = metadata
    return out
