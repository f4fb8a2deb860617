"""Starting and stopping a ``batch/v1`` Job on its Workload, as JSON merge patches.

Starting a Job unsuspends it and injects what its admission decided (the
flavors' node labels and tolerations, admission checks' pod set updates)
into its pod template; stopping it suspends it and puts the template back
as the Workload recorded it at creation, so the next admission may pick other
flavors. The rules are upstream's (``RunWithPodSetsInfo``, ``Stop``,
``RestorePodSetsInfo`` of the Job integration and ``pkg/podset``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import PodSet, PodSetAssignment, Workload
from multikueue.integrations.batchjob.job import (
    DEFAULT_POD_SET_NAME,
    MANAGED_LABELS,
    POD_SET_LABEL,
    STOPPING_ANNOTATION,
    Job,
    annotations_of,
    as_workload,
    is_suspended,
    min_pods_count,
    section,
    spec_of,
    syncs_completions_with_parallelism,
    template_of,
)

__all__ = [
    "MissingFlavorError",
    "PatchStep",
    "PodSetMergeConflict",
    "start_patch",
    "stop_patch",
    "stop_steps",
]


class PodSetMergeConflict(ValueError):
    """What the admission wants on the pod template contradicts what is there.

    Upstream treats it as permanent: retrying cannot help until the Job or
    the flavors change.
    """


class MissingFlavorError(LookupError):
    """An admitted flavor is not in the flavors given; the caller should retry once its cache has it."""


@dataclass
class _PodSetInfo:
    """What admission adds to one pod set's template (upstream's ``podset.PodSetInfo``)."""

    name: str
    count: int
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)

    def merge(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Iterable[dict[str, Any]] = (),
    ) -> None:
        """Add to this info; a key already set to another value is a conflict."""
        for what, mine, theirs in (
            ("labels", self.labels, labels),
            ("annotations", self.annotations, annotations),
            ("nodeSelector", self.node_selector, node_selector),
        ):
            for key, value in (theirs or {}).items():
                if key in mine and mine[key] != value:
                    raise PodSetMergeConflict(
                        f"conflict for {what}: key {key!r} is {mine[key]!r}, admission wants {value!r}"
                    )
        self.labels.update(labels or {})
        self.annotations.update(annotations or {})
        self.node_selector.update(node_selector or {})
        for toleration in tolerations:
            if toleration not in self.tolerations:
                self.tolerations.append(toleration)


def _flavor_spec(flavor: ResourceFlavor | Mapping[str, Any]) -> tuple[dict[str, str], list[dict[str, Any]]]:
    model = flavor if isinstance(flavor, ResourceFlavor) else ResourceFlavor.from_k8s(flavor)
    tolerations = [t.to_dict() for t in model.spec.tolerations or ()]
    return dict(model.spec.node_labels or {}), tolerations


def _admitted_info(
    workload: Workload, flavors: Mapping[str, ResourceFlavor | Mapping[str, Any]]
) -> dict[str, _PodSetInfo]:
    """Per pod set, what the admission injects: flavors' node labels and tolerations,
    the pod set label, and the admission checks' podSetUpdates (upstream's
    ``getPodSetsInfoFromStatus``)."""
    admission = workload.status.admission
    if admission is None or not admission.pod_set_assignments:
        raise ValueError(f"Workload {workload.name} has no admission to start the Job with")
    counts = {pod_set.name: pod_set.count for pod_set in workload.spec.pod_sets}
    infos: dict[str, _PodSetInfo] = {}
    for assignment in admission.pod_set_assignments:
        infos[assignment.name] = _info_from_assignment(assignment, counts.get(assignment.name, 0), flavors)
    for check in workload.status.admission_checks or ():
        for update in check.pod_set_updates or ():
            info = infos.get(update.name)
            if info is None:
                continue
            try:
                info.merge(
                    labels=update.labels,
                    annotations=update.annotations,
                    node_selector=update.node_selector,
                    tolerations=[t.to_dict() for t in update.tolerations or ()],
                )
            except PodSetMergeConflict as err:
                raise PodSetMergeConflict(f"in admission check {check.name!r}: {err}") from None
    return infos


def _info_from_assignment(
    assignment: PodSetAssignment, default_count: int, flavors: Mapping[str, ResourceFlavor | Mapping[str, Any]]
) -> _PodSetInfo:
    info = _PodSetInfo(
        name=assignment.name,
        count=assignment.count if assignment.count is not None else default_count,
        labels={POD_SET_LABEL: assignment.name},
    )
    seen: set[str] = set()
    for flavor_name in (assignment.flavors or {}).values():
        if flavor_name in seen:
            continue
        seen.add(flavor_name)
        if flavor_name not in flavors:
            raise MissingFlavorError(f"ResourceFlavor {flavor_name!r} is not known")
        node_labels, tolerations = _flavor_spec(flavors[flavor_name])
        # Flavors of one pod set are merged without conflict checks, as upstream does.
        info.node_selector.update(node_labels)
        for toleration in tolerations:
            if toleration not in info.tolerations:
                info.tolerations.append(toleration)
    return info


def _map_patch(node: dict[str, Any], key: str, current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> None:
    """Put into ``node[key]`` the merge patch turning map ``current`` into ``desired``, if they differ."""
    current = dict(current or {})
    if current == dict(desired):
        return
    if not desired:
        node[key] = None
        return
    patch: dict[str, Any] = {k: None for k in current if k not in desired}
    patch.update({k: v for k, v in desired.items() if current.get(k) != v})
    node[key] = patch


def _list_patch(node: dict[str, Any], key: str, current: list[Any] | None, desired: list[Any]) -> None:
    """Lists are replaced whole by a merge patch; ``None`` removes the field."""
    if list(current or ()) != desired:
        node[key] = copy.deepcopy(desired) if desired else None


def _template_patch(
    template: Mapping[str, Any],
    *,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    node_selector: Mapping[str, str],
    tolerations: list[dict[str, Any]],
    scheduling_gates: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The merge patch of ``spec.template`` giving it these labels, annotations and scheduling fields."""
    metadata, pod_spec = section(template, "metadata"), section(template, "spec")
    meta_patch: dict[str, Any] = {}
    _map_patch(meta_patch, "labels", metadata.get("labels"), labels)
    _map_patch(meta_patch, "annotations", metadata.get("annotations"), annotations)
    spec_patch: dict[str, Any] = {}
    _map_patch(spec_patch, "nodeSelector", pod_spec.get("nodeSelector"), node_selector)
    _list_patch(spec_patch, "tolerations", pod_spec.get("tolerations"), tolerations)
    if scheduling_gates is not None:
        _list_patch(spec_patch, "schedulingGates", pod_spec.get("schedulingGates"), scheduling_gates)
    patch: dict[str, Any] = {}
    if meta_patch:
        patch["metadata"] = meta_patch
    if spec_patch:
        patch["spec"] = spec_patch
    return patch


