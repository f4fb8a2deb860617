"""Scheduling cycles over the cache: admissions, pending messages, ordering, cohorts, dirty tracking."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from multikueue.api.admissioncheck import AdmissionCheck
from multikueue.api.clusterqueue import ClusterQueue
from multikueue.api.localqueue import LocalQueue
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import Workload
from multikueue.api.workloadpriorityclass import WorkloadPriorityClass
from multikueue.core import Cache, CycleResult, PendingUpdate, lifecycle, schedule
from multikueue.core.cache.queues import REQUEUE_BATCH, WAKE_TO_FILL_LOOKS
from multikueue.core.scheduler import AdmissionDecision, CycleMemo

pytestmark = pytest.mark.unit

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
SEED_MESSAGE = (
    "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor, 3 more needed"
)


# --- builders -------------------------------------------------------------------------------


def flavor(name: str = "default-flavor", **spec: Any) -> ResourceFlavor:
    return ResourceFlavor.from_k8s({"metadata": {"name": name}, "spec": spec})


def cluster_queue(
    name: str = "cq",
    quotas: dict[str, dict[str, Any]] | None = None,
    *,
    namespace_selector: dict[str, Any] | None = None,
    **spec: Any,
) -> ClusterQueue:
    """A ClusterQueue with one resource group; ``quotas`` maps flavor -> {resource: nominal or quota dict}."""
    quotas = quotas if quotas is not None else {"default-flavor": {"cpu": 9}}
    covered = sorted({r for resources in quotas.values() for r in resources})
    flavors = []
    for flavor_name, resources in quotas.items():
        entries = []
        for resource, quota in resources.items():
            entry = {"name": resource}
            entry.update(quota if isinstance(quota, dict) else {"nominalQuota": quota})
            entries.append(entry)
        flavors.append({"name": flavor_name, "resources": entries})
    body = {
        "namespaceSelector": {} if namespace_selector is None else namespace_selector,
        "resourceGroups": [{"coveredResources": covered, "flavors": flavors}],
        **spec,
    }
    return ClusterQueue.from_k8s({"metadata": {"name": name}, "spec": body})


def local_queue(name: str = "user-queue", namespace: str = "default", cq: str = "cq", **spec: Any) -> LocalQueue:
    return LocalQueue.from_k8s(
        {"metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cq, **spec}}
    )


def workload(
    name: str,
    cpu: str = "4",
    *,
    namespace: str = "default",
    queue: str = "user-queue",
    priority: int | None = None,
    age: int = 0,
    count: int = 1,
    **extra: Any,
) -> Workload:
    """A one-pod-set Workload; larger ``age`` means created earlier."""
    body: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": (NOW - timedelta(seconds=age)).isoformat(),
        },
        "spec": {
            "queueName": queue,
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}},
                }
            ],
        },
    }
    if priority is not None:
        body["spec"]["priority"] = priority
    for key, value in extra.items():
        if key == "labels":
            body["metadata"]["labels"] = value
        else:
            body.setdefault("status", {})[key] = value
    return Workload.from_k8s(body)


def with_status(wl: Workload, **status: Any) -> Workload:
    body = wl.to_k8s()
    body.setdefault("status", {}).update(status)
    return Workload.from_k8s(body)


def condition(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": NOW.isoformat()}


def confirm(cache: Cache, decision: AdmissionDecision) -> Workload:
    """What the I/O layer writes for an admission, coming back through the watch."""
    wl = cache.workload(decision.key)
    assert wl is not None
    conditions = [condition("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {decision.cluster_queue}")]
    if not decision.admission_checks:
        conditions.append(condition("Admitted", "True", "Admitted", "The workload is admitted"))
    updated = with_status(wl, admission=decision.admission.to_dict(), conditions=conditions)
    cache.upsert_workload(updated)
    return updated


def write_pending(cache: Cache, update: PendingUpdate) -> None:
    """What the I/O layer writes for a pending update, coming back through the watch."""
    wl = cache.workload(update.key)
    assert wl is not None
    cache.upsert_workload(with_status(wl, conditions=[condition("QuotaReserved", "False", update.reason, update.message)]))


def finish(cache: Cache, wl: Workload) -> None:
    conditions = [c.to_dict() for c in wl.status.conditions or ()]
    conditions.append(condition("Finished", "True", "Succeeded", "Job finished successfully"))
    cache.upsert_workload(with_status(wl, conditions=conditions))


def after_requeue_batch(cache: Cache, **kwargs: Any) -> CycleResult:
    """The cycles that follow a Workload giving quota back: the first admits nothing parked and asks for
    the one a requeue batch later, whose result is returned (parked Workloads wake then)."""
    first = schedule(cache, NOW, **kwargs)
    assert first.admitted == [] and first.next_cycle_at == NOW + REQUEUE_BATCH
    return schedule(cache, NOW + REQUEUE_BATCH, **kwargs)


def count_assignments(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that gets an entry at each flavor assignment the scheduler makes."""
    from multikueue.core import scheduler

    calls: list[str] = []
    real = scheduler.assign_flavors

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append("assign")
        return real(*args, **kwargs)

    monkeypatch.setattr(scheduler, "assign_flavors", counting)
    return calls


def names(result: CycleResult) -> list[str]:
    return [d.key[1] for d in result.admitted]


def pending(result: CycleResult) -> dict[str, tuple[str, str]]:
    return {u.key[1]: (u.reason, u.message) for u in result.pending}


def seed_cache(**cq_spec: Any) -> Cache:
    cache = Cache()
    cache.upsert_namespace("default", {"kubernetes.io/metadata.name": "default"})
    cache.upsert_flavor(flavor())
    cache.upsert_cluster_queue(cluster_queue(**cq_spec))
    cache.upsert_local_queue(local_queue())
    return cache


# --- the seed scenario ---------------------------------------------------------------------------


def test_seed_scenario_two_admitted_third_waits_then_admitted_after_one_finishes() -> None:
    cache = seed_cache()
    for i, name in enumerate(["wl-1", "wl-2", "wl-3"]):
        cache.upsert_workload(workload(name, "4", age=10 - i))

    result = schedule(cache, NOW)
    assert names(result) == ["wl-1", "wl-2"]
    assert pending(result) == {"wl-3": ("Pending", SEED_MESSAGE)}
    first = result.admitted[0]
    assert first.cluster_queue == "cq"
    assert first.admission_checks == []
    assert first.admission.to_dict() == {
        "clusterQueue": "cq",
        "podSetAssignments": [{"name": "main", "flavors": {"cpu": "default-flavor"}, "resourceUsage": {"cpu": "4"}, "count": 1}],
    }
    assert cache.usage("cq") == {("default-flavor", "cpu"): Decimal(8)}

    admitted = [confirm(cache, d) for d in result.admitted]
    write_pending(cache, result.pending[0])
    assert cache.usage("cq") == {("default-flavor", "cpu"): Decimal(8)}
    assert schedule(cache, NOW) == CycleResult()

    finish(cache, admitted[0])
    assert cache.usage("cq") == {("default-flavor", "cpu"): Decimal(4)}
    result = schedule(cache, NOW)
    assert names(result) == ["wl-3"]
    assert result.pending == []


def test_a_second_cycle_without_changes_does_nothing() -> None:
    cache = seed_cache()
    for i in range(3):
        cache.upsert_workload(workload(f"wl-{i}", "4", age=10 - i))
    first = schedule(cache, NOW)
    assert len(first.admitted) == 2
    # Nothing confirmed or written yet: the assumptions hold and nothing is repeated.
    assert schedule(cache, NOW) == CycleResult()
    # The watch bringing back exactly what was decided changes nothing either.
    for decision in first.admitted:
        confirm(cache, decision)
    write_pending(cache, first.pending[0])
    assert schedule(cache, NOW) == CycleResult()


def test_pending_update_only_when_the_message_changes() -> None:
    cache = seed_cache()
    cache.upsert_workload(workload("big", "10"))
    result = schedule(cache, NOW)
    write_pending(cache, result.pending[0])
    # Something else changes in the queue: the big one is re-evaluated but its condition already says it.
    cache.upsert_workload(workload("small", "1"))
    result = schedule(cache, NOW)
    assert names(result) == ["small"]
    assert result.pending == []


def test_request_larger_than_every_flavor() -> None:
    cache = seed_cache()
    cache.upsert_workload(workload("huge", "10"))
    result = schedule(cache, NOW)
    assert result.admitted == []
    assert pending(result) == {
        "huge": (
            "Pending",
            "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default-flavor, "
            "previously considered podsets requests (0) + current podset request (10) > maximum capacity (9)",
        )
    }


# --- queue ordering -------------------------------------------------------------------------------


def test_higher_priority_first() -> None:
    cache = seed_cache()
    cache.upsert_workload(workload("old-low", "5", priority=1, age=100))
    cache.upsert_workload(workload("new-high", "5", priority=10, age=1))
    result = schedule(cache, NOW)
    assert names(result) == ["new-high"]
    assert set(pending(result)) == {"old-low"}


def test_priority_from_a_workload_priority_class_label() -> None:
    cache = seed_cache()
    cache.upsert_priority_class(WorkloadPriorityClass.from_k8s({"metadata": {"name": "high"}, "value": 1000}))
    cache.upsert_workload(workload("old", "5", age=100))
    cache.upsert_workload(workload("labelled", "5", age=1, labels={"kueue.x-k8s.io/priority-class": "high"}))
    assert names(schedule(cache, NOW)) == ["labelled"]


def test_strict_fifo_blocks_behind_a_head_that_does_not_fit() -> None:
    cache = seed_cache(queueingStrategy="StrictFIFO")
    cache.upsert_workload(workload("running", "5", age=100))
    assert names(schedule(cache, NOW)) == ["running"]
    cache.upsert_workload(workload("large-head", "6", age=50))
    cache.upsert_workload(workload("small", "1", age=10))
    result = schedule(cache, NOW)
    assert result.admitted == []
    # Only the head is told why; the ones behind it keep waiting silently (as upstream).
    assert set(pending(result)) == {"large-head"}


def test_best_effort_fifo_lets_a_smaller_workload_pass() -> None:
    cache = seed_cache(queueingStrategy="BestEffortFIFO")
    cache.upsert_workload(workload("running", "5", age=100))
    schedule(cache, NOW)
    cache.upsert_workload(workload("large-head", "6", age=50))
    cache.upsert_workload(workload("small", "1", age=10))
    result = schedule(cache, NOW)
    assert names(result) == ["small"]
    assert set(pending(result)) == {"large-head"}


def test_identical_workloads_that_do_not_fit_are_assigned_once_per_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hundreds of pending copies of one shape cost one flavor assignment per cycle, and each is told why."""
    calls = count_assignments(monkeypatch)
    cache = seed_cache()
    cache.upsert_workload(workload("running", "8", age=1000))
    schedule(cache, NOW)
    for i in range(200):
        cache.upsert_workload(workload(f"big-{i:03d}", "4", age=500 - i))
    cache.upsert_workload(workload("small", "1", age=1))
    calls.clear()
    result = schedule(cache, NOW)
    assert names(result) == ["small"]  # best effort: the smaller one behind them still gets in
    assert len(pending(result)) == 200
    assert len({message for _, message in pending(result).values()}) == 1
    assert len(calls) == 2  # one for the 200 copies, one for the small Workload


def test_a_misfit_is_assigned_again_after_a_preemption_released_quota() -> None:
    """A preemption counts its victims' usage as released in the cycle: what did not fit before it is re-checked."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 8, "memory": "8Gi"}}, preemption={"withinClusterQueue": "LowerPriority"})
    cache.upsert_workload(workload("low", "8", priority=0, age=1000))
    [decision] = schedule(cache, NOW).admitted
    body = confirm(cache, decision).to_k8s()
    body["metadata"]["resourceVersion"] = "41"
    cache.upsert_workload(Workload.from_k8s(body))
    cache.upsert_workload(workload("high-1", "8", priority=10, age=50))
    cache.upsert_workload(workload("high-2", "8", priority=10, age=40))
    result = schedule(cache, NOW)
    assert [d.victim[1] for d in result.preempted] == ["low"]
    assert result.preempted[0].victim_version == "41", "the eviction is written on the version the plan weighed"
    assert result.admitted == []
    # high-2 is checked against the tree with high-1 holding the released quota: it still waits.
    assert set(pending(result)) == {"high-1", "high-2"}


def test_strict_fifo_head_removed_unblocks_the_queue() -> None:
    cache = seed_cache(queueingStrategy="StrictFIFO")
    cache.upsert_workload(workload("running", "5", age=100))
    schedule(cache, NOW)
    cache.upsert_workload(workload("large-head", "6", age=50))
    cache.upsert_workload(workload("small", "1", age=10))
    schedule(cache, NOW)
    cache.delete_workload(("default", "large-head"))
    assert names(schedule(cache, NOW)) == ["small"]


