"""The ``batch/v1`` Job as Kueue sees it: pure functions over the Job dict.

A Job is the plain dict the API server returns. Nothing here talks to a
cluster: the kopf layer reads objects, calls these functions and applies the
JSON merge patches (RFC 7386) they return. Every rule follows upstream
Kueue's Job integration (``pkg/controller/jobs/job``) and job framework
(``pkg/controller/jobframework``, ``pkg/podset``), so a Job behaves the same
under this project as under upstream Kueue:

- the Workload of a Job has one pod set ``main`` whose count is
  ``parallelism`` capped by ``completions``;
- a Job is finished when it has a ``Complete`` or ``Failed`` condition, and
  the Workload's ``Finished`` condition then carries reason ``Succeeded`` or
  ``Failed`` with the Job condition's message.

Starting and stopping the Job live in :mod:`multikueue.integrations.batchjob.startstop`,
the copy MultiKueue makes on a worker in :mod:`multikueue.integrations.batchjob.remote`;
both build on the readers here (``section``, ``labels_of``, ``spec_of``, ...).

Over 500 lines on purpose: every rule about reading a Job (and upstream's
parsing of its fields) is in this one place that the other Job modules build on.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from multikueue.api.constants import (
    ConditionStatus,
    Finalizers,
    Labels,
    MultiKueue,
    WorkloadConditionType,
    WorkloadReason,
)
from multikueue.api.meta import Condition, ObjectMeta, OwnerReference, now
from multikueue.api.quantity import parse_quantity
from multikueue.api.workload import PodSet, PriorityClassRef, Workload, WorkloadSpec
from multikueue.integrations.binding import PREBUILT_WORKLOAD_ANNOTATION, bound_workload_name, is_label_value
from multikueue.integrations.naming import workload_name_for_owner

__all__ = [
    "API_VERSION",
    "COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION",
    "DEFAULT_POD_SET_NAME",
    "GROUP",
    "JOB_CONTROLLER_NAME",
    "JOB_STATUS_FIELDS",
    "KIND",
    "MANAGED_LABELS",
    "MIN_PARALLELISM_ANNOTATION",
    "POD_SET_LABEL",
    "PREBUILT_WORKLOAD_ANNOTATION",
    "STOPPING_ANNOTATION",
    "FinishedState",
    "Job",
    "annotations_of",
    "as_workload",
    "build_workload",
    "equivalent",
    "finished_condition",
    "is_active",
    "is_finished",
    "is_label_value",
    "is_suspended",
    "labels_of",
    "managed_by",
    "maximum_execution_time_seconds",
    "min_pods_count",
    "parse_go_bool",
    "parse_go_int",
    "pod_sets",
    "pods_count",
    "prebuilt_workload_name",
    "queue_name",
    "section",
    "spec_of",
    "syncs_completions_with_parallelism",
    "template_of",
    "workload_name",
]

#: A Job as the API server returns it (a plain dict, or kopf's read-only body).
Job = Mapping[str, Any]

API_VERSION = "batch/v1"
GROUP = "batch"
KIND = "Job"
#: Name of the only pod set of a Job's Workload (``kueue.DefaultPodSetName``).
DEFAULT_POD_SET_NAME = "main"

# Upstream keys not (yet) in multikueue.api.constants; values from upstream's
# pkg/controller/jobs/job and pkg/controller/constants.
#: Partial admission: the fewest pods the Job can run with (an integer string).
MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
#: With partial admission, also set ``completions`` to the admitted parallelism ("true").
COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-completions-equal-parallelism"
#: Set while a Job is being stopped in several writes; a Job carrying it is not yet "suspended".
STOPPING_ANNOTATION = "kueue.x-k8s.io/stopping"
#: Annotation form of the prebuilt Workload name, used when the name does not fit a label value.
#: Label put on the pod template at start, naming the pod set the pods belong to.
POD_SET_LABEL = "kueue.x-k8s.io/podset"
#: Job annotations with this prefix are copied to the Workload (ProvisioningRequest parameters).
PROVREQ_ANNOTATION_PREFIX = "provreq.kueue.x-k8s.io/"
#: ``batchv1.JobControllerName``: the built-in Job controller's ``spec.managedBy`` value.
JOB_CONTROLLER_NAME = "kubernetes.io/job-controller"

#: Labels the API server and the Job controller put on a Job's pod template and selector.
#: They name one particular Job object, so they never go to a Workload or a worker copy.
MANAGED_LABELS: tuple[str, ...] = (
    "job-name",
    "controller-uid",
    "batch.kubernetes.io/job-name",
    "batch.kubernetes.io/controller-uid",
)

#: Every field of ``batch/v1`` JobStatus; MultiKueue mirrors all of them from the worker.
JOB_STATUS_FIELDS: tuple[str, ...] = (
    "conditions",
    "startTime",
    "completionTime",
    "active",
    "ready",
    "succeeded",
    "failed",
    "terminating",
    "uncountedTerminatedPods",
    "completedIndexes",
    "failedIndexes",
)

_CONDITION_MESSAGE_MAX_LENGTH = 32 * 1024
_GO_INT = re.compile(r"^[+-]?[0-9]+$")
_GO_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "false", "FALSE", "False"})


# --- reading the Job -----------------------------------------------------------


def section(obj: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    """``obj[key]`` as a mapping; ``{}`` when absent or null (the API omits empty fields)."""
    if not obj:
        return {}
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def labels_of(job: Job) -> Mapping[str, str]:
    """``metadata.labels`` (``{}`` when none)."""
    return section(section(job, "metadata"), "labels")


def annotations_of(job: Job) -> Mapping[str, str]:
    """``metadata.annotations`` (``{}`` when none)."""
    return section(section(job, "metadata"), "annotations")


def spec_of(job: Job) -> Mapping[str, Any]:
    """``spec`` (``{}`` when none)."""
    return section(job, "spec")


def template_of(job: Job) -> Mapping[str, Any]:
    """``spec.template``, the pod template (``{}`` when none)."""
    return section(spec_of(job), "template")


def parse_go_int(value: str) -> int | None:
    """Parse like Go's ``strconv.Atoi``: an optional sign and digits, nothing else."""
    return int(value) if _GO_INT.match(value) else None


