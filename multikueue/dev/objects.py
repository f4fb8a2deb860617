"""Small builders and waiters for Kueue objects, shared by tests, e2e and the demo.

They return plain dicts shaped like upstream's manifests, so what the tests
create is what a user would ``kubectl apply``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

from multikueue.api.constants import API_VERSION, GROUP, VERSION
from multikueue.api.quantity import milli_value

T = TypeVar("T")

#: Multiplies the CPU of the pods and of the quotas these builders make. 1 on kwok's fake nodes (any
#: size fits); on kind the pods really run on nodes with this machine's few cores, so the e2e plugin
#: sets it lower (``--clusters kind``): a test's "1 CPU" Job then asks for 100m and its "8 CPU" queue
#: holds 800m, the same fits and misfits at a size a laptop's node can run.
CPU_SCALE = 1.0


def scaled_cpu(value: Any) -> Any:
    """``value`` (a CPU quantity) times :data:`CPU_SCALE`, in millicores; unchanged at scale 1."""
    if CPU_SCALE == 1.0:
        return value
    return f"{max(1, round(milli_value(str(value)) * CPU_SCALE))}m"


def _scaled(resources: dict[str, Any], scale: bool) -> dict[str, Any]:
    if not scale or "cpu" not in resources:
        return resources
    value = resources["cpu"]
    if isinstance(value, dict):
        value = {k: scaled_cpu(v) for k, v in value.items()}
    else:
        value = scaled_cpu(value)
    return {**resources, "cpu": value}


def resource_flavor(name: str, node_labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if node_labels:
        spec["nodeLabels"] = node_labels
    if taints:
        spec["nodeTaints"] = taints
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(
    name: str,
    quotas: dict[str, dict[str, Any]],
    *,
    cohort: str | None = None,
    strategy: str | None = None,
    checks: list[str] | None = None,
    namespace_selector: dict[str, Any] | None = None,
    scale_cpu: bool = True,
    preemption: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``quotas``: flavor -> {resource: nominal | {"nominalQuota":..., "borrowingLimit":..., "lendingLimit":...}}.
    ``preemption``: the ClusterQueue's ``spec.preemption`` as written (e.g. ``{"withinClusterQueue": "LowerPriority"}``).

    CPU is scaled by :data:`CPU_SCALE` (for pods that really run); ``scale_cpu=False`` for queues of
    objects whose requests the tests do not build (an external framework's CEL requests).
    """
    quotas = {flavor: _scaled(per_resource, scale_cpu) for flavor, per_resource in quotas.items()}
    resources = sorted({r for per_flavor in quotas.values() for r in per_flavor})
    flavors = []
    for flavor, per_resource in quotas.items():
        entries = []
        for resource in resources:
            value = per_resource.get(resource, 0)
            entry = {"name": resource, **(value if isinstance(value, dict) else {"nominalQuota": value})}
            entries.append(entry)
        flavors.append({"name": flavor, "resources": entries})
    spec: dict[str, Any] = {
        "namespaceSelector": namespace_selector if namespace_selector is not None else {},
        "resourceGroups": [{"coveredResources": resources, "flavors": flavors}],
    }
    if cohort:
        spec["cohortName"] = cohort
    if strategy:
        spec["queueingStrategy"] = strategy
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    if preemption:
        spec["preemption"] = preemption
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(namespace: str, name: str, cluster_queue_name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


#: The image of the test and demo Jobs' pods: a static busybox made locally (``multikueue.dev.kind``), so
#: the same Job runs on kwok's fake nodes (which never pull it) and as a real container on kind.
JOB_IMAGE = "multikueue/busybox:dev"
#: kwok's stage (hack/kwok/stages.yaml) keeps a pod Running this long before it succeeds.
RUN_FOR = "multikueue.x-k8s.io/run-for"


def seconds_of(duration: str) -> int:
    """``"6s"``, ``"2m"`` or ``"5"`` in whole seconds (the run-for annotations the tests use)."""
    text = duration.strip()
    unit = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], 0)
    return int(float(text[:-1] if unit else text) * (unit or 1))


def pod_template(
    requests: dict[str, str], node_selector: dict[str, str] | None = None, run_for: str | None = None
) -> dict[str, Any]:
    """A one-container pod template that succeeds after ``run_for`` (at once without it).

    On kwok nodes the ``run-for`` annotation times the fake pod; on real nodes
    (kind) the container sleeps as long, in :data:`JOB_IMAGE`.
    """
    command = ["sleep", str(seconds_of(run_for))] if run_for else ["true"]
    container = {"name": "main", "image": JOB_IMAGE, "imagePullPolicy": "IfNotPresent", "command": command,
                 "resources": {"requests": _scaled(requests, True)}}
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    template: dict[str, Any] = {"spec": spec}
    if run_for:
        template["metadata"] = {"annotations": {RUN_FOR: run_for}}
    return template