# --- cohorts -----------------------------------------------------------------------------------------


def cohort_cache(a: dict[str, Any], b: dict[str, Any]) -> Cache:
    cache = Cache()
    cache.upsert_flavor(flavor())
    cache.upsert_cluster_queue(cluster_queue("cq-a", {"default-flavor": {"cpu": a}}, cohortName="team"))
    cache.upsert_cluster_queue(cluster_queue("cq-b", {"default-flavor": {"cpu": b}}, cohortName="team"))
    cache.upsert_local_queue(local_queue("queue-a", cq="cq-a"))
    cache.upsert_local_queue(local_queue("queue-b", cq="cq-b"))
    return cache


def test_cohort_members_borrow_each_others_unused_quota() -> None:
    cache = cohort_cache({"nominalQuota": 5}, {"nominalQuota": 5})
    cache.upsert_workload(workload("a-1", "8", queue="queue-a"))
    result = schedule(cache, NOW)
    assert names(result) == ["a-1"]
    status = cache.cluster_queue_status("cq-a")
    assert status is not None
    assert status.flavors_reservation == [
        {"name": "default-flavor", "resources": [{"name": "cpu", "total": "8", "borrowed": "3"}]}
    ]
    cache.upsert_workload(workload("b-1", "3", queue="queue-b"))
    result = schedule(cache, NOW)
    assert result.admitted == []
    assert pending(result) == {
        "b-1": (
            "Pending",
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor, "
            "1 more needed",
        )
    }


def test_borrowing_limit_is_respected() -> None:
    cache = cohort_cache({"nominalQuota": 5, "borrowingLimit": 2}, {"nominalQuota": 5})
    cache.upsert_workload(workload("a-big", "8", queue="queue-a"))
    cache.upsert_workload(workload("a-ok", "7", queue="queue-a", age=-1))
    result = schedule(cache, NOW)
    assert names(result) == ["a-ok"]
    assert "maximum capacity (7)" in pending(result)["a-big"][1]


def test_lending_limit_keeps_the_lenders_guaranteed_quota() -> None:
    cache = cohort_cache({"nominalQuota": 5}, {"nominalQuota": 5, "lendingLimit": 1})
    cache.upsert_workload(workload("a-too-big", "7", queue="queue-a", age=10))
    cache.upsert_workload(workload("a-fits", "6", queue="queue-a", age=5))
    result = schedule(cache, NOW)
    assert names(result) == ["a-fits"]
    cache.upsert_workload(workload("b-1", "4", queue="queue-b"))
    assert names(schedule(cache, NOW)) == ["b-1"]


def test_freed_quota_in_one_queue_wakes_its_cohort_peers() -> None:
    cache = cohort_cache({"nominalQuota": 5}, {"nominalQuota": 5})
    cache.upsert_workload(workload("a-1", "8", queue="queue-a"))
    decision = schedule(cache, NOW).admitted[0]
    a1 = confirm(cache, decision)
    cache.upsert_workload(workload("b-1", "4", queue="queue-b"))
    assert schedule(cache, NOW).admitted == []
    finish(cache, a1)  # another ClusterQueue of the tree: b-1 wakes a requeue batch later
    assert names(after_requeue_batch(cache)) == ["b-1"]


def test_workloads_fitting_without_borrowing_go_first_in_a_round() -> None:
    cache = cohort_cache({"nominalQuota": 5}, {"nominalQuota": 5})
    # a-borrow is older and higher priority but needs to borrow; b-own fits in cq-b's own quota.
    cache.upsert_workload(workload("a-borrow", "6", queue="queue-a", priority=100, age=100))
    cache.upsert_workload(workload("b-own", "5", queue="queue-b", age=1))
    result = schedule(cache, NOW)
    assert names(result) == ["b-own"]
    assert set(pending(result)) == {"a-borrow"}


def test_cohort_object_with_its_own_quota() -> None:
    from multikueue.api.cohort import Cohort

    cache = cohort_cache({"nominalQuota": 1}, {"nominalQuota": 1})
    cache.upsert_workload(workload("a-1", "5", queue="queue-a"))
    assert schedule(cache, NOW).admitted == []
    cache.upsert_cohort(
        Cohort.from_k8s(
            {
                "metadata": {"name": "team"},
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [{"name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": 3}]}],
                        }
                    ]
                },
            }
        )
    )
    assert names(schedule(cache, NOW)) == ["a-1"]
    cache.delete_cohort("team")
    assert cache.usage("cq-a") == {("default-flavor", "cpu"): Decimal(5)}


# --- inadmissible workloads and fixing them -----------------------------------------------------


def test_missing_local_queue_then_created() -> None:
    cache = seed_cache()
    cache.upsert_workload(workload("wl", "1", queue="other-queue"))
    result = schedule(cache, NOW)
    assert pending(result) == {"wl": ("Inadmissible", "LocalQueue other-queue doesn't exist")}
    write_pending(cache, result.pending[0])
    assert schedule(cache, NOW) == CycleResult()
    cache.upsert_local_queue(local_queue("other-queue"))
    assert names(schedule(cache, NOW)) == ["wl"]


def test_missing_cluster_queue_then_created() -> None:
    cache = Cache()
    cache.upsert_flavor(flavor())
    cache.upsert_local_queue(local_queue())
    cache.upsert_workload(workload("wl", "1"))
    assert pending(schedule(cache, NOW)) == {"wl": ("Inadmissible", "ClusterQueue cq doesn't exist")}
    cache.upsert_cluster_queue(cluster_queue())
    assert names(schedule(cache, NOW)) == ["wl"]


def test_missing_flavor_makes_the_queue_inactive_until_created() -> None:
    cache = Cache()
    cache.upsert_cluster_queue(cluster_queue(quotas={"gpu": {"cpu": 9}}))
    cache.upsert_local_queue(local_queue())
    cache.upsert_workload(workload("wl", "1"))
    status = cache.cluster_queue_status("cq")
    assert status is not None
    assert (status.active, status.reason, status.message) == (
        False,
        "FlavorNotFound",
        "Can't admit new workloads: references missing ResourceFlavor(s): gpu.",
    )
    lq_status = cache.local_queue_status("default", "user-queue")
    assert lq_status is not None
    assert (lq_status.active, lq_status.reason) == (False, "ClusterQueueIsInactive")
    assert pending(schedule(cache, NOW)) == {"wl": ("Inadmissible", "ClusterQueue cq is inactive")}
    cache.upsert_flavor(flavor("gpu"))
    status = cache.cluster_queue_status("cq")
    assert status is not None and (status.active, status.reason, status.message) == (
        True,
        "Ready",
        "Can admit new workloads",
    )
    assert names(schedule(cache, NOW)) == ["wl"]


def test_namespace_not_matching_the_selector_then_labelled() -> None:
    selector = {"matchLabels": {"team": "a"}}
    cache = seed_cache(namespace_selector=selector)
    cache.upsert_workload(workload("wl", "1"))
    assert pending(schedule(cache, NOW)) == {"wl": ("Pending", "Workload namespace doesn't match ClusterQueue selector")}
    cache.upsert_namespace("default", {"team": "a"})
    assert names(schedule(cache, NOW)) == ["wl"]


def test_no_namespace_selector_matches_nothing() -> None:
    cache = Cache()
    cache.upsert_flavor(flavor())
    body = cluster_queue().to_k8s()
    del body["spec"]["namespaceSelector"]
    cache.upsert_cluster_queue(ClusterQueue.from_k8s(body))
    cache.upsert_local_queue(local_queue())
    cache.upsert_workload(workload("wl", "1"))
    assert pending(schedule(cache, NOW)) == {"wl": ("Pending", "Workload namespace doesn't match ClusterQueue selector")}


def test_stopped_queues() -> None:
    cache = seed_cache(stopPolicy="Hold")
    status = cache.cluster_queue_status("cq")
    assert status is not None
    assert (status.reason, status.message) == ("Stopped", "Can't admit new workloads: is stopped.")
    cache.upsert_workload(workload("wl", "1"))
    assert pending(schedule(cache, NOW)) == {"wl": ("Inadmissible", "ClusterQueue cq is inactive")}
    cache.upsert_cluster_queue(cluster_queue())
    cache.upsert_local_queue(local_queue(stopPolicy="Hold"))
    assert pending(schedule(cache, NOW)) == {"wl": ("Inadmissible", "LocalQueue user-queue is inactive")}
    lq_status = cache.local_queue_status("default", "user-queue")
    assert lq_status is not None and (lq_status.reason, lq_status.message) == ("Stopped", "LocalQueue is stopped")
    cache.upsert_local_queue(local_queue())
    assert names(schedule(cache, NOW)) == ["wl"]


def test_deleted_local_queue_and_cluster_queue() -> None:
    cache = seed_cache()
    cache.upsert_workload(workload("wl", "20"))
    schedule(cache, NOW)
    cache.delete_cluster_queue("cq")
    assert pending(schedule(cache, NOW)) == {"wl": ("Inadmissible", "ClusterQueue cq doesn't exist")}
    cache.delete_local_queue("default", "user-queue")
    assert pending(schedule(cache, NOW)) == {"wl": ("Inadmissible", "LocalQueue user-queue doesn't exist")}
    assert cache.cluster_queue_status("cq") is None
    assert cache.local_queue_status("default", "user-queue") is None


def test_inactive_workloads_are_not_pending() -> None:
    cache = seed_cache()
    body = workload("off", "1").to_k8s()
    body["spec"]["active"] = False
    cache.upsert_workload(Workload.from_k8s(body))
    assert schedule(cache, NOW) == CycleResult()


# --- admission checks -------------------------------------------------------------------------------


def check(name: str, active: bool) -> AdmissionCheck:
    return AdmissionCheck.from_k8s(
        {
            "metadata": {"name": name},
            "spec": {"controllerName": "kueue.x-k8s.io/multikueue"},
            "status": {"conditions": [condition("Active", "True" if active else "False", "Active")]},
        }
    )


def test_admission_checks_by_flavor() -> None:
    cache = Cache()
    cache.upsert_flavor(flavor("on-demand"))
    cache.upsert_flavor(flavor("spot"))
    strategy = {"admissionChecks": [{"name": "multikueue"}, {"name": "provisioning", "onFlavors": ["spot"]}]}
    cache.upsert_cluster_queue(
        cluster_queue(quotas={"on-demand": {"cpu": 2}, "spot": {"cpu": 8}}, admissionChecksStrategy=strategy)
    )
    cache.upsert_local_queue(local_queue())
    cache.upsert_workload(workload("wl", "1"))
    status = cache.cluster_queue_status("cq")
    assert status is not None and (status.reason, status.message) == (
        "AdmissionCheckNotFound",
        "Can't admit new workloads: references missing AdmissionCheck(s): multikueue,provisioning.",
    )
    assert pending(schedule(cache, NOW)) == {"wl": ("Inadmissible", "ClusterQueue cq is inactive")}
    cache.upsert_admission_check(check("multikueue", True))
    cache.upsert_admission_check(check("provisioning", False))
    status = cache.cluster_queue_status("cq")
    assert status is not None and status.reason == "AdmissionCheckInactive"
    assert status.message == "Can't admit new workloads: references inactive AdmissionCheck(s): provisioning."
    cache.upsert_admission_check(check("provisioning", True))
    cache.upsert_workload(workload("wl-spot", "5", age=-1))
    result = schedule(cache, NOW)
    assert [(d.key[1], d.admission_checks) for d in result.admitted] == [
        ("wl", ["multikueue"]),
        ("wl-spot", ["multikueue", "provisioning"]),
    ]
    status = cache.cluster_queue_status("cq")
    assert status is not None
    # Waiting for their checks: reserving, not admitted.
    assert (status.reserving_workloads, status.admitted_workloads) == (2, 0)


# --- accounting ---------------------------------------------------------------------------------------


