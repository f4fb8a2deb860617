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


def test_a_missing_or_different_archive_is_refused_with_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MULTIKUEUE_THIRDPARTY", str(tmp_path))
    monkeypatch.setenv("MULTIKUEUE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DevEnvironmentError, match="MULTIKUEUE_THIRDPARTY"):
        upstream.ensure_source()
    (tmp_path / upstream.ARCHIVE).write_bytes(b"not the archive")
    with pytest.raises(DevEnvironmentError, match="replace it with the archive the third-party README lists"):
        upstream.ensure_source()
