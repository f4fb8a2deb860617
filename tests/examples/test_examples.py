"""The manifests of ``examples/`` applied to the local clusters, and a Job and a PipelineRun through them.

Three full local clusters with our controller on each (the e2e fixtures).
Each cluster-scoped name of the examples (and the worker Secrets' names) is
suffixed with the test's namespace, and ``default`` becomes that namespace,
so the examples share the clusters with the other tests; every reference
between the files goes through the same renaming, so a broken reference in
an example breaks the test. The worker Secret template is filled the way its
comment says, from the worker kubeconfig the clusters were wired with.
"""

from __future__ import annotations

import base64
import copy
import string
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev import wiring
from multikueue.dev.paths import source_checkout
from multikueue.dev.pytest_plugin import Clusters, reference_dir
from multikueue.dev.scenarios import job_complete

pytestmark = pytest.mark.e2e

EXAMPLES = source_checkout() / "examples"
WORKERS = ("worker1", "worker2")
#: Names the examples give to cluster-scoped objects and to the worker Secrets (shared by every test here).
SHARED_NAMES = ("default-flavor", "cluster-queue", "multikueue", "multikueue-config", *WORKERS, *(f"{w}-secret" for w in WORKERS))
CONFIG_MAP, CONFIG_KEY = "multikueue-manager-config", "controller_manager_config.yaml"
PR = ("tekton.dev", "v1", "pipelineruns")


def documents(relative: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / relative).read_text()) if d]


def renamed(value: Any, names: dict[str, str], namespace: str) -> Any:
    """``value`` with every string equal to a key of ``names`` replaced, and namespace ``default`` made ``namespace``."""
    if isinstance(value, dict):
        out = {k: renamed(v, names, namespace) for k, v in value.items()}
        meta = out.get("metadata")
        if isinstance(meta, dict) and meta.get("namespace") == "default":
            meta["namespace"] = namespace
        return out
    if isinstance(value, list):
        return [renamed(v, names, namespace) for v in value]
    if isinstance(value, str):
        return names.get(value, value)
    return value


@dataclass(frozen=True)
class Applied:
    namespace: str
    names: dict[str, str]


def worker_secret(manager: client.ApiClient, worker: str, names: dict[str, str]) -> dict[str, Any]:
    """The Secret template filled from the kubeconfig of ``<worker>-secret`` (the one the clusters were wired with)."""
    data = client.CoreV1Api(manager).read_namespaced_secret(f"{worker}-secret", wiring.CONTROLLER_NAMESPACE).data["kubeconfig"]
    kubeconfig = yaml.safe_load(base64.b64decode(data))
    cluster, user = kubeconfig["clusters"][0]["cluster"], kubeconfig["users"][0]["user"]
    # safe_substitute: like envsubst, leaves the comments' `$(kubectl ...)` alone.
    text = string.Template((EXAMPLES / "manager" / "worker-secret.yaml").read_text()).safe_substitute(
        WORKER_NAME=worker,
        WORKER_SERVER=cluster["server"],
        WORKER_CA_DATA=cluster["certificate-authority-data"],
        WORKER_TOKEN=user["token"],
    )
    assert "${WORKER_" not in text, "every variable of the template is one of the four its comment exports"
    [secret] = [d for d in yaml.safe_load_all(text) if d]
    assert yaml.safe_load(secret["stringData"]["kubeconfig"])["current-context"] == worker
    return renamed(secret, names, "unused")  # type: ignore[no-any-return]


@pytest.fixture
def applied(e2e_clusters: Clusters, e2e_controllers: list[Any], namespace: str) -> Iterator[Applied]:
    names = {name: f"{name}-{namespace}" for name in SHARED_NAMES}
    manager = e2e_clusters.manager
    for index in range(1, len(e2e_clusters.kubeconfigs)):
        wiring.apply(e2e_clusters.worker(index), renamed(documents("worker/queues.yaml"), names, namespace))
    wiring.apply(manager, [worker_secret(manager, w, names) for w in WORKERS])
    wiring.apply(manager, renamed(documents("manager/queues.yaml") + documents("manager/multikueue.yaml"), names, namespace))
    kueue = o.Kueue(manager)
    try:
        for worker in WORKERS:
            o.wait_for(lambda w=worker: o.is_true(kueue.get("MultiKueueCluster", names[w]), "Active"), 60, what=f"{names[worker]} Active")
        o.wait_for(lambda: o.is_true(kueue.get("AdmissionCheck", names["multikueue"]), "Active"), 60, what="the check Active")
        # The Job webhook routes a Job by the controller's view of its queue: wait until it saw it.
        o.wait_for(lambda: o.is_true(kueue.get("LocalQueue", "user-queue", namespace), "Active"), 60, what="LocalQueue Active")
        yield Applied(namespace, names)
    finally:
        # The extra worker connections would otherwise stay open for the rest of the session.
        for worker in WORKERS:
            kueue.delete("MultiKueueCluster", names[worker])
        for worker in WORKERS:
            client.CoreV1Api(manager).delete_namespaced_secret(names[f"{worker}-secret"], wiring.CONTROLLER_NAMESPACE)


def workload_owned_by(api: client.ApiClient, ns: str, kind: str, name: str) -> dict[str, Any] | None:
    for wl in o.Kueue(api).list("Workload", ns):
        if any(r["kind"] == kind and r["name"] == name for r in wl["metadata"].get("ownerReferences") or []):
            return wl
    return None


