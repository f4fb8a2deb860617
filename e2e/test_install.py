"""Issue 11's acceptance on a fresh cluster: install with kubectl, run from the image, opt namespaces in.

``kubectl apply --server-side -k config/default`` on a kube-apiserver with
nothing installed; two replicas of the controller from the image, with the
ServiceAccount, RBAC, flags and webhook Service the manifests define (see
:mod:`multikueue.dev.containers` for what stands in for the kubelet); the
Configuration opts namespaces in with ``managedJobsNamespaceSelector``.
Opt-in (marker ``image``): ``hack/test.sh`` runs it in its image pass.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest
import yaml
from kubernetes import client

from multikueue.dev import containers
from multikueue.dev import objects as o
from multikueue.dev.controllers import lease_holder
from multikueue.dev.paths import source_checkout
from multikueue.dev.pytest_plugin import Clusters
from multikueue.dev.scenarios import timed_job

pytestmark = [pytest.mark.image, pytest.mark.local_clusters]

NS = containers.CONTROLLER_NAMESPACE
OPT_IN = {"kueue.x-k8s.io/managed": "true"}


@pytest.fixture(scope="module")
def installed(bare_cluster: Clusters, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[list[containers.ControllerContainer]]:
    """config/default applied as a user would, namespaces opted in by label, two replicas from the image running."""
    image = request.config.getoption("--image")
    containers.build_image(image)
    kubeconfig = bare_cluster.kubeconfigs[0]
    api = bare_cluster.manager
    objects = containers.install(kubeconfig, "default")
    # Every object of the base is there (kubectl fails on any that is missing).
    containers.kubectl(kubeconfig, "get", "-k", str(source_checkout() / "config" / "default"))
    containers.scale_to_zero(api)
    config_map = next(d for d in objects if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "multikueue-manager-config")
    configuration = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    configuration["managedJobsNamespaceSelector"] = {"matchLabels": OPT_IN}
    client.CoreV1Api(api).patch_namespaced_config_map(
        "multikueue-manager-config", NS, {"data": {"controller_manager_config.yaml": yaml.safe_dump(configuration)}}
    )
    directory = tmp_path_factory.mktemp("install")
    credentials = containers.service_account_files(api, directory / "serviceaccount")
    args = containers.deployment_args(objects)
    port = int(urlparse(bare_cluster.server(0)).port or 443)
    replicas = [
        containers.ControllerContainer(
            name=f"install-{i}", role="manager", kubeconfig=kubeconfig, log=directory / f"install-{i}.log", args=args,
            server_port=port, credentials=credentials, image=image, webhooks=True, webhook_port=containers.free_port(),
        )
        for i in range(2)
    ]
    containers.route_service(api, NS, containers.WEBHOOK_SERVICE, containers.bridge_address(), [r.webhook_port for r in replicas])
    started: list[containers.ControllerContainer] = []
    try:
        for replica in replicas:
            started.append(replica.start())
        yield replicas
    finally:
        for replica in started:
            replica.stop()


def _namespace(api: client.ApiClient, name: str, labels: dict[str, str] | None = None) -> None:
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))


def _queues(api: client.ApiClient, namespaces: list[str]) -> None:
    kueue = o.Kueue(api)
    kueue.create(o.resource_flavor("default"))
    kueue.create(o.cluster_queue("cq", {"default": {"cpu": 8}}))
    for ns in namespaces:
        kueue.create(o.local_queue(ns, "user-queue", "cq"))


def unsuspended(namespace: str, name: str) -> dict[str, object]:
    """A queued Job as users write it: the queue-name label, not suspended (the webhook suspends it)."""
    body = timed_job(namespace, name, "1")
    body["spec"]["suspend"] = False
    return body


def test_installed_controller_admits_jobs_of_opted_in_namespaces_only(
    bare_cluster: Clusters, installed: list[containers.ControllerContainer]
) -> None:
    api = bare_cluster.manager
    holder = lease_holder(api, NS, "multikueue-manager-leader")
    assert holder in {r.identity() for r in installed}, f"kubectl get lease -n {NS} shows {holder!r}"
    assert all(r.ready() for r in installed), "both replicas ready (/readyz), the standby too"
    _namespace(api, "team-in", OPT_IN)
    _namespace(api, "team-out")
    _queues(api, ["team-in", "team-out"])
    batch = client.BatchV1Api(api)

    queued = batch.create_namespaced_job("team-in", unsuspended("team-in", "in"))
    assert queued.spec.suspend, "the webhook suspends a queued Job of an opted-in namespace"
    o.wait_for(lambda: batch.read_namespaced_job("in", "team-in").spec.suspend is False, 60, what="the Job admitted and started")
    [workload] = o.Kueue(api).list("Workload", "team-in")
    assert o.is_true(workload, "Admitted")

    ignored = batch.create_namespaced_job("team-out", unsuspended("team-out", "out"))
    assert not ignored.spec.suspend and not ignored.spec.managed_by, "a namespace that has not opted in is not intercepted"
    time.sleep(3)  # the controller saw the Job's event well within this (the queued one was admitted in less)
    assert o.Kueue(api).list("Workload", "team-out") == [], "no Workload for a Job outside the opt-in"
    assert batch.read_namespaced_job("out", "team-out").spec.suspend is False, "nor suspended by the controller"


def test_v1beta1_is_served_through_the_webhook_service(bare_cluster: Clusters, installed: list[containers.ControllerContainer]) -> None:
    """The conversion webhook reached as config/default installs it: through the Service, with the shared CA."""
    custom = client.CustomObjectsApi(bare_cluster.manager)
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "v1beta1-cq"},
        "spec": {"cohort": "team", "namespaceSelector": {}, "resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": 1}]}]}
        ]},
    }  # fmt: skip

    def created() -> bool:
        try:
            custom.create_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", body)
        except client.ApiException as exc:
            if exc.status == 409:
                return True
            if exc.status == 500 and "conversion webhook" in str(exc.body):
                return False  # the replicas register the conversion at start; retried until they have
            raise
        return True

    o.wait_for(created, 60, what="a v1beta1 ClusterQueue created through the conversion webhook")
    stored = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", "v1beta1-cq")
    assert stored["spec"]["cohortName"] == "team" and "cohort" not in stored["spec"]
    again = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", "v1beta1-cq")
    assert again["spec"]["cohort"] == "team"


def test_with_the_controller_stopped_only_opted_in_namespaces_wait_for_it(
    bare_cluster: Clusters, installed: list[containers.ControllerContainer]
) -> None:
    api = bare_cluster.manager
    for replica in installed:
        replica.stop()
    try:
        batch = client.BatchV1Api(api)
        batch.create_namespaced_job("kube-system", unsuspended("kube-system", "system-job"))
        batch.create_namespaced_job("team-out", unsuspended("team-out", "while-down"))
        with pytest.raises(client.ApiException) as refused:
            batch.create_namespaced_job("team-in", unsuspended("team-in", "while-down"))
        assert refused.value.status == 500 and "multikueue.x-k8s.io" in str(refused.value.body), (
            "an opted-in namespace's queued Jobs are refused while the webhook is down (failurePolicy Fail)"
        )
    finally:
        for replica in installed:
            replica.start()
