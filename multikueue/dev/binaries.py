"""Build and locate the Kubernetes binaries the local clusters run.

The control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) is one Go program in ``hack/controlplane`` of the source
checkout, built from the pinned ``k8s.io/kubernetes`` module; kwok comes from
its own module. Both are built once into a cache folder outside the repository
and reused, keyed by version so a pin change triggers a rebuild.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from multikueue.dev.errors import DevEnvironmentError
from multikueue.dev.paths import cache_dir, source_checkout

log = structlog.get_logger(__name__)

KUBERNETES_VERSION = "v1.35.4"
KWOK_MODULE = "sigs.k8s.io/kwok/cmd/kwok"
KWOK_VERSION = "v0.7.0"


@dataclass(frozen=True)
class Binaries:
    """Paths of the built programs."""

    controlplane: Path
    kwok: Path


@dataclass(frozen=True)
class BuildReport:
    """What :func:`ensure_binaries` did, for the user and for the notes."""

    binaries: Binaries
    built: list[str]
    seconds: float


def binaries_dir() -> Path:
    return cache_dir() / "bin"


def expected_binaries() -> Binaries:
    directory = binaries_dir()
    return Binaries(
        controlplane=directory / f"controlplane-{KUBERNETES_VERSION}",
        kwok=directory / f"kwok-{KWOK_VERSION}",
    )


def find_go() -> str:
    """Return the ``go`` executable or explain how to get one."""
    go = os.environ.get("GO") or shutil.which("go")
    if not go:
        raise DevEnvironmentError(
            "the Go toolchain was not found on PATH; the local clusters are built from "
            "Kubernetes' Go modules. Install Go 1.25 or newer (e.g. `apt-get install golang` "
            "or from go.dev) or set GO=/path/to/go, then run `multikueue dev build` again."
        )
    return go


def _go_build(go: str, args: list[str], cwd: Path | None, env: dict[str, str], what: str) -> None:
    log.info("building", component=what, command=" ".join(args))
    proc = subprocess.run(
        [go, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise DevEnvironmentError(
            f"building {what} failed (go exit code {proc.returncode}). Last lines of its output:\n"
            f"{tail}\nCheck that the Go module proxy is reachable (GOPROXY) and that Go is 1.25 "
            f"or newer, then run `multikueue dev build` again."
        )


def ensure_binaries(rebuild: bool = False) -> BuildReport:
    """Build whatever is missing from the cache and return where everything is."""
    target = expected_binaries()
    missing = [p for p in (target.controlplane, target.kwok) if rebuild or not p.exists()]
    if not missing:
        return BuildReport(binaries=target, built=[], seconds=0.0)
    go = find_go()
    target.controlplane.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("CGO_ENABLED", "0")
    started = time.monotonic()
    built: list[str] = []
    if target.controlplane in missing:
        module = source_checkout() / "hack" / "controlplane"
        tmp = target.controlplane.with_suffix(".tmp")
        _go_build(
            go,
            ["build", "-trimpath", "-ldflags=-s -w", "-o", str(tmp), "."],
            module,
            env,
            f"the control plane (Kubernetes {KUBERNETES_VERSION})",
        )
        tmp.replace(target.controlplane)
        built.append(target.controlplane.name)
    if target.kwok in missing:
        gobin = target.kwok.parent / "kwok-build"
        gobin.mkdir(exist_ok=True)
        _go_build(
            go,
            ["install", "-trimpath", "-ldflags=-s -w", f"{KWOK_MODULE}@{KWOK_VERSION}"],
            None,
            {**env, "GOBIN": str(gobin), "GOFLAGS": "-mod=mod"},
            f"kwok {KWOK_VERSION}",
        )
        (gobin / "kwok").replace(target.kwok)
        built.append(target.kwok.name)
    return BuildReport(binaries=target, built=built, seconds=time.monotonic() - started)
