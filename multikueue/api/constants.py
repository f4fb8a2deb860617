"""Names and values shared with upstream Kueue (``kueue.x-k8s.io/v1beta2``).

Every string here is the exact value upstream Kueue writes or reads: users'
manifests, kubectl printer columns and workers running upstream Kueue all
depend on them, so they must never be reworded.
"""

from __future__ import annotations

from enum import StrEnum

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"


class Labels:
    """Label keys on jobs, Workloads and remote copies."""

    #: The LocalQueue a job (and its Workload) is submitted to.
    QUEUE_NAME = "kueue.x-k8s.io/queue-name"
    #: The WorkloadPriorityClass of a job; always mutable (it may change preemption).
    PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
    #: On a job: bind to this existing Workload instead of creating one (used on workers).
    PREBUILT_WORKLOAD_NAME = "kueue.x-k8s.io/prebuilt-workload-name"
    #: On objects a manager creates on workers: which manager (origin) owns them, for GC.
    MULTIKUEUE_ORIGIN = "kueue.x-k8s.io/multikueue-origin"
    #: On a Workload: the UID of the job that owns it.
    JOB_UID = "kueue.x-k8s.io/job-uid"
    #: On a job: the maximum execution time in seconds copied to the Workload.
    MAX_EXEC_TIME_SECONDS = "kueue.x-k8s.io/max-exec-time-seconds"
    #: On pods of a MultiKueue worker Workload.
    MULTIKUEUE_WORKER_WORKLOAD_POD = "kueue.x-k8s.io/multikueue-worker-workload-pod"


class Annotations:
    """Annotation keys."""

    #: Deprecated upstream alias of the queue-name label, still honoured on jobs.
    QUEUE_NAME = "kueue.x-k8s.io/queue-name"
    #: On remote copies: the UID of the original object on the manager.
    MULTIKUEUE_ORIGIN_UID = "kueue.x-k8s.io/multikueue-origin-uid"


class Finalizers:
    """Finalizers Kueue puts on objects."""

    #: Held by a Workload while it holds quota, so quota is released before it goes away.
    RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"


class MultiKueue:
    """Fixed values of the MultiKueue admission check."""

    #: ``spec.managedBy`` of a job that MultiKueue runs on a worker.
    MANAGED_BY = "kueue.x-k8s.io/multikueue"
    #: ``spec.controllerName`` of an AdmissionCheck handled by MultiKueue.
    CONTROLLER_NAME = "kueue.x-k8s.io/multikueue"
    #: Key of the kubeconfig inside a MultiKueueCluster's Secret.
    KUBECONFIG_SECRET_KEY = "kubeconfig"
    #: ``kind`` of the AdmissionCheck parameters object.
    CONFIG_KIND = "MultiKueueConfig"


class Dispatcher(StrEnum):
    """How the manager nominates worker clusters for a Workload."""

    #: Copy the Workload to every worker at once (the default).
    ALL_AT_ONCE = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
    #: Nominate a few workers at a time, adding more when none admits it.
    INCREMENTAL = "kueue.x-k8s.io/multikueue-dispatcher-incremental"


class ConditionStatus(StrEnum):
    """Values of ``Condition.status``."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class WorkloadConditionType(StrEnum):
    """Condition types on a Workload's status."""

    #: Quota is reserved in a ClusterQueue (not yet admitted while checks are pending).
    QUOTA_RESERVED = "QuotaReserved"
    #: Quota is reserved and every admission check is Ready.
    ADMITTED = "Admitted"
    #: The job finished (reason Succeeded or Failed).
    FINISHED = "Finished"
    #: The Workload was evicted; the reason says why.
    EVICTED = "Evicted"
    #: The Workload was preempted; the reason says where.
    PREEMPTED = "Preempted"
    #: The Workload was put back in its queue after an eviction.
    REQUEUED = "Requeued"
    #: At least ``count`` pods of every pod set are ready.
    PODS_READY = "PodsReady"
    #: Temporary marker: the Workload must be deactivated (e.g. a check was Rejected).
    DEACTIVATION_TARGET = "DeactivationTarget"


#: Condition type shared by ClusterQueue, LocalQueue, AdmissionCheck and MultiKueueCluster.
ACTIVE = "Active"


