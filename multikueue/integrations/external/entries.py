"""The ``multiKueue.externalFrameworks`` entries: their model, their checks, their compiled form.

Upstream Kueue's entry is just ``- name: Kind.version.group``. This project
accepts that unchanged and adds optional fields (DESIGN.md section 7,
documented with examples in ``adapters/README.md``)::

    - name: PipelineRun.v1.tekton.dev
      managedBy: $.spec.managedBy                # JSONPath (this is the default)
      workload:                                  # present: the manager builds the Workload
        podSets: '[{"name": "main", "count": 1, "requests": {"cpu": "1"}}]'   # CEL -> list
        queueName: "$.metadata.labels['kueue.x-k8s.io/queue-name']"           # JSONPath (default)
        priorityClass: "$.metadata.labels['kueue.x-k8s.io/priority-class']"   # JSONPath (default)
      creationPatches: ['{"metadata": {"annotations": {"a": "b"}}}']          # CEL -> map, each a merge patch
      statusSync: ["$.status"]                   # JSONPaths under $.status (default: the whole status)
      specSync: ["$.spec.status"]                # JSONPaths under $.spec copied to the worker copy (default: none)
      finished: 'has(object.status) && ...'      # CEL -> bool
      succeeded: 'object.status...'              # CEL -> bool
      hold: {path: $.spec.status, value: PipelineRunPending}
      webhook:                                   # present: the manager defaults such objects at creation
        defaultQueueName: pipelines              # queue name given to objects that have none (optional)
        namespaceSelector: {matchLabels: {a: b}} # only these namespaces (optional; ANDed with
                                                 # the Configuration's managedJobsNamespaceSelector)

:func:`load_frameworks` checks every entry and compiles its JSONPaths and
CEL expressions once. A bad entry is dropped and reported as
:class:`FrameworkProblem` (entry, field, message); the other entries are kept,
so one typo never stops the frameworks that were working.

Over 500 lines on purpose: the entry model and every check of it stay
together, so the list of what an entry may say is read in one place.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StrictStr, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from multikueue.integrations.external.cel import CelCompileError, CelProgram, ResultType, a_type, compile_cel
from multikueue.integrations.external.jsonpath import JsonPath, JsonPathError, compile_path
from multikueue.api.constants import Labels
from multikueue.api.quantity import parse_quantity
from multikueue.api.schema import DNS1123_LABEL_PATTERN, DNS1123_SUBDOMAIN_PATTERN

__all__ = [
    "DEFAULT_MANAGED_BY",
    "DEFAULT_PRIORITY_CLASS",
    "DEFAULT_QUEUE_NAME",
    "DEFAULT_STATUS_SYNC",
    "GVK",
    "CompiledFramework",
    "CompiledHold",
    "CompiledWebhook",
    "CompiledWorkload",
    "ExternalFrameworkSpec",
    "FrameworkProblem",
    "FrameworkSet",
    "HoldSpec",
    "PodSetSpec",
    "WebhookSpec",
    "WorkloadSpec",
    "compile_framework",
    "load_frameworks",
    "parse_pod_sets",
]

DEFAULT_MANAGED_BY: Final = "$.spec.managedBy"
DEFAULT_QUEUE_NAME: Final = f"$.metadata.labels['{Labels.QUEUE_NAME}']"
DEFAULT_PRIORITY_CLASS: Final = f"$.metadata.labels['{Labels.PRIORITY_CLASS}']"
DEFAULT_STATUS_SYNC: Final = ("$.status",)
#: The built-in Job integration; listing it would give one kind two adapters.
BUILT_IN_GVKS: Final = frozenset({"Job.v1.batch"})
#: A Workload holds at most this many pod sets (``spec.podSets`` in multikueue/api/workload.py).
MAX_POD_SETS: Final = 18

_STATUS = compile_path("$.status")
_SPEC = compile_path("$.spec")
_KIND = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_VERSION = re.compile(r"^v[1-9][0-9]*(?:(?:alpha|beta)[1-9][0-9]*)?$")
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_GROUP = re.compile(rf"^{_DNS_LABEL}(?:\.{_DNS_LABEL})+$")
_POD_SET_NAME = re.compile(DNS1123_LABEL_PATTERN)
_QUEUE_NAME = re.compile(DNS1123_SUBDOMAIN_PATTERN)
#: A queue name is also a label value (the queue-name label), so at most 63 characters.
_QUEUE_NAME_MAX = 63
#: ``matchExpressions`` operators of a namespace selector, and whether each takes ``values``.
_SELECTOR_OPERATORS: Final = {"In": True, "NotIn": True, "Exists": False, "DoesNotExist": False}


# --- the entry as written ------------------------------------------------------------------


class _Entry(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", frozen=True)


class WorkloadSpec(_Entry):
    """``workload``: how the manager builds the Workload of such an object."""

    #: CEL over ``object`` giving ``[{name, count, minCount?, requests}]``; default one unit of ``<plural>.<group>``.
    pod_sets: StrictStr | None = None
    queue_name: StrictStr = DEFAULT_QUEUE_NAME
    priority_class: StrictStr = DEFAULT_PRIORITY_CLASS


class HoldSpec(_Entry):
    """``hold``: the field and value that keep a worker copy from running until its Workload is admitted."""

    path: StrictStr
    value: JsonValue


class WebhookSpec(_Entry):
    """``webhook``: the manager's mutating webhook sets managedBy (and a default queue) on such objects at creation.

    Present (even empty) means on. Only the manager serves it, and only with
    ``--webhook-port``: a worker's objects are copies the manager created.
    """

    #: The queue name written at the queue-name path of an object that has none (None: such objects are left alone).
    default_queue_name: StrictStr | None = None
    #: A label selector on namespaces, ANDed with the Configuration's ``managedJobsNamespaceSelector``.
    namespace_selector: dict[str, JsonValue] | None = None


class ExternalFrameworkSpec(_Entry):
    """One ``multiKueue.externalFrameworks`` entry; only ``name`` is upstream's."""

    name: StrictStr
    managed_by: StrictStr = DEFAULT_MANAGED_BY
    workload: WorkloadSpec | None = None
    creation_patches: list[StrictStr] = Field(default_factory=list)
    status_sync: list[StrictStr] = Field(default_factory=lambda: list(DEFAULT_STATUS_SYNC))
    #: Fields of the spec that follow the manager's object after the copy exists (e.g. a cancellation).
    spec_sync: list[StrictStr] = Field(default_factory=list)
    finished: StrictStr | None = None
    succeeded: StrictStr | None = None
    hold: HoldSpec | None = None
    webhook: WebhookSpec | None = None

    @field_validator("workload", "webhook", mode="before")
    @classmethod
    def _present_means_on(cls, value: Any) -> Any:
        # ``workload:`` (or ``webhook:``) with nothing under it still turns the feature on.
        return {} if value is None else value

    def extended_fields(self) -> list[str]:
        """The extension fields this entry sets (camelCase), in declaration order."""
        return [
            to_camel(name)
            for name in type(self).model_fields
            if name != "name" and name in self.model_fields_set
        ]


