"""Benchmark: MultiKueue dispatch of N Jobs over two workers.

Starts three full local clusters (manager + 2 workers, kwok nodes), our
controller on each (manager role on the manager, worker role on workers),
wires a MultiKueue AdmissionCheck, submits N Jobs from 16 client threads (one 10m-CPU pod each,
running 1 s on kwok) to the manager and prints:

- dispatch latency: manager Workload ``QuotaReserved`` -> the Job created on a worker;
- status-sync latency: the worker's Job ``Complete`` -> the manager's Job ``Complete``;
- Jobs dispatched per second over the run;
- the manager controller's resident memory (peak sampled every 0.5 s).

    python bench/dispatch.py --jobs 1000

Timestamps are taken by watches in this process (client-side), so each
latency includes one watch delivery.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from multikueue.dev import objects as o
from multikueue.dev.binaries import ensure_binaries
from multikueue.dev.clusterset import ClusterSet, ClusterSetOptions
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import free_base_port

NS = "bench"


def watch_forever(list_fn: Callable[..., Any], args: tuple[Any, ...], on_event: Callable[[dict[str, Any]], None], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            for event in watch.Watch().stream(list_fn, *args, timeout_seconds=10):
                on_event(event["object"])
                if stop.is_set():
                    return
        except Exception:  # noqa: BLE001 - a benchmark watch just retries
            time.sleep(0.2)


def job_done(obj: dict[str, Any]) -> bool:
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or [])


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    n = args.jobs
    binaries = ensure_binaries().binaries
    with tempfile.TemporaryDirectory() as tmp:
        options = ClusterSetOptions(
            name="bench", workers=2, full=True, base_port=free_base_port(3), directory=Path(tmp) / "clusters", fake_nodes=4
        )
        clusters = ClusterSet.plan(options)
        clusters.up(options, binaries)
        controllers: list[ControllerProcess] = []
        stop = threading.Event()
        try:
            for index, cluster in enumerate(clusters.clusters):
                role = "manager" if index == 0 else "worker"
                controllers.append(ControllerProcess(cluster.name, cluster.kubeconfig_path, role, Path(tmp) / f"{cluster.name}.log").start())
            apis = [clusters.api(c) for c in clusters.clusters]
            for api in apis:
                client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
                k = o.Kueue(api)
                k.create(o.resource_flavor("default"))
            manager = o.Kueue(apis[0])
            manager.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": "bench"}, "spec": {"clusters": ["worker1", "worker2"]}})
            manager.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": "bench"},
                            "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "bench"}}})
            manager.create(o.cluster_queue("cq", {"default": {"cpu": n}}, checks=["bench"]))
            manager.create(o.local_queue(NS, "user-queue", "cq"))
            for api in apis[1:]:
                o.Kueue(api).create(o.cluster_queue("cq", {"default": {"cpu": n}}))
                o.Kueue(api).create(o.local_queue(NS, "user-queue", "cq"))
            o.wait_for(lambda: o.is_true(manager.get("AdmissionCheck", "bench"), "Active"), 60, what="check active")

            reserved: dict[str, float] = {}
            remote_created: dict[str, float] = {}
            remote_done: dict[str, float] = {}
            manager_done: dict[str, float] = {}

            def on_manager_workload(obj: dict[str, Any]) -> None:
                owners = obj["metadata"].get("ownerReferences") or []
                if owners and owners[0]["name"] not in reserved and o.is_true(obj, "QuotaReserved"):
                    reserved[owners[0]["name"]] = time.monotonic()

            def on_remote_job(obj: dict[str, Any]) -> None:
                name = obj["metadata"]["name"]
                remote_created.setdefault(name, time.monotonic())
                if name not in remote_done and job_done(obj):
                    remote_done[name] = time.monotonic()

            def on_manager_job(obj: dict[str, Any]) -> None:
                name = obj["metadata"]["name"]
                if name not in manager_done and job_done(obj):
                    manager_done[name] = time.monotonic()

            custom = [client.CustomObjectsApi(api) for api in apis]
            watchers = [
                (custom[0].list_namespaced_custom_object, ("kueue.x-k8s.io", "v1beta2", NS, "workloads"), on_manager_workload),
                (custom[0].list_namespaced_custom_object, ("batch", "v1", NS, "jobs"), on_manager_job),
                (custom[1].list_namespaced_custom_object, ("batch", "v1", NS, "jobs"), on_remote_job),
                (custom[2].list_namespaced_custom_object, ("batch", "v1", NS, "jobs"), on_remote_job),
            ]
            for fn, fargs, cb in watchers:
                threading.Thread(target=watch_forever, args=(fn, fargs, cb, stop), daemon=True).start()
            peak = [0.0]
            manager_pid = controllers[0].process.pid if controllers[0].process else 0

            def sample() -> None:
                while not stop.is_set():
                    peak[0] = max(peak[0], rss_mib(manager_pid))
                    time.sleep(0.5)

            threading.Thread(target=sample, daemon=True).start()
            time.sleep(1)
            idle = rss_mib(manager_pid)
            batch = client.BatchV1Api(apis[0])
            def submit(i: int) -> None:
                body = o.batch_job(NS, f"job-{i:05d}", "user-queue", {"cpu": "10m"}, managed_by="kueue.x-k8s.io/multikueue")
                body["spec"]["template"]["metadata"] = {"annotations": {"multikueue.x-k8s.io/run-for": "1s"}}
                batch.create_namespaced_job(NS, body)

            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=16) as pool:
                list(pool.map(submit, range(n)))
            submitted = time.monotonic()
            deadline = time.monotonic() + 1800
            while len(manager_done) < n and time.monotonic() < deadline:
                time.sleep(1)
            finished = time.monotonic()
        finally:
            stop.set()
            for ctl in controllers:
                ctl.stop()
            clusters.down()

    dispatch = [remote_created[j] - reserved[j] for j in remote_created if j in reserved]
    sync = [manager_done[j] - remote_done[j] for j in manager_done if j in remote_done]
    print(f"submitted {n} Jobs in {submitted - started:.1f}s; {len(manager_done)} Complete on the manager after {finished - started:.1f}s")
    if dispatch:
        span = max(remote_created.values()) - min(reserved.values())
        print(
            f"dispatch (manager QuotaReserved -> worker Job created): p50 {statistics.median(dispatch) * 1000:.0f} ms, "
            f"p99 {pct(dispatch, 0.99) * 1000:.0f} ms over {len(dispatch)} Jobs; {len(remote_created) / span:.0f} Jobs dispatched/s"
        )
    if sync:
        print(
            f"status sync (worker Job Complete -> manager Job Complete): p50 {statistics.median(sync) * 1000:.0f} ms, "
            f"p99 {pct(sync, 0.99) * 1000:.0f} ms over {len(sync)} Jobs"
        )
    print(f"manager controller RSS: {idle:.0f} MiB before, {peak[0]:.0f} MiB peak")


if __name__ == "__main__":
    main()
