"""Tekton Pipelines as a peer: its controller built from the source archive, run beside a local cluster.

PipelineRun dispatch is one of the things MultiKueue is used for, and the
worker side of it is Tekton's own controller: it turns the PipelineRun our
worker releases into TaskRuns and pods and writes the status we sync back.
Playing it (patching ``Succeeded``) checks our plumbing but not that the
status Tekton really writes survives the trip. This module runs the real one
on the local clusters, where no image registry answers:

1. **source**: ``tekton-pipeline-v1.15.0.tar.gz`` from the third-party folder
   beside the checkout (``../shared/thirdparty``, or ``$MULTIKUEUE_THIRDPARTY``),
   checked against its sha256 and unpacked into the cache's ``src/``;
2. **binary**: ``go build -mod=vendor ./cmd/controller`` (the archive carries its
   ``vendor/``), cached as ``bin/tekton-controller-<version>-<sha>`` (about 10
   minutes cold on two cores, nothing when cached);
3. **install**: the archive's CRDs (``config/300-crds``), namespace
   (``config/100-namespace``) and ConfigMaps (``config/config-*.yaml``) applied
   to the cluster as shipped;
4. **run**: the controller as a local process (:func:`controller_command`,
   :func:`controller_env`) with the cluster's kubeconfig, ``-disable-ha`` and
   placeholder ``-*-image`` flags.

Tekton's webhook is left out. It defaults and validates Tekton objects and
converts between API versions; it would need a Service the apiserver can reach
(the local clusters have no cluster network: pods are kwok's, nothing listens
behind a ClusterIP), a serving certificate it makes for itself through that
Service, and its ``500-webhooks.yaml`` configurations, which fail closed when
it cannot be reached. Without those configurations the apiserver accepts
PipelineRuns as the CRD's schema allows, and the controller applies the same
defaults itself when it reconciles (``SetDefaults`` in its reconcilers), so the
runs behave as they do with the webhook, minus its early rejection of invalid
specs (the controller still fails them, with ``Succeeded=False``).

Ports: a Pod has its own network, these processes share the machine's. Each
controller gets free ports for its probes (``PROBES_PORT``), Prometheus
metrics (on loopback) and profiling. One port cannot be moved: knative's
``sharedmain`` also serves probes on the fixed port 8080, so with two workers
only the first controller gets it; the other's extra probe server fails and,
as in Tekton's own Deployment (whose ``PROBES_PORT`` is 8080 too), its
reconcilers keep running. Readiness is therefore read from the log
(:data:`STARTED_LINE`), not from a probe.

The step images never run: pods land on kwok nodes, whose stages
(``config/kwok/``) finish Tekton's step pods the way Tekton expects (every step
container terminated, exit 0, phase ``Succeeded``; or failed, see
:data:`FAIL_ANNOTATION`).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import structlog
import yaml
from kubernetes import client

from multikueue.dev import wiring
from multikueue.dev.binaries import binaries_dir
from multikueue.dev.process import ManagedProcess, spawn, wait_until
from multikueue.dev.thirdparty import GoArchive, Source, build_go_binary

log = structlog.get_logger(__name__)

VERSION = "v1.15.0"
ARCHIVE = f"tekton-pipeline-{VERSION}.tar.gz"
#: The archive the third-party README lists; another file under that name is refused.
ARCHIVE_SHA256 = "5593b1429482e8ace653c10d9dd527868b749e5b5e0e8a920d570ffe53dd24c9"
#: The namespace Tekton's ConfigMaps live in and the controller watches for them.
NAMESPACE = "tekton-pipelines"


ARCHIVE_SPEC = GoArchive("Tekton", ARCHIVE, ARCHIVE_SHA256, VERSION, prefix="tekton-pipeline")


def archive_path() -> Path:
    return ARCHIVE_SPEC.path()


def ensure_source() -> Source:
    """The archive checked and unpacked once into the cache (reused while its checksum holds)."""
    return ARCHIVE_SPEC.unpacked()


def binary_path(source: Source) -> Path:
    return binaries_dir() / f"tekton-controller-{VERSION}-{source.short}"


def ensure_binary(source: Source | None = None) -> Path:
    """Tekton's controller (``cmd/controller``), statically linked, cached by the archive's checksum."""
    source = source or ensure_source()
    return build_go_binary(
        source,
        binary_path(source),
        "./cmd/controller",
        f"Tekton Pipelines {VERSION} controller",
        ["-ldflags=-s -w"],
        estimate="about 10 minutes cold on two cores",
    )


# -- install ------------------------------------------------------------------------------------


def manifests(source: Source) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The archive's CRDs, and its namespace and ConfigMaps, as it ships them.

    Only what the controller reads: no RBAC (it runs with the admin kubeconfig
    here), no Deployment (it runs as a process), no webhook configurations
    (see the module's docstring).
    """
    crds = [d for d in wiring.load_documents(source.config / "300-crds") if d.get("kind") == "CustomResourceDefinition"]
    others = wiring.load_documents(source.config / "100-namespace")
    for path in sorted(source.config.glob("config-*.yaml")):
        others.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return crds, others


