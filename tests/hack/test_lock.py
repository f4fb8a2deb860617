"""requirements.lock covers pyproject.toml: every dependency it names is pinned there, hashed, in range.

``hack/lib.sh`` installs the venv with ``pip install --require-hashes -r
requirements.lock`` and then the checkout with ``--no-deps
--no-build-isolation``: a dependency added to pyproject.toml but not to the
lock would be missing at run time (or the editable build would lack its
backend), and pip would not say so. ``hack/update-lock.sh`` regenerates it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)\s*(?:;\s*(?P<marker>[^\\]+?))?\s*\\?$")


def _pins() -> dict[str, tuple[Version, list[str]]]:
    """Name -> (pinned version, its hashes); entries whose marker excludes this Python are kept too."""
    pins: dict[str, tuple[Version, list[str]]] = {}
    current: str | None = None
    for line in LOCK.read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = canonicalize_name(match["name"])
            pins[current] = (Version(match["version"]), [])
        elif current and line.strip().startswith("--hash=sha256:"):
            pins[current][1].append(line.strip().removeprefix("--hash=sha256:").rstrip(" \\"))
        elif not line.startswith(" "):
            current = None
    return pins


def _named() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    named = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    for extra in project["project"].get("optional-dependencies", {}).values():
        named.extend(extra)
    return [Requirement(text) for text in named]


def test_every_dependency_of_pyproject_is_pinned_with_hashes_in_its_range() -> None:
    pins = _pins()
    problems = []
    for requirement in _named():
        if requirement.marker and not requirement.marker.evaluate(dict(default_environment())):
            continue
        name = canonicalize_name(requirement.name)
        if name not in pins:
            problems.append(f"{requirement}: not in requirements.lock")
            continue
        version, hashes = pins[name]
        if not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement}: locked at {version}, outside the range")
        if not hashes:
            problems.append(f"{requirement}: locked without a hash")
    assert not problems, "run hack/update-lock.sh and commit requirements.lock:\n" + "\n".join(problems)


def test_every_pin_has_hashes() -> None:
    """pip --require-hashes refuses the whole file if one entry lacks them."""
    unhashed = [name for name, (_, hashes) in _pins().items() if not hashes]
    assert not unhashed
    assert len(_pins()) > 20  # the parser read the file, not nothing
