"""Kind clusters with the controllers deployed in them from the image: what ``kind-configs/up.sh`` runs.

Every step is idempotent, so ``up.sh`` may be run again (after a failure, or
to pick up a rebuilt image):

1. one kind cluster per role (``multikueue-manager``, ``multikueue-worker1``,
   ``multikueue-worker2``) from ``kind-configs/<role>.yaml`` and the node image
   given (the offline one ``kind-configs/node-image.sh`` builds when
   ``kindest/node`` cannot be pulled);
2. ``kind load docker-image`` of the controller image and of the small job
   image (busybox, made here from Debian's static build: the Jobs' pods run as
   real containers on kind, and no registry may be reachable);
3. ``kubectl apply --server-side -k`` of ``config/default`` on the manager
   and of ``config/worker`` on the workers, as a user installs them, each with
   the Tekton component (``kind-configs/install/``: the demo dispatches a
   PipelineRun); waits for the Deployments;
4. the workers wired on the manager: a token of ``config/worker-access``'s
   ServiceAccount on each worker, in a kubeconfig Secret on the manager whose
   server is the worker's address on the ``kind`` Docker network (reachable
   from the manager's pods, not from this machine), and its MultiKueueCluster;
5. a ready setup in the shape of upstream's ``multikueue-setup.yaml``:
   ResourceFlavor ``default-flavor``, ClusterQueue ``cluster-queue`` (with the
   MultiKueue check on the manager) and LocalQueue ``user-queue`` in
   ``default`` on every cluster; waits until the check is ``Active``.

The admin kubeconfigs (``127.0.0.1`` addresses) are written to
``kind-configs/.state/<role>.kubeconfig``, where ``--clusters kind`` finds them.

A worker may run upstream Kueue instead (``KindOptions.upstream_workers``,
``up.sh --upstream-worker``): upstream's image is built from its source
archive and its ``config/default`` installed as shipped (:mod:`upstream`),
plus ``config/worker-access`` for the manager's identity. So may the manager
(``KindOptions.upstream_manager``, ``up.sh --upstream-manager``): upstream's
MultiKueue then dispatches to workers running this project's controller,
through the same Secrets, MultiKueueClusters and ready setup (they are
upstream's API). The choice is kept in ``kind-configs/.state/<role>.upstream``;
changing it needs ``down.sh`` first, since the two controllers' objects
would otherwise mix in one cluster.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from multikueue.dev import containers, upstream, wiring
from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerRun
from multikueue.dev.errors import DevEnvironmentError
from multikueue.dev.paths import source_checkout

ROLES = ("manager", "worker1", "worker2")
#: kind's Docker network, where the node containers reach each other.
NETWORK = "kind"
#: The image the Jobs of the demo and of the e2e suite run on kind (a static busybox).
JOB_IMAGE = o.JOB_IMAGE
MANAGED_BY = "kueue.x-k8s.io/multikueue"
#: The integrations upstream Kueue enables on a manager of ours (``up.sh --upstream-manager``): the ones
#: our workers serve (see :mod:`upstream` for why upstream's other defaults would make every worker inactive).
UPSTREAM_MANAGER_FRAMEWORKS = ("batch/job",)
CHECK = "multikueue-check"
CONFIG = "multikueue-config"
FLAVOR = "default-flavor"
CLUSTER_QUEUE = "cluster-queue"
LOCAL_QUEUE = "user-queue"
#: The share of a test's or the demo's CPU its pods and queues get on kind (``objects.CPU_SCALE``): the
#: pods really run there, on nodes with this machine's few cores.
CPU_SCALE = 0.1


def cluster_name(role: str) -> str:
    return f"multikueue-{role}"


def state_dir() -> Path:
    return source_checkout() / "kind-configs" / ".state"


def kubeconfig_path(role: str) -> Path:
    return state_dir() / f"{role}.kubeconfig"


@dataclass(frozen=True)
class KindOptions:
    #: The kind node image (``--image`` of ``kind create cluster``).
    node_image: str
    #: The controller image, loaded into every cluster.
    image: str = containers.IMAGE
    job_image: str = JOB_IMAGE
    #: CPU of the ClusterQueues of the ready setup, per cluster.
    cpu: int = 4
    #: Workers that run upstream Kueue (:data:`upstream.VERSION`) instead of this project's controller.
    upstream_workers: tuple[str, ...] = ()
    #: The manager runs upstream Kueue (its MultiKueue dispatches to the workers).
    upstream_manager: bool = False

    def __post_init__(self) -> None:
        unknown = [r for r in self.upstream_workers if r not in ROLES[1:]]
        if unknown:
            raise DevEnvironmentError(f"--upstream-worker {unknown[0]!r} is not a worker; the workers are {', '.join(ROLES[1:])}")

    def runs_ours(self, role: str) -> bool:
        return role not in self.upstream_roles

    @property
    def upstream_roles(self) -> tuple[str, ...]:
        """The roles that run upstream Kueue, manager first."""
        return (("manager",) if self.upstream_manager else ()) + self.upstream_workers


def kind(*args: str, timeout: float = 600) -> str:
    return containers.run(["kind", *args], timeout=timeout)


def existing_clusters() -> set[str]:
    return set(kind("get", "clusters").split())


def _log(message: str, started: float) -> None:
    print(f"--- [{time.monotonic() - started:5.0f}s] {message}", flush=True)


def ensure_job_image(tag: str = JOB_IMAGE) -> None:
    """A one-layer image holding Debian's static busybox (about 2 MB), made without any registry.

    Jobs run ``sleep``/``true`` in it. Built from the ``busybox-static``
    package (``apt-get download``), unpacked and ``docker import``-ed.
    """
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False).returncode == 0:
        return
    with tempfile.TemporaryDirectory(prefix="busybox-") as tmp:
        work = Path(tmp)
        containers.run(["apt-get", "download", "busybox-static"], timeout=300, cwd=work)
        [deb] = list(work.glob("busybox-static_*.deb"))
        root = work / "root"
        containers.run(["dpkg-deb", "-x", str(deb), str(root)])
        busybox = root / "bin" / "busybox"
        if not busybox.is_file():
            raise DevEnvironmentError(f"{deb.name} holds no bin/busybox; cannot make {tag}")
        for applet in ("sh", "sleep", "true", "false", "echo", "cat", "ls", "wget"):
            (root / "bin" / applet).symlink_to("busybox")
        image = work / "image"  # only bin/ goes in the image (not the package's docs)
        image.mkdir()
        (root / "bin").rename(image / "bin")
        containers.import_rootfs(image, tag, ['CMD ["/bin/sh"]'])


def node_address(role: str) -> str:
    """The node container's address on the kind network (the API server's certificate names it)."""
    out = containers.run(
        ["docker", "inspect", "-f", f"{{{{json .NetworkSettings.Networks.{NETWORK}.IPAddress}}}}", f"{cluster_name(role)}-control-plane"]
    )
    address = json.loads(out.strip() or '""')
    if not address:
        raise DevEnvironmentError(f"the node of {cluster_name(role)} has no address on the {NETWORK!r} Docker network")
    return str(address)


def _api(role: str) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig_path(role)))


def upstream_marker(role: str) -> Path:
    return state_dir() / f"{role}.upstream"


def upstream_roles() -> list[str]:
    """The roles ``up`` gave upstream Kueue (their marker files), manager first."""
    return [role for role in ROLES if upstream_marker(role).exists()]


def create_clusters(options: KindOptions, roles: Sequence[str] = ROLES, log: Callable[[str], None] = print) -> None:
    here = source_checkout() / "kind-configs"
    state_dir().mkdir(parents=True, exist_ok=True)
    present = existing_clusters()
    for role in roles:
        name = cluster_name(role)
        if name in present and upstream_marker(role).exists() == options.runs_ours(role):
            had, wants = ("upstream Kueue", "this project's controller") if options.runs_ours(role) else (
                "this project's controller", "upstream Kueue")
            raise DevEnvironmentError(
                f"cluster {name} runs {had}, and {wants} was asked for; remove the clusters first "
                "(kind-configs/down.sh), then run up.sh again"
            )
        if name in present:
            log(f"cluster {name} exists")
        else:
            log(f"creating cluster {name} (node image {options.node_image})")
            kind("create", "cluster", "--config", str(here / f"{role}.yaml"), "--image", options.node_image, "--wait", "120s", timeout=900)
        kubeconfig_path(role).write_text(kind("get", "kubeconfig", "--name", name))
        kubeconfig_path(role).chmod(0o600)
        if options.runs_ours(role):
            upstream_marker(role).unlink(missing_ok=True)
        else:
            upstream_marker(role).write_text(upstream.VERSION + "\n")


def image_id(tag: str) -> str:
    return containers.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag]).strip()


def load_images(options: KindOptions, roles: Sequence[str] = ROLES) -> list[str]:
    """Load both images into every cluster; the roles whose controller image changed since the last load.

    The tag stays ``multikueue:dev`` across rebuilds, so pods already running
    keep the old image until restarted: :func:`up` restarts those.
    """
    changed = []
    current = image_id(options.image)
    for role in roles:
        if not options.runs_ours(role):
            kind("load", "docker-image", upstream.IMAGE, options.job_image, "--name", cluster_name(role), timeout=900)
            continue
        kind("load", "docker-image", options.image, options.job_image, "--name", cluster_name(role), timeout=900)
        marker = state_dir() / f"{role}.image"
        previous = marker.read_text().strip() if marker.exists() else None
        if previous is not None and previous != current:
            changed.append(role)
        marker.write_text(current)
    return changed


def restart_controllers(roles: Sequence[str]) -> None:
    for role in roles:
        deployment = f"deployment/{containers.DEPLOYMENT}"
        containers.kubectl(kubeconfig_path(role), "-n", containers.CONTROLLER_NAMESPACE, "rollout", "restart", deployment)
        containers.kubectl(
            kubeconfig_path(role), "-n", containers.CONTROLLER_NAMESPACE, "rollout", "status", deployment, "--timeout=300s", timeout=330
        )


def install_controllers(roles: Sequence[str] = ROLES) -> None:
    """``config/default`` on the manager, ``config/worker`` on the workers; then wait for their Deployments."""
    overlays = source_checkout() / "kind-configs" / "install"
    for role in roles:
        containers.install(kubeconfig_path(role), overlays / ("manager" if role == "manager" else "worker"))
    for role in roles:
        containers.kubectl(
            kubeconfig_path(role),
            "-n",
            containers.CONTROLLER_NAMESPACE,
            "rollout",
            "status",
            f"deployment/{containers.DEPLOYMENT}",
            "--timeout=300s",
            timeout=330,
        )


def wire_workers(workers: Sequence[str] = ROLES[1:]) -> None:
    """Each worker's kubeconfig Secret (its kind-network address) and MultiKueueCluster on the manager."""
    endpoints = [
        wiring.endpoint_from_kubeconfig(role, kubeconfig_path(role), server=f"https://{node_address(role)}:6443")
        for role in workers
    ]
    wiring.connect_workers(_api("manager"), endpoints)


