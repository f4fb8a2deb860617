"""External frameworks end to end: PipelineRuns and a test-defined Widget dispatched through ConfigMap entries.

The Tekton CRDs are upstream's (``../shared/reference/tekton``); no Tekton
controller runs here (it cannot be built from the registries this machine
reaches in the time a test has), so the test plays the worker's Tekton: it
writes the status a PipelineRun reaches on the worker copy. Everything else is
our controllers on three real local clusters. The ConfigMap entries are
edited while the controllers run, so every test also shows that an edit takes
effect without a restart.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from multikueue.dev import objects as o
from multikueue.dev import wiring
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters, reference_dir
from multikueue.dev.scenarios import WIDGET, WIDGET_CRD, WIDGET_ENTRY, WIDGET_RBAC, widget
from multikueue.dev.paths import source_checkout

pytestmark = pytest.mark.e2e

MANAGED_BY = "kueue.x-k8s.io/multikueue"
CONFIG_MAP = "multikueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
PR = ("tekton.dev", "v1", "pipelineruns")

def catalog_entry(name: str) -> dict[str, Any]:
    return yaml.safe_load((source_checkout() / "adapters" / name).read_text())


#: Each cluster's Configuration as the session found it (without external frameworks), by kubeconfig.
_FOUND: dict[str, dict[str, Any]] = {}


def _found_configuration(path: str, api: client.ApiClient) -> dict[str, Any]:
    """The Configuration the cluster's controller was started with: kept, only the frameworks change.

    (On kind it is the installed one; origin and timings are read at start, not live.)
    """
    if path not in _FOUND:
        try:
            config_map = client.CoreV1Api(api).read_namespaced_config_map(CONFIG_MAP, wiring.CONTROLLER_NAMESPACE)
            document = yaml.safe_load((config_map.data or {}).get(CONFIG_KEY) or "") or {}
        except ApiException as exc:
            if exc.status != 404:
                raise
            document = {}
        document = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", **document}
        (document.get("multiKueue") or {}).pop("externalFrameworks", None)
        _FOUND[path] = document
    return copy.deepcopy(_FOUND[path])


def set_frameworks(clusters: Clusters, entries: list[dict[str, Any]] | None, *, text: str | None = None) -> None:
    """Write the external frameworks into every cluster's ConfigMap (the controllers pick it up live)."""
    for path, api in zip(clusters.kubeconfigs, clusters.all):
        if text is None:
            base = _found_configuration(str(path), api)
            base.setdefault("multiKueue", {})["externalFrameworks"] = entries or []
            document = yaml.safe_dump(base)
        else:
            document = text
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "namespace": wiring.CONTROLLER_NAMESPACE}, "data": {CONFIG_KEY: document}}
        wiring.apply(api, [body])


@pytest.fixture(scope="module")
def crds(e2e_clusters: Clusters) -> None:
    tekton = [d for d in wiring.load_documents(reference_dir() / "tekton") if d.get("kind") == "CustomResourceDefinition"]
    for api in e2e_clusters.all:
        wiring.install_crds(api, [*tekton, WIDGET_CRD])
        wiring.apply(api, WIDGET_RBAC)  # needed where the controllers run with their manifests' RBAC (kind)
        try:  # a grant left by an earlier run on long-lived clusters (kind): the test starts without it
            client.RbacAuthorizationV1Api(api).delete_cluster_role_binding("multikueue-manager-widgets")
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def frameworks(e2e_clusters: Clusters, e2e_controllers: list[ControllerProcess], crds: None) -> Iterator[None]:
    """Leave the clusters' ConfigMaps as the other tests expect them."""
    yield
    set_frameworks(e2e_clusters, [])


