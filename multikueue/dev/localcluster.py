"""One local Kubernetes cluster made of real control-plane processes.

A cluster is an embedded etcd plus kube-apiserver on loopback; a *full*
cluster adds kube-controller-manager, kube-scheduler and kwok, so that Jobs
create pods that are scheduled on fake nodes and run to completion.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from multikueue.dev import kubeconfig
from multikueue.runtime import certificates as pki
from multikueue.dev.binaries import Binaries
from multikueue.dev.errors import DevEnvironmentError
from multikueue.dev.paths import source_checkout
from multikueue.dev.process import ManagedProcess, spawn, wait_until

#: Offsets of each component's port from the cluster's base port.
PORTS_PER_CLUSTER = 10


@dataclass(frozen=True)
class ClusterPorts:
    """Loopback ports of one cluster, derived from a base port."""

    base: int

    @property
    def apiserver(self) -> int:
        return self.base

    @property
    def etcd_client(self) -> int:
        return self.base + 1

    @property
    def etcd_peer(self) -> int:
        return self.base + 2

    @property
    def controller_manager(self) -> int:
        return self.base + 3

    @property
    def scheduler(self) -> int:
        return self.base + 4

    @property
    def kwok(self) -> int:
        return self.base + 5

    def named(self, cluster: str, full: bool) -> dict[str, int]:
        ports = {
            f"{cluster} kube-apiserver": self.apiserver,
            f"{cluster} etcd": self.etcd_client,
            f"{cluster} etcd peer": self.etcd_peer,
        }
        if full:
            ports |= {
                f"{cluster} kube-controller-manager": self.controller_manager,
                f"{cluster} kube-scheduler": self.scheduler,
                f"{cluster} kwok": self.kwok,
            }
        return ports


@dataclass
class LocalCluster:
    """A cluster's configuration, files and (once started) processes."""

    name: str
    directory: Path
    ports: ClusterPorts
    full: bool
    processes: list[ManagedProcess] = field(default_factory=list)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def kubeconfig_path(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def pki_dir(self) -> Path:
        return self.directory / "pki"

    def _pki(self) -> pki.ClusterPKI:
        return pki.ClusterPKI.in_directory(self.pki_dir)

    # -- state -------------------------------------------------------------

    def to_record(self) -> dict[str, object]:
        return {
            "name": self.name,
            "directory": str(self.directory),
            "base_port": self.ports.base,
            "full": self.full,
            "server": self.server,
            "kubeconfig": str(self.kubeconfig_path),
            "processes": [p.to_record() for p in self.processes],
        }

    @classmethod
    def from_record(cls, record: dict[str, object]) -> "LocalCluster":
        return cls(
            name=str(record["name"]),
            directory=Path(str(record["directory"])),
            ports=ClusterPorts(int(record["base_port"])),  # type: ignore[arg-type]
            full=bool(record["full"]),
            processes=[ManagedProcess.from_record(p) for p in record["processes"]],  # type: ignore[union-attr]
        )

    # -- lifecycle ---------------------------------------------------------

    def prepare(self) -> None:
        """Write a fresh PKI, the admin kubeconfig and empty data folders."""
        self.directory.mkdir(parents=True, exist_ok=True)
        keys = pki.generate(self.pki_dir, self.name)
        config = kubeconfig.build_kubeconfig(
            name=self.name,
            server=self.server,
            ca_pem=keys.ca_cert.read_bytes(),
            user=f"{self.name}-admin",
            client_cert_pem=keys.admin_cert.read_bytes(),
            client_key_pem=keys.admin_key.read_bytes(),
        )
        kubeconfig.write(config, self.kubeconfig_path)

    def start_etcd(self, binaries: Binaries) -> ManagedProcess:
        proc = spawn(
            f"{self.name}/etcd",
            [
                str(binaries.controlplane),
                "etcd",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-url=http://127.0.0.1:{self.ports.etcd_client}",
                f"--listen-peer-url=http://127.0.0.1:{self.ports.etcd_peer}",
            ],
            self.directory / "logs" / "etcd.log",
        )
        self.processes.append(proc)
        return proc

    def wait_etcd(self, timeout: float = 60) -> None:
        proc = self._process("etcd")
        url = f"http://127.0.0.1:{self.ports.etcd_client}/health"
        wait_until(lambda: _http_ok(url, None), timeout, 0.1, f"{self.name} etcd to be healthy", proc)

    def start_apiserver(
        self, binaries: Binaries, *, port: int | None = None, extra_args: tuple[str, ...] = (), log_name: str = "kube-apiserver"
    ) -> ManagedProcess:
        """Start the cluster's apiserver; with ``port``, another one over the same etcd (``extra_args`` win: last flag counts)."""
        keys = self._pki()
        argv = [
            str(binaries.controlplane),
            "kube-apiserver",
            f"--etcd-servers=http://127.0.0.1:{self.ports.etcd_client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port or self.ports.apiserver}",
            f"--tls-cert-file={keys.serving_cert}",
            f"--tls-private-key-file={keys.serving_key}",
            f"--client-ca-file={keys.ca_cert}",
            # No front proxy exists; setting its CA keeps the other components from logging
            # about a missing extension-apiserver-authentication bundle.
            f"--requestheader-client-ca-file={keys.ca_cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={keys.sa_pub}",
            f"--service-account-signing-key-file={keys.sa_key}",
            "--service-account-max-token-expiration=8760h",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=Node,RBAC",
            # Webhooks and aggregated APIs named by a Service are dialled at its endpoints, not its
            # ClusterIP: no kube-proxy runs here (the controller's image runs beside the cluster).
            "--enable-aggregator-routing=true",
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=2000",
            "--max-mutating-requests-inflight=1000",
            "--profiling=false",
            "--v=0",
            *extra_args,
        ]
        proc = spawn(f"{self.name}/{log_name}", argv, self.directory / "logs" / f"{log_name}.log")
        self.processes.append(proc)
        return proc

    def wait_apiserver(self, timeout: float = 120, *, port: int | None = None, log_name: str = "kube-apiserver") -> None:
        proc = self._process(log_name)
        context = self.ssl_context()
        url = f"https://127.0.0.1:{port}/readyz" if port else f"{self.server}/readyz"
        wait_until(lambda: _http_ok(url, context), timeout, 0.25, f"{self.name} {log_name} /readyz", proc)

    def start_workers(self, binaries: Binaries) -> None:
        """Start kube-controller-manager, kube-scheduler and kwok (full clusters)."""
        keys = self._pki()
        kc = str(self.kubeconfig_path)
        logs = self.directory / "logs"
        self.processes.append(
            spawn(
                f"{self.name}/kube-controller-manager",
                [
                    str(binaries.controlplane),
                    "kube-controller-manager",
                    f"--kubeconfig={kc}",
                    f"--authentication-kubeconfig={kc}",
                    f"--authorization-kubeconfig={kc}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={self.ports.controller_manager}",
                    f"--service-account-private-key-file={keys.sa_key}",
                    f"--root-ca-file={keys.ca_cert}",
                    f"--cluster-signing-cert-file={keys.ca_cert}",
                    f"--cluster-signing-key-file={keys.ca_key}",
                    "--use-service-account-credentials=false",
                    "--leader-elect=false",
                    "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route",
                    "--kube-api-qps=500",
                    "--kube-api-burst=1000",
                    "--concurrent-job-syncs=20",
                    "--v=0",
                ],
                logs / "kube-controller-manager.log",
            )
        )
        self.processes.append(
            spawn(
                f"{self.name}/kube-scheduler",
                [
                    str(binaries.controlplane),
                    "kube-scheduler",
                    f"--kubeconfig={kc}",
                    f"--authentication-kubeconfig={kc}",
                    f"--authorization-kubeconfig={kc}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={self.ports.scheduler}",
                    "--leader-elect=false",
                    "--v=0",
                ],
                logs / "kube-scheduler.log",
            )
        )
        self.start_kwok(binaries)

    def start_kwok(self, binaries: Binaries) -> None:
        """Start kwok, the fake kubelets of the cluster's fake nodes (full clusters; also after a fault)."""
        kc = self.kubeconfig_path
        self.processes.append(
            spawn(
                f"{self.name}/kwok",
                [
                    str(binaries.kwok),
                    f"--kubeconfig={kc}",
                    "--manage-all-nodes=false",
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    f"--server-address=127.0.0.1:{self.ports.kwok}",
                    "--node-ip=127.0.0.1",
                    "--cidr=10.244.0.0/16",
                    f"--config={source_checkout() / 'hack' / 'kwok' / 'stages.yaml'}",
                ],
                self.directory / "logs" / "kwok.log",
            )
        )

    def wait_workers(self, timeout: float = 60) -> None:
        """Wait for kube-controller-manager's and kube-scheduler's /healthz (full clusters).

        A component that cannot bind its port exits at once; without this
        check the cluster would look fine while pods stay unscheduled.
        """
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # their serving certificates are self-signed, generated in memory
        for component, port in (("kube-controller-manager", self.ports.controller_manager), ("kube-scheduler", self.ports.scheduler)):
            url = f"https://127.0.0.1:{port}/healthz"
            wait_until(lambda: _http_ok(url, context), timeout, 0.25, f"{self.name} {component} /healthz", self._process(component))

    def stop(self) -> None:
        """Stop every process, the API consumers first and etcd last."""
        for proc in reversed(self.processes):
            proc.stop()

    def running(self) -> dict[str, bool]:
        return {p.name: p.alive() for p in self.processes}

    # -- helpers -----------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        keys = self._pki()
        context = ssl.create_default_context(cafile=str(keys.ca_cert))
        context.load_cert_chain(str(keys.admin_cert), str(keys.admin_key))
        return context

    def _process(self, component: str) -> ManagedProcess:
        for proc in self.processes:
            if proc.name.endswith("/" + component):
                return proc
        raise DevEnvironmentError(f"{self.name}: {component} was not started")


def _http_ok(url: str, context: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def read_state(path: Path) -> list[LocalCluster]:
    data = json.loads(path.read_text())
    return [LocalCluster.from_record(c) for c in data["clusters"]]


def write_state(path: Path, clusters: list[LocalCluster], extra: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"written": time.time(), **extra, "clusters": [c.to_record() for c in clusters]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(path)
