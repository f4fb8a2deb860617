"""Workloads for external-framework objects: create, finish, release the hold (pure decisions)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from multikueue.integrations.external.entries import load_frameworks
from multikueue.integrations.external.adapter import GenericAdapter, default_resource_ref
from multikueue.api import Workload
from multikueue.api.constants import Finalizers, Labels, MultiKueue
from multikueue.integrations.external import workload as external
from multikueue.integrations.external.workload import ExternalStep, decide

pytestmark = pytest.mark.unit

ENTRY: dict[str, Any] = {
    "name": "PipelineRun.v1.tekton.dev",
    "workload": {},
    "finished": 'has(object.status) && object.status.conditions.exists(c, c.type == "Succeeded" && c.status != "Unknown")',
    "succeeded": 'object.status.conditions.exists(c, c.type == "Succeeded" && c.status == "True")',
    "hold": {"path": "$.spec.status", "value": "PipelineRunPending"},
}


def adapter(entry: dict[str, Any] = ENTRY) -> GenericAdapter:
    loaded = load_frameworks([entry])
    assert loaded.problems == []
    compiled = loaded.frameworks[entry["name"]]
    return GenericAdapter(compiled, default_resource_ref(compiled, plural="pipelineruns"))


def run(*, status: str | None = None, prebuilt: str | None = None, held: bool = False, queue: str | None = "user-queue") -> dict[str, Any]:
    labels = {}
    if queue:
        labels[Labels.QUEUE_NAME] = queue
    if prebuilt:
        labels[Labels.PREBUILT_WORKLOAD_NAME] = prebuilt
    obj: dict[str, Any] = {
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": {"name": "pr", "namespace": "ns", "uid": "u-1", "labels": labels},
        "spec": {"managedBy": MultiKueue.MANAGED_BY, **({"status": "PipelineRunPending"} if held else {})},
    }
    if status:
        obj["status"] = {"conditions": [{"type": "Succeeded", "status": status}]}
    return obj


def workload(name: str, *, admitted: bool = False, finished: bool = False) -> Workload:
    conditions = []
    if admitted:
        conditions += [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ]
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})
    return Workload.from_k8s(
        {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}, "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {}}]}, "status": {"conditions": conditions}}
    )


def test_a_queued_object_gets_a_workload_it_owns() -> None:
    action = decide(adapter(), run(), None, priority=5)
    assert action.step is ExternalStep.CREATE_WORKLOAD and action.workload is not None
    wl = action.workload
    assert wl.name == external.workload_name(adapter(), run()) and wl.name.startswith("pipelinerun-pr-")
    owner = wl.metadata.owner_references[0]
    assert (owner.api_version, owner.kind, owner.name, owner.uid, owner.controller) == ("tekton.dev/v1", "PipelineRun", "pr", "u-1", True)
    assert wl.spec.queue_name == "user-queue" and wl.spec.priority == 5
    assert Finalizers.RESOURCE_IN_USE in (wl.metadata.finalizers or [])
    template = wl.to_k8s()["spec"]["podSets"][0]["template"]
    assert template["spec"]["containers"][0]["resources"]["requests"] == {"pipelineruns.tekton.dev": "1"}


def test_no_workload_without_a_queue_or_the_workload_field_or_for_a_finished_object() -> None:
    assert decide(adapter(), run(queue=None), None).step is ExternalStep.NONE
    assert decide(adapter({"name": "PipelineRun.v1.tekton.dev"}), run(), None).step is ExternalStep.NONE
    assert decide(adapter(), run(status="True"), None).step is ExternalStep.NONE


def test_the_workload_finishes_with_the_object() -> None:
    wl = workload("w", admitted=True)
    assert decide(adapter(), run(status="Unknown"), wl).step is ExternalStep.NONE
    done = decide(adapter(), run(status="True"), wl)
    assert done.step is ExternalStep.FINISH_WORKLOAD and done.condition is not None and done.condition.reason == "Succeeded"
    failed = decide(adapter(), run(status="False"), wl)
    assert failed.condition is not None and failed.condition.reason == "Failed"
    assert decide(adapter(), run(status="True"), workload("w", finished=True)).step is ExternalStep.NONE


def test_an_object_being_deleted_finishes_the_workload_it_owns_and_gets_no_new_one() -> None:
    """Upstream's FinishOrphanedWorkloads: a finalizer keeping the object does not keep its quota."""
    deleting = run()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    owned = decide(adapter(), run(), None).workload
    assert owned is not None
    done = decide(adapter(), deleting, owned)
    assert done.step is ExternalStep.FINISH_WORKLOAD and done.condition is not None
    assert (done.condition.type, done.condition.status, done.condition.reason) == ("Finished", "True", "OwnerNotFound")
    assert done.condition.message == "The workload's owner no longer exists"
    assert decide(adapter(), deleting, None).step is ExternalStep.NONE
    # Not its own (a prebuilt Workload has no owner), already finished, or itself being deleted: left alone.
    assert decide(adapter(), deleting, workload("w", admitted=True)).step is ExternalStep.NONE
    finished = owned.model_copy(deep=True)
    finished.status = workload("w", finished=True).status
    assert decide(adapter(), deleting, finished).step is ExternalStep.NONE
    going = owned.model_copy(deep=True)
    going.metadata.deletion_timestamp = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    assert decide(adapter(), deleting, going).step is ExternalStep.NONE


def test_a_worker_copy_is_released_once_its_prebuilt_workload_is_admitted() -> None:
    held = run(prebuilt="wl-1", held=True, queue=None)
    assert external.workload_name(adapter(), held) == "wl-1"
    assert decide(adapter(), held, None).step is ExternalStep.NONE
    assert decide(adapter(), held, workload("wl-1")).step is ExternalStep.NONE
    release = decide(adapter(), held, workload("wl-1", admitted=True))
    assert release.step is ExternalStep.RELEASE_HOLD and release.patch == {"spec": {"status": None}}
    assert decide(adapter(), run(prebuilt="wl-1", queue=None), workload("wl-1", admitted=True)).step is ExternalStep.NONE


def test_only_an_entry_with_finished_can_tell_when_the_worker_copy_finished() -> None:
    assert adapter().tells_finished
    assert not adapter({"name": "PipelineRun.v1.tekton.dev"}).tells_finished