def setup_queues(clusters: Clusters, ns: str, resources: dict[str, int]) -> None:
    manager = o.Kueue(clusters.manager)
    check, config = f"mk-{ns}", f"mkc-{ns}"
    manager.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": config}, "spec": {"clusters": ["worker1", "worker2"]}})
    manager.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": check},
                    "spec": {"controllerName": MANAGED_BY, "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config}}})
    for api, checks in [(clusters.manager, [check]), (clusters.worker(1), None), (clusters.worker(2), None)]:
        k = o.Kueue(api)
        k.create(o.resource_flavor(f"default-{ns}"))
        # Not scaled on kind: these objects' requests come from their catalog entries, and run no pod.
        k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": resources}, checks=checks, scale_cpu=False))
        k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    o.wait_for(lambda: o.is_true(manager.get("AdmissionCheck", check), "Active"), 60, what="MultiKueue check active")


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def get(api: client.ApiClient, gvr: tuple[str, str, str], ns: str, name: str) -> dict[str, Any] | None:
    try:
        return custom(api).get_namespaced_custom_object(*gvr[:2], ns, gvr[2], name)  # type: ignore[no-any-return]
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def pipeline_run(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {"managedBy": MANAGED_BY, "pipelineRef": {"name": "build"}},
    }


def worker_copy(clusters: Clusters, gvr: tuple[str, str, str], ns: str, name: str) -> tuple[int, dict[str, Any]] | None:
    for index in (1, 2):
        obj = get(clusters.worker(index), gvr, ns, name)
        if obj is not None:
            return index, obj
    return None


def succeeded_status() -> dict[str, Any]:
    return {
        "startTime": "2026-11-22T00:00:00Z",
        "completionTime": "2026-11-22T00:00:05Z",
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "Tasks Completed: 1", "lastTransitionTime": "2026-11-22T00:00:05Z"}],
    }


def workload_for(api: client.ApiClient, ns: str, kind: str, name: str) -> dict[str, Any] | None:
    for wl in o.Kueue(api).list("Workload", ns):
        if any(r["kind"] == kind and r["name"] == name for r in wl["metadata"].get("ownerReferences") or []):
            return wl
    return None


def cleaned_up(clusters: Clusters, gvr: tuple[str, str, str], ns: str, name: str, workload: str) -> bool:
    """Neither worker has the object ``name`` or the Workload ``workload`` any more."""
    return all(
        get(clusters.worker(i), gvr, ns, name) is None and o.Kueue(clusters.worker(i)).get_or_none("Workload", workload, ns) is None
        for i in (1, 2)
    )


