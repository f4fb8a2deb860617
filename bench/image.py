"""Benchmark: the controller image's size and its time from `docker run` to healthy.

Builds nothing: give it an image made by `hack/image.sh` (default
multikueue:dev). Without --kubeconfig it starts one local apiserver-only
cluster (etcd + kube-apiserver from the cached binaries, this project's CRDs,
namespace kueue-system) and stops it at the end. Then it runs the container
``--runs`` times as the manager::

    docker run --network host --read-only --tmpfs /tmp --cap-drop ALL \\
        -v <kubeconfig>:/kubeconfig:ro <image> \\
        --role manager --kubeconfig /kubeconfig --namespace kueue-system \\
        --health-port 18081 --metrics-port 18080

and times, from just before `docker run`: its return (the container created
and started: with the vfs storage driver this copies the whole image, which
dominates), the liveness endpoint /healthz answering 200, and the readiness
endpoint /readyz (informer caches synced). The last line is the controller's
own part: from the container's start to /healthz. The apiservers listen on
127.0.0.1, hence the host network.

    python bench/image.py                      # multikueue:dev, 3 runs
    python bench/image.py my/image:tag --runs 5 --kubeconfig ~/.kube/config

With --kubeconfig the cluster must have the CRDs and the namespace already
(e.g. from `multikueue dev clusters up`). The kubeconfig is copied to a
temporary file readable by the container's non-root user.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from _interrupt import interrupt_on_signals

NAMESPACE = "kueue-system"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], check=check, capture_output=True, text=True)


def answers(port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def one_run(
    image: str, kubeconfig: Path, name: str, health_port: int, metrics_port: int, timeout: float
) -> tuple[float, float, float]:
    """Seconds from `docker run` to its return (container created and started), to /healthz, to /readyz."""
    started = time.monotonic()
    docker(
        "run", "--detach", "--rm", "--name", name, "--network", "host",
        # As config/manager/deployment.yaml runs it: read-only root, /tmp writable, no capabilities.
        "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--volume", f"{kubeconfig}:/kubeconfig:ro",
        image,
        "--role", "manager", "--kubeconfig", "/kubeconfig", "--namespace", NAMESPACE,
        "--health-port", str(health_port), "--metrics-port", str(metrics_port),
    )  # fmt: skip
    created = time.monotonic() - started
    healthy = ready = None
    try:
        while time.monotonic() - started < timeout:
            if healthy is None and answers(health_port, "/healthz"):
                healthy = time.monotonic() - started
            if healthy is not None and answers(health_port, "/readyz"):
                ready = time.monotonic() - started
                break
            if docker("container", "inspect", name, check=False).returncode != 0:
                raise RuntimeError(f"container {name} exited before it was ready")
            time.sleep(0.05)
        if healthy is None or ready is None:
            raise RuntimeError(f"container {name}: not ready after {timeout:.0f}s")
        return created, healthy, ready
    except RuntimeError:
        logs = docker("logs", "--tail", "30", name, check=False)
        sys.stderr.write(logs.stdout + logs.stderr)
        raise
    finally:
        docker("rm", "--force", name, check=False)


def start_cluster(directory: Path):  # type: ignore[no-untyped-def]
    """One apiserver-only cluster with the CRDs and the controller namespace."""
    from multikueue.dev import wiring
    from multikueue.dev.clusterset import ClusterSet, ClusterSetOptions
    from multikueue.dev.pytest_plugin import free_base_port

    options = ClusterSetOptions(
        name="bench-image", workers=0, full=False, base_port=free_base_port(1), directory=directory, wire=False
    )
    clusters = ClusterSet.plan(options)
    clusters.up(options)
    wiring.ensure_namespace(clusters.api(clusters.manager), NAMESPACE)
    return clusters


def summary(label: str, values: list[float]) -> str:
    return (
        f"{label}: median {statistics.median(values):.2f}s, min {min(values):.2f}s, "
        f"max {max(values):.2f}s over {len(values)} runs"
    )


def main() -> None:
    interrupt_on_signals()  # Ctrl-C or SIGTERM still takes the clusters down
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("image", nargs="?", default=os.environ.get("IMAGE", "multikueue:dev"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kubeconfig", type=Path, help="use this cluster instead of starting a local one")
    parser.add_argument("--health-port", type=int, default=18081)
    parser.add_argument("--metrics-port", type=int, default=18080)
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for one container")
    args = parser.parse_args()

    if shutil.which("docker") is None or docker("info", check=False).returncode != 0:
        sys.exit("error: no Docker engine answers (`docker info` fails); hack/image.sh starts one")
    inspect = docker("image", "inspect", "--format", "{{.Size}}", args.image, check=False)
    if inspect.returncode != 0:
        sys.exit(f"error: no image {args.image}; build it with hack/image.sh")
    size = int(inspect.stdout.strip())
    for port in (args.health_port, args.metrics_port):
        if port_in_use(port):
            sys.exit(f"error: port {port} is taken; choose others with --health-port/--metrics-port")

    with tempfile.TemporaryDirectory(prefix="bench-image-") as tmp:
        clusters = None
        try:
            if args.kubeconfig is None:
                started = time.monotonic()
                clusters = start_cluster(Path(tmp) / "clusters")
                source = clusters.manager.kubeconfig_path
                print(f"local cluster up in {time.monotonic() - started:.1f}s ({clusters.manager.server})")
            else:
                source = args.kubeconfig.expanduser()
            # The container runs as UID 65532: give it a copy it can read.
            kubeconfig = Path(tmp) / "kubeconfig"
            shutil.copyfile(source, kubeconfig)
            kubeconfig.chmod(0o644)
            Path(tmp).chmod(0o755)

            created: list[float] = []
            healthy: list[float] = []
            ready: list[float] = []
            for run in range(args.runs):
                c, h, r = one_run(
                    args.image, kubeconfig, f"bench-image-{os.getpid()}-{run}",
                    args.health_port, args.metrics_port, args.timeout,
                )  # fmt: skip
                created.append(c)
                healthy.append(h)
                ready.append(r)
                print(f"run {run + 1}: started after {c:.2f}s, /healthz after {h:.2f}s, /readyz after {r:.2f}s")
        finally:
            if clusters is not None:
                clusters.down()

    print(f"image {args.image}: {size / 1e6:.1f} MB ({size} bytes)")
    print(summary("docker run -> started ", created))
    print(summary("docker run -> /healthz", healthy))
    print(summary("docker run -> /readyz ", ready))
    print(summary("started    -> /healthz", [h - c for c, h in zip(created, healthy)]))


if __name__ == "__main__":
    main()
