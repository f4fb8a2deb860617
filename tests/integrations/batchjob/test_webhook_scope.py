"""The Job webhooks' scope on a real apiserver: what they hold up when the controller is down.

The configurations stay registered while the controller is stopped
(``failurePolicy: Fail``), so a queued Job cannot slip through unsuspended;
everything outside their scope (kube-system, Jobs without Kueue labels,
metadata-only updates) is never held up.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters
from multikueue.operator.webhook import CONFIGURATION_NAME

pytestmark = pytest.mark.integration

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _webhooks_point_at(api: client.ApiClient, port: int) -> bool:
    admission = client.AdmissionregistrationV1Api(api)
    try:
        mutating = admission.read_mutating_webhook_configuration(CONFIGURATION_NAME)
        validating = admission.read_validating_webhook_configuration(CONFIGURATION_NAME)
    except ApiException:
        return False
    hooks = [*(mutating.webhooks or []), *(validating.webhooks or [])]
    return len(hooks) == 2 and all(f":{port}/" in (h.client_config.url or "") for h in hooks)


@pytest.fixture
def webhooks(integration_clusters: Clusters, integration_controller: ControllerProcess) -> Iterator[ControllerProcess]:
    """The session controller with its webhooks registered; running again when the test ends."""
    api = integration_clusters.manager
    ctl = integration_controller
    if not ctl.alive:
        ctl.start()
    o.wait_for(lambda: _webhooks_point_at(api, ctl.webhook_port), 30, what="the controller's webhook configurations")
    yield ctl
    if not ctl.alive:
        ctl.start()


def test_configurations_exclude_system_namespaces_and_select_kueue_jobs(integration_clusters: Clusters, webhooks: ControllerProcess) -> None:
    admission = client.AdmissionregistrationV1Api(integration_clusters.manager)
    [mutating] = admission.read_mutating_webhook_configuration(CONFIGURATION_NAME).webhooks
    [validating] = admission.read_validating_webhook_configuration(CONFIGURATION_NAME).webhooks
    for hook in (mutating, validating):
        [expression] = hook.namespace_selector.match_expressions
        assert (expression.key, expression.operator) == ("kubernetes.io/metadata.name", "NotIn")
        assert set(expression.values) == {"kube-system", "kueue-system"}
        assert hook.failure_policy == "Fail" and hook.side_effects == "None"
    [selector] = mutating.object_selector.match_expressions
    assert (selector.key, selector.operator) == (QUEUE_LABEL, "Exists")
    assert [rule.operations for rule in mutating.rules] == [["CREATE"]]
    assert {c.name for c in validating.match_conditions} == {"kueue-job", "create-or-validated-fields-changed"}


def test_stopped_controller_refuses_queued_jobs_only(integration_clusters: Clusters, webhooks: ControllerProcess, namespace: str) -> None:
    api = integration_clusters.manager
    batch = client.BatchV1Api(api)
    ns = namespace
    plain = batch.create_namespaced_job(ns, o.batch_job(ns, "plain", None, {"cpu": "1"}, suspend=False))
    held = batch.create_namespaced_job(ns, o.batch_job(ns, "held", "missing-queue", {"cpu": "1"}))
    webhooks.stop()  # a graceful stop: the configurations stay

    assert _webhooks_point_at(api, webhooks.webhook_port), "the webhooks are still registered"
    # kube-system is never held up, even for a Job carrying a queue name.
    system_job = o.batch_job("kube-system", f"system-{ns}", "user-queue", {"cpu": "1"}, suspend=False)
    created = batch.create_namespaced_job("kube-system", system_job)
    try:
        assert created.spec.suspend is False
    finally:
        batch.delete_namespaced_job(f"system-{ns}", "kube-system", propagation_policy="Background")
    # Jobs Kueue does not manage (a CronJob's, say) are created and updated as usual,
    # and metadata updates (a finalizer during garbage collection) pass.
    batch.create_namespaced_job(ns, o.batch_job(ns, "cron-made", None, {"cpu": "1"}, suspend=False))
    batch.patch_namespaced_job("plain", ns, {"metadata": {"labels": {"team": "a"}, "finalizers": ["example.com/hold"]}})
    batch.patch_namespaced_job("plain", ns, {"metadata": {"finalizers": None}})
    # A queued Job's garbage-collection updates (finalizers, owner references) do not wait for
    # the controller either: UPDATE is validated only when labels, annotations or counts change.
    batch.patch_namespaced_job("held", ns, {"metadata": {"finalizers": ["example.com/hold"]}})
    batch.patch_namespaced_job("held", ns, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as relabelled:
        batch.patch_namespaced_job("held", ns, {"metadata": {"labels": {QUEUE_LABEL: "other-queue"}}})
    assert f"job-validation.{CONFIGURATION_NAME}" in relabelled.value.body
    assert held.spec.suspend is True
    # A queued Job is refused rather than accepted unsuspended (it would run on the manager).
    with pytest.raises(ApiException) as refused:
        batch.create_namespaced_job(ns, o.batch_job(ns, "queued", "user-queue", {"cpu": "1"}, suspend=False))
    assert refused.value.status >= 500 or refused.value.status == 403, refused.value.body
    assert f"job-defaults.{CONFIGURATION_NAME}" in refused.value.body
    assert plain.metadata.name == "plain"

    webhooks.start()
    o.wait_for(lambda: _webhooks_point_at(api, webhooks.webhook_port), 30, what="the webhook configurations again")
    queued = o.wait_for(
        lambda: _create_or_none(batch, ns, o.batch_job(ns, "queued", "user-queue", {"cpu": "1"}, suspend=False)),
        30,
        interval=0.5,
        what="the queued Job accepted once the controller is back",
    )
    assert queued.spec.suspend is True


def _create_or_none(batch: client.BatchV1Api, ns: str, body: dict) -> client.V1Job | None:
    try:
        return batch.create_namespaced_job(ns, body)
    except ApiException as exc:
        if exc.status == 409:
            return batch.read_namespaced_job(body["metadata"]["name"], ns)
        return None


def test_queue_name_of_a_running_job_cannot_change(integration_clusters: Clusters, webhooks: ControllerProcess, namespace: str) -> None:
    api = integration_clusters.manager
    k, batch = o.Kueue(api), client.BatchV1Api(api)
    ns = namespace
    k.create(o.resource_flavor(f"flavor-{ns}"))
    k.create(o.cluster_queue(f"cq-{ns}", {f"flavor-{ns}": {"cpu": 8}}))
    k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    k.create(o.local_queue(ns, "other-queue", f"cq-{ns}"))
    batch.create_namespaced_job(ns, o.batch_job(ns, "train", "user-queue", {"cpu": "1"}))
    o.wait_for(lambda: batch.read_namespaced_job("train", ns).spec.suspend is False, 20, what="the Job admitted and started")

    with pytest.raises(ApiException) as refused:
        batch.patch_namespaced_job("train", ns, {"metadata": {"labels": {QUEUE_LABEL: "other-queue"}}})
    assert refused.value.status == 422, refused.value.body
    # Upstream's wording (apimachinery's ValidateImmutableField).
    assert 'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: \\"other-queue\\": field is immutable' in refused.value.body
    with pytest.raises(ApiException) as removed:
        batch.patch_namespaced_job("train", ns, {"metadata": {"labels": {QUEUE_LABEL: None}}})
    assert removed.value.status == 422 and "field is immutable" in removed.value.body
    assert batch.read_namespaced_job("train", ns).metadata.labels[QUEUE_LABEL] == "user-queue"

    # Other updates of the running Job pass; a suspended Job may move.
    batch.patch_namespaced_job("train", ns, {"metadata": {"labels": {"team": "a"}}})
    batch.create_namespaced_job(ns, o.batch_job(ns, "waiting", "missing-queue", {"cpu": "1"}))
    moved = batch.patch_namespaced_job("waiting", ns, {"metadata": {"labels": {QUEUE_LABEL: "other-queue"}}})
    assert moved.metadata.labels[QUEUE_LABEL] == "other-queue"
