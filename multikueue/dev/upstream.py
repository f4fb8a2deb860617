"""Upstream Kueue as a peer: built from its source archive, installed as upstream ships it.

Many MultiKueue users already run upstream Kueue on their worker clusters, so
a worker of ours must be replaceable by one of theirs. This module makes that
worker here, where no image registry answers:

1. **source**: ``kueue-v0.19.2.tar.gz`` from the third-party folder beside the
   checkout (``../shared/thirdparty``, or ``$MULTIKUEUE_THIRDPARTY``), checked
   against its sha256 and unpacked into the cache folder;
2. **binary**: ``go build -mod=vendor ./cmd/kueue`` (no module download: the
   archive carries its ``vendor/``), cached as ``bin/kueue-<version>-<sha>``
   (about 10 minutes cold on two cores, nothing when cached);
3. **image**: ``docker import`` of a one-file root (``/manager`` and an empty
   ``/tmp``), tagged :data:`IMAGE` and labelled with the archive's checksum,
   so a new archive makes a new image;
4. **install**: upstream's own ``config/default`` rendered by kustomize with
   only the image replaced (and pulled ``IfNotPresent``: it is loaded into the
   nodes, not pulled). Upstream's Configuration, RBAC, webhooks and internal
   certificates are used as shipped, except on a MultiKueue manager
   (``frameworks``): there upstream's ``integrations.frameworks`` is cut to
   the ones the workers serve, because upstream's MultiKueue marks a worker
   inactive (``ClientConnectionFailed: no matches for kind "MPIJob"``) unless
   the worker has the CRD of every enabled framework with a MultiKueue
   adapter, as its documentation asks of workers.

Upstream's webhooks refuse Kueue objects until its certificates are in place,
so :func:`install` waits for its Deployment to be ready.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import structlog
import yaml

from multikueue.dev import containers
from multikueue.dev.binaries import binaries_dir
from multikueue.dev.process import ManagedProcess, spawn
from multikueue.dev.thirdparty import GoArchive, Source, build_go_binary

log = structlog.get_logger(__name__)

VERSION = "v0.19.2"
ARCHIVE = f"kueue-{VERSION}.tar.gz"
#: The archive the third-party README lists; another file under that name is refused.
ARCHIVE_SHA256 = "eb04ed1a416c62ac5b2f75e1d7b84610bb10d849c2f937aa5ac0a1c73b6744ad"
IMAGE = f"multikueue/upstream-kueue:{VERSION}"
#: The image name upstream's config/components/manager kustomization sets (replaced at install).
UPSTREAM_IMAGE_NAME = "us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue"
NAMESPACE = "kueue-system"
DEPLOYMENT = "kueue-controller-manager"
#: The label of the image that records which archive it was built from.
SOURCE_LABEL = "io.multikueue.upstream-kueue.sha256"
#: The ConfigMap holding upstream's Configuration (``config/components/manager``, with the ``kueue-`` prefix).
CONFIG_MAP = "kueue-manager-config"


ARCHIVE_SPEC = GoArchive("upstream Kueue", ARCHIVE, ARCHIVE_SHA256, VERSION, prefix="kueue")


def archive_path() -> Path:
    return ARCHIVE_SPEC.path()


def ensure_source() -> Source:
    """The archive checked and unpacked once into the cache (reused while its checksum holds)."""
    return ARCHIVE_SPEC.unpacked()


def ensure_binary(source: Source) -> Path:
    """Upstream's manager (``cmd/kueue``), statically linked, cached by the archive's checksum."""
    return build_go_binary(
        source,
        binaries_dir() / f"kueue-{VERSION}-{source.short}",
        "./cmd/kueue",
        f"upstream Kueue {VERSION}",
        ["-ldflags=-s -w"],
        estimate="about 10 minutes cold on two cores",
    )


def _image_source(tag: str) -> str | None:
    proc = subprocess.run(
        ["docker", "image", "inspect", "-f", f'{{{{index .Config.Labels "{SOURCE_LABEL}"}}}}', tag],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def ensure_image(source: Source, tag: str = IMAGE) -> str:
    """The manager in a one-file image (no base image needed), rebuilt when the archive changes."""
    if _image_source(tag) == source.sha256:
        return tag
    binary = ensure_binary(source)
    with tempfile.TemporaryDirectory(prefix="kueue-image-") as tmp:
        root = Path(tmp) / "root"
        (root / "tmp").mkdir(parents=True)
        (root / "tmp").chmod(0o1777)
        shutil.copy2(binary, root / "manager")
        containers.import_rootfs(
            root, tag, ['ENTRYPOINT ["/manager"]', "USER 65532:65532", f"LABEL {SOURCE_LABEL}={source.sha256}"]
        )
    return tag


def manager_configuration(source: Source, frameworks: Sequence[str]) -> str:
    """Upstream's shipped Configuration with ``integrations.frameworks`` replaced."""
    path = source.root / "config" / "components" / "manager" / "controller_manager_config.yaml"
    document = yaml.safe_load(path.read_text())
    document.setdefault("integrations", {})["frameworks"] = list(frameworks)
    return yaml.safe_dump(document, sort_keys=False)


