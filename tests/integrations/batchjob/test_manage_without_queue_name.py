"""manageJobsWithoutQueueName on a real apiserver: Jobs without a queue name are managed too, as upstream.

A controller whose Configuration sets it (with ``managedJobsNamespaceSelector``
scoping it to this test's namespace, in place of the session controller on
its webhook port): a Job created without ``kueue.x-k8s.io/queue-name`` is
suspended by the webhook and gets a Workload naming no queue, which waits as
inadmissible ("LocalQueue  doesn't exist", upstream's message) instead of
running unqueued; a queued Job next to it runs as usual.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess, in_place_of
from multikueue.dev.pytest_plugin import Clusters
from multikueue.integrations.naming import workload_name_for_owner
from multikueue.operator.webhook import CONFIGURATION_NAME

pytestmark = pytest.mark.integration

SCOPE = "multikueue.test/manage-all"


def _object_selectors(api: client.ApiClient) -> list[object]:
    """Each mutating webhook's objectSelector; ``None`` for an empty one (the apiserver defaults it to ``{}``)."""
    admission = client.AdmissionregistrationV1Api(api)
    selectors = [hook.object_selector for hook in admission.read_mutating_webhook_configuration(CONFIGURATION_NAME).webhooks]
    return [s if s is not None and (s.match_labels or s.match_expressions) else None for s in selectors]


def test_a_job_without_queue_name_is_suspended_and_waits_inadmissible(
    integration_clusters: Clusters, integration_controller: ControllerProcess, namespace: str, tmp_path: Path
) -> None:
    api = integration_clusters.manager
    core, batch, k = client.CoreV1Api(api), client.BatchV1Api(api), o.Kueue(api)
    ns = namespace
    config = f"manage-all-{ns}"
    core.create_namespaced_config_map(
        "kueue-system",
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=config),
            data={
                "controller_manager_config.yaml": "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
                f"manageJobsWithoutQueueName: true\nmanagedJobsNamespaceSelector:\n  matchLabels:\n    {SCOPE}: '{ns}'\n"
            },
        ),
    )
    core.patch_namespace(ns, {"metadata": {"labels": {SCOPE: ns}}})
    k.create(o.resource_flavor(f"default-{ns}"))
    k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 8}}))
    k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    try:
        with in_place_of(integration_controller, "manage-all", tmp_path / "manage-all.log", config):
            o.wait_for(lambda: _object_selectors(api) == [None], 30, what="the mutating webhook without its queue-name objectSelector")

            plain = batch.create_namespaced_job(ns, o.batch_job(ns, "plain", None, {"cpu": "1"}, suspend=False))
            assert plain.spec.suspend is True, "suspended by the webhook although it names no queue"
            name = workload_name_for_owner("plain", plain.metadata.uid, "Job", "batch")

            def inadmissible() -> dict[str, object] | None:
                wl = k.get_or_none("Workload", name, ns)
                cond = o.condition(wl, "QuotaReserved") if wl else None
                return cond if cond and cond["reason"] == "Inadmissible" else None

            cond = o.wait_for(inadmissible, 30, what="the queue-less Job's Workload inadmissible")
            assert cond["message"] == "LocalQueue  doesn't exist"
            assert not k.get("Workload", name, ns)["spec"].get("queueName")

            queued = batch.create_namespaced_job(ns, o.batch_job(ns, "queued", "user-queue", {"cpu": "1"}, suspend=False))
            assert queued.spec.suspend is True
            o.wait_for(lambda: batch.read_namespaced_job("queued", ns).spec.suspend is False, 30, what="the queued Job started")
            assert batch.read_namespaced_job("plain", ns).spec.suspend is True, "the queue-less one still waits"
    finally:
        # The session controller writes its own webhooks back (queue-name objectSelector) before other tests run.
        o.wait_for(lambda: _object_selectors(api) not in ([None], []), 30, what="the session controller's webhook configurations")
        for job in ("plain", "queued"):
            try:
                batch.delete_namespaced_job(job, ns, propagation_policy="Background")
            except client.ApiException:
                pass
        core.delete_namespaced_config_map(config, "kueue-system")
