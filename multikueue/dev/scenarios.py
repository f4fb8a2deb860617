"""Set-ups the MultiKueue end-to-end tests share: queues on a manager and its workers, a timed Job.

Kept apart from :mod:`multikueue.dev.objects` (single objects) because these
write several objects on several clusters and wait for the result.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes import client, watch
from urllib3.exceptions import HTTPError

from multikueue.dev import objects as o
from multikueue.integrations.naming import workload_name_for_owner

MANAGED_BY = "kueue.x-k8s.io/multikueue"


def timed_job(namespace: str, name: str, cpu: str, run_for: str = "2s", parallelism: int = 1) -> dict[str, Any]:
    """A queued Job whose pods succeed after ``run_for`` (kwok's stage, or a real ``sleep`` on kind)."""
    return o.batch_job(namespace, name, "user-queue", {"cpu": cpu}, parallelism=parallelism, run_for=run_for)


def multikueue_queues(
    manager: client.ApiClient,
    workers: list[client.ApiClient],
    ns: str,
    worker_cpu: tuple[int, ...] = (8, 8),
    manager_cpu: int = 1000,
    preemption: dict[str, Any] | None = None,
) -> None:
    """A MultiKueue check over ``worker1``.. on the manager, a plain queue on each worker; waits for the check.

    ``preemption`` is the manager ClusterQueue's ``spec.preemption``."""
    kueue = o.Kueue(manager)
    check, config = f"mk-{ns}", f"mkc-{ns}"
    names = [f"worker{i}" for i in range(1, len(workers) + 1)]
    kueue.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": config}, "spec": {"clusters": names}})
    kueue.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": check},
                  "spec": {"controllerName": MANAGED_BY, "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config}}})
    kueue.create(o.resource_flavor(f"default-{ns}"))
    kueue.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": manager_cpu}}, checks=[check], preemption=preemption))
    kueue.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    for api, cpu in zip(workers, worker_cpu):
        worker = o.Kueue(api)
        worker.create(o.resource_flavor(f"default-{ns}"))
        worker.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": cpu}}))
        worker.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    o.wait_for(lambda: o.is_true(kueue.get("AdmissionCheck", check), "Active"), 60, what="MultiKueue check active")
    # The Job webhook defaults managedBy from the controller's view of the queue: wait until the
    # controller has seen it (it marks the LocalQueue Active), or a Job created at once may be left
    # to the manager's own Job controller and then rejected by the check.
    o.wait_for(lambda: o.is_true(kueue.get("LocalQueue", "user-queue", ns), "Active"), 60, what="LocalQueue active on the manager")


def job_complete(batch: client.BatchV1Api, ns: str, name: str) -> bool:
    status = batch.read_namespaced_job(name, ns).status
    return any(c.type == "Complete" and c.status == "True" for c in status.conditions or [])


def wait_jobs_complete(api: client.ApiClient, ns: str, names: list[str], timeout: float, interval: float = 1.0) -> None:
    """Wait until every Job of ``names`` is Complete; on timeout, raise with the stuck ones' Workload status."""
    batch, kueue = client.BatchV1Api(api), o.Kueue(api)
    try:
        o.wait_for(lambda: all(job_complete(batch, ns, n) for n in names), timeout, interval=interval, what="every Job Complete")
    except o.WaitTimeout:
        stuck = {}
        for n in names:
            if not job_complete(batch, ns, n):
                uid = batch.read_namespaced_job(n, ns).metadata.uid
                status = (kueue.get_or_none("Workload", workload_name_for_owner(n, uid, "Job", "batch"), ns) or {}).get("status") or {}
                stuck[n] = {k: status.get(k) for k in ("clusterName", "admissionChecks", "conditions")}
        raise o.WaitTimeout(f"Jobs not Complete after {timeout:.0f} s, with their Workloads' status: {stuck}") from None


class PodWatch:
    """Counts the pods created per Job name on a cluster (to prove no Job runs twice).

    Keeps watching through the cluster's faults: a refused or cut connection
    is retried every half second (pods created meanwhile are seen by the next
    watch's initial listing, as the watch starts without a resourceVersion).
    """

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.pods: dict[str, set[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(api, namespace), daemon=True)
        self._thread.start()

    def _run(self, api: client.ApiClient, namespace: str) -> None:
        core = client.CoreV1Api(api)
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(core.list_namespaced_pod, namespace, timeout_seconds=5, _request_timeout=10):
                    pod = event["object"]
                    name = (pod.metadata.labels or {}).get("job-name")
                    if name:
                        self.pods.setdefault(name, set()).add(pod.metadata.name)
            except (client.ApiException, HTTPError, OSError):
                time.sleep(0.5)

    def runs(self, job: str) -> int:
        """How many pods of ``job`` this watch saw."""
        return len(self.pods.get(job, ()))

    def stop(self) -> None:
        self._stop.set()


# --- a kind of the tests' own, dispatched through an external-framework entry ----------------------

#: The Widget kind: (group, version, plural).
WIDGET = ("example.com", "v1alpha1", "widgets")

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}

#: Our extended entry for the Widget: managedBy at a non-default path, pod sets from CEL, nested conditions.
WIDGET_ENTRY: dict[str, Any] = {
    "name": "Widget.v1alpha1.example.com",
    "managedBy": "$.spec.control.managedBy",
    "workload": {"podSets": '[{"name": "main", "count": object.spec.size, "requests": {"cpu": "1"}}]'},
    "creationPatches": ['{"metadata": {"annotations": {"example.com/copied-from": object.metadata.name}}}'],
    "statusSync": ["$.status"],
    "finished": 'has(object.status) && has(object.status.report) && object.status.report.conditions.exists(c, c.type == "Done" && c.status == "True")',
    "succeeded": 'object.status.report.conditions.exists(c, c.type == "Done" && c.reason == "Built")',
}


def widget(ns: str, name: str, size: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {"size": size, "control": {"managedBy": MANAGED_BY, "color": "blue"}},
    }


#: The controller's own rules on the Widget kind, aggregated into its role as an admin adds them for a
#: kind of their own (config/rbac/external_frameworks_role.yaml). The manager's access on the workers
#: is granted by the test that needs it (grant_widgets).
WIDGET_RBAC = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "e2e-widgets-controller", "labels": {"multikueue.x-k8s.io/aggregate-to-manager": "true"}},
        "rules": [
            {"apiGroups": [WIDGET[0]], "resources": [WIDGET[2]], "verbs": ["list", "watch", "patch"]},
            {"apiGroups": [WIDGET[0]], "resources": [f"{WIDGET[2]}/status"], "verbs": ["patch"]},
            {"apiGroups": [WIDGET[0]], "resources": [f"{WIDGET[2]}/finalizers"], "verbs": ["update"]},
        ],
    },
]