def _apply_through_webhooks(api: client.ApiClient, objects: list[dict[str, Any]], what: str, timeout: float = 90) -> None:
    """Apply, retrying while a webhook of the cluster cannot be called yet (a controller just started).

    A ready Deployment can still meet a Service whose endpoints are a moment
    behind; anything else the apiserver answers is raised at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            wiring.apply(api, objects)
            return
        except ApiException as exc:
            if exc.status != 500 or "webhook" not in str(exc.body) or time.monotonic() > deadline:
                raise DevEnvironmentError(f"applying {what} failed: {exc.status} {str(exc.body)[:400]}") from None
        time.sleep(2)


def ready_setup(options: KindOptions, roles: Sequence[str] = ROLES, namespace: str = "default") -> None:
    """Queues in the shape of upstream's multikueue-setup.yaml, then wait for the check to be Active."""
    workers = [r for r in roles if r != "manager"]
    manager_api = _api("manager")
    manager = o.Kueue(manager_api)
    objects: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": CONFIG}, "spec": {"clusters": workers}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": CHECK},
            "spec": {"controllerName": MANAGED_BY, "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": CONFIG}},
        },
    ]
    wiring.apply(manager_api, objects)
    quota = {FLAVOR: {"cpu": options.cpu, "memory": "8Gi"}}
    for role in roles:
        queues = [
            o.resource_flavor(FLAVOR),
            o.cluster_queue(CLUSTER_QUEUE, quota, checks=[CHECK] if role == "manager" else None),
            o.local_queue(namespace, LOCAL_QUEUE, CLUSTER_QUEUE),
        ]
        _apply_through_webhooks(_api(role), queues, what=f"the queues on {cluster_name(role)}")
    o.wait_for(lambda: o.is_true(manager.get("AdmissionCheck", CHECK), "Active"), 180, what=f"AdmissionCheck {CHECK} Active")


