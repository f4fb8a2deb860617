"""Run this project's controller from its container image against the local clusters.

The install manifests (``config/default`` for a manager, ``config/worker``
for a worker) are applied to a local cluster as a user would apply them; the
controller then runs from the image as its Deployment describes (its
arguments are read from the rendered manifests), with the identity the
manifests create: a ServiceAccount token and the cluster's CA mounted where
in-cluster configuration looks for them. So a run in this mode tests the
image, the manifests' flags and exactly their RBAC.

What differs from a real cluster, because a local cluster's nodes are kwok's
fakes that run no container:

- the containers run on this machine's Docker engine with host networking
  (the local API servers listen on loopback only), each replica on its own
  ports; the Deployment is applied with zero replicas, as kwok would fake
  its pods (Running, with made-up IPs that the webhook Service's endpoints
  would then point at);
- the webhook Service gets no selector and an Endpoints object of ours that
  points at the replicas through the Docker bridge's address (the API
  server's endpoint routing, ``--enable-aggregator-routing``, dials it), so
  the API server still reaches the webhook through its Service reference.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from multikueue.dev.controllers import ControllerRun, free_port, probe
from multikueue.dev.paths import source_checkout

#: The image the manifests name and the build script tags by default.
IMAGE = "multikueue:dev"
CONTROLLER_NAMESPACE = "kueue-system"
SERVICE_ACCOUNT = "multikueue-controller-manager"
DEPLOYMENT = "multikueue-controller-manager"
WEBHOOK_SERVICE = "multikueue-webhook-service"
#: Where in-cluster configuration reads the token, the CA and the namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Flags a replica gets its own value for (host networking: no two replicas may share a port).
PORT_FLAGS = ("--health-port", "--metrics-port", "--webhook-port")


class ContainerError(RuntimeError):
    """A docker or kubectl step failed; the message has its output."""


def run(argv: Sequence[str], *, timeout: float = 300, input_text: str | None = None, cwd: Path | None = None) -> str:
    """Run a command; its stdout, or :class:`ContainerError` with what it printed."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, input=input_text, check=False, cwd=cwd
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ContainerError(f"{' '.join(argv[:3])}: {exc}") from exc
    if done.returncode != 0:
        raise ContainerError(f"{' '.join(argv)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}")
    return done.stdout


