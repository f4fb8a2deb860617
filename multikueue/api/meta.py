"""Base classes and Kubernetes object metadata shared by every Kueue kind.

Objects come from, and go back to, the API server as JSON dicts. The models
use Python names (``queue_name``) with the API's camelCase aliases
(``queueName``), ignore fields they do not know (a newer server may send
more), and serialize with ``by_alias=True, exclude_none=True, mode="json"``
so that an unset optional field is simply absent, as in Go's ``omitempty``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

from multikueue.api.constants import API_VERSION, ConditionStatus
from multikueue.api.schema import Int64, Rule, Schema

__all__ = [
    "Condition",
    "Conditions",
    "KueueModel",
    "KueueObject",
    "LabelSelector",
    "LabelSelectorRequirement",
    "ObjectMeta",
    "OwnerReference",
    "Time",
    "find_condition",
    "format_time",
    "is_condition_true",
    "now",
    "remove_condition",
    "set_condition",
    "version_number",
    "without_managed_fields",
]


def now() -> datetime:
    """The current time in UTC at the API's one-second precision."""
    return datetime.now(UTC).replace(microsecond=0)


def utcnow() -> datetime:
    """The current time in UTC at full precision (for decisions; written times use :func:`now`)."""
    return datetime.now(UTC)


def _as_utc(value: datetime) -> datetime:
    # The API only speaks UTC; a naive datetime from Python code means UTC.
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def version_number(resource_version: str | None) -> int | None:
    """A ``resourceVersion`` as a number, or ``None`` when it is not one.

    Kubernetes 1.35 made the versions of objects of one resource comparable
    (KEP-5504): a positive integer without leading zeros, greater for a later
    write. A server that stores objects elsewhere may still send opaque
    strings; then only equality means anything, and callers fall back to it.
    """
    if not resource_version or not (resource_version.isascii() and resource_version.isdigit()) or resource_version[0] == "0":
        return None
    return int(resource_version)


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with whole seconds, as ``metav1.Time`` serializes."""
    return _as_utc(value).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(value: datetime) -> str:
    """RFC 3339 in UTC with microseconds, as ``metav1.MicroTime`` serializes (a Lease's renewTime)."""
    return _as_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


#: A ``metav1.Time``: a timezone-aware ``datetime`` in Python, RFC 3339 in JSON.
Time = Annotated[
    datetime,
    AfterValidator(_as_utc),
    PlainSerializer(format_time, return_type=str, when_used="json"),
    Schema(format="date-time"),
]


class KueueModel(BaseModel):
    """Base of every API model: camelCase aliases, unknown fields ignored.

    ``crd_rules`` holds CEL rules about the object as a whole; the CRD
    generator puts them on this model's schema node.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
    )

    crd_rules: ClassVar[tuple[Rule, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        """This model as the API server's JSON (camelCase, unset fields absent)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class OwnerReference(KueueModel):
    """``metav1.OwnerReference``: ties a Workload to the job it was made for."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KueueModel):
    """The part of ``metav1.ObjectMeta`` the project reads; anything else is kept as is.

    ``extra="allow"`` keeps fields such as ``managedFields`` so an object
    written back is not stripped of them.
    """

    model_config = ConfigDict(extra="allow")

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None


CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(KueueModel):
    """``metav1.Condition``: one observation about an object's state.

    ``message`` and ``lastTransitionTime`` are required by the API but have
    Python defaults ("" and now) so controllers can build conditions tersely.
    """

    type: Annotated[str, Schema(max_length=316, pattern=CONDITION_TYPE_PATTERN)]
    status: ConditionStatus
    reason: Annotated[str, Schema(min_length=1, max_length=1024, pattern=CONDITION_REASON_PATTERN)]
    message: Annotated[str, Schema(max_length=32768, required=True)] = ""
    last_transition_time: Annotated[Time, Schema(required=True)] = Field(default_factory=now)
    observed_generation: Annotated[Int64, Schema(minimum=0)] | None = None


#: A status' ``conditions``: at most one per type, merged by ``type``.
Conditions = Annotated[list[Condition], Schema(list_type="map", list_map_keys=("type",), max_items=16)]


def find_condition(conditions: Iterable[Condition] | None, condition_type: str) -> Condition | None:
    """The condition of this type, or ``None``."""
    for condition in conditions or ():
        if condition.type == condition_type:
            return condition
    return None


def is_condition_true(conditions: Iterable[Condition] | None, condition_type: str) -> bool:
    """Whether the condition of this type exists with status ``True``."""
    condition = find_condition(conditions, condition_type)
    return condition is not None and condition.status == ConditionStatus.TRUE


def set_condition(conditions: list[Condition], new: Condition) -> bool:
    """Add or update ``new`` in place, like ``apimeta.SetStatusCondition``.

    The transition time moves only when the status changes, so it tells
    when the state last flipped. Returns whether anything changed.
    """
    for index, current in enumerate(conditions):
        if current.type != new.type:
            continue
        updated = current.model_copy(
            update={
                "status": new.status,
                "reason": new.reason,
                "message": new.message,
                "observed_generation": new.observed_generation,
                "last_transition_time": (
                    new.last_transition_time if current.status != new.status else current.last_transition_time
                ),
            }
        )
        if updated == current:
            return False
        conditions[index] = updated
        return True
    conditions.append(new)
    return True


def remove_condition(conditions: list[Condition], condition_type: str) -> bool:
    """Remove the condition of this type in place; returns whether one was removed."""
    for index, current in enumerate(conditions):
        if current.type == condition_type:
            del conditions[index]
            return True
    return False


class LabelSelectorRequirement(KueueModel):
    """One ``matchExpressions`` entry of a label selector."""

    key: str
    operator: str
    values: Annotated[list[str], Schema(list_type="atomic")] | None = None


class LabelSelector(KueueModel):
    """A label selector (metav1.LabelSelector); an empty one matches every object."""

    match_expressions: Annotated[list[LabelSelectorRequirement], Schema(list_type="atomic")] | None = None
    match_labels: dict[str, str] | None = None


def _plain(value: Any) -> Any:
    """A deep copy made of plain dicts and lists."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


class KueueObject(KueueModel):
    """A top-level ``kueue.x-k8s.io/v1beta2`` object.

    Subclasses set the class facts the API server and the CRD generator need:
    ``kind``, ``plural``, ``namespaced`` and ``short_names``.
    """

    api_version: ClassVar[str] = API_VERSION
    kind: ClassVar[str]
    plural: ClassVar[str]
    namespaced: ClassVar[bool]
    short_names: ClassVar[tuple[str, ...]] = ()

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @classmethod
    def from_k8s(cls, obj: Mapping[str, Any], *, owned: bool = False) -> Self:
        """Parse an object as the API server returns it.

        Refuses an object of another kind or API version, because parsing a
        v1beta1 object with v1beta2 models would silently drop fields. The
        input is copied first (mappings such as kopf's bodies become dicts),
        so changing the model, pod templates included, never changes it.

        ``owned``: the caller hands over a document of plain dicts and lists
        that nothing else holds or changes (a watch line or a write's answer
        just decoded), so the copy is skipped: the model may share its parts.
        The copy was half the cost of parsing a Workload, and Workloads are
        parsed once per event and once per write.
        """
        if not owned:
            obj = _plain(obj)
        kind = obj.get("kind")
        if kind is not None and kind != cls.kind:
            raise ValueError(f"expected kind {cls.kind}, got {kind}")
        api_version = obj.get("apiVersion")
        if api_version is not None and api_version != cls.api_version:
            raise ValueError(f"expected apiVersion {cls.api_version} for {cls.kind}, got {api_version}")
        return cls.model_validate(obj)

    def to_k8s(self) -> dict[str, Any]:
        """This object as a JSON dict for the API server (apiVersion, kind, metadata, spec, status).

        An empty ``spec`` or ``status`` is left out, as the API server
        stores such objects (a ResourceFlavor with no spec has none).
        """
        body = self.to_dict()
        for part in ("spec", "status"):
            if body.get(part) == {}:
                del body[part]
        return {"apiVersion": self.api_version, "kind": self.kind, **body}

    @property
    def name(self) -> str:
        """``metadata.name`` ("" when unset)."""
        return self.metadata.name or ""

    @property
    def namespace(self) -> str | None:
        """``metadata.namespace``."""
        return self.metadata.namespace


def without_managed_fields(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """``body`` without ``metadata.managedFields`` (a shallow copy; ``body`` itself when it has none).

    Caches keep every object for as long as it exists, and the field
    managers' records are about half of a Workload's size (11 of 24 KB for
    one the scalability runner finished) and a good part of a Job's; no
    decision reads them, and a write that omits them leaves the server's as
    they are.
    """
    meta = body.get("metadata")
    if not isinstance(meta, Mapping) or "managedFields" not in meta:
        return body
    return {**body, "metadata": {key: value for key, value in meta.items() if key != "managedFields"}}
