"""The manager's half of fencing: keep this origin's Lease alive on a connected worker.

One task per worker connection (started and cancelled with it, so only the
leading replica renews, and only while it reaches the worker). A renewal
that fails is logged and tried again at the next interval: the Lease
expiring is exactly what should happen when this manager cannot reach the
worker. See :mod:`multikueue.core.fencing` for the protocol and its timing.
"""

from __future__ import annotations

import asyncio

import structlog
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from multikueue.api.meta import utcnow
from multikueue.api.resources import LEASES
from multikueue.core.fencing import LEASE_NAMESPACE, lease_body, lease_name, renew_interval
from multikueue.runtime.kube import AsyncKube

log = structlog.get_logger(__name__)


async def renew_once(kube: AsyncKube, origin: str, duration: float) -> None:
    """Create the origin Lease, or move its ``renewTime`` (and duration) forward."""
    body = lease_body(origin, duration, utcnow())
    name = body["metadata"]["name"]
    try:
        await kube.patch(LEASES, LEASE_NAMESPACE, name, {"spec": body["spec"], "metadata": {"labels": body["metadata"]["labels"]}})
    except ApiException as exc:
        if exc.status != 404:
            raise
        await kube.create(LEASES, LEASE_NAMESPACE, {**body, "spec": {**body["spec"], "acquireTime": body["spec"]["renewTime"]}})


async def hold_origin_lease(kube: AsyncKube, cluster: str, origin: str, duration: float) -> None:
    """Renew until cancelled; say once when renewals start failing and once when they work again."""
    every = renew_interval(duration)
    failing = False
    while True:
        try:
            await renew_once(kube, origin, duration)
            if failing:
                log.info("origin lease renewed again", cluster=cluster, origin=origin)
            failing = False
        except asyncio.CancelledError:
            raise
        except (ApiException, HTTPError, OSError) as exc:
            if not failing:
                log.warning(
                    "origin lease not renewed",
                    cluster=cluster,
                    origin=origin,
                    namespace=LEASE_NAMESPACE,
                    error=f"{exc.status} {exc.reason}" if isinstance(exc, ApiException) else str(exc)[:200],
                    hint=f"grant the manager get, create and patch on leases in {LEASE_NAMESPACE} (config/worker-access); "
                    f"without renewals the worker stops this origin's jobs after {duration:g}s",
                )
            failing = True
        await asyncio.sleep(every)


async def drop_origin_lease(kube: AsyncKube, cluster: str, origin: str) -> None:
    """Fencing is off: delete the Lease, so the worker forgets this origin instead of fencing it."""
    try:
        if await kube.delete(LEASES, LEASE_NAMESPACE, lease_name(origin)):
            log.info("origin lease removed: fencing is off", cluster=cluster, origin=origin)
    except (ApiException, HTTPError, OSError) as exc:
        log.warning("origin lease not removed", cluster=cluster, origin=origin, error=str(exc)[:200])
