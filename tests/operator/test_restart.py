"""Killing the controller in the middle of a burst loses nothing and counts nothing twice."""

from __future__ import annotations

import threading
import time
from collections import Counter
from decimal import Decimal

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from multikueue.api.quantity import parse_quantity
from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters

pytestmark = pytest.mark.integration

JOBS = 200
QUOTA = 100


def test_restart_during_a_burst_of_jobs(integration_clusters: Clusters, integration_controller: ControllerProcess, namespace: str) -> None:
    ns = namespace
    api = integration_clusters.manager
    k, batch = o.Kueue(api), client.BatchV1Api(api)
    k.create(o.resource_flavor(f"default-{ns}"))
    k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": QUOTA}}))
    k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))

    refused: list[int] = []

    def submit(start: int, stop: int) -> None:
        for i in range(start, stop):
            body = o.batch_job(ns, f"job-{i:03d}", "user-queue", {"cpu": "1"})
            # While the controller is down its webhook refuses Jobs (failurePolicy Fail, as
            # upstream): a client retries, as kubectl users and CI systems do.
            deadline = time.monotonic() + 60
            while True:
                try:
                    batch.create_namespaced_job(ns, body)
                    break
                except ApiException as exc:
                    if exc.status == 409:
                        break
                    refused.append(i)
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)

    submitters = [threading.Thread(target=submit, args=(i, i + JOBS // 4)) for i in range(0, JOBS, JOBS // 4)]
    for thread in submitters:
        thread.start()
    # Kill the controller once admissions are under way, and start it again.
    o.wait_for(lambda: sum(o.is_true(w, "QuotaReserved") for w in k.list("Workload", ns)) >= 20, 60, interval=0.1, what="admissions under way")
    integration_controller.kill()
    time.sleep(2)  # Jobs keep coming while it is down
    integration_controller.start()
    for thread in submitters:
        thread.join()

    def settled() -> list[dict]:
        workloads = k.list("Workload", ns)
        reserved = [w for w in workloads if o.is_true(w, "QuotaReserved")]
        return workloads if len(workloads) == JOBS and len(reserved) == QUOTA else []

    try:
        workloads = o.wait_for(settled, 120, interval=0.5, what=f"{JOBS} Workloads, {QUOTA} of them reserved")
    except o.WaitTimeout:
        current = k.list("Workload", ns)
        reserved_now = sum(o.is_true(w, "QuotaReserved") for w in current)
        messages = Counter((o.condition(w, "QuotaReserved") or {}).get("message", "none") for w in current)
        pytest.fail(f"{len(current)} Workloads, {reserved_now} reserved; QuotaReserved messages: {dict(messages)}")
    owners = Counter(w["metadata"]["ownerReferences"][0]["name"] for w in workloads)
    assert len(owners) == JOBS and set(owners.values()) == {1}, "one Workload per Job"
    reserved = [w for w in workloads if o.is_true(w, "QuotaReserved")]
    used = sum(
        (parse_quantity(a["resourceUsage"]["cpu"]) for w in reserved for a in w["status"]["admission"]["podSetAssignments"]),
        Decimal(0),
    )
    assert used == QUOTA

    def reported() -> Decimal | None:
        status = k.get("ClusterQueue", f"cq-{ns}").get("status", {})
        flavors = status.get("flavorsReservation") or []
        if status.get("reservingWorkloads") != QUOTA or not flavors:
            return None
        return parse_quantity(flavors[0]["resources"][0]["total"])

    assert o.wait_for(reported, 30, what="ClusterQueue usage") == used
    def running() -> int:
        return sum(not j.spec.suspend for j in batch.list_namespaced_job(ns).items)

    o.wait_for(lambda: running() == QUOTA, 30, what=f"{QUOTA} Jobs started")
    assert running() == QUOTA, "exactly the admitted Jobs run"