def test_assume_forget_and_confirmation_never_double_count() -> None:
    cache = seed_cache()
    cache.upsert_workload(workload("wl", "4"))
    decision = schedule(cache, NOW).admitted[0]
    key = decision.key
    assert cache.is_assumed(key)
    assert cache.usage("cq") == {("default-flavor", "cpu"): Decimal(4)}
    # A stale watch event without the admission keeps the assumption.
    cache.upsert_workload(workload("wl", "4"))
    assert cache.usage("cq") == {("default-flavor", "cpu"): Decimal(4)}
    # The write failed: forget, and the next cycle admits it again.
    cache.forget(key)
    assert cache.usage("cq") == {}
    again = schedule(cache, NOW)
    assert names(again) == ["wl"]
    # Confirmed by the watch: counted once.
    confirmed = confirm(cache, again.admitted[0])
    assert not cache.is_assumed(key)
    assert cache.usage("cq") == {("default-flavor", "cpu"): Decimal(4)}
    cache.upsert_workload(confirmed)
    assert cache.usage("cq") == {("default-flavor", "cpu"): Decimal(4)}
    cache.forget(key)  # nothing assumed any more: no effect
    assert cache.usage("cq") == {("default-flavor", "cpu"): Decimal(4)}
    cache.delete_workload(key)
    assert cache.usage("cq") == {}


def test_already_admitted_workloads_from_the_watch_count_as_usage() -> None:
    cache = seed_cache()
    wl = workload("running", "6")
    admission = {
        "clusterQueue": "cq",
        "podSetAssignments": [{"name": "main", "flavors": {"cpu": "default-flavor"}, "resourceUsage": {"cpu": "6"}, "count": 1}],
    }
    conditions = [condition("QuotaReserved", "True", "QuotaReserved"), condition("Admitted", "True", "Admitted")]
    cache.upsert_workload(with_status(wl, admission=admission, conditions=conditions))
    cache.upsert_workload(workload("next", "4"))
    result = schedule(cache, NOW)
    assert result.admitted == []
    assert "insufficient unused quota for cpu in flavor default-flavor, 1 more needed" in pending(result)["next"][1]


def test_deleting_an_assumed_workload_frees_its_quota() -> None:
    cache = seed_cache()
    cache.upsert_workload(workload("a", "9", age=2))
    cache.upsert_workload(workload("b", "9", age=1))
    assert names(schedule(cache, NOW)) == ["a"]
    cache.delete_workload(("default", "a"))
    assert cache.usage("cq") == {}
    assert names(schedule(cache, NOW)) == ["b"]


def test_cluster_queue_and_local_queue_status() -> None:
    cache = seed_cache()
    cache.upsert_local_queue(local_queue("other-queue"))
    cache.upsert_workload(workload("wl-1", "4", age=3))
    cache.upsert_workload(workload("wl-2", "3", age=2, queue="other-queue"))
    cache.upsert_workload(workload("wl-3", "4", age=1))
    result = schedule(cache, NOW)
    confirm(cache, result.admitted[0])  # wl-1 admitted; wl-2 only assumed
    status = cache.cluster_queue_status("cq")
    assert status is not None
    assert (status.pending_workloads, status.reserving_workloads, status.admitted_workloads) == (1, 2, 2)
    assert status.flavors_reservation == [
        {"name": "default-flavor", "resources": [{"name": "cpu", "total": "7", "borrowed": "0"}]}
    ]
    assert status.status_fields()["flavorsUsage"] == [
        {"name": "default-flavor", "resources": [{"name": "cpu", "total": "7", "borrowed": "0"}]}
    ]
    lq = cache.local_queue_status("default", "user-queue")
    assert lq is not None
    assert (lq.active, lq.reason, lq.message) == (True, "Ready", "Can submit new workloads to localQueue")
    assert (lq.pending_workloads, lq.reserving_workloads, lq.admitted_workloads) == (1, 1, 1)
    assert lq.flavors_reservation == [{"name": "default-flavor", "resources": [{"name": "cpu", "total": "4"}]}]
    other = cache.local_queue_status("default", "other-queue")
    assert other is not None
    assert other.flavors_usage == [{"name": "default-flavor", "resources": [{"name": "cpu", "total": "3"}]}]


def test_requeue_backoff_waits_until_requeue_at() -> None:
    cache = seed_cache()
    later = NOW + timedelta(seconds=60)
    cache.upsert_workload(workload("wl", "1", requeueState={"count": 1, "requeueAt": later.isoformat()}))
    result = schedule(cache, NOW)
    assert result.admitted == [] and result.pending == []
    assert result.next_cycle_at == later
    assert names(schedule(cache, later)) == ["wl"]


def test_bad_input_never_crashes_the_cycle() -> None:
    cache = seed_cache()
    cache.upsert_workload(workload("no-queue", "1", queue=""))
    cache.upsert_workload(workload("zero-pods", "1", count=0))
    body = workload("no-pod-sets", "1").to_k8s()
    body["spec"]["podSets"] = []
    cache.upsert_workload(Workload.from_k8s(body))
    result = schedule(cache, NOW)
    assert sorted(names(result)) == ["no-pod-sets", "zero-pods"]
    assert pending(result) == {"no-queue": ("Inadmissible", "LocalQueue  doesn't exist")}


# --- scale ---------------------------------------------------------------------------------------------


def test_a_thousand_workloads() -> None:
    cache = seed_cache(quotas={"default-flavor": {"cpu": 500}})
    for i in range(1000):
        cache.upsert_workload(workload(f"wl-{i:04d}", "1", age=2000 - i))
    started = time.perf_counter()
    result = schedule(cache, NOW)
    first_cycle = time.perf_counter() - started
    assert len(result.admitted) == 500
    assert result.admitted[0].key[1] == "wl-0000"
    assert len(result.pending) == 500
    assert first_cycle < 1.0
    started = time.perf_counter()
    assert schedule(cache, NOW) == CycleResult()
    assert time.perf_counter() - started < 0.05


# --- more changes that wake queues up --------------------------------------------------------------


