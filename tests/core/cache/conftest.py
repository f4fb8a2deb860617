"""Builders shared by the cache's part tests, as a fixture returning the builder object.

Every builder returns a fresh parsed API object (the ``multikueue.api``
models the watches deliver), with only what a test names filled in.
``NOW`` is the clock the tests' timestamps are relative to.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from multikueue.api.admissioncheck import AdmissionCheck
from multikueue.api.clusterqueue import ClusterQueue
from multikueue.api.cohort import Cohort
from multikueue.api.localqueue import LocalQueue
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import Admission, Workload
from multikueue.api.workloadpriorityclass import WorkloadPriorityClass

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def _condition(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": NOW.isoformat()}


def _resource_groups(quotas: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One resource group; ``quotas`` maps flavor -> {resource: nominal or full quota dict}."""
    covered = sorted({r for resources in quotas.values() for r in resources})
    flavors = []
    for flavor_name, resources in quotas.items():
        entries = []
        for resource, quota in resources.items():
            entry: dict[str, Any] = {"name": resource}
            entry.update(quota if isinstance(quota, dict) else {"nominalQuota": quota})
            entries.append(entry)
        flavors.append({"name": flavor_name, "resources": entries})
    return [{"coveredResources": covered, "flavors": flavors}]


class Builders:
    """API objects for the tests, named after their kinds."""

    #: The clock Workload ages and requeue times are relative to.
    now = NOW

    def flavor(self, name: str = "default-flavor", **spec: Any) -> ResourceFlavor:
        return ResourceFlavor.from_k8s({"metadata": {"name": name}, "spec": spec})

    def cluster_queue(
        self, name: str = "cq", quotas: dict[str, dict[str, Any]] | None = None, **spec: Any
    ) -> ClusterQueue:
        """A ClusterQueue matching every namespace, with 9 CPUs of ``default-flavor`` unless ``quotas`` says otherwise."""
        body = {
            "namespaceSelector": {},
            "resourceGroups": _resource_groups(quotas if quotas is not None else {"default-flavor": {"cpu": 9}}),
            **spec,
        }
        return ClusterQueue.from_k8s({"metadata": {"name": name}, "spec": body})

    def cohort(self, name: str, quotas: dict[str, dict[str, Any]] | None = None, parent: str | None = None) -> Cohort:
        spec: dict[str, Any] = {}
        if quotas is not None:
            spec["resourceGroups"] = _resource_groups(quotas)
        if parent is not None:
            spec["parentName"] = parent
        return Cohort.from_k8s({"metadata": {"name": name}, "spec": spec})

    def local_queue(self, name: str = "user-queue", namespace: str = "default", cq: str = "cq", **spec: Any) -> LocalQueue:
        return LocalQueue.from_k8s({"metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cq, **spec}})

    def check(self, name: str, active: bool, controller: str = "example.com/check") -> AdmissionCheck:
        status = "True" if active else "False"
        return AdmissionCheck.from_k8s(
            {
                "metadata": {"name": name},
                "spec": {"controllerName": controller},
                "status": {"conditions": [_condition("Active", status, "Active")]},
            }
        )

    def priority_class(self, name: str, value: int) -> WorkloadPriorityClass:
        return WorkloadPriorityClass.from_k8s({"metadata": {"name": name}, "value": value})

    def admission(self, cq: str = "cq", usage: dict[str, str] | None = None, flavor: str = "default-flavor") -> Admission:
        """One pod set ``main`` assigned ``flavor`` for every resource in ``usage`` (default 4 CPUs)."""
        usage = usage if usage is not None else {"cpu": "4"}
        assignment = {"name": "main", "count": 1, "flavors": dict.fromkeys(usage, flavor), "resourceUsage": usage}
        return Admission.model_validate({"clusterQueue": cq, "podSetAssignments": [assignment]})

    def workload(
        self,
        name: str,
        cpu: str = "4",
        *,
        namespace: str = "default",
        queue: str = "user-queue",
        priority: int | None = None,
        age: int = 0,
        resource_version: str | None = None,
        labels: dict[str, str] | None = None,
        **status: Any,
    ) -> Workload:
        """A one-pod-set Workload created ``age`` seconds before ``NOW``; keyword ``status`` fields go to its status."""
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": (NOW - timedelta(seconds=age)).isoformat(),
        }
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        if labels is not None:
            metadata["labels"] = labels
        container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}
        spec: dict[str, Any] = {
            "queueName": queue,
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}],
        }
        if priority is not None:
            spec["priority"] = priority
        body: dict[str, Any] = {"metadata": metadata, "spec": spec}
        if status:
            body["status"] = status
        return Workload.from_k8s(body)

    def condition(self, type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
        return _condition(type_, status, reason, message)


@pytest.fixture
def build() -> Builders:
    return Builders()
