"""Build and locate the Kubernetes binaries the local clusters run.

The control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) is one Go program in ``hack/controlplane`` of the source
checkout, built from the pinned ``k8s.io/kubernetes`` module; kwok comes from
its own module. Both are built once into a cache folder outside the repository
and reused. The control plane's file name carries a hash of its sources and
link flags, so any change to them (a new pin, a code change) rebuilds it; kwok
is keyed by its version.

The control plane is stamped with its release (``-X k8s.io/component-base/version...``):
without it the apiserver reports ``v0.0.0-master+$Format:%H$``, which
``kubectl version`` cannot parse and which clients that check the server's
version (knative's start-up check in Tekton's controller) refuse.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from multikueue.dev.errors import DevEnvironmentError
from multikueue.dev.paths import cache_dir, source_checkout
from multikueue.dev.progress import Heartbeat

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


#: The link flags of the control plane: its release, as Kubernetes' own build stamps it.
CONTROLPLANE_LDFLAGS = " ".join(
    [
        "-s -w",
        f"-X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION}",
        "-X k8s.io/component-base/version.gitMajor={}".format(KUBERNETES_VERSION.lstrip("v").split(".")[0]),
        "-X k8s.io/component-base/version.gitMinor={}".format(KUBERNETES_VERSION.split(".")[1]),
        "-X k8s.io/component-base/version.gitTreeState=clean",
        "-X k8s.io/component-base/version.gitCommit=0000000000000000000000000000000000000000",
        "-X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z",
    ]
)


def binaries_dir() -> Path:
    return cache_dir() / "bin"


def controlplane_key() -> str:
    """A hash of what the control-plane binary is made of: its module's files and its link flags."""
    module = source_checkout() / "hack" / "controlplane"
    digest = hashlib.sha256(CONTROLPLANE_LDFLAGS.encode())
    for path in sorted(p for p in module.iterdir() if p.suffix == ".go" or p.name in ("go.mod", "go.sum")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def expected_binaries() -> Binaries:
    directory = binaries_dir()
    return Binaries(
        controlplane=directory / f"controlplane-{KUBERNETES_VERSION}-{controlplane_key()}",
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


#: How long a build with nothing in Go's caches takes on two cores, for the progress lines (the control plane timed, kwok not).
CONTROLPLANE_ESTIMATE = "about 6 minutes cold on two cores"
KWOK_ESTIMATE = "a few minutes at most with a cold Go cache"
#: For builds whose caller gives no estimate.
GENERIC_ESTIMATE = "minutes when Go's build cache is cold, seconds when it is warm"


def go_build(
    go: str, args: list[str], cwd: Path | None, env: dict[str, str], what: str, *, estimate: str | None = None
) -> None:
    """``go ARGS`` in ``cwd``; its output is kept for the error message.

    Prints (on stderr, whatever the log level) what is built, a line every
    30 seconds with the time elapsed and ``estimate``, and the total: a cold
    build takes minutes and would otherwise look hung.
    """
    log.info("building", component=what, command=" ".join(args))
    with Heartbeat(what, estimate=estimate or GENERIC_ESTIMATE):
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
        go_build(
            go,
            ["build", "-trimpath", f"-ldflags={CONTROLPLANE_LDFLAGS}", "-o", str(tmp), "."],
            module,
            env,
            f"the control plane (Kubernetes {KUBERNETES_VERSION})",
            estimate=CONTROLPLANE_ESTIMATE,
        )
        tmp.replace(target.controlplane)
        for older in target.controlplane.parent.glob("controlplane-*"):  # earlier builds: 200 MB each
            if older != target.controlplane and older.suffix != ".tmp":
                older.unlink(missing_ok=True)
        built.append(target.controlplane.name)
    if target.kwok in missing:
        gobin = target.kwok.parent / "kwok-build"
        gobin.mkdir(exist_ok=True)
        go_build(
            go,
            ["install", "-trimpath", "-ldflags=-s -w", f"{KWOK_MODULE}@{KWOK_VERSION}"],
            None,
            {**env, "GOBIN": str(gobin), "GOFLAGS": "-mod=mod"},
            f"kwok {KWOK_VERSION}",
            estimate=KWOK_ESTIMATE,
        )
        (gobin / "kwok").replace(target.kwok)
        built.append(target.kwok.name)
    return BuildReport(binaries=target, built=built, seconds=time.monotonic() - started)