def test_upstream_entry_dispatches_a_pipelinerun_whose_workload_another_party_created(
    e2e_clusters: Clusters, frameworks: None, namespace: str, e2e_origin: str
) -> None:
    ns = namespace
    setup_queues(e2e_clusters, ns, {"cpu": 10})
    set_frameworks(e2e_clusters, [{"name": "PipelineRun.v1.tekton.dev"}])
    manager = e2e_clusters.manager
    pr = custom(manager).create_namespaced_custom_object(*PR[:2], ns, PR[2], pipeline_run(ns, "upstream"))
    # The external party (upstream: a Tekton integration) creates the Workload.
    wl = o.workload(ns, "pipelinerun-upstream", "user-queue", {"cpu": "1"})
    wl["metadata"]["ownerReferences"] = [{"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "name": "upstream", "uid": pr["metadata"]["uid"], "controller": True}]
    o.Kueue(manager).create(wl)

    index, copy_ = o.wait_for(lambda: worker_copy(e2e_clusters, PR, ns, "upstream"), 60, what="PipelineRun on a worker")
    assert "managedBy" not in copy_["spec"]
    labels = copy_["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/prebuilt-workload-name"] == "pipelinerun-upstream"
    assert labels["kueue.x-k8s.io/multikueue-origin"] == e2e_origin
    assert "status" not in copy_ or not copy_["status"]

    # Play the worker's Tekton and its Kueue integration: the run succeeds and its Workload finishes.
    worker = e2e_clusters.worker(index)
    custom(worker).patch_namespaced_custom_object_status(*PR[:2], ns, PR[2], "upstream", {"status": succeeded_status()})
    o.Kueue(worker).patch("Workload", "pipelinerun-upstream", {"status": {"conditions": [
        {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "PipelineRun succeeded", "lastTransitionTime": "2026-11-22T00:00:05Z"}]}}, ns, status=True)

    def synced() -> bool:
        status = (get(manager, PR, ns, "upstream") or {}).get("status") or {}
        return any(c["type"] == "Succeeded" and c["status"] == "True" for c in status.get("conditions") or [])

    o.wait_for(synced, 60, what="manager PipelineRun Succeeded")
    finished = o.wait_for(lambda: o.condition(o.Kueue(manager).get("Workload", "pipelinerun-upstream", ns), "Finished"), 60, what="manager Workload Finished")
    assert finished["reason"] == "Succeeded"
    o.wait_for(lambda: cleaned_up(e2e_clusters, PR, ns, "upstream", "pipelinerun-upstream"), 60, what="worker copies removed")


def test_catalog_entry_dispatches_a_pipelinerun_with_no_external_controller(
    e2e_clusters: Clusters, frameworks: None, namespace: str
) -> None:
    ns = namespace
    setup_queues(e2e_clusters, ns, {"pipelineruns.tekton.dev": 2})
    set_frameworks(e2e_clusters, [catalog_entry("tekton-pipelinerun.yaml")])
    manager = e2e_clusters.manager
    custom(manager).create_namespaced_custom_object(*PR[:2], ns, PR[2], pipeline_run(ns, "ours"))

    wl = o.wait_for(lambda: workload_for(manager, ns, "PipelineRun", "ours"), 60, what="Workload created by our manager")
    assert wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"] == {"pipelineruns.tekton.dev": "1"}
    index, copy_ = o.wait_for(lambda: worker_copy(e2e_clusters, PR, ns, "ours"), 60, what="PipelineRun on a worker")
    assert "managedBy" not in copy_["spec"]
    worker = e2e_clusters.worker(index)
    # The copy was created held (spec.status: PipelineRunPending); our worker controller releases it
    # once its Workload copy is admitted there.
    o.wait_for(lambda: "status" not in (get(worker, PR, ns, "ours") or {}).get("spec", {"status": 1}), 60, what="hold released on the worker")

    custom(worker).patch_namespaced_custom_object_status(*PR[:2], ns, PR[2], "ours", {"status": succeeded_status()})

    def manager_succeeded() -> bool:
        status = (get(manager, PR, ns, "ours") or {}).get("status") or {}
        return any(c["type"] == "Succeeded" and c["status"] == "True" for c in status.get("conditions") or [])

    o.wait_for(manager_succeeded, 60, what="manager PipelineRun Succeeded")
    finished = o.wait_for(lambda: o.condition(o.Kueue(manager).get("Workload", wl["metadata"]["name"], ns), "Finished"), 60, what="manager Workload Finished")
    assert finished["reason"] == "Succeeded"
    o.wait_for(lambda: cleaned_up(e2e_clusters, PR, ns, "ours", wl["metadata"]["name"]), 60, what="worker copies removed")


def test_a_pipelinerun_held_by_a_finalizer_while_deleted_frees_its_quota_and_its_worker_copy(
    e2e_clusters: Clusters, frameworks: None, namespace: str
) -> None:
    """Upstream's FinishOrphanedWorkloads for an external kind dispatched by MultiKueue.

    The manager's PipelineRun runs on a worker when it is deleted, but a finalizer of someone
    else's keeps it: its Workload is finished (OwnerNotFound), the copy on the worker is removed,
    and the quota goes to the next PipelineRun while the deleted one is still there.
    """
    ns = namespace
    setup_queues(e2e_clusters, ns, {"pipelineruns.tekton.dev": 1})
    set_frameworks(e2e_clusters, [catalog_entry("tekton-pipelinerun.yaml")])
    manager = e2e_clusters.manager
    held = pipeline_run(ns, "held")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    custom(manager).create_namespaced_custom_object(*PR[:2], ns, PR[2], held)
    wl = o.wait_for(lambda: workload_for(manager, ns, "PipelineRun", "held"), 60, what="Workload of the held PipelineRun")
    index, _ = o.wait_for(lambda: worker_copy(e2e_clusters, PR, ns, "held"), 60, what="held PipelineRun running on a worker")
    worker = e2e_clusters.worker(index)
    o.wait_for(lambda: "status" not in (get(worker, PR, ns, "held") or {}).get("spec", {"status": 1}), 60, what="hold released on the worker")
    custom(manager).create_namespaced_custom_object(*PR[:2], ns, PR[2], pipeline_run(ns, "next"))
    waiting = o.wait_for(lambda: workload_for(manager, ns, "PipelineRun", "next"), 60, what="Workload of the next PipelineRun")
    o.wait_for(lambda: o.condition(o.Kueue(manager).get("Workload", waiting["metadata"]["name"], ns), "QuotaReserved"), 60,
               what="the next PipelineRun's Workload pending for quota")  # fmt: skip
    try:
        custom(manager).delete_namespaced_custom_object(*PR[:2], ns, PR[2], "held")

        def finished() -> dict[str, Any] | None:
            current = o.Kueue(manager).get_or_none("Workload", wl["metadata"]["name"], ns) or {}
            return o.condition(current, "Finished") if o.is_true(current, "Finished") else None

        condition = o.wait_for(finished, 30, what="the deleted PipelineRun's Workload finished")
        assert (condition["reason"], condition["message"]) == ("OwnerNotFound", "The workload's owner no longer exists")
        assert (get(manager, PR, ns, "held") or {}).get("metadata", {}).get("deletionTimestamp"), "still held by its finalizer"
        o.wait_for(lambda: get(worker, PR, ns, "held") is None, 60, what="the worker's copy of the deleted PipelineRun removed")
        o.wait_for(lambda: worker_copy(e2e_clusters, PR, ns, "next"), 60, what="the next PipelineRun dispatched on the freed quota")
        assert (get(manager, PR, ns, "held") or {}).get("metadata", {}).get("deletionTimestamp"), "still held by its finalizer"
    finally:
        custom(manager).patch_namespaced_custom_object(*PR[:2], ns, PR[2], "held", {"metadata": {"finalizers": None}})


def grant_widgets(clusters: Clusters) -> None:
    """What a cluster admin adds to the workers for a new kind: the verbs the manager uses on it, no more.

    The same rule as ``config/worker-access/frameworks`` gives the catalog's
    kinds: list and watch (its informer), create and delete (copies).
    """
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "multikueue-manager-widgets"},
        "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["list", "watch", "create", "delete"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "multikueue-manager-widgets"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "multikueue-manager-widgets"},
        "subjects": [{"kind": "ServiceAccount", "name": "multikueue-manager", "namespace": wiring.CONTROLLER_NAMESPACE}],
    }
    for index in (1, 2):
        wiring.apply(clusters.worker(index), [role, binding])


