"""The layer contracts in pyproject.toml hold, and they would catch a wrong-way import.

``lint-imports`` (import-linter) reads the contracts from ``pyproject.toml``:
layers import only downward, no cycles between siblings, integrations do not
know each other, pure decisions import no Kubernetes client or kopf.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    # Run from ``cwd`` with it first on the path, so the package analysed is the one there.
    code = "import sys; sys.path.insert(0, '.'); from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_the_contracts_hold() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " 0 broken" in result.stdout.split("Contracts:")[-1].splitlines()[0]


def test_a_wrong_way_import_breaks_the_layers(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "multikueue", tmp_path / "multikueue", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    scheduler = tmp_path / "multikueue" / "core" / "scheduler.py"
    scheduler.write_text(scheduler.read_text() + "\nfrom multikueue.operator import wiring  # noqa: E402\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "multikueue.core is not allowed to import multikueue.operator" in result.stdout.replace("\n", " ")
