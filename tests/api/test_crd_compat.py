"""Compatibility with upstream Kueue's v1beta2 API, both ways, on real apiservers.

1. Upstream's example manifests apply unchanged to a cluster with our CRDs.
2. Objects written from our models are accepted by a cluster that has
   upstream's CRDs, spec and status alike.

Every write uses ``fieldValidation=Strict``, so a field the receiving schema
does not know is an error rather than silently pruned, and every object is
read back to check that nothing we sent was dropped.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from multikueue import api as v1beta2
from multikueue.api.constants import GROUP, VERSION
from multikueue.dev.pytest_plugin import Clusters, reference_dir

pytestmark = pytest.mark.integration


def missing_from(sent: Any, stored: Any, path: str = "") -> list[str]:
    """Paths of values in ``sent`` that ``stored`` lacks or holds differently (defaults may add)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [f"{path or '.'}: expected an object, got {stored!r}"]
        problems: list[str] = []
        for key, value in sent.items():
            if key not in stored:
                problems.append(f"{path}.{key}: dropped")
            else:
                problems.extend(missing_from(value, stored[key], f"{path}.{key}"))
        return problems
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [f"{path}: expected {len(sent)} items, got {stored!r}"]
        return [p for i, (a, b) in enumerate(zip(sent, stored)) for p in missing_from(a, b, f"{path}[{i}]")]
    return [] if sent == stored else [f"{path}: sent {sent!r}, stored {stored!r}"]


def create_strict(api: client.ApiClient, model: type[v1beta2.KueueObject], body: dict[str, Any]) -> dict[str, Any]:
    objects = client.CustomObjectsApi(api)
    namespace = body["metadata"].get("namespace")
    if model.namespaced:
        return objects.create_namespaced_custom_object(
            GROUP, VERSION, namespace, model.plural, body, field_validation="Strict"
        )
    return objects.create_cluster_custom_object(GROUP, VERSION, model.plural, body, field_validation="Strict")


def write_status_strict(api: client.ApiClient, model: type[v1beta2.KueueObject], body: dict[str, Any]) -> dict[str, Any]:
    objects = client.CustomObjectsApi(api)
    name = body["metadata"]["name"]
    if model.namespaced:
        return objects.replace_namespaced_custom_object_status(
            GROUP, VERSION, body["metadata"]["namespace"], model.plural, name, body, field_validation="Strict"
        )
    return objects.replace_cluster_custom_object_status(
        GROUP, VERSION, model.plural, name, body, field_validation="Strict"
    )


def delete(api: client.ApiClient, model: type[v1beta2.KueueObject], body: dict[str, Any]) -> None:
    objects = client.CustomObjectsApi(api)
    name = body["metadata"]["name"]
    try:
        if model.namespaced:
            objects.delete_namespaced_custom_object(GROUP, VERSION, body["metadata"]["namespace"], model.plural, name)
        else:
            objects.delete_cluster_custom_object(GROUP, VERSION, model.plural, name)
    except ApiException as exc:
        if exc.status != 404:
            raise


# -- 1. upstream's examples against our CRDs ---------------------------------


def test_upstream_multikueue_example_applies_to_our_crds(integration_clusters: Clusters) -> None:
    api = integration_clusters.manager
    docs = [d for d in yaml.safe_load_all((reference_dir() / "kueue-examples" / "multikueue-setup.yaml").read_text()) if d]
    assert {d["kind"] for d in docs} >= {"ResourceFlavor", "ClusterQueue", "LocalQueue", "AdmissionCheck", "MultiKueueConfig", "MultiKueueCluster"}
    created: list[tuple[type[v1beta2.KueueObject], dict[str, Any]]] = []
    try:
        for doc in docs:
            model = v1beta2.kind_for(doc["kind"])
            stored = create_strict(api, model, doc)
            created.append((model, doc))
            assert missing_from(doc.get("spec", {}), stored.get("spec", {})) == [], doc["kind"]
            model.from_k8s(stored)  # and our models read what the server stored
    finally:
        for model, doc in reversed(created):
            delete(api, model, doc)


