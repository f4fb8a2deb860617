"""pytest fixtures that run tests against real local clusters.

Loaded with ``-p multikueue.dev.pytest_plugin`` (see ``pyproject.toml``), so
``tests/`` and ``e2e/`` share one definition of the clusters:

- ``integration_clusters``: a manager and two workers, etcd + kube-apiserver
  only, started once per session;
- ``e2e_clusters``: a manager and two full workers (controller-manager,
  scheduler, kwok), started once per session;
- ``upstream_crd_cluster``: one apiserver with upstream Kueue's CRDs from
  ``../shared/reference``, for compatibility tests;
- ``namespace``: a fresh namespace created on the manager and every worker;
- ``tekton_workers``: Tekton Pipelines' controller on the e2e workers, for the
  module that asks (``e2e/test_tekton.py``).

Clusters take free loopback ports, live under pytest's temporary folder and are
stopped at the end of the session.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import random
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from kubernetes import client, config

from multikueue.dev import containers, kind, tekton, wiring
from multikueue.dev import objects as o
from multikueue.dev.binaries import ensure_binaries
from multikueue.dev.clusterset import ClusterSet, ClusterSetOptions
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.errors import DevEnvironmentError
from multikueue.dev.localcluster import PORTS_PER_CLUSTER
from multikueue.dev.paths import source_checkout
from multikueue.dev.process import ManagedProcess, port_in_use


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--clusters",
        choices=["local", "kind"],
        default="local",
        help="e2e clusters: local control planes (default) or kind clusters from kind-configs/up.sh",
    )
    parser.addoption(
        "--controllers",
        choices=["process", "image"],
        default="process",
        help="e2e controllers: `multikueue run` processes with admin kubeconfigs (default), or the container "
        "image installed with config/default and config/worker (their RBAC, two manager replicas); build it "
        "first with hack/image.sh",
    )
    parser.addoption("--image", default=containers.IMAGE, help=f"the image for --controllers image (default {containers.IMAGE})")


_DESELECTED = pytest.StashKey[dict[str, int]]()


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--clusters") == "kind":
        o.CPU_SCALE = kind.CPU_SCALE


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect what this run cannot do, and say so at the end (never a silent skip).

    Tests marked ``image`` are opt-in: kept with ``-m`` naming ``image`` or
    with ``--controllers image``; a plain run must not start dockerd or build
    an image (``hack/test.sh`` runs them in a second pass). Tests marked
    ``local_clusters`` (they stop the local control planes' processes, or
    need kwok's nodes and stages) are left out with ``--clusters kind``.
    Tests marked ``upstream_worker`` run only on kind clusters whose worker
    runs upstream Kueue (``kind-configs/up.sh --upstream-worker worker2``),
    those marked ``upstream_manager`` only on kind clusters whose manager
    does (``up.sh --upstream-manager``), and on such clusters only they run:
    the others drive this project's controller on every cluster
    (``hack/test.sh`` runs the three kind set-ups).
    """
    on_kind = config.getoption("--clusters") == "kind"
    roles = kind.upstream_roles() if on_kind else []
    wanted = "upstream_manager" if "manager" in roles else "upstream_worker" if roles else None

    def upstream_marker(item: pytest.Item) -> str | None:
        return next((m for m in ("upstream_worker", "upstream_manager") if item.get_closest_marker(m) is not None), None)

    drop: dict[str, Callable[[pytest.Item], bool] | None] = {
        "image": (lambda item: item.get_closest_marker("image") is not None)
        if "image" not in (config.getoption("markexpr") or "") and config.getoption("--controllers") != "image"
        else None,
        "local_clusters": (lambda item: item.get_closest_marker("local_clusters") is not None) if on_kind else None,
        "upstream_worker": (lambda item: upstream_marker(item) == "upstream_worker") if wanted != "upstream_worker" else None,
        "upstream_manager": (lambda item: upstream_marker(item) == "upstream_manager") if wanted != "upstream_manager" else None,
        "ours_everywhere": (lambda item: upstream_marker(item) is None) if wanted else None,
    }
    counts: dict[str, int] = {}
    for reason, dropped_if in drop.items():
        if dropped_if is None:
            continue
        dropped = [item for item in items if dropped_if(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if not dropped_if(item)]
            counts[reason] = len(dropped)
    config.stash[_DESELECTED] = counts


_SUMMARY = {
    "image": "{} image tests deselected (opt-in): python -m pytest --controllers image -m image",
    "local_clusters": "{} tests deselected on kind (they need the local control planes): run them without --clusters kind",
    "upstream_worker": "{} tests deselected (they need a worker running upstream Kueue): "
    "kind-configs/up.sh --upstream-worker worker2, then run them with --clusters kind",
    "upstream_manager": "{} tests deselected (they need a manager running upstream Kueue): "
    "kind-configs/up.sh --upstream-manager, then run them with --clusters kind",
    "ours_everywhere": "{} tests deselected (a kind cluster runs upstream Kueue; they need this project's controller "
    "on every cluster): kind-configs/down.sh, kind-configs/up.sh, then run them with --clusters kind",
}


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    for reason, count in config.stash.get(_DESELECTED, {}).items():
        terminalreporter.write_line(_SUMMARY[reason].format(count))


#: How many of a controller's log lines about the failed test's namespace a failure report shows.
FAILURE_LOG_LINES = 80
#: Lines shown whatever namespace they are about: errors, and the workers' connections coming and
#: going (a CI failure once left a worker unused with no line about the test's namespace at all).
ALWAYS_SHOWN = ('"level": "error"', '"event": "worker connection', '"event": "worker kubeconfig')


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that drove controllers reports their log lines about its namespace (and ``ALWAYS_SHOWN``).

    On kind the log files hold only the pods' logs as last read, and a CI run
    keeps nothing else: without this a failure there cannot be traced.
    """
    outcome = yield
    report = outcome.get_result()
    funcargs = getattr(item, "funcargs", {})
    if call.when != "call" or not report.failed or "e2e_controllers" not in funcargs:
        return
    clusters = next((value for value in funcargs.values() if isinstance(value, Clusters)), None)
    if clusters is not None:
        report.sections.append(("workers as the manager sees them", workers_report(clusters)))
    namespace = funcargs.get("namespace")
    for ctl in funcargs["e2e_controllers"]:
        try:
            lines = ctl.logs().splitlines()
        except Exception as exc:  # a report must not fail on a controller that is gone
            lines = [f"(logs not available: {exc})"]
        if namespace:
            lines = [line for line in lines if namespace in line or any(mark in line for mark in ALWAYS_SHOWN)]
        shown = "\n".join(lines[-FAILURE_LOG_LINES:]) or "(no lines)"
        report.sections.append((f"controller log: {ctl.name} (lines about {namespace or 'the test'})", shown))


def workers_report(clusters: Clusters) -> str:
    """Each MultiKueueCluster's ``Active`` condition on the manager, and this machine's load, at a failure.

    A CI failure once made three later MultiKueue tests fail too, with nothing
    in the log to tell whether a worker was still cut off or the machine was
    starved; these lines say which.
    """
    lines = []
    try:
        for mkc in o.Kueue(clusters.manager).list("MultiKueueCluster"):
            active = o.condition(mkc, "Active") or {}
            lines.append(
                f"{mkc['metadata']['name']}: Active={active.get('status')} {active.get('reason')} "
                f"since {active.get('lastTransitionTime')}: {str(active.get('message'))[:200]}"
            )
    except Exception as exc:  # a report must not fail on a manager that is gone
        lines.append(f"(MultiKueueClusters not read: {str(exc)[:200]})")
    try:
        lines.append("load average (1, 5, 15 min): " + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    except OSError:
        pass
    return "\n".join(lines)


def _ephemeral_ports() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux; a common default elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_base_port(clusters: int) -> int:
    """A base port whose whole range of cluster ports is free right now.

    The range is taken below the kernel's ephemeral range when there is room:
    a port picked there can be taken by any outgoing connection between this
    check and the component's bind (seen: a kube-scheduler that never started
    under load).
    """
    span = clusters * PORTS_PER_CLUSTER
    low, high = _ephemeral_ports()
    start, end = (20000, low - span) if low - span > 20000 + 10 * span else (high + 1, 65535 - span)
    if end <= start:
        start, end = 30000, 60000 - span
    for _ in range(200):
        base = random.randrange(start, end, PORTS_PER_CLUSTER)
        if not any(port_in_use(p) for p in range(base, base + span)):
            return base
    raise RuntimeError("no free range of loopback ports found")


def reference_dir() -> Path:
    """``../shared/reference`` beside the checkout: upstream CRDs and examples (test data)."""
    path = source_checkout().parent / "shared" / "reference"
    if not path.is_dir():
        pytest.fail(f"upstream reference data not found at {path}; the compatibility tests need ../shared beside the checkout")
    return path


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` of the checkout as a module, for the tests of a benchmark's pure parts.

    Loaded once per session under its own name, with ``bench/`` on the path, as
    the benches run (``_perf`` imports its sibling ``_dispatch_metrics``).
    """
    if (loaded := sys.modules.get(name)) is not None:
        return loaded
    bench = source_checkout() / "bench"
    if str(bench) not in sys.path:
        sys.path.append(str(bench))
    spec = importlib.util.spec_from_file_location(name, bench / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Clusters:
    """The clusters a test talks to: admin kubeconfigs, manager first, then the workers."""

    kubeconfigs: list[Path]
    #: The local control planes behind them (None for kind clusters).
    local: ClusterSet | None = None

    @classmethod
    def of(cls, clusters: ClusterSet) -> "Clusters":
        return cls([c.kubeconfig_path for c in clusters.clusters], clusters)

    @staticmethod
    def _api(path: Path) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(path))

    @property
    def manager(self) -> client.ApiClient:
        return self._api(self.kubeconfigs[0])

    def worker(self, index: int) -> client.ApiClient:
        """Worker ``index``, counting from 1 like the cluster names."""
        return self._api(self.kubeconfigs[index])

    def server(self, index: int) -> str:
        """The address of cluster ``index`` (0 is the manager) as its kubeconfig gives it."""
        return str(self.worker(index).configuration.host)

    @property
    def all(self) -> list[client.ApiClient]:
        return [self._api(p) for p in self.kubeconfigs]


