"""``step`` in hack/lib.sh: a long step says it is still running; a failed one shows its log and stops the script.

The image and node-image scripts run minutes-long commands (debootstrap, a
cold ``go build``) through ``step`` with their output in a log file; without
the progress lines the terminal stays silent for minutes (issue 15).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    prelude = f"set -euo pipefail; source {ROOT / 'hack' / 'lib.sh'}; STEP_LOG_DIR={tmp_path}; STEP_PROGRESS_SECONDS=1; "
    return subprocess.run(["bash", "-c", prelude + script], capture_output=True, text=True, timeout=60, check=False)


def test_a_long_step_prints_progress_then_its_time(tmp_path: Path) -> None:
    done = _run('slow() { sleep 3; echo output; }; step "sleeping" slow; echo after', tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "--- sleeping"
    assert any(line.startswith("    ... still sleeping: ") and "s elapsed (log: " in line for line in lines[1:-2])
    assert lines[-2].startswith("    done in ") and lines[-1] == "after"
    assert "output" not in done.stdout, "the command's output goes to the log"
    [log] = tmp_path.glob("*sleeping*.log")
    assert log.read_text() == "output\n"


def test_a_failed_step_shows_its_log_and_stops_the_script(tmp_path: Path) -> None:
    done = _run('broken() { echo "what went wrong"; return 3; }; step "breaking" broken; echo not-reached', tmp_path)
    assert done.returncode == 1
    assert "not-reached" not in done.stdout
    assert "error: breaking failed (exit 3)" in done.stderr and "    what went wrong" in done.stderr
