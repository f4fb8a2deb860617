"""Workload transitions after quota reservation (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from multikueue.api import Workload
from multikueue.api.constants import Finalizers
from multikueue.api.meta import Condition
from multikueue.api.workload import Admission
from multikueue.core.lifecycle import (
    Releaser,
    awaits_release,
    finished_status,
    holds_quota,
    may_report_pending,
    next_update,
    only_numbers_differ,
    says_pending,
    pending_status,
    preempted,
    release_wait,
    released,
    reservation_status,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
T0 = "2025-12-31T00:00:00Z"


def workload(checks: list[tuple[str, str]] | None = None, *, reserved: bool = True, admitted: bool = False,
             finalizer: bool = True, active: bool = True, **status: Any) -> Workload:
    conditions = []
    if reserved:
        conditions.append({"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": T0})
    if admitted:
        conditions.append({"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": T0})
    body: dict[str, Any] = {
        "metadata": {"name": "wl", "namespace": "ns", "resourceVersion": "7",
                     "finalizers": [Finalizers.RESOURCE_IN_USE] if finalizer else []},
        "spec": {"queueName": "q", "active": active, "podSets": [{"name": "main", "count": 1, "template": {}}]},
        "status": {"conditions": conditions, **status},
    }
    if reserved:
        body["status"]["admission"] = {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": "1"}, "count": 1}]}
    if checks:
        body["status"]["admissionChecks"] = [{"name": n, "state": s, "message": f"{n} says {s}", "lastTransitionTime": T0} for n, s in checks]
    return Workload.from_k8s(body)


def types(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_reservation_without_checks_admits_at_once() -> None:
    wl = workload(reserved=False, finalizer=False)
    admission = Admission.model_validate({"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": "1"}, "count": 1}]})
    status = reservation_status(wl, admission, [], NOW)
    assert types(status) == {"QuotaReserved": ("True", "QuotaReserved"), "Admitted": ("True", "Admitted")}
    assert status["admission"]["clusterQueue"] == "cq"
    assert status["admissionChecks"] is None


def test_reservation_with_checks_waits_for_them() -> None:
    wl = workload(reserved=False, finalizer=False)
    admission = Admission.model_validate({"clusterQueue": "cq"})
    status = reservation_status(wl, admission, ["mk"], NOW)
    assert types(status) == {"QuotaReserved": ("True", "QuotaReserved")}
    assert [(c["name"], c["state"]) for c in status["admissionChecks"]] == [("mk", "Pending")]


def test_all_checks_ready_admits() -> None:
    update = next_update(workload([("mk", "Ready")]), NOW)
    assert update is not None and update.transition == "admitted"
    assert types(update.status)["Admitted"] == ("True", "Admitted")


def test_pending_check_waits() -> None:
    assert next_update(workload([("mk", "Pending")]), NOW) is None


def test_admitted_workload_is_left_alone() -> None:
    assert next_update(workload([("mk", "Ready")], admitted=True), NOW) is None


def test_retry_evicts_and_requeues_with_checks_reset() -> None:
    update = next_update(workload([("mk", "Retry"), ("other", "Ready")], admitted=True), NOW)
    assert update is not None and update.transition == "retry"
    assert update.status["admission"] is None
    conditions = types(update.status)
    assert conditions["Evicted"] == ("True", "AdmissionCheck")
    assert conditions["QuotaReserved"][0] == "False"
    assert conditions["Admitted"][0] == "False"
    assert conditions["Requeued"][0] == "True"
    assert {c["state"] for c in update.status["admissionChecks"]} == {"Pending"}
    assert update.remove_finalizer and not update.deactivate
    assert "mk says Retry" in update.events[0].message


def test_an_eviction_clears_where_the_last_attempt_ran() -> None:
    """As upstream's resetClusterNomination: the next reservation dispatches afresh.

    Seen in the fault suite: a Workload re-reserved before the MultiKueue
    check cleared the old winner found it still unreachable and was set to
    Retry again, five times in two seconds."""
    wl = workload([("mk", "Retry")], admitted=True, clusterName="worker2")
    update = next_update(wl, NOW)
    assert update is not None and update.transition == "retry"
    assert update.status["clusterName"] is None and update.status["nominatedClusterNames"] is None
    untouched = next_update(workload([("mk", "Retry")], admitted=True), NOW)
    assert untouched is not None and "clusterName" not in untouched.status


def test_rejected_deactivates() -> None:
    update = next_update(workload([("mk", "Rejected")]), NOW)
    assert update is not None and update.transition == "rejected"
    assert update.deactivate
    assert types(update.status)["Evicted"] == ("True", "DeactivatedDueToAdmissionCheck")
    assert "Requeued" not in types(update.status)


def test_inactive_workload_holding_quota_is_evicted() -> None:
    update = next_update(workload(active=False), NOW)
    assert update is not None and update.transition == "deactivated"
    assert types(update.status)["Evicted"] == ("True", "Deactivated")


def test_finished_workload_releases_finalizer() -> None:
    wl = workload(admitted=True)
    wl.status.conditions.append(wl.status.conditions[0].model_copy(update={"type": "Finished", "reason": "Succeeded"}))
    assert not holds_quota(wl)
    update = next_update(wl, NOW)
    assert update is not None and update.remove_finalizer and update.status is None


def test_deleted_workload_releases_finalizer() -> None:
    wl = workload()
    wl.metadata.deletion_timestamp = NOW
    update = next_update(wl, NOW)
    assert update is not None and update.remove_finalizer


@pytest.mark.parametrize("placement", [{"clusterName": "worker1"}, {"nominatedClusterNames": ["worker1", "worker2"]}])
def test_a_deleted_workload_placed_on_workers_keeps_its_finalizer_for_the_multikueue_check(placement: dict[str, Any]) -> None:
    """Issue 10, item I: the MultiKueue check must still see it to delete the remote job and copies by name."""
    wl = workload([("mk", "Ready")], admitted=True, **placement)
    wl.metadata.deletion_timestamp = NOW
    assert next_update(wl, NOW) is None


def test_a_finished_workload_placed_on_a_worker_releases_its_finalizer() -> None:
    """Finished: the plan that finished it deleted the remote objects; deleting it later must not wait."""
    wl = workload([("mk", "Ready")], admitted=True, clusterName="worker1")
    wl.status.conditions.append(wl.status.conditions[0].model_copy(update={"type": "Finished", "reason": "Succeeded"}))
    wl.metadata.deletion_timestamp = NOW
    update = next_update(wl, NOW)
    assert update is not None and update.remove_finalizer


def test_reserved_without_finalizer_gets_it_back() -> None:
    update = next_update(workload([("mk", "Pending")], finalizer=False), NOW)
    assert update is not None and update.add_finalizer and update.status is None


def test_a_workload_created_without_finalizer_and_without_checks_is_left_without_one() -> None:
    """As upstream: only the integrations put the finalizer on their Workloads; nothing waits on the deletion here."""
    assert next_update(workload(admitted=True, finalizer=False), NOW) is None
    # admitted here after someone else reserved it: the Admitted write alone
    update = next_update(workload(finalizer=False), NOW)
    assert update is not None and update.transition == "admitted" and not update.add_finalizer
    # with a check, the transition to Admitted adds it (the check's remote objects are cleaned up before deletion)
    update = next_update(workload([("mk", "Ready")], finalizer=False), NOW)
    assert update is not None and update.transition == "admitted" and update.add_finalizer


def test_pending_status_keeps_other_conditions() -> None:
    wl = workload(reserved=False, finalizer=False)
    status = pending_status(wl, "Pending", "couldn't assign flavors", NOW)
    assert status["conditions"][-1]["message"] == "couldn't assign flavors"


def test_a_late_why_it_waits_write_never_erases_a_reservation() -> None:
    assert may_report_pending(workload(reserved=False), assumed=False)
    assert not may_report_pending(workload(reserved=False), assumed=True)
    assert not may_report_pending(workload(reserved=True), assumed=False)
    assert not may_report_pending(None, assumed=False)


def test_a_why_it_waits_message_that_changed_only_in_its_figures_is_told_apart() -> None:
    said = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor rf, 3 more needed"
    wl = Workload.from_k8s({**workload(reserved=False).to_k8s(), "status": {"conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": said, "lastTransitionTime": T0}]}})
    assert only_numbers_differ(wl, "Pending", said.replace("3 more", "12 more"))
    assert not only_numbers_differ(wl, "Pending", said)  # the same: nothing to write at all
    assert not only_numbers_differ(wl, "Inadmissible", said.replace("3 more", "2 more"))  # another reason
    assert not only_numbers_differ(wl, "Pending", said + ". Pending the preemption of 2 workload(s)")
    assert not only_numbers_differ(workload(reserved=False), "Pending", said)  # nothing said yet


def test_a_report_the_workload_already_says_word_for_word_is_not_written_again() -> None:
    """Issue 16: a report decided on an older version, written after an earlier one with the same words."""
    said = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor rf, 3 more needed"
    wl = Workload.from_k8s({**workload(reserved=False).to_k8s(), "status": {"conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": said, "lastTransitionTime": T0}]}})
    assert says_pending(wl, "Pending", said)
    assert not says_pending(wl, "Pending", said.replace("3 more", "2 more"))
    assert not says_pending(wl, "Inadmissible", said)
    assert not says_pending(workload(reserved=False), "Pending", said)


def test_finishing_replaces_an_earlier_finished_condition() -> None:
    first = {"type": "Finished", "status": "True", "reason": "Failed", "message": "", "lastTransitionTime": T0}
    wl = workload(admitted=True)
    status = finished_status(wl, first)
    assert types(status) == {"QuotaReserved": ("True", "QuotaReserved"), "Admitted": ("True", "Admitted"), "Finished": ("True", "Failed")}
    again = finished_status(Workload.from_k8s({**wl.to_k8s(), "status": {"conditions": status["conditions"]}}), {**first, "reason": "Succeeded"})
    assert [c["reason"] for c in again["conditions"] if c["type"] == "Finished"] == ["Succeeded"]


def merged(wl: Workload, status: dict[str, Any]) -> Workload:
    """``wl`` after the merge patch ``status`` of its ``.status``."""
    body = wl.to_k8s()
    body["status"] = {k: v for k, v in {**body.get("status", {}), **status}.items() if v is not None}
    return Workload.from_k8s(body)


MESSAGE = "Preempted to accommodate a workload (UID: u, JobUID: j) due to ..."


def test_a_victim_of_preemption_is_evicted_and_requeued_but_keeps_its_quota_until_released() -> None:
    wl = workload([("mk", "Ready")], admitted=True, clusterName="worker1")
    update = preempted(wl, "InClusterQueue", MESSAGE, NOW)
    assert update.transition == "preempted" and update.status is not None
    assert set(update.status) == {"conditions"}, "the reservation, the checks and clusterName stay until the release"
    conditions = types(update.status)
    assert conditions["Evicted"] == ("True", "Preempted")
    assert conditions["Preempted"] == ("True", "InClusterQueue")
    assert conditions["QuotaReserved"] == ("True", "QuotaReserved") and conditions["Admitted"] == ("True", "Admitted")
    assert conditions["Requeued"] == ("True", "Preempted")
    assert not update.remove_finalizer, "the finalizer stays, as upstream's"
    assert [(e.reason, e.message[:9]) for e in update.events] == [("Preempted", "Preempted")]

    victim = merged(wl, update.status)
    assert holds_quota(victim) and awaits_release(victim)
    release = released(victim, NOW)
    assert release.status is not None and release.status["admission"] is None
    after = types(release.status)
    assert after["QuotaReserved"] == ("False", "Pending") and after["Admitted"] == ("False", "Pending")
    assert after["Evicted"] == ("True", "Preempted"), "Evicted stays until the next reservation"
    assert [c["message"] for c in release.status["conditions"] if c["type"] == "QuotaReserved"] == [MESSAGE]
    assert {c["state"] for c in release.status["admissionChecks"]} == {"Pending"}
    assert release.status["clusterName"] is None, "the MultiKueue check removes the remote copies"
    freed = merged(victim, release.status)
    assert not holds_quota(freed) and not awaits_release(freed)

    again = reservation_status(freed, Admission.model_validate(wl.status.admission.to_dict()), [], NOW)
    after = types(again)
    assert after["Evicted"] == ("False", "QuotaReserved") and after["Preempted"] == ("False", "QuotaReserved")


def test_who_releases_a_preempted_workload_and_when() -> None:
    victim = merged(workload(admitted=True), preempted(workload(admitted=True), "InClusterQueue", MESSAGE, NOW).status or {})
    later = NOW + timedelta(seconds=2)
    # Its Job's integration stops the Job first, then releases: never the lifecycle.
    assert release_wait(victim, later, Releaser.JOB, 5.0) is None
    assert next_update(victim, later + timedelta(hours=1), Releaser.JOB, 5.0) is None
    # Nothing of ours to stop: at once.
    assert release_wait(victim, later, Releaser.AT_ONCE, 5.0) == 0.0
    update = next_update(victim, later, Releaser.AT_ONCE, 5.0)
    assert update is not None and update.transition == "eviction released"
    # Unknown to us: an outside controller may release it; the lifecycle does once the grace has passed.
    assert release_wait(victim, later, Releaser.OUTSIDE, 5.0) == pytest.approx(3.0)
    assert next_update(victim, later, Releaser.OUTSIDE, 5.0) is None
    update = next_update(victim, NOW + timedelta(seconds=5), Releaser.OUTSIDE, 5.0)
    assert update is not None and update.transition == "eviction released"


def test_a_reservation_newer_than_an_old_eviction_is_not_released() -> None:
    # Reserved by something that left Evicted=True from an earlier eviction in place (a hand-made Workload).
    wl = workload(admitted=True)
    assert wl.status is not None
    wl.status.conditions = [*(wl.status.conditions or []), Condition.model_validate(
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "", "lastTransitionTime": "2025-12-30T00:00:00Z"}
    )]  # fmt: skip
    assert not awaits_release(wl)
    assert release_wait(wl, NOW, Releaser.AT_ONCE, 0.0) is None
    assert next_update(wl, NOW, Releaser.AT_ONCE, 0.0) is None


def test_a_victim_awaiting_its_release_is_not_admitted_again_when_its_checks_turn_ready() -> None:
    wl = workload([("mk", "Pending")])
    victim = merged(wl, preempted(wl, "InClusterQueue", MESSAGE, NOW).status or {})
    assert victim.status is not None and victim.status.admission_checks
    victim.status.admission_checks[0].state = "Ready"
    assert next_update(victim, NOW, Releaser.JOB, 5.0) is None
