"""A worker running upstream Kueue: the manager dispatches to it as to a worker of ours.

Many MultiKueue users run upstream Kueue on their workers. On kind clusters
brought up with ``kind-configs/up.sh --upstream-worker worker2``, worker2 runs
upstream Kueue v0.19.2 (built from its source archive, installed from its
own ``config/default``) and worker1 runs our controller. These tests are
deselected on any other clusters; ``hack/test.sh`` brings up that set-up in
a pass of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from multikueue.dev import kind, wiring
from multikueue.dev import objects as o
from multikueue.dev.pytest_plugin import Clusters
from multikueue.dev.scenarios import WIDGET, WIDGET_CRD, WIDGET_ENTRY, WIDGET_RBAC, job_complete, multikueue_queues, timed_job, widget
from multikueue.integrations.naming import workload_name_for_owner

pytestmark = [pytest.mark.e2e, pytest.mark.upstream_worker]

CONFIG_MAP = "multikueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"


def test_upstream_kueue_is_what_runs_on_worker2(e2e_clusters: Clusters) -> None:
    apps = client.AppsV1Api(e2e_clusters.worker(2))
    deployments = {d.metadata.name: d for d in apps.list_namespaced_deployment("kueue-system").items}
    assert "multikueue-controller-manager" not in deployments
    upstream = deployments["kueue-controller-manager"]
    assert upstream.spec.template.spec.containers[0].image.startswith("multikueue/upstream-kueue:")
    assert (upstream.status.ready_replicas or 0) >= 1


def test_job_runs_on_the_upstream_worker_and_its_status_comes_back(e2e_clusters: Clusters, namespace: str, tmp_path: Path) -> None:
    """With worker1's controller stopped, only upstream Kueue on worker2 admits the copy: the Job must run there."""
    ns = namespace
    multikueue_queues(e2e_clusters.manager, [e2e_clusters.worker(1), e2e_clusters.worker(2)], ns)
    ours = kind.KindController(name="worker1", role="worker", kubeconfig=kind.kubeconfig_path("worker1"), log=tmp_path / "worker1.log")
    ours.stop()
    try:
        batch = client.BatchV1Api(e2e_clusters.manager)
        created = batch.create_namespaced_job(ns, timed_job(ns, "on-upstream", "1", run_for="3s"))
        wl_name = workload_name_for_owner("on-upstream", created.metadata.uid, "Job", "batch")
        manager, upstream = o.Kueue(e2e_clusters.manager), o.Kueue(e2e_clusters.worker(2))

        def admitted_by_upstream() -> dict[str, Any] | None:
            copy = upstream.get_or_none("Workload", wl_name, ns)
            return copy if copy and o.is_true(copy, "QuotaReserved") else None

        copy = o.wait_for(admitted_by_upstream, 90, what="the Workload copy admitted by upstream Kueue on worker2")
        assert copy["status"]["admission"]["clusterQueue"] == f"cq-{ns}"
        # The copy on worker1 (nobody admits it there) is withdrawn once worker2 has won.
        o.wait_for(lambda: o.Kueue(e2e_clusters.worker(1)).get_or_none("Workload", wl_name, ns) is None, 60,
                   what="the unadmitted copy on worker1 removed")  # fmt: skip
        remote = client.BatchV1Api(e2e_clusters.worker(2))
        job = o.wait_for(lambda: next(iter(remote.list_namespaced_job(ns).items), None), 60, what="the Job created on worker2")
        assert job.metadata.labels.get("kueue.x-k8s.io/prebuilt-workload-name") == wl_name
        assert not job.spec.managed_by, "the copy is left to the worker's own Job controller"

        o.wait_for(lambda: job_complete(batch, ns, "on-upstream"), 120, what="the manager's Job Complete")
        wl = o.wait_for(lambda: (w := manager.get("Workload", wl_name, ns)) and o.is_true(w, "Finished") and w, 60,
                        what="the manager's Workload Finished")  # fmt: skip
        assert wl["status"]["clusterName"] == "worker2"
        assert batch.read_namespaced_job("on-upstream", ns).status.succeeded == 1
        # Nothing is left on the upstream worker.
        o.wait_for(lambda: upstream.list("Workload", ns) == [], 60, what="worker2's Workload copy removed")
        o.wait_for(lambda: remote.list_namespaced_job(ns).items == [], 60, what="worker2's Job removed")
    finally:
        ours.start()


def _manager_configuration(api: client.ApiClient) -> dict[str, Any]:
    config_map = client.CoreV1Api(api).read_namespaced_config_map(CONFIG_MAP, wiring.CONTROLLER_NAMESPACE)
    return yaml.safe_load((config_map.data or {}).get(CONFIG_KEY) or "") or {}