def test_invalid_pod_template_resources_are_reported() -> None:
    cache = seed_cache()
    body = workload("bad", "1").to_k8s()
    body["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "2"},
        "limits": {"cpu": "1"},
    }
    cache.upsert_workload(Workload.from_k8s(body))
    body = workload("unparsable", "1").to_k8s()
    body["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    cache.upsert_workload(Workload.from_k8s(body))
    cache.upsert_workload(workload("good", "1"))
    result = schedule(cache, NOW)
    assert names(result) == ["good"]
    messages = pending(result)
    assert messages["bad"] == (
        "Pending",
        'resources validation failed: spec.podSets[0].template.spec.containers[0]: Invalid value: ["cpu"]: '
        "requests must not exceed its limits",
    )
    assert messages["unparsable"][1].startswith(
        "resources validation failed: spec.podSets[0].template.spec.containers[0].resources.requests[cpu]: "
        "Invalid value: 'lots'"
    )


def test_more_quota_admits_on_the_next_cycle() -> None:
    cache = seed_cache()
    cache.upsert_workload(workload("big", "12"))
    assert schedule(cache, NOW).admitted == []
    cache.upsert_cluster_queue(cluster_queue(quotas={"default-flavor": {"cpu": 12}}))
    assert names(schedule(cache, NOW)) == ["big"]


def test_independent_queues_admit_in_the_same_cycle() -> None:
    cache = Cache()
    cache.upsert_flavor(flavor())
    for name in ("cq-a", "cq-b"):
        cache.upsert_cluster_queue(cluster_queue(name))
        cache.upsert_local_queue(local_queue(f"queue-{name}", cq=name))
    for i in range(3):
        cache.upsert_workload(workload(f"a-{i}", "3", queue="queue-cq-a", age=10 - i))
        cache.upsert_workload(workload(f"b-{i}", "3", queue="queue-cq-b", age=10 - i))
    result = schedule(cache, NOW)
    assert sorted(names(result)) == ["a-0", "a-1", "a-2", "b-0", "b-1", "b-2"]
    assert [d.cluster_queue for d in result.admitted[:2]] == ["cq-a", "cq-b"]


def test_hierarchical_cohorts_share_quota_through_their_parent() -> None:
    from multikueue.api.cohort import Cohort

    cache = Cache()
    cache.upsert_flavor(flavor())
    cache.upsert_cluster_queue(cluster_queue("cq-a", {"default-flavor": {"cpu": 2}}, cohortName="left"))
    cache.upsert_cluster_queue(cluster_queue("cq-b", {"default-flavor": {"cpu": 6}}, cohortName="right"))
    cache.upsert_local_queue(local_queue("queue-a", cq="cq-a"))
    cache.upsert_workload(workload("a-1", "5", queue="queue-a"))
    assert schedule(cache, NOW).admitted == []
    for name in ("left", "right"):
        cache.upsert_cohort(Cohort.from_k8s({"metadata": {"name": name}, "spec": {"parentName": "root"}}))
    assert names(schedule(cache, NOW)) == ["a-1"]
    status = cache.cluster_queue_status("cq-a")
    assert status is not None
    assert status.flavors_reservation[0]["resources"] == [{"name": "cpu", "total": "5", "borrowed": "3"}]


def test_priority_class_change_reorders() -> None:
    cache = seed_cache(queueingStrategy="StrictFIFO")
    cache.upsert_workload(workload("blocker", "9", age=100))
    schedule(cache, NOW)
    labels = {"kueue.x-k8s.io/priority-class": "urgent"}
    cache.upsert_workload(workload("first", "5", age=50))
    cache.upsert_workload(workload("second", "5", age=10, labels=labels))
    result = schedule(cache, NOW)
    assert set(pending(result)) == {"first"}
    cache.upsert_priority_class(WorkloadPriorityClass.from_k8s({"metadata": {"name": "urgent"}, "value": 10}))
    result = schedule(cache, NOW)
    assert set(pending(result)) == {"second"}


def test_an_older_resource_version_never_replaces_a_newer_copy() -> None:
    from multikueue.api import Workload as _W
    from multikueue.core.cache import Cache as _C

    cache = _C()
    newer = _W.from_k8s({"metadata": {"namespace": "ns", "name": "w", "resourceVersion": "20"}, "spec": {"podSets": [], "queueName": "q"}})
    older = _W.from_k8s({"metadata": {"namespace": "ns", "name": "w", "resourceVersion": "7"}, "spec": {"podSets": [], "queueName": "old"}})
    cache.upsert_workload(newer)
    cache.upsert_workload(older)
    assert cache.workload(("ns", "w")).spec.queue_name == "q"


# --- preemption ------------------------------------------------------------------------------------

from multikueue.dev.standins import evict_and_release, merged  # noqa: E402 - the preemption tests' I/O stand-in

LOWER = {"preemption": {"withinClusterQueue": "LowerPriority"}}


def admit_all(cache: Cache, result: CycleResult) -> list[Workload]:
    return [confirm(cache, d) for d in result.admitted]


def evict(cache: Cache, result: CycleResult) -> None:
    """What the I/O layer writes for each victim, coming back through the watch."""
    evict_and_release(cache, result.preempted, NOW)


def test_a_higher_priority_workload_preempts_the_newest_lower_one_then_is_admitted() -> None:
    cache = seed_cache(**LOWER)
    cache.upsert_workload(workload("old-low", "4", priority=0, age=30))
    cache.upsert_workload(workload("new-low", "4", priority=0, age=20))
    admit_all(cache, schedule(cache, NOW))
    # new-low was admitted later: make its QuotaReserved transition later, as the writes would.
    wl = cache.workload(("default", "new-low"))
    assert wl is not None
    later = [condition("QuotaReserved", "True", "QuotaReserved") | {"lastTransitionTime": (NOW + timedelta(seconds=1)).isoformat()}]
    cache.upsert_workload(with_status(wl, conditions=later))

    cache.upsert_workload(workload("high", "4", priority=10, age=0))
    result = schedule(cache, NOW + timedelta(seconds=5))
    assert names(result) == []
    [decision] = result.preempted
    assert (decision.victim[1], decision.preemptor[1], decision.preempting_cluster_queue) == ("new-low", "high", "cq")
    assert decision.reason == "InClusterQueue"
    assert decision.message.startswith("Preempted to accommodate a workload (UID: UNKNOWN, JobUID: UNKNOWN) due to prioritization in the ClusterQueue")
    assert pending(result)["high"] == (
        "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor, 3 more needed"
        ". Pending the preemption of 1 workload(s)",
    )

    evict(cache, result)
    result = schedule(cache, NOW + timedelta(seconds=6))
    assert names(result) == ["high"], "the victim's quota is free: the preemptor is admitted"
    assert "new-low" in pending(result), "the victim waits in its queue again"
    assert result.preempted == []


def test_no_preemption_when_the_policies_say_never_or_the_request_exceeds_the_capacity() -> None:
    for spec, cpu, expected in (
        ({}, "4", SEED_MESSAGE),  # upstream's default: every policy Never
        (LOWER, "10", "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default-flavor, "
                      "previously considered podsets requests (0) + current podset request (10) > maximum capacity (9)"),
    ):  # fmt: skip
        cache = seed_cache(**spec)
        for i in range(2):
            cache.upsert_workload(workload(f"low-{i}", "4", priority=0, age=30 - i))
        admit_all(cache, schedule(cache, NOW))
        cache.upsert_workload(workload("high", cpu, priority=10))
        result = schedule(cache, NOW)
        assert result.preempted == [] and names(result) == []
        assert pending(result)["high"] == ("Pending", expected)


def test_equal_priority_is_not_preempted_under_lower_priority() -> None:
    cache = seed_cache(**LOWER)
    for i in range(2):
        cache.upsert_workload(workload(f"same-{i}", "4", priority=5, age=30 - i))
    admit_all(cache, schedule(cache, NOW))
    cache.upsert_workload(workload("late", "4", priority=5))
    result = schedule(cache, NOW)
    assert result.preempted == [] and pending(result)["late"] == ("Pending", SEED_MESSAGE)


def test_reclaim_within_cohort_takes_back_what_another_queue_borrows() -> None:
    cache = Cache()
    cache.upsert_namespace("default", {})
    cache.upsert_flavor(flavor())
    cache.upsert_cluster_queue(cluster_queue("a", {"default-flavor": {"cpu": 4}}, cohortName="team",
                                             preemption={"reclaimWithinCohort": "Any"}))  # fmt: skip
    cache.upsert_cluster_queue(cluster_queue("b", {"default-flavor": {"cpu": 4}}, cohortName="team"))
    cache.upsert_local_queue(local_queue("qa", cq="a"))
    cache.upsert_local_queue(local_queue("qb", cq="b"))
    cache.upsert_workload(workload("b-1", "3", queue="qb", priority=100, age=30))
    cache.upsert_workload(workload("b-2", "3", queue="qb", priority=100, age=20))  # borrows 2 from a
    admit_all(cache, schedule(cache, NOW))
    assert cache.usage("b") == {("default-flavor", "cpu"): Decimal(6)}

    cache.upsert_workload(workload("a-1", "4", queue="qa", priority=0))
    result = schedule(cache, NOW)
    [decision] = result.preempted
    assert decision.victim[1] in ("b-1", "b-2") and decision.reason == "InCohortReclamation"
    assert "preemptor path: /team/a; preemptee path: /team/b" in decision.message
    evict(cache, result)
    assert names(schedule(cache, NOW)) == ["a-1"]


def test_one_preemption_plan_per_cluster_queue_per_cycle_and_no_victim_twice() -> None:
    cache = seed_cache(**LOWER)
    cache.upsert_workload(workload("low-a", "4", priority=0, age=30))
    cache.upsert_workload(workload("low-b", "4", priority=0, age=29))
    admit_all(cache, schedule(cache, NOW))
    cache.upsert_workload(workload("high-1", "4", priority=10, age=2))
    cache.upsert_workload(workload("high-2", "4", priority=10, age=1))
    first = schedule(cache, NOW)
    assert [(d.preemptor[1], d.victim[1]) for d in first.preempted] == [("high-1", first.preempted[0].victim[1])]
    assert pending(first)["high-2"][1] == SEED_MESSAGE, "the second waits without planning in this cycle"
    evict(cache, first)
    second = schedule(cache, NOW)
    assert names(second) == ["high-1"]
    victims = [d.victim[1] for d in first.preempted + second.preempted]
    assert sorted(victims) == ["low-a", "low-b"], "the next cycle plans for high-2, on the other victim"
    assert [d.preemptor[1] for d in second.preempted] == ["high-2"]


def test_a_plan_that_found_no_victims_leaves_the_next_shape_its_own_plan() -> None:
    """After a batch wake, the queue's candidates needing preemption are each weighed and parked, lower
    priority too: none stays awake to take, ahead of the parked higher-priority ones, what a Workload
    finishing a moment later gives back (upstream's scalability test: small Workloads filled the gap
    between two large ones while medium ones waited, and the next large one evicted them)."""
    cache = seed_cache(**LOWER)
    cache.upsert_workload(workload("large", "9", priority=100, age=100))
    admit_all(cache, schedule(cache, NOW))
    for i in range(2):
        cache.upsert_workload(workload(f"medium-{i}", "5", priority=50, age=50 - i))
    cache.upsert_workload(workload("small", "1", priority=10, age=60))
    result = schedule(cache, NOW)
    assert names(result) == [] and result.preempted == []
    assert result.plans + result.plans_skipped == 2, "one plan per shape: the second medium is known to find none"
    for update in result.pending:
        write_pending(cache, update)
    assert all(cache.is_parked(("default", n), "cq") for n in ("medium-0", "medium-1", "small"))
    finish(cache, cache.workload(("default", "large")))
    # What the large one gave back waits for the requeue batch, for the parked ones in queue order.
    result = after_requeue_batch(cache)
    assert names(result) == ["medium-0", "small"]
    assert pending(result)["medium-1"][1].endswith("1 more needed")


def reclaim_cohort() -> Cache:
    """a (4 cpu, preempts), b (2 cpu) borrowing 4 of a's, c (no quota of its own) only borrows; 6 cpu in all."""
    cache = Cache()
    cache.upsert_namespace("default", {})
    cache.upsert_flavor(flavor())
    cache.upsert_cluster_queue(cluster_queue("a", {"default-flavor": {"cpu": 4}}, cohortName="team", preemption={
        "withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}))  # fmt: skip
    cache.upsert_cluster_queue(cluster_queue("b", {"default-flavor": {"cpu": 2}}, cohortName="team"))
    cache.upsert_cluster_queue(cluster_queue("c", {"default-flavor": {"cpu": 0}}, cohortName="team"))
    for name in ("a", "b", "c"):
        cache.upsert_local_queue(local_queue(f"q{name}", cq=name))
    for i in range(3):
        cache.upsert_workload(workload(f"b-{i}", "2", queue="qb", priority=5, age=30 - i))
    admit_all(cache, schedule(cache, NOW))
    assert cache.usage("b") == {("default-flavor", "cpu"): Decimal(6)}
    return cache


def tree_usage(cache: Cache) -> dict[str, dict[tuple[str, str], Decimal]]:
    """Every quota node's usage in the tree of ClusterQueue a (cohort included), as stored."""
    from multikueue.core.quota import root_of

    state = cache.cluster_queue_state("a")
    assert state is not None
    usage = {}
    nodes = [root_of(state.node)]
    while nodes:
        node = nodes.pop()
        usage[node.name] = dict(node.usage)
        nodes.extend(node.children)
    return usage


def test_a_preemptor_holds_its_quota_while_its_victims_go_one_by_one() -> None:
    cache = reclaim_cohort()
    cache.upsert_workload(workload("a-1", "4", queue="qa", priority=10))
    cache.upsert_workload(workload("c-1", "2", queue="qc", priority=0))  # a lower-priority borrower waiting
    first = schedule(cache, NOW)
    assert names(first) == []
    victims = {d.victim for d in first.preempted}
    assert len(victims) == 2 and {d.preemptor[1] for d in first.preempted} == {"a-1"}

    # The evictions are written one at a time: only the first victim's quota is released before the next cycle.
    evict(cache, CycleResult(preempted=first.preempted[:1]))
    second = schedule(cache, NOW)
    assert names(second) == [], "neither c-1 nor the requeued victim takes the quota a-1 waits for"
    assert "c-1" not in names(second)
    assert {d.victim for d in second.preempted} <= victims - {first.preempted[0].victim}, "no further victim"
    assert pending(second)["a-1"][1].endswith(". Pending the preemption of 1 workload(s)")

    evict(cache, CycleResult(preempted=first.preempted[1:]))
    third = schedule(cache, NOW)
    assert names(third) == ["a-1"], "admitted once the second victim's quota is released"
    assert third.preempted == []
    evicted = {d.victim for d in first.preempted + second.preempted + third.preempted}
    assert evicted == victims, "two evictions in all"


def test_a_cycle_that_plans_a_preemption_leaves_the_quota_tree_as_it_found_it() -> None:
    cache = reclaim_cohort()
    cache.upsert_workload(workload("a-1", "4", queue="qa", priority=10))
    cache.upsert_workload(workload("c-1", "2", queue="qc", priority=0))
    before = tree_usage(cache)
    result = schedule(cache, NOW)
    assert result.preempted and names(result) == []
    assert result.planned_preemption == {"a"}
    assert tree_usage(cache) == before
    assert cache.usage("a") == {} and cache.usage("b") == {("default-flavor", "cpu"): Decimal(6)}


def test_only_real_assumptions_stay_in_the_quota_tree_after_a_cycle_with_a_preemption() -> None:
    cache = reclaim_cohort()
    cache.upsert_cluster_queue(cluster_queue("d", {"default-flavor": {"cpu": 3}}, cohortName="team"))
    cache.upsert_local_queue(local_queue("qd", cq="d"))
    cache.upsert_workload(workload("a-1", "4", queue="qa", priority=10))
    cache.upsert_workload(workload("d-1", "1", queue="qd", priority=0))  # fits in what a-1 leaves free
    before = tree_usage(cache)
    result = schedule(cache, NOW)
    assert names(result) == ["d-1"] and {d.preemptor[1] for d in result.preempted} == {"a-1"}
    after = tree_usage(cache)
    cpu = ("default-flavor", "cpu")
    assert after["d"] == {cpu: Decimal(1)}, "the assumption stays"
    assert after["team"] == {cpu: before["team"][cpu] + 1}, "the cohort counts the assumption and nothing else"
    others = ("a", "b", "c")
    assert {k: after[k] for k in others} == {k: before[k] for k in others}, "a-1's held usage and its victims' are gone"


def test_entries_are_ordered_by_borrowing_before_fitting() -> None:
    """A preemptor that will not borrow goes before a borrower that fits (upstream's entry order)."""
    cache = reclaim_cohort()
    evictable = cache.workload(("default", "b-2"))
    assert evictable is not None
    cache.delete_workload(("default", "b-2"))  # 2 cpu free in the cohort
    cache.upsert_workload(workload("c-1", "2", queue="qc", priority=100, age=60))  # fits by borrowing, older, higher
    cache.upsert_workload(workload("a-1", "4", queue="qa", priority=0))  # needs 2 more, reclaims them
    result = schedule(cache, NOW)
    assert names(result) == [], "c-1 does not take the 2 cpu a-1 reclaims"
    assert [d.preemptor[1] for d in result.preempted] == ["a-1"]
    assert pending(result)["c-1"][0] == "Pending"


def test_the_held_usage_is_taken_back_even_when_a_cycle_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    from multikueue.core import scheduler

    cache = reclaim_cohort()
    cache.upsert_workload(workload("a-1", "4", queue="qa", priority=10))
    cache.upsert_workload(workload("c-1", "2", queue="qc", priority=0))
    before = tree_usage(cache)
    real_assign = scheduler._assign
    calls = []

    def failing_assign(*args: Any) -> Any:
        calls.append(args)
        if len(calls) > 2:  # c-1 re-assigned after a-1 planned its preemption
            raise RuntimeError("boom")
        return real_assign(*args)

    monkeypatch.setattr(scheduler, "_assign", failing_assign)
    with pytest.raises(RuntimeError):
        schedule(cache, NOW)
    assert len(calls) == 3
    assert tree_usage(cache) == before


# --- partial admission (upstream pkg/scheduler/scheduler_test.go, "partial admission ..." cases) -----------


def multi_pod_set_workload(name: str, pod_sets: list[tuple[str, int, int | None, str]], *, priority: int | None = None) -> Workload:
    """A Workload with pod sets given as (name, count, minCount or None, cpu per pod)."""
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": NOW.isoformat(), "uid": f"wl-{name}"},
        "spec": {"queueName": "user-queue", "podSets": []},
    }
    for ps_name, count, min_count, cpu in pod_sets:
        pod_set: dict[str, Any] = {
            "name": ps_name,
            "count": count,
            "template": {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}},
        }
        if min_count is not None:
            pod_set["minCount"] = min_count
        body["spec"]["podSets"].append(pod_set)
    if priority is not None:
        body["spec"]["priority"] = priority
    return Workload.from_k8s(body)


def counts_of(decision: AdmissionDecision) -> dict[str, tuple[int, str]]:
    return {p.name: (p.count, str(p.resource_usage["cpu"])) for p in decision.admission.pod_set_assignments}


def test_partial_admission_single_variable_pod_set() -> None:
    """Upstream: "partial admission single variable pod set" (50 pods x 2 CPU, min 20, quota 50 CPU: 25 pods)."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 50}})
    cache.upsert_workload(multi_pod_set_workload("new", [("one", 50, 20, "2")]))
    [decision] = schedule(cache, NOW).admitted
    assert counts_of(decision) == {"one": (25, "50")}


def test_partial_admission_multiple_variable_pod_sets() -> None:
    """Upstream: "partial admission multiple variable pod sets" (every variable pod set shrinks together)."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 50}})
    cache.upsert_workload(
        multi_pod_set_workload("new", [("one", 20, None, "1"), ("two", 30, 10, "1"), ("three", 15, 5, "1")])
    )
    [decision] = schedule(cache, NOW).admitted
    assert counts_of(decision) == {"one": (20, "20"), "two": (20, "20"), "three": (10, "10")}


def test_no_partial_admission_without_min_count_keeps_the_full_message() -> None:
    """Upstream: "partial admission disabled, multiple variable pod sets": without minCount nothing is reduced."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 50}})
    cache.upsert_workload(multi_pod_set_workload("new", [("one", 20, None, "1"), ("two", 30, None, "1"), ("three", 15, None, "1")]))
    result = schedule(cache, NOW)
    assert names(result) == []
    reason, message = pending(result)["new"]
    assert reason == "Pending" and message.startswith("couldn't assign flavors to pod set three:")


def test_partial_admission_even_the_minimum_does_not_fit() -> None:
    cache = seed_cache(quotas={"default-flavor": {"cpu": 10}})
    cache.upsert_workload(multi_pod_set_workload("new", [("one", 20, 11, "1")]))
    result = schedule(cache, NOW)
    assert names(result) == []
    assert pending(result)["new"][1].startswith("couldn't assign flavors to pod set one:"), "the full counts' message"


def test_partial_admission_preempt_first() -> None:
    """Upstream: "partial admission single variable pod set, preempt first": full counts preempt, no reduction."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 20}}, **LOWER)
    cache.upsert_workload(multi_pod_set_workload("old", [("one", 10, None, "1")], priority=-4))
    admit_all(cache, schedule(cache, NOW))
    cache.upsert_workload(multi_pod_set_workload("new", [("one", 20, 10, "1")], priority=4))
    result = schedule(cache, NOW + timedelta(seconds=1))
    assert names(result) == [], "not admitted with 10 pods at once: the full 20 can be had by preempting"
    assert [(d.victim[1], d.reason) for d in result.preempted] == [("old", "InClusterQueue")]
    assert pending(result)["new"][1].endswith("10 more needed. Pending the preemption of 1 workload(s)")
    evict(cache, result)
    [decision] = schedule(cache, NOW + timedelta(seconds=2)).admitted
    assert counts_of(decision) == {"one": (20, "20")}


def test_partial_admission_preempt_with_partial_admission() -> None:
    """Upstream: "... preempt with partial admission": the full 30 exceed the capacity; 20 pods preempt."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 20}}, **LOWER)
    cache.upsert_workload(multi_pod_set_workload("old", [("one", 10, None, "1")], priority=-4))
    admit_all(cache, schedule(cache, NOW))
    cache.upsert_workload(multi_pod_set_workload("new", [("one", 30, 10, "1")], priority=4))
    result = schedule(cache, NOW + timedelta(seconds=1))
    assert names(result) == []
    assert [d.victim[1] for d in result.preempted] == ["old"]
    assert pending(result)["new"][1] == (
        "couldn't assign flavors to pod set one: insufficient unused quota for cpu in flavor default-flavor, 10 more needed"
        ". Pending the preemption of 1 workload(s)"
    )
    evict(cache, result)
    [decision] = schedule(cache, NOW + timedelta(seconds=2)).admitted
    assert counts_of(decision) == {"one": (20, "20")}


def test_partial_admission_prefers_reduction_when_no_victim_is_allowed() -> None:
    """Full counts need preemption but the victim has the same priority: the reduced counts fit instead."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 20}}, **LOWER)
    cache.upsert_workload(multi_pod_set_workload("old", [("one", 10, None, "1")], priority=4))
    admit_all(cache, schedule(cache, NOW))
    cache.upsert_workload(multi_pod_set_workload("new", [("one", 20, 5, "1")], priority=4))
    result = schedule(cache, NOW + timedelta(seconds=1))
    assert result.preempted == []
    [decision] = result.admitted
    assert counts_of(decision) == {"one": (10, "10")}


# --- parking (upstream's inadmissible Workloads) and the heads bound ------------------------------


def parked_large() -> Cache:
    """9 CPUs, 6 held by ``running``; ``large`` (5) told why it waits and parked."""
    cache = seed_cache()
    cache.upsert_workload(workload("running", "6", age=100))
    confirm(cache, schedule(cache, NOW).admitted[0])
    cache.upsert_workload(workload("large", "5", age=50))
    result = schedule(cache, NOW)
    assert set(pending(result)) == {"large"}
    write_pending(cache, result.pending[0])
    assert cache.is_parked(("default", "large"), "cq")
    return cache


def test_a_misfit_is_parked_until_quota_is_released() -> None:
    cache = parked_large()

    # Another Workload taking quota changes the figure in large's message, but it is not looked at again.
    cache.upsert_workload(workload("small", "1", age=10))
    result = schedule(cache, NOW)
    assert names(result) == ["small"]
    assert result.pending == []
    confirm(cache, result.admitted[0])
    assert cache.is_parked(("default", "large"), "cq")
    assert schedule(cache, NOW) == CycleResult()

    # Quota released by a Workload of its priority wakes it at once only if it could take it: small's
    # 1 CPU is not large's 5, so large waits for the requeue batch (it would be parked again anyway).
    finish(cache, cache.workload(("default", "small")))
    assert cache.is_parked(("default", "large"), "cq")
    assert schedule(cache, NOW) == CycleResult(next_cycle_at=NOW + REQUEUE_BATCH)
    finish(cache, cache.workload(("default", "running")))
    assert not cache.is_parked(("default", "large"), "cq")  # 6 CPUs back: enough for large's 5
    assert names(schedule(cache, NOW)) == ["large"]


def test_a_release_wakes_parked_workloads_a_requeue_batch_later_and_new_arrivals_at_once() -> None:
    """Upstream's scheduler scalability configs, reduced: a large high-priority Workload (the whole
    quota) arrives just after the previous one finished. The medium ones parked behind it must not be
    admitted into that gap, or the new large one evicts them, every time (as upstream, whose
    inadmissible Workloads go back to the queues a batch period after the release)."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 20}}, preemption={"withinClusterQueue": "LowerPriority"})
    cache.upsert_workload(workload("large-1", "20", priority=200, age=100))
    large_1 = confirm(cache, schedule(cache, NOW).admitted[0])
    cache.upsert_workload(workload("medium", "5", priority=100, age=90))
    result = schedule(cache, NOW)
    assert result.preempted == [] and set(pending(result)) == {"medium"}  # same priority: no victims
    write_pending(cache, result.pending[0])
    assert cache.is_parked(("default", "medium"), "cq")

    finish(cache, large_1)
    cache.upsert_workload(workload("large-2", "20", priority=200, age=80))
    result = schedule(cache, NOW)
    assert names(result) == ["large-2"] and result.preempted == []
    assert result.next_cycle_at == NOW + REQUEUE_BATCH
    confirm(cache, result.admitted[0])
    # The batch ends: medium is looked at again and still does not fit (nor may it preempt).
    result = schedule(cache, NOW + REQUEUE_BATCH)
    assert names(result) == [] and result.preempted == []
    assert cache.is_parked(("default", "medium"), "cq")


def test_candidates_behind_one_without_victims_are_parked_in_the_same_cycle() -> None:
    """Same pod sets, later in queue order: no victims either. They are parked (not left for the next
    change), and, parked without an assignment, they do not count towards heads_per_queue."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 20}}, preemption={"withinClusterQueue": "LowerPriority"})
    cache.upsert_workload(workload("large", "20", priority=200, age=100))
    confirm(cache, schedule(cache, NOW).admitted[0])
    for i in range(12):
        cache.upsert_workload(workload(f"medium-{i}", "5", priority=100, age=50 - i))
    result = schedule(cache, NOW, heads_per_queue=3)
    assert result.preempted == [] and not result.more
    assert len(result.pending) == 12
    assert all(cache.is_parked(("default", f"medium-{i}"), "cq") for i in range(12))
    assert (result.plans, result.plans_skipped) == (0, 1)  # weighed once, for the first of them


def large_one_runs_and_quota_was_given_back(cache: Cache) -> None:
    """A large Workload (15 CPUs, priority 200) holds quota in ``cache``'s queue and a tiny one has just
    finished there: quota was given back in the tree."""
    cache.upsert_workload(workload("large-1", "15", priority=200, age=100))
    cache.upsert_workload(workload("tiny", "1", priority=200, age=99))
    admitted = {d.key[1]: confirm(cache, d) for d in schedule(cache, NOW).admitted}
    finish(cache, admitted["tiny"])


def test_a_head_without_victims_stays_the_head_while_its_tree_gives_quota_back() -> None:
    """Upstream's large-scale generator, reduced: a large high-priority Workload finds no victims (its
    equals hold the quota) and a medium one behind it would fit in what is left. After quota was given
    back in the tree, the large one stays the queue's head and the medium one is not looked at in that
    cycle (upstream puts such a head back on its heap, not among the inadmissible ones); the next
    cycle, with no release since, parks it as before and admits the medium one."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 20}}, preemption={"withinClusterQueue": "LowerPriority"})
    large_one_runs_and_quota_was_given_back(cache)
    cache.upsert_workload(workload("large-2", "15", priority=200, age=50))
    cache.upsert_workload(workload("medium", "3", priority=100, age=40))

    result = schedule(cache, NOW)
    assert names(result) == [] and result.preempted == []
    assert set(pending(result)) == {"large-2"} and result.more
    assert not cache.is_parked(("default", "large-2"), "cq")
    write_pending(cache, result.pending[0])

    result = schedule(cache, NOW + REQUEUE_BATCH)
    assert names(result) == ["medium"]
    assert cache.is_parked(("default", "large-2"), "cq")


def test_a_preempted_head_is_parked_whatever_was_given_back() -> None:
    """The same as the head kept while its tree gives quota back, but the large one was evicted by
    preemption and has not reserved quota since (``Preempted=True``): it is parked as before and the
    medium one behind it is admitted in the same cycle. Kept its queue's head, a Workload behind others
    that run back to back took each gap they left and was evicted by the next, once a second."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 20}}, preemption={"withinClusterQueue": "LowerPriority"})
    large_one_runs_and_quota_was_given_back(cache)
    preempted = condition("Preempted", "True", "InClusterQueue", "Preempted to accommodate a workload")
    cache.upsert_workload(workload("large-2", "15", priority=200, age=50, conditions=[preempted]))
    cache.upsert_workload(workload("medium", "3", priority=100, age=40))

    result = schedule(cache, NOW)
    assert names(result) == ["medium"] and set(pending(result)) == {"large-2"} and not result.more
    assert cache.is_parked(("default", "large-2"), "cq")


def test_a_head_that_cannot_preempt_at_all_is_parked_whatever_was_given_back() -> None:
    """The head stays only if it would fit with preemption: one the queue cannot hold even empty (here,
    no preemption policy at all) is parked, and the Workloads behind it are looked at, as before."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 20}})
    large_one_runs_and_quota_was_given_back(cache)
    cache.upsert_workload(workload("large-2", "15", priority=200, age=50))
    cache.upsert_workload(workload("medium", "3", priority=100, age=40))
    result = schedule(cache, NOW)
    assert names(result) == ["medium"] and set(pending(result)) == {"large-2"}
    assert cache.is_parked(("default", "large-2"), "cq")
    # Parked so before a release, it does not hold back those behind it either.
    write_pending(cache, result.pending[0])
    finish(cache, confirm(cache, result.admitted[0]))
    cache.upsert_workload(workload("medium-2", "3", priority=100, age=30))
    assert names(schedule(cache, NOW)) == ["medium-2"]


def test_lower_priority_workloads_wait_behind_a_parked_head_while_its_tree_gives_quota_back() -> None:
    """The same, when the large one was parked before the release (it waits for the requeue batch): a
    medium one arriving behind it is not looked at in the cycle after the release, and is admitted by
    the next one (no release since)."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 20}}, preemption={"withinClusterQueue": "LowerPriority"})
    cache.upsert_workload(workload("large-1", "15", priority=200, age=100))
    cache.upsert_workload(workload("tiny", "1", priority=200, age=99))
    admitted = {d.key[1]: confirm(cache, d) for d in schedule(cache, NOW).admitted}
    cache.upsert_workload(workload("large-2", "15", priority=200, age=50))
    result = schedule(cache, NOW)
    assert set(pending(result)) == {"large-2"}
    write_pending(cache, result.pending[0])
    assert cache.is_parked(("default", "large-2"), "cq")

    finish(cache, admitted["tiny"])
    cache.upsert_workload(workload("medium", "3", priority=100, age=40))
    result = schedule(cache, NOW)
    assert names(result) == [] and result.pending == [] and result.more
    result = schedule(cache, NOW + REQUEUE_BATCH / 2)  # still within a requeue batch of the release
    assert names(result) == [] and result.more
    result = schedule(cache, NOW + REQUEUE_BATCH)
    assert names(result) == ["medium"]
    assert cache.is_parked(("default", "large-2"), "cq")


def test_releases_within_a_requeue_batch_share_one_wake() -> None:
    """Quota given back by higher-priority Workloads reaches a lower-priority parked one after the batch,
    which starts with the first cycle after the first release and is not pushed back by later ones."""
    cache = seed_cache()
    for name in ("a", "b"):
        cache.upsert_workload(workload(name, "4", priority=10, age=100))
    a, b = (confirm(cache, d) for d in schedule(cache, NOW).admitted)
    cache.upsert_workload(workload("big", "9", priority=0, age=50))
    write_pending(cache, schedule(cache, NOW).pending[0])
    finish(cache, a)
    assert schedule(cache, NOW).next_cycle_at == NOW + REQUEUE_BATCH
    half = NOW + REQUEUE_BATCH / 2
    finish(cache, b)
    assert schedule(cache, half) == CycleResult(next_cycle_at=NOW + REQUEUE_BATCH)
    assert cache.is_parked(("default", "big"), "cq")
    assert names(schedule(cache, NOW + REQUEUE_BATCH)) == ["big"]


def test_a_release_wakes_parked_workloads_of_its_priority_or_higher_at_once() -> None:
    cache = seed_cache()
    cache.upsert_workload(workload("running", "9", priority=5, age=100))
    running = confirm(cache, schedule(cache, NOW).admitted[0])
    for name, priority in (("higher", 7), ("same", 5), ("lower", 3)):
        cache.upsert_workload(workload(name, "3", priority=priority, age=50))
    for update in schedule(cache, NOW).pending:
        write_pending(cache, update)
    finish(cache, running)
    assert [cache.is_parked(("default", n), "cq") for n in ("higher", "same", "lower")] == [False, False, True]
    result = schedule(cache, NOW)
    assert names(result) == ["higher", "same"] and result.next_cycle_at == NOW + REQUEUE_BATCH
    assert names(schedule(cache, NOW + REQUEUE_BATCH)) == ["lower"]


def test_a_release_wakes_at_once_only_as_many_as_can_take_what_it_gave_back() -> None:
    """Eight 1-CPU Workloads parked behind a full queue; one 1-CPU Workload finishing wakes the first of
    them, in queue order, not all eight (each of the others would be looked at, told why it waits and
    parked again). Higher-priority ones too big for what was given back stay parked, and do not stop the
    walk."""
    cache = seed_cache()
    cache.upsert_workload(workload("running", "8", age=100))
    cache.upsert_workload(workload("short", "1", age=99))
    admit_all(cache, schedule(cache, NOW))
    cache.upsert_workload(workload("big", "3", priority=5, age=60))
    for i in range(8):
        cache.upsert_workload(workload(f"w-{i}", "1", age=50 - i))
    result = schedule(cache, NOW)
    for update in result.pending:
        write_pending(cache, update)
    parked = ["big", *(f"w-{i}" for i in range(8))]
    assert all(cache.is_parked(("default", n), "cq") for n in parked)
    finish(cache, cache.workload(("default", "short")))
    assert [n for n in parked if not cache.is_parked(("default", n), "cq")] == ["w-0"]
    result = schedule(cache, NOW)
    assert names(result) == ["w-0"] and result.pending == []
    # The rest wake with the requeue batch.
    assert result.next_cycle_at == NOW + REQUEUE_BATCH
    confirm(cache, result.admitted[0])
    assert all(cache.is_parked(("default", n), "cq") for n in parked[2:])


def test_a_release_looks_at_a_bounded_number_of_pending_workloads() -> None:
    """Per event, the walk for what fits stops after WAKE_TO_FILL_LOOKS Workloads, whatever the queue holds:
    a fitting one behind that many too big for what was given back waits for the requeue batch."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 100}})
    cache.upsert_workload(workload("running", "99", age=1000))
    cache.upsert_workload(workload("short", "1", age=999))
    admit_all(cache, schedule(cache, NOW))
    for i in range(WAKE_TO_FILL_LOOKS):
        cache.upsert_workload(workload(f"big-{i}", f"{2 + i}", priority=1, age=500 - i))
    cache.upsert_workload(workload("fits", "1", age=10))
    for update in schedule(cache, NOW).pending:
        write_pending(cache, update)
    assert cache.is_parked(("default", "fits"), "cq")
    finish(cache, cache.workload(("default", "short")))
    assert cache.is_parked(("default", "fits"), "cq")
    assert schedule(cache, NOW).next_cycle_at == NOW + REQUEUE_BATCH
    assert names(schedule(cache, NOW + REQUEUE_BATCH)) == ["fits"]


def test_an_unparked_candidate_ahead_takes_its_share_of_what_was_given_back() -> None:
    """A Workload not parked (just arrived, of another shape) ahead in queue order will take the quota
    first: the release wakes only what is left after it."""
    cache = seed_cache()
    cache.upsert_workload(workload("running", "8", age=100))
    cache.upsert_workload(workload("short", "1", age=99))
    admit_all(cache, schedule(cache, NOW))
    cache.upsert_workload(workload("parked", "1", age=50))
    write_pending(cache, schedule(cache, NOW).pending[0])
    cache.upsert_workload(workload("ahead", "1", priority=1, age=10))  # higher priority, not yet looked at
    finish(cache, cache.workload(("default", "short")))
    assert cache.is_parked(("default", "parked"), "cq")
    assert names(schedule(cache, NOW)) == ["ahead"]


def test_without_a_requeue_batch_a_release_wakes_parked_workloads_at_once() -> None:
    cache = Cache(requeue_batch=timedelta(0))
    cache.upsert_namespace("default", {"kubernetes.io/metadata.name": "default"})
    cache.upsert_flavor(flavor())
    cache.upsert_cluster_queue(cluster_queue())
    cache.upsert_local_queue(local_queue())
    cache.upsert_workload(workload("running", "6", age=100))
    running = confirm(cache, schedule(cache, NOW).admitted[0])
    cache.upsert_workload(workload("large", "5", age=50))
    write_pending(cache, schedule(cache, NOW).pending[0])
    assert cache.is_parked(("default", "large"), "cq")
    finish(cache, running)
    assert not cache.is_parked(("default", "large"), "cq")
    assert names(schedule(cache, NOW)) == ["large"]


def test_a_parked_workload_that_changes_what_it_asks_is_looked_at_again() -> None:
    cache = parked_large()
    # Its own condition coming back changes nothing; its requests do.
    cache.upsert_workload(workload("large", "3", age=50))
    assert not cache.is_parked(("default", "large"), "cq")
    assert names(schedule(cache, NOW)) == ["large"]


def test_recheck_wakes_a_parked_workload() -> None:
    cache = parked_large()
    cache.upsert_workload(workload("small", "1", age=10))
    confirm(cache, schedule(cache, NOW).admitted[0])  # large's "2 more needed" is stale now; it stays parked
    assert cache.is_parked(("default", "large"), "cq")
    cache.recheck(("default", "large"))  # e.g. its figures are due their refresh
    assert not cache.is_parked(("default", "large"), "cq")
    assert pending(schedule(cache, NOW)) == {
        "large": ("Pending", "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor, 3 more needed")
    }


def gap_after_a_large_one() -> tuple[Cache, Workload]:
    """20 CPUs; ``large-1`` (priority 200, the whole quota) runs, ``medium-1`` (5 CPUs, 100) parked behind it."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 20}}, **LOWER)
    cache.upsert_workload(workload("large-1", "20", priority=200, age=100))
    large_1 = confirm(cache, schedule(cache, NOW).admitted[0])
    cache.upsert_workload(workload("medium-1", "5", priority=100, age=90))
    write_pending(cache, schedule(cache, NOW).pending[0])
    assert cache.is_parked(("default", "medium-1"), "cq")
    return cache, large_1


def test_equals_of_a_parked_workload_arriving_later_wait_for_its_wake() -> None:
    """Upstream's scheduling equivalence: a new Workload asking what a parked one asks, at its priority, is
    parked with it (no assignment, no write) until the same wake; one asking something else is not."""
    cache, large_1 = gap_after_a_large_one()
    finish(cache, large_1)  # the gap: the next large one is about to arrive
    cache.upsert_workload(workload("medium-2", "5", priority=100, age=80))
    cache.upsert_workload(workload("other", "3", priority=100, age=70))
    result = schedule(cache, NOW)
    assert names(result) == ["other"] and result.pending == []
    assert cache.is_parked(("default", "medium-2"), "cq")
    confirm(cache, result.admitted[0])
    # The wake a requeue batch after the release takes both.
    assert names(schedule(cache, NOW + REQUEUE_BATCH)) == ["medium-1", "medium-2"]


def test_a_recheck_looks_at_an_equal_of_a_parked_workload() -> None:
    cache, large_1 = gap_after_a_large_one()
    cache.upsert_workload(workload("medium-2", "5", priority=100, age=80))
    assert cache.is_parked(("default", "medium-2"), "cq")
    cache.recheck(("default", "medium-2"))
    assert not cache.is_parked(("default", "medium-2"), "cq")
    result = schedule(cache, NOW)
    assert set(pending(result)) == {"medium-2"}  # looked at, told why it waits, parked in its own name
    write_pending(cache, result.pending[0])
    assert cache.is_parked(("default", "medium-2"), "cq")


def test_an_equal_arriving_after_the_parked_one_left_waits_for_the_wake_its_kind_started() -> None:
    """The mark of a kind stands until its ClusterQueue's parked Workloads next wake, as upstream's bulk-move
    hashes stand until its next requeue (a deleted inadmissible Workload does not clear them); the mark
    alone starts that wake, so a new equal is held back a requeue batch at most, never stuck."""
    cache, large_1 = gap_after_a_large_one()
    cache.delete_workload(("default", "medium-1"))
    finish(cache, large_1)
    cache.upsert_workload(workload("medium-2", "5", priority=100, age=80))
    assert cache.is_parked(("default", "medium-2"), "cq")
    assert names(after_requeue_batch(cache)) == ["medium-2"]


def test_an_evicted_workload_wakes_its_peers_with_the_batch_only() -> None:
    """Its quota goes to its preemptor: unlike a finished one, it does not wake the parked Workloads of
    its priority at once (they would only be parked again behind the preemptor)."""
    cache = seed_cache(**LOWER)
    for name, cpu in (("low-a", "4"), ("low-b", "5")):
        cache.upsert_workload(workload(name, cpu, priority=5, age=100))
    admit_all(cache, schedule(cache, NOW))
    cache.upsert_workload(workload("same", "3", priority=5, age=60))
    write_pending(cache, schedule(cache, NOW).pending[0])
    assert cache.is_parked(("default", "same"), "cq")
    cache.upsert_workload(workload("high", "9", priority=10, age=50))
    result = schedule(cache, NOW)
    assert sorted(d.victim[1] for d in result.preempted) == ["low-a", "low-b"]
    evict(cache, result)
    assert cache.is_parked(("default", "same"), "cq")
    assert names(schedule(cache, NOW)) == ["high"]


def test_queue_changes_wake_parked_workloads() -> None:
    cache = parked_large()
    cache.upsert_cluster_queue(cluster_queue(quotas={"default-flavor": {"cpu": 12}}))
    assert not cache.is_parked(("default", "large"), "cq")
    assert names(schedule(cache, NOW)) == ["large"]


def test_strict_fifo_parks_nothing() -> None:
    cache = seed_cache(queueingStrategy="StrictFIFO")
    cache.upsert_workload(workload("running", "6", age=100))
    confirm(cache, schedule(cache, NOW).admitted[0])
    cache.upsert_workload(workload("large-head", "5", age=50))
    cache.upsert_workload(workload("small", "1", age=10))
    result = schedule(cache, NOW)
    assert result.admitted == [] and set(pending(result)) == {"large-head"}
    assert not cache.is_parked(("default", "large-head"), "cq")


def preemption_cohort() -> Cache:
    """cq-a may reclaim within the cohort; cq-b's Workloads are within its own quota (no victims)."""
    cache = Cache()
    cache.upsert_namespace("default", {})
    cache.upsert_flavor(flavor())
    cache.upsert_cluster_queue(
        cluster_queue("cq-a", {"default-flavor": {"cpu": 4}}, cohortName="team", preemption={"reclaimWithinCohort": "Any"})
    )
    cache.upsert_cluster_queue(cluster_queue("cq-b", {"default-flavor": {"cpu": 4}}, cohortName="team"))
    cache.upsert_local_queue(local_queue("queue-a", cq="cq-a"))
    cache.upsert_local_queue(local_queue("queue-b", cq="cq-b"))
    return cache


def test_nothing_is_parked_behind_a_preemptor_holding_its_usage() -> None:
    """What does not fit only because a preemptor holds the quota its victims free may fit if the preemptor
    goes away first: it stays a candidate, and is admitted as soon as the victims' quota is free (parked,
    it would wait for a requeue batch, and the victim, back in the queue, would take the quota first)."""
    cache = preemption_cohort()
    cache.upsert_workload(workload("b-borrows", "6", queue="queue-b", age=100))
    admit_all(cache, schedule(cache, NOW))
    cache.upsert_workload(workload("a-reclaims", "4", queue="queue-a", priority=10, age=50))
    cache.upsert_workload(workload("b-other", "5", queue="queue-b", priority=5, age=40))  # cq-b may not preempt
    result = schedule(cache, NOW)
    assert [d.victim[1] for d in result.preempted] == ["b-borrows"]
    assert set(pending(result)) == {"a-reclaims", "b-other"}  # 4 CPUs left under a-reclaims' hold
    assert not cache.is_parked(("default", "b-other"), "cq-b")
    evict(cache, result)
    cache.delete_workload(("default", "a-reclaims"))
    assert names(schedule(cache, NOW)) == ["b-other"]


def test_a_preemption_without_victims_wakes_a_requeue_batch_after_a_workload_starts_holding_quota() -> None:
    cache = preemption_cohort()
    cache.upsert_workload(workload("a-running", "3", queue="queue-a", age=100))
    confirm(cache, schedule(cache, NOW).admitted[0])
    cache.upsert_workload(workload("a-waits", "3", queue="queue-a", age=50))
    cache.upsert_workload(workload("b-fills", "4", queue="queue-b", age=60))
    result = schedule(cache, NOW)
    assert names(result) == ["b-fills"]
    assert set(pending(result)) == {"a-waits"}  # would fit in cq-a's quota but nothing borrows: no victims
    assert result.preempted == []
    assert cache.is_parked(("default", "a-waits"), "cq-a")
    # b-fills' admission confirmed: a Workload started holding quota in the tree, a possible victim.
    confirm(cache, result.admitted[0])
    assert cache.is_parked(("default", "a-waits"), "cq-a")
    assert schedule(cache, NOW) == CycleResult(next_cycle_at=NOW + REQUEUE_BATCH)
    assert cache.is_parked(("default", "a-waits"), "cq-a")
    result = schedule(cache, NOW + REQUEUE_BATCH)
    assert result.plans + result.plans_skipped == 1  # looked at again: its preemption weighed
    assert cache.is_parked(("default", "a-waits"), "cq-a")  # still none (b-fills is within its quota)


def test_a_new_holder_of_quota_wakes_none_parked_for_lack_of_victims_in_its_own_queue() -> None:
    """To preempt a Workload just admitted gives back only what it took: the Workloads of its ClusterQueue
    parked for lack of victims are not woken by its admission, whatever its priority. Under a large
    high-priority Workload run back to back, the medium ones parked behind it woke a batch after each
    large one was admitted, so as it finished, and took the gap before the next one (decisions, stop 50)."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 6}}, **LOWER)
    cache.upsert_workload(workload("large", "4", priority=200, age=100))
    confirm(cache, schedule(cache, NOW).admitted[0])
    cache.upsert_workload(workload("medium", "3", priority=100, age=50))
    result = schedule(cache, NOW)
    assert result.admitted == [] and result.preempted == [] and set(pending(result)) == {"medium"}
    assert cache.is_parked(("default", "medium"), "cq")  # the large one outranks it: no victims
    for name, priority in (("higher", 300), ("equal", 100), ("lower", 50)):
        cache.upsert_workload(workload(name, "0.5", priority=priority, age=40))
        result = schedule(cache, NOW)
        assert names(result) == [name]
        confirm(cache, result.admitted[0])
        assert schedule(cache, NOW) == CycleResult(), name  # no batch started
    assert cache.is_parked(("default", "medium"), "cq")
    cache.delete_workload(("default", "higher"))  # quota given back: the batch starts
    assert schedule(cache, NOW) == CycleResult(next_cycle_at=NOW + REQUEUE_BATCH)


@pytest.mark.parametrize(("reclaim", "wakes"), [("Never", False), ("LowerPriority", True), ("Any", True)])
def test_a_new_holder_in_another_queue_wakes_those_that_may_reclaim(reclaim: str, wakes: bool) -> None:
    """A Workload admitted in another ClusterQueue of the tree, even one of a higher priority, may make that
    queue's Workloads reclaimable by borrowing: the Workloads parked for lack of victims in a queue that may
    reclaim (reclaimWithinCohort not Never) wake a requeue batch later."""
    cache = Cache()
    cache.upsert_namespace("default", {})
    cache.upsert_flavor(flavor())
    cache.upsert_cluster_queue(
        cluster_queue("cq-a", {"default-flavor": {"cpu": 4}}, cohortName="team",
                      preemption={"reclaimWithinCohort": reclaim, "withinClusterQueue": "LowerPriority"})
    )
    cache.upsert_cluster_queue(cluster_queue("cq-b", {"default-flavor": {"cpu": 4}}, cohortName="team"))
    cache.upsert_local_queue(local_queue("queue-a", cq="cq-a"))
    cache.upsert_local_queue(local_queue("queue-b", cq="cq-b"))
    cache.upsert_workload(workload("a-running", "3", queue="queue-a", priority=100, age=100))
    confirm(cache, schedule(cache, NOW).admitted[0])
    cache.upsert_workload(workload("a-waits", "3", queue="queue-a", priority=100, age=50))
    cache.upsert_workload(workload("b-high", "4", queue="queue-b", priority=200, age=60))
    result = schedule(cache, NOW)
    assert names(result) == ["b-high"] and set(pending(result)) == {"a-waits"}
    assert cache.is_parked(("default", "a-waits"), "cq-a")  # a-running does not rank below it: no victims
    confirm(cache, result.admitted[0])
    expected = CycleResult(next_cycle_at=NOW + REQUEUE_BATCH) if wakes else CycleResult()
    assert schedule(cache, NOW) == expected


def test_a_misfit_without_preemption_stays_parked_when_others_are_admitted() -> None:
    cache = cohort_cache({"nominalQuota": 4}, {"nominalQuota": 4})
    cache.upsert_namespace("default", {})
    cache.upsert_workload(workload("a-running", "6", queue="queue-a", age=100))
    confirm(cache, schedule(cache, NOW).admitted[0])
    cache.upsert_workload(workload("a-waits", "3", queue="queue-a", age=50))
    cache.upsert_workload(workload("b-small", "1", queue="queue-b", age=60))
    result = schedule(cache, NOW)
    assert names(result) == ["b-small"] and set(pending(result)) == {"a-waits"}
    confirm(cache, result.admitted[0])
    assert cache.is_parked(("default", "a-waits"), "cq-a")


def test_nothing_is_parked_where_a_preemptor_holds_quota_this_cycle() -> None:
    cache = seed_cache(quotas={"default-flavor": {"cpu": 8}}, preemption={"withinClusterQueue": "LowerPriority"})
    cache.upsert_workload(workload("low", "8", priority=0, age=1000))
    confirm(cache, schedule(cache, NOW).admitted[0])
    cache.upsert_workload(workload("high", "8", priority=10, age=50))
    cache.upsert_workload(workload("other", "2", priority=5, age=40))
    result = schedule(cache, NOW)
    assert [d.victim[1] for d in result.preempted] == ["low"]
    assert set(pending(result)) == {"high", "other"}
    # other did not fit because high holds low's quota for this cycle only: it is not parked.
    assert not cache.is_parked(("default", "other"), "cq")


def test_heads_per_queue_walks_a_queue_a_few_misfits_per_cycle() -> None:
    cache = seed_cache()
    cache.upsert_workload(workload("running", "9", age=1000))
    confirm(cache, schedule(cache, NOW).admitted[0])
    for i in range(7):
        cache.upsert_workload(workload(f"wl-{i}", f"{i + 1}", age=100 - i))  # all different shapes
    seen: list[str] = []
    cycles = 0
    while True:
        result = schedule(cache, NOW, heads_per_queue=3)
        cycles += 1
        seen += sorted(pending(result), key=lambda n: int(n.split("-")[1]))
        if not result.more:
            break
    assert seen == [f"wl-{i}" for i in range(7)]  # in queue order, three per cycle
    assert cycles == 3
    assert schedule(cache, NOW, heads_per_queue=3) == CycleResult()
    # Quota freed: what it gives back (9) wakes wl-0..wl-2 at once (1 + 2 + 3; wl-3's 4 is more than the 3
    # left), the rest wake with the requeue batch, and that walk starts from the head again.
    finish(cache, cache.workload(("default", "running")))
    result = schedule(cache, NOW, heads_per_queue=3)
    assert names(result) == ["wl-0", "wl-1", "wl-2"] and not result.more
    admit_all(cache, result)
    result = schedule(cache, NOW + REQUEUE_BATCH, heads_per_queue=3)
    assert names(result) == [] and sorted(pending(result)) == ["wl-3", "wl-4", "wl-5"]
    assert result.more


def test_heads_per_queue_asks_for_no_more_cycles_when_it_parked_nothing() -> None:
    """Candidates left pending but not parked (not weighed for preemption) must not spin cycles."""
    cache = seed_cache(quotas={"default-flavor": {"cpu": 8}}, preemption={"withinClusterQueue": "LowerPriority"})
    cache.upsert_workload(workload("low", "8", priority=0, age=1000))
    confirm(cache, schedule(cache, NOW).admitted[0])
    for i in range(5):
        cache.upsert_workload(workload(f"high-{i}", "8", priority=10, age=100 - i))
    result = schedule(cache, NOW, heads_per_queue=2)
    assert [d.victim[1] for d in result.preempted] == ["low"]
    assert len(result.pending) == 2
    assert not result.more


def test_a_borrower_waits_for_the_cycles_candidates_within_their_nominal_quota() -> None:
    """Rounds are upstream's heads: a borrower of the first round must not take what a later round's
    candidate within its ClusterQueue's nominal quota needs (it would then reclaim it by preemption)."""
    cache = preemption_cohort()
    cache.upsert_workload(workload("b-running", "4", queue="queue-b", age=1000))
    confirm(cache, schedule(cache, NOW).admitted[0])
    cache.upsert_workload(workload("b-borrows", "2", queue="queue-b", age=300))
    cache.upsert_workload(workload("a-1", "2", queue="queue-a", age=200))
    cache.upsert_workload(workload("a-2", "2", queue="queue-a", age=100))
    result = schedule(cache, NOW)
    assert names(result) == ["a-1", "a-2"]
    assert result.preempted == []
    assert set(pending(result)) == {"b-borrows"}
    # With quota left once they are in, the borrower gets it in the same cycle.
    cache = preemption_cohort()
    cache.upsert_workload(workload("b-1", "2", queue="queue-b", age=300))
    cache.upsert_workload(workload("b-borrows", "4", queue="queue-b", age=250))
    cache.upsert_workload(workload("a-1", "2", queue="queue-a", age=200))
    assert names(schedule(cache, NOW)) == ["b-1", "a-1", "b-borrows"]


def test_a_waiting_preemptor_holds_its_quota_in_a_cycle_started_by_another_queue_of_its_tree() -> None:
    """A victim gave its quota back; the next cycle is started by a Workload arriving in another ClusterQueue
    alone. The preemptor's queue is looked at too, so the newcomer does not borrow what the preemptor waits
    for (and is not evicted by it a moment later)."""
    cache = preemption_cohort()
    memo = CycleMemo()
    for name, cpu, age in (("b-1", "3", 300), ("b-2", "3", 200), ("b-3", "2", 100)):
        cache.upsert_workload(workload(name, cpu, queue="queue-b", age=age))
    admit_all(cache, schedule(cache, NOW, memo=memo))
    assert cache.usage("cq-b") == {("default-flavor", "cpu"): Decimal(8)}, "cq-b borrows cq-a's 4"
    cache.upsert_workload(workload("a-large", "4", queue="queue-a", priority=10, age=50))
    first = schedule(cache, NOW, memo=memo)
    assert len(first.preempted) == 2, "no single borrower of cq-b frees cq-a's 4"
    for decision in first.preempted:  # both marked evicted; they hold their quota until released
        wl = cache.workload(decision.victim)
        cache.upsert_workload(merged(wl, lifecycle.preempted(wl, decision.reason, decision.message, NOW)))
    back = cache.workload(first.preempted[0].victim)
    cache.upsert_workload(merged(back, lifecycle.released(back, NOW)))  # one victim's quota is back
    released = schedule(cache, NOW, memo=memo)  # the whole tree is looked at: a-large waits for the other
    assert names(released) == [] and "a-large" in pending(released)
    # 3 of cq-a's 4 are free; a-large waits for the last one. Only queue-b changes now:
    cache.upsert_workload(workload("b-new", "3", queue="queue-b", age=1))
    result = schedule(cache, NOW, memo=memo)
    assert names(result) == [], "the released victim or b-new would borrow the quota a-large waits for"
    assert result.preempted == [] or {d.preemptor[1] for d in result.preempted} == {"a-large"}
    without_memo = schedule(cache, NOW)  # nothing changed since: nothing to look at, with or without the memo
    assert names(without_memo) == []


def borrowing_head(cq_b_cpu: int, **cq_a_spec: Any) -> Cache:
    """cq-a (4 cpu, 3 in use) and cq-b share a cohort; cq-a's head "large" (4 cpu) fits only by borrowing,
    "medium" (1 cpu, lower priority) behind it fits within cq-a's nominal quota."""
    cache = Cache()
    cache.upsert_namespace("default", {})
    cache.upsert_flavor(flavor())
    cache.upsert_cluster_queue(cluster_queue("cq-a", {"default-flavor": {"cpu": 4}}, cohortName="team", **cq_a_spec))
    cache.upsert_cluster_queue(cluster_queue("cq-b", {"default-flavor": {"cpu": cq_b_cpu}}, cohortName="team"))
    cache.upsert_local_queue(local_queue("queue-a", cq="cq-a"))
    cache.upsert_workload(workload("a-running", "3", queue="queue-a", priority=0, age=100))
    confirm(cache, schedule(cache, NOW).admitted[0])
    cache.upsert_workload(workload("large", "4", queue="queue-a", priority=10, age=20))
    cache.upsert_workload(workload("medium", "1", queue="queue-a", priority=5, age=30))
    return cache


def test_the_candidates_behind_a_deferred_borrower_wait_for_it() -> None:
    """Upstream decides no Workload of a ClusterQueue before its head: a lower-priority Workload behind a
    head deferred to borrow is not admitted past it. Admitted, it took the quota the head then needed, and
    the head preempted it; in upstream's scalability test the same Workloads were admitted and preempted
    by the same head several times over."""
    cache = borrowing_head(3, preemption={"withinClusterQueue": "LowerPriority"})
    result = schedule(cache, NOW)
    assert names(result) == ["large"], "the head first; what it leaves is not enough for medium"
    assert ("default", "medium") not in {d.victim for d in result.preempted}
    assert "medium" in pending(result)
    # With room for both, both are admitted in the same cycle, in queue order.
    assert names(schedule(borrowing_head(4), NOW)) == ["large", "medium"]


def test_the_cycle_memo_weighs_each_holder_once_until_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A preemptor waiting for its victims is planned again each cycle; the holders it weighs are built once."""
    from multikueue.core import scheduler

    built: list[str] = []
    real = scheduler._candidate

    def counting(holder: Any, now: datetime) -> Any:
        built.append(holder.key[1])
        return real(holder, now)

    monkeypatch.setattr(scheduler, "_candidate", counting)
    memo = scheduler.CycleMemo()
    cache = seed_cache(**LOWER)
    for name, age in (("low-a", 30), ("low-b", 20)):
        cache.upsert_workload(workload(name, "4", priority=0, age=age))
    admit_all(cache, schedule(cache, NOW, memo=memo))
    cache.upsert_workload(workload("high", "8", priority=10))
    assert schedule(cache, NOW, memo=memo).preempted
    assert sorted(built) == ["low-a", "low-b"]
    cache.recheck(("default", "high"))  # planned again next cycle (its victims not evicted yet)
    assert schedule(cache, NOW, memo=memo).preempted
    assert sorted(built) == ["low-a", "low-b"], "unchanged holders are not weighed again"
    low_a = cache.workload(("default", "low-a"))
    assert low_a is not None
    cache.upsert_workload(low_a.model_copy(update={"metadata": low_a.metadata.model_copy(update={"labels": {"x": "y"}})}))
    cache.recheck(("default", "high"))
    assert schedule(cache, NOW, memo=memo).preempted
    assert sorted(built) == ["low-a", "low-a", "low-b"], "a changed holder is weighed again"


# --- a cycle's share of the quota trees, and assignments kept while a tree is unchanged -------------------


def trees_cache(trees: int, queues: int) -> Cache:
    """``trees`` cohorts of ``queues`` ClusterQueues (cpu 4 each) with one LocalQueue each."""
    cache = Cache()
    cache.upsert_namespace("default", {"kubernetes.io/metadata.name": "default"})
    cache.upsert_flavor(flavor())
    for t in range(trees):
        for q in range(queues):
            cache.upsert_cluster_queue(cluster_queue(f"cq-{t}-{q}", {"default-flavor": {"cpu": 4}}, cohortName=f"tree-{t}"))
            cache.upsert_local_queue(local_queue(f"lq-{t}-{q}", cq=f"cq-{t}-{q}"))
    return cache


def test_a_cycle_takes_whole_quota_trees_up_to_its_share_and_the_next_one_the_rest() -> None:
    """With ``max_queues``, a cycle decides whole trees, the trees it left go first next time, and every
    Workload is admitted as without the bound, over a few cycles instead of one."""
    cache = trees_cache(trees=3, queues=3)
    for t in range(3):
        for q in range(3):
            cache.upsert_workload(workload(f"wl-{t}-{q}", "3", queue=f"lq-{t}-{q}"))
    memo = CycleMemo()
    first = schedule(cache, NOW, memo=memo, max_queues=4)
    assert first.more
    assert {key[1].rsplit("-", 1)[0] for key in (d.key for d in first.admitted)} == {"wl-0"}
    assert memo.postponed == ["cohort/tree-1", "cohort/tree-2"]
    # A change in the first tree meanwhile does not put it ahead of the trees left over.
    cache.upsert_workload(workload("late-0", "1", queue="lq-0-0"))
    second = schedule(cache, NOW, memo=memo, max_queues=4)
    assert {d.key[1].rsplit("-", 1)[0] for d in second.admitted} == {"wl-1"}
    assert second.more and memo.postponed == ["cohort/tree-2", "cohort/tree-0"]
    third = schedule(cache, NOW, memo=memo, max_queues=4)  # tree-2's three queues and tree-0's one changed
    assert {d.key[1] for d in third.admitted} == {"wl-2-0", "wl-2-1", "wl-2-2", "late-0"}
    assert not third.more and memo.postponed == []
    assert schedule(cache, NOW, memo=memo, max_queues=4) == CycleResult()


def test_a_tree_larger_than_the_share_is_decided_in_one_cycle() -> None:
    cache = trees_cache(trees=2, queues=3)
    for t in range(2):
        for q in range(3):
            cache.upsert_workload(workload(f"wl-{t}-{q}", "3", queue=f"lq-{t}-{q}"))
    memo = CycleMemo()
    first = schedule(cache, NOW, memo=memo, max_queues=2)
    assert len(first.admitted) == 3 and first.more  # tree-0 whole, although larger than 2
    second = schedule(cache, NOW, memo=memo, max_queues=2)
    assert len(second.admitted) == 3 and not second.more


def test_a_deferred_borrower_is_assigned_again_only_when_its_tree_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A borrower decided after the rounds keeps its assignment when nothing changed its tree since, and is
    assigned again (and not over-committed) when a later round admitted in its tree."""
    calls = count_assignments(monkeypatch)
    # Unchanged: one borrower alone in its tree, assigned once.
    cache = cohort_cache({"nominalQuota": 5}, {"nominalQuota": 5})
    cache.upsert_workload(workload("a-borrow", "6", queue="queue-a"))
    assert names(schedule(cache, NOW)) == ["a-borrow"]
    assert len(calls) == 1  # before: twice, once in its round and once after the rounds
    # Changed: a second-round candidate of the other queue takes quota within its nominal after the
    # borrower was deferred; the borrower is assigned again and no longer fits.
    calls.clear()
    cache = cohort_cache({"nominalQuota": 5}, {"nominalQuota": 5})
    cache.upsert_workload(workload("a-borrow", "6", queue="queue-a", age=10))
    cache.upsert_workload(workload("b-1", "2", queue="queue-b", age=9))
    cache.upsert_workload(workload("b-2", "3", queue="queue-b", age=8))
    result = schedule(cache, NOW)
    assert names(result) == ["b-1", "b-2"]
    assert "a-borrow" in pending(result)
    # a-borrow and b-1 in round 1, a-borrow again after b-1 was admitted (then deferred), b-2 in round 2,
    # a-borrow again after b-2 was admitted.
    assert len(calls) == 5


def test_the_memo_prunes_only_the_trees_a_cycle_weighed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cycle that took one tree keeps the other trees' weighed holders for the cycle that takes them."""
    from multikueue.core import scheduler

    monkeypatch.setattr(scheduler, "MEMO_SLACK", 0)
    cache = trees_cache(trees=2, queues=1)
    for t in range(2):
        cache.upsert_workload(workload(f"wl-{t}", "3", queue=f"lq-{t}-0"))
    for decision in schedule(cache, NOW).admitted:
        confirm(cache, decision)
    memo = CycleMemo()
    for t in range(2):
        [holder] = cache.quota_holders(f"cq-{t}-0")
        memo.candidate(holder, NOW, f"cohort/tree-{t}")
    memo.prune({"cohort/tree-0": set()})  # tree-0 weighed, its holder no longer among those weighed
    assert memo.candidates.get("cohort/tree-0") == {}
    assert set(memo.candidates["cohort/tree-1"]) == {("default", "wl-1")}


# --- an assumed admission whose write has not begun is taken back, not evicted ------------------------


def queue_with_an_assumed_low() -> tuple[Cache, AdmissionDecision]:
    """One ClusterQueue of 10 CPUs preempting lower priorities within: a low-priority Workload of 10
    CPUs is admitted (assumed, not yet written or confirmed), then a high-priority one of 10 arrives."""
    cache = Cache()
    cache.upsert_namespace("default", {"kubernetes.io/metadata.name": "default"})
    cache.upsert_flavor(flavor())
    policy = {"withinClusterQueue": "LowerPriority"}
    cache.upsert_cluster_queue(cluster_queue("cq", {"default-flavor": {"cpu": 10}}, preemption=policy))
    cache.upsert_local_queue(local_queue("queue", cq="cq"))
    cache.upsert_workload(workload("low", "10", queue="queue", priority=0, age=10))
    [decision] = schedule(cache, NOW).admitted
    cache.upsert_workload(workload("high", "10", queue="queue", priority=100, age=5))
    return cache, decision


def test_an_admission_not_yet_written_is_withdrawn_by_preemption() -> None:
    """The API server slow, an admission waits its turn to be written; a higher-priority Workload that
    needs its quota takes it back: nothing is evicted, the assumption is forgotten, the writer skips it,
    and the next cycle admits the preemptor."""
    cache, decision = queue_with_an_assumed_low()
    result = schedule(cache, NOW + REQUEUE_BATCH)
    assert result.preempted == [] and result.withdrawn == [("default", "low")]
    assert not cache.is_assumed(("default", "low"))
    assert not cache.start_writing(decision.key, decision.admission)  # the writer's turn comes: nothing to write
    result = schedule(cache, NOW + 2 * REQUEUE_BATCH)
    assert names(result) == ["high"] and "low" in pending(result)


def test_an_admission_being_written_is_not_withdrawn() -> None:
    """Once its write has begun, an assumed admission is out of preemption's reach until the watch
    confirms it (then it is evicted like any other)."""
    cache, decision = queue_with_an_assumed_low()
    assert cache.start_writing(decision.key, decision.admission)
    result = schedule(cache, NOW + REQUEUE_BATCH)
    assert result.preempted == [] and result.withdrawn == [] and cache.is_assumed(("default", "low"))
    assert "high" in pending(result)
    confirm(cache, decision)
    cache.recheck(("default", "high"))
    result = schedule(cache, NOW + 2 * REQUEUE_BATCH)
    assert [p.victim for p in result.preempted] == [("default", "low")] and result.withdrawn == []