def configmap_events(api: client.ApiClient) -> list[str]:
    events = client.CoreV1Api(api).list_namespaced_event(wiring.CONTROLLER_NAMESPACE, field_selector=f"involvedObject.name={CONFIG_MAP}")
    return [e.message for e in events.items]


def test_custom_crd_dispatched_from_configmap_entries_added_and_removed_live(
    e2e_clusters: Clusters, frameworks: None, namespace: str
) -> None:
    ns = namespace
    setup_queues(e2e_clusters, ns, {"cpu": 10})
    manager = e2e_clusters.manager
    marker = uuid.uuid4().hex[:6]
    bad = {"name": f"Gadget{marker.upper().replace('0', 'X')}.v1.example.com", "finished": "object.status.("}
    # A Widget created before its entry exists is picked up once the entry is added.
    custom(manager).create_namespaced_custom_object(*WIDGET[:2], ns, WIDGET[2], widget(ns, "early"))
    absent = {"name": f"Gizmo{marker.upper().replace('0', 'X')}.v1.example.com"}
    set_frameworks(e2e_clusters, [WIDGET_ENTRY, bad, absent])

    # The bad entries are reported on the ConfigMap with their name and field; the good one works.
    o.wait_for(lambda: any(bad["name"] in m and ".finished" in m for m in configmap_events(manager)), 30, what="Event for the bad entry")
    o.wait_for(lambda: any(absent["name"] in m and "does not serve example.com/v1" in m for m in configmap_events(manager)), 30, what="Event for the kind without a CRD")
    custom(manager).create_namespaced_custom_object(*WIDGET[:2], ns, WIDGET[2], widget(ns, "w1", size=2))
    wl = o.wait_for(lambda: workload_for(manager, ns, "Widget", "w1"), 60, what="Workload for the Widget")
    assert wl["spec"]["podSets"][0]["count"] == 2

    # The workers' access role (config/worker-access) does not cover Widgets: the check says so.
    def check_message() -> str:
        current = o.Kueue(manager).get("Workload", wl["metadata"]["name"], ns)
        return str(((current.get("status") or {}).get("admissionChecks") or [{}])[0].get("message", ""))

    def forbidden() -> str | None:
        message = check_message()
        return message if "forbidden" in message else None

    message = o.wait_for(forbidden, 60, what="RBAC problem on the check")
    assert "widgets" in message and "example.com" in message
    grant_widgets(e2e_clusters)

    def on_winner() -> tuple[int, dict[str, Any]] | None:
        """The Widget on the worker the Workload is admitted on (after the refusals' Retry a copy
        made on another worker may live a moment; see the session notes)."""
        current = o.Kueue(manager).get("Workload", wl["metadata"]["name"], ns)
        winner = (current.get("status") or {}).get("clusterName")
        if not winner or not o.is_true(current, "Admitted"):
            return None
        index = int(winner.removeprefix("worker"))
        obj = get(e2e_clusters.worker(index), WIDGET, ns, "w1")
        return (index, obj) if obj is not None else None

    index, copy_ = o.wait_for(on_winner, 60, what="Widget on the winning worker")
    assert copy_["spec"]["control"] == {"color": "blue"}, "managedBy removed at its own path"
    assert copy_["metadata"]["annotations"]["example.com/copied-from"] == "w1"

    worker = e2e_clusters.worker(index)
    report = {"report": {"phase": "Built", "conditions": [{"type": "Done", "status": "True", "reason": "Built"}], "artifacts": {"image": {"digest": "sha256:0"}}}}
    custom(worker).patch_namespaced_custom_object_status(*WIDGET[:2], ns, WIDGET[2], "w1", {"status": report})
    o.wait_for(lambda: ((get(manager, WIDGET, ns, "w1") or {}).get("status") or {}) == report, 60, what="nested status synced")
    finished = o.wait_for(lambda: o.condition(o.Kueue(manager).get("Workload", wl["metadata"]["name"], ns), "Finished"), 60, what="Widget Workload Finished")
    assert finished["reason"] == "Succeeded"
    o.wait_for(lambda: cleaned_up(e2e_clusters, WIDGET, ns, "w1", wl["metadata"]["name"]), 60, what="worker copies removed")

    # Removing the entry stops managing new Widgets, without a restart.
    set_frameworks(e2e_clusters, [])
    time.sleep(3)  # the controllers apply the edit from their ConfigMap watch
    custom(manager).create_namespaced_custom_object(*WIDGET[:2], ns, WIDGET[2], widget(ns, "late"))
    with pytest.raises(o.WaitTimeout):
        o.wait_for(lambda: workload_for(manager, ns, "Widget", "late"), 5, what="no Workload once the entry is gone")


def test_configmap_that_is_not_yaml_is_reported_and_changes_nothing(
    e2e_clusters: Clusters, frameworks: None, namespace: str
) -> None:
    manager = e2e_clusters.manager
    set_frameworks(e2e_clusters, None, text="multiKueue: [unclosed\n  : :")
    o.wait_for(lambda: any("not valid YAML" in m for m in configmap_events(manager)), 30, what="Event for a ConfigMap that is not YAML")
