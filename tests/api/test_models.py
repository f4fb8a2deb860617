"""The v1beta2 models: upstream's examples and full Workloads parse and serialize back unchanged."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from multikueue.api import (
    KINDS,
    AdmissionCheck,
    ClusterQueue,
    Cohort,
    LocalQueue,
    MultiKueueCluster,
    MultiKueueConfig,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
    kind_for,
)
from multikueue.api.clusterqueue import QueueingStrategy, StopPolicy
from multikueue.api.constants import (
    ACTIVE,
    AdmissionCheckReason,
    Annotations,
    CheckState,
    ClusterQueueReason,
    ConditionStatus,
    Dispatcher,
    Finalizers,
    Labels,
    LocalQueueReason,
    MultiKueue,
    MultiKueueClusterReason,
    WorkloadConditionType,
    WorkloadReason,
    reason_with_cause,
)
from multikueue.api.meta import Condition, ObjectMeta, find_condition, format_time, remove_condition, set_condition, version_number
from multikueue.api.multikueue import LocationType
from multikueue.api.quantity import QuantityValue
from multikueue.api.workload import PodSet, PodSetAssignment, WorkloadSpec

pytestmark = pytest.mark.unit

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference"


def _reference_examples() -> list[dict[str, Any]]:
    path = REFERENCE / "kueue-examples" / "multikueue-setup.yaml"
    assert path.is_file(), (
        f"upstream example {path} not found: these tests need ../shared/reference/kueue-examples next to the repository"
    )
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


#: What the API server's defaulting adds to upstream's example objects; the
#: models fill in the same defaults, so ``to_k8s()`` returns the stored object.
SERVER_DEFAULTS: dict[str, dict[str, Any]] = {
    "ClusterQueue": {
        "spec": {
            "queueingStrategy": "BestEffortFIFO",
            "stopPolicy": "None",
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
            "preemption": {
                "borrowWithinCohort": {"policy": "Never"},
                "reclaimWithinCohort": "Never",
                "withinClusterQueue": "Never",
            },
        }
    },
    "LocalQueue": {"spec": {"stopPolicy": "None"}},
}


def test_upstream_examples_cover_the_setup_kinds() -> None:
    kinds = [doc["kind"] for doc in _reference_examples()]
    assert kinds == [
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "AdmissionCheck",
        "MultiKueueConfig",
        "MultiKueueCluster",
    ]


@pytest.mark.parametrize("index", range(6))
def test_upstream_examples_round_trip(index: int) -> None:
    document = _reference_examples()[index]
    model = kind_for(document["kind"])
    obj = model.from_k8s(document)
    written = obj.to_k8s()
    assert written == _merged(document, SERVER_DEFAULTS.get(document["kind"], {}))
    again = model.from_k8s(written)
    assert again == obj
    assert again.to_k8s() == written
    assert json.loads(json.dumps(written)) == written


def test_upstream_examples_typed_access() -> None:
    by_kind = {doc["kind"]: kind_for(doc["kind"]).from_k8s(doc) for doc in _reference_examples()}
    cq = by_kind["ClusterQueue"]
    assert isinstance(cq, ClusterQueue)
    group = cq.spec.resource_groups[0]
    assert group.covered_resources == ["cpu", "memory"]
    quotas = {r.name: r.nominal_quota for r in group.flavors[0].resources}
    assert quotas == {"cpu": 9, "memory": 36 * 2**30}
    assert cq.spec.queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO
    assert cq.spec.stop_policy == "None"
    assert cq.spec.namespace_selector is not None and cq.spec.namespace_selector.match_labels is None
    assert cq.spec.admission_checks_strategy.admission_checks[0].name == "sample-multikueue"
    lq = by_kind["LocalQueue"]
    assert (lq.namespace, lq.spec.cluster_queue, lq.spec.stop_policy) == ("default", "cluster-queue", StopPolicy.NONE)
    ac = by_kind["AdmissionCheck"]
    assert ac.spec.controller_name == MultiKueue.CONTROLLER_NAME
    assert (ac.spec.parameters.api_group, ac.spec.parameters.kind) == ("kueue.x-k8s.io", MultiKueue.CONFIG_KIND)
    assert by_kind["MultiKueueConfig"].spec.clusters == ["multikueue-test-worker1"]
    mkc = by_kind["MultiKueueCluster"]
    assert mkc.spec.cluster_source.kube_config.location_type is LocationType.SECRET
    assert mkc.spec.cluster_source.kube_config.location == "worker1-secret"


def _full_workload() -> dict[str, Any]:
    """A Workload as the API server would return it after admission and dispatch."""
    template = {
        "metadata": {"labels": {"app": "train"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "250m", "memory": 1073741824}}}
            ],
            "nodeSelector": {"zone": "a"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "someFutureField": {"kept": True},
        },
    }
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "job-train-3c2b1",
            "namespace": "team-a",
            "uid": "7d0a-uid",
            "resourceVersion": "4711",
            "generation": 2,
            "creationTimestamp": "2025-01-02T03:04:05Z",
            "labels": {Labels.JOB_UID: "job-uid", Labels.MULTIKUEUE_ORIGIN: "multikueue"},
            "annotations": {"note": "x"},
            "finalizers": [Finalizers.RESOURCE_IN_USE],
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "train",
                    "uid": "job-uid",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [{"manager": "kueue", "operation": "Update", "apiVersion": "kueue.x-k8s.io/v1beta2"}],
        },
        "spec": {
            "active": True,
            "queueName": "user-queue",
            "priority": 100,
            "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"},
            "maximumExecutionTimeSeconds": 3600,
            "podSets": [
                {
                    "name": "main",
                    "count": 6,
                    "minCount": 2,
                    "template": template,
                    "topologyRequest": {"preferred": "rack", "podIndexLabel": "idx"},
                },
                {"name": "driver", "count": 1, "template": {"spec": {"containers": [{"name": "d"}]}}},
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "QuotaReserved",
                    "message": "Quota reserved in ClusterQueue cluster-queue",
                    "lastTransitionTime": "2025-01-02T03:04:06Z",
                    "observedGeneration": 2,
                },
                {
                    "type": "Admitted",
                    "status": "True",
                    "reason": "Admitted",
                    "message": "The workload is admitted",
                    "lastTransitionTime": "2025-01-02T03:04:09Z",
                },
            ],
            "admission": {
                "clusterQueue": "cluster-queue",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "flavors": {"cpu": "default-flavor", "memory": "default-flavor"},
                        "resourceUsage": {"cpu": "1500m", "memory": "6Gi"},
                        "count": 6,
                    },
                    {"name": "driver", "flavors": {"cpu": "default-flavor"}, "resourceUsage": {"cpu": 1}, "count": 1},
                ],
            },
            "admissionChecks": [
                {
                    "name": "sample-multikueue",
                    "state": "Ready",
                    "lastTransitionTime": "2025-01-02T03:04:09Z",
                    "message": 'The workload got reservation on "worker1"',
                    "podSetUpdates": [{"name": "main", "labels": {"a": "b"}, "tolerations": [{"operator": "Exists"}]}],
                    "retryCount": 1,
                }
            ],
            "requeueState": {"count": 1, "requeueAt": "2025-01-02T03:00:00Z"},
            "reclaimablePods": [{"name": "main", "count": 1}],
            "resourceRequests": [{"name": "main", "resources": {"cpu": "1500m", "memory": "6Gi"}}],
            "accumulatedPastExecutionTimeSeconds": 42,
            "schedulingStats": {"evictions": [{"reason": "AdmissionCheck", "underlyingCause": "", "count": 1}]},
            "clusterName": "worker1",
            "unhealthyNodes": [{"name": "node-1"}],
        },
    }


def test_full_workload_round_trips_exactly() -> None:
    document = _full_workload()
    workload = Workload.from_k8s(document)
    assert workload.to_k8s() == document
    assert Workload.from_k8s(workload.to_k8s()) == workload


def test_full_workload_typed_access() -> None:
    workload = Workload.from_k8s(_full_workload())
    assert (workload.name, workload.namespace) == ("job-train-3c2b1", "team-a")
    assert workload.metadata.creation_timestamp == datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert workload.metadata.owner_references[0].kind == "Job"
    assert workload.spec.pod_sets[0].template["spec"]["containers"][0]["image"] == "busybox"
    assert workload.has_quota_reservation and workload.is_admitted
    assert not workload.is_finished and not workload.is_evicted
    assignment = workload.status.admission.pod_set_assignments[0]
    assert assignment.resource_usage["cpu"] == Decimal("1.5")
    assert assignment.resource_usage["memory"] == 6 * 2**30
    check = workload.admission_check("sample-multikueue")
    assert check is not None and check.state is CheckState.READY
    assert workload.admission_check("missing") is None
    assert workload.condition(WorkloadConditionType.ADMITTED).reason == WorkloadReason.ADMITTED
    assert workload.status.cluster_name == "worker1"
    assert workload.status.accumulated_past_execution_time_seconds == 42


def test_unknown_fields_are_ignored_and_metadata_extras_kept() -> None:
    document = _full_workload()
    document["spec"]["fieldFromANewerKueue"] = {"x": 1}
    document["status"]["anotherNewField"] = 3
    document["status"]["admission"]["podSetAssignments"][0]["newThing"] = "y"
    workload = Workload.from_k8s(document)
    written = workload.to_k8s()
    assert "fieldFromANewerKueue" not in written["spec"]
    assert "anotherNewField" not in written["status"]
    assert written["metadata"]["managedFields"] == document["metadata"]["managedFields"]


def test_models_never_share_data_with_the_dicts_they_came_from_or_went_to() -> None:
    document = _full_workload()
    workload = Workload.from_k8s(MappingProxyType(document))  # any mapping, e.g. a kopf body
    workload.spec.pod_sets[0].template["spec"]["nodeSelector"]["zone"] = "b"
    assert document["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] == {"zone": "a"}
    written = workload.to_k8s()
    written["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"]["zone"] = "c"
    assert workload.spec.pod_sets[0].template["spec"]["nodeSelector"] == {"zone": "b"}


def test_an_owned_document_parses_alike_without_the_copy() -> None:
    """``owned=True`` (a decoded watch line or write answer) skips the copy: same model, parts may be shared."""
    document = _full_workload()
    owned = Workload.from_k8s(copy.deepcopy(document), owned=True)
    assert owned == Workload.from_k8s(document)
    assert owned.to_k8s() == document
    with pytest.raises(ValueError, match="expected kind Workload"):
        Workload.from_k8s({**copy.deepcopy(document), "kind": "Job"}, owned=True)


def test_from_k8s_refuses_other_kinds_and_versions() -> None:
    document = _full_workload()
    with pytest.raises(ValueError, match="expected kind ClusterQueue"):
        ClusterQueue.from_k8s(document)
    document["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    with pytest.raises(ValueError, match="v1beta2"):
        Workload.from_k8s(document)


def test_workload_built_in_python_gets_server_defaults() -> None:
    workload = Workload(
        metadata=ObjectMeta(name="wl", namespace="ns", labels={Labels.QUEUE_NAME: "user-queue"}),
        spec=WorkloadSpec(queue_name="user-queue", pod_sets=[PodSet(template={"spec": {"containers": []}})]),
    )
    assert workload.to_k8s() == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "ns", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {
            "active": True,
            "queueName": "user-queue",
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}],
        },
    }


def test_computed_quantities_are_written_canonically() -> None:
    assignment = PodSetAssignment(resource_usage={"cpu": Decimal("0.25") * 6, "memory": QuantityValue("1Gi") * 3})
    assert assignment.to_dict() == {"name": "main", "resourceUsage": {"cpu": "1500m", "memory": "3Gi"}}


def test_every_kind_declares_its_api_facts() -> None:
    facts = {model.kind: (model.api_version, model.plural, model.namespaced) for model in KINDS}
    assert facts == {
        "AdmissionCheck": ("kueue.x-k8s.io/v1beta2", "admissionchecks", False),
        "ClusterQueue": ("kueue.x-k8s.io/v1beta2", "clusterqueues", False),
        "Cohort": ("kueue.x-k8s.io/v1beta2", "cohorts", False),
        "LocalQueue": ("kueue.x-k8s.io/v1beta2", "localqueues", True),
        "MultiKueueCluster": ("kueue.x-k8s.io/v1beta2", "multikueueclusters", False),
        "MultiKueueConfig": ("kueue.x-k8s.io/v1beta2", "multikueueconfigs", False),
        "ResourceFlavor": ("kueue.x-k8s.io/v1beta2", "resourceflavors", False),
        "Workload": ("kueue.x-k8s.io/v1beta2", "workloads", True),
        "WorkloadPriorityClass": ("kueue.x-k8s.io/v1beta2", "workloadpriorityclasses", False),
    }
    assert {AdmissionCheck, ClusterQueue, Cohort, LocalQueue, MultiKueueCluster, MultiKueueConfig} <= set(KINDS)
    assert {ResourceFlavor, Workload, WorkloadPriorityClass} <= set(KINDS)


@pytest.mark.parametrize(
    "document",
    [
        {"kind": "WorkloadPriorityClass", "metadata": {"name": "high"}, "value": 1000, "description": "urgent"},
        {
            "kind": "Cohort",
            "metadata": {"name": "root"},
            "spec": {"parentName": "org", "fairSharing": {"weight": "1500m"}},
            "status": {"fairSharing": {"weightedShare": 12}},
        },
        {
            "kind": "ResourceFlavor",
            "metadata": {"name": "gpu"},
            "spec": {
                "nodeLabels": {"gpu": "a100"},
                "nodeTaints": [
                    {"key": "gpu", "value": "true", "effect": "NoSchedule", "timeAdded": "2025-01-01T00:00:00Z"}
                ],
                "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}],
                "topologyName": "default",
            },
        },
        {
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": "ns"},
            "spec": {"clusterQueue": "cq", "stopPolicy": "Hold", "fairSharing": {"weight": 2}},
            "status": {
                "pendingWorkloads": 1,
                "reservingWorkloads": 2,
                "admittedWorkloads": 2,
                "flavorsUsage": [{"name": "f", "resources": [{"name": "cpu", "total": "3"}]}],
                "fairSharing": {
                    "weightedShare": 5,
                    "admissionFairSharingStatus": {
                        "consumedResources": {"cpu": "10"},
                        "lastUpdate": "2025-01-01T00:00:00Z",
                    },
                },
                "conditions": [
                    {
                        "type": "Active",
                        "status": "True",
                        "reason": "Ready",
                        "message": "ok",
                        "lastTransitionTime": "2025-01-01T00:00:00Z",
                    }
                ],
            },
        },
        {
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "cohortName": "root",
                "queueingStrategy": "StrictFIFO",
                "stopPolicy": "HoldAndDrain",
                "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "a100",
                                "resources": [
                                    {
                                        "name": "nvidia.com/gpu",
                                        "nominalQuota": 8,
                                        "borrowingLimit": 4,
                                        "lendingLimit": "2",
                                    }
                                ],
                            }
                        ],
                    }
                ],
                "preemption": {
                    "withinClusterQueue": "LowerPriority",
                    "reclaimWithinCohort": "Any",
                    "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
                },
                "flavorFungibility": {
                    "whenCanBorrow": "TryNextFlavor",
                    "whenCanPreempt": "TryNextFlavor",
                    "preference": "BorrowingOverPreemption",
                },
                "fairSharing": {"weight": 1},
                "admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"},
                "concurrentAdmissionPolicy": {
                    "migration": {"mode": "TryPreferredFlavors", "constraints": {"lastAcceptableFlavorName": "a100"}}
                },
            },
            "status": {
                "pendingWorkloads": 3,
                "reservingWorkloads": 1,
                "admittedWorkloads": 1,
                "flavorsReservation": [
                    {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "total": "2", "borrowed": "0"}]}
                ],
                "flavorsUsage": [
                    {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "total": 2, "borrowed": 0}]}
                ],
                "fairSharing": {"weightedShare": 250},
                "conditions": [
                    {
                        "type": "Active",
                        "status": "False",
                        "reason": "FlavorNotFound",
                        "message": "missing",
                        "lastTransitionTime": "2025-01-01T00:00:00Z",
                    }
                ],
            },
        },
        {
            "kind": "MultiKueueCluster",
            "metadata": {"name": "w2"},
            "spec": {"clusterSource": {"clusterProfileRef": {"name": "profile"}}},
            "status": {
                "conditions": [
                    {
                        "type": "Active",
                        "status": "False",
                        "reason": "InsecureKubeConfig",
                        "message": "exec plugins are not allowed",
                        "lastTransitionTime": "2025-01-01T00:00:00Z",
                        "observedGeneration": 1,
                    }
                ]
            },
        },
        {
            "kind": "MultiKueueConfig",
            "metadata": {"name": "c"},
            "spec": {"clusters": ["w1", "w2"], "quotaManagement": "Manual"},
        },
    ],
    ids=lambda document: document["kind"],
)
def test_fully_specified_objects_round_trip(document: dict[str, Any]) -> None:
    document = {"apiVersion": "kueue.x-k8s.io/v1beta2", **document}
    obj = kind_for(document["kind"]).from_k8s(document)
    assert obj.to_k8s() == document


def test_empty_spec_and_status_are_left_out() -> None:
    queue = LocalQueue.from_k8s(
        {"metadata": {"name": "q", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}, "status": {}}
    )
    assert "status" not in queue.to_k8s()
    flavor = ResourceFlavor.from_k8s({"metadata": {"name": "f"}, "spec": {}})
    assert flavor.to_k8s() == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "f"},
    }


# --- conditions and time ---------------------------------------------------------


def test_set_condition_keeps_the_transition_time_while_the_status_holds() -> None:
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    conditions: list[Condition] = []
    assert set_condition(
        conditions, Condition(type=ACTIVE, status="False", reason="BadConfig", last_transition_time=t0)
    )
    later = t0 + timedelta(minutes=5)
    assert set_condition(
        conditions,
        Condition(
            type=ACTIVE, status="False", reason="ClientConnectionFailed", message="no route", last_transition_time=later
        ),
    )
    assert conditions[0].last_transition_time == t0
    assert conditions[0].reason == MultiKueueClusterReason.CLIENT_CONNECTION_FAILED
    assert not set_condition(
        conditions,
        Condition(
            type=ACTIVE, status="False", reason="ClientConnectionFailed", message="no route", last_transition_time=later
        ),
    )
    assert set_condition(
        conditions, Condition(type=ACTIVE, status=ConditionStatus.TRUE, reason="Active", last_transition_time=later)
    )
    assert conditions[0].last_transition_time == later
    assert len(conditions) == 1
    assert find_condition(conditions, ACTIVE) is conditions[0]
    assert remove_condition(conditions, ACTIVE)
    assert not remove_condition(conditions, ACTIVE)


def test_condition_defaults_are_api_valid() -> None:
    condition = Condition(type=WorkloadConditionType.FINISHED, status="True", reason=WorkloadReason.SUCCEEDED)
    written = condition.to_dict()
    assert set(written) == {"type", "status", "reason", "message", "lastTransitionTime"}
    assert written["message"] == ""
    assert written["lastTransitionTime"].endswith("Z")


def test_times_are_written_in_utc_with_whole_seconds() -> None:
    assert format_time(datetime(2025, 1, 2, 3, 4, 5, 678, tzinfo=UTC)) == "2025-01-02T03:04:05Z"
    assert format_time(datetime(2025, 1, 2, 3, 4, 5)) == "2025-01-02T03:04:05Z"
    plus_two = timezone(timedelta(hours=2))
    assert format_time(datetime(2025, 1, 2, 5, 4, 5, tzinfo=plus_two)) == "2025-01-02T03:04:05Z"
    meta = ObjectMeta.model_validate({"creationTimestamp": "2025-01-02T05:04:05+02:00"})
    assert meta.creation_timestamp == datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert meta.creation_timestamp.tzinfo is UTC


# --- constants ---------------------------------------------------------------------


def test_constants_match_upstream_values() -> None:
    assert Labels.QUEUE_NAME == "kueue.x-k8s.io/queue-name"
    assert Labels.PRIORITY_CLASS == "kueue.x-k8s.io/priority-class"
    assert Labels.PREBUILT_WORKLOAD_NAME == "kueue.x-k8s.io/prebuilt-workload-name"
    assert Labels.MULTIKUEUE_ORIGIN == "kueue.x-k8s.io/multikueue-origin"
    assert Labels.JOB_UID == "kueue.x-k8s.io/job-uid"
    assert Annotations.MULTIKUEUE_ORIGIN_UID == "kueue.x-k8s.io/multikueue-origin-uid"
    assert Finalizers.RESOURCE_IN_USE == "kueue.x-k8s.io/resource-in-use"
    assert MultiKueue.MANAGED_BY == MultiKueue.CONTROLLER_NAME == "kueue.x-k8s.io/multikueue"
    assert Dispatcher.ALL_AT_ONCE == "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
    assert Dispatcher.INCREMENTAL == "kueue.x-k8s.io/multikueue-dispatcher-incremental"
    assert [t.value for t in WorkloadConditionType] == [
        "QuotaReserved",
        "Admitted",
        "Finished",
        "Evicted",
        "Preempted",
        "Requeued",
        "PodsReady",
        "DeactivationTarget",
    ]
    assert [s.value for s in CheckState] == ["Pending", "Ready", "Retry", "Rejected"]
    assert ACTIVE == "Active"
    assert WorkloadReason.EVICTED_BY_ADMISSION_CHECK == "AdmissionCheck"
    assert (
        reason_with_cause(WorkloadReason.DEACTIVATED, "AdmissionCheck")
        == WorkloadReason.DEACTIVATED_DUE_TO_ADMISSION_CHECK
    )
    assert ClusterQueueReason.ADMISSION_CHECK_INACTIVE == "AdmissionCheckInactive"
    assert LocalQueueReason.CLUSTER_QUEUE_IS_INACTIVE == "ClusterQueueIsInactive"
    assert AdmissionCheckReason.NO_USABLE_CLUSTERS == "NoUsableClusters"
    assert MultiKueueClusterReason.INSECURE_KUBECONFIG == "InsecureKubeConfig"


def test_importing_the_api_has_no_side_effects() -> None:
    code = (
        "import sys, multikueue.api, multikueue.api.crdgen;"
        "heavy = sorted(m for m in ('kopf', 'kubernetes', 'celpy') if m in sys.modules);"
        "print(heavy)"
    )
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo)
    assert result.stdout.strip() == "[]"
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("resource_version", "number"),
    [("1", 1), ("123456789012345678901234567890", 123456789012345678901234567890), ("0", None), ("012", None),
     ("", None), (None, None), ("12a", None), ("-3", None), (" 5", None), ("\u00b2", None)],
)
def test_a_resource_version_is_a_number_only_as_kep_5504_defines_it(resource_version: str | None, number: int | None) -> None:
    assert version_number(resource_version) == number