def import_rootfs(root: Path, tag: str, changes: Sequence[str]) -> None:
    """``docker import`` the folder ``root`` as a one-layer image ``tag`` (no base image, no registry).

    ``changes`` are Dockerfile instructions (``CMD``, ``ENTRYPOINT``, ``USER``, ``LABEL``...).
    """
    with tempfile.TemporaryDirectory(prefix="rootfs-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        run(["tar", "-C", str(root), "-cf", str(tarball), "."])
        run(["docker", "import", *(arg for change in changes for arg in ("--change", change)), str(tarball), tag], timeout=300)


def build_image(tag: str = IMAGE) -> None:
    """``hack/image.sh --tag TAG``: starts dockerd if needed, builds the image or finds it up to date (seconds)."""
    run([str(source_checkout() / "hack" / "image.sh"), "--tag", tag], timeout=1800)


def kubectl(kubeconfig: Path, *args: str, timeout: float = 120) -> str:
    return run(["kubectl", "--kubeconfig", str(kubeconfig), *args], timeout=timeout)


def _kustomization(base: str | Path) -> Path:
    """A base of ``config/`` by name (``"default"``), or any kustomization folder by path."""
    return base if isinstance(base, Path) else source_checkout() / "config" / base


def render(base: str | Path) -> list[dict[str, Any]]:
    """The objects of a kustomize base of ``config/`` (e.g. ``default``), as ``kubectl kustomize`` renders them."""
    text = run(["kubectl", "kustomize", str(_kustomization(base))])
    return [d for d in yaml.safe_load_all(text) if d]


def install(kubeconfig: Path, base: str | Path, *, without_pods: bool = False) -> list[dict[str, Any]]:
    """``kubectl apply --server-side -k config/<base>`` (forcing conflicts: the dev tooling installed the CRDs first).

    ``without_pods``: the rendered base is applied with the Deployment at zero
    replicas, for clusters whose kwok nodes would otherwise fake its pods
    (Running, with made-up IPs the webhook Service's endpoints would point
    at: an address outside this machine).
    """
    objects = render(base)
    if not without_pods:
        kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-k", str(_kustomization(base)))
        return objects
    for obj in objects:
        if obj.get("kind") == "Deployment":
            obj["spec"]["replicas"] = 0
    text = yaml.safe_dump_all(objects)
    run(["kubectl", "--kubeconfig", str(kubeconfig), "apply", "--server-side", "--force-conflicts", "-f", "-"], input_text=text)
    return objects


def deployment_args(objects: Iterable[dict[str, Any]], name: str = DEPLOYMENT) -> list[str]:
    """The controller container's arguments in the rendered Deployment ``name``."""
    for obj in objects:
        if obj.get("kind") == "Deployment" and obj["metadata"]["name"] == name:
            container = obj["spec"]["template"]["spec"]["containers"][0]
            return [*container.get("command", [])[2:], *container.get("args", [])]
    raise ContainerError(f"no Deployment {name!r} in the rendered manifests")


def with_ports(args: Sequence[str], ports: dict[str, int]) -> list[str]:
    """``args`` with each ``--flag=N``/``--flag N`` of ``ports`` set to its value (added when missing)."""
    out: list[str] = []
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in ports:
            skip = "=" not in arg and index + 1 < len(args)
            continue
        out.append(arg)
    return out + [f"{flag}={port}" for flag, port in ports.items()]


def bridge_address() -> str:
    """An address of this machine the API servers can dial and Endpoints accept (not loopback): the Docker bridge's."""
    text = run(["docker", "network", "inspect", "bridge"])
    for network in json.loads(text):
        for config in (network.get("IPAM") or {}).get("Config") or []:
            if config.get("Gateway"):
                return str(config["Gateway"])
        # No gateway recorded (seen with dockerd started by hand): the bridge interface's own address.
        interface = (network.get("Options") or {}).get("com.docker.network.bridge.name", "docker0")
        for line in run(["ip", "-4", "-o", "addr", "show", "dev", interface]).splitlines():
            fields = line.split()
            if "inet" in fields:
                return fields[fields.index("inet") + 1].split("/")[0]
    raise ContainerError("the Docker bridge network has no address: is dockerd running (hack/image.sh starts it)?")


def route_service(api: client.ApiClient, namespace: str, name: str, address: str, ports: Sequence[int]) -> None:
    """Point Service ``name`` at ``address:port`` for each port: no selector, EndpointSlices of ours.

    The API server's endpoint routing reads EndpointSlices and takes the
    port whose name is the Service port's; one slice per replica, as each
    listens on its own port of this machine.
    """
    core = client.CoreV1Api(api)
    discovery = client.DiscoveryV1Api(api)
    service = core.read_namespaced_service(name, namespace)
    port_name = service.spec.ports[0].name or ""
    core.patch_namespaced_service(name, namespace, {"spec": {"selector": None}})
    # Slices the cluster made while the Service had a selector would send the API server elsewhere.
    for stale in discovery.list_namespaced_endpoint_slice(namespace, label_selector=f"kubernetes.io/service-name={name}").items:
        if (stale.metadata.labels or {}).get("endpointslice.kubernetes.io/managed-by") != "multikueue-e2e":
            try:
                discovery.delete_namespaced_endpoint_slice(stale.metadata.name, namespace)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
    for index, port in enumerate(ports):
        body = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{name}-e2e-{index}",
                "namespace": namespace,
                # Owned by the tests: the cluster's EndpointSlice controllers leave such slices alone.
                "labels": {"kubernetes.io/service-name": name, "endpointslice.kubernetes.io/managed-by": "multikueue-e2e"},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
        }
        try:
            discovery.create_namespaced_endpoint_slice(namespace, body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            discovery.replace_namespaced_endpoint_slice(body["metadata"]["name"], namespace, body)


def scale_to_zero(api: client.ApiClient, namespace: str = CONTROLLER_NAMESPACE, name: str = DEPLOYMENT) -> None:
    """kwok's nodes would fake the Deployment's pods (Running, doing nothing): the containers stand in for them."""
    client.AppsV1Api(api).patch_namespaced_deployment_scale(name, namespace, {"spec": {"replicas": 0}})


def service_account_files(api: client.ApiClient, directory: Path, namespace: str = CONTROLLER_NAMESPACE,
                          account: str = SERVICE_ACCOUNT) -> Path:
    """A folder holding ``token``, ``ca.crt`` and ``namespace`` as the kubelet mounts them for a pod."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400}}
    token = client.CoreV1Api(api).create_namespaced_service_account_token(account, namespace, request).status.token
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token)
    shutil.copyfile(api.configuration.ssl_ca_cert, directory / "ca.crt")
    (directory / "namespace").write_text(namespace)
    for path in (directory, *directory.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)  # the image's user is not root
    return directory


@dataclass
class ControllerContainer(ControllerRun):
    """One replica of the controller, from the image; the same surface as ``ControllerProcess`` for the tests."""

    name: str
    role: str
    #: The cluster's admin kubeconfig: used to mint the ServiceAccount's token, never given to the container.
    kubeconfig: Path
    log: Path
    #: The Deployment's arguments (ports are given per replica).
    args: Sequence[str]
    server_port: int
    credentials: Path
    image: str = IMAGE
    webhooks: bool = False
    health_port: int = 0
    metrics_port: int = 0
    webhook_port: int = 0
    container: str | None = None
    _logs: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self, timeout: float = 90) -> "ControllerContainer":
        self.health_port = self.health_port or free_port()
        self.metrics_port = self.metrics_port or free_port()
        ports = {"--health-port": self.health_port, "--metrics-port": self.metrics_port}
        if self.webhooks:
            self.webhook_port = self.webhook_port or free_port()
            ports["--webhook-port"] = self.webhook_port
        argv = [
            "docker", "run", "--detach", "--network", "host",
            "--name", f"multikueue-{self.name}-{self.health_port}",
            "--env", "KUBERNETES_SERVICE_HOST=127.0.0.1",
            "--env", f"KUBERNETES_SERVICE_PORT={self.server_port}",
            "--env", f"POD_NAME={self.name}",
            "--volume", f"{self.credentials}:{SERVICE_ACCOUNT_DIR}:ro",
            "--tmpfs", "/tmp",
            "--read-only",
            self.image,
            *with_ports(self.args, ports),
        ]
        self.container = run(argv).strip()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as sink:
            self._logs = subprocess.Popen(["docker", "logs", "--follow", self.container], stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not probe(self.health_port, "/readyz"):
            if not self.alive:
                raise ContainerError(f"{self.name}: the container exited at start; its log: {self.logs()[-3000:]}")
            if time.monotonic() > deadline:
                raise ContainerError(f"{self.name}: /readyz did not answer within {timeout:.0f}s; log: {self.logs()[-3000:]}")
            time.sleep(0.2)
        return self

    def ready(self) -> bool:
        return probe(self.health_port, "/readyz")

    def _end(self, command: list[str]) -> None:
        if self.container is None:
            return
        try:
            run(command + [self.container], timeout=60)
        except ContainerError:
            pass  # gone already
        finally:
            if self._logs is not None:
                try:
                    self._logs.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._logs.kill()
                self._logs = None
            subprocess.run(["docker", "rm", "--force", self.container], capture_output=True, check=False)
            self.container = None

    def stop(self) -> None:
        """SIGTERM, as the kubelet does, then SIGKILL after 20 s."""
        self._end(["docker", "stop", "--time", "20"])

    def kill(self) -> None:
        """SIGKILL: a crash or a lost node."""
        self._end(["docker", "kill", "--signal", "KILL"])


    @property
    def alive(self) -> bool:
        if self.container is None:
            return False
        done = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", self.container], capture_output=True, text=True, check=False)
        return done.stdout.strip() == "true"
