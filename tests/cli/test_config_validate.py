"""``multikueue config validate FILE``: Configuration, ConfigMap, catalog entries, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from multikueue.cli.main import main

pytestmark = pytest.mark.unit

CATALOG = Path(__file__).parents[2] / "adapters"

CONFIGURATION = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
multiKueue:
  origin: multikueue
  externalFrameworks:
  - name: PipelineRun.v1.tekton.dev
    finished: 'has(object.status)'
    hold: {path: $.spec.status, value: PipelineRunPending}
  - name: JobSet.v1alpha2.jobset.x-k8s.io
"""


def configmap(document: str) -> str:
    body = "".join(f"    {line}\n" for line in document.splitlines())
    return (
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kueue-system\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: multikueue-manager-config\n  namespace: kueue-system\n"
        f"data:\n  controller_manager_config.yaml: |\n{body}"
    )


def validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | bytes, name: str = "f.yaml") -> tuple[int, list[str]]:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    code = main(["config", "validate", str(path)])
    return code, capsys.readouterr().out.splitlines()


def test_valid_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = validate(tmp_path, capsys, CONFIGURATION)
    assert code == 0
    assert out == [
        f"{tmp_path / 'f.yaml'}: valid Configuration: 2 external frameworks: "
        "PipelineRun.v1.tekton.dev (extended: finished, hold), JobSet.v1alpha2.jobset.x-k8s.io (upstream format)"
    ]


def test_valid_configmap_among_other_manifests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = validate(tmp_path, capsys, configmap(CONFIGURATION))
    assert code == 0
    assert out[0].endswith("valid ConfigMap: 2 external frameworks: PipelineRun.v1.tekton.dev (extended: finished, hold), "
                           "JobSet.v1alpha2.jobset.x-k8s.io (upstream format)")


def test_configmap_problems_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = CONFIGURATION.replace("'has(object.status)'", "'\"x\"'") + "  - name: PipelineRun.v1.tekton.dev\n"
    code, out = validate(tmp_path, capsys, configmap(bad))
    path = tmp_path / "f.yaml"
    assert code == 1
    assert out == [
        f"{path}: externalFrameworks[PipelineRun.v1.tekton.dev].finished: gives a string, expected a bool",
        f"{path}: externalFrameworks[PipelineRun.v1.tekton.dev].name: "
        "duplicate of entry #0; only the first entry of a GVK is used",
    ]


@pytest.mark.parametrize(
    ("entry", "line"),
    [
        ("name: Widget.v1.example\n", "externalFrameworks[Widget.v1.example].name: group 'example'"),
        ("name: Widget.v1.example.com\nmanagedBy: $.spec[\n", "externalFrameworks[Widget.v1.example.com].managedBy: "),
        ("name: Widget.v1.example.com\nfinished: 'true &&'\n", "externalFrameworks[Widget.v1.example.com].finished: syntax"),
        ("name: Widget.v1.example.com\nfinishd: 'true'\n", "externalFrameworks[Widget.v1.example.com].finishd: unknown"),
        (
            "name: Widget.v1.example.com\ncreationPatches: ['true']\n",
            "externalFrameworks[Widget.v1.example.com].creationPatches[0]: gives a bool, expected a map",
        ),
    ],
)
def test_single_entry_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: str, line: str) -> None:
    code, out = validate(tmp_path, capsys, entry)
    assert code == 1
    assert len(out) == 1 and out[0].startswith(f"{tmp_path / 'f.yaml'}: {line}"), out


def test_list_of_entries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = validate(tmp_path, capsys, "- name: A.v1.example.com\n- name: B.v1.example.com\n  finished: 'true'\n")
    assert code == 0
    assert out[0].endswith("valid entries: 2 external frameworks: A.v1.example.com (upstream format), "
                           "B.v1.example.com (extended: finished)")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: [1,\n  b: }\n", "not YAML: line 2, column 6: expected the node content, but found '}'"),
        (b"\x00\xff\xfe binary", "not YAML: not UTF-8 text"),
        ("just some words\n", "not a YAML map or list (a plain str)"),
        ("", "empty"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "holds no Configuration"),
        ("kind: ConfigMap\nmetadata: {name: cm}\ndata: {other: x}\n", "ConfigMap cm has no data key"),
        ("kind: Configuration\nmultiKueue:\n  gcInterval: soon\n", "multiKueue.gcInterval"),
    ],
)
def test_bad_files_one_line_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | bytes, words: str
) -> None:
    code, out = validate(tmp_path, capsys, text)
    assert code == 1
    assert len(out) == 1 and out[0].startswith(f"{tmp_path / 'f.yaml'}: ")
    assert words in out[0]


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", str(tmp_path / "nope.yaml")]) == 1
    assert "cannot read: No such file or directory" in capsys.readouterr().out


def test_configuration_without_frameworks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = validate(tmp_path, capsys, "kind: Configuration\nmultiKueue: {origin: m}\n")
    assert code == 0 and out[0].endswith("valid Configuration: no external frameworks")


def test_every_catalog_file_validates(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(CATALOG.glob("*.yaml"))
    assert main(["config", "validate", *map(str, files)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(files) and all(": valid entry: 1 external framework: " in line for line in out)