def parse_go_bool(value: str) -> bool | None:
    """Parse like Go's ``strconv.ParseBool``; ``None`` for anything else."""
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    return None


def queue_name(job: Job) -> str | None:
    """The LocalQueue the Job is submitted to (label ``kueue.x-k8s.io/queue-name``).

    Only the label counts: upstream dropped the deprecated annotation of the
    same name together with v1beta1 (kubernetes-sigs/kueue#7271), so honouring
    it here would queue Jobs upstream Kueue ignores.
    """
    return labels_of(job).get(Labels.QUEUE_NAME) or None


def prebuilt_workload_name(job: Job) -> str | None:
    """The existing Workload the Job binds to instead of getting its own (workers).

    The label is the usual carrier. Upstream writes the annotation of the same
    key instead when the name is longer than a label value may be (63
    characters) or when its ``WorkloadIdentifierAnnotations`` gate is on, and
    reads both, so we do too.
    """
    return bound_workload_name(job)


def managed_by(job: Job) -> str | None:
    """``spec.managedBy``: which controller runs the Job's pods (``None``: the built-in one)."""
    return spec_of(job).get("managedBy") or None


def is_suspended(job: Job) -> bool:
    """Whether the Job is suspended and not in the middle of being stopped.

    Upstream counts a Job carrying ``kueue.x-k8s.io/stopping: "true"`` as not
    yet suspended, so an interrupted stop is finished on the next pass.
    """
    return spec_of(job).get("suspend") is True and annotations_of(job).get(STOPPING_ANNOTATION) != "true"


def is_active(job: Job) -> bool:
    """Whether the Job still has pending or running pods (``status.active``)."""
    return bool(section(job, "status").get("active"))


