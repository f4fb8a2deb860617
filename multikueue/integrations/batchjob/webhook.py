"""Admission webhook logic for ``batch/v1`` Jobs: what to change at creation, what to refuse.

The mutating part holds a queued Job back until Kueue admits it
(``spec.suspend: true``) and, when its queue dispatches through MultiKueue,
hands it to MultiKueue (``spec.managedBy: kueue.x-k8s.io/multikueue``) so the
manager's own Job controller never runs its pods. It returns RFC 6902 JSON
patch operations, the form an AdmissionReview response carries. The
validating part lists the user errors upstream's Job webhook refuses, in the
``field.Error`` wording kubectl users know from upstream.

Both are pure functions; :func:`register` serves them through kopf's webhook
server (which the operator sets up).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from multikueue.api.constants import Labels, MultiKueue
from multikueue.integrations.batchjob.job import (
    COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION,
    JOB_CONTROLLER_NAME,
    MIN_PARALLELISM_ANNOTATION,
    Job,
    annotations_of,
    labels_of,
    parse_go_bool,
    parse_go_int,
    pods_count,
    queue_name,
    spec_of,
)

__all__ = ["WEBHOOKS", "mutate_job", "validate_job", "validate_job_update"]

_DNS1123_SUBDOMAIN_MAX_LENGTH = 253
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def mutate_job(
    job: Job,
    *,
    queue_has_multikueue_check: bool | None,
    manage_jobs_without_queue_name: bool = False,
) -> list[dict[str, Any]]:
    """JSON patch operations for a Job being created; ``[]`` when nothing changes.

    - A Job with a queue name (or any Job, with ``manage_jobs_without_queue_name``)
      is suspended: Kueue unsuspends it once admitted.
    - A queued Job whose queue's ClusterQueue has a MultiKueue admission check
      (``queue_has_multikueue_check=True``) gets ``spec.managedBy:
      kueue.x-k8s.io/multikueue``, unless it already names another controller;
      an unset value or the built-in ``kubernetes.io/job-controller`` is
      replaced, as upstream does. ``None`` means the queue is not known yet:
      nothing is defaulted, like upstream when the LocalQueue is missing.

    Idempotent: a Job already patched yields no operations. Not done here
    (the caller knows): upstream also skips Jobs whose owner is already
    managed by Kueue, and limits ``manage_jobs_without_queue_name`` by a
    namespace selector.
    """
    spec = spec_of(job)
    queued = queue_name(job) is not None
    operations: list[dict[str, Any]] = []
    if (queued or manage_jobs_without_queue_name) and spec.get("suspend") is not True:
        operations.append({"op": "add", "path": "/spec/suspend", "value": True})
    current = spec.get("managedBy")
    if queued and queue_has_multikueue_check is True and current in (None, "", JOB_CONTROLLER_NAME):
        operations.append({"op": "add", "path": "/spec/managedBy", "value": MultiKueue.MANAGED_BY})
    if operations and not isinstance(job.get("spec"), Mapping):
        # "add" needs the parent to exist; a Job always has a spec, but be safe.
        operations.insert(0, {"op": "add", "path": "/spec", "value": {}})
    return operations


def _value(value: Any) -> str:
    """A value as Go's ``field.Error`` prints it: strings quoted, numbers bare."""
    return json.dumps(value) if isinstance(value, str) else str(value)


def _invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {_value(value)}: {detail}"