def _start(tmp: Path, name: str, options: ClusterSetOptions) -> ClusterSet:
    binaries = ensure_binaries().binaries
    options = dataclasses.replace(
        options, name=name, base_port=free_base_port(options.workers + 1), directory=tmp / name
    )
    clusters = ClusterSet.plan(options)
    clusters.up(options, binaries)
    return clusters


@pytest.fixture(scope="session")
def integration_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    clusters = _start(tmp_path_factory.mktemp("clusters"), "integration", ClusterSetOptions(workers=2, full=False))
    try:
        yield Clusters.of(clusters)
    finally:
        clusters.down()


@pytest.fixture(scope="session")
def e2e_clusters(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    if request.config.getoption("--clusters") == "kind":
        state = source_checkout() / "kind-configs" / ".state"
        paths = [state / f"{name}.kubeconfig" for name in ("manager", "worker1", "worker2")]
        if not all(p.exists() for p in paths):
            pytest.fail(f"--clusters kind: kubeconfigs not found in {state}; run kind-configs/up.sh first")
        yield Clusters(paths)
        return
    clusters = _start(tmp_path_factory.mktemp("clusters"), "e2e", ClusterSetOptions(workers=2, full=True))
    try:
        _warm_garbage_collector(clusters.api(clusters.manager))
        yield Clusters.of(clusters)
    finally:
        clusters.down()


def _warm_garbage_collector(api: client.ApiClient, timeout: float = 90) -> None:
    """Wait until the manager's garbage collector removes a Workload whose owner was deleted.

    The garbage collector learns a custom resource at its next discovery resync (every 30 s),
    so for a cluster under a minute old a Workload whose Job was just deleted waited 10-15 s
    for it, and a test timing the manager Job's removal failed when run alone or early. One
    owner (a ConfigMap) and one dependent Workload, deleted once, settle that before any test.
    """
    namespace, name = "default", f"gc-warm-up-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    dependent = o.workload(namespace, name, "none", {"cpu": "1"})
    dependent["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": owner.metadata.uid}]
    kueue = o.Kueue(api)
    kueue.create(dependent)
    core.delete_namespaced_config_map(name, namespace)
    try:
        o.wait_for(lambda: kueue.get_or_none("Workload", name, namespace) is None, timeout, what="the garbage collector following Workloads")
    except o.WaitTimeout:
        pass  # a slow collector is what the tests that time it will report


