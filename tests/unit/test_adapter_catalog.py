"""The adapter catalog holds well-formed upstream-style entries."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

CATALOG = Path(__file__).parents[2] / "adapters"
GVK = re.compile(r"^(?P<kind>[A-Z][A-Za-z0-9]*)\.(?P<version>v[0-9]+(?:(?:alpha|beta)[0-9]+)?)\.(?P<group>[a-z0-9.-]+\.[a-z]+)$")


def entries() -> list[Path]:
    return sorted(CATALOG.glob("*.yaml"))


def test_catalog_is_not_empty() -> None:
    assert len(entries()) >= 2


@pytest.mark.parametrize("path", entries(), ids=lambda p: p.name)
def test_entry_names_a_gvk(path: Path) -> None:
    entry = yaml.safe_load(path.read_text())
    assert isinstance(entry, dict) and set(entry) >= {"name"}
    assert GVK.match(entry["name"]), f"{path.name}: {entry['name']!r} is not Kind.version.group"


def test_readme_lists_every_entry() -> None:
    readme = (CATALOG / "README.md").read_text()
    for path in entries():
        assert f"`{path.name}`" in readme
