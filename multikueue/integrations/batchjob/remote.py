"""What MultiKueue does with a ``batch/v1`` Job: the worker copy and the status brought back.

The manager's Job (``spec.managedBy: kueue.x-k8s.io/multikueue``) never runs
pods; MultiKueue creates a copy on the worker that won the Workload, bound to
the Workload copy there, and mirrors the worker Job's status onto the
manager's. The rules are upstream's Job MultiKueue adapter
(``pkg/controller/jobs/job/job_multikueue_adapter.go``).
"""

from __future__ import annotations

import copy
from enum import StrEnum
from typing import Any

from multikueue.api.constants import ConditionStatus, Labels
from multikueue.integrations.binding import bind
from multikueue.integrations.batchjob.job import (
    API_VERSION,
    JOB_STATUS_FIELDS,
    KIND,
    MANAGED_LABELS,
    STOPPING_ANNOTATION,
    Job,
    is_active,
    is_suspended,
    section,
    spec_of,
)

__all__ = ["StatusSync", "remote_copy", "status_for_manager", "status_sync_action"]


def status_for_manager(remote_job: Job) -> dict[str, Any]:
    """The worker Job's status as the manager's Job should show it, for a merge patch of ``status``.

    Upstream copies the whole status. Every JobStatus field is present in the
    result, ``None`` where the worker has none (the API omits zeros such as
    ``active: 0``), so ``{"status": status_for_manager(remote)}`` also clears
    what the worker no longer reports.
    """
    status = section(remote_job, "status")
    return {key: copy.deepcopy(status.get(key)) for key in JOB_STATUS_FIELDS}


class StatusSync(StrEnum):
    """What to do with a worker Job's status (upstream's ``syncActionForSuspendedLocalJob``)."""

    #: Copy the status to the manager's Job now.
    SYNC = "Sync"
    #: Nothing worth copying.
    SKIP = "Skip"
    #: The worker already runs the Job but the manager's is still suspended: try again shortly.
    RETRY_LATER = "RetryLater"


def _has_suspended_condition(job: Job) -> bool:
    return any(
        c.get("type") == "Suspended" and c.get("status") == ConditionStatus.TRUE
        for c in section(job, "status").get("conditions") or ()
    )


def status_sync_action(local_job: Job, remote_job: Job) -> StatusSync:
    """Whether to copy the worker Job's status onto the manager's Job now.

    A running manager Job always syncs. While it is still suspended, copying a
    running worker's status would give it a ``startTime`` too early (its
    template could then not be updated at start), so the sync waits; between
    two suspended Jobs only the ``Suspended`` condition and the drop to zero
    active pods are worth copying (eviction needs them).
    """
    if not is_suspended(local_job):
        return StatusSync.SYNC
    if not is_suspended(remote_job):
        return StatusSync.RETRY_LATER
    condition_changed = _has_suspended_condition(remote_job) and not _has_suspended_condition(local_job)
    became_inactive = not is_active(remote_job) and is_active(local_job)
    return StatusSync.SYNC if condition_changed or became_inactive else StatusSync.SKIP


def remote_copy(job: Job, *, origin: str, workload_name: str) -> dict[str, Any]:
    """The Job MultiKueue creates on a worker for this manager Job (upstream's ``SyncJob``).

    Kept: name, namespace, labels, annotations and the spec, but always
    ``suspend: true``: the worker's Kueue starts the copy when the Workload
    copy is admitted there. Upstream copies ``suspend`` as is and relies on
    the worker's webhook to suspend a queued Job at creation; a worker
    without that webhook, or a copy made while the manager's Job was still
    running from an earlier admission (a Retry re-dispatches before the
    manager's Job is suspended again), would otherwise run it unadmitted.
    Added: labels
    ``kueue.x-k8s.io/multikueue-origin`` and
    ``kueue.x-k8s.io/prebuilt-workload-name`` (an annotation of that key
    instead when the name is longer than a label value may be, as upstream).
    Dropped: everything the API server owns (uid, resourceVersion,
    generation, creationTimestamp, managedFields, ownerReferences, finalizers,
    status), ``spec.managedBy`` (so the worker's Job controller runs it), the
    ``kueue.x-k8s.io/stopping`` annotation of a manager Job being stopped (a
    Retry re-dispatches while the manager stops its Job; carried over, the
    worker's Kueue would wait for a stop that never ends there and never
    start the copy), and
    the generated selector with the controller's labels on the pod template.
    A Job with ``spec.manualSelector: true`` keeps its selector and template
    labels: the user chose them and the API server would refuse the copy
    without a selector (upstream drops it regardless).
    """
    metadata = section(job, "metadata")
    labels = dict(metadata.get("labels") or {})
    annotations = dict(metadata.get("annotations") or {})
    # The manager's own stop in progress, not the copy's: a worker Job carrying it counts as
    # still stopping there, and nothing on the worker ever finishes that stop (it never started).
    annotations.pop(STOPPING_ANNOTATION, None)
    labels[Labels.MULTIKUEUE_ORIGIN] = origin
    bind(labels, annotations, workload_name)
    new_metadata: dict[str, Any] = {"name": metadata.get("name"), "labels": labels}
    if metadata.get("namespace"):
        new_metadata["namespace"] = metadata["namespace"]
    if annotations:
        new_metadata["annotations"] = annotations

    spec = copy.deepcopy(dict(spec_of(job)))
    spec.pop("managedBy", None)
    spec["suspend"] = True
    if spec.get("manualSelector") is not True:
        spec.pop("selector", None)
        template_meta = (spec.get("template") or {}).get("metadata")
        if isinstance(template_meta, dict) and isinstance(template_meta.get("labels"), dict):
            kept = {k: v for k, v in template_meta["labels"].items() if k not in MANAGED_LABELS}
            if kept:
                template_meta["labels"] = kept
            else:
                del template_meta["labels"]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": new_metadata, "spec": spec}
