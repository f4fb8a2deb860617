"""What ``multikueue status`` reports, derived from API objects (pure).

The command answers "where is my job and why": for each Workload its queue,
how far it got in local admission, what each admission check says, which
workers were nominated or chosen and what the copy on the chosen worker is
doing; for each MultiKueueCluster whether the manager can reach it; for each
AdmissionCheck whether it is active. Everything here is computed from parsed
models so it can be unit-tested without a cluster; reading the objects is the
job of :mod:`multikueue.status.manager` and :mod:`multikueue.status.workers`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from multikueue.api import AdmissionCheck, MultiKueueCluster, Workload
from multikueue.api.constants import ConditionStatus, WorkloadConditionType, WorkloadReason
from multikueue.api.meta import Condition, Time, find_condition
from multikueue.api.multikueue import KubeConfig

__all__ = [
    "CheckRow",
    "ClusterRow",
    "UNKNOWN_PREFIX",
    "QuotaState",
    "QuotaStatus",
    "RemoteLookup",
    "StatusReport",
    "WorkloadCheck",
    "WorkloadKey",
    "WorkloadRow",
    "build_report",
    "check_row",
    "cluster_row",
    "quota_status",
    "remote_state",
    "workload_row",
]

#: (namespace, name) of a Workload; the copy on a worker has the same key.
WorkloadKey = tuple[str, str]

#: How a remote state that could not be read begins.
UNKNOWN_PREFIX = "unknown: "
#: What the Inactive state says when no Evicted condition explains it.
INACTIVE_MESSAGE = "spec.active is false"


class ReportModel(BaseModel):
    """Base of the report: immutable, camelCase in JSON/YAML like Kubernetes objects."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class QuotaState(StrEnum):
    """How far a Workload got in local admission, one word for people and scripts."""

    #: Waiting for quota (no reservation yet).
    PENDING = "Pending"
    #: Quota reserved in a ClusterQueue; some admission check has not passed yet.
    QUOTA_RESERVED = "QuotaReserved"
    #: Quota reserved and every admission check Ready.
    ADMITTED = "Admitted"
    #: The job is done (the reason says Succeeded or Failed).
    FINISHED = "Finished"
    #: Evicted (or being evicted); it waits to be admitted again.
    EVICTED = "Evicted"
    #: ``spec.active`` is false: it will not be admitted until reactivated.
    INACTIVE = "Inactive"


class QuotaStatus(ReportModel):
    """The quota state and the reason/message of the condition that decided it."""

    state: QuotaState
    reason: str = ""
    message: str = ""


class WorkloadCheck(ReportModel):
    """One admission check as the Workload records it."""

    name: str
    state: str
    message: str = ""


class WorkloadRow(ReportModel):
    """Everything the command shows about one Workload."""

    namespace: str
    name: str
    #: ``spec.queueName``: the LocalQueue it was submitted to.
    queue: str | None = None
    #: ``status.admission.clusterQueue``: where quota is reserved.
    cluster_queue: str | None = None
    quota: QuotaStatus
    checks: list[WorkloadCheck] = Field(default_factory=list, alias="admissionChecks")
    #: ``status.nominatedClusterNames``: workers holding a copy while none has won.
    nominated: list[str] = Field(default_factory=list, alias="nominatedClusterNames")
    #: ``status.clusterName``: the worker the Workload runs on.
    cluster: str | None = Field(default=None, alias="clusterName")
    #: State of the copy on the chosen worker; None when there is no chosen worker or it was not read.
    remote: str | None = None


class ClusterRow(ReportModel):
    """One MultiKueueCluster's connection state (its ``Active`` condition)."""

    name: str
    active: ConditionStatus = ConditionStatus.UNKNOWN
    reason: str = ""
    message: str = ""
    #: When ``Active`` last changed.
    since: Time | None = None
    #: Where the worker's kubeconfig is read from.
    kube_config: KubeConfig | None = None


class CheckRow(ReportModel):
    """One AdmissionCheck: its controller and whether it is active."""

    name: str
    controller: str = Field(alias="controllerName")
    #: ``Kind/name`` of the parameters object (a MultiKueueConfig for MultiKueue checks).
    parameters: str | None = None
    active: ConditionStatus = ConditionStatus.UNKNOWN
    reason: str = ""
    message: str = ""


class StatusReport(ReportModel):
    """The whole answer, in the order the command prints it."""

    workloads: list[WorkloadRow] = Field(default_factory=list)
    clusters: list[ClusterRow] = Field(default_factory=list, alias="multiKueueClusters")
    checks: list[CheckRow] = Field(default_factory=list, alias="admissionChecks")

    def to_document(self) -> dict[str, object]:
        """The report as plain JSON-ready data with Kubernetes-style keys; every key always present."""
        return self.model_dump(by_alias=True, mode="json")


class RemoteLookup(ReportModel):
    """What reading the chosen worker gave for one Workload: its copy, nothing, or why it is unknown."""

    workload: Workload | None = None
    #: Why the copy could not be read (a few words); None when the worker answered.
    error: str | None = None


# --- derivations -----------------------------------------------------------


def _true(condition: Condition | None) -> bool:
    return condition is not None and condition.status == ConditionStatus.TRUE


def _from(state: QuotaState, condition: Condition) -> QuotaStatus:
    return QuotaStatus(state=state, reason=condition.reason, message=condition.message)


