"""``multikueue config preview ENTRY-FILE OBJECT-FILE``: the manager's Workload and worker copy, no cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from multikueue.api.constants import Labels, MultiKueue
from multikueue.cli.main import main
from multikueue.integrations.external import workload as external
from multikueue.integrations.external.adapter import GenericAdapter, default_resource_ref
from multikueue.integrations.external.entries import load_frameworks

pytestmark = pytest.mark.unit

CATALOG = Path(__file__).parents[2] / "adapters"
TEKTON = CATALOG / "tekton-pipelinerun.yaml"

#: A PipelineRun shaped like Tekton's docs (inline pipelineSpec, two tasks, params, a result), queued and
#: handed to MultiKueue.
PIPELINERUN = """\
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata:
  name: hello-goodbye-run
  namespace: team-a
  uid: 6f0e9d2c-0000-4000-8000-000000000001
  labels:
    kueue.x-k8s.io/queue-name: pipelines
spec:
  managedBy: kueue.x-k8s.io/multikueue
  params:
  - name: username
    value: Tekton
  pipelineSpec:
    params:
    - name: username
      type: string
    results:
    - name: greeting
      value: $(tasks.goodbye.results.greeting)
    tasks:
    - name: hello
      taskSpec:
        steps:
        - name: hello
          image: ubuntu
          script: echo "Hello World"
    - name: goodbye
      runAfter: [hello]
      params:
      - name: username
        value: $(params.username)
      taskSpec:
        params:
        - name: username
          type: string
        results:
        - name: greeting
        steps:
        - name: goodbye
          image: ubuntu
          script: echo -n "Goodbye $(params.username)!" | tee $(results.greeting.path)
"""

WIDGET_ENTRY = """\
name: Widget.v1alpha1.example.com
workload:
  podSets: '[{"name": "driver", "count": 1, "requests": {"cpu": "500m"}}]'