class WorkloadReason:
    """Reasons on a Workload's conditions."""

    # QuotaReserved / Admitted
    PENDING = "Pending"
    QUOTA_RESERVED = "QuotaReserved"
    ADMITTED = "Admitted"
    #: The LocalQueue or ClusterQueue is missing or inactive.
    INADMISSIBLE = "Inadmissible"
    # Finished
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    OUT_OF_SYNC = "OutOfSync"
    #: The Workload's owner is gone or being deleted (upstream's ``FinishOrphanedWorkloads``).
    OWNER_NOT_FOUND = "OwnerNotFound"
    # Evicted (and Requeued)
    EVICTED_BY_PREEMPTION = "Preempted"
    EVICTED_BY_PODS_READY_TIMEOUT = "PodsReadyTimeout"
    #: An admission check went to Retry (or Rejected); quota is released.
    EVICTED_BY_ADMISSION_CHECK = "AdmissionCheck"
    EVICTED_BY_CLUSTER_QUEUE_STOPPED = "ClusterQueueStopped"
    EVICTED_BY_LOCAL_QUEUE_STOPPED = "LocalQueueStopped"
    EVICTED_DUE_TO_NODE_FAILURES = "NodeFailures"
    WORKLOAD_SLICE_REPLACED = "WorkloadSliceReplaced"
    #: ``spec.active`` became false (v1beta2). Combined with a cause, see :func:`reason_with_cause`.
    DEACTIVATED = "Deactivated"
    #: v1beta1's name for eviction by deactivation; still seen on older workers.
    INACTIVE_WORKLOAD = "InactiveWorkload"
    #: Evicted because an admission check was Rejected.
    DEACTIVATED_DUE_TO_ADMISSION_CHECK = "DeactivatedDueToAdmissionCheck"
    DEACTIVATED_DUE_TO_REQUEUING_LIMIT_EXCEEDED = "DeactivatedDueToRequeuingLimitExceeded"
    DEACTIVATED_DUE_TO_MAXIMUM_EXECUTION_TIME_EXCEEDED = "DeactivatedDueToMaximumExecutionTimeExceeded"
    REACTIVATED = "Reactivated"
    BACKOFF_FINISHED = "BackoffFinished"
    CLUSTER_QUEUE_RESTARTED = "ClusterQueueRestarted"
    LOCAL_QUEUE_RESTARTED = "LocalQueueRestarted"
    REQUEUING_LIMIT_EXCEEDED = "RequeuingLimitExceeded"
    MAXIMUM_EXECUTION_TIME_EXCEEDED = "MaximumExecutionTimeExceeded"
    # PodsReady
    WAIT_FOR_START = "WaitForStart"
    WAIT_FOR_RECOVERY = "WaitForRecovery"
    STARTED = "Started"
    RECOVERED = "Recovered"


class PreemptionReason:
    """Reasons on a Workload's ``Preempted`` condition."""

    IN_CLUSTER_QUEUE = "InClusterQueue"
    IN_COHORT_RECLAMATION = "InCohortReclamation"
    IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
    IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


def reason_with_cause(reason: str, cause: str) -> str:
    """Upstream's compound reasons, e.g. ``Deactivated`` + ``AdmissionCheck`` -> ``DeactivatedDueToAdmissionCheck``."""
    return f"{reason}DueTo{cause}"


class CheckState(StrEnum):
    """State of one admission check on a Workload (``status.admissionChecks[].state``)."""

    #: The check has not decided yet.
    PENDING = "Pending"
    #: The check passed; with all checks Ready the Workload is Admitted.
    READY = "Ready"
    #: The check failed for now: quota is released and the Workload is requeued.
    RETRY = "Retry"
    #: The check failed for good: the Workload is deactivated.
    REJECTED = "Rejected"


class ClusterQueueReason:
    """Reasons on a ClusterQueue's ``Active`` condition."""

    READY = "Ready"
    TERMINATING = "Terminating"
    STOPPED = "Stopped"
    FLAVOR_NOT_FOUND = "FlavorNotFound"
    ADMISSION_CHECK_NOT_FOUND = "AdmissionCheckNotFound"
    ADMISSION_CHECK_INACTIVE = "AdmissionCheckInactive"
    MULTIPLE_MULTIKUEUE_ADMISSION_CHECKS = "MultipleMultiKueueAdmissionChecks"
    MULTIKUEUE_ADMISSION_CHECK_APPLIED_PER_FLAVOR = "MultiKueueAdmissionCheckAppliedPerFlavor"
    TOPOLOGY_NOT_FOUND = "TopologyNotFound"
    UNKNOWN = "Unknown"


class LocalQueueReason:
    """Reasons on a LocalQueue's ``Active`` condition."""

    READY = "Ready"
    STOPPED = "Stopped"
    CLUSTER_QUEUE_DOES_NOT_EXIST = "ClusterQueueDoesNotExist"
    CLUSTER_QUEUE_IS_INACTIVE = "ClusterQueueIsInactive"


class AdmissionCheckReason:
    """Reasons on a MultiKueue AdmissionCheck's ``Active`` condition."""

    ACTIVE = "Active"
    #: The parameters do not name a usable MultiKueueConfig.
    BAD_CONFIG = "BadConfig"
    #: Some, not all, of the config's clusters are missing or inactive (the check stays active).
    SOME_ACTIVE_CLUSTERS = "SomeActiveClusters"
    #: None of the config's clusters is usable.
    NO_USABLE_CLUSTERS = "NoUsableClusters"


class MultiKueueClusterReason:
    """Reasons on a MultiKueueCluster's ``Active`` condition."""

    ACTIVE = "Active"
    #: The kubeconfig cannot be read (missing Secret, key or file).
    BAD_CONFIG = "BadConfig"
    #: The kubeconfig was read but cannot be parsed.
    BAD_KUBECONFIG = "BadKubeConfig"
    #: The kubeconfig uses something refused for safety (exec, token files, ...).
    INSECURE_KUBECONFIG = "InsecureKubeConfig"
    #: The worker's API server could not be reached.
    CLIENT_CONNECTION_FAILED = "ClientConnectionFailed"
