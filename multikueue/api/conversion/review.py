"""Converting one object, and answering a ConversionReview (``apiextensions.k8s.io/v1``).

A review whose request is unusable (no uid, an unknown version or kind, an
object that cannot be converted) gets a ``Failed`` response whose message
says why; the apiserver shows that message to the client (``conversion
webhook for kueue.x-k8s.io/v1beta2, Kind=ClusterQueue failed: ...``). Only
a body that is not a ConversionReview at all is the server's problem.
"""

from __future__ import annotations

from typing import Any

from multikueue.api.constants import GROUP
from multikueue.api.conversion.kinds import CONVERTERS, ConversionError
from multikueue.api.conversion.stash import keep_losses, restore
from multikueue.api.conversion.versions import HUB, SPOKE, VERSIONS

__all__ = ["REVIEW_API_VERSION", "convert", "review"]

REVIEW_API_VERSION = "apiextensions.k8s.io/v1"
_UP, _DOWN = f"{GROUP}/{HUB}", f"{GROUP}/{SPOKE}"


def convert(obj: dict[str, Any], api_version: str) -> dict[str, Any]:
    """``obj`` (either version) as ``api_version``; :class:`ConversionError` when it cannot be.

    Converting to the object's own version returns it unchanged.
    """
    if api_version not in VERSIONS:
        raise ConversionError(f"cannot convert to {api_version!r}: this webhook serves {' and '.join(VERSIONS)}")
    current = obj.get("apiVersion")
    kind = obj.get("kind")
    if current not in VERSIONS:
        raise ConversionError(f"cannot convert from {current!r}: this webhook serves {' and '.join(VERSIONS)}")
    if current == api_version:
        return obj
    converter = CONVERTERS.get(str(kind))
    if converter is None:
        raise ConversionError(f"kind {kind!r} has no conversion: it is the same in {' and '.join(VERSIONS)}")
    forward, backward = (converter.up, converter.down) if api_version == _UP else (converter.down, converter.up)

    def plain(source: dict[str, Any], fn: Any, version: str) -> dict[str, Any]:
        out = fn(source)
        out["apiVersion"] = version
        return out

    converted = restore(obj, plain(obj, forward, api_version), api_version)
    return keep_losses(obj, converted, lambda o: plain(o, backward, str(current)))


def _failed(uid: str, message: str) -> dict[str, Any]:
    return {
        "apiVersion": REVIEW_API_VERSION,
        "kind": "ConversionReview",
        "response": {"uid": uid, "result": {"status": "Failure", "message": message}, "convertedObjects": []},
    }


def review(body: Any) -> dict[str, Any]:
    """The ConversionReview answering ``body`` (itself a ConversionReview): converted objects, or a failure."""
    request = body.get("request") if isinstance(body, dict) else None
    if not isinstance(request, dict):
        return _failed("", "not a ConversionReview: the body has no request")
    uid = str(request.get("uid") or "")
    if not uid:
        return _failed("", "ConversionReview request has no uid")
    if body.get("apiVersion") != REVIEW_API_VERSION:
        return _failed(uid, f"ConversionReview {body.get('apiVersion')!r} is not served: use {REVIEW_API_VERSION}")
    desired = request.get("desiredAPIVersion")
    objects = request.get("objects") or []
    converted = []
    for index, obj in enumerate(objects):
        if not isinstance(obj, dict):
            return _failed(uid, f"objects[{index}] is not an object")
        try:
            converted.append(convert(obj, str(desired)))
        except ConversionError as exc:
            name = (obj.get("metadata") or {}).get("name")
            return _failed(uid, f"{obj.get('kind')} {name!r}: {exc}")
    return {
        "apiVersion": REVIEW_API_VERSION,
        "kind": "ConversionReview",
        "response": {"uid": uid, "result": {"status": "Success"}, "convertedObjects": converted},
    }
