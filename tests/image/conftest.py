"""The controller image (Dockerfile, hack/image.sh): marker and shared fixtures.

The tests need a Docker engine and either network access or the cached
offline base; `hack/image.sh` provides both (it starts dockerd and makes the
base if needed), so nothing here is skipped: a missing engine or a failed
build is a test failure. Once the image exists, the build is a cache hit.
The tests are opt-in (the marker ``image``, see multikueue/dev/pytest_plugin.py): a run
without ``-m image`` or ``--controllers image`` deselects them, and says so.

    python -m pytest -m image tests/image

IMAGE=<tag> tests another tag (hack/image.sh builds it under that tag).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 1800


@pytest.fixture(scope="session")
def image() -> str:
    """The image's tag, after `hack/image.sh` built it or found it up to date."""
    tag = os.environ.get("IMAGE", "multikueue:dev")
    started = time.monotonic()
    try:
        result = subprocess.run(
            [str(REPOSITORY / "hack" / "image.sh"), "--tag", tag],
            cwd=REPOSITORY,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            env={**os.environ, "CI": "true"},
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hack/image.sh did not finish in {BUILD_TIMEOUT}s:\n{e.stdout}\n{e.stderr}")
    if result.returncode != 0:
        pytest.fail(f"hack/image.sh failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}")
    print(f"hack/image.sh: {time.monotonic() - started:.1f}s\n{result.stdout}")
    return tag


def docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def run_in_image(image: str):  # type: ignore[no-untyped-def]
    """``run_in_image(script, user=None)``: a shell script in a throw-away container; its result."""

    def run(script: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        args = ["run", "--rm", "--network", "none", "--entrypoint", "sh"]
        if user is not None:
            args += ["--user", user]
        return docker(*args, image, "-c", script)

    return run
