"""Where the development tooling keeps its files."""

from __future__ import annotations

import os
from pathlib import Path

from multikueue.dev.errors import DevEnvironmentError


def cache_dir() -> Path:
    """The cache folder outside the repository (``$MULTIKUEUE_CACHE``)."""
    override = os.environ.get("MULTIKUEUE_CACHE")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "multikueue"


def clusters_dir(name: str) -> Path:
    """Runtime folder of a named set of local clusters (kubeconfigs, logs, data)."""
    return cache_dir() / "clusters" / name


def source_checkout() -> Path:
    """The repository this package was installed from.

    The local clusters are built from ``hack/controlplane`` and configured
    from ``config/``, both of which live only in a source checkout.
    """
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "hack" / "controlplane").is_dir():
            return parent
    raise DevEnvironmentError(
        "the development commands need a source checkout of multikueue (hack/controlplane "
        "and config/ were not found above the installed package); clone the repository and "
        "run `pip install -e .` from it."
    )