@pytest.fixture(scope="session")
def upstream_crd_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    """One apiserver with upstream Kueue's v1beta2 CRDs instead of ours."""
    crds = wiring.load_documents(reference_dir() / "kueue-v1beta2-crds")
    clusters = _start(
        tmp_path_factory.mktemp("clusters"), "upstream", ClusterSetOptions(workers=0, full=False, wire=False, install_crds=False)
    )
    try:
        wiring.install_crds(clusters.api(clusters.manager), crds)
        yield Clusters.of(clusters)
    finally:
        clusters.down()


@pytest.fixture(scope="session")
def upstream_crd_cluster(upstream_crd_clusters: Clusters) -> client.ApiClient:
    """An API client for the apiserver with upstream's CRDs."""
    return upstream_crd_clusters.manager


@pytest.fixture(scope="session")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    """One kube-apiserver with nothing installed (no CRDs, no namespace of ours): a fresh cluster for install tests."""
    clusters = _start(
        tmp_path_factory.mktemp("clusters"), "bare", ClusterSetOptions(workers=0, full=False, wire=False, install_crds=False)
    )
    try:
        yield Clusters.of(clusters)
    finally:
        clusters.down()


def _create_namespace(api: client.ApiClient, name: str) -> None:
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    """A fresh namespace on the manager and every worker of the set the test uses."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    fixture = "e2e_clusters" if request.node.get_closest_marker("e2e") else "integration_clusters"
    clusters: Clusters = request.getfixturevalue(fixture)
    for api in clusters.all:
        _create_namespace(api, name)
    return name


@pytest.fixture(scope="module")
def tekton_workers(e2e_clusters: Clusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ManagedProcess]]:
    """Tekton Pipelines' controller (real, from the third-party archive) on every e2e worker, Tekton's CRDs everywhere.

    Module-scoped: other modules play Tekton by hand on the same workers,
    which a running controller would race, so it runs only while the module
    that asks for it does. The first use builds it (about 10 minutes cold);
    a build that fails fails the tests, with the build's message: they are
    never skipped.
    """
    if e2e_clusters.local is None:
        pytest.fail("real Tekton runs only beside the local clusters (kwok plays its pods); run without --clusters kind")
    try:
        source, binary = tekton.ensure()
    except DevEnvironmentError as exc:
        pytest.fail(f"Tekton's controller could not be built from the third-party archive: {exc}", pytrace=False)
    directory = tmp_path_factory.mktemp("tekton")
    local = e2e_clusters.local
    wiring.install_crds(local.api(local.manager), tekton.manifests(source)[0])
    started: list[ManagedProcess] = []
    try:
        for worker in local.workers:
            tekton.install(local.api(worker), source)
            started.append(tekton.start(worker.name, worker.kubeconfig_path, directory / f"{worker.name}-tekton.log", binary))
        yield started
    finally:
        for proc in started:
            proc.stop()


def _controllers(clusters: Clusters, directory: Path, roles: list[str]) -> list[ControllerProcess]:
    names = ["manager"] + [f"worker{i}" for i in range(1, len(roles))]
    started: list[ControllerProcess] = []
    try:
        for name, role, kubeconfig in zip(names, roles, clusters.kubeconfigs):
            log = directory / f"{name}-controller.log"
            started.append(ControllerProcess(name, kubeconfig, role, log, webhooks=role == "manager").start())
    except BaseException:
        for ctl in started:
            ctl.stop()
        raise
    return started


@pytest.fixture(scope="session")
def integration_controller(integration_clusters: Clusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    """Our controller (manager role) running against the integration manager."""
    [ctl] = _controllers(integration_clusters, tmp_path_factory.mktemp("controllers"), ["manager"])
    try:
        yield ctl
    finally:
        ctl.stop()


#: The e2e manager's configuration: timings short enough for tests to watch them happen.
E2E_MANAGER_CONFIG = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
multiKueue:
  origin: multikueue-e2e
  gcInterval: 10s
  workerLostTimeout: 40s
"""


