"""Local quota admission of Workloads by our controller, on a real apiserver.

The controller runs as its own process (``multikueue run``) against the
integration manager; the tests create upstream-shaped objects and watch the
status the controller writes. Cluster-scoped names carry the test namespace
so tests never see each other's queues.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters
from multikueue.operator.scheduling import HEADS_PER_QUEUE

pytestmark = pytest.mark.integration


def reserved(k: o.Kueue, ns: str, name: str) -> bool:
    return o.is_true(k.get_or_none("Workload", name, ns), "QuotaReserved")


def admitted(k: o.Kueue, ns: str, name: str) -> bool:
    return o.is_true(k.get_or_none("Workload", name, ns), "Admitted")


def pending_message(k: o.Kueue, ns: str, name: str) -> str:
    c = o.condition(k.get_or_none("Workload", name, ns), "QuotaReserved")
    return c["message"] if c and c["status"] == "False" else ""


def wait_for_pending(k: o.Kueue, ns: str, name: str, text: str, timeout: float = 15) -> str:
    """Wait until the Workload's QuotaReserved=False message says ``text``; return the message.

    Asserting on the first message seen races the controller's caches: a Workload created right after
    its queues can first be told its LocalQueue doesn't exist, then be requeued with the real reason
    when the LocalQueue reaches the cache (CI saw that once).
    """
    seen: list[str] = []

    def says() -> str:
        message = pending_message(k, ns, name)
        seen.append(message)
        return message if text in message else ""

    try:
        return o.wait_for(says, timeout, what=f"{name} pending with {text!r}")
    except o.WaitTimeout as e:
        raise AssertionError(f"{e}; messages seen: {sorted(set(seen) - {''})}") from e


def finish(k: o.Kueue, ns: str, name: str) -> None:
    wl = k.get("Workload", name, ns)
    conditions = wl["status"]["conditions"] + [
        {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    ]
    k.patch("Workload", name, {"status": {"conditions": conditions}}, ns, status=True)


def setup_queue(k: o.Kueue, ns: str, cpu: Any = 9, **cq: Any) -> str:
    k.create(o.resource_flavor(f"default-{ns}"))
    k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": cpu}}, **cq))
    k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    return f"cq-{ns}"


def test_seed_scenario_two_admitted_third_waits_then_admitted(kueue: o.Kueue, namespace: str) -> None:
    ns = namespace
    cq = setup_queue(kueue, ns)
    for i in range(3):
        kueue.create(o.workload(ns, f"wl-{i}", "user-queue", {"cpu": "4"}))
    o.wait_for(lambda: sum(admitted(kueue, ns, f"wl-{i}") for i in range(3)) == 2, 30, what="two admitted")
    waiting = next(f"wl-{i}" for i in range(3) if not reserved(kueue, ns, f"wl-{i}"))
    message = wait_for_pending(kueue, ns, waiting, "insufficient unused quota for cpu in flavor")
    assert "more needed" in message
    winner = next(f"wl-{i}" for i in range(3) if admitted(kueue, ns, f"wl-{i}"))
    wl = kueue.get("Workload", winner, ns)
    # Created directly, in a ClusterQueue without admission checks: no finalizer, as upstream (one write to admit).
    assert "kueue.x-k8s.io/resource-in-use" not in (wl["metadata"].get("finalizers") or [])
    assert wl["status"]["admission"]["clusterQueue"] == cq
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": f"default-{ns}"}

    def cq_counts() -> Any:
        status = kueue.get("ClusterQueue", cq).get("status", {})
        return (status.get("reservingWorkloads"), status.get("pendingWorkloads"), status.get("admittedWorkloads"))

    o.wait_for(lambda: cq_counts() == (2, 1, 2), 15, what="ClusterQueue counters 2 reserving, 1 pending")

    def lq_counts() -> Any:
        status = kueue.get("LocalQueue", "user-queue", ns).get("status", {})
        return (status.get("reservingWorkloads"), status.get("pendingWorkloads"), status.get("admittedWorkloads"))

    o.wait_for(lambda: lq_counts() == (2, 1, 2), 15, what="LocalQueue counters 2 reserving, 1 pending")
    usage = kueue.get("ClusterQueue", cq)["status"]["flavorsReservation"]
    assert usage[0]["resources"][0]["name"] == "cpu" and str(usage[0]["resources"][0]["total"]) == "8"
    assert o.is_true(kueue.get("ClusterQueue", cq), "Active")

    finish(kueue, ns, winner)
    o.wait_for(lambda: admitted(kueue, ns, waiting), 30, what="the third workload admitted after one finished")


def test_strict_fifo_blocks_behind_a_large_head(kueue: o.Kueue, namespace: str) -> None:
    ns = namespace
    setup_queue(kueue, ns, cpu=4, strategy="StrictFIFO")
    kueue.create(o.workload(ns, "big", "user-queue", {"cpu": "6"}, priority=10))
    kueue.create(o.workload(ns, "small", "user-queue", {"cpu": "1"}))
    wait_for_pending(kueue, ns, "big", "insufficient quota")
    # Behind a blocked head nothing is tried (and, as upstream, nothing is written).
    time.sleep(2)
    assert not reserved(kueue, ns, "small")


def test_best_effort_fifo_lets_a_smaller_one_pass(kueue: o.Kueue, namespace: str) -> None:
    ns = namespace
    setup_queue(kueue, ns, cpu=4, strategy="BestEffortFIFO")
    kueue.create(o.workload(ns, "big", "user-queue", {"cpu": "6"}, priority=10))
    kueue.create(o.workload(ns, "small", "user-queue", {"cpu": "1"}))
    o.wait_for(lambda: admitted(kueue, ns, "small"), 15, what="small admitted past big")
    assert not reserved(kueue, ns, "big")


def test_more_misfits_than_a_cycle_looks_at_are_all_told_why_and_a_small_one_behind_them_is_admitted(
    kueue: o.Kueue, namespace: str
) -> None:
    """A cycle leaves at most HEADS_PER_QUEUE Workloads of a queue pending and parks those that do not fit;
    the next cycles go on after them without any other event, down to the small one at the back."""
    ns = namespace
    setup_queue(kueue, ns, cpu=4)
    misfits = [f"big-{i:02d}" for i in range(3 * HEADS_PER_QUEUE + 1)]
    for i, name in enumerate(misfits):  # each its own shape and priority: no shortcut between them
        kueue.create(o.workload(ns, name, "user-queue", {"cpu": f"{5 + i}"}, priority=100 - i))
    kueue.create(o.workload(ns, "small", "user-queue", {"cpu": "1"}, priority=0))
    o.wait_for(lambda: admitted(kueue, ns, "small"), 30, what="the small Workload behind every misfit admitted")
    o.wait_for(
        lambda: all("insufficient quota" in pending_message(kueue, ns, name) for name in misfits),
        30,
        what="every misfit told why it waits",
    )


def test_higher_priority_is_admitted_first(kueue: o.Kueue, namespace: str) -> None:
    ns = namespace
    k = kueue
    k.create(o.resource_flavor(f"default-{ns}"))
    # Stopped queue: everything waits until it is started, then the order decides.
    body = o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 4}})
    body["spec"]["stopPolicy"] = "Hold"
    k.create(body)
    k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    k.create(o.workload(ns, "low", "user-queue", {"cpu": "4"}, priority=1))
    k.create(o.workload(ns, "high", "user-queue", {"cpu": "4"}, priority=100))
    o.wait_for(lambda: pending_message(k, ns, "high"), 15, what="high waits while the queue is held")
    k.patch("ClusterQueue", f"cq-{ns}", {"spec": {"stopPolicy": "None"}})
    o.wait_for(lambda: admitted(k, ns, "high"), 15, what="high admitted")
    assert not reserved(k, ns, "low")


def test_cohort_borrowing_respects_limits(kueue: o.Kueue, namespace: str) -> None:
    ns = namespace
    k = kueue
    cohort = f"cohort-{ns}"
    flavor = f"default-{ns}"
    k.create(o.resource_flavor(flavor))
    # a: 4 nominal, may borrow at most 2. b: 4 nominal, lends at most 3.
    k.create(o.cluster_queue(f"a-{ns}", {flavor: {"cpu": {"nominalQuota": 4, "borrowingLimit": 2}}}, cohort=cohort))
    k.create(o.cluster_queue(f"b-{ns}", {flavor: {"cpu": {"nominalQuota": 4, "lendingLimit": 3}}}, cohort=cohort))
    k.create(o.local_queue(ns, "qa", f"a-{ns}"))
    k.create(o.local_queue(ns, "qb", f"b-{ns}"))
    k.create(o.workload(ns, "a-6", "qa", {"cpu": "6"}))  # borrows 2: allowed
    o.wait_for(lambda: admitted(k, ns, "a-6"), 15, what="a borrows 2")
    k.create(o.workload(ns, "a-1", "qa", {"cpu": "1"}))  # would borrow 3 > borrowingLimit
    o.wait_for(lambda: pending_message(k, ns, "a-1"), 15, what="a-1 blocked by borrowingLimit")
    k.create(o.workload(ns, "b-2", "qb", {"cpu": "2"}))  # b keeps 2 of its own
    o.wait_for(lambda: admitted(k, ns, "b-2"), 15, what="b uses its remaining quota")
    k.create(o.workload(ns, "b-1", "qb", {"cpu": "1"}))  # nothing left in the cohort
    o.wait_for(lambda: pending_message(k, ns, "b-1"), 15, what="b-1 waits")


# -- bad input ----------------------------------------------------------------


def test_missing_local_queue_is_explained_then_fixed(kueue: o.Kueue, namespace: str) -> None:
    ns = namespace
    kueue.create(o.workload(ns, "orphan", "no-such-queue", {"cpu": "1"}))
    wait_for_pending(kueue, ns, "orphan", "LocalQueue no-such-queue doesn't exist")
    kueue.create(o.resource_flavor(f"default-{ns}"))
    kueue.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 4}}))
    kueue.create(o.local_queue(ns, "no-such-queue", f"cq-{ns}"))
    o.wait_for(lambda: admitted(kueue, ns, "orphan"), 15, what="admitted once the queue exists")


def test_local_queue_naming_missing_cluster_queue(kueue: o.Kueue, namespace: str) -> None:
    ns = namespace
    kueue.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    kueue.create(o.workload(ns, "wl", "user-queue", {"cpu": "1"}))
    wait_for_pending(kueue, ns, "wl", f"ClusterQueue cq-{ns} doesn't exist")
    kueue.create(o.resource_flavor(f"default-{ns}"))
    kueue.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 4}}))
    o.wait_for(lambda: admitted(kueue, ns, "wl"), 15, what="admitted once the ClusterQueue exists")


def test_cluster_queue_naming_missing_flavor(kueue: o.Kueue, namespace: str) -> None:
    ns = namespace
    cq = f"cq-{ns}"
    kueue.create(o.cluster_queue(cq, {f"default-{ns}": {"cpu": 4}}))
    kueue.create(o.local_queue(ns, "user-queue", cq))
    kueue.create(o.workload(ns, "wl", "user-queue", {"cpu": "1"}))

    def inactive() -> str:
        c = o.condition(kueue.get("ClusterQueue", cq), "Active")
        return c["reason"] + ": " + c["message"] if c and c["status"] == "False" else ""

    assert "FlavorNotFound" in o.wait_for(inactive, 15, what="ClusterQueue inactive with FlavorNotFound")
    wait_for_pending(kueue, ns, "wl", f"ClusterQueue {cq} is inactive")
    kueue.create(o.resource_flavor(f"default-{ns}"))
    o.wait_for(lambda: admitted(kueue, ns, "wl"), 15, what="admitted once the flavor exists")
    o.wait_for(lambda: o.is_true(kueue.get("ClusterQueue", cq), "Active"), 15, what="ClusterQueue active again")


def test_namespace_not_matching_selector(kueue: o.Kueue, namespace: str, integration_clusters: Clusters) -> None:
    ns = namespace
    setup_queue(kueue, ns, namespace_selector={"matchLabels": {"team": "ml"}})
    kueue.create(o.workload(ns, "wl", "user-queue", {"cpu": "1"}))
    wait_for_pending(kueue, ns, "wl", "namespace doesn't match ClusterQueue selector")
    from kubernetes import client

    client.CoreV1Api(integration_clusters.manager).patch_namespace(ns, {"metadata": {"labels": {"team": "ml"}}})
    o.wait_for(lambda: admitted(kueue, ns, "wl"), 15, what="admitted once the namespace matches")


def test_request_larger_than_every_flavor(kueue: o.Kueue, namespace: str) -> None:
    ns = namespace
    cq = setup_queue(kueue, ns, cpu=4)
    kueue.create(o.workload(ns, "huge", "user-queue", {"cpu": "64"}))
    message = wait_for_pending(kueue, ns, "huge", f"default-{ns}")
    assert "cpu" in message
    kueue.patch("ClusterQueue", cq, {"spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": f"default-{ns}", "resources": [{"name": "cpu", "nominalQuota": 64}]}]}]}})
    o.wait_for(lambda: admitted(kueue, ns, "huge"), 15, what="admitted once the quota is raised")


# -- admission checks -----------------------------------------------------------


def check_states(k: o.Kueue, ns: str, name: str) -> dict[str, str]:
    wl = k.get("Workload", name, ns)
    return {c["name"]: c["state"] for c in (wl.get("status") or {}).get("admissionChecks") or []}


def set_check(k: o.Kueue, ns: str, name: str, check: str, state: str, message: str = "") -> None:
    wl = k.get("Workload", name, ns)
    checks = wl["status"]["admissionChecks"]
    for c in checks:
        if c["name"] == check:
            c.update(state=state, message=message, lastTransitionTime="2026-01-01T00:00:01Z")
    k.patch("Workload", name, {"metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]}, "status": {"admissionChecks": checks}}, ns, status=True)


def setup_checked_queue(k: o.Kueue, ns: str) -> str:
    check = f"check-{ns}"
    k.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": check}, "spec": {"controllerName": "example.com/manual"}})
    k.patch("AdmissionCheck", check, {"status": {"conditions": [{"type": "Active", "status": "True", "reason": "Active", "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, status=True)
    setup_queue(k, ns, cpu=4, checks=[check])
    return check


def test_checks_ready_admit_retry_requeues_rejected_deactivates(kueue: o.Kueue, namespace: str) -> None:
    ns, k = namespace, kueue
    check = setup_checked_queue(k, ns)
    k.create(o.workload(ns, "wl", "user-queue", {"cpu": "2"}))
    o.wait_for(lambda: check_states(k, ns, "wl") == {check: "Pending"}, 15, what="check added as Pending")
    assert reserved(k, ns, "wl") and not admitted(k, ns, "wl")

    set_check(k, ns, "wl", check, "Retry", "worker lost")
    # Evicted (reason AdmissionCheck), requeued, and reserved again at once: the new reservation
    # turns Evicted back to False ("Previously: ..."), as upstream does.
    o.wait_for(lambda: o.is_true(k.get("Workload", "wl", ns), "Requeued"), 15, what="requeued on Retry")
    evicted = o.condition(k.get("Workload", "wl", ns), "Evicted")
    assert evicted is not None and "worker lost" in evicted["message"]
    assert evicted["reason"] == "AdmissionCheck" or evicted["message"].startswith("Previously: ")
    o.wait_for(lambda: reserved(k, ns, "wl") and check_states(k, ns, "wl") == {check: "Pending"}, 15, what="requeued and reserved again")

    set_check(k, ns, "wl", check, "Ready")
    o.wait_for(lambda: admitted(k, ns, "wl"), 15, what="admitted when the check is Ready")

    k.create(o.workload(ns, "wl2", "user-queue", {"cpu": "2"}))
    o.wait_for(lambda: check_states(k, ns, "wl2") == {check: "Pending"}, 15, what="second workload reserved")
    set_check(k, ns, "wl2", check, "Rejected", "not allowed")
    o.wait_for(lambda: k.get("Workload", "wl2", ns)["spec"].get("active") is False, 15, what="deactivated on Rejected")
    o.wait_for(lambda: not reserved(k, ns, "wl2"), 15, what="quota released")
    assert o.condition(k.get("Workload", "wl2", ns), "Evicted")["reason"] == "DeactivatedDueToAdmissionCheck"


def test_metrics_endpoint_counts_admissions(kueue: o.Kueue, namespace: str, integration_controller: ControllerProcess) -> None:
    import urllib.request

    ns = namespace
    cq = setup_queue(kueue, ns)
    kueue.create(o.workload(ns, "counted", "user-queue", {"cpu": "1"}))
    o.wait_for(lambda: admitted(kueue, ns, "counted"), 15, what="admitted")

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{integration_controller.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    labels = f'cluster_queue="{cq}",priority_class="",replica_role="standalone"'
    line = f"kueue_admitted_workloads_total{{{labels}}} 1.0"
    o.wait_for(lambda: line in scrape(), 10, what="admission counted")
    text = scrape()
    assert f"kueue_admission_wait_time_seconds_count{{{labels}}} 1.0" in text
    assert "mkpy_scheduling_cycle_seconds_count" in text