creationPatches:
- '{"metadata": {"annotations": {"example.com/dispatched-by": "multikueue"}}}'
- '{"spec": {"serviceAccountName": "runner-" + object.metadata.namespace}}'
"""

WIDGET = """\
apiVersion: example.com/v1alpha1
kind: Widget
metadata: {name: w, namespace: ns, labels: {kueue.x-k8s.io/queue-name: q}}
spec: {managedBy: kueue.x-k8s.io/multikueue, size: 3}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, list[str]]:
    code = main(["config", "preview", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.splitlines()


def documents(out: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(out) if doc is not None]


def test_tekton_catalog_entry_on_a_docs_pipelinerun(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obj = write(tmp_path, "plr.yaml", PIPELINERUN)
    code, out, err = run(capsys, TEKTON, obj)
    assert (code, err) == (0, [])
    wl, copy_ = documents(out)
    assert out.startswith("# Workload the manager creates for PipelineRun team-a/hello-goodbye-run\n")
    assert wl["kind"] == "Workload" and wl["metadata"]["namespace"] == "team-a"
    assert wl["metadata"]["name"].startswith("pipelinerun-hello-goodbye-run-")
    assert wl["metadata"]["ownerReferences"][0]["uid"] == "6f0e9d2c-0000-4000-8000-000000000001"
    assert wl["spec"]["queueName"] == "pipelines"
    assert wl["spec"]["podSets"] == [
        {
            "name": "main",
            "count": 1,
            "template": {"spec": {"containers": [{"name": "main", "resources": {"requests": {"pipelineruns.tekton.dev": "1"}}}]}},
        }
    ]
    # The worker copy: managedBy gone, held, bound to the Workload, the rest of the spec as given.
    assert copy_["kind"] == "PipelineRun" and copy_["metadata"]["name"] == "hello-goodbye-run"
    assert "managedBy" not in copy_["spec"]
    assert copy_["spec"]["status"] == "PipelineRunPending"
    assert copy_["metadata"]["labels"][Labels.PREBUILT_WORKLOAD_NAME] == wl["metadata"]["name"]
    assert copy_["metadata"]["labels"][Labels.MULTIKUEUE_ORIGIN] == "multikueue"
    source = yaml.safe_load(PIPELINERUN)
    assert copy_["spec"]["pipelineSpec"] == source["spec"]["pipelineSpec"]
    assert copy_["spec"]["params"] == source["spec"]["params"]
    assert "uid" not in copy_["metadata"]


def test_output_is_what_the_controller_code_gives(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Same functions as the reconciler (decide) and the applier (remote_copy): nothing re-implemented."""
    obj = write(tmp_path, "plr.yaml", PIPELINERUN)
    code, out, _ = run(capsys, TEKTON, obj, "-o", "json", "--origin", "hub")
    assert code == 0
    listing = json.loads(out)
    assert listing["kind"] == "List"
    framework = load_frameworks([yaml.safe_load(TEKTON.read_text())]).frameworks["PipelineRun.v1.tekton.dev"]
    adapter = GenericAdapter(framework, default_resource_ref(framework))
    source = yaml.safe_load(PIPELINERUN)
    action = external.decide(adapter, source, None)
    assert action.workload is not None
    assert listing["items"] == [
        action.workload.to_k8s(),
        adapter.remote_copy(source, origin="hub", workload_name=action.workload.name),
    ]


def test_worker_workload_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obj = write(tmp_path, "plr.yaml", PIPELINERUN)
    code, out, _ = run(capsys, TEKTON, obj, "--worker-workload")
    assert code == 0
    wl, _, remote_wl = documents(out)
    assert remote_wl["metadata"]["name"] == wl["metadata"]["name"]
    assert remote_wl["metadata"]["labels"] == {Labels.MULTIKUEUE_ORIGIN: "multikueue"}
    assert "ownerReferences" not in remote_wl["metadata"]
    assert remote_wl["spec"] == wl["spec"]


def test_creation_patches_and_pod_sets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, write(tmp_path, "e.yaml", WIDGET_ENTRY), write(tmp_path, "w.yaml", WIDGET))
    assert code == 0, err
    wl, copy_ = documents(out)
    assert wl["spec"]["podSets"][0]["name"] == "driver"
    assert copy_["metadata"]["annotations"] == {"example.com/dispatched-by": "multikueue"}
    assert copy_["spec"] == {"size": 3, "serviceAccountName": "runner-ns"}


def test_generate_name_and_missing_namespace_and_uid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = yaml.safe_load(PIPELINERUN)
    meta = source["metadata"]
    del meta["name"], meta["namespace"], meta["uid"]
    meta["generateName"] = "hello-"
    code, out, err = run(capsys, TEKTON, write(tmp_path, "plr.yaml", yaml.safe_dump(source)), "-n", "ci")
    assert code == 0
    wl, copy_ = documents(out)
    assert copy_["metadata"]["name"] == "hello-xxxxx" and copy_["metadata"]["namespace"] == "ci"
    assert wl["metadata"]["namespace"] == "ci"
    assert any("generateName 'hello-'" in line for line in err)
    assert any("no uid" in line for line in err)
    assert all(line.startswith("note: ") for line in err)


def test_priority_class(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = yaml.safe_load(PIPELINERUN)
    source["metadata"]["labels"][Labels.PRIORITY_CLASS] = "high"
    obj = write(tmp_path, "plr.yaml", yaml.safe_dump(source))
    code, out, err = run(capsys, TEKTON, obj)
    assert code == 0 and any("--priority" in line for line in err)
    assert "priorityClassRef" not in documents(out)[0]["spec"]
    code, out, err = run(capsys, TEKTON, obj, "--priority", "1000")
    spec = documents(out)[0]["spec"]
    assert (code, err, spec["priority"]) == (0, [], 1000)
    assert spec["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}


def test_no_workload_without_a_queue_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = yaml.safe_load(PIPELINERUN)
    del source["metadata"]["labels"]
    code, out, err = run(capsys, TEKTON, write(tmp_path, "plr.yaml", yaml.safe_dump(source)))
    assert code == 0
    assert [doc["kind"] for doc in documents(out)] == ["PipelineRun"]
    assert err == ["note: no queue name at $.metadata.labels['kueue.x-k8s.io/queue-name']: the manager creates no "
                   "Workload, so the object is never dispatched"]


def test_upstream_format_entry_makes_no_workload(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entry = write(tmp_path, "e.yaml", "name: PipelineRun.v1.tekton.dev\n")
    code, out, err = run(capsys, entry, write(tmp_path, "plr.yaml", PIPELINERUN))
    assert code == 0
    (copy_,) = documents(out)
    assert "status" not in copy_["spec"]  # no hold in upstream's format
    assert any("has no `workload`" in line for line in err)


def test_not_managed_by_multikueue_is_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = yaml.safe_load(PIPELINERUN)
    del source["spec"]["managedBy"]
    code, _, err = run(capsys, TEKTON, write(tmp_path, "plr.yaml", yaml.safe_dump(source)))
    assert code == 0
    assert any("would not dispatch" in line and MultiKueue.MANAGED_BY in line for line in err)


CONFIGURATION = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
multiKueue:
  externalFrameworks:
  - name: PipelineRun.v1.tekton.dev
    workload: {}
    hold: {path: $.spec.status, value: PipelineRunPending}
  - name: Widget.v1alpha1.example.com
"""


def configmap(document: str) -> str:
    body = "".join(f"    {line}\n" for line in document.splitlines())
    return (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: multikueue-manager-config\n  namespace: kueue-system\n"
        f"data:\n  controller_manager_config.yaml: |\n{body}"
    )


@pytest.mark.parametrize("text", [CONFIGURATION, configmap(CONFIGURATION)], ids=["configuration", "configmap"])
def test_entry_picked_from_a_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    config = write(tmp_path, "config.yaml", text)
    obj = write(tmp_path, "plr.yaml", PIPELINERUN)
    code, out, err = run(capsys, config, obj)
    assert code == 1 and out == ""
    assert err == [f"{config}: holds 2 entries (PipelineRun.v1.tekton.dev, Widget.v1alpha1.example.com); "
                   "pick one with --entry NAME"]
    code, out, err = run(capsys, config, obj, "--entry", "PipelineRun.v1.tekton.dev")
    assert code == 0
    assert [doc["kind"] for doc in documents(out)] == ["Workload", "PipelineRun"]
    code, out, err = run(capsys, config, obj, "--entry", "TaskRun.v1.tekton.dev")
    assert code == 1
    assert err == [f"{config}: no entry 'TaskRun.v1.tekton.dev' (entries: PipelineRun.v1.tekton.dev, Widget.v1alpha1.example.com)"]


def test_bad_entry_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entry = write(tmp_path, "e.yaml", "name: PipelineRun.v1.tekton.dev\nfinished: 'object.status =='\n")
    code, out, err = run(capsys, entry, write(tmp_path, "plr.yaml", PIPELINERUN))
    assert code == 1 and out == ""
    assert len(err) == 1 and err[0].startswith(f"{entry}: externalFrameworks[PipelineRun.v1.tekton.dev].finished: ")


def test_another_bad_entry_does_not_stop_the_picked_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entries = write(
        tmp_path, "e.yaml", "- name: PipelineRun.v1.tekton.dev\n  workload: {}\n- name: Widget.v1.example.com\n  hold: 3\n"
    )
    code, out, err = run(capsys, entries, write(tmp_path, "plr.yaml", PIPELINERUN), "--entry", "PipelineRun.v1.tekton.dev")
    assert code == 0
    assert err == [f"note: {entries}: another entry is invalid: externalFrameworks[Widget.v1.example.com].hold: must be a map, got an int"]


def test_object_of_another_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obj = write(tmp_path, "tr.yaml", "apiVersion: tekton.dev/v1\nkind: TaskRun\nmetadata: {name: t}\nspec: {}\n")
    code, out, err = run(capsys, TEKTON, obj)
    assert (code, out) == (1, "")
    assert err == [f"{obj}: is a TaskRun (tekton.dev/v1); entry PipelineRun.v1.tekton.dev is for a PipelineRun (tekton.dev/v1)"]


def test_object_of_another_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obj = write(tmp_path, "p.yaml", PIPELINERUN.replace("tekton.dev/v1\n", "tekton.dev/v1beta1\n", 1))
    code, _, err = run(capsys, TEKTON, obj)
    assert code == 1 and err == [
        f"{obj}: is a PipelineRun (tekton.dev/v1beta1); entry PipelineRun.v1.tekton.dev is for a PipelineRun (tekton.dev/v1)"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [1\n", "not YAML: line "),
        ("", "holds 0 YAML documents; expected one PipelineRun"),
        (PIPELINERUN + "---\n" + PIPELINERUN, "holds 2 YAML documents; expected one PipelineRun"),
        ("- 1\n", "not a Kubernetes object (a YAML list); expected a PipelineRun (tekton.dev/v1)"),
        ("apiVersion: tekton.dev/v1\nkind: PipelineRun\nspec: {}\n", "metadata has neither name nor generateName"),
    ],
    ids=["not-yaml", "empty", "two-documents", "list", "no-name"],
)
def test_bad_object_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str) -> None:
    obj = write(tmp_path, "o.yaml", text)
    code, out, err = run(capsys, TEKTON, obj)
    assert (code, out) == (1, "")
    assert len(err) == 1 and err[0].startswith(f"{obj}: {message}")


def test_unreadable_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.yaml"
    code, out, err = run(capsys, missing, write(tmp_path, "plr.yaml", PIPELINERUN))
    assert (code, out) == (1, "") and err == [f"{missing}: cannot read: No such file or directory"]
    code, out, err = run(capsys, TEKTON, missing)
    assert (code, out) == (1, "") and err == [f"{missing}: cannot read: No such file or directory"]
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe")
    code, _, err = run(capsys, TEKTON, binary)
    assert code == 1 and err == [f"{binary}: not YAML: not UTF-8 text (byte 0)"]


def test_entry_file_without_entries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entry = write(tmp_path, "e.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
    code, _, err = run(capsys, entry, write(tmp_path, "plr.yaml", PIPELINERUN))
    assert code == 1 and len(err) == 1 and err[0].startswith(f"{entry}: holds no Configuration")


def test_evaluation_error_on_the_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tekton-kueue's entry reads request annotations; a bad quantity is the object's fault, named with the field."""
    source = yaml.safe_load(PIPELINERUN)
    source["metadata"]["annotations"] = {"kueue.konflux-ci.dev/requests-cpu": "lots"}
    obj = write(tmp_path, "plr.yaml", yaml.safe_dump(source))
    code, out, err = run(capsys, CATALOG / "tekton-pipelinerun-tekton-kueue.yaml", obj)
    assert (code, out) == (1, "")
    assert len(err) == 1
    assert err[0].startswith(f"{obj}: externalFrameworks[PipelineRun.v1.tekton.dev].workload.podSets: ")
    assert "'lots'" in err[0]