# -- 2. our models against upstream's CRDs -----------------------------------


def our_objects(suffix: str, namespace: str) -> list[tuple[v1beta2.KueueObject, dict[str, Any] | None]]:
    """Objects built from our models: (object, status to write or None)."""
    flavor = v1beta2.ResourceFlavor.from_k8s(
        {
            "metadata": {"name": f"flavor-{suffix}"},
            "spec": {
                "nodeLabels": {"instance-type": "on-demand"},
                "nodeTaints": [{"key": "spot", "value": "true", "effect": "NoSchedule"}],
                "tolerations": [{"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
            },
        }
    )
    cohort = v1beta2.Cohort.from_k8s({"metadata": {"name": f"cohort-{suffix}"}, "spec": {}})
    queue = v1beta2.ClusterQueue.from_k8s(
        {
            "metadata": {"name": f"cq-{suffix}"},
            "spec": {
                "cohortName": f"cohort-{suffix}",
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "queueingStrategy": "StrictFIFO",
                "stopPolicy": "None",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": f"flavor-{suffix}",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "9", "borrowingLimit": "2", "lendingLimit": "1"},
                                    {"name": "memory", "nominalQuota": "36Gi"},
                                ],
                            }
                        ],
                    }
                ],
                "admissionChecksStrategy": {"admissionChecks": [{"name": f"mk-{suffix}"}]},
                "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
            },
        }
    )
    queue_status = {
        "conditions": [
            {
                "type": "Active",
                "status": "True",
                "reason": "Ready",
                "message": "Can admit new workloads",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 1,
            }
        ],
        "pendingWorkloads": 1,
        "reservingWorkloads": 2,
        "admittedWorkloads": 2,
        "flavorsReservation": [{"name": f"flavor-{suffix}", "resources": [{"name": "cpu", "total": "8", "borrowed": "0"}]}],
        "flavorsUsage": [{"name": f"flavor-{suffix}", "resources": [{"name": "cpu", "total": "8", "borrowed": "0"}]}],
    }
    local = v1beta2.LocalQueue.from_k8s(
        {"metadata": {"name": "user-queue", "namespace": namespace}, "spec": {"clusterQueue": f"cq-{suffix}"}}
    )
    check = v1beta2.AdmissionCheck.from_k8s(
        {
            "metadata": {"name": f"mk-{suffix}"},
            "spec": {
                "controllerName": "kueue.x-k8s.io/multikueue",
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": f"mkc-{suffix}"},
            },
        }
    )
    check_status = {
        "conditions": [
            {"type": "Active", "status": "True", "reason": "Active", "message": "The admission check is active", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]
    }
    config = v1beta2.MultiKueueConfig.from_k8s({"metadata": {"name": f"mkc-{suffix}"}, "spec": {"clusters": [f"w1-{suffix}", f"w2-{suffix}"]}})
    cluster = v1beta2.MultiKueueCluster.from_k8s(
        {
            "metadata": {"name": f"w1-{suffix}"},
            "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": "worker1-secret"}}},
        }
    )
    cluster_status = {
        "conditions": [
            {
                "type": "Active",
                "status": "False",
                "reason": "InsecureKubeConfig",
                "message": "user 'u' uses an exec plugin",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    priority = v1beta2.WorkloadPriorityClass.from_k8s(
        {"metadata": {"name": f"high-{suffix}"}, "value": 1000, "description": "important work"}
    )
    template = {
        "metadata": {"labels": {"app": "demo"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"instance-type": "on-demand"},
            "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {"name": "main", "image": "busybox", "args": ["sleep", "1"], "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
            ],
        },
    }
    workload = v1beta2.Workload.from_k8s(
        {
            "metadata": {
                "name": f"job-demo-{suffix}",
                "namespace": namespace,
                "labels": {"kueue.x-k8s.io/multikueue-origin": "multikueue"},
            },
            "spec": {
                "queueName": "user-queue",
                "active": True,
                "priority": 1000,
                "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": f"high-{suffix}"},
                "podSets": [{"name": "main", "count": 4, "minCount": 2, "template": template}],
            },
        }
    )
    workload_status = {
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": f"Quota reserved in ClusterQueue cq-{suffix}", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted", "lastTransitionTime": "2026-01-01T00:00:01Z"},
        ],
        "admission": {
            "clusterQueue": f"cq-{suffix}",
            "podSetAssignments": [
                {"name": "main", "flavors": {"cpu": f"flavor-{suffix}", "memory": f"flavor-{suffix}"}, "resourceUsage": {"cpu": "4", "memory": "4Gi"}, "count": 4}
            ],
        },
        "admissionChecks": [
            {"name": f"mk-{suffix}", "state": "Ready", "message": f'The workload got reservation on "w1-{suffix}"', "lastTransitionTime": "2026-01-01T00:00:01Z"}
        ],
        "clusterName": f"w1-{suffix}",
    }
    nominated = v1beta2.Workload.from_k8s(
        {
            "metadata": {"name": f"nominated-{suffix}", "namespace": namespace},
            "spec": {"queueName": "user-queue", "podSets": [{"name": "main", "count": 1, "template": template}]},
        }
    )
    nominated_status = {
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ],
        "admission": {
            "clusterQueue": f"cq-{suffix}",
            "podSetAssignments": [{"name": "main", "flavors": {"cpu": f"flavor-{suffix}"}, "resourceUsage": {"cpu": "1"}, "count": 1}],
        },
        "admissionChecks": [{"name": f"mk-{suffix}", "state": "Pending", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "nominatedClusterNames": [f"w1-{suffix}", f"w2-{suffix}"],
    }
    return [
        (flavor, None),
        (cohort, None),
        (queue, queue_status),
        (local, {"conditions": queue_status["conditions"], "pendingWorkloads": 0, "reservingWorkloads": 1, "admittedWorkloads": 1}),
        (check, check_status),
        (config, None),
        (cluster, cluster_status),
        (priority, None),
        (workload, workload_status),
        (nominated, nominated_status),
    ]


def roundtrip_into(api: client.ApiClient, namespace: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    objects = our_objects(suffix, namespace)
    assert {type(o) for o, _ in objects} == set(v1beta2.KINDS), "every kind is exercised"
    created: list[tuple[type[v1beta2.KueueObject], dict[str, Any]]] = []
    try:
        for obj, status in objects:
            model = type(obj)
            body = obj.to_k8s()
            stored = create_strict(api, model, body)
            created.append((model, body))
            assert missing_from({k: v for k, v in body.items() if k != "metadata"}, stored) == [], model.kind
            if status is not None:
                with_status = model.from_k8s({**stored, "status": status}).to_k8s()
                with_status["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
                written = write_status_strict(api, model, with_status)
                assert missing_from(with_status["status"], written.get("status", {})) == [], f"{model.kind} status"
                model.from_k8s(written)
    finally:
        for model, body in reversed(created):
            delete(api, model, body)


def test_our_objects_are_accepted_by_upstream_crds(upstream_crd_cluster: client.ApiClient) -> None:
    namespace = f"compat-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(upstream_crd_cluster).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    roundtrip_into(upstream_crd_cluster, namespace)


def test_our_objects_are_accepted_by_our_crds(integration_clusters: Clusters, namespace: str) -> None:
    # A worker of the integration set: our CRDs, and no controller rewriting the objects meanwhile.
    roundtrip_into(integration_clusters.worker(2), namespace)


def test_upstream_crds_reject_what_they_do_not_know(upstream_crd_cluster: client.ApiClient) -> None:
    """Guard for the tests above: Strict validation really refuses unknown fields here."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceFlavor",
        "metadata": {"name": f"strict-{uuid.uuid4().hex[:6]}"},
        "spec": {"noSuchField": True},
    }
    with pytest.raises(ApiException) as err:
        create_strict(upstream_crd_cluster, v1beta2.ResourceFlavor, body)
    assert err.value.status in (400, 422)
    assert "noSuchField" in err.value.body