@pytest.mark.parametrize("example", ["jobs/job.yaml", "kind/sample-job.yaml"])
def test_job_example_runs_on_a_worker_through_the_example_queues(
    e2e_clusters: Clusters, applied: Applied, request: pytest.FixtureRequest, example: str
) -> None:
    [job] = renamed(documents(example), applied.names, applied.namespace)
    if request.config.getoption("--clusters") == "kind":
        job["spec"]["template"]["spec"]["containers"][0]["image"] = o.JOB_IMAGE  # nothing is pulled on kind
    batch = client.BatchV1Api(e2e_clusters.manager)
    name = batch.create_namespaced_job(applied.namespace, job).metadata.name
    wl = o.wait_for(lambda: workload_owned_by(e2e_clusters.manager, applied.namespace, "Job", name), 30, what="the Job's Workload")
    kueue = o.Kueue(e2e_clusters.manager)
    cluster = o.wait_for(
        lambda: (kueue.get("Workload", wl["metadata"]["name"], applied.namespace).get("status") or {}).get("clusterName"),
        60,
        what="dispatched",
    )
    assert cluster in {applied.names[w] for w in WORKERS}, "placed through the example's MultiKueueClusters"
    o.wait_for(lambda: job_complete(batch, applied.namespace, name), 120, what="the manager's Job Complete")
    assert batch.read_namespaced_job(name, applied.namespace).status.succeeded == job["spec"]["completions"]
    final = kueue.get("Workload", wl["metadata"]["name"], applied.namespace)
    assert final["status"]["admission"]["clusterQueue"] == applied.names["cluster-queue"]


@pytest.fixture
def pipelinerun_frameworks(e2e_clusters: Clusters, e2e_controllers: list[Any]) -> Iterator[None]:
    """Tekton's CRDs everywhere, and the example's entry merged into each cluster's ConfigMap (restored after)."""
    tekton = [d for d in wiring.load_documents(reference_dir() / "tekton") if d.get("kind") == "CustomResourceDefinition"]
    [example] = documents("manager/external-frameworks.yaml")
    entries = yaml.safe_load(example["data"][CONFIG_KEY])["multiKueue"]["externalFrameworks"]
    saved: list[tuple[client.ApiClient, dict[str, str] | None]] = []
    for api in e2e_clusters.all:
        wiring.install_crds(api, tekton)
        core = client.CoreV1Api(api)
        try:
            data: dict[str, str] | None = dict(core.read_namespaced_config_map(CONFIG_MAP, wiring.CONTROLLER_NAMESPACE).data or {})
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            data = None  # the local workers' controllers run on defaults
        saved.append((api, data))
        merged = copy.deepcopy(yaml.safe_load((data or {}).get(CONFIG_KEY) or "") or {})
        merged.setdefault("apiVersion", "config.kueue.x-k8s.io/v1beta2")
        merged.setdefault("kind", "Configuration")
        merged.setdefault("multiKueue", {})["externalFrameworks"] = entries
        wiring.apply(api, [{**example, "data": {CONFIG_KEY: yaml.safe_dump(merged)}}])
    # The entry's `webhook: {}`: the example PipelineRun has no spec.managedBy, the manager's webhook sets it.
    o.wait_for(lambda: PR_WEBHOOK in _mutating_hooks(e2e_clusters.manager), 30, what="the PipelineRun webhook registered")
    try:
        yield
    finally:
        for api, data in saved:
            if data is None:
                client.CoreV1Api(api).delete_namespaced_config_map(CONFIG_MAP, wiring.CONTROLLER_NAMESPACE)
            else:
                client.CoreV1Api(api).patch_namespaced_config_map(CONFIG_MAP, wiring.CONTROLLER_NAMESPACE, {"data": data})


PR_WEBHOOK = "external.pipelineruns.v1.tekton.dev.multikueue.x-k8s.io"


def _mutating_hooks(api: client.ApiClient) -> list[str]:
    admission = client.AdmissionregistrationV1Api(api)
    return [hook.name for configuration in admission.list_mutating_webhook_configuration().items for hook in configuration.webhooks or []]


def test_pipelinerun_example_is_admitted_and_copied_to_a_worker(
    e2e_clusters: Clusters, pipelinerun_frameworks: None, applied: Applied
) -> None:
    [run] = renamed(documents("jobs/pipelinerun.yaml"), applied.names, applied.namespace)
    objects = client.CustomObjectsApi(e2e_clusters.manager)
    assert "managedBy" not in run["spec"]
    created = objects.create_namespaced_custom_object(*PR[:2], applied.namespace, PR[2], run)
    assert created["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"  # set by the manager's webhook
    name = created["metadata"]["name"]
    try:
        wl = o.wait_for(
            lambda: workload_owned_by(e2e_clusters.manager, applied.namespace, "PipelineRun", name), 60, what="its Workload"
        )
        kueue = o.Kueue(e2e_clusters.manager)
        cluster = o.wait_for(
            lambda: (kueue.get("Workload", wl["metadata"]["name"], applied.namespace).get("status") or {}).get("clusterName"),
            60,
            what="dispatched",
        )
        index = 1 + [applied.names[w] for w in WORKERS].index(cluster)
        remote = client.CustomObjectsApi(e2e_clusters.worker(index))
        copy_ = o.wait_for(
            lambda: _get(remote, applied.namespace, name), 60, what=f"the PipelineRun copied to {WORKERS[index - 1]}"
        )
        assert "managedBy" not in copy_["spec"] and copy_["spec"]["pipelineSpec"] == run["spec"]["pipelineSpec"]
    finally:
        objects.delete_namespaced_custom_object(*PR[:2], applied.namespace, PR[2], name)


def _get(api: client.CustomObjectsApi, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return api.get_namespaced_custom_object(*PR[:2], ns, PR[2], name)  # type: ignore[no-any-return]
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
