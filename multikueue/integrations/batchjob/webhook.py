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

__all__ = ["mutate_job", "validate_job"]

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
    Update rules (immutable queue while running, ...) are not covered.
    """
    return [
        *_validate_object_name_labels(job),
        *_validate_max_exec_time(job),
        *_validate_partial_admission(job),
        *_validate_sync_completions(job),
    ]


def register(registry: kopf.OperatorRegistry, queue_has_multikueue_check: Callable[[str, str], bool | None]) -> None:
    """Register the Job webhooks; ``queue_has_multikueue_check(namespace, queue) -> bool | None``."""

    @kopf.on.mutate("batch", "v1", "jobs", operations=["CREATE"], registry=registry, id="job-defaults")
    async def default_job(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        job = dict(body)
        queue = queue_name(job)
        namespace = body.get("metadata", {}).get("namespace") or ""
        has_check = queue_has_multikueue_check(namespace, queue) if queue else None
        for operation in mutate_job(job, queue_has_multikueue_check=has_check):
            path = operation["path"].strip("/").split("/")
            if path == ["spec"]:
                continue
            patch.setdefault(path[0], {})[path[1]] = operation["value"]

    @kopf.on.validate("batch", "v1", "jobs", operations=["CREATE", "UPDATE"], registry=registry, id="job-validation")
    async def validate(body: kopf.Body, **_: Any) -> None:
        errors = validate_job(dict(body))
        if errors:
            raise kopf.AdmissionError("; ".join(errors), code=422)