def _dns1123_subdomain_errors(value: str) -> list[str]:
    errors = []
    if len(value) > _DNS1123_SUBDOMAIN_MAX_LENGTH:
        errors.append(f"must be no more than {_DNS1123_SUBDOMAIN_MAX_LENGTH} characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        errors.append(_DNS1123_SUBDOMAIN_MESSAGE)
    return errors


def _validate_object_name_labels(job: Job) -> list[str]:
    """The queue and prebuilt-Workload labels name objects, so they must be valid object names."""
    labels = labels_of(job)
    errors = []
    for key in (Labels.QUEUE_NAME, Labels.PREBUILT_WORKLOAD_NAME):
        if key in labels and (problems := _dns1123_subdomain_errors(labels[key])):
            errors.append(_invalid(f"metadata.labels[{key}]", labels[key], ",".join(problems)))
    return errors


def _validate_max_exec_time(job: Job) -> list[str]:
    key = Labels.MAX_EXEC_TIME_SECONDS
    value = labels_of(job).get(key)
    if value is None:
        return []
    path = f"metadata.labels[{key}]"
    seconds = parse_go_int(value)
    if seconds is None:
        return [_invalid(path, value, f'strconv.Atoi: parsing "{value}": invalid syntax')]
    if seconds <= 0:
        return [_invalid(path, seconds, "should be greater than 0")]
    return []


def _validate_partial_admission(job: Job) -> list[str]:
    value = annotations_of(job).get(MIN_PARALLELISM_ANNOTATION)
    if value is None:
        return []
    path = f"metadata.annotations[{MIN_PARALLELISM_ANNOTATION}]"
    minimum, count = parse_go_int(value), pods_count(job)
    if minimum is None:
        return [_invalid(path, value, f'strconv.Atoi: parsing "{value}": invalid syntax')]
    if minimum <= 0 or minimum >= count:
        return [_invalid(path, minimum, f"should be between 0 and {count - 1}")]
    return []


def _validate_sync_completions(job: Job) -> list[str]:
    key = COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION
    value = annotations_of(job).get(key)
    if value is None:
        return []
    path = f"metadata.annotations[{key}]"
    enabled = parse_go_bool(value)
    if enabled is None:
        return [_invalid(path, value, f'strconv.ParseBool: parsing "{value}": invalid syntax')]
    if not enabled:
        return []
    spec = spec_of(job)
    errors = []
    if spec.get("completionMode") in (None, "NonIndexed"):
        errors.append(_invalid(path, value, "should not be enabled for NonIndexed jobs"))
    parallelism, completions = spec.get("parallelism"), spec.get("completions")
    if (1 if parallelism is None else parallelism) != (1 if completions is None else completions):
        # Wording (typo included) and the printing of an unset value as "null" are upstream's.
        shown = "null" if completions is None else completions
        detail = f"should be equal to parallelism when {key} is annotation is true"
        errors.append(_invalid("spec.completions", shown, detail))
    return errors


def validate_job(job: Job) -> list[str]:
    """The reasons upstream's Job webhook refuses this Job at creation; ``[]`` when it is fine.

    Checked: the queue-name and prebuilt-workload-name labels are valid object
    names (DNS-1123 subdomains), ``max-exec-time-seconds`` is a positive
    integer, ``job-min-parallelism`` is an integer between 1 and the pod count
    minus one, and ``job-completions-equal-parallelism`` is a boolean that,
    when true, needs an Indexed Job with ``completions == parallelism``.
    The rules for updates are in :func:`validate_job_update`.
    """
    return [
        *_validate_object_name_labels(job),
        *_validate_max_exec_time(job),
        *_validate_partial_admission(job),
        *_validate_sync_completions(job),
    ]


def _immutable(path: str, new: Any, old: Any) -> list[str]:
    """Go's ``ValidateImmutableField``: the new value is printed, an absent label as ``""``."""
    return [] if new == old else [_invalid(path, new, "field is immutable")]


def _suspended(job: Job) -> bool:
    """Upstream's ``IsSuspended`` for Jobs: ``spec.suspend`` is true (no stopping subtleties)."""
    return spec_of(job).get("suspend") is True


def validate_job_update(old: Job, new: Job) -> list[str]:
    """The reasons upstream's Job webhook refuses this update; ``[]`` when it is fine.

    Besides the creation rules on the new Job (``job-min-parallelism`` only
    when that annotation changed, as upstream), a Job that is running or being
    started keeps what its admitted Workload was made from:

    - the queue name cannot change (nor be removed) while the new Job is not
      suspended: moving a running Job to another queue would run it on quota
      it was never admitted to (upstream ``validateUpdateForQueueName``);
    - the prebuilt Workload name cannot change while the new Job is not suspended;
    - ``max-exec-time-seconds`` cannot change unless the Job stays suspended;
    - with ``job-min-parallelism``, ``spec.parallelism`` cannot change while
      the old Job was running (its admission counted those pods).

    Not covered: upstream's "queue-name must not be empty in namespace with
    default queue" (no default LocalQueue here), WorkloadPriorityClass and
    elastic-Job rules (features this project does not have).
    """
    old_labels, new_labels = labels_of(old), labels_of(new)
    new_suspended = _suspended(new)
    errors = [*_validate_object_name_labels(new), *_validate_max_exec_time(new)]
    if annotations_of(new).get(MIN_PARALLELISM_ANNOTATION) != annotations_of(old).get(MIN_PARALLELISM_ANNOTATION):
        errors += _validate_partial_admission(new)
    errors += _validate_sync_completions(new)
    if not new_suspended:
        key = Labels.QUEUE_NAME
        errors += _immutable(f"metadata.labels[{key}]", new_labels.get(key, ""), old_labels.get(key, ""))
        key = Labels.PREBUILT_WORKLOAD_NAME
        errors += _immutable(f"metadata.labels[{key}]", new_labels.get(key, ""), old_labels.get(key, ""))
    if not new_suspended or not _suspended(old):
        key = Labels.MAX_EXEC_TIME_SECONDS
        errors += _immutable(f"metadata.labels[{key}]", new_labels.get(key, ""), old_labels.get(key, ""))
    if MIN_PARALLELISM_ANNOTATION in annotations_of(old) and not _suspended(old):
        before, after = spec_of(old).get("parallelism"), spec_of(new).get("parallelism")
        if (1 if before is None else before) != (1 if after is None else after):
            errors.append(
                "spec.parallelism: Forbidden: cannot change when partial admission is enabled and the job is not suspended"
            )
    return errors


# -- how the API server calls the webhooks ---------------------------------
#
# kopf serves the handlers below; the webhook configurations pointing at them
# are written by ``multikueue.operator.webhook`` from these entries (kopf's
# own generator cannot express the selectors). Each entry is a webhook of an
# admissionregistration.k8s.io/v1 configuration without ``clientConfig`` and
# ``namespaceSelector``, which the operator adds (URL path = the ``id``; the
# namespace selector leaves out kube-system and the controller's namespace
# and, when the Configuration sets ``managedJobsNamespaceSelector``, every
# namespace that does not match it). The handlers below so never see a Job of
# a namespace that has not opted in: the API server evaluates the selector on
# the namespace's current labels, which a check here against the cache could
# only get wrong while the cache lags (the reconciler leaves those Jobs alone
# too, see ``reconciler.py``).
#
# Both fail closed (``failurePolicy: Fail``): a queued Job created while the
# controller is down must not start unsuspended on the manager, so it is
# refused and the client retries, as with upstream Kueue. What keeps a stopped
# controller from blocking the rest of the cluster is the scope:
#
# - The mutating webhook only sees Jobs carrying the queue-name label
#   (``objectSelector``). That is every Job it changes: suspending and
#   defaulting ``managedBy`` are only for queued Jobs unless
#   ``manageJobsWithoutQueueName`` is set (upstream's default, off). With it,
#   the selector goes (:func:`webhooks_for`): every Job created is suspended,
#   scoped by ``managedJobsNamespaceSelector`` alone, as upstream.
# - The validating webhook cannot use one label: Jobs bound to a prebuilt
#   Workload, or carrying Kueue's other labels and annotations, are validated
#   too. Its ``matchConditions`` (CEL, GA since Kubernetes 1.30) call it only
#   for Jobs that carry one of Kueue's labels or annotations (before or after
#   the change) and, for UPDATE, only when labels, annotations or the parallelism
#   fields change: a finalizer or ownerReference update during garbage
#   collection, a status write or a CronJob's Job never waits for it.

MUTATING_WEBHOOK_ID = "job-defaults"
VALIDATING_WEBHOOK_ID = "job-validation"

_KUEUE_LABELS = (Labels.QUEUE_NAME, Labels.PREBUILT_WORKLOAD_NAME, Labels.MAX_EXEC_TIME_SECONDS)
_KUEUE_ANNOTATIONS = (MIN_PARALLELISM_ANNOTATION, COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION)


def _carries_kueue_keys(obj: str) -> str:
    """CEL: ``obj`` (``object`` or ``oldObject``) exists and has one of Kueue's labels or annotations."""
    labels = ", ".join(f"'{key}'" for key in _KUEUE_LABELS)
    annotations = ", ".join(f"'{key}'" for key in _KUEUE_ANNOTATIONS)
    return (
        f"({obj} != null && ("
        f"(has({obj}.metadata.labels) && [{labels}].exists(k, k in {obj}.metadata.labels)) || "
        f"(has({obj}.metadata.annotations) && [{annotations}].exists(k, k in {obj}.metadata.annotations))))"
    )


def _differs(field: str) -> str:
    """CEL: ``field`` (a path below the object) differs between ``oldObject`` and ``object``, absence included."""
    new_has, old_has = f"has(object.{field})", f"has(oldObject.{field})"
    return f"({new_has} != {old_has} || ({new_has} && object.{field} != oldObject.{field}))"


_VALIDATED_ON_UPDATE = ("metadata.labels", "metadata.annotations", "spec.parallelism", "spec.completions", "spec.completionMode")

WEBHOOKS: Mapping[str, tuple[dict[str, Any], ...]] = {
    "mutating": (
        {
            "id": MUTATING_WEBHOOK_ID,
            "rules": [{"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"], "operations": ["CREATE"]}],
            "objectSelector": {"matchExpressions": [{"key": Labels.QUEUE_NAME, "operator": "Exists"}]},
            "failurePolicy": "Fail",
            "sideEffects": "None",
        },
    ),
    "validating": (
        {
            "id": VALIDATING_WEBHOOK_ID,
            "rules": [
                {"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"], "operations": ["CREATE", "UPDATE"]}
            ],
            "matchConditions": [
                {
                    "name": "kueue-job",
                    "expression": f"{_carries_kueue_keys('object')} || {_carries_kueue_keys('oldObject')}",
                },
                {
                    "name": "create-or-validated-fields-changed",
                    "expression": "request.operation != 'UPDATE' || "
                    + " || ".join(_differs(field) for field in _VALIDATED_ON_UPDATE),
                },
            ],
            "failurePolicy": "Fail",
            "sideEffects": "None",
        },
    ),
}