def up(options: KindOptions) -> None:
    started = time.monotonic()
    for tool in ("docker", "kind", "kubectl"):
        if shutil.which(tool) is None:
            raise DevEnvironmentError(f"{tool} is not installed; kind-configs/up.sh installs what it needs, run it instead")
    source = None
    if options.upstream_roles:
        _log(f"upstream Kueue {upstream.VERSION} for {', '.join(options.upstream_roles)}: source, binary, image", started)
        source = upstream.ensure_source()
        upstream.ensure_image(source)
    create_clusters(options, log=lambda m: _log(m, started))
    _log("job image", started)
    ensure_job_image(options.job_image)
    _log(f"loading {options.image} and {options.job_image} into the clusters", started)
    changed = load_images(options)
    ours = [role for role in ROLES if options.runs_ours(role)]
    _log(f"installing this project's controller on {', '.join(ours)} (config/default on the manager, config/worker on the workers)", started)
    install_controllers(ours)
    for role in options.upstream_roles:
        assert source is not None
        if role == "manager":
            _log(f"installing upstream Kueue's config/default on the manager (frameworks: {', '.join(UPSTREAM_MANAGER_FRAMEWORKS)})", started)
            upstream.install(kubeconfig_path(role), source, frameworks=UPSTREAM_MANAGER_FRAMEWORKS)
        else:
            _log(f"installing upstream Kueue's config/default and config/worker-access on {role}", started)
            containers.install(kubeconfig_path(role), "worker-access")
            upstream.install(kubeconfig_path(role), source)
    if changed:
        _log(f"{options.image} changed since the last load: restarting the controllers of {', '.join(changed)}", started)
        restart_controllers(changed)
    _log("wiring the workers on the manager (kind-network addresses)", started)
    wire_workers()
    _log(f"queues: ClusterQueue {CLUSTER_QUEUE}, LocalQueue default/{LOCAL_QUEUE}; waiting for {CHECK} to be Active", started)
    ready_setup(options)
    _log("ready", started)


