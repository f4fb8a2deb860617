"""Tekton's controller as the dev clusters run it: what can be checked without starting it.

The e2e tests (``e2e/test_tekton.py``) run it; these check that the way it is
started follows the archive's own ``config/controller.yaml`` (so a new archive
that renames a ConfigMap or adds an image flag fails here, not as a
controller that silently does nothing), that the install leaves out what it
should, and that the kwok stages it relies on are there.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from multikueue.cli import dev as dev_cli
from multikueue.dev import tekton
from multikueue.dev.clusterset import ClusterSet, ClusterSetOptions
from multikueue.dev.errors import DevEnvironmentError
from multikueue.dev.paths import source_checkout
from multikueue.dev.pytest_plugin import free_base_port

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def source() -> tekton.Source:
    """The archive unpacked into the cache (a few seconds the first time, then reused)."""
    return tekton.ensure_source()


def _deployment(source: tekton.Source) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((source.config / "controller.yaml").read_text()) if d]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    return deployment


def test_the_environment_is_the_deployments(source: tekton.Source) -> None:
    deployment = _deployment(source)
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = tekton.controller_env(1, 2, 3)
    for item in container["env"]:
        name = item["name"]
        if name == "SYSTEM_NAMESPACE":  # the Pod's namespace, by fieldRef
            assert env[name] == deployment["metadata"]["namespace"] == tekton.NAMESPACE
        elif name.startswith("SSL_CERT"):
            assert name not in env  # the registry certificate mount of the Pod: no registry is reached here
        else:
            assert env[name] == item["value"], name


def test_every_image_flag_of_the_deployment_gets_a_placeholder(source: tekton.Source) -> None:
    [container] = _deployment(source)["spec"]["template"]["spec"]["containers"]
    flags = {arg.lstrip("-") for arg in container["args"] if arg.startswith("-") and arg.endswith("-image")}
    argv = tekton.controller_command(Path("/bin/tekton"), Path("/k/kubeconfig"))
    given = {arg.lstrip("-").split("=", 1)[0] for arg in argv[1:]}
    assert flags <= given
    assert {"kubeconfig", "disable-ha"} <= given
    assert "-kubeconfig=/k/kubeconfig" in argv


def test_ports_are_the_callers_and_metrics_stay_on_loopback() -> None:
    env = tekton.controller_env(18080, 19090, 18008)
    assert env["PROBES_PORT"] == "18080"
    assert env["METRICS_PROMETHEUS_PORT"] == "19090" and env["METRICS_PROMETHEUS_HOST"] == "127.0.0.1"
    assert env["PROFILING_PORT"] == "18008"


def test_the_install_is_crds_namespace_and_configmaps_only(source: tekton.Source) -> None:
    crds, others = tekton.manifests(source)
    names = {d["metadata"]["name"] for d in crds}
    assert {"pipelineruns.tekton.dev", "taskruns.tekton.dev", "pipelines.tekton.dev", "tasks.tekton.dev"} <= names
    assert all(d["kind"] == "CustomResourceDefinition" for d in crds)
    kinds = {d["kind"] for d in others}
    assert kinds == {"Namespace", "ConfigMap"}, "no webhook configurations, RBAC or Deployment"
    config_maps = {d["metadata"]["name"] for d in others if d["kind"] == "ConfigMap"}
    env = tekton.controller_env(1, 2, 3)
    read = {v for k, v in env.items() if k.startswith("CONFIG_")}
    assert read <= config_maps, "every ConfigMap the controller reads is installed"
    assert all(d["metadata"].get("namespace") == tekton.NAMESPACE for d in others if d["kind"] == "ConfigMap")


def test_the_binary_is_keyed_on_the_archive(source: tekton.Source) -> None:
    path = tekton.binary_path(source)
    assert path.name == f"tekton-controller-{tekton.VERSION}-{tekton.ARCHIVE_SHA256[:12]}"


def test_a_missing_or_different_archive_is_refused_with_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MULTIKUEUE_THIRDPARTY", str(tmp_path))
    monkeypatch.setenv("MULTIKUEUE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DevEnvironmentError, match="MULTIKUEUE_THIRDPARTY"):
        tekton.ensure_source()
    (tmp_path / tekton.ARCHIVE).write_bytes(b"not the archive")
    with pytest.raises(DevEnvironmentError, match="replace it with the archive the third-party README lists"):
        tekton.ensure_source()


def test_kwok_finishes_tekton_step_pods_both_ways() -> None:
    stages = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all((source_checkout() / "hack" / "kwok" / "stages.yaml").read_text())
        if d
    }
    for name, phase in (("tekton-step-succeeded", "Succeeded"), ("tekton-step-failed", "Failed")):
        stage = stages[name]["spec"]
        selectors = {e["key"]: e for e in stage["selector"]["matchExpressions"]}
        assert selectors[".metadata.ownerReferences.[].kind"]["values"] == ["TaskRun"]
        exit_code = selectors['.metadata.annotations["multikueue.x-k8s.io/exit-code"]']["operator"]
        assert exit_code == ("DoesNotExist" if phase == "Succeeded" else "Exists")
        assert f"phase: {phase}" in stage["next"]["statusTemplate"]
        assert "terminated:" in stage["next"]["statusTemplate"]
    # The Job stage keeps to Jobs: a step pod is never finished by two stages.
    job = {e["key"]: e for e in stages["pod-succeeded"]["spec"]["selector"]["matchExpressions"]}
    assert job[".metadata.ownerReferences.[].kind"]["values"] == ["Job"]


def test_tekton_needs_full_clusters_and_is_refused_before_anything_starts(tmp_path: Path) -> None:
    options = ClusterSetOptions(name="tk", workers=1, full=False, tekton=True, base_port=free_base_port(2), directory=tmp_path / "tk")
    clusters = ClusterSet.plan(options)
    with pytest.raises(DevEnvironmentError, match="--tekton needs full clusters"):
        clusters.up(options)
    assert not clusters.running()


def test_clusters_up_takes_tekton() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers()
    dev_cli.register(commands)
    args = parser.parse_args(["dev", "clusters", "up", "--tekton"])
    assert args.tekton is True
    assert parser.parse_args(["dev", "clusters", "up"]).tekton is False
    assert parser.parse_args(["dev", "build", "--tekton"]).tekton is True


def test_the_demo_uses_the_real_tekton_only_when_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from multikueue.dev import demo

    assert demo._built_tekton(demo.DemoOptions(kind=True)) is None  # kind's nodes would need Tekton's images
    monkeypatch.setattr(tekton, "binary_path", lambda source: tmp_path / "not-built")
    assert demo._built_tekton(demo.DemoOptions()) is None
    built = tmp_path / "tekton-controller"
    built.write_text("")
    monkeypatch.setattr(tekton, "binary_path", lambda source: built)
    found = demo._built_tekton(demo.DemoOptions())
    assert found is not None and found[1] == built


def test_the_demo_pipelinerun_is_docs_shaped_and_for_multikueue() -> None:
    from multikueue.dev import demo

    run = demo.pipeline_run("ns", "build")
    assert run["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    spec = run["spec"]["pipelineSpec"]
    assert [t["name"] for t in spec["tasks"]] == ["build", "test"] and spec["results"]
    assert all("script" in step for t in spec["tasks"] for step in t["taskSpec"]["steps"]), "no image entrypoint lookups"