# --- the compiled form ---------------------------------------------------------------------


@dataclass(frozen=True)
class GVK:
    """``Kind.version.group`` split in its parts."""

    kind: str
    version: str
    group: str

    def __str__(self) -> str:
        return f"{self.kind}.{self.version}.{self.group}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @classmethod
    def parse(cls, name: str) -> GVK:
        """Split and check ``name``; ValueError saying which part is wrong."""
        if name in BUILT_IN_GVKS:
            raise ValueError("batch/v1 Job is built in (the Job adapter); remove this entry")
        parts = name.split(".", 2)
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"{name!r} is not Kind.version.group (e.g. PipelineRun.v1.tekton.dev)")
        kind, version, group = parts
        if not _KIND.match(kind):
            raise ValueError(f"kind {kind!r} must start with an uppercase letter and hold only letters and digits")
        if not _VERSION.match(version):
            raise ValueError(f"version {version!r} must look like v1, v1beta1 or v1alpha2")
        if len(group) > 253 or not _GROUP.match(group):
            raise ValueError(
                f"group {group!r} must be a lowercase DNS subdomain with at least one dot "
                "(the core group and Kubernetes' built-in groups cannot be listed)"
            )
        return cls(kind, version, group)


@dataclass(frozen=True)
class CompiledWorkload:
    """``workload`` compiled: the pod-set expression (None: the default pod set) and where queue and priority are."""

    pod_sets: CelProgram | None
    queue_name: JsonPath
    priority_class: JsonPath


@dataclass(frozen=True)
class CompiledHold:
    path: JsonPath
    value: Any


