"""adapters/tekton-pipelinerun-tekton-kueue.yaml builds the Workload tekton-kueue builds for a PipelineRun.

tekton-kueue (github.com/konflux-ci/tekton-kueue, commit 017b8bd1,
internal/controller/pipelinerun_controller.go) gives every PipelineRun one pod
set ``pod-set-1`` of count 1 whose one container, ``dummy`` with image
``dummy``, requests 1 of ``tekton.dev/pipelineruns`` plus one request per
``kueue.konflux-ci.dev/requests-<resource>`` annotation. Upstream Kueue on a
worker compares a prebuilt Workload's pod sets with those (count, minCount,
containers with Semantic.DeepEqual: name, image and requests all count), so
the expected values below are written out as tekton-kueue's Go code makes
them, not derived from the entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from multikueue.api.constants import Labels, MultiKueue
from multikueue.integrations.external import workload as external
from multikueue.integrations.external.adapter import GenericAdapter, default_resource_ref
from multikueue.integrations.external.cel import CelEvaluationError
from multikueue.integrations.external.entries import load_frameworks, parse_pod_sets

pytestmark = pytest.mark.unit

ENTRY = Path(__file__).resolve().parents[3] / "adapters" / "tekton-pipelinerun-tekton-kueue.yaml"
PREFIX = "kueue.konflux-ci.dev/requests-"


def adapter() -> GenericAdapter:
    entry = yaml.safe_load(ENTRY.read_text())
    loaded = load_frameworks([entry])
    assert [str(p) for p in loaded.problems] == []
    framework = loaded.frameworks["PipelineRun.v1.tekton.dev"]
    return GenericAdapter(framework, default_resource_ref(framework))


def pipelinerun(annotations: dict[str, str] | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "build-42",
        "namespace": "team-a",
        "uid": "11111111-2222-4333-8444-555555555555",
        "labels": {Labels.QUEUE_NAME: "pipelines", **labels},
    }
    if annotations is not None:
        meta["annotations"] = annotations
    return {
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": meta,
        "spec": {"managedBy": MultiKueue.MANAGED_BY, "pipelineRef": {"name": "build"}},
    }


def tekton_kueue_pod_sets(requests: dict[str, str]) -> list[dict[str, Any]]:
    """PipelineRun.PodSets() of tekton-kueue, as the Workload's JSON."""
    return [
        {
            "name": "pod-set-1",
            "count": 1,
            "template": {
                "spec": {"containers": [{"name": "dummy", "image": "dummy", "resources": {"requests": requests}}]}
            },
        }
    ]


def test_workload_with_request_annotations_has_tekton_kueues_shape() -> None:
    obj = pipelinerun(
        {
            PREFIX + "cpu": "2",
            PREFIX + "memory": "4Gi",
            PREFIX + "ephemeral-storage": "10Gi",
            PREFIX + "storage": "1Gi",
            "pipelinesascode.tekton.dev/event-type": "push",  # not a request
        },
        **{Labels.PRIORITY_CLASS: "high"},
    )
    action = external.decide(adapter(), obj, None, priority=100)
    assert action.step is external.ExternalStep.CREATE_WORKLOAD and action.workload is not None
    body = action.workload.to_k8s()
    assert body["spec"]["podSets"] == tekton_kueue_pod_sets(
        {"tekton.dev/pipelineruns": "1", "cpu": "2", "memory": "4Gi", "ephemeral-storage": "10Gi", "storage": "1Gi"}
    )
    # Queue from tekton-kueue's label (common.QueueLabel), priority class from Kueue's label.
    assert body["spec"]["queueName"] == "pipelines"
    assert body["spec"]["priorityClassRef"]["name"] == "high" and body["spec"]["priority"] == 100
    # Upstream's Workload name for a PipelineRun, as jobframework names tekton-kueue's.
    assert body["metadata"]["name"].startswith("pipelinerun-build-42-")


@pytest.mark.parametrize("annotations", [None, {}, {"other": "x"}], ids=["none", "empty", "unrelated"])
def test_without_request_annotations_only_the_pipelinerun_count(annotations: dict[str, str] | None) -> None:
    assert adapter().pod_sets(pipelinerun(annotations)) == tekton_kueue_pod_sets({"tekton.dev/pipelineruns": "1"})


def test_a_bad_quantity_is_an_error_naming_the_entry() -> None:
    # tekton-kueue refuses it too (UnretryableError "invalid resource quantity in annotation ...").
    with pytest.raises(CelEvaluationError, match=r"externalFrameworks\[PipelineRun.v1.tekton.dev\].workload.podSets"):
        adapter().pod_sets(pipelinerun({PREFIX + "cpu": "two"}))


def test_worker_copy_is_held_like_tekton_kueues_webhook() -> None:
    a = adapter()
    copy_ = a.remote_copy(pipelinerun({PREFIX + "cpu": "2"}), origin="hub", workload_name="wl")
    assert copy_["spec"]["status"] == "PipelineRunPending"  # the webhook's PipelineRunSpecStatusPending
    assert "managedBy" not in copy_["spec"]
    assert copy_["metadata"]["labels"][Labels.QUEUE_NAME] == "pipelines"
    assert copy_["metadata"]["labels"][Labels.PREBUILT_WORKLOAD_NAME] == "wl"
    # The annotations go along, so tekton-kueue on the worker derives the same requests.
    assert copy_["metadata"]["annotations"] == {PREFIX + "cpu": "2"}
    assert a.release_patch(copy_) == {"spec": {"status": None}}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({}, (False, False)),
        ({"conditions": [{"type": "Succeeded", "status": "Unknown", "reason": "Running"}]}, (False, False)),
        ({"conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}]}, (True, True)),
        ({"conditions": [{"type": "Succeeded", "status": "True", "reason": "Completed"}]}, (True, True)),
        ({"conditions": [{"type": "Succeeded", "status": "False", "reason": "Failed"}]}, (True, False)),
        ({"conditions": [{"type": "Succeeded", "status": "False", "reason": "Cancelled"}]}, (True, False)),
    ],
)
def test_finished_as_tekton_kueue(status: dict[str, Any], expected: tuple[bool, bool]) -> None:
    assert adapter().finished({**pipelinerun(), "status": status}) == expected


def test_container_name_and_image_keys() -> None:
    (spec,) = parse_pod_sets([{"name": "a", "count": 1, "requests": {}, "containerName": "dummy", "image": "dummy"}])
    assert (spec.container_name, spec.image) == ("dummy", "dummy")
    (spec,) = parse_pod_sets([{"name": "a", "count": 1, "requests": {}}])
    assert (spec.container_name, spec.image) == (None, None)
    with pytest.raises(ValueError, match="containerName 'Dummy' must be a DNS label"):
        parse_pod_sets([{"name": "a", "count": 1, "requests": {}, "containerName": "Dummy"}])
    with pytest.raises(ValueError, match="image must be a non-empty string"):
        parse_pod_sets([{"name": "a", "count": 1, "requests": {}, "image": ""}])