def kustomization(source: Source, image: str = IMAGE, frameworks: Sequence[str] | None = None) -> str:
    """The overlay of upstream's ``config/default``: its image, pulled only when not loaded already.

    With ``frameworks``, the Configuration's ``integrations.frameworks`` is
    replaced by them (see the module docstring).
    """
    name, _, tag = image.rpartition(":")
    configuration = ""
    if frameworks is not None:
        ops = [{"op": "replace", "path": "/data/controller_manager_config.yaml", "value": manager_configuration(source, frameworks)}]
        configuration = f"""\
- target:
    version: v1
    kind: ConfigMap
    name: {CONFIG_MAP}
  patch: {json.dumps(json.dumps(ops))}
"""
    return f"""\
# Written by multikueue/dev/upstream.py: upstream Kueue {VERSION} as it ships, with the image built here.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../default
images:
- name: {UPSTREAM_IMAGE_NAME}
  newName: {name}
  newTag: {tag}
patches:
- target:
    group: apps
    version: v1
    kind: Deployment
    name: {DEPLOYMENT}
  patch: |-
    - op: replace
      path: /spec/template/spec/containers/0/imagePullPolicy
      value: IfNotPresent
{configuration}"""


def overlay(source: Source, image: str = IMAGE, frameworks: Sequence[str] | None = None) -> Path:
    """Write :func:`kustomization` beside upstream's ``config/default`` (kustomize reads bases by relative path)."""
    folder = source.root / "config" / ("multikueue-overlay" if frameworks is None else "multikueue-overlay-manager")
    folder.mkdir(exist_ok=True)
    (folder / "kustomization.yaml").write_text(kustomization(source, image, frameworks))
    return folder


def install(
    kubeconfig: Path, source: Source, image: str = IMAGE, timeout: int = 300, frameworks: Sequence[str] | None = None
) -> None:
    """Apply upstream's manifests and wait until its manager (and so its webhooks) is ready.

    ``frameworks``: the integrations a MultiKueue manager enables (the
    Configuration is then changed, and the Deployment restarted when it was
    running with another one).
    """
    changed = frameworks is not None and _applied_configuration(kubeconfig) not in (None, manager_configuration(source, frameworks))
    containers.kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-k", str(overlay(source, image, frameworks)), timeout=300)
    if changed:
        containers.kubectl(kubeconfig, "-n", NAMESPACE, "rollout", "restart", f"deployment/{DEPLOYMENT}")
    containers.kubectl(
        kubeconfig, "-n", NAMESPACE, "rollout", "status", f"deployment/{DEPLOYMENT}", f"--timeout={timeout}s", timeout=timeout + 30
    )


def _applied_configuration(kubeconfig: Path) -> str | None:
    """The Configuration text in the cluster's ConfigMap, ``None`` when not installed yet."""
    try:
        out = containers.kubectl(kubeconfig, "-n", NAMESPACE, "get", "configmap", CONFIG_MAP, "-o", "json")
    except containers.ContainerError:
        return None
    return str((json.loads(out).get("data") or {}).get("controller_manager_config.yaml", ""))


# -- upstream's manager as a local process (bench/dispatch.py --manager upstream) --------------

#: Where upstream's manager reads its metrics server's certificate whenever it does not manage
#: its certificates itself: hard-coded in ``cmd/kueue/main.go`` (no flag or field moves it).
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