def install(api: client.ApiClient, source: Source) -> None:
    """Apply Tekton's CRDs (waiting until they are served), namespace and ConfigMaps; idempotent."""
    crds, others = manifests(source)
    wiring.install_crds(api, crds)
    wiring.apply(api, others)


# -- run --------------------------------------------------------------------------------------------

#: The ``-*-image`` flags the controller refuses to start without. The images are never pulled:
#: pods land on kwok nodes, which run nothing.
PLACEHOLDER_IMAGES = {
    "entrypoint-image": "multikueue.invalid/tekton/entrypoint:placeholder",
    "nop-image": "multikueue.invalid/tekton/nop:placeholder",
    "sidecarlogresults-image": "multikueue.invalid/tekton/sidecarlogresults:placeholder",
    "workingdirinit-image": "multikueue.invalid/tekton/workingdirinit:placeholder",
    "shell-image": "multikueue.invalid/tekton/shell:placeholder",
    "shell-image-win": "multikueue.invalid/tekton/shell-win:placeholder",
}

#: The environment ``config/controller.yaml`` gives the container (the ConfigMap names it reads).
CONFIG_ENV = {
    "KUBERNETES_MIN_VERSION": "v1.28.0",
    "CONFIG_DEFAULTS_NAME": "config-defaults",
    "CONFIG_LOGGING_NAME": "config-logging",
    "CONFIG_OBSERVABILITY_NAME": "config-observability",
    "CONFIG_FEATURE_FLAGS_NAME": "feature-flags",
    "CONFIG_LEADERELECTION_NAME": "config-leader-election-controller",
    "CONFIG_SPIRE": "config-spire",
    "METRICS_DOMAIN": "tekton.dev/pipeline",
}

#: What the controller logs once its informers have synced and its reconcilers run (knative's sharedmain).
STARTED_LINE = "Starting controllers"


def controller_command(binary: Path, kubeconfig: Path) -> list[str]:
    """The command line: the cluster's kubeconfig, no leader election, the placeholder images."""
    argv = [str(binary), f"-kubeconfig={kubeconfig}", "-disable-ha"]
    argv += [f"-{flag}={image}" for flag, image in PLACEHOLDER_IMAGES.items()]
    return argv


def controller_env(probes_port: int, metrics_port: int, profiling_port: int) -> dict[str, str]:
    """``config/controller.yaml``'s environment, plus the ports a Pod would have to itself.

    Several controllers share this machine's loopback (one per worker), so
    each gets its own probes, Prometheus and profiling ports instead of the
    fixed 8080, 9090 and 8008; the metrics listen on loopback only.
    """
    return {
        **CONFIG_ENV,
        "SYSTEM_NAMESPACE": NAMESPACE,
        "PROBES_PORT": str(probes_port),
        "METRICS_PROMETHEUS_HOST": "127.0.0.1",
        "METRICS_PROMETHEUS_PORT": str(metrics_port),
        "PROFILING_PORT": str(profiling_port),
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(name: str, kubeconfig: Path, log_file: Path, binary: Path, timeout: float = 120) -> ManagedProcess:
    """Run Tekton's controller against the cluster of ``kubeconfig`` and wait until it reconciles.

    The caller owns the process (a cluster records it with its others, so
    ``multikueue dev clusters down`` stops it). Install the manifests first
    (:func:`install`): the controller exits when its ConfigMaps are missing.
    """
    argv = controller_command(binary, kubeconfig)
    env = controller_env(_free_port(), _free_port(), _free_port())
    offset = log_file.stat().st_size if log_file.exists() else 0
    proc = spawn(f"{name}/tekton-controller", argv, log_file, env=env)

    def started() -> bool:
        try:
            with log_file.open("rb") as f:
                f.seek(offset)
                return STARTED_LINE.encode() in f.read()
        except OSError:
            return False

    try:
        wait_until(started, timeout, 0.25, f"{name} Tekton controller to start its reconcilers", proc)
    except BaseException:
        proc.stop()
        raise
    log.info("tekton controller started", cluster=name, pid=proc.pid, log=str(log_file))
    return proc


def ensure() -> tuple[Source, Path]:
    """The unpacked source and the built controller: what :func:`install` and :func:`start` need."""
    source = ensure_source()
    return source, ensure_binary(source)
