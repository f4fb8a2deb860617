"""Builders shared by the ``batch/v1`` Job tests, as fixtures that return the builder.

``api_job()`` is a Job as the API server returns it (defaults filled in,
selector, controller labels and bookkeeping metadata generated); every call
returns a new dict, so a test may change it freely. ``reserve(workload)`` is
a Workload with quota reserved in flavor ``on-demand`` for pod set ``main``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from multikueue.api.constants import Labels
from multikueue.api.meta import Condition
from multikueue.api.workload import Admission, PodSetAssignment, Workload

JOB_UID = "0f3a9c2e-7b1d-4c55-9e1a-2d7f6b8c4e10"


def build_api_job(*, managed_by: str | None = None) -> dict[str, Any]:
    """A Job ``team-a/sample`` in queue ``user-queue``: 3 pods of 1 CPU and 200Mi, suspended."""
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "sample",
            "namespace": "team-a",
            "uid": JOB_UID,
            "resourceVersion": "4242",
            "generation": 1,
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {Labels.QUEUE_NAME: "user-queue", "app": "sample"},
            "annotations": {"team": "a"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "cm-uid"}],
            "finalizers": ["example.com/keep"],
            "managedFields": [{"manager": "kubectl-create", "operation": "Update", "apiVersion": "batch/v1"}],
        },
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "backoffLimit": 6,
            "completionMode": "NonIndexed",
            "suspend": True,
            "podReplacementPolicy": "TerminatingOrFailed",
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": JOB_UID}},
            "template": {
                "metadata": {
                    "creationTimestamp": None,
                    "annotations": {"note": "keep"},
                    "labels": {
                        "app": "sample",
                        "batch.kubernetes.io/controller-uid": JOB_UID,
                        "batch.kubernetes.io/job-name": "sample",
                        "controller-uid": JOB_UID,
                        "job-name": "sample",
                    },
                },
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": "1", "memory": "200Mi"}},
                            "imagePullPolicy": "Always",
                        }
                    ],
                    "restartPolicy": "Never",
                    "dnsPolicy": "ClusterFirst",
                    "nodeSelector": {"disk": "ssd"},
                    "tolerations": [{"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}],
                },
            },
        },
        "status": {},
    }
    if managed_by is not None:
        job["spec"]["managedBy"] = managed_by
    return job


def reserve_quota(
    workload: Workload, *, flavors: dict[str, str] | None = None, count: int | None = None, admitted: bool = True
) -> Workload:
    """A copy of ``workload`` with quota reserved in ClusterQueue ``cq`` (and Admitted unless told otherwise)."""
    reserved = workload.model_copy(deep=True)
    reserved.status.admission = Admission(
        cluster_queue="cq",
        pod_set_assignments=[
            PodSetAssignment(name="main", flavors=flavors or {"cpu": "on-demand", "memory": "on-demand"}, count=count)
        ],
    )
    reserved.status.conditions = [Condition(type="QuotaReserved", status="True", reason="QuotaReserved")]
    if admitted:
        reserved.status.conditions.append(Condition(type="Admitted", status="True", reason="Admitted"))
    return reserved


@pytest.fixture
def api_job() -> Callable[..., dict[str, Any]]:
    """``api_job(managed_by=None)``: a new Job as the API server returns it (see ``build_api_job``)."""
    return build_api_job


@pytest.fixture
def job_uid() -> str:
    """The ``metadata.uid`` of every ``api_job()``."""
    return JOB_UID


@pytest.fixture
def reserve() -> Callable[..., Workload]:
    """``reserve(workload, flavors=None, count=None, admitted=True)``: see ``reserve_quota``."""
    return reserve_quota