def workload(
    namespace: str,
    name: str,
    queue: str,
    requests: dict[str, str],
    *,
    count: int = 1,
    priority: int | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [{"name": "main", "count": count, "template": pod_template(requests, node_selector)}],
    }
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": API_VERSION, "kind": "Workload", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def batch_job(
    namespace: str,
    name: str,
    queue: str | None,
    requests: dict[str, str],
    *,
    parallelism: int = 1,
    completions: int | None = None,
    suspend: bool = True,
    managed_by: str | None = None,
    run_for: str | None = None,
) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "completions": completions if completions is not None else parallelism,
        "suspend": suspend,
        "template": pod_template(requests, run_for=run_for),
    }
    if managed_by:
        spec["managedBy"] = managed_by
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec}


def open_crd(group: str, kind: str, plural: str, version: str = "v1") -> dict[str, Any]:
    """A namespaced CRD whose objects may hold anything (tests that need a kind of their own)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


class Kueue:
    """CRUD on ``kueue.x-k8s.io`` objects of one cluster, by kind name."""

    PLURALS = {
        "ResourceFlavor": ("resourceflavors", False),
        "ClusterQueue": ("clusterqueues", False),
        "LocalQueue": ("localqueues", True),
        "Workload": ("workloads", True),
        "AdmissionCheck": ("admissionchecks", False),
        "MultiKueueConfig": ("multikueueconfigs", False),
        "MultiKueueCluster": ("multikueueclusters", False),
        "WorkloadPriorityClass": ("workloadpriorityclasses", False),
        "Cohort": ("cohorts", False),
    }

    def __init__(self, api: client.ApiClient) -> None:
        self.objects = client.CustomObjectsApi(api)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        plural, namespaced = self.PLURALS[body["kind"]]
        if namespaced:
            return self.objects.create_namespaced_custom_object(GROUP, VERSION, body["metadata"]["namespace"], plural, body)
        return self.objects.create_cluster_custom_object(GROUP, VERSION, plural, body)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        plural, namespaced = self.PLURALS[kind]
        if namespaced:
            return self.objects.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        return self.objects.get_cluster_custom_object(GROUP, VERSION, plural, name)

    def get_or_none(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            return self.get(kind, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        plural, namespaced = self.PLURALS[kind]
        if namespaced and namespace:
            return self.objects.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]
        return self.objects.list_cluster_custom_object(GROUP, VERSION, plural)["items"]

    def patch(self, kind: str, name: str, patch: dict[str, Any], namespace: str | None = None, status: bool = False) -> dict[str, Any]:
        plural, namespaced = self.PLURALS[kind]
        if namespaced:
            fn = self.objects.patch_namespaced_custom_object_status if status else self.objects.patch_namespaced_custom_object
            return fn(GROUP, VERSION, namespace, plural, name, patch)
        fn2 = self.objects.patch_cluster_custom_object_status if status else self.objects.patch_cluster_custom_object
        return fn2(GROUP, VERSION, plural, name, patch)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        plural, namespaced = self.PLURALS[kind]
        try:
            if namespaced:
                self.objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
            else:
                self.objects.delete_cluster_custom_object(GROUP, VERSION, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def condition(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def is_true(obj: dict[str, Any] | None, ctype: str) -> bool:
    c = condition(obj, ctype)
    return bool(c and c.get("status") == "True")


class WaitTimeout(AssertionError):
    pass


def wait_for(fn: Callable[[], T], timeout: float = 30, interval: float = 0.2, what: str = "condition") -> T:
    """Poll ``fn`` until it returns something truthy; raise with the last value on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = fn()
        if last:
            return last
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}; last value: {last!r}")
        time.sleep(interval)


def apply_json_patch(obj: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 "add" on object members (all our mutating webhooks emit), with JSON pointer unescaping.

    What the API server does with a webhook's answer, for tests of the patches alone.
    """
    result = copy.deepcopy(obj)
    for operation in operations:
        assert operation["op"] == "add"
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in operation["path"].lstrip("/").split("/")]
        node = result
        for key in parents:
            node = node[key]
        node[last] = operation["value"]
    return result
