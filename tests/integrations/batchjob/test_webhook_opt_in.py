"""managedJobsNamespaceSelector as a namespace opt-in, on a real apiserver.

A controller whose Configuration sets the selector (in place of the session
controller, on its webhook port) writes it into the webhooks'
``namespaceSelector``: a Job in a namespace that has not opted in never
reaches the webhooks (it is created as is, even with the controller down) and
the Job integration leaves it alone; a Job in a namespace that opted in is
queued as usual.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess, in_place_of
from multikueue.dev.pytest_plugin import Clusters
from multikueue.operator.webhook import CONFIGURATION_NAME

pytestmark = pytest.mark.integration

OPT_IN = "multikueue.test/managed"


def _selectors(api: client.ApiClient) -> list[dict[str, str] | None]:
    admission = client.AdmissionregistrationV1Api(api)
    hooks = [
        *admission.read_mutating_webhook_configuration(CONFIGURATION_NAME).webhooks,
        *admission.read_validating_webhook_configuration(CONFIGURATION_NAME).webhooks,
    ]
    return [hook.namespace_selector.match_labels for hook in hooks]


def test_jobs_outside_the_opted_in_namespaces_are_left_alone(
    integration_clusters: Clusters, integration_controller: ControllerProcess, namespace: str, tmp_path: Path
) -> None:
    api = integration_clusters.manager
    core, batch, k = client.CoreV1Api(api), client.BatchV1Api(api), o.Kueue(api)
    ns, other = namespace, f"{namespace}-out"
    config = f"opt-in-{ns}"
    core.create_namespaced_config_map(
        "kueue-system",
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=config),
            data={
                "controller_manager_config.yaml": "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
                f"managedJobsNamespaceSelector:\n  matchLabels:\n    {OPT_IN}: '{ns}'\n"
            },
        ),
    )
    core.patch_namespace(ns, {"metadata": {"labels": {OPT_IN: ns}}})
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    k.create(o.resource_flavor(f"default-{ns}"))
    k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 8}}))
    for queue_ns in (ns, other):
        k.create(o.local_queue(queue_ns, "user-queue", f"cq-{ns}"))
    try:
        with in_place_of(integration_controller, "opt-in", tmp_path / "opt-in.log", config) as ctl:
            o.wait_for(lambda: _selectors(api) == [{OPT_IN: ns}] * 2, 30, what="the opt-in selector in the webhook configurations")

            outside = batch.create_namespaced_job(other, o.batch_job(other, "outside", "user-queue", {"cpu": "1"}, suspend=False))
            assert outside.spec.suspend is False and outside.spec.managed_by is None
            inside = batch.create_namespaced_job(ns, o.batch_job(ns, "inside", "user-queue", {"cpu": "1"}, suspend=False))
            assert inside.spec.suspend is True
            o.wait_for(
                lambda: any(o.is_true(wl, "Admitted") for wl in k.list("Workload", ns)), 30, what="the opted-in Job's Workload admitted"
            )
            o.wait_for(lambda: batch.read_namespaced_job("inside", ns).spec.suspend is False, 30, what="the opted-in Job started")
            # By now the integration has seen the other Job too: no Workload, never suspended.
            assert k.list("Workload", other) == []
            assert batch.read_namespaced_job("outside", other).spec.suspend is False

            ctl.stop()  # the webhooks stay registered (failurePolicy: Fail) ...
            created = batch.create_namespaced_job(other, o.batch_job(other, "while-down", "user-queue", {"cpu": "1"}, suspend=False))
            assert created.spec.suspend is False  # ... but a namespace that has not opted in never waits for them
            with pytest.raises(ApiException) as refused:
                batch.create_namespaced_job(ns, o.batch_job(ns, "refused", "user-queue", {"cpu": "1"}, suspend=False))
            assert f"job-defaults.{CONFIGURATION_NAME}" in refused.value.body
    finally:
        # The session controller writes its own selector back (no opt-in) before other tests run.
        o.wait_for(lambda: _selectors(api) == [None, None], 30, what="the session controller's webhook configurations")
        core.delete_namespace(other)
        core.delete_namespaced_config_map(config, "kueue-system")
