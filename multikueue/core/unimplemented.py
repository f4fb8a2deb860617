"""ClusterQueue settings this controller accepts but does not act on, named so that none is ignored silently.

The ClusterQueue API is upstream Kueue's, so a manifest written for upstream
can set a field whose behaviour is not built here. Refusing the object would
break those manifests; taking it quietly would let a user believe the
setting works. So each such setting is named, with what the controller does
instead: the queue status writer reports the list once per spec (a log line
and a Warning Event on the ClusterQueue; decisions, "Settings accepted but
not acted on").

A setting whose value asks for what this controller does anyway (the
defaults, ``BorrowingOverPreemption``, ``NoAdmissionFairSharing``) is not
reported. Pure: reads the spec, returns messages.
"""

from __future__ import annotations

from multikueue.api.clusterqueue import (
    AdmissionMode,
    ClusterQueueSpec,
    FlavorFungibilityPolicy,
    FlavorFungibilityPreference,
)

#: The reason of the Warning Event that names them.
EVENT_REASON = "NotImplemented"


def unimplemented_settings(spec: ClusterQueueSpec) -> tuple[str, ...]:
    """One message per setting of ``spec`` that this controller does not act on, with what it does instead."""
    notes: list[str] = []
    fungibility = spec.flavor_fungibility
    if fungibility.when_can_preempt == FlavorFungibilityPolicy.MAY_STOP_SEARCH:
        notes.append(
            "flavorFungibility.whenCanPreempt=MayStopSearch is not implemented: the next flavors are still tried "
            "before preempting in one (as TryNextFlavor)"
        )
    if fungibility.preference == FlavorFungibilityPreference.PREEMPTION_OVER_BORROWING:
        notes.append(
            "flavorFungibility.preference=PreemptionOverBorrowing is not implemented: a flavor that fits by "
            "borrowing is chosen before one that needs preemption (as BorrowingOverPreemption)"
        )
    if spec.admission_scope is not None and spec.admission_scope.admission_mode == AdmissionMode.USAGE_BASED_ADMISSION_FAIR_SHARING:
        notes.append(
            "admissionScope.admissionMode=UsageBasedAdmissionFairSharing is not implemented: the LocalQueues of "
            "this ClusterQueue are not ordered by their past usage"
        )
    if spec.concurrent_admission_policy is not None:
        notes.append(
            "concurrentAdmissionPolicy is not implemented: a Workload is admitted with one flavor assignment and "
            "is never moved to another"
        )
    return tuple(notes)


def unimplemented_message(notes: tuple[str, ...]) -> str:
    """The Event's and log line's text for ``notes``."""
    return "settings accepted but not acted on by this controller: " + "; ".join(notes)
