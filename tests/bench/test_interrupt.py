"""``bench/_interrupt.py``: a bench stopped by a signal still runs its clean-up."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parents[2] / "bench"

# Stands for a bench: says it is ready, then waits in its body; its ``finally`` is the clean-up.
SCRIPT = f"""
import sys, time
sys.path.insert(0, {str(BENCH)!r})
from _interrupt import interrupt_on_signals
interrupt_on_signals()
try:
    print("ready", flush=True)
    time.sleep(60)
finally:
    print("cleaned up", flush=True)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_runs_the_clean_up_even_when_ignored_or_blocked_from_the_start(sig: signal.Signals) -> None:
    # As a non-interactive shell starts a background job: SIGINT ignored before the bench begins;
    # and as CI's harness starts its runner: SIGTERM and SIGINT blocked (the mask is inherited).
    def as_a_background_job_of_a_blocking_harness() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})

    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=as_a_background_job_of_a_blocking_harness,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    started = time.monotonic()
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        status = Path(f"/proc/{proc.pid}/status").read_text()  # how the child held the signal, for the failure
        proc.kill()
        proc.communicate()
        held = [line for line in status.splitlines() if line.startswith(("State", "Sig", "Shd"))]
        pytest.fail(f"{sig.name} did not stop the bench within 20 s: {held}")
    assert "cleaned up" in out, err
    assert f"stopped by {sig.name}" in err and time.monotonic() - started < 20