@pytest.fixture(scope="session")
def e2e_controllers(
    request: pytest.FixtureRequest, e2e_clusters: Clusters, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Any]]:
    """Our controller on every e2e cluster: the manager role on the manager, the worker role on workers.

    The manager's controller comes first. With ``--controllers image`` a second manager replica
    (a standby, by leader election) comes last.
    """
    directory = tmp_path_factory.mktemp("controllers")
    if request.config.getoption("--clusters") == "kind":
        # Deployed by kind-configs/up.sh, with its configuration: used as they are, and left running.
        deployed = kind.e2e_controllers(directory)
        yield deployed
        for ctl in deployed:
            if not ctl.alive:
                ctl.start()
        return
    wiring.apply(
        e2e_clusters.manager,
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "multikueue-manager-config", "namespace": wiring.CONTROLLER_NAMESPACE},
                "data": {"controller_manager_config.yaml": E2E_MANAGER_CONFIG},
            }
        ],
    )
    roles = ["manager"] + ["worker"] * (len(e2e_clusters.kubeconfigs) - 1)
    controllers: list[Any]
    if request.config.getoption("--controllers") == "image":
        controllers = _image_controllers(e2e_clusters, directory, request.config.getoption("--image"))
    else:
        controllers = _controllers(e2e_clusters, directory, roles)
    try:
        yield controllers
    finally:
        for ctl in controllers:
            ctl.stop()


