"""Topology assignments between v1beta1's domain list and v1beta2's compact slices.

v1beta1 lists every domain with its values (one per level) and pod count;
v1beta2 packs them into slices where each level's values are either one
``universal`` value or ``individual`` roots sharing a prefix and suffix, and
pod counts are ``universal`` or ``individual``. Going down expands the
slices in order; going up packs all domains into one slice, as upstream does
when its hostname-prefix encoding gate is off (its default). Other
encodings of the same domains (several slices, a shorter prefix) are kept by
the stash in :mod:`multikueue.api.conversion.stash`, not here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ConversionError", "domains_of", "slices_of"]


class ConversionError(ValueError):
    """An object this version's data cannot be converted from; the message says what is wrong."""


def _value_at(values: dict[str, Any], index: int) -> str:
    if "universal" in values:
        return str(values["universal"])
    individual = values.get("individual") or {}
    roots = individual.get("roots") or []
    if index >= len(roots):
        raise ConversionError(f"topologyAssignment: valuesPerLevel has {len(roots)} roots, domain {index} needs one")
    return f"{individual.get('prefix') or ''}{roots[index]}{individual.get('suffix') or ''}"


def _count_at(counts: dict[str, Any], index: int) -> int:
    if "universal" in counts:
        return int(counts["universal"])
    individual = counts.get("individual") or []
    if index >= len(individual):
        raise ConversionError(f"topologyAssignment: podCounts has {len(individual)} entries, domain {index} needs one")
    return int(individual[index])


def domains_of(assignment: dict[str, Any]) -> list[dict[str, Any]]:
    """v1beta2 slices -> v1beta1 domains (``values`` per level, ``count``), in slice order."""
    levels = assignment.get("levels") or []
    domains = []
    for piece in assignment.get("slices") or []:
        per_level = piece.get("valuesPerLevel") or []
        if len(per_level) != len(levels):
            raise ConversionError(
                f"topologyAssignment: a slice has {len(per_level)} valuesPerLevel entries for {len(levels)} levels"
            )
        for index in range(int(piece.get("domainCount") or 0)):
            domains.append(
                {
                    "values": [_value_at(values, index) for values in per_level],
                    "count": _count_at(piece.get("podCounts") or {}, index),
                }
            )
    return domains


def _common_prefix(values: list[str]) -> str:
    first, last = min(values), max(values)
    size = 0
    while size < min(len(first), len(last)) and first[size] == last[size]:
        size += 1
    return first[:size]


def _level_values(values: list[str]) -> dict[str, Any]:
    """One level's values, compacted: a universal value, or roots with the longest shared prefix and suffix."""
    if len(set(values)) == 1:
        return {"universal": values[0]}
    prefix = _common_prefix(values)
    suffix = _common_prefix([v[::-1] for v in values])[::-1]
    # Prefix and suffix must not overlap in the shortest value ({"ababa", "aba"}).
    shortest = min(len(v) for v in values)
    if len(prefix) + len(suffix) > shortest:
        prefix = prefix[: shortest - len(suffix)]
    individual: dict[str, Any] = {"roots": [v[len(prefix) : len(v) - len(suffix)] for v in values]}
    if prefix:
        individual["prefix"] = prefix
    if suffix:
        individual["suffix"] = suffix
    return {"individual": individual}


def slices_of(levels: list[str], domains: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """v1beta1 domains -> v1beta2 slices: one compact slice (none for no domains)."""
    if not domains:
        return []
    for domain in domains:
        if len(domain.get("values") or []) != len(levels):
            raise ConversionError(
                f"topologyAssignment: a domain has {len(domain.get('values') or [])} values for {len(levels)} levels"
            )
    per_level = [_level_values([str(d["values"][i]) for d in domains]) for i in range(len(levels))]
    counts = [int(d.get("count") or 0) for d in domains]
    pod_counts: dict[str, Any] = {"universal": counts[0]} if len(set(counts)) == 1 else {"individual": counts}
    return [{"domainCount": len(domains), "valuesPerLevel": per_level, "podCounts": pod_counts}]