def webhooks_for(manage_jobs_without_queue_name: bool) -> Mapping[str, tuple[dict[str, Any], ...]]:
    """:data:`WEBHOOKS`, without the mutating webhook's queue-name ``objectSelector`` under
    ``manageJobsWithoutQueueName`` (every Job created is then suspended, as upstream's webhook does;
    the namespace selector still scopes it)."""
    if not manage_jobs_without_queue_name:
        return WEBHOOKS
    mutating = tuple({k: v for k, v in entry.items() if k != "objectSelector"} for entry in WEBHOOKS["mutating"])
    return {**WEBHOOKS, "mutating": mutating}


def register(
    registry: kopf.OperatorRegistry,
    queue_has_multikueue_check: Callable[[str, str], bool | None],
    *,
    manage_jobs_without_queue_name: bool = False,
) -> None:
    """Register the Job webhooks (:func:`webhooks_for` says when the API server calls them).

    ``queue_has_multikueue_check(namespace, queue) -> bool | None``.
    """

    @kopf.on.mutate("batch", "v1", "jobs", operations=["CREATE"], registry=registry, id=MUTATING_WEBHOOK_ID)
    async def default_job(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        job = dict(body)
        queue = queue_name(job)
        namespace = body.get("metadata", {}).get("namespace") or ""
        has_check = queue_has_multikueue_check(namespace, queue) if queue else None
        operations = mutate_job(
            job, queue_has_multikueue_check=has_check, manage_jobs_without_queue_name=manage_jobs_without_queue_name
        )
        for operation in operations:
            path = operation["path"].strip("/").split("/")
            if path == ["spec"]:
                continue
            patch.setdefault(path[0], {})[path[1]] = operation["value"]

    @kopf.on.validate(
        "batch", "v1", "jobs", operations=["CREATE", "UPDATE"], registry=registry, id=VALIDATING_WEBHOOK_ID
    )
    async def validate(body: kopf.Body, old: kopf.Body | None, operation: str | None, **_: Any) -> None:
        if operation == "UPDATE" and old is not None:
            errors = validate_job_update(dict(old), dict(body))
        else:
            errors = validate_job(dict(body))
        if errors:
            raise kopf.AdmissionError("; ".join(errors), code=422)
