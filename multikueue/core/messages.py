"""Every user-visible message of local quota admission, worded as upstream Kueue words it.

Users, dashboards and scripts match these texts (and workers running upstream
Kueue write the same ones), so each is copied from upstream's source; the
comment names where. Reasons (the CamelCase condition reasons) live in
:mod:`multikueue.api.constants`. Templates use :meth:`str.format` fields.
"""

from __future__ import annotations

__all__ = [
    "ADMITTED",
    "CLUSTER_QUEUE_INACTIVE",
    "CLUSTER_QUEUE_MISSING",
    "CQ_ACTIVE",
    "CQ_INACTIVE",
    "CQ_INACTIVE_UNKNOWN",
    "CQ_INACTIVE_ADMISSION_CHECKS",
    "CQ_MISSING_ADMISSION_CHECKS",
    "CQ_MISSING_FLAVORS",
    "CQ_STOPPED",
    "EXCEEDS_MAX_CAPACITY",
    "INVALID_RESOURCES",
    "FLAVOR_NOT_FOUND",
    "INSUFFICIENT_UNUSED_QUOTA",
    "LOCAL_QUEUE_INACTIVE",
    "LOCAL_QUEUE_MISSING",
    "LQ_ACTIVE",
    "LQ_CLUSTER_QUEUE_INACTIVE",
    "LQ_STOPPED",
    "MAX_CONDITION_MESSAGE",
    "NAMESPACE_MISMATCH",
    "NODE_AFFINITY_MISMATCH",
    "NO_FLAVORS",
    "POD_SET_NO_FIT",
    "QUOTA_RESERVED",
    "RESOURCE_UNAVAILABLE",
    "UNTOLERATED_TAINT",
    "aggregate",
    "truncate",
]

# --- Workload QuotaReserved=False, reason Inadmissible -------------------------
# pkg/controller/core/workload_controller.go (reconcile of a Workload without quota)
LOCAL_QUEUE_MISSING = "LocalQueue {name} doesn't exist"
LOCAL_QUEUE_INACTIVE = "LocalQueue {name} is inactive"
CLUSTER_QUEUE_MISSING = "ClusterQueue {name} doesn't exist"
CLUSTER_QUEUE_INACTIVE = "ClusterQueue {name} is inactive"

# --- Workload QuotaReserved=False, reason Pending ------------------------------
# pkg/scheduler/scheduler.go (nominate)
NAMESPACE_MISMATCH = "Workload namespace doesn't match ClusterQueue selector"
# pkg/workload/resources.go (ValidateResources, ErrInvalidWLResources); {errors} is Go's aggregate:
# the error itself, or "[e1, e2]" for several.
INVALID_RESOURCES = "resources validation failed: {errors}"

# pkg/scheduler/flavorassigner/flavorassigner.go
POD_SET_NO_FIT = "couldn't assign flavors to pod set {pod_set}: {reasons}"
RESOURCE_UNAVAILABLE = "resource {resource} unavailable in ClusterQueue"
FLAVOR_NOT_FOUND = "flavor {flavor} not found"
UNTOLERATED_TAINT = "untolerated taint {taint} in flavor {flavor}"
NODE_AFFINITY_MISMATCH = "flavor {flavor} doesn't match node affinity"
INSUFFICIENT_UNUSED_QUOTA = "insufficient unused quota for {resource} in flavor {flavor}, {missing} more needed"
# Since Kueue v0.14.2/v0.15 (#7232); before: "..., request > maximum capacity (24 > 16)".
EXCEEDS_MAX_CAPACITY = (
    "insufficient quota for {resource} in flavor {flavor}, previously considered podsets requests ({previous}) "
    "+ current podset request ({request}) > maximum capacity ({capacity})"
)
#: Ours: a resource group without flavors (the CRD forbids it, so only a hand-built object shows it).
NO_FLAVORS = "no flavors to try"

# --- Workload QuotaReserved=True / Admitted=True ------------------------------------
# pkg/workload/workload.go (SetQuotaReservation): written with the admission.
QUOTA_RESERVED = "Quota reserved in ClusterQueue {name}"
ADMITTED = "The workload is admitted"

# --- ClusterQueue Active ----------------------------------------------------------
# pkg/cache/scheduler/clusterqueue.go (inactiveReason)
CQ_ACTIVE = "Can admit new workloads"
CQ_INACTIVE = "Can't admit new workloads: {details}."
CQ_INACTIVE_UNKNOWN = "Can't admit new workloads."
CQ_STOPPED = "is stopped"
CQ_MISSING_FLAVORS = "references missing ResourceFlavor(s): {names}"
CQ_MISSING_ADMISSION_CHECKS = "references missing AdmissionCheck(s): {names}"
CQ_INACTIVE_ADMISSION_CHECKS = "references inactive AdmissionCheck(s): {names}"

# --- LocalQueue Active --------------------------------------------------------------
# pkg/controller/core/localqueue_controller.go
LQ_ACTIVE = "Can submit new workloads to localQueue"
LQ_STOPPED = "LocalQueue is stopped"
LQ_CLUSTER_QUEUE_INACTIVE = "Can't submit new workloads to clusterQueue"

#: ``metav1.Condition.message`` is limited to 32768 characters (pkg/util/api TruncateConditionMessage).
MAX_CONDITION_MESSAGE = 32 * 1024


def truncate(message: str, limit: int = MAX_CONDITION_MESSAGE) -> str:
    """Shorten a condition message to what the API server accepts, marking the cut."""
    if len(message) <= limit:
        return message
    suffix = "..."
    return message[: limit - len(suffix)] + suffix


def aggregate(errors: list[str]) -> str:
    """Several errors as Go's ``utilerrors.Aggregate`` prints them: alone, or ``[a, b]``."""
    if len(errors) == 1:
        return errors[0]
    return "[" + ", ".join(errors) + "]"