def workload_name(job: Job) -> str:
    """The name of the Workload upstream Kueue creates for this Job (needs ``metadata.uid``)."""
    metadata = section(job, "metadata")
    name, uid = metadata.get("name"), metadata.get("uid")
    if not name or not uid:
        raise ValueError("a Job needs metadata.name and metadata.uid to name its Workload")
    return workload_name_for_owner(name, uid, KIND, GROUP)


# --- finished ------------------------------------------------------------------


@dataclass(frozen=True)
class FinishedState:
    """How a Job ended, as the Workload's ``Finished`` condition will say it."""

    succeeded: bool
    #: The message of the Job condition that ended it (may be empty).
    message: str

    @property
    def reason(self) -> str:
        """``Succeeded`` or ``Failed``: the reasons upstream writes on ``Finished``."""
        return WorkloadReason.SUCCEEDED if self.succeeded else WorkloadReason.FAILED


_TERMINAL = {"Complete": True, "Failed": False}
_INTERIM = {"SuccessCriteriaMet": True, "FailureTarget": False}


def _true_condition(job: Job, types: Mapping[str, bool]) -> FinishedState | None:
    for condition in section(job, "status").get("conditions") or ():
        kind = condition.get("type")
        if kind in types and condition.get("status") == ConditionStatus.TRUE:
            return FinishedState(succeeded=types[kind], message=condition.get("message") or "")
    return None


def is_finished(job: Job, *, include_interim: bool = False) -> FinishedState | None:
    """How the Job ended, or ``None`` while it has not.

    Like upstream, only ``Complete=True`` and ``Failed=True`` finish a Job:
    the Job controller writes them after the last pod terminated, so the
    Workload's quota is released only when the pods are really gone.
    ``SuccessCriteriaMet`` / ``FailureTarget`` say the outcome is decided while
    pods may still be terminating; pass ``include_interim=True`` to treat them
    as the end too (for display, never for releasing quota).
    """
    state = _true_condition(job, _TERMINAL)
    if state is None and include_interim:
        state = _true_condition(job, _INTERIM)
    return state


def _truncate_condition_message(message: str) -> str:
    """Upstream's ``TruncateConditionMessage``: fit the 32 KiB limit of a condition message."""
    if len(message) <= _CONDITION_MESSAGE_MAX_LENGTH:
        return message
    suffix = " ..."
    return message[: _CONDITION_MESSAGE_MAX_LENGTH - len(suffix)] + suffix


def finished_condition(job: Job, *, at: datetime | None = None) -> dict[str, Any] | None:
    """The Workload ``Finished`` condition to write once the Job finished, else ``None``.

    Reason ``Succeeded`` or ``Failed``, message the Job condition's message,
    as upstream's job reconciler writes it. ``at`` is the transition time
    (default: now).
    """
    state = is_finished(job)
    if state is None:
        return None
    condition = Condition(
        type=WorkloadConditionType.FINISHED,
        status=ConditionStatus.TRUE,
        reason=state.reason,
        message=_truncate_condition_message(state.message),
        last_transition_time=at or now(),
    )
    return condition.to_dict()


# --- pod sets ------------------------------------------------------------------


def pods_count(job: Job) -> int:
    """Pods the Job runs at once: ``parallelism`` (default 1) capped by ``completions``."""
    spec = spec_of(job)
    parallelism = spec.get("parallelism")
    count = 1 if parallelism is None else int(parallelism)
    completions = spec.get("completions")
    if completions is not None and int(completions) < count:
        count = int(completions)
    return count


def min_pods_count(job: Job) -> int | None:
    """The partial-admission minimum from ``kueue.x-k8s.io/job-min-parallelism``, if set and numeric."""
    value = annotations_of(job).get(MIN_PARALLELISM_ANNOTATION)
    return None if value is None else parse_go_int(value)


def syncs_completions_with_parallelism(job: Job) -> bool:
    """Whether partial admission also sets ``completions`` (``...job-completions-equal-parallelism``)."""
    value = annotations_of(job).get(COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION)
    return value is not None and parse_go_bool(value) is True


