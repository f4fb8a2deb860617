"""The generic adapter: any kind listed in ``multiKueue.externalFrameworks``.

It does for one compiled entry (:class:`~multikueue.integrations.external.entries.CompiledFramework`)
what the ``batch/v1`` Job adapter does for Jobs, and with only ``name`` set it
behaves as upstream Kueue's generic MultiKueue adapter:

- an object is MultiKueue's when its managed-by field (``managedBy``,
  default ``$.spec.managedBy``) is ``kueue.x-k8s.io/multikueue``;
- the worker copy keeps name, namespace, labels, annotations and the spec,
  loses the managed-by field, owner references and status, and gains the
  ``kueue.x-k8s.io/prebuilt-workload-name`` and
  ``kueue.x-k8s.io/multikueue-origin`` labels;
- the worker object's status is copied back (``statusSync``, default the
  whole ``$.status``).

With ``specSync`` (an extension) named spec fields also go the other way
while the copy exists: a value the user sets on the manager's object later
(Tekton's ``spec.status: Cancelled``) reaches the worker's copy, whose
framework acts on it, and the outcome comes back through ``statusSync``.

The extension fields add a hold value set on the copy, creation patches,
finished/succeeded tests and, with ``workload``, what the manager needs to
build the Workload itself (pod sets, queue name, priority class).

Every method is pure. Evaluation failures raise
:class:`~multikueue.integrations.external.cel.CelEvaluationError` (a ValueError whose text
starts with ``externalFrameworks[<name>].<field>:``); callers log them and
retry on the next event rather than guessing.

Objects are tenants' data: every method that copies, patches or evaluates
one first checks it is within :data:`~multikueue.integrations.external.cel.MAX_DEPTH`
and :data:`~multikueue.integrations.external.cel.MAX_SIZE` (:meth:`GenericAdapter.check`),
so a hostile object gives a ``CelEvaluationError`` with ``bounded=True``
naming it, never a ``RecursionError`` from a copy or a merge patch.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from multikueue.integrations.external.cel import CelEvaluationError, CelInput, CelProgram, cel_input, check_object
from multikueue.integrations.external.entries import (
    DEFAULT_PRIORITY_CLASS,
    DEFAULT_QUEUE_NAME,
    CompiledFramework,
    PodSetSpec,
    parse_pod_sets,
)
from multikueue.integrations.external.jsonpath import JsonPath, JsonPathError, compile_path
from multikueue.integrations.patch import apply_merge_patch, merge_patch
from multikueue.api.constants import Labels, MultiKueue
from multikueue.integrations.base import not_managed_message
from multikueue.integrations.binding import bind, bound_workload_name
from multikueue.integrations.naming import workload_name_for_owner
from multikueue.api.resources import ResourceRef

__all__ = ["POD_SET_CONTAINER", "GenericAdapter", "default_resource_ref", "guess_plural"]

#: Name of the one container of a pod-set template built from ``workload.podSets``.
POD_SET_CONTAINER = "main"

_STATUS = compile_path("$.status")
#: Where queue name and priority class are read for an entry without ``workload``.
_DEFAULT_PATHS = {"queueName": compile_path(DEFAULT_QUEUE_NAME), "priorityClass": compile_path(DEFAULT_PRIORITY_CLASS)}


def guess_plural(kind: str) -> str:
    """Kubernetes' usual plural (lowercase kind + ``s``); discovery knows better when it is reachable."""
    return kind.lower() + "s"


def default_resource_ref(framework: CompiledFramework, *, plural: str | None = None) -> ResourceRef:
    """Where the framework's kind lives, with a guessed plural unless given (assumed namespaced, as jobs are)."""
    return ResourceRef(
        group=framework.group,
        version=framework.version,
        plural=plural or guess_plural(framework.kind),
        namespaced=True,
    )