@dataclass(frozen=True)
class CompiledWebhook:
    """``webhook`` checked: where the queue name goes, the default (None: none) and the namespace selector."""

    queue_name: JsonPath
    default_queue_name: str | None
    namespace_selector: Mapping[str, Any] | None


@dataclass(frozen=True)
class CompiledFramework:
    """One valid entry, ready for :class:`multikueue.integrations.external.adapter.GenericAdapter`."""

    name: str
    gvk: GVK
    spec: ExternalFrameworkSpec
    managed_by: JsonPath
    workload: CompiledWorkload | None
    creation_patches: tuple[CelProgram, ...]
    status_sync: tuple[JsonPath, ...]
    finished: CelProgram | None
    succeeded: CelProgram | None
    hold: CompiledHold | None
    #: ``specSync``: spec fields pushed from the manager's object to the worker copy while it runs.
    spec_sync: tuple[JsonPath, ...] = ()
    #: ``webhook``: the manager defaults managedBy (and the queue name) at creation; None: it does not.
    webhook: CompiledWebhook | None = None

    @property
    def kind(self) -> str:
        return self.gvk.kind

    @property
    def version(self) -> str:
        return self.gvk.version

    @property
    def group(self) -> str:
        return self.gvk.group

    @property
    def api_version(self) -> str:
        return self.gvk.api_version

    @property
    def extended_fields(self) -> list[str]:
        """Our extension fields the entry uses; empty for an upstream-format entry."""
        return self.spec.extended_fields()


@dataclass(frozen=True)
class FrameworkProblem:
    """Why an entry was dropped: ``externalFrameworks[<entry>].<field>: <message>``."""

    entry: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"externalFrameworks[{self.entry}].{self.field}: {self.message}"


