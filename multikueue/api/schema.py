"""Markers that carry OpenAPI facts from the models to the CRD generator.

Pydantic validates what Python code builds; the API server validates what
users write. The second needs facts that have no pydantic meaning (list
types, CEL rules, int32 formats), so fields carry a :class:`Schema` marker in
their ``Annotated`` metadata. Pydantic ignores unknown metadata, so the
markers never change how objects parse: an object the server accepted always
parses, even if our Python-side expectations are stricter.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Annotated, Any, Literal

__all__ = [
    "DNS1123_LABEL_PATTERN",
    "DNS1123_SUBDOMAIN_PATTERN",
    "UNSET",
    "Int32",
    "Int64",
    "ObjectName",
    "PodSetName",
    "Rule",
    "Schema",
    "merge_schemas",
]


class _Unset:
    """Marks a :class:`Schema` attribute that was not given (``None`` can be a real default)."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class Rule:
    """A CEL validation rule (``x-kubernetes-validations`` entry) and the message users see."""

    rule: str
    message: str


@dataclass(frozen=True)
class Schema:
    """OpenAPI keywords for one schema node of the generated CRD.

    Put it in a field's ``Annotated`` metadata. Keywords that describe a list
    (``list_type``, ``max_items``) apply to the field's own node; to constrain
    list items or map values, annotate the item type instead, e.g.
    ``list[Annotated[str, Schema(max_length=256)]]``.
    """

    format: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    min_items: int | None = None
    max_items: int | None = None
    max_properties: int | None = None
    list_type: Literal["atomic", "set", "map"] | None = None
    list_map_keys: tuple[str, ...] = ()
    map_type: Literal["atomic", "granular"] | None = None
    rules: tuple[Rule, ...] = ()
    #: Override whether the field is in its object's ``required`` list; by
    #: default a field is required exactly when pydantic requires it.
    required: bool | None = None
    #: The CRD default. Plain scalar Python defaults become CRD defaults on
    #: their own; use this for object defaults such as ``{}``.
    default: Any = UNSET
    #: Emit ``x-kubernetes-int-or-string`` (resource quantities).
    int_or_string: bool = False
    description: str | None = None

    def openapi(self) -> dict[str, Any]:
        """The plain OpenAPI keywords this marker sets (not ``required``/``default``)."""
        keywords: dict[str, Any] = {}
        simple = {
            "format": self.format,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "minLength": self.min_length,
            "maxLength": self.max_length,
            "pattern": self.pattern,
            "minItems": self.min_items,
            "maxItems": self.max_items,
            "maxProperties": self.max_properties,
            "x-kubernetes-list-type": self.list_type,
            "x-kubernetes-map-type": self.map_type,
            "description": self.description,
        }
        for key, value in simple.items():
            if value is not None:
                keywords[key] = value
        if self.list_map_keys:
            keywords["x-kubernetes-list-map-keys"] = list(self.list_map_keys)
        if self.rules:
            keywords["x-kubernetes-validations"] = [{"message": rule.message, "rule": rule.rule} for rule in self.rules]
        return keywords


def merge_schemas(markers: list[Schema]) -> Schema:
    """Combine markers: later ones win per keyword, rules accumulate in order."""
    merged = Schema()
    for marker in markers:
        changes: dict[str, Any] = {}
        for item in fields(Schema):
            value = getattr(marker, item.name)
            if item.name == "rules":
                if value:
                    changes["rules"] = merged.rules + value
            elif value != item.default and value is not UNSET:
                changes[item.name] = value
        merged = replace(merged, **changes)
    return merged


# Kubernetes name formats, shared by every reference to another object.
DNS1123_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

#: A 32-bit integer (most counters and sizes in the Kueue API).
Int32 = Annotated[int, Schema(format="int32")]
#: A 64-bit integer.
Int64 = Annotated[int, Schema(format="int64")]
#: The name of a cluster-scoped or namespaced object (ClusterQueue, ResourceFlavor, LocalQueue, Cohort).
ObjectName = Annotated[str, Schema(max_length=253, pattern=DNS1123_SUBDOMAIN_PATTERN)]
#: The name of a pod set inside a Workload.
PodSetName = Annotated[str, Schema(max_length=63, pattern=DNS1123_LABEL_PATTERN)]