class GenericAdapter:
    """The :class:`~multikueue.integrations.base.Adapter` of one external framework."""

    def __init__(self, framework: CompiledFramework, ref: ResourceRef) -> None:
        if (ref.group, ref.version) != (framework.group, framework.version):
            raise ValueError(f"{ref.api_version} resource does not match {framework.name}")
        self.framework = framework
        self.ref = ref
        self.gvk = framework.name
        self.kind = framework.kind
        self.api_version = framework.api_version
        self._where = f"externalFrameworks[{framework.name}]"
        self.tells_finished = framework.finished is not None

    def __repr__(self) -> str:
        return f"GenericAdapter({self.gvk}, plural={self.ref.plural})"

    def check(self, obj: Mapping[str, Any]) -> None:
        """:class:`CelEvaluationError` (``bounded=True``) when ``obj`` is too deep or too large to handle."""
        check_object(obj, self._where)

    # --- the Adapter protocol -----------------------------------------------------------------

    def managed_by_multikueue(self, obj: Mapping[str, Any]) -> bool:
        """Whether the managed-by field holds ``kueue.x-k8s.io/multikueue`` (exactly, as upstream)."""
        return self.framework.managed_by.get(obj) == MultiKueue.MANAGED_BY

    def unmanaged_reason(self, obj: Mapping[str, Any]) -> str | None:
        if self.managed_by_multikueue(obj):
            return None
        meta = obj.get("metadata") or {}
        path = self.framework.managed_by
        return not_managed_message(
            self.kind, meta.get("namespace", ""), meta.get("name", ""), path.canonical, path.get(obj), MultiKueue.MANAGED_BY
        )

    def workload_name(self, obj: Mapping[str, Any]) -> str:
        """The Workload bound to ``obj``: its prebuilt one, else the upstream-style name of its own."""
        meta = obj.get("metadata") or {}
        return bound_workload_name(obj) or workload_name_for_owner(
            str(meta.get("name") or ""), str(meta.get("uid") or ""), self.kind, self.framework.group
        )

    def remote_copy(self, obj: Mapping[str, Any], *, origin: str, workload_name: str) -> dict[str, Any]:
        """The object to create on the worker, built in this order:

        1. ``apiVersion`` and ``kind`` of the entry (the version the adapter
           reads and writes), ``metadata`` {name, namespace, labels,
           annotations} and a deep copy of ``spec``; nothing else (no owner
           references, finalizers, status or server-set metadata);
        2. the managed-by field removed (its parent is kept, even if empty),
           so the framework's controller on the worker runs the copy;
        3. the labels ``kueue.x-k8s.io/multikueue-origin=<origin>`` and
           ``kueue.x-k8s.io/prebuilt-workload-name=<workload>`` (an annotation
           of that key when the name is too long for a label value, as the Job
           adapter does);
        4. the ``hold`` value, when the entry has one;
        5. the ``creationPatches``, in order, each evaluated over the copy as
           built so far and applied as a JSON merge patch;
        6. steps 1 and 3 again for name, namespace, apiVersion, kind and the
           two labels: a patch may not detach the copy from its Workload or
           its manager.
        """
        self.check(obj)
        metadata = obj.get("metadata") or {}
        copy_: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {"name": metadata.get("name")},
        }
        if metadata.get("namespace"):
            copy_["metadata"]["namespace"] = metadata["namespace"]
        for key in ("labels", "annotations"):
            if metadata.get(key):
                copy_["metadata"][key] = dict(metadata[key])
        if "spec" in obj:
            copy_["spec"] = copy.deepcopy(obj["spec"])
        self.framework.managed_by.delete(copy_)
        self._bind(copy_, origin=origin, workload_name=workload_name)
        hold = self.framework.hold
        if hold is not None:
            self._set(hold.path, copy_, copy.deepcopy(hold.value), "hold.path")
        for program in self.framework.creation_patches:
            copy_ = apply_merge_patch(copy_, program.evaluate(copy_))
        copy_["apiVersion"] = self.api_version
        copy_["kind"] = self.kind
        if not isinstance(copy_.get("metadata"), dict):
            copy_["metadata"] = {}
        copy_["metadata"]["name"] = metadata.get("name")
        if metadata.get("namespace"):
            copy_["metadata"]["namespace"] = metadata["namespace"]
        self._bind(copy_, origin=origin, workload_name=workload_name)
        return copy_

    def is_finished(self, remote: Mapping[str, Any]) -> bool:
        """The ``finished`` test on the worker's object; False without one.

        Without ``finished`` (upstream's format) the end is known from the
        worker's Workload finishing, as upstream does; a missing field counts
        as not finished.
        """
        return self.finished(remote)[0]

    def status_patch(self, local: Mapping[str, Any], remote: Mapping[str, Any]) -> dict[str, Any] | None:
        """``{"status": <merge patch>}`` bringing the synced parts of the status to the worker's; None if equal.

        Each ``statusSync`` path is compared on its own: ``$.status`` compares
        the whole status, ``$.status.conditions`` only that field (the rest of
        the manager's status is left alone). What the worker no longer has is
        deleted (``null``). Never raises :class:`~multikueue.integrations.base.SyncLater`:
        the manager's object is never started locally, so there is no state
        where its status must wait.
        """
        self.check(remote)
        self.check(local)
        patch: dict[str, Any] = {}
        for path in self.framework.status_sync:
            wanted, current = path.get(remote), path.get(local)  # absent and null are the same here
            if wanted == current:
                continue
            if path.steps == _STATUS.steps:
                delta = merge_patch(current or {}, wanted or {})
                if delta:
                    _deep_merge(patch, delta)
                continue
            if isinstance(current, Mapping) and isinstance(wanted, Mapping):
                delta = merge_patch(current, wanted)
                if not delta:
                    continue
            else:
                delta = copy.deepcopy(wanted)
            _deep_merge(patch, path.nest(delta, below=_STATUS))
        return {"status": patch} if patch else None

    def spec_patch(self, local: Mapping[str, Any], remote: Mapping[str, Any]) -> dict[str, Any] | None:
        """Merge patch of the worker copy bringing its ``specSync`` fields to the manager's; None if nothing to do.

        Only values the manager's object holds are pushed: a field absent (or
        null) there is left as the worker has it, because the copy's own
        values at those paths are not the user's to undo (the ``hold`` value
        our worker controller clears, a default the framework filled in). For
        the same reason the hold value itself is never pushed: a manager's
        object created held would otherwise hold its copy again after the
        release. Maps are merged into the copy's, not replaced.
        """
        if not self.framework.spec_sync:
            return None
        self.check(local)
        self.check(remote)
        hold = self.framework.hold
        patch: dict[str, Any] = {}
        for path in self.framework.spec_sync:
            found, wanted = path.lookup(local)
            if not found or wanted is None:
                continue
            if hold is not None and path.steps == hold.path.steps and wanted == hold.value:
                continue
            current = path.get(remote)
            if isinstance(current, Mapping) and isinstance(wanted, Mapping):
                delta: Any = _without_deletions(merge_patch(current, wanted))
                if not delta:
                    continue
            elif current == wanted:
                continue
            else:
                delta = copy.deepcopy(wanted)
            _deep_merge(patch, path.nest(delta))
        return patch or None

    # --- extras of the generic adapter --------------------------------------------------------

    @property
    def creates_workload(self) -> bool:
        """Whether the manager builds the Workload of such objects itself (the entry has ``workload``)."""
        return self.framework.workload is not None

    @property
    def hold_value(self) -> Any:
        """The value the hold field gets on worker copies; None without ``hold``."""
        return None if self.framework.hold is None else self.framework.hold.value

    def pod_sets(self, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The Workload's ``spec.podSets`` for ``obj`` (v1beta2 shape, camelCase keys).

        From ``workload.podSets`` when given, else one pod set ``main`` of one
        pod requesting ``1`` of ``<plural>.<group>``: a ClusterQueue quota on
        that resource caps how many such objects run at once. Each pod set's
        template has one container, ``main`` (or the pod set's
        ``containerName``, with its ``image`` if given), requesting the pod
        set's requests.
        """
        workload = self.framework.workload
        if workload is not None and workload.pod_sets is not None:
            specs = parse_pod_sets(workload.pod_sets.evaluate(obj))
        else:
            resource = f"{self.ref.plural}.{self.framework.group}"
            specs = [PodSetSpec(name="main", count=1, requests={resource: "1"})]
        return [_pod_set(spec) for spec in specs]

    def queue_name(self, obj: Mapping[str, Any]) -> str | None:
        """The LocalQueue name (``workload.queueName``, default the queue-name label); None when unset or empty."""
        return self._string(obj, "queueName")

    def priority_class(self, obj: Mapping[str, Any]) -> str | None:
        """The WorkloadPriorityClass name (``workload.priorityClass``, default the priority-class label)."""
        return self._string(obj, "priorityClass")

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, bool]:
        """``(finished, succeeded)`` from the entry's CEL tests.

        A missing field makes a test False (an object without a status has
        not finished yet). ``succeeded`` is only evaluated once finished;
        without a ``succeeded`` test a finished object counts as succeeded.
        Other evaluation errors raise :class:`CelEvaluationError`.
        """
        finished, succeeded = self.framework.finished, self.framework.succeeded
        if finished is None:
            return False, False
        data = cel_input(obj, self._where)
        if not _test(finished, data):
            return False, False
        return True, True if succeeded is None else _test(succeeded, data)

    def is_held(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` carries the hold value (so it waits for its Workload's admission)."""
        hold = self.framework.hold
        if hold is None:
            return False
        found, value = hold.path.lookup(obj)
        return found and value == hold.value

    def release_patch(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """The merge patch deleting the hold field (the framework's default then applies); None if not held."""
        if not self.is_held(obj):
            return None
        assert self.framework.hold is not None
        return self.framework.hold.path.nest(None)

    # --- helpers ------------------------------------------------------------------------------

    def _bind(self, copy_: dict[str, Any], *, origin: str, workload_name: str) -> None:
        metadata = copy_["metadata"]
        labels = metadata.get("labels")
        labels = dict(labels) if isinstance(labels, Mapping) else {}
        labels[Labels.MULTIKUEUE_ORIGIN] = origin
        annotations = metadata.get("annotations")
        annotations = dict(annotations) if isinstance(annotations, Mapping) else {}
        bind(labels, annotations, workload_name)
        metadata["labels"] = labels
        if annotations:
            metadata["annotations"] = annotations

    def _set(self, path: JsonPath, doc: dict[str, Any], value: Any, field: str) -> None:
        try:
            path.set(doc, value)
        except JsonPathError as exc:
            raise CelEvaluationError(f"{self._where}.{field}", str(exc)) from None

    def _string(self, obj: Mapping[str, Any], field: str) -> str | None:
        workload = self.framework.workload
        if workload is None:
            path = _DEFAULT_PATHS[field]
        else:
            path = workload.queue_name if field == "queueName" else workload.priority_class
        value = path.get(obj)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise CelEvaluationError(f"{self._where}.workload.{field}", f"{path} holds {type(value).__name__}, not a string")
        return value


def _test(program: CelProgram, data: CelInput) -> bool:
    try:
        return bool(program.evaluate(data))
    except CelEvaluationError as err:
        if err.missing:
            return False
        raise


def _pod_set(spec: PodSetSpec) -> dict[str, Any]:
    container: dict[str, Any] = {"name": spec.container_name or POD_SET_CONTAINER}
    if spec.image is not None:
        container["image"] = spec.image
    container["resources"] = {"requests": dict(spec.requests)}
    pod_set: dict[str, Any] = {
        "name": spec.name,
        "count": spec.count,
        "template": {"spec": {"containers": [container]}},
    }
    if spec.min_count is not None:
        pod_set["minCount"] = spec.min_count
    return pod_set


def _without_deletions(patch: Mapping[str, Any]) -> dict[str, Any]:
    """``patch`` without its ``null`` (delete) entries, at every depth; emptied maps dropped."""
    out: dict[str, Any] = {}
    for key, value in patch.items():
        if isinstance(value, Mapping):
            nested = _without_deletions(value)
            if nested:
                out[key] = nested
        elif value is not None:
            out[key] = value
    return out


def _deep_merge(into: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """Merge two merge patches of disjoint or nested paths (the deeper one refines the shallower)."""
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value) if isinstance(value, Mapping | list) else value