def _pod_set(workload: Workload, name: str) -> PodSet:
    for pod_set in workload.spec.pod_sets:
        if pod_set.name == name:
            return pod_set
    raise ValueError(f"Workload {workload.name} has no pod set {name!r}")


def start_patch(
    job: Job,
    workload: Workload | Mapping[str, Any],
    flavors: Mapping[str, ResourceFlavor | Mapping[str, Any]],
) -> dict[str, Any]:
    """The merge patch that starts the Job on its admitted Workload (upstream's ``RunWithPodSetsInfo``).

    Unsuspends the Job and adds to its pod template the admitted flavors'
    ``nodeLabels`` (to ``nodeSelector``) and ``tolerations``, the label
    ``kueue.x-k8s.io/podset: main`` and the admission checks' podSetUpdates.
    With partial admission (``job-min-parallelism`` set) ``parallelism`` becomes
    the admitted count, and ``completions`` too when the Job asks for it.
    Raises :class:`PodSetMergeConflict` when the template already holds a
    different value for an injected key, and :class:`MissingFlavorError` when a
    flavor is not in ``flavors``.

    The API server accepts template changes only while the Job is suspended
    and has no ``status.startTime``, which holds for a Job waiting for its
    first admission or stopped with :func:`stop_steps`.
    """
    wl = as_workload(workload)
    info = _admitted_info(wl, flavors).get(DEFAULT_POD_SET_NAME)
    if info is None:
        raise ValueError(f"Workload {wl.name} has no assignment for pod set {DEFAULT_POD_SET_NAME!r}")
    template = template_of(job)
    metadata, pod_spec = section(template, "metadata"), section(template, "spec")
    merged = _PodSetInfo(
        name=info.name,
        count=info.count,
        labels=dict(metadata.get("labels") or {}),
        annotations=dict(metadata.get("annotations") or {}),
        node_selector=dict(pod_spec.get("nodeSelector") or {}),
        tolerations=list(pod_spec.get("tolerations") or ()),
    )
    merged.merge(
        labels=info.labels,
        annotations=info.annotations,
        node_selector=info.node_selector,
        tolerations=info.tolerations,
    )
    spec: dict[str, Any] = {"suspend": False}
    if min_pods_count(job) is not None:
        spec["parallelism"] = info.count
        if syncs_completions_with_parallelism(job):
            spec["completions"] = info.count
    template_patch = _template_patch(
        template,
        labels=merged.labels,
        annotations=merged.annotations,
        node_selector=merged.node_selector,
        tolerations=merged.tolerations,
    )
    if template_patch:
        spec["template"] = template_patch
    return {"spec": spec}


