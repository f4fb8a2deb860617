"""Source archives of the third-party folder: found, checked against their sha256, unpacked once into the cache.

Upstream Kueue and Tekton Pipelines are built here from the archives beside
the checkout (``../shared/thirdparty``, or ``$MULTIKUEUE_THIRDPARTY``); the
module proxy does not serve them. Both need the same three steps, kept here
once: the archive must be there (else say where to put it), must be the one
the third-party README lists (a checksum, else say so: another file under
that name would build something else), and is unpacked once into
``<cache>/src/<prefix>-<version>-<sha12>`` (reused while the checksum holds;
unpacked into a temporary folder first, so an interrupted unpack is never
taken for a finished one).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from multikueue.dev.binaries import find_go, go_build
from multikueue.dev.errors import DevEnvironmentError
from multikueue.dev.paths import cache_dir, source_checkout

__all__ = ["GoArchive", "Source", "build_go_binary", "sha256_of", "thirdparty_dir"]


def thirdparty_dir() -> Path:
    override = os.environ.get("MULTIKUEUE_THIRDPARTY")
    if override:
        return Path(override).expanduser()
    return source_checkout().parent / "shared" / "thirdparty"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Source:
    """An unpacked archive: its root (``go.mod``, ``config/``) and the archive's checksum."""

    root: Path
    sha256: str

    @property
    def short(self) -> str:
        return self.sha256[:12]

    @property
    def config(self) -> Path:
        return self.root / "config"


@dataclass(frozen=True)
class GoArchive:
    """One archive of the third-party folder holding a Go module (with its ``vendor/``)."""

    #: What it is, for messages ("upstream Kueue", "Tekton Pipelines").
    title: str
    filename: str
    #: The checksum the third-party README lists.
    sha256: str
    version: str
    #: The unpacked folder's name starts with it.
    prefix: str

    def path(self) -> Path:
        path = thirdparty_dir() / self.filename
        if not path.is_file():
            raise DevEnvironmentError(
                f"{self.title}'s source archive {self.filename} is not at {path}; put it there "
                "(or point $MULTIKUEUE_THIRDPARTY at the folder that holds it)"
            )
        return path

    def unpacked(self) -> Source:
        """The archive checked and unpacked once into the cache (reused while its checksum holds)."""
        archive = self.path()
        sha = sha256_of(archive)
        if sha != self.sha256:
            raise DevEnvironmentError(
                f"{archive} has sha256 {sha}, not the {self.sha256} of {self.title} {self.version}; "
                "replace it with the archive the third-party README lists"
            )
        target = cache_dir() / "src" / f"{self.prefix}-{self.version}-{sha[:12]}"
        if (target / "go.mod").is_file():
            return Source(target, sha)
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f"{self.prefix}-src-", dir=target.parent) as tmp:
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            [top] = [p for p in Path(tmp).iterdir() if p.is_dir()]
            if not (top / "go.mod").is_file():
                raise DevEnvironmentError(f"{archive} does not hold a Go module at its top folder ({top.name})")
            shutil.rmtree(target, ignore_errors=True)
            top.rename(target)
        return Source(target, sha)


def build_go_binary(
    source: Source, target: Path, package: str, what: str, extra: Sequence[str] = (), *, estimate: str | None = None
) -> Path:
    """``go build -mod=vendor`` of ``package`` in ``source`` into ``target``, statically linked, unless it is there.

    ``target`` names the archive's checksum, so a cached binary is reused
    while the archive holds; it is built under a ``.tmp`` name and renamed,
    so an interrupted build is never taken for a finished one. ``go_build``
    prints the progress.
    """
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / (target.name + ".tmp")
    go_build(
        find_go(),
        ["build", "-mod=vendor", "-trimpath", *extra, "-o", str(tmp), package],
        source.root,
        {**os.environ, "CGO_ENABLED": "0"},
        what,
        estimate=estimate,
    )
    tmp.replace(target)
    return target
