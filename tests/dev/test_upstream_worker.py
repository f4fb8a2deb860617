"""The upstream-Kueue worker of the kind set-up: what can be checked without Docker or a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from multikueue.dev import kind, upstream
from multikueue.dev.errors import DevEnvironmentError

pytestmark = pytest.mark.unit


def test_the_overlay_changes_only_the_image_and_its_pull_policy() -> None:
    doc = yaml.safe_load(upstream.kustomization(upstream.Source(Path("/src"), "0" * 64), "example/kueue:v1"))
    assert doc["resources"] == ["../default"]
    assert doc["images"] == [{"name": upstream.UPSTREAM_IMAGE_NAME, "newName": "example/kueue", "newTag": "v1"}]
    [patch] = doc["patches"]
    assert patch["target"]["name"] == upstream.DEPLOYMENT
    ops = yaml.safe_load(patch["patch"])
    assert ops == [{"op": "replace", "path": "/spec/template/spec/containers/0/imagePullPolicy", "value": "IfNotPresent"}]


def test_only_workers_can_run_upstream_kueue() -> None:
    assert not kind.KindOptions(node_image="n", upstream_workers=("worker2",)).runs_ours("worker2")
    assert kind.KindOptions(node_image="n", upstream_workers=("worker2",)).runs_ours("worker1")
    with pytest.raises(DevEnvironmentError, match="'manager' is not a worker"):
        kind.KindOptions(node_image="n", upstream_workers=("manager",))


def test_the_manager_runs_upstream_kueue_with_upstream_manager() -> None:
    options = kind.KindOptions(node_image="n", upstream_manager=True)
    assert not options.runs_ours("manager") and options.runs_ours("worker1") and options.runs_ours("worker2")
    assert kind.KindOptions(node_image="n", upstream_manager=True, upstream_workers=("worker2",)).upstream_roles == ("manager", "worker2")


def test_a_missing_or_different_archive_is_refused_with_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MULTIKUEUE_THIRDPARTY", str(tmp_path))
    monkeypatch.setenv("MULTIKUEUE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DevEnvironmentError, match="MULTIKUEUE_THIRDPARTY"):
        upstream.ensure_source()
    (tmp_path / upstream.ARCHIVE).write_bytes(b"not the archive")
    with pytest.raises(DevEnvironmentError, match="replace it with the archive the third-party README lists"):
        upstream.ensure_source()


def test_an_upstream_manager_enables_only_the_frameworks_our_workers_serve(tmp_path: Path) -> None:
    """Upstream's MultiKueue marks a worker inactive when it lacks the CRD of an enabled framework (e.g. MPIJob)."""
    manifests = tmp_path / "config" / "components" / "manager"
    manifests.mkdir(parents=True)
    (manifests / "controller_manager_config.yaml").write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nintegrations:\n  frameworks: [batch/job, kubeflow.org/mpijob]\n"
    )
    source = upstream.Source(root=tmp_path, sha256="0" * 64)
    doc = yaml.safe_load(upstream.kustomization(source, frameworks=kind.UPSTREAM_MANAGER_FRAMEWORKS))
    [image_patch, config_patch] = doc["patches"]
    assert config_patch["target"] == {"version": "v1", "kind": "ConfigMap", "name": upstream.CONFIG_MAP}
    [op] = yaml.safe_load(config_patch["patch"])
    configuration = yaml.safe_load(op["value"])
    assert configuration["integrations"]["frameworks"] == ["batch/job"]
    assert configuration["kind"] == "Configuration"
    assert len(yaml.safe_load(upstream.kustomization(source))["patches"]) == 1, "a worker keeps upstream's Configuration"
