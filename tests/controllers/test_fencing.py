"""Fencing against a real worker apiserver: the manager's renewals and the worker's reaction.

The renewals use the manager's own token for worker1 (the kubeconfig Secret
the dev wiring stored), so the Lease role of ``config/worker-access`` is
what is exercised; the worker's side runs with the worker's admin
credentials, as the worker's controller does. Durations are seconds long so
the expiry happens within the test.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio
import yaml
from kubernetes import client, config

from multikueue.api.constants import MultiKueue
from multikueue.api.resources import LEASES
from multikueue.controllers.fencing import REASON, OriginFencing
from multikueue.controllers.multikueue.fencing import drop_origin_lease, hold_origin_lease, renew_once
from multikueue.core.fencing import LEASE_NAMESPACE, lease_name
from multikueue.dev import objects as o
from multikueue.dev.pytest_plugin import Clusters
from multikueue.runtime.events import EventRecorder
from multikueue.runtime.kube import AsyncKube

pytestmark = [pytest.mark.integration, pytest.mark.asyncio, pytest.mark.timeout(120)]

DURATION = 3.0


@pytest_asyncio.fixture
async def manager_token(integration_clusters: Clusters) -> AsyncIterator[AsyncKube]:
    """worker1 as the manager reaches it: the token of the kubeconfig Secret, least privilege."""
    secret = client.CoreV1Api(integration_clusters.manager).read_namespaced_secret("worker1-secret", "kueue-system")
    document = yaml.safe_load(base64.b64decode(secret.data[MultiKueue.KUBECONFIG_SECRET_KEY]))
    kube = AsyncKube(config.new_client_from_config_dict(document), workers=4)
    try:
        yield kube
    finally:
        await kube.close()


@pytest.fixture
def worker_admin(admin_kube: Callable[[int], AsyncKube]) -> AsyncKube:
    """worker1 as its own controller reaches it: admin credentials."""
    return admin_kube(1)


async def until(check: Callable[[], bool], timeout: float, what: str) -> float:
    start = time.monotonic()
    while not await asyncio.to_thread(check):
        if time.monotonic() - start > timeout:
            pytest.fail(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.1)
    return time.monotonic() - start


def copies(api: client.ApiClient, ns: str, origin: str) -> None:
    """Three copies on the worker: one of ``origin``, one of it already finished, one of another origin."""
    k = o.Kueue(api)
    for name, owner in (("running", origin), ("done", origin), ("other", f"{origin}-other")):
        body = o.workload(ns, name, "user-queue", {"cpu": "1"})
        body["metadata"]["labels"] = {"kueue.x-k8s.io/multikueue-origin": owner}
        k.create(body)
    k.patch(
        "Workload",
        "done",
        {"status": {"conditions": [{"type": "Finished", "status": "True", "reason": "Succeeded", "message": "",
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
        ns,
        status=True,
    )


def active(api: client.ApiClient, ns: str, name: str) -> bool:
    return o.Kueue(api).get("Workload", name, ns)["spec"].get("active", True) is not False


async def test_a_worker_fences_an_origin_whose_lease_stops_being_renewed(
    integration_clusters: Clusters, manager_token: AsyncKube, worker_admin: AsyncKube, namespace: str
) -> None:
    ns, origin = namespace, f"fence-{uuid.uuid4().hex[:6]}"
    worker = integration_clusters.worker(1)
    await asyncio.to_thread(copies, worker, ns, origin)
    events = EventRecorder(worker_admin)
    events.start()
    fencing = OriginFencing(worker_admin, events, poll=0.2)
    renewals = asyncio.create_task(hold_origin_lease(manager_token, "worker1", origin, DURATION))
    try:
        fencing.start()
        # Renewed every DURATION/4: three durations pass without a fence.
        await asyncio.sleep(3 * DURATION)
        assert await asyncio.to_thread(active, worker, ns, "running"), "fenced while the lease was renewed"
        assert origin not in fencing.fenced

        renewals.cancel()
        cut = time.monotonic()
        await until(lambda: not active(worker, ns, "running"), DURATION + 5, "the running copy deactivated")
        took = time.monotonic() - cut
        assert DURATION - 1 <= took <= DURATION + 3, took
        assert await asyncio.to_thread(active, worker, ns, "done"), "a finished copy is left alone"
        assert await asyncio.to_thread(active, worker, ns, "other"), "another origin's copy is left alone"

        def warned() -> bool:
            return any(e.reason == REASON and e.involved_object.name == "running" for e in client.CoreV1Api(worker).list_namespaced_event(ns).items)

        await until(warned, 10, f"a {REASON} Event on the fenced copy")

        # Renewed again: no longer fenced (the copy stays deactivated: the manager's call now).
        await renew_once(manager_token, origin, DURATION)
        await until(lambda: origin not in fencing.fenced, 5, "the origin no longer fenced")
        assert not await asyncio.to_thread(active, worker, ns, "running")
    finally:
        renewals.cancel()
        await fencing.stop()
        await events.stop()
        await worker_admin.delete(LEASES, LEASE_NAMESPACE, lease_name(origin))


async def test_a_worker_blind_to_its_own_apiserver_does_not_count_that_time(worker_admin: AsyncKube) -> None:
    """A failed listing (its own apiserver frozen or restarting) restarts the windows: the blind time does not count."""
    origin = f"blind-{uuid.uuid4().hex[:6]}"
    await renew_once(worker_admin, origin, DURATION)
    events = EventRecorder(worker_admin)
    fencing = OriginFencing(worker_admin, events, poll=0.2)
    try:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await fencing.tick(start)
        # Ten seconds pass in which the worker saw nothing: not an expiry.
        fencing.watch.missed()
        assert await fencing.tick(start + 10) == []
        for second in range(1, int(DURATION)):
            assert await fencing.tick(start + 10 + second) == []
        assert await fencing.tick(start + 10 + DURATION) == [origin]
    finally:
        await worker_admin.delete(LEASES, LEASE_NAMESPACE, lease_name(origin))


async def test_the_manager_token_reaches_only_origin_leases(manager_token: AsyncKube, worker_admin: AsyncKube) -> None:
    origin = f"off-{uuid.uuid4().hex[:6]}"
    await renew_once(manager_token, origin, DURATION)
    await renew_once(manager_token, origin, DURATION)  # the renewal path (patch) too
    assert await worker_admin.get_or_none(LEASES, LEASE_NAMESPACE, lease_name(origin)) is not None
    with pytest.raises(client.ApiException) as refused:
        await manager_token.list(LEASES, "kube-system")
    assert refused.value.status == 403
    # Fencing off: the manager removes its Lease, and the worker forgets the origin.
    await drop_origin_lease(manager_token, "worker1", origin)
    assert await worker_admin.get_or_none(LEASES, LEASE_NAMESPACE, lease_name(origin)) is None
