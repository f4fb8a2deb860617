"""The manager's identity on a worker (``config/worker-access``) can do what dispatch needs, and no more.

The integration clusters are wired by ``multikueue.dev.wiring`` from the YAML
as written: the kubeconfig Secrets on the manager hold a token of the
worker's ``multikueue-manager`` ServiceAccount. These tests ask the worker's
authorizer, with that token, about every verb on every resource the role
names and about what it must not do (SelfSubjectAccessReview, what
``kubectl auth can-i`` asks), then dispatch a Job through a real manager
controller and a worker-role controller that only have that token between
them.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from multikueue.dev import objects as o
from multikueue.dev import wiring
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters
from multikueue.integrations.naming import workload_name_for_owner
from multikueue.runtime.kubeconfig import validate_kubeconfig

pytestmark = pytest.mark.integration

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
#: What the manager uses on a worker (see the comments in config/worker-access/clusterrole.yaml).
GRANTED = {
    # update: not used by our manager; upstream Kueue's manager drops a losing copy's finalizer with it.
    ("kueue.x-k8s.io", "workloads", ""): {"list", "watch", "create", "get", "patch", "update", "delete"},
    # get: not used by our manager; upstream Kueue's manager reads a remote Job by name (e2e/test_upstream_manager.py).
    ("batch", "jobs", ""): {"list", "watch", "create", "get", "delete"},
}
#: The optional role for the adapter catalog's kinds (the dev wiring applies it).
GRANTED_FRAMEWORKS = {
    ("tekton.dev", "pipelineruns", ""): {"list", "watch", "create", "delete", "patch"},  # patch: specSync (cancel)
    ("tekton.dev", "taskruns", ""): {"list", "watch", "create", "delete"},
    ("jobset.x-k8s.io", "jobsets", ""): {"list", "watch", "create", "delete"},
    ("ray.io", "rayjobs", ""): {"list", "watch", "create", "delete"},
    ("trainer.kubeflow.org", "trainjobs", ""): {"list", "watch", "create", "delete"},
}
#: Resources the token must not touch at all (a sample of what would matter if it could).
UNGRANTED = [
    ("kueue.x-k8s.io", "workloads", "status"),  # would let the manager fake an admission on the worker
    ("batch", "jobs", "status"),
    ("kueue.x-k8s.io", "clusterqueues", ""),
    ("kueue.x-k8s.io", "localqueues", ""),
    ("", "secrets", ""),
    ("", "configmaps", ""),
    ("", "namespaces", ""),
    ("", "pods", ""),
    ("", "events", ""),
    ("", "serviceaccounts", "token"),
    ("rbac.authorization.k8s.io", "clusterrolebindings", ""),
    ("apiextensions.k8s.io", "customresourcedefinitions", ""),
    ("tekton.dev", "pipelineruns", "status"),
]


def _worker_token_api(clusters: Clusters, worker: str) -> client.ApiClient:
    """An API client for ``worker`` from the manager's kubeconfig Secret, as the controller builds it."""
    mkc = client.CustomObjectsApi(clusters.manager).get_cluster_custom_object(GROUP, VERSION, "multikueueclusters", worker)
    source = mkc["spec"]["clusterSource"]["kubeConfig"]
    secret = client.CoreV1Api(clusters.manager).read_namespaced_secret(source["location"], wiring.CONTROLLER_NAMESPACE)
    valid = validate_kubeconfig(base64.b64decode(secret.data["kubeconfig"]).decode())
    return config.new_client_from_config_dict(valid.document)


def _allowed(api: client.ApiClient, group: str, resource: str, subresource: str, verb: str, namespace: str) -> bool:
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                group=group, resource=resource, subresource=subresource or None, verb=verb, namespace=namespace or None
            )
        )
    )
    return bool(client.AuthorizationV1Api(api).create_self_subject_access_review(review).status.allowed)


