"""What differs between ``kueue.x-k8s.io/v1beta1`` and ``v1beta2``, kind by kind: the plain conversions.

Each kind has an ``up`` (v1beta1 -> v1beta2) and a ``down`` (v1beta2 ->
v1beta1) function on the object as a dict, with upstream Kueue v0.19.2's
semantics (``apis/kueue/v1beta1/*_conversion.go``):

- ClusterQueue: ``spec.cohort`` <-> ``spec.cohortName``; v1beta1's
  ``spec.admissionChecks`` (names) becomes ``spec.admissionChecksStrategy``
  (one rule per name, no flavors); the deprecated ``flavorFungibility`` values
  ``Preempt``/``Borrow`` become ``MayStopSearch``; ``spec.concurrentAdmissionPolicy``
  (v1beta2 only) and ``status.pendingWorkloadsStatus``/``status.fairSharing.
  admissionFairSharingStatus`` (v1beta1 only) have no counterpart.
- Cohort: ``status.fairSharing.admissionFairSharingStatus`` is v1beta1 only.
- LocalQueue: ``status.flavorUsage`` <-> ``status.flavorsUsage``;
  ``status.flavors`` is v1beta1 only.
- MultiKueueCluster: ``spec.kubeConfig``/``spec.clusterProfileRef`` <->
  ``spec.clusterSource.kubeConfig``/``spec.clusterSource.clusterProfileRef``.
- MultiKueueConfig: ``spec.quotaManagement`` is v1beta2 only.
- AdmissionCheck: ``spec.retryDelayMinutes`` is v1beta1 only (deprecated, ignored).
- Workload: ``spec.priorityClassSource`` + ``spec.priorityClassName`` <->
  ``spec.priorityClassRef`` (group/kind/name); ``status.accumulatedPastExexcutionTimeSeconds``
  (upstream's v1beta1 spelling) <-> ``status.accumulatedPastExecutionTimeSeconds``;
  topology assignments' ``domains`` <-> ``slices``; ``spec.preemptionGates``,
  ``status.preemptionGates`` and ``topologyRequest.podsetSliceRequiredTopologyConstraints``
  are v1beta2 only.

These functions lose what the other version cannot say, exactly as upstream;
:mod:`multikueue.api.conversion.stash` is what makes round trips lossless.
They never touch ``metadata`` and leave ``apiVersion`` to the caller.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from multikueue.api.conversion.topology import ConversionError, domains_of, slices_of

__all__ = ["CONVERTERS", "Converter", "ConversionError"]

Obj = dict[str, Any]

#: v1beta1's ``priorityClassSource`` values and the v1beta2 ``priorityClassRef`` (group, kind) they stand for.
PRIORITY_SOURCES = {
    "kueue.x-k8s.io/workloadpriorityclass": ("kueue.x-k8s.io", "WorkloadPriorityClass"),
    "scheduling.k8s.io/priorityclass": ("scheduling.k8s.io", "PriorityClass"),
}
_SOURCE_OF = {ref: source for source, ref in PRIORITY_SOURCES.items()}
#: v1beta1-only ``flavorFungibility`` values (deprecated upstream) and what v1beta2 says instead.
DEPRECATED_FUNGIBILITY = {"whenCanPreempt": "Preempt", "whenCanBorrow": "Borrow"}


@dataclass(frozen=True)
class Converter:
    """The plain conversions of one kind (each returns a new dict)."""

    up: Callable[[Obj], Obj]
    down: Callable[[Obj], Obj]


def _section(obj: Obj, name: str) -> Obj | None:
    value = obj.get(name)
    return value if isinstance(value, dict) else None


def _rename(section: Obj | None, old: str, new: str) -> None:
    """Move ``old`` to ``new``; an empty string is no value (Go's ``omitempty``)."""
    if section is None or old not in section:
        return
    value = section.pop(old)
    if value not in ("", None):
        section[new] = value


def _drop(section: Obj | None, *names: str) -> None:
    if section is not None:
        for name in names:
            section.pop(name, None)


def _drop_nested(obj: Obj, *path: str) -> None:
    """Remove the last key of ``path`` when every parent on the way is an object."""
    parents = [obj]
    for key in path[:-1]:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return
        parents.append(child)
    parents[-1].pop(path[-1], None)


# --- ClusterQueue -------------------------------------------------------------


def cluster_queue_up(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    spec = _section(out, "spec")
    if spec is not None:
        checks = spec.pop("admissionChecks", None)
        _rename(spec, "cohort", "cohortName")
        if checks:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": name} for name in checks]}
        fungibility = _section(spec, "flavorFungibility")
        if fungibility is not None:
            for key, deprecated in DEPRECATED_FUNGIBILITY.items():
                if fungibility.get(key) == deprecated:
                    fungibility[key] = "MayStopSearch"
    status = _section(out, "status")
    _drop(status, "pendingWorkloadsStatus")
    if status is not None:
        _drop_nested(status, "fairSharing", "admissionFairSharingStatus")
    return out


def cluster_queue_down(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    spec = _section(out, "spec")
    _rename(spec, "cohortName", "cohort")
    _drop(spec, "concurrentAdmissionPolicy")
    return out


# --- Cohort ---------------------------------------------------------------------


def cohort_up(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    status = _section(out, "status")
    if status is not None:
        _drop_nested(status, "fairSharing", "admissionFairSharingStatus")
    return out


def _same(obj: Obj) -> Obj:
    return copy.deepcopy(obj)


# --- LocalQueue -----------------------------------------------------------------


def local_queue_up(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    status = _section(out, "status")
    _drop(status, "flavors")
    if status is not None and "flavorUsage" in status:
        status["flavorsUsage"] = status.pop("flavorUsage")
    return out


def local_queue_down(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    status = _section(out, "status")
    if status is not None and "flavorsUsage" in status:
        status["flavorUsage"] = status.pop("flavorsUsage")
    return out


# --- MultiKueueCluster / MultiKueueConfig / AdmissionCheck ----------------------


def multikueue_cluster_up(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    spec = _section(out, "spec")
    if spec is not None and ("kubeConfig" in spec or "clusterProfileRef" in spec):
        kubeconfig = spec.pop("kubeConfig", None)
        profile = spec.pop("clusterProfileRef", None)
        source: Obj = {}
        if isinstance(kubeconfig, dict) and kubeconfig.get("location"):
            source["kubeConfig"] = kubeconfig
        if profile is not None:
            source["clusterProfileRef"] = profile
        spec["clusterSource"] = source
    return out


def multikueue_cluster_down(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    spec = _section(out, "spec")
    if spec is not None and "clusterSource" in spec:
        source = spec.pop("clusterSource") or {}
        if "kubeConfig" in source:
            spec["kubeConfig"] = source["kubeConfig"]
        if "clusterProfileRef" in source:
            spec["clusterProfileRef"] = source["clusterProfileRef"]
    return out


def multikueue_config_down(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    _drop(_section(out, "spec"), "quotaManagement")
    return out


def admission_check_up(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    _drop(_section(out, "spec"), "retryDelayMinutes")
    return out


# --- Workload -------------------------------------------------------------------


def _topology_assignments(status: Obj | None) -> list[Obj]:
    admission = _section(status or {}, "admission")
    result = []
    for assignment in (admission or {}).get("podSetAssignments") or []:
        if isinstance(assignment, dict) and isinstance(assignment.get("topologyAssignment"), dict):
            result.append(assignment["topologyAssignment"])
    return result


def workload_up(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    spec = _section(out, "spec")
    if spec is not None:
        source = spec.pop("priorityClassSource", None)
        name = spec.pop("priorityClassName", None)
        if source in PRIORITY_SOURCES:
            group, kind = PRIORITY_SOURCES[source]
            spec["priorityClassRef"] = {"group": group, "kind": kind, "name": name or ""}
    status = _section(out, "status")
    if status is not None:
        _rename(status, "accumulatedPastExexcutionTimeSeconds", "accumulatedPastExecutionTimeSeconds")
    for assignment in _topology_assignments(status):
        domains = assignment.pop("domains", None) or []
        assignment["slices"] = slices_of(list(assignment.get("levels") or []), domains)
    return out


def workload_down(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    spec = _section(out, "spec")
    if spec is not None:
        ref = spec.pop("priorityClassRef", None)
        if isinstance(ref, dict) and (ref.get("group"), ref.get("kind")) in _SOURCE_OF:
            spec["priorityClassSource"] = _SOURCE_OF[(ref.get("group"), ref.get("kind"))]
            spec["priorityClassName"] = ref.get("name") or ""
        spec.pop("preemptionGates", None)
        for pod_set in spec.get("podSets") or []:
            if isinstance(pod_set, dict) and isinstance(pod_set.get("topologyRequest"), dict):
                pod_set["topologyRequest"].pop("podsetSliceRequiredTopologyConstraints", None)
    status = _section(out, "status")
    if status is not None:
        _rename(status, "accumulatedPastExecutionTimeSeconds", "accumulatedPastExexcutionTimeSeconds")
        status.pop("preemptionGates", None)
    for assignment in _topology_assignments(status):
        assignment["domains"] = domains_of(assignment)
        assignment.pop("slices", None)
    return out


#: The kinds served in both versions with a conversion webhook, and their plain conversions.
#: ResourceFlavor and WorkloadPriorityClass are the same in both versions (conversion ``None``).
CONVERTERS: dict[str, Converter] = {
    "AdmissionCheck": Converter(up=admission_check_up, down=_same),
    "ClusterQueue": Converter(up=cluster_queue_up, down=cluster_queue_down),
    "Cohort": Converter(up=cohort_up, down=_same),
    "LocalQueue": Converter(up=local_queue_up, down=local_queue_down),
    "MultiKueueCluster": Converter(up=multikueue_cluster_up, down=multikueue_cluster_down),
    "MultiKueueConfig": Converter(up=_same, down=multikueue_config_down),
    "Workload": Converter(up=workload_up, down=workload_down),
}