def maximum_execution_time_seconds(job: Job) -> int | None:
    """The positive integer in label ``kueue.x-k8s.io/max-exec-time-seconds``, else ``None``."""
    value = labels_of(job).get(Labels.MAX_EXEC_TIME_SECONDS)
    seconds = None if value is None else parse_go_int(value)
    return seconds if seconds is not None and 0 < seconds < 2**31 else None


def _dedup_env(container: dict[str, Any]) -> None:
    """Keep one env var per name (the last one, at the first one's place), as upstream sanitizes.

    Upstream Kueue's Workload CRD keys ``env`` by name, so a worker running it
    would refuse a pod set with duplicates the Job API itself tolerates.
    """
    env = container.get("env")
    if not env:
        return
    by_name: dict[str, Any] = {}
    for var in env:
        by_name[var.get("name")] = var
    container["env"] = list(by_name.values())


def _pod_set_template(job: Job) -> dict[str, Any]:
    """The Job's pod template for the Workload: a copy without the per-Job managed labels."""
    template = copy.deepcopy(dict(template_of(job)))
    metadata = template.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("labels"), dict):
        labels = {k: v for k, v in metadata["labels"].items() if k not in MANAGED_LABELS}
        if labels:
            metadata["labels"] = labels
        else:
            del metadata["labels"]
    pod_spec = template.get("spec")
    if isinstance(pod_spec, dict):
        for key in ("initContainers", "containers"):
            for container in pod_spec.get(key) or ():
                _dedup_env(container)
    return template


def pod_sets(job: Job) -> list[PodSet]:
    """The Job's pod sets: one ``main`` set of :func:`pods_count` pods with the Job's template.

    ``minCount`` comes from the partial-admission annotation (upstream's
    ``PartialAdmission`` gate is on by default). Topology-aware scheduling
    requests are not derived.
    """
    return [
        PodSet(
            name=DEFAULT_POD_SET_NAME,
            template=_pod_set_template(job),
            count=pods_count(job),
            min_count=min_pods_count(job),
        )
    ]


# --- the Workload ----------------------------------------------------------------


def build_workload(
    job: Job,
    *,
    priority: int | None,
    priority_class: PriorityClassRef | None,
    managed_by_multikueue: bool = False,
    label_keys_to_copy: Iterable[str] = (),
) -> Workload:
    """The Workload upstream Kueue would create for this Job.

    Name from :func:`workload_name`, the Job's namespace, a controller owner
    reference to the Job (so it is garbage-collected with it), label
    ``kueue.x-k8s.io/job-uid``, finalizer ``kueue.x-k8s.io/resource-in-use``,
    the Job's queue, pod sets and maximum execution time, and the priority the
    caller resolved (upstream always writes ``spec.priority``; 0 without a
    class). ``label_keys_to_copy`` is upstream's ``labelKeysToCopy``
    configuration; ``provreq.kueue.x-k8s.io/`` annotations are copied as
    upstream does.

    ``managed_by_multikueue`` does not change the Workload (upstream's is the
    same either way); it states the caller's intent, and a Job that MultiKueue
    should run but whose ``spec.managedBy`` is not ``kueue.x-k8s.io/multikueue``
    is refused, because the manager's own Job controller would run it too.
    """
    if managed_by_multikueue and managed_by(job) != MultiKueue.MANAGED_BY:
        raise ValueError(
            f"the Job is to be run by MultiKueue but its spec.managedBy is {managed_by(job)!r}, "
            f"not {MultiKueue.MANAGED_BY!r}"
        )
    metadata = section(job, "metadata")
    uid = str(metadata.get("uid") or "")
    job_labels = labels_of(job)
    labels = {key: job_labels[key] for key in label_keys_to_copy if key in job_labels}
    if is_label_value(uid):
        labels[Labels.JOB_UID] = uid
    annotations = {k: v for k, v in annotations_of(job).items() if k.startswith(PROVREQ_ANNOTATION_PREFIX)}
    owner = OwnerReference(
        api_version=API_VERSION,
        kind=KIND,
        name=metadata.get("name") or "",
        uid=uid,
        controller=True,
        block_owner_deletion=True,
    )
    return Workload(
        metadata=ObjectMeta(
            name=workload_name(job),
            namespace=metadata.get("namespace"),
            labels=labels or None,
            annotations=annotations or None,
            owner_references=[owner],
            finalizers=[Finalizers.RESOURCE_IN_USE],
        ),
        spec=WorkloadSpec(
            pod_sets=pod_sets(job),
            queue_name=queue_name(job),
            priority=priority if priority is not None else 0,
            priority_class_ref=priority_class,
            active=True,
            maximum_execution_time_seconds=maximum_execution_time_seconds(job),
        ),
    )


