"""Set-up problems end in one clear line and a non-zero exit, not a stack trace."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from multikueue.cli.main import main

pytestmark = pytest.mark.unit


def test_missing_go_toolchain_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MULTIKUEUE_CACHE", str(tmp_path / "cache"))  # nothing built there
    monkeypatch.setenv("PATH", str(tmp_path))  # no go on PATH
    monkeypatch.delenv("GO", raising=False)
    code = main(["dev", "build"])
    err = capsys.readouterr().err
    assert code == 1
    assert "the Go toolchain was not found" in err
    assert "Traceback" not in err


def test_busy_port_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MULTIKUEUE_CACHE", str(tmp_path / "cache"))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main(["dev", "clusters", "up", "--workers", "1", "--base-port", str(port)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"{port} (manager kube-apiserver)" in err
    assert "--base-port" in err
    assert "Traceback" not in err


def test_down_without_clusters_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MULTIKUEUE_CACHE", str(tmp_path / "cache"))
    assert main(["dev", "clusters", "down", "--name", "nothing"]) == 1
    assert "no local clusters named 'nothing'" in capsys.readouterr().err
