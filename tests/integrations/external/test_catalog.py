"""The adapter catalog: upstream-style entries that load without problems and judge finish right."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from multikueue.integrations.external.entries import CompiledFramework, load_frameworks
from multikueue.integrations.external.adapter import GenericAdapter, default_resource_ref
from multikueue.api.constants import MultiKueue

pytestmark = pytest.mark.unit

CATALOG = Path(__file__).resolve().parents[3] / "adapters"  # tests/integrations/external/ -> the checkout
GVK = re.compile(r"^(?P<kind>[A-Z][A-Za-z0-9]*)\.(?P<version>v[0-9]+(?:(?:alpha|beta)[0-9]+)?)\.(?P<group>[a-z0-9.-]+\.[a-z]+)$")


def entries() -> list[Path]:
    return sorted(CATALOG.glob("*.yaml"))


def load(name: str) -> CompiledFramework:
    entry = yaml.safe_load((CATALOG / name).read_text())
    loaded = load_frameworks([entry])
    assert [str(p) for p in loaded.problems] == []
    return loaded.frameworks[entry["name"]]


def test_catalog_is_not_empty() -> None:
    assert len(entries()) >= 5


@pytest.mark.parametrize("path", entries(), ids=lambda p: p.name)
def test_entry_names_a_gvk_first(path: Path) -> None:
    entry = yaml.safe_load(path.read_text())
    assert isinstance(entry, dict) and set(entry) >= {"name"}
    assert next(iter(entry)) == "name", "upstream-style: name comes first"
    assert GVK.match(entry["name"]), f"{path.name}: {entry['name']!r} is not Kind.version.group"


@pytest.mark.parametrize("path", entries(), ids=lambda p: p.name)
def test_entry_loads_without_problems(path: Path) -> None:
    entry = yaml.safe_load(path.read_text())
    loaded = load_frameworks([entry])
    assert [str(p) for p in loaded.problems] == []
    assert list(loaded.frameworks) == [entry["name"]]


#: Catalog files that are alternatives to another file for the same GVK (a Configuration lists a GVK once).
ALTERNATIVES = {"tekton-pipelinerun-tekton-kueue.yaml": "tekton-pipelinerun.yaml"}


def test_the_whole_catalog_loads_as_one_configuration() -> None:
    paths = [path for path in entries() if path.name not in ALTERNATIVES]
    loaded = load_frameworks([yaml.safe_load(path.read_text()) for path in paths])
    assert loaded.ok and len(loaded.frameworks) == len(paths)


@pytest.mark.parametrize(("alternative", "original"), sorted(ALTERNATIVES.items()))
def test_alternatives_replace_an_entry_of_the_same_gvk(alternative: str, original: str) -> None:
    assert yaml.safe_load((CATALOG / alternative).read_text())["name"] == yaml.safe_load((CATALOG / original).read_text())["name"]


def test_readme_lists_and_documents_everything() -> None:
    readme = (CATALOG / "README.md").read_text()
    for path in entries():
        assert f"`{path.name}`" in readme
    for field in ("managedBy", "workload", "podSets", "queueName", "priorityClass", "creationPatches",
                  "statusSync", "finished", "succeeded", "hold"):
        assert f"`{field}`" in readme, field


def condition(kind: str, status: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": "R", "lastTransitionTime": "2024-01-01T00:00:00Z"}


def with_conditions(*items: tuple[str, str]) -> dict[str, Any]:
    return {"status": {"conditions": [condition(t, s) for t, s in items]}}


TEKTON_CASES = [
    ({}, (False, False)),
    ({"status": {}}, (False, False)),
    (with_conditions(("Succeeded", "Unknown")), (False, False)),
    (with_conditions(("Succeeded", "True")), (True, True)),
    (with_conditions(("Succeeded", "False")), (True, False)),
]
CASES: dict[str, list[tuple[dict[str, Any], tuple[bool, bool]]]] = {
    "tekton-pipelinerun.yaml": TEKTON_CASES,
    "tekton-pipelinerun-tekton-kueue.yaml": TEKTON_CASES,
    "tekton-taskrun.yaml": TEKTON_CASES,
    "jobset.yaml": [
        ({}, (False, False)),
        (with_conditions(("StartupPolicyInProgress", "True")), (False, False)),
        (with_conditions(("Suspended", "False"), ("Completed", "True")), (True, True)),
        (with_conditions(("Failed", "True")), (True, False)),
        (with_conditions(("Completed", "False")), (False, False)),
    ],
    "rayjob.yaml": [
        ({}, (False, False)),
        ({"status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}}, (False, False)),
        ({"status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}}, (True, True)),
        ({"status": {"jobDeploymentStatus": "Complete", "jobStatus": "FAILED"}}, (True, False)),
        ({"status": {"jobDeploymentStatus": "Failed"}}, (True, False)),
        ({"status": {"jobDeploymentStatus": "Suspended"}}, (False, False)),
    ],
    "kubeflow-trainjob.yaml": [
        ({}, (False, False)),
        (with_conditions(("Created", "True")), (False, False)),
        (with_conditions(("Created", "True"), ("Complete", "True")), (True, True)),
        (with_conditions(("Failed", "True")), (True, False)),
    ],
}


def test_every_catalog_file_has_finish_cases() -> None:
    assert sorted(CASES) == sorted(path.name for path in entries())


@pytest.mark.parametrize(
    ("name", "obj", "expected"),
    [(name, obj, expected) for name, cases in CASES.items() for obj, expected in cases],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_finished_and_succeeded(name: str, obj: dict[str, Any], expected: tuple[bool, bool]) -> None:
    framework = load(name)
    adapter = GenericAdapter(framework, default_resource_ref(framework))
    assert adapter.finished(obj) == expected


@pytest.mark.parametrize(
    ("name", "field", "value", "resource"),
    [
        ("tekton-pipelinerun.yaml", ("spec", "status"), "PipelineRunPending", "pipelineruns.tekton.dev"),
        ("tekton-taskrun.yaml", None, None, "taskruns.tekton.dev"),
        ("jobset.yaml", ("spec", "suspend"), True, "jobsets.jobset.x-k8s.io"),
        ("rayjob.yaml", ("spec", "suspend"), True, "rayjobs.ray.io"),
        ("kubeflow-trainjob.yaml", ("spec", "suspend"), True, "trainjobs.trainer.kubeflow.org"),
    ],
)
def test_worker_copy_is_held_and_counted(
    name: str, field: tuple[str, str] | None, value: Any, resource: str
) -> None:
    framework = load(name)
    adapter = GenericAdapter(framework, default_resource_ref(framework))
    obj = {
        "apiVersion": framework.api_version,
        "kind": framework.kind,
        "metadata": {"name": "x", "namespace": "ns"},
        "spec": {"managedBy": MultiKueue.MANAGED_BY},
    }
    assert adapter.managed_by_multikueue(obj)
    remote = adapter.remote_copy(obj, origin="o", workload_name="wl")
    assert "managedBy" not in remote["spec"]
    if field is None:
        assert not adapter.is_held(remote) and remote["spec"] == {}
    else:
        assert remote[field[0]][field[1]] == value and adapter.is_held(remote)
        assert adapter.release_patch(remote) == {field[0]: {field[1]: None}}
    requests = adapter.pod_sets(obj)[0]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {resource: "1"}