def _restore_spec(job: Job, workload: Workload) -> dict[str, Any]:
    """The ``spec`` merge patch putting the template (and partial-admission counts) back as recorded."""
    original = _pod_set(workload, DEFAULT_POD_SET_NAME)
    template = template_of(job)
    current_labels = section(section(template, "metadata"), "labels")
    original_meta, original_spec = section(original.template, "metadata"), section(original.template, "spec")
    labels = dict(original_meta.get("labels") or {})
    # The Job controller's own labels stay: they were never recorded on the Workload.
    labels.update({k: v for k, v in current_labels.items() if k in MANAGED_LABELS})
    spec: dict[str, Any] = {}
    if min_pods_count(job) is not None and spec_of(job).get("parallelism") != original.count:
        spec["parallelism"] = original.count
        if syncs_completions_with_parallelism(job):
            spec["completions"] = original.count
    template_patch = _template_patch(
        template,
        labels=labels,
        annotations=dict(original_meta.get("annotations") or {}),
        node_selector=dict(original_spec.get("nodeSelector") or {}),
        tolerations=list(original_spec.get("tolerations") or ()),
        scheduling_gates=list(original_spec.get("schedulingGates") or ()),
    )
    if template_patch:
        spec["template"] = template_patch
    return spec


def stop_patch(job: Job, workload: Workload | Mapping[str, Any]) -> dict[str, Any]:
    """One merge patch that suspends the Job and restores its template (upstream's stop on eviction).

    The pod template's labels, annotations, nodeSelector, tolerations and
    scheduling gates become those the Workload's pod set recorded at creation
    (the Job controller's own labels are kept), and a partially admitted
    ``parallelism`` goes back to the pod set count.

    The API server takes it in one write only when the Job is already
    suspended without ``status.startTime``; to stop a running Job use
    :func:`stop_steps`, which writes in upstream's order.
    """
    spec = {"suspend": True, **_restore_spec(job, as_workload(workload))}
    return {"spec": spec}


@dataclass(frozen=True)
class PatchStep:
    """One write of a multi-step change: a merge patch for the object or its ``status`` subresource."""

    #: ``""`` for the object itself, ``"status"`` for the status subresource.
    subresource: str
    patch: dict[str, Any]


def stop_steps(job: Job, workload: Workload | Mapping[str, Any]) -> list[PatchStep]:
    """The writes that stop a Job, in order, as upstream's Job ``Stop`` does them.

    1. suspend it, marking it ``kueue.x-k8s.io/stopping: "true"`` (if it is not
       suspended yet);
    2. clear ``status.startTime`` (status subresource) so the API server lets
       the template change;
    3. restore the template and partial-admission counts, and drop the mark.

    Apply them one after the other; if one fails, recompute from the fresh
    Job: the mark makes an interrupted stop resume. Empty when nothing is to do.
    """
    wl = as_workload(workload)
    steps: list[PatchStep] = []
    marked = annotations_of(job).get(STOPPING_ANNOTATION) is not None
    if not is_suspended(job):
        steps.append(
            PatchStep("", {"metadata": {"annotations": {STOPPING_ANNOTATION: "true"}}, "spec": {"suspend": True}})
        )
        marked = True
    if section(job, "status").get("startTime") is not None:
        steps.append(PatchStep("status", {"status": {"startTime": None}}))
    restore: dict[str, Any] = {}
    spec = _restore_spec(job, wl)
    if spec:
        restore["spec"] = spec
    if marked:
        restore["metadata"] = {"annotations": {STOPPING_ANNOTATION: None}}
    if restore:
        steps.append(PatchStep("", restore))
    return steps
