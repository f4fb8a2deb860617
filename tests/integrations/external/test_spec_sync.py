"""``specSync``: spec fields the manager's object pushes to the worker copy (a PipelineRun cancelled on the manager)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from multikueue.api.constants import MultiKueue
from multikueue.integrations.batchjob.adapter import BatchJobAdapter
from multikueue.integrations.external.adapter import GenericAdapter, default_resource_ref
from multikueue.integrations.external.entries import load_frameworks
from multikueue.integrations.patch import apply_merge_patch

pytestmark = pytest.mark.unit

CATALOG = Path(__file__).resolve().parents[3] / "adapters"
TEKTON = "PipelineRun.v1.tekton.dev"


def adapter(entry: dict[str, Any]) -> GenericAdapter:
    loaded = load_frameworks([entry])
    assert [str(p) for p in loaded.problems] == []
    compiled = loaded.frameworks[entry["name"]]
    return GenericAdapter(compiled, default_resource_ref(compiled))


def catalog_adapter() -> GenericAdapter:
    return adapter(yaml.safe_load((CATALOG / "tekton-pipelinerun.yaml").read_text()))


def problems(entry: dict[str, Any]) -> list[str]:
    return [str(p) for p in load_frameworks([entry]).problems]


def pipeline_run(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": {"name": "pr", "namespace": "team-a"},
        "spec": {"managedBy": MultiKueue.MANAGED_BY, "pipelineRef": {"name": "build"}, **spec},
    }


def worker_copy(local: dict[str, Any]) -> dict[str, Any]:
    return catalog_adapter().remote_copy(local, origin="multikueue", workload_name="pipelinerun-pr-1")


def test_the_catalog_entry_syncs_spec_status() -> None:
    assert [p.canonical for p in catalog_adapter().framework.spec_sync] == ["$.spec.status"]


def test_a_cancellation_on_the_manager_reaches_the_worker_copy() -> None:
    local = pipeline_run()
    remote = worker_copy(local)
    del remote["spec"]["status"]  # released on the worker: it runs
    local["spec"]["status"] = "Cancelled"
    patch = catalog_adapter().spec_patch(local, remote)
    assert patch == {"spec": {"status": "Cancelled"}}
    assert apply_merge_patch(remote, patch)["spec"]["status"] == "Cancelled"


def test_a_held_copy_is_cancelled_too() -> None:
    local = pipeline_run(status="CancelledRunFinally")
    remote = worker_copy(pipeline_run())
    assert remote["spec"]["status"] == "PipelineRunPending"
    assert catalog_adapter().spec_patch(local, remote) == {"spec": {"status": "CancelledRunFinally"}}


def test_nothing_to_push_once_the_copy_has_it() -> None:
    local = pipeline_run(status="Cancelled")
    remote = copy.deepcopy(local)
    del remote["spec"]["managedBy"]
    assert catalog_adapter().spec_patch(local, remote) is None


def test_a_field_absent_on_the_manager_is_left_as_the_worker_has_it() -> None:
    """The hold on a copy, or a value the framework filled in, is not the manager's to delete."""
    local = pipeline_run()
    held = worker_copy(local)
    assert catalog_adapter().spec_patch(local, held) is None
    local["spec"]["status"] = None
    assert catalog_adapter().spec_patch(local, held) is None


def test_the_hold_value_is_never_pushed() -> None:
    """A PipelineRun created pending on the manager must not hold its released copy again."""
    local = pipeline_run(status="PipelineRunPending")
    released = worker_copy(local)
    del released["spec"]["status"]
    assert catalog_adapter().spec_patch(local, released) is None


def test_without_spec_sync_nothing_is_pushed() -> None:
    plain = adapter({"name": TEKTON})
    local = pipeline_run(status="Cancelled")
    assert plain.spec_patch(local, pipeline_run()) is None


def test_maps_are_merged_into_the_copys_never_deleted() -> None:
    entry = {"name": "Widget.v1alpha1.example.com", "specSync": ["$.spec.limits"]}
    widgets = adapter(entry)
    local = {"metadata": {"name": "w"}, "spec": {"limits": {"cpu": "2", "deadline": {"seconds": 10}}}}
    remote = {"metadata": {"name": "w"}, "spec": {"limits": {"cpu": "1", "memory": "1Gi", "deadline": {"seconds": 10, "grace": 1}}}}
    assert widgets.spec_patch(local, remote) == {"spec": {"limits": {"cpu": "2"}}}
    remote["spec"]["limits"]["cpu"] = "2"
    assert widgets.spec_patch(local, remote) is None


def test_several_paths_make_one_patch() -> None:
    entry = {"name": "Widget.v1alpha1.example.com", "specSync": ["$.spec.stop", "$.spec.control.pause"], "managedBy": "$.spec.control.managedBy"}
    widgets = adapter(entry)
    local = {"metadata": {"name": "w"}, "spec": {"stop": True, "control": {"pause": "now", "managedBy": MultiKueue.MANAGED_BY}}}
    remote = {"metadata": {"name": "w"}, "spec": {"control": {}}}
    assert widgets.spec_patch(local, remote) == {"spec": {"stop": True, "control": {"pause": "now"}}}


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("$.status.phase", "not a field under $.spec"),
        ("$.spec", "not a field under $.spec"),
        ("$.metadata.labels", "not a field under $.spec"),
        ("$.spec.tasks[0]", "list index"),
        ("$.spec.managedBy", "managedBy"),
        ("$.spec.(", ""),
    ],
)
def test_bad_spec_sync_paths_are_problems_of_the_entry(path: str, message: str) -> None:
    found = problems({"name": TEKTON, "specSync": [path]})
    assert len(found) == 1 and found[0].startswith(f"externalFrameworks[{TEKTON}].specSync[0]:")
    assert message in found[0]


def test_a_path_above_managed_by_is_refused() -> None:
    entry = {"name": "Widget.v1alpha1.example.com", "managedBy": "$.spec.control.managedBy", "specSync": ["$.spec.control"]}
    [problem] = problems(entry)
    assert "managedBy" in problem


def test_the_job_adapter_never_pushes_spec() -> None:
    job = {"metadata": {"name": "j", "namespace": "ns"}, "spec": {"suspend": False}}
    assert BatchJobAdapter().spec_patch(job, {**job, "spec": {"suspend": True}}) is None
