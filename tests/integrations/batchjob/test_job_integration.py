"""The batch/v1 Job integration against a real apiserver (no job controller here).

Without kube-controller-manager nothing runs the Jobs, which makes the
integration's own writes easy to observe: suspend, unsuspend, node selectors,
webhook defaults.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters
from multikueue.integrations.naming import workload_name_for_owner
from multikueue.operator.webhook import CONFIGURATION_NAME

pytestmark = pytest.mark.integration


@pytest.fixture
def apis(integration_clusters: Clusters, integration_controller: ControllerProcess) -> tuple[o.Kueue, client.BatchV1Api]:
    api = integration_clusters.manager
    admission = client.AdmissionregistrationV1Api(api)

    def webhook_ready() -> bool:
        try:
            config = admission.read_mutating_webhook_configuration(CONFIGURATION_NAME)
        except ApiException:
            return False
        return bool(config.webhooks)

    o.wait_for(webhook_ready, 30, what="the controller's MutatingWebhookConfiguration")
    return o.Kueue(api), client.BatchV1Api(api)


def queue(k: o.Kueue, ns: str, *, node_labels: dict[str, str] | None = None, checks: list[str] | None = None) -> None:
    k.create(o.resource_flavor(f"flavor-{ns}", node_labels=node_labels))
    k.create(o.cluster_queue(f"cq-{ns}", {f"flavor-{ns}": {"cpu": 8}}, checks=checks))
    k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))


def test_queued_job_gets_a_workload_and_starts_on_its_flavor(apis: tuple[o.Kueue, client.BatchV1Api], namespace: str) -> None:
    k, batch = apis
    ns = namespace
    queue(k, ns, node_labels={"instance-type": "spot"})
    created = batch.create_namespaced_job(ns, o.batch_job(ns, "train", "user-queue", {"cpu": "2"}, parallelism=2))
    name = workload_name_for_owner("train", created.metadata.uid, "Job", "batch")
    assert name.startswith("job-train-") and len(name) == len("job-train-") + 5
    wl = o.wait_for(lambda: k.get_or_none("Workload", name, ns), 15, what="the Job's Workload")
    assert wl["spec"]["podSets"][0]["count"] == 2
    assert wl["spec"]["queueName"] == "user-queue"
    assert wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == created.metadata.uid
    o.wait_for(lambda: batch.read_namespaced_job("train", ns).spec.suspend is False, 15, what="Job unsuspended")
    template = batch.read_namespaced_job("train", ns).spec.template
    assert template.spec.node_selector == {"instance-type": "spot"}


def test_webhook_suspends_queued_jobs_and_leaves_others(apis: tuple[o.Kueue, client.BatchV1Api], namespace: str) -> None:
    k, batch = apis
    ns = namespace
    queued = batch.create_namespaced_job(ns, o.batch_job(ns, "queued", "missing-queue", {"cpu": "1"}, suspend=False))
    assert queued.spec.suspend is True
    assert queued.spec.managed_by is None  # the queue is unknown: nothing to default
    free = batch.create_namespaced_job(ns, o.batch_job(ns, "free", None, {"cpu": "1"}, suspend=False))
    assert free.spec.suspend is False


def test_webhook_defaults_managed_by_for_multikueue_queues(apis: tuple[o.Kueue, client.BatchV1Api], namespace: str) -> None:
    k, batch = apis
    ns = namespace
    check = f"mk-{ns}"
    k.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": check},
              "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "none"}}})
    queue(k, ns, checks=[check])
    job: Any = None

    def created() -> Any:
        nonlocal job
        # The controller learns about the queue from its watch; retry until it has.
        body = o.batch_job(ns, f"mk-{len(k.list('Workload', ns))}", "user-queue", {"cpu": "1"}, suspend=False)
        job = batch.create_namespaced_job(ns, body)
        if job.spec.managed_by != "kueue.x-k8s.io/multikueue":
            batch.delete_namespaced_job(job.metadata.name, ns)
            return None
        return job

    job = o.wait_for(created, 15, interval=0.5, what="managedBy defaulted")
    assert job.spec.suspend is True


def test_webhook_refuses_an_invalid_queue_name(apis: tuple[o.Kueue, client.BatchV1Api], namespace: str) -> None:
    _, batch = apis
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, o.batch_job(namespace, "bad", "Not_A_Queue", {"cpu": "1"}))
    assert err.value.status in (400, 422)
    assert "kueue.x-k8s.io/queue-name" in err.value.body


def test_job_on_prebuilt_workload_starts_and_is_suspended_again_on_eviction(apis: tuple[o.Kueue, client.BatchV1Api], namespace: str) -> None:
    k, batch = apis
    ns = namespace
    queue(k, ns, node_labels={"pool": "a"})
    body = o.batch_job(ns, "bound", None, {"cpu": "1"})
    body["metadata"]["labels"] = {"kueue.x-k8s.io/prebuilt-workload-name": "pre"}
    batch.create_namespaced_job(ns, body)
    wl = o.workload(ns, "pre", "user-queue", {"cpu": "1"})
    wl["spec"]["podSets"][0]["template"] = body["spec"]["template"]
    k.create(wl)
    o.wait_for(lambda: batch.read_namespaced_job("bound", ns).spec.suspend is False, 15, what="bound Job started")
    assert batch.read_namespaced_job("bound", ns).spec.template.spec.node_selector == {"pool": "a"}
    k.patch("Workload", "pre", {"spec": {"active": False}}, ns)
    o.wait_for(lambda: batch.read_namespaced_job("bound", ns).spec.suspend is True, 15, what="Job suspended after eviction")
    o.wait_for(
        lambda: not batch.read_namespaced_job("bound", ns).spec.template.spec.node_selector,
        15,
        what="template restored",
    )
    assert not o.is_true(k.get("Workload", "pre", ns), "QuotaReserved")


def test_a_failed_start_is_retried_without_a_new_event(
    apis: tuple[o.Kueue, client.BatchV1Api], integration_clusters: Clusters, namespace: str
) -> None:
    """Seen in the fault suite: a Job whose start got a 500 (its apiserver's etcd restarting) never started.

    Here a validating webhook that cannot be reached (failurePolicy Fail) makes
    every update of Jobs in the namespace fail with 500; once it is removed,
    the Job starts on the work queue's retry, with no new event on the Job or
    its Workload to trigger it.
    """
    k, batch = apis
    ns = namespace
    admission = client.AdmissionregistrationV1Api(integration_clusters.manager)
    name = f"refuse-job-updates-{ns}"
    admission.create_validating_webhook_configuration(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "refuse.jobs.multikueue.test",
                    "clientConfig": {"url": "https://127.0.0.1:1/refuse"},
                    "rules": [{"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["jobs"]}],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 1,
                }
            ],
        }
    )
    try:
        queue(k, ns)
        batch.create_namespaced_job(ns, o.batch_job(ns, "retried", "user-queue", {"cpu": "1"}))
        core = client.CoreV1Api(integration_clusters.manager)
        o.wait_for(
            lambda: [e for e in core.list_namespaced_event(ns).items if e.reason == "ReconcileFailed" and e.involved_object.name == "retried"],
            30,
            what="the start refused (ReconcileFailed Event)",
        )
        assert batch.read_namespaced_job("retried", ns).spec.suspend is True
    finally:
        admission.delete_validating_webhook_configuration(name)
    o.wait_for(lambda: batch.read_namespaced_job("retried", ns).spec.suspend is False, 60, what="the Job started on a retry")


def test_a_job_held_by_a_finalizer_while_deleted_gives_its_quota_back(
    apis: tuple[o.Kueue, client.BatchV1Api], namespace: str
) -> None:
    """Upstream's FinishOrphanedWorkloads: the Workload of a Job being deleted is finished (OwnerNotFound).

    A finalizer of someone else's keeps the deleted Job (and so its Workload, which the garbage
    collector removes only after the Job) for as long as it likes; the quota must not wait for it.
    """
    k, batch = apis
    ns = namespace
    k.create(o.resource_flavor(f"flavor-{ns}"))
    k.create(o.cluster_queue(f"cq-{ns}", {f"flavor-{ns}": {"cpu": 1}}, scale_cpu=False))
    k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    held = o.batch_job(ns, "held", "user-queue", {"cpu": "1"})
    held["metadata"]["finalizers"] = ["example.com/hold"]
    first = batch.create_namespaced_job(ns, held)
    o.wait_for(lambda: batch.read_namespaced_job("held", ns).spec.suspend is False, 30, what="the held Job running")
    second = batch.create_namespaced_job(ns, o.batch_job(ns, "next", "user-queue", {"cpu": "1"}))
    next_workload = workload_name_for_owner("next", second.metadata.uid, "Job", "batch")
    o.wait_for(lambda: o.condition(k.get_or_none("Workload", next_workload, ns) or {}, "QuotaReserved"), 30,
               what="the second Job's Workload pending")  # fmt: skip
    assert batch.read_namespaced_job("next", ns).spec.suspend is True
    try:
        batch.delete_namespaced_job("held", ns, propagation_policy="Background")
        held_workload = workload_name_for_owner("held", first.metadata.uid, "Job", "batch")
        wl = o.wait_for(lambda: (w := k.get_or_none("Workload", held_workload, ns)) and o.is_true(w, "Finished") and w, 30,
                        what="the deleted Job's Workload finished")  # fmt: skip
        finished = o.condition(wl, "Finished")
        assert finished and (finished["reason"], finished["message"]) == ("OwnerNotFound", "The workload's owner no longer exists")
        assert batch.read_namespaced_job("held", ns).metadata.deletion_timestamp is not None, "still held by its finalizer"
        o.wait_for(lambda: batch.read_namespaced_job("next", ns).spec.suspend is False, 30, what="the next Job admitted on the freed quota")
    finally:
        batch.patch_namespaced_job("held", ns, {"metadata": {"finalizers": None}})