@pytest.fixture(scope="session")
def e2e_origin(e2e_clusters: Clusters, e2e_controllers: list[Any]) -> str:
    """The manager's ``multiKueue.origin``: the label value on everything it creates on the workers."""
    config_map = client.CoreV1Api(e2e_clusters.manager).read_namespaced_config_map(
        "multikueue-manager-config", wiring.CONTROLLER_NAMESPACE
    )
    document = yaml.safe_load((config_map.data or {}).get("controller_manager_config.yaml") or "") or {}
    return str((document.get("multiKueue") or {}).get("origin") or "multikueue")


def _image_controllers(clusters: Clusters, directory: Path, image: str) -> list[containers.ControllerContainer]:
    """The controllers from ``image``, installed with the manifests, on every cluster (see :mod:`multikueue.dev.containers`)."""
    containers.build_image(image)
    address = containers.bridge_address()
    planned: list[containers.ControllerContainer] = []
    standby: list[containers.ControllerContainer] = []
    for index, kubeconfig in enumerate(clusters.kubeconfigs):
        role, name = ("manager", "manager") if index == 0 else ("worker", f"worker{index}")
        objects = containers.install(kubeconfig, "default" if role == "manager" else "worker", without_pods=True)
        api = clusters.worker(index)
        args = containers.deployment_args(objects)
        if role == "manager":
            config_map = next((a.split("=", 1)[1] for a in args if a.startswith("--config-map=")), "multikueue-manager-config")
            client.CoreV1Api(api).patch_namespaced_config_map(
                config_map, containers.CONTROLLER_NAMESPACE, {"data": {"controller_manager_config.yaml": E2E_MANAGER_CONFIG}}
            )
        credentials = containers.service_account_files(api, directory / f"{name}-serviceaccount")
        port = int(urlparse(clusters.server(index)).port or 443)
        replicas = 2 if role == "manager" else 1
        made = [
            containers.ControllerContainer(
                name=name if replica == 0 else f"{name}-{replica}",
                role=role,
                kubeconfig=kubeconfig,
                log=directory / f"{name}-{replica}-controller.log" if replica else directory / f"{name}-controller.log",
                args=args,
                server_port=port,
                credentials=credentials,
                image=image,
                webhooks=True,  # both roles serve the Job webhooks (a worker's suspend Jobs submitted to it directly)
                webhook_port=containers.free_port(),
            )
            for replica in range(replicas)
        ]
        containers.route_service(api, containers.CONTROLLER_NAMESPACE, containers.WEBHOOK_SERVICE, address,
                                 [c.webhook_port for c in made])
        planned.append(made[0])
        standby += made[1:]
    started: list[containers.ControllerContainer] = []
    try:
        for ctl in [*planned, *standby]:
            started.append(ctl.start())
    except BaseException:
        for ctl in started:
            ctl.stop()
        raise
    return started
