"""Benchmark: warm start of the local clusters, and their memory.

Starts a manager and N full workers (etcd, kube-apiserver, controller-manager,
scheduler, kwok) from the cached binaries, wired and with CRDs installed, and
prints how long each phase took and the resident memory of the whole set,
right after start and after a small workload (one Job of 4 pods per worker).
Repeats the start ``--runs`` times and prints every figure.

    python bench/cluster_startup.py --workers 2 --runs 3

The cold build time is measured separately by `multikueue dev build --rebuild`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from kubernetes import client

from multikueue.dev.binaries import ensure_binaries
from multikueue.dev.clusterset import ClusterSet, ClusterSetOptions
from multikueue.dev.pytest_plugin import free_base_port
from _interrupt import interrupt_on_signals


def rss_mib(pids: list[int]) -> float:
    total_kib = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
        except OSError:
            pass
    return total_kib / 1024


def run_job(api: client.ApiClient, name: str) -> None:
    batch = client.BatchV1Api(api)
    container = client.V1Container(
        name="c", image="busybox", resources=client.V1ResourceRequirements(requests={"cpu": "1"})
    )
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            completions=4,
            parallelism=4,
            template=client.V1PodTemplateSpec(spec=client.V1PodSpec(restart_policy="Never", containers=[container])),
        ),
    )
    batch.create_namespaced_job("default", job)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = batch.read_namespaced_job(name, "default").status
        if status.succeeded == 4:
            return
        time.sleep(0.5)
    raise RuntimeError(f"job {name} did not complete")


def main() -> None:
    interrupt_on_signals()  # Ctrl-C or SIGTERM still takes the clusters down
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    binaries = ensure_binaries().binaries
    starts: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            options = ClusterSetOptions(
                name=f"bench{run}",
                workers=args.workers,
                base_port=free_base_port(args.workers + 1),
                directory=Path(tmp) / f"bench{run}",
            )
            clusters = ClusterSet.plan(options)
            started = time.monotonic()
            try:
                clusters.up(options, binaries)
                elapsed = time.monotonic() - started
                starts.append(elapsed)
                pids = [p.pid for c in clusters.clusters for p in c.processes]
                idle = rss_mib(pids)
                for worker in clusters.workers:
                    run_job(clusters.api(worker), f"bench-{run}")
                loaded = rss_mib(pids)
            finally:
                clusters.down()
            phases = ", ".join(f"{k}={v:.2f}s" for k, v in clusters.timings.items())
            print(
                f"run {run + 1}: up {elapsed:.2f}s ({phases}); "
                f"RSS of {len(pids)} processes: {idle:.0f} MiB idle, {loaded:.0f} MiB after one Job per worker"
            )
    print(
        f"warm start of manager + {args.workers} full workers: "
        f"median {statistics.median(starts):.2f}s, min {min(starts):.2f}s, max {max(starts):.2f}s over {len(starts)} runs"
    )


if __name__ == "__main__":
    main()
