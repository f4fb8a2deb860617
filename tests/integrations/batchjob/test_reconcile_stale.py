"""The Job reconciler given an out-of-date Job body, against a real API server.

Seen twice in CI (the partition fault test): a worker's Job copy whose
Workload was admitted there was never started, and nothing was logged. The
reconciler patches with the resourceVersion of the body it holds; when that
body is older than the server's (its watch had not delivered the last update,
or never will), the patch gets 409, which used to end the reconcile silently
on the promise of "a newer event on its way". Every periodic resync then
repeated the same stale patch and the same silent 409. Now a conflict reads
the Job live and decides again on it.

The reconciler runs in this process with a Cache of its own; the Workload is
only in that cache, so the integration controller of these clusters sees a
Job waiting for a prebuilt Workload that does not exist and leaves it alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from multikueue.api.constants import Labels
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import Workload
from multikueue.core.cache import Cache
from multikueue.dev import objects as o
from multikueue.dev.pytest_plugin import Clusters
from multikueue.integrations.batchjob import job as batchjob
from multikueue.integrations.batchjob.reconciler import JobReconciler
from multikueue.runtime.events import EventRecorder
from multikueue.runtime.kube import AsyncKube

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

PREBUILT = "wl-prebuilt"


async def test_a_stale_job_body_still_starts_the_job(
    integration_clusters: Clusters,
    admin_kube: Callable[[int], AsyncKube],
    reserve: Callable[..., Workload],
    namespace: str,
) -> None:
    ns = namespace
    batch = client.BatchV1Api(integration_clusters.manager)
    body = o.batch_job(ns, "copy", None, {"cpu": "1"})
    body["metadata"]["labels"][Labels.PREBUILT_WORKLOAD_NAME] = PREBUILT
    batch.create_namespaced_job(ns, body)
    stale: dict[str, Any] = client.ApiClient().sanitize_for_serialization(batch.read_namespaced_job("copy", ns))
    # An update the reconciler's watch has not delivered: its body is now one version behind.
    batch.patch_namespaced_job("copy", ns, {"metadata": {"annotations": {"touched": "yes"}}})

    cache = Cache()
    cache.upsert_flavor(ResourceFlavor.model_validate({"metadata": {"name": "on-demand"}}))
    workload = batchjob.build_workload(stale, priority=None, priority_class=None).model_copy(deep=True)
    workload.metadata.name = PREBUILT
    cache.upsert_workload(reserve(workload))
    kube = admin_kube(0)
    reconciler = JobReconciler(kube, cache, None, EventRecorder(kube))  # type: ignore[arg-type]

    await reconciler.reconcile(stale)

    live = batch.read_namespaced_job("copy", ns)
    assert live.spec.suspend is False, "the conflict was taken as 'a newer event is on its way' and the Job left suspended"
    assert live.metadata.annotations.get("touched") == "yes"
    # The body it keeps for the Job (one per Job, for as long as the Job exists) is the one read live,
    # without the field managers' records.
    kept = reconciler.get(ns, "copy")
    assert kept is not None and kept["metadata"]["annotations"].get("touched") == "yes"
    assert "managedFields" not in kept["metadata"] and stale["metadata"].get("managedFields")