def local_manager_configuration(
    source: Source,
    *,
    health_port: int,
    metrics_port: int,
    webhook_port: int,
    cert_dir: Path,
    frameworks: Sequence[str] = ("batch/job",),
) -> dict[str, object]:
    """Upstream's shipped Configuration, changed only where a process on loopback beside the apiserver needs it.

    - ``integrations.frameworks``: the ones the workers serve (see the module docstring);
    - leader election off (one replica, and no Lease writes in the request counts);
    - probes, metrics and webhook on free loopback ports instead of the Pod's fixed ones;
    - ``internalCertManagement`` off with a serving certificate written to ``cert_dir``:
      upstream's own certificate management writes a Secret and patches webhook
      configurations and the CRDs' conversion for a Service that does not exist here.
      No webhook configuration is registered either (nothing would reach the
      process through a Service), so the objects submitted must already carry
      what upstream's Job webhook would set: ``suspend: true`` and
      ``spec.managedBy: kueue.x-k8s.io/multikueue`` (the bench writes both);
    - the ``VisibilityOnDemand`` feature off (its API server needs a certificate at
      ``/visibility`` and an APIService; MultiKueue does not use it).

    The client limits (``clientConnection``: 300 QPS / 500 burst) and controller
    concurrency stay as shipped.
    """
    path = source.root / "config" / "components" / "manager" / "controller_manager_config.yaml"
    document: dict[str, object] = yaml.safe_load(path.read_text())
    document["integrations"] = {"frameworks": list(frameworks)}
    document["leaderElection"] = {"leaderElect": False}
    document["health"] = {"healthProbeBindAddress": f"127.0.0.1:{health_port}"}
    document["metrics"] = {"bindAddress": f"127.0.0.1:{metrics_port}"}
    document["webhook"] = {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)}
    document["internalCertManagement"] = {"enable": False}
    # The visibility API server reads its certificate from /visibility (hard-coded) and serves an
    # APIService nothing registers here; MultiKueue does not use it.
    document["featureGates"] = {"VisibilityOnDemand": False}
    return document


def write_serving_certificate(directory: Path) -> None:
    """A loopback serving certificate as controller-runtime reads it (``tls.crt``, ``tls.key``)."""
    from multikueue.runtime.certificates import issue_webhook_certificate

    material = issue_webhook_certificate(["localhost", "127.0.0.1"])
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(material.cert_pem)
    (directory / "tls.key").write_bytes(material.key_pem)
    (directory / "tls.key").chmod(0o600)


def ensure_metrics_certificate() -> None:
    """Upstream's hard-coded metrics certificate (:data:`METRICS_CERT_DIR`), written once when absent.

    Without it the process exits at start-up ("Unable to initialize metrics
    certificate watcher"). Writing under ``/etc`` needs root; otherwise the
    error says what to create.
    """
    if (METRICS_CERT_DIR / "tls.crt").exists() and (METRICS_CERT_DIR / "tls.key").exists():
        return
    try:
        write_serving_certificate(METRICS_CERT_DIR)
    except OSError as exc:
        raise RuntimeError(
            f"upstream Kueue {VERSION} reads its metrics certificate from {METRICS_CERT_DIR} (hard-coded) when it "
            f"does not manage certificates itself; cannot write it there: {exc}"
        ) from None


def start_local_manager(kubeconfig: Path, directory: Path, binary: Path, configuration: dict[str, object], log_file: Path) -> ManagedProcess:
    """Run ``binary`` (upstream's ``cmd/kueue``) against ``kubeconfig`` with ``configuration``; return its process.

    The caller waits for readiness (``/readyz`` on the configured health port)
    and stops it; the process is recorded nowhere else.
    """
    directory.mkdir(parents=True, exist_ok=True)
    config_file = directory / "kueue-config.yaml"
    config_file.write_text(yaml.safe_dump(configuration, sort_keys=False))
    return spawn(
        "manager/upstream-kueue",
        [str(binary), f"--config={config_file}", f"--kubeconfig={kubeconfig}", "--zap-log-level=info"],
        log_file,
        env={"KUBECONFIG": str(kubeconfig)},
    )
