"""The heartbeat of long developer steps: what is built, a line per interval with the time elapsed and an estimate, the total."""

from __future__ import annotations

import io
import subprocess
import threading
from pathlib import Path

import pytest

from multikueue.dev import binaries
from multikueue.dev.errors import DevEnvironmentError
from multikueue.dev.progress import Heartbeat, format_seconds

pytestmark = pytest.mark.unit


class FakeClock:
    """Moves 30 s each time it is read after the start: every tick reads a later time."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            value = self.now
            self.now += 30.0
            return value


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (44.6, "45s"), (60, "1m00s"), (312, "5m12s"), (3720, "1h02m")])
def test_format_seconds(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


def test_start_ticks_and_total() -> None:
    out = io.StringIO()
    clock = FakeClock()
    ticked = threading.Event()

    class Watched(io.StringIO):
        """Sets ``ticked`` at the second "still building" line."""

        def write(self, text: str) -> int:
            written = out.write(text)
            if out.getvalue().count("still building") >= 2:
                ticked.set()
            return written

    with Heartbeat("the control plane", estimate="about 6 minutes cold on two cores", interval=0.01, out=Watched(), clock=clock):
        assert ticked.wait(5), "at least two ticks"
    lines = out.getvalue().splitlines()
    assert lines[0] == "--- building the control plane: about 6 minutes cold on two cores"
    ticks = [line for line in lines if "still building" in line]
    assert len(ticks) >= 2
    assert ticks[0] == "    ... still building the control plane: 30s elapsed (about 6 minutes cold on two cores)"
    assert ticks[1] == "    ... still building the control plane: 1m00s elapsed (about 6 minutes cold on two cores)"
    assert lines[-1].startswith("    built the control plane in ") and "m" in lines[-1]
    assert len(lines) == len(ticks) + 2


def test_a_quick_step_prints_no_tick_and_does_not_wait_for_the_interval() -> None:
    out = io.StringIO()
    clock = iter([10.0, 12.5]).__next__
    with Heartbeat("kwok v0.7.0", interval=3600, out=out, clock=clock) as beat:
        pass
    assert out.getvalue().splitlines() == ["--- building kwok v0.7.0", "    built kwok v0.7.0 in 2s"]
    assert beat.elapsed == 2.5


def test_a_failed_step_says_so_and_the_error_propagates() -> None:
    out = io.StringIO()
    clock = iter([0.0, 70.0]).__next__
    with pytest.raises(RuntimeError), Heartbeat("x", interval=3600, out=out, clock=clock):
        raise RuntimeError("boom")
    assert out.getvalue().splitlines()[-1] == "    building x failed after 1m10s"


def test_go_build_prints_progress_and_the_estimate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    calls: list[list[str]] = []

    def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0 if len(calls) == 1 else 2, stdout="compile error\n")

    monkeypatch.setattr(binaries.subprocess, "run", run)
    binaries.go_build("go", ["build", "."], tmp_path, {}, "the control plane", estimate=binaries.CONTROLPLANE_ESTIMATE)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"--- building the control plane: {binaries.CONTROLPLANE_ESTIMATE}"
    assert err[-1].startswith("    built the control plane in ")
    with pytest.raises(DevEnvironmentError, match="compile error"):
        binaries.go_build("go", ["build", "."], tmp_path, {}, "tekton")
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"--- building tekton: {binaries.GENERIC_ESTIMATE}"
    assert err[-1].startswith("    building tekton failed after ")