def down(roles: Sequence[str] = ROLES) -> None:
    try:
        present = existing_clusters() if shutil.which("kind") else set()
    except containers.ContainerError as exc:
        raise DevEnvironmentError(f"cannot list the kind clusters (is the Docker engine running? hack/image.sh --engine-only starts it): {exc}") from None
    for role in roles:
        if cluster_name(role) in present:
            kind("delete", "cluster", "--name", cluster_name(role))
    shutil.rmtree(state_dir(), ignore_errors=True)


def sample_job(name: str = "sample-job", namespace: str = "default", seconds: int = 10, image: str = JOB_IMAGE) -> dict[str, Any]:
    """A Job for the ready setup's queue whose pod sleeps ``seconds`` in the job image."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": LOCAL_QUEUE}},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": image,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", str(seconds)],
                            "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}},
                        }
                    ],
                }
            },
        },
    }


SELECTOR = "app.kubernetes.io/name=multikueue,app.kubernetes.io/component=controller-manager"


@dataclass
class KindController(ControllerRun):
    """The controller Deployment of one kind cluster, as the e2e tests drive a controller.

    ``stop``/``start`` scale the Deployment to zero and back; ``kill`` deletes
    its pods at once (``--grace-period=0``), as a node loss would, and the
    Deployment starts new ones; ``logs`` reads the current pods' logs (and
    keeps the last read in ``log``).
    """

    name: str
    role: str
    kubeconfig: Path
    log: Path
    replicas: int = 1

    def _kubectl(self, *args: str, timeout: float = 120) -> str:
        return containers.kubectl(self.kubeconfig, "-n", containers.CONTROLLER_NAMESPACE, *args, timeout=timeout)

    def start(self, timeout: float = 180) -> "KindController":
        self._kubectl("scale", f"deployment/{containers.DEPLOYMENT}", f"--replicas={self.replicas}")
        self._kubectl("rollout", "status", f"deployment/{containers.DEPLOYMENT}", f"--timeout={int(timeout)}s", timeout=timeout + 30)
        return self

    def stop(self) -> None:
        self._kubectl("scale", f"deployment/{containers.DEPLOYMENT}", "--replicas=0")
        try:
            self._kubectl("wait", "--for=delete", "pod", "-l", SELECTOR, "--timeout=90s", timeout=120)
        except containers.ContainerError as exc:
            if "no matching resources" not in str(exc):  # the pods were gone before the wait began
                raise

    def kill(self) -> None:
        self._kubectl("delete", "pod", "-l", SELECTOR, "--grace-period=0", "--force", "--wait=false")

    @property
    def alive(self) -> bool:
        status = json.loads(self._kubectl("get", f"deployment/{containers.DEPLOYMENT}", "-o", "json")).get("status") or {}
        return int(status.get("readyReplicas") or 0) >= 1

    def logs(self) -> str:
        try:
            text = self._kubectl("logs", "-l", SELECTOR, "--all-containers", "--prefix", "--tail=-1")
        except containers.ContainerError as exc:
            return f"(logs not available: {exc})"
        self.log.write_text(text)
        return text


def e2e_controllers(directory: Path) -> list[KindController]:
    """The controllers ``up`` deployed, manager first (its Deployment's two replicas), then the workers."""
    if upstream_roles():
        raise DevEnvironmentError(
            f"{', '.join(upstream_roles())} run(s) upstream Kueue: the e2e suite drives this project's controller "
            "on every cluster; run kind-configs/down.sh and kind-configs/up.sh without --upstream-worker or --upstream-manager"
        )
    controllers = []
    for role in ROLES:
        count = json.loads(
            containers.kubectl(
                kubeconfig_path(role), "-n", containers.CONTROLLER_NAMESPACE, "get", f"deployment/{containers.DEPLOYMENT}", "-o", "json"
            )
        )["spec"].get("replicas", 1)
        controllers.append(
            KindController(
                name=role,
                role="manager" if role == "manager" else "worker",
                kubeconfig=kubeconfig_path(role),
                log=directory / f"{role}-controller.log",
                replicas=max(1, int(count)),
            )
        )
    return controllers