def _rules_of(path: Path) -> dict[tuple[str, str, str], set[str]]:
    """The role's rules as written, by (group, resource, subresource)."""
    [role] = [d for d in wiring.load_documents(path) if d["kind"] == "ClusterRole"]
    table: dict[tuple[str, str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for name in rule["resources"]:
                resource, _, subresource = name.partition("/")
                table.setdefault((group, resource, subresource), set()).update(rule["verbs"])
    return table


def test_the_roles_as_written_grant_exactly_the_listed_verbs() -> None:
    access = wiring.source_checkout() / "config" / "worker-access"
    assert _rules_of(access) == GRANTED
    assert _rules_of(access / "frameworks") == GRANTED_FRAMEWORKS


@pytest.mark.parametrize("worker", ["worker1", "worker2"])
def test_worker_token_can_do_what_dispatch_needs_and_nothing_more(integration_clusters: Clusters, namespace: str, worker: str) -> None:
    api = _worker_token_api(integration_clusters, worker)
    wrong: list[str] = []
    for (group, resource, subresource), granted in {**GRANTED, **GRANTED_FRAMEWORKS}.items():
        for verb in VERBS:
            for ns in (namespace, ""):  # in a namespace, and cluster-wide (the informers list all namespaces)
                if _allowed(api, group, resource, subresource, verb, ns) != (verb in granted):
                    wrong.append(f"{verb} {group}/{resource} in {ns or 'all namespaces'}: expected {'allowed' if verb in granted else 'denied'}")
    for group, resource, subresource in UNGRANTED:
        for verb in VERBS:
            if _allowed(api, group, resource, subresource, verb, namespace):
                wrong.append(f"{verb} {group}/{resource}/{subresource}: allowed, expected denied")
    assert wrong == []


@pytest.fixture
def worker_controller(integration_clusters: Clusters, tmp_path: Path) -> Iterator[ControllerProcess]:
    """Our controller in the worker role on worker1 (its own admin credentials, as on a real worker)."""
    ctl = ControllerProcess("worker1", integration_clusters.kubeconfigs[1], "worker", tmp_path / "worker1-controller.log").start()
    try:
        yield ctl
    finally:
        ctl.stop()


def _ago(seconds: int) -> str:
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_job_is_dispatched_end_to_end_with_only_this_role(
    integration_clusters: Clusters, integration_controller: ControllerProcess, worker_controller: ControllerProcess, namespace: str
) -> None:
    ns = namespace
    manager, worker = o.Kueue(integration_clusters.manager), o.Kueue(integration_clusters.worker(1))
    check, mkconfig = f"mk-{ns}", f"mkc-{ns}"
    manager.create({"apiVersion": f"{GROUP}/{VERSION}", "kind": "MultiKueueConfig", "metadata": {"name": mkconfig}, "spec": {"clusters": ["worker1"]}})
    manager.create({"apiVersion": f"{GROUP}/{VERSION}", "kind": "AdmissionCheck", "metadata": {"name": check},
                    "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {"apiGroup": GROUP, "kind": "MultiKueueConfig", "name": mkconfig}}})
    for k in (manager, worker):
        k.create(o.resource_flavor(f"default-{ns}"))
        k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 8}}, checks=[check] if k is manager else None))
        k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    o.wait_for(lambda: o.is_true(manager.get("AdmissionCheck", check), "Active"), 60, what="MultiKueue check active")

    batch, worker_batch = client.BatchV1Api(integration_clusters.manager), client.BatchV1Api(integration_clusters.worker(1))
    body = o.batch_job(ns, "hello", "user-queue", {"cpu": "1"}, managed_by="kueue.x-k8s.io/multikueue")
    created = batch.create_namespaced_job(ns, body)
    wl_name = workload_name_for_owner("hello", created.metadata.uid, "Job", "batch")

    # The manager copies the Workload (create), the worker admits its copy, the manager creates
    # the Job there (create) and the worker's controller starts it.
    def started_on_worker() -> bool:
        jobs = worker_batch.list_namespaced_job(ns).items
        return bool(jobs) and jobs[0].spec.suspend is False

    o.wait_for(started_on_worker, 60, what="the Job started on worker1")
    # kube's Job controller does not run on these clusters: play it, the Job succeeds.
    started = _ago(5)
    worker_batch.patch_namespaced_job_status("hello", ns, {"status": {"startTime": started, "active": 1}})
    condition: dict[str, Any] = {"status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastTransitionTime": _ago(0)}
    final = {
        "startTime": started,
        "completionTime": _ago(0),
        "active": None,
        "succeeded": 1,
        "uncountedTerminatedPods": {},
        "conditions": [{"type": "SuccessCriteriaMet", **condition}, {"type": "Complete", **condition}],
    }
    worker_batch.patch_namespaced_job_status("hello", ns, {"status": final})

    # The status comes back through the watch (list, watch), the manager's Workload finishes,
    # and the worker's objects are removed (get, patch of the finalizer, delete).
    def finished() -> dict[str, Any] | None:
        wl = manager.get("Workload", wl_name, ns)
        return wl if o.is_true(wl, "Finished") else None

    wl = o.wait_for(finished, 60, what="the manager's Workload Finished")
    assert wl["status"]["clusterName"] == "worker1"
    job = batch.read_namespaced_job("hello", ns)
    assert job.status.succeeded == 1 and any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])
    o.wait_for(lambda: worker.list("Workload", ns) == [], 60, what="worker1's Workload copy deleted")
    o.wait_for(lambda: worker_batch.list_namespaced_job(ns).items == [], 60, what="worker1's Job deleted")
    # Nothing was refused on the worker along the way.
    refused = [line for line in integration_controller.logs().splitlines() if ns in line and ("403" in line or "orbidden" in line)]
    assert refused == []
