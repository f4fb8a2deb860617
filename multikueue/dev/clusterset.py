"""A manager and N workers on loopback, started and stopped together.

``multikueue dev clusters up|down|status`` and the test fixtures both use this
module, so what the tests run against is exactly what a developer gets.
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from kubernetes import client, config

from multikueue.dev import nodes, tekton, wiring
from multikueue.dev.binaries import Binaries, ensure_binaries
from multikueue.dev.errors import DevEnvironmentError
from multikueue.dev.localcluster import PORTS_PER_CLUSTER, ClusterPorts, LocalCluster, read_state, write_state
from multikueue.dev.paths import clusters_dir
from multikueue.dev.process import check_ports_free

DEFAULT_BASE_PORT = 27440
MANAGER = "manager"

T = TypeVar("T")


@dataclass(frozen=True)
class ClusterSetOptions:
    """How to lay out a set of local clusters."""

    name: str = "dev"
    workers: int = 2
    #: Full clusters run controller-manager, scheduler and kwok; otherwise only etcd + apiserver.
    full: bool = True
    base_port: int = DEFAULT_BASE_PORT
    directory: Path | None = None
    fake_nodes: int = 2
    #: Skip the MultiKueueCluster/Secret wiring (tests that wire by hand).
    wire: bool = True
    #: Install this project's CRDs (off for a cluster that gets upstream's instead).
    install_crds: bool = True
    #: False: the CRDs get conversion ``None`` (see :func:`wiring.without_conversion_webhook`).
    conversion_webhook: bool = True
    #: Run Tekton's controller on every worker (built from the third-party archive; full clusters only).
    tekton: bool = False
    #: More flags for the manager's apiserver (e.g. an audit log, for the benchmarks).
    manager_apiserver_args: tuple[str, ...] = ()


def worker_name(index: int) -> str:
    return f"worker{index}"


@dataclass
class ClusterSet:
    """The clusters of one set and where their state lives."""

    name: str
    directory: Path
    clusters: list[LocalCluster]
    timings: dict[str, float] = field(default_factory=dict)
    #: Tekton's unpacked source and built controller, when the set runs it (``ClusterSetOptions.tekton``).
    _tekton: tuple[tekton.Source, Path] | None = field(default=None, repr=False)

    @property
    def state_file(self) -> Path:
        return self.directory / "state.json"

    @property
    def manager(self) -> LocalCluster:
        return self.clusters[0]

    @property
    def workers(self) -> list[LocalCluster]:
        return self.clusters[1:]

    def cluster(self, name: str) -> LocalCluster:
        for c in self.clusters:
            if c.name == name:
                return c
        raise KeyError(name)

    # -- construction ------------------------------------------------------

    @classmethod
    def plan(cls, options: ClusterSetOptions) -> "ClusterSet":
        if options.workers < 0:
            raise DevEnvironmentError("--workers must be 0 or more")
        if not 1024 < options.base_port < 65535 - PORTS_PER_CLUSTER * (options.workers + 1):
            raise DevEnvironmentError(f"--base-port {options.base_port} leaves no room for the clusters' ports")
        directory = options.directory or clusters_dir(options.name)
        names = [MANAGER] + [worker_name(i) for i in range(1, options.workers + 1)]
        clusters = [
            LocalCluster(
                name=n,
                directory=directory / n,
                ports=ClusterPorts(options.base_port + i * PORTS_PER_CLUSTER),
                full=options.full,
            )
            for i, n in enumerate(names)
        ]
        return cls(name=options.name, directory=directory, clusters=clusters)

    @classmethod
    def load(cls, name: str = "dev", directory: Path | None = None) -> "ClusterSet":
        directory = directory or clusters_dir(name)
        state = directory / "state.json"
        if not state.exists():
            raise DevEnvironmentError(
                f"no local clusters named {name!r} (no {state}); start them with `multikueue dev clusters up`"
            )
        return cls(name=name, directory=directory, clusters=read_state(state))

    # -- lifecycle ---------------------------------------------------------

    def running(self) -> bool:
        return any(any(c.running().values()) for c in self.clusters)

    def up(self, options: ClusterSetOptions, binaries: Binaries | None = None) -> None:
        """Start every cluster, install CRDs and wire the workers to the manager."""
        if self.state_file.exists():
            previous = ClusterSet.load(self.name, self.directory)
            if previous.running():
                raise DevEnvironmentError(
                    f"local clusters {self.name!r} are already running (state in {self.state_file}); "
                    "use them, or stop them first with `multikueue dev clusters down`"
                )
        ports: dict[str, int] = {}
        for c in self.clusters:
            ports |= c.ports.named(c.name, c.full)
        check_ports_free(ports)
        if options.tekton and not options.full:
            raise DevEnvironmentError("--tekton needs full clusters (kwok runs the TaskRuns' pods): drop --apiserver-only")
        started = time.monotonic()
        binaries = binaries or ensure_binaries().binaries
        # Built before any cluster starts: a failed Tekton build leaves nothing running.
        self._tekton = tekton.ensure() if options.tekton else None
        self.timings["binaries"] = time.monotonic() - started
        if self.directory.exists():
            shutil.rmtree(self.directory)
        try:
            self._start(binaries, options)
        except BaseException:
            self.down()
            raise
        self.timings["total"] = time.monotonic() - started

    def _start(self, binaries: Binaries, options: ClusterSetOptions) -> None:
        t0 = time.monotonic()
        _parallel(lambda c: c.prepare(), self.clusters)
        self.timings["pki"] = time.monotonic() - t0
        for c in self.clusters:
            c.start_etcd(binaries)
        self._save()
        _parallel(lambda c: c.wait_etcd(), self.clusters)
        for c in self.clusters:
            c.start_apiserver(binaries, extra_args=options.manager_apiserver_args if c is self.manager else ())
        self._save()
        _parallel(lambda c: c.wait_apiserver(), self.clusters)
        self.timings["apiservers_ready"] = time.monotonic() - t0
        if options.full:
            for c in self.clusters:
                c.start_workers(binaries)
            self._save()
        if options.install_crds:
            crds = wiring.project_crds()
            if not options.conversion_webhook:
                crds = [wiring.without_conversion_webhook(crd) for crd in crds]
            _parallel(lambda c: wiring.install_crds(self.api(c), crds), self.clusters)
            self.timings["crds"] = time.monotonic() - t0
        if options.wire and self.workers:
            endpoints = [
                wiring.WorkerEndpoint(w.name, self.api(w), w.server, (w.pki_dir / "ca.crt").read_bytes())
                for w in self.workers
            ]
            wiring.connect_workers(self.api(self.manager), endpoints)
        if options.full:
            _parallel(
                lambda c: nodes.wait_nodes_schedulable(
                    self.api(c), nodes.create_fake_nodes(self.api(c), options.fake_nodes)
                ),
                self.clusters,
            )
            _parallel(lambda c: nodes.wait_default_service_account(self.api(c)), self.clusters)
            _parallel(lambda c: c.wait_workers(), self.clusters)
        if self._tekton is not None and self.workers:
            self.start_tekton(self._tekton)
            self.timings["tekton"] = time.monotonic() - t0
        self.timings["ready"] = time.monotonic() - t0

    def start_tekton(self, built: tuple[tekton.Source, Path]) -> None:
        """Tekton's controller on every worker where it does not run yet; Tekton's CRDs on the manager.

        Each controller is recorded with its cluster's processes, so
        ``multikueue dev clusters down`` stops it. Also for a set started
        without ``--tekton`` (the demo adds it once it has been built).
        """
        source, binary = built
        wiring.install_crds(self.api(self.manager), tekton.manifests(source)[0])
        running = set(self.tekton_running())

        def start(cluster: LocalCluster) -> None:
            tekton.install(self.api(cluster), source)
            log_file = cluster.directory / "logs" / "tekton-controller.log"
            cluster.processes.append(tekton.start(cluster.name, cluster.kubeconfig_path, log_file, binary))

        _parallel(start, [w for w in self.workers if w.name not in running])
        self._save()

    def tekton_running(self) -> list[str]:
        """The clusters whose Tekton controller runs (``multikueue dev demo`` asks before choosing how to play Tekton)."""
        return [c.name for c in self.clusters if any(p.name.endswith("/tekton-controller") and p.alive() for p in c.processes)]

    def down(self) -> None:
        """Stop every process of the set; the data folder stays for inspection."""
        _parallel(lambda c: c.stop(), self.clusters)
        if self.state_file.exists():
            self.state_file.unlink()

    def _save(self) -> None:
        write_state(self.state_file, self.clusters, {"name": self.name})

    # -- access ------------------------------------------------------------

    def api(self, cluster: LocalCluster) -> client.ApiClient:
        """A fresh API client for ``cluster`` using its admin kubeconfig."""
        return config.new_client_from_config(config_file=str(cluster.kubeconfig_path))

    def status(self) -> list[dict[str, Any]]:
        rows = []
        for c in self.clusters:
            procs = c.running()
            rows.append(
                {
                    "cluster": c.name,
                    "server": c.server,
                    "kubeconfig": str(c.kubeconfig_path),
                    "processes": procs,
                    "healthy": bool(procs) and all(procs.values()),
                }
            )
        return rows


def _parallel(fn: Callable[[LocalCluster], T], clusters: list[LocalCluster]) -> list[T]:
    """Run ``fn`` for each cluster in threads; re-raise the first failure."""
    with ThreadPoolExecutor(max_workers=max(1, len(clusters))) as pool:
        return list(pool.map(fn, clusters))