def quota_status(wl: Workload) -> QuotaStatus:
    """The Workload's quota state, checked from the most final state down.

    Finished beats everything (a finished Workload may still be marked
    inactive); Inactive beats Evicted because deactivation is what keeps it
    from coming back; Evicted beats the reservation conditions because an
    eviction in progress still shows ``QuotaReserved=True`` until the quota
    is released, and the controller resets ``Evicted`` on the next
    reservation.
    """
    conditions = wl.status.conditions if wl.status else None
    finished = find_condition(conditions, WorkloadConditionType.FINISHED)
    if _true(finished):
        assert finished is not None
        return _from(QuotaState.FINISHED, finished)
    evicted = find_condition(conditions, WorkloadConditionType.EVICTED)
    if not wl.spec.active:
        if _true(evicted):
            assert evicted is not None
            return _from(QuotaState.INACTIVE, evicted)
        return QuotaStatus(state=QuotaState.INACTIVE, reason=WorkloadReason.DEACTIVATED, message=INACTIVE_MESSAGE)
    if _true(evicted):
        assert evicted is not None
        return _from(QuotaState.EVICTED, evicted)
    admitted = find_condition(conditions, WorkloadConditionType.ADMITTED)
    if _true(admitted):
        assert admitted is not None
        return _from(QuotaState.ADMITTED, admitted)
    reserved = find_condition(conditions, WorkloadConditionType.QUOTA_RESERVED)
    if _true(reserved):
        assert reserved is not None
        return _from(QuotaState.QUOTA_RESERVED, reserved)
    if reserved is not None:
        # QuotaReserved=False says why it waits (e.g. Inadmissible: LocalQueue not found).
        return _from(QuotaState.PENDING, reserved)
    return QuotaStatus(state=QuotaState.PENDING)


def remote_state(lookup: RemoteLookup | None, cluster: str) -> str | None:
    """A few words on the copy of a Workload on its chosen worker ``cluster``.

    ``None`` when the worker was not read (``--no-remote``, or no worker
    chosen). The words follow the quota state of the copy, which is what the
    worker's own Kueue decided, e.g. ``Admitted on worker1`` or
    ``Finished: Succeeded``.
    """
    if lookup is None:
        return None
    if lookup.error is not None:
        return UNKNOWN_PREFIX + lookup.error
    if lookup.workload is None:
        return "not found"
    quota = quota_status(lookup.workload)
    if quota.state == QuotaState.ADMITTED:
        return f"Admitted on {cluster}"
    if quota.state in (QuotaState.FINISHED, QuotaState.EVICTED, QuotaState.INACTIVE) and quota.reason:
        return f"{quota.state}: {quota.reason}"
    return str(quota.state)


def workload_row(wl: Workload, lookup: RemoteLookup | None = None) -> WorkloadRow:
    """The row of one Workload; ``lookup`` is what was read on its chosen worker, if anything."""
    status = wl.status
    cluster = status.cluster_name if status else None
    return WorkloadRow(
        namespace=wl.namespace or "",
        name=wl.name,
        queue=wl.spec.queue_name,
        cluster_queue=status.admission.cluster_queue if status and status.admission else None,
        quota=quota_status(wl),
        checks=[
            WorkloadCheck(name=c.name, state=str(c.state), message=c.message)
            for c in (status.admission_checks or [] if status else [])
        ],
        nominated=list(status.nominated_cluster_names or []) if status else [],
        cluster=cluster,
        remote=remote_state(lookup, cluster) if cluster else None,
    )


def _active(conditions: Iterable[Condition] | None) -> tuple[ConditionStatus, str, str, Time | None]:
    condition = find_condition(conditions, "Active")
    if condition is None:
        return ConditionStatus.UNKNOWN, "", "", None
    return condition.status, condition.reason, condition.message, condition.last_transition_time


def cluster_row(cluster: MultiKueueCluster) -> ClusterRow:
    """The row of one MultiKueueCluster; no ``Active`` condition yet reads as Unknown."""
    active, reason, message, since = _active(cluster.status.conditions if cluster.status else None)
    source = cluster.spec.cluster_source if cluster.spec else None
    return ClusterRow(
        name=cluster.name,
        active=active,
        reason=reason,
        message=message,
        since=since,
        kube_config=source.kube_config if source else None,
    )


def check_row(check: AdmissionCheck) -> CheckRow:
    """The row of one AdmissionCheck; no ``Active`` condition yet reads as Unknown."""
    active, reason, message, _ = _active(check.status.conditions if check.status else None)
    params = check.spec.parameters if check.spec else None
    return CheckRow(
        name=check.name,
        controller=check.spec.controller_name if check.spec else "",
        parameters=f"{params.kind}/{params.name}" if params else None,
        active=active,
        reason=reason,
        message=message,
    )


def build_report(
    workloads: Iterable[Workload],
    clusters: Iterable[MultiKueueCluster],
    checks: Iterable[AdmissionCheck],
    remote_states: Mapping[WorkloadKey, RemoteLookup] | None = None,
) -> StatusReport:
    """The report of these objects, each list sorted by name so repeated runs compare equal.

    ``remote_states`` maps a Workload to what was read on its chosen worker;
    a Workload missing from it gets no remote state (the workers were not
    asked).
    """
    remote_states = remote_states or {}
    rows = [workload_row(wl, remote_states.get((wl.namespace or "", wl.name))) for wl in workloads]
    return StatusReport(
        workloads=sorted(rows, key=lambda r: (r.namespace, r.name)),
        clusters=sorted((cluster_row(c) for c in clusters), key=lambda r: r.name),
        checks=sorted((check_row(c) for c in checks), key=lambda r: r.name),
    )