def _write_manager_configuration(api: client.ApiClient, document: dict[str, Any]) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "namespace": wiring.CONTROLLER_NAMESPACE},
            "data": {CONFIG_KEY: yaml.safe_dump(document)}}  # fmt: skip
    wiring.apply(api, [body])


def test_a_generic_kind_runs_on_the_upstream_worker(e2e_clusters: Clusters, namespace: str, tmp_path: Path) -> None:
    """A kind listed only in our manager's ConfigMap: upstream Kueue on worker2 admits its Workload copy.

    Upstream knows nothing of the Widget kind; what it sees is a Workload
    (our manager's copy, with the pod sets the entry computes), which its
    scheduler admits like any other. The Widget's copy is created beside it
    once worker2 has won; the test plays the Widget's own controller there.
    """
    ns = namespace
    manager_api, worker2 = e2e_clusters.manager, e2e_clusters.worker(2)
    for api in (manager_api, worker2):
        wiring.install_crds(api, [WIDGET_CRD])
    wiring.apply(manager_api, WIDGET_RBAC)
    grant = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "multikueue-manager-widgets"},
        "rules": [{"apiGroups": [WIDGET[0]], "resources": [WIDGET[2]], "verbs": ["list", "watch", "create", "delete"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "multikueue-manager-widgets"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": grant["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": "multikueue-manager", "namespace": wiring.CONTROLLER_NAMESPACE}],
    }
    wiring.apply(worker2, [grant, binding])
    found = _manager_configuration(manager_api)
    configured = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", **found}
    configured.setdefault("multiKueue", {})["externalFrameworks"] = [WIDGET_ENTRY]
    _write_manager_configuration(manager_api, configured)
    # Queues are CPU-scaled on kind (dev/objects.py); the Widget's requests come from its entry and are not.
    multikueue_queues(manager_api, [e2e_clusters.worker(1), worker2], ns, worker_cpu=(40, 40))
    ours = kind.KindController(name="worker1", role="worker", kubeconfig=kind.kubeconfig_path("worker1"), log=tmp_path / "worker1.log")
    ours.stop()
    try:
        custom = client.CustomObjectsApi(manager_api)
        custom.create_namespaced_custom_object(*WIDGET[:2], ns, WIDGET[2], widget(ns, "on-upstream", size=2))

        def workload() -> dict[str, Any] | None:
            items = o.Kueue(manager_api).list("Workload", ns)
            return next((w for w in items if any(r.get("kind") == "Widget" for r in w["metadata"].get("ownerReferences") or ())), None)

        wl = o.wait_for(workload, 60, what="the manager's Workload for the Widget")
        name = wl["metadata"]["name"]
        upstream = o.Kueue(worker2)
        copy = o.wait_for(lambda: (c := upstream.get_or_none("Workload", name, ns)) and o.is_true(c, "QuotaReserved") and c, 90,
                          what="the Workload copy admitted by upstream Kueue on worker2")  # fmt: skip
        assert copy["status"]["admission"]["podSetAssignments"][0]["count"] == 2
        remote = client.CustomObjectsApi(worker2)
        widget_copy = o.wait_for(lambda: _get(remote, ns, "on-upstream"), 60, what="the Widget created on worker2")
        assert widget_copy["spec"]["control"] == {"color": "blue"}, "managedBy removed at the entry's path"

        report = {"report": {"conditions": [{"type": "Done", "status": "True", "reason": "Built"}]}}
        remote.patch_namespaced_custom_object_status(*WIDGET[:2], ns, WIDGET[2], "on-upstream", {"status": report})
        o.wait_for(lambda: (_get(custom, ns, "on-upstream") or {}).get("status") == report, 60, what="the Widget's status synced to the manager")
        finished = o.wait_for(lambda: o.condition(o.Kueue(manager_api).get("Workload", name, ns), "Finished"), 60, what="the Workload Finished")
        assert finished["reason"] == "Succeeded"
        assert o.Kueue(manager_api).get("Workload", name, ns)["status"]["clusterName"] == "worker2"
        o.wait_for(lambda: upstream.list("Workload", ns) == [] and _get(remote, ns, "on-upstream") is None, 60,
                   what="worker2's Workload and Widget copies removed")  # fmt: skip
    finally:
        ours.start()
        _write_manager_configuration(manager_api, found)


def _get(api: client.CustomObjectsApi, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return api.get_namespaced_custom_object(*WIDGET[:2], ns, WIDGET[2], name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