def as_workload(workload: Workload | Mapping[str, Any]) -> Workload:
    """The Workload model, parsing it first when given as the API server's dict."""
    return workload if isinstance(workload, Workload) else Workload.from_k8s(workload)


def _same_quantities(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Resource lists equal by value ("1" == "1000m"), like ``equality.Semantic``."""
    a, b = a or {}, b or {}
    if a.keys() != b.keys():
        return False
    try:
        return all(parse_quantity(a[key]) == parse_quantity(b[key]) for key in a)
    except ValueError:
        return dict(a) == dict(b)


def _same_resources(a: Iterable[Mapping[str, Any]] | None, b: Iterable[Mapping[str, Any]] | None) -> bool:
    """Same number of containers with the same requests, limits and claims, in order."""
    left, right = list(a or ()), list(b or ())
    if len(left) != len(right):
        return False
    for x, y in zip(left, right, strict=True):
        rx, ry = section(x, "resources"), section(y, "resources")
        if not _same_quantities(rx.get("requests"), ry.get("requests")):
            return False
        if not _same_quantities(rx.get("limits"), ry.get("limits")):
            return False
        if (rx.get("claims") or []) != (ry.get("claims") or []):
            return False
    return True


def _reserved_counts(workload: Workload) -> dict[str, int]:
    """Pod set name -> admitted count while quota is reserved (differs with partial admission)."""
    if not workload.has_quota_reservation or workload.status.admission is None:
        return {}
    return {
        assignment.name: assignment.count
        for assignment in workload.status.admission.pod_set_assignments or ()
        if assignment.count is not None
    }


def equivalent(job: Job, workload: Workload | Mapping[str, Any]) -> bool:
    """Whether the Workload still describes the Job; if not, upstream replaces the Workload.

    Compared as upstream does (``EquivalentToWorkload``): the owner's name,
    the maximum execution time, and per pod set the count, ``minCount``, the
    containers' and init containers' resources, and the tolerations. Not
    compared: the nodeSelector and labels (Kueue injects into them at start),
    the tolerations once the Job runs or the Workload is admitted (flavor
    tolerations were injected), and a partially admitted count that equals
    the admitted one.
    """
    wl = as_workload(workload)
    owner = next((ref for ref in wl.metadata.owner_references or () if ref.controller), None)
    if owner is not None and owner.name != section(job, "metadata").get("name"):
        return False
    if wl.spec.maximum_execution_time_seconds != maximum_execution_time_seconds(job):
        return False
    job_sets, wl_sets = pod_sets(job), wl.spec.pod_sets
    if len(job_sets) != len(wl_sets):
        return False
    ignore_tolerations = wl.is_admitted or not is_suspended(job)
    reserved = _reserved_counts(wl)
    for ours, theirs in zip(job_sets, wl_sets, strict=True):
        if ours.name != theirs.name or ours.min_count != theirs.min_count:
            return False
        partial_ok = theirs.min_count is not None and reserved.get(theirs.name) == ours.count
        if ours.count != theirs.count and not partial_ok:
            return False
        our_spec, their_spec = section(ours.template, "spec"), section(theirs.template, "spec")
        if not ignore_tolerations and (our_spec.get("tolerations") or []) != (their_spec.get("tolerations") or []):
            return False
        if not _same_resources(our_spec.get("initContainers"), their_spec.get("initContainers")):
            return False
        if not _same_resources(our_spec.get("containers"), their_spec.get("containers")):
            return False
    return True