@dataclass
class FrameworkSet:
    """The usable entries by name, and the problems of the others."""

    frameworks: dict[str, CompiledFramework] = field(default_factory=dict)
    problems: list[FrameworkProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


# --- pod sets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodSetSpec:
    """One pod set as the ``workload.podSets`` expression gives it, checked."""

    name: str
    count: int
    requests: dict[str, str]
    min_count: int | None = None
    #: The template's one container: its name (None: the adapter's default, ``main``) and image (None: none).
    container_name: str | None = None
    image: str | None = None


_POD_SET_KEYS: Final = ("name", "count", "minCount", "requests", "containerName", "image")


def parse_pod_sets(value: Any) -> list[PodSetSpec]:
    """Check the result of a ``workload.podSets`` expression; ValueError naming the first wrong item.

    Each item is a map with ``name`` (a DNS label, unique), ``count`` (int >=
    1), ``requests`` (resource name -> quantity as a string or an int) and
    optionally ``minCount`` (1 <= minCount <= count, for partial admission),
    ``containerName`` (a DNS label) and ``image`` (a non-empty string) of the
    template's one container, for Workloads that must equal another
    integration's (tekton-kueue's ``dummy`` container).
    """
    if not isinstance(value, list):
        raise ValueError(f"pod sets must be a list, got {a_type(value)}")
    if not value:
        raise ValueError("pod sets must not be empty (a Workload has at least one pod set)")
    if len(value) > MAX_POD_SETS:
        raise ValueError(f"{len(value)} pod sets; a Workload holds at most {MAX_POD_SETS}")
    out: list[PodSetSpec] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        where = f"pod set [{index}]"
        if not isinstance(item, Mapping):
            raise ValueError(f"{where} must be a map, got {a_type(item)}")
        unknown = [key for key in item if key not in _POD_SET_KEYS]
        if unknown:
            raise ValueError(f"{where} has unknown key {unknown[0]!r}; a pod set has {', '.join(_POD_SET_KEYS)}")
        for key in ("name", "count", "requests"):
            if key not in item:
                raise ValueError(f"{where} has no {key!r}")
        name = item["name"]
        if not isinstance(name, str) or len(name) > 63 or not _POD_SET_NAME.match(name):
            raise ValueError(f"{where}: name {name!r} must be a DNS label (lowercase letters, digits, '-')")
        if name in seen:
            raise ValueError(f"{where}: name {name!r} is used twice")
        seen.add(name)
        count = item["count"]
        if not _is_int(count) or count < 1:
            raise ValueError(f"{where} ({name}): count must be an int >= 1, got {count!r}")
        min_count = item.get("minCount")
        if min_count is not None and (not _is_int(min_count) or not 1 <= min_count <= count):
            raise ValueError(f"{where} ({name}): minCount must be an int from 1 to count ({count}), got {min_count!r}")
        container_name = item.get("containerName")
        if container_name is not None and (
            not isinstance(container_name, str) or len(container_name) > 63 or not _POD_SET_NAME.match(container_name)
        ):
            raise ValueError(f"{where} ({name}): containerName {container_name!r} must be a DNS label")
        image = item.get("image")
        if image is not None and (not isinstance(image, str) or not image.strip()):
            raise ValueError(f"{where} ({name}): image must be a non-empty string, got {image!r}")
        requests = _requests(item["requests"], f"{where} ({name})")
        out.append(PodSetSpec(name, count, requests, min_count, container_name, image))
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _requests(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: requests must be a map of resource name to quantity, got {a_type(value)}")
    out: dict[str, str] = {}
    for resource, quantity in value.items():
        if not isinstance(quantity, str) and not _is_int(quantity):
            raise ValueError(f"{where}: request {resource!r} must be a quantity string or an int, got {quantity!r}")
        try:
            parsed = parse_quantity(quantity)
        except ValueError as exc:
            raise ValueError(f"{where}: request {resource!r}: {exc}") from None
        if parsed < 0:
            raise ValueError(f"{where}: request {resource!r} must not be negative, got {quantity!r}")
        out[str(resource)] = str(quantity)
    return out


# --- loading -------------------------------------------------------------------------------


def load_frameworks(entries: Iterable[Any]) -> FrameworkSet:
    """Check and compile every entry; keep the valid ones, report the others.

    ``entries`` are the raw entries (maps, as in the YAML) or the
    ``ExternalFramework`` models of :mod:`multikueue.api.configuration` (their
    ``entry()``). A later entry naming the same GVK as an earlier one is a
    problem (the first one wins, whatever its own state), as is ``Job.v1.batch``.
    """
    result = FrameworkSet()
    claimed: dict[str, int] = {}
    for index, raw in enumerate(entries):
        entry = raw.entry() if hasattr(raw, "entry") and callable(raw.entry) else raw
        label = _label(entry, index)
        if not isinstance(entry, Mapping):
            result.problems.append(
                FrameworkProblem(label, "name", f"an entry must be a map with at least `name`, got {a_type(entry)}")
            )
            continue
        name = entry.get("name")
        if isinstance(name, str) and name:
            if name in claimed:
                result.problems.append(
                    FrameworkProblem(
                        label, "name", f"duplicate of entry #{claimed[name]}; only the first entry of a GVK is used"
                    )
                )
                continue
            claimed[name] = index
        try:
            spec = ExternalFrameworkSpec.model_validate(dict(entry))
        except ValidationError as exc:
            result.problems.extend(_validation_problems(label, exc))
            # The GVK may be wrong too: say so now rather than after the next edit.
            if isinstance(name, str):
                result.problems.extend(_gvk_problems(label, name))
            continue
        compiled, problems = compile_framework(spec)
        result.problems.extend(problems)
        if compiled is not None:
            result.frameworks[compiled.name] = compiled
    return result


def compile_framework(spec: ExternalFrameworkSpec) -> tuple[CompiledFramework | None, list[FrameworkProblem]]:
    """Compile one entry; ``(None, problems)`` when anything is wrong (every problem is reported at once)."""
    compiler = _Compiler(spec)
    return compiler.compile(), compiler.problems


class _Compiler:
    """Compiles one entry, collecting a problem per bad field instead of stopping at the first."""

    def __init__(self, spec: ExternalFrameworkSpec) -> None:
        self.spec = spec
        self.problems: list[FrameworkProblem] = []

    def compile(self) -> CompiledFramework | None:
        spec = self.spec
        gvk = self._gvk()
        managed_by = self._path("managedBy", spec.managed_by, writable=True)
        workload = self._workload()
        patches = tuple(
            program
            for index, source in enumerate(spec.creation_patches)
            if (program := self._cel(f"creationPatches[{index}]", source, ResultType.MAP)) is not None
        )
        status_sync = tuple(
            path
            for index, text in enumerate(spec.status_sync)
            if (path := self._status_path(f"statusSync[{index}]", text)) is not None
        )
        finished = self._cel("finished", spec.finished, ResultType.BOOL) if spec.finished is not None else None
        succeeded = self._cel("succeeded", spec.succeeded, ResultType.BOOL) if spec.succeeded is not None else None
        if spec.succeeded is not None and spec.finished is None:
            self._problem("succeeded", "needs `finished` too: `succeeded` is only asked once the object has finished")
        hold = self._hold(managed_by)
        spec_sync = tuple(
            path
            for index, text in enumerate(spec.spec_sync)
            if (path := self._spec_path(f"specSync[{index}]", text, managed_by)) is not None
        )
        webhook = self._webhook(managed_by, workload)
        if self.problems or gvk is None or managed_by is None:
            return None
        return CompiledFramework(
            name=spec.name,
            gvk=gvk,
            spec=spec,
            managed_by=managed_by,
            workload=workload,
            creation_patches=patches,
            status_sync=status_sync,
            finished=finished,
            succeeded=succeeded,
            hold=hold,
            spec_sync=spec_sync,
            webhook=webhook,
        )

    def _problem(self, where: str, message: str) -> None:
        self.problems.append(FrameworkProblem(self.spec.name, where, message))

    def _gvk(self) -> GVK | None:
        try:
            return GVK.parse(self.spec.name)
        except ValueError as exc:
            self._problem("name", str(exc))
            return None

    def _path(self, where: str, text: str, *, writable: bool = False) -> JsonPath | None:
        try:
            path = compile_path(text)
        except JsonPathError as exc:
            self._problem(where, str(exc))
            return None
        if not path.steps:
            self._problem(where, "names the whole object ($); it must name one field")
            return None
        if writable and path.has_indices:
            self._problem(where, f"{text!r} has a list index; this field is written, so it must name map keys only")
            return None
        return path

    def _status_path(self, where: str, text: str) -> JsonPath | None:
        path = self._path(where, text)
        if path is None:
            return None
        if not path.is_within(_STATUS):
            self._problem(where, f"{text!r} is not under $.status; only the status is copied back (through /status)")
            return None
        if path.has_indices:
            self._problem(where, f"{text!r} has a list index; copy the whole list instead (a merge patch replaces lists)")
            return None
        return path

    def _spec_path(self, where: str, text: str, managed_by: JsonPath | None) -> JsonPath | None:
        path = self._path(where, text, writable=True)
        if path is None:
            return None
        if not path.is_within(_SPEC) or path.steps == _SPEC.steps:
            self._problem(where, f"{text!r} is not a field under $.spec; only spec fields follow the manager's object")
            return None
        if managed_by is not None and (path.is_within(managed_by) or managed_by.is_within(path)):
            self._problem(where, f"{text!r} holds the managedBy field, which the worker copy must not have")
            return None
        return path

    def _cel(self, where: str, source: str, result_type: ResultType) -> CelProgram | None:
        validate = parse_pod_sets if where == "workload.podSets" else None
        try:
            return compile_cel(
                source, result_type, where=f"externalFrameworks[{self.spec.name}].{where}", validate=validate
            )
        except CelCompileError as exc:
            self._problem(where, str(exc))
            return None

    def _workload(self) -> CompiledWorkload | None:
        spec = self.spec.workload
        if spec is None:
            return None
        pod_sets = self._cel("workload.podSets", spec.pod_sets, ResultType.LIST) if spec.pod_sets is not None else None
        queue_name = self._path("workload.queueName", spec.queue_name)
        priority_class = self._path("workload.priorityClass", spec.priority_class)
        if queue_name is None or priority_class is None:
            return None
        return CompiledWorkload(pod_sets, queue_name, priority_class)

    def _webhook(self, managed_by: JsonPath | None, workload: CompiledWorkload | None) -> CompiledWebhook | None:
        spec = self.spec.webhook
        if spec is None:
            return None
        if managed_by is not None and managed_by.is_within(_STATUS):
            self._problem("webhook", f"managedBy {managed_by.canonical!r} is under $.status, which a webhook cannot set")
        queue_name = workload.queue_name if workload is not None else compile_path(DEFAULT_QUEUE_NAME)
        default = spec.default_queue_name
        if default is not None:
            if len(default) > _QUEUE_NAME_MAX or not _QUEUE_NAME.match(default):
                self._problem(
                    "webhook.defaultQueueName",
                    f"{default!r} is not a LocalQueue name: lowercase letters, digits, '-' and '.', "
                    f"starting and ending with a letter or digit, at most {_QUEUE_NAME_MAX} characters",
                )
            if queue_name.has_indices:
                self._problem(
                    "webhook.defaultQueueName",
                    f"the queue name is read at {queue_name.canonical!r}, which has a list index; "
                    "the default is written there, so workload.queueName must name map keys only",
                )
            elif managed_by is not None and queue_name.steps == managed_by.steps:
                self._problem("webhook.defaultQueueName", "the queue name path is the managedBy field")
        selector = spec.namespace_selector
        if selector is not None:
            for message in _selector_problems(selector):
                self._problem("webhook.namespaceSelector", message)
        return CompiledWebhook(queue_name, default, selector)

    def _hold(self, managed_by: JsonPath | None) -> CompiledHold | None:
        spec = self.spec.hold
        if spec is None:
            return None
        if spec.value is None:
            self._problem("hold.value", "must not be null: the hold value is set on the copy, and null would delete it")
        path = self._path("hold.path", spec.path, writable=True)
        if path is None:
            return None
        if path.is_within(_STATUS):
            self._problem("hold.path", f"{spec.path!r} is under $.status, which a created object cannot set")
            return None
        if managed_by is not None and path.steps == managed_by.steps:
            self._problem("hold.path", "is the managedBy field, which the worker copy must not have")
            return None
        return CompiledHold(path, spec.value)


def _selector_problems(selector: Mapping[str, Any]) -> list[str]:
    """What is wrong with a label selector (``matchLabels``, ``matchExpressions``), as the API server would refuse it."""
    problems = []
    unknown = [key for key in selector if key not in ("matchLabels", "matchExpressions")]
    if unknown:
        problems.append(f"unknown key {unknown[0]!r}; a label selector has matchLabels and matchExpressions")
    labels = selector.get("matchLabels")
    if labels is not None and (
        not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values())
    ):
        problems.append(f"matchLabels must be a map of label to string value, got {labels!r}")
    expressions = selector.get("matchExpressions")
    if expressions is None:
        return problems
    if not isinstance(expressions, list):
        return [*problems, f"matchExpressions must be a list, got {a_type(expressions)}"]
    for index, item in enumerate(expressions):
        where = f"matchExpressions[{index}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str) or not item.get("key"):
            problems.append(f"{where} must be a map with a non-empty `key`")
            continue
        operator = item.get("operator")
        if operator not in _SELECTOR_OPERATORS:
            problems.append(f"{where}: operator {operator!r} must be one of {', '.join(_SELECTOR_OPERATORS)}")
            continue
        values = item.get("values")
        if _SELECTOR_OPERATORS[operator]:
            if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
                problems.append(f"{where}: operator {operator} needs `values`, a non-empty list of strings")
        elif values:
            problems.append(f"{where}: operator {operator} takes no `values`")
    return problems


def _label(entry: Any, index: int) -> str:
    """How messages name an entry: its ``name`` when it has a usable one, else its position."""
    if isinstance(entry, Mapping):
        name = entry.get("name")
        if isinstance(name, str) and name.strip():
            return name
    return f"#{index}"


def _gvk_problems(label: str, name: str) -> list[FrameworkProblem]:
    try:
        GVK.parse(name)
    except ValueError as exc:
        return [FrameworkProblem(label, "name", str(exc))]
    return []


_KNOWN_FIELDS: Final[dict[tuple[str, ...], list[str]]] = {
    (): [to_camel(name) for name in ExternalFrameworkSpec.model_fields],
    ("workload",): [to_camel(name) for name in WorkloadSpec.model_fields],
    ("hold",): [to_camel(name) for name in HoldSpec.model_fields],
    ("webhook",): [to_camel(name) for name in WebhookSpec.model_fields],
}


def _validation_problems(label: str, exc: ValidationError) -> list[FrameworkProblem]:
    problems = []
    for error in exc.errors():
        loc = error["loc"]
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".") or "name"
        kind = error["type"]
        given = error.get("input")
        if kind == "extra_forbidden":
            parent = tuple(str(part) for part in loc[:-1])
            known = _KNOWN_FIELDS.get(parent, [])
            guess = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"; did you mean {guess[0]!r}?" if guess else ""
            message = f"unknown field (known: {', '.join(known)}){hint}"
        elif kind == "missing":
            message = "is required"
        elif kind == "string_type":
            message = f"must be a string, got {a_type(given)}"
        elif kind == "list_type":
            message = f"must be a list, got {a_type(given)}"
        elif kind in ("model_type", "model_attributes_type", "dict_type"):
            message = f"must be a map, got {a_type(given)}"
        else:
            message = error["msg"]
        problems.append(FrameworkProblem(label, where, message))
    return problems
