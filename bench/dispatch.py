"""Benchmark: MultiKueue dispatch of N Jobs over two workers.

Starts three full local clusters (manager + 2 workers, kwok nodes), our
controller on each (manager role on the manager, worker role on workers),
wires a MultiKueue AdmissionCheck, submits N Jobs from 16 client threads (one 10m-CPU pod each,
running 1 s on kwok) to the manager, all at once or at ``--rate`` per second, and prints:

- dispatch latency: manager Workload ``QuotaReserved`` -> the Job created on a worker;
- status-sync latency: the worker's Job ``Complete`` -> the manager's Job ``Complete``;
- Jobs dispatched per second over the run;
- the manager controller's resident memory (peak sampled every 0.5 s).

    python bench/dispatch.py --jobs 1000

Timestamps are wall-clock times taken by watches running in their own
processes (one per watched collection), so a flood of events on one watch
does not delay the others; each latency includes one watch delivery on each
end, which roughly cancels out.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from multikueue.dev import objects as o
from multikueue.dev.binaries import ensure_binaries
from multikueue.dev.clusterset import ClusterSet, ClusterSetOptions
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import free_base_port

NS = "bench"


def watch_process(kubeconfig: str, group: str, version: str, plural: str, kind: str, out: Any) -> None:
    """Watch one collection in the bench namespace; send (kind, name, event time, object digest) to ``out``."""
    from kubernetes import config as kconfig

    api = client.CustomObjectsApi(kconfig.new_client_from_config(config_file=kubeconfig))
    version_seen = ""
    while True:
        try:
            for event in watch.Watch().stream(
                api.list_namespaced_custom_object, group, version, NS, plural, resource_version=version_seen, timeout_seconds=30, deserialize=False
            ):
                now = time.time()
                obj = event["object"]
                version_seen = obj["metadata"].get("resourceVersion", version_seen)
                out.put((kind, now, digest(kind, obj)))
        except Exception:  # noqa: BLE001 - a benchmark watch just retries
            version_seen = ""
            time.sleep(0.2)


def digest(kind: str, obj: dict[str, Any]) -> tuple[str, bool]:
    """(job name, the fact this watch times) of one event, small enough to pass between processes."""
    if kind == "manager-workload":
        owners = obj["metadata"].get("ownerReferences") or []
        return (owners[0]["name"] if owners else "", o.is_true(obj, "QuotaReserved"))
    return (obj["metadata"]["name"], job_done(obj))


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


def request_counts(api: client.ApiClient) -> dict[tuple[str, str], float]:
    """apiserver_request_total summed by (verb, resource), from the API server's /metrics."""
    _, url, headers, _, _ = api.param_serialize(method="GET", resource_path="/metrics", auth_settings=["BearerToken"])
    response = api.call_api("GET", url, header_params=headers)
    response.read()
    counts: dict[tuple[str, str], float] = {}
    for line in response.data.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.rindex("}")].split(","))
        key = (labels.get("verb", "").strip('"'), labels.get("resource", "").strip('"') + ("/" + labels["subresource"].strip('"') if labels.get("subresource", '""') != '""' else ""))
        counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def print_requests(name: str, before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], jobs: int) -> None:
    deltas = sorted(((after[k] - before.get(k, 0.0)) / jobs, k) for k in after if after[k] - before.get(k, 0.0) >= jobs * 0.05)
    total = sum(d for d, k in deltas if k[0] not in ("WATCH", "LIST"))
    print(f"{name}: {total:.1f} requests per Job (mutating and GET)")
    for per_job, (verb, resource) in reversed(deltas):
        print(f"    {per_job:6.2f} {verb} {resource}")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--requests", action="store_true", help="also print each API server's requests per Job by verb and resource")
    parser.add_argument("--rate", type=float, default=0.0, help="Jobs submitted per second (default: as fast as 16 threads go)")
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
        watch_procs: list[Any] = []
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

            def collect(queue: Any) -> None:
                while not stop.is_set():
                    try:
                        kind, at, (name, fact) = queue.get(timeout=0.5)
                    except Exception:  # noqa: BLE001 - queue.Empty
                        continue
                    if kind == "manager-workload":
                        if fact and name:
                            reserved.setdefault(name, at)
                    elif kind == "remote-job":
                        remote_created.setdefault(name, at)
                        if fact:
                            remote_done.setdefault(name, at)
                    elif fact:
                        manager_done.setdefault(name, at)

            events: Any = multiprocessing.get_context("spawn").Queue()
            paths = [str(c.kubeconfig_path) for c in clusters.clusters]
            watchers = [
                (paths[0], "kueue.x-k8s.io", "v1beta2", "workloads", "manager-workload"),
                (paths[0], "batch", "v1", "jobs", "manager-job"),
                (paths[1], "batch", "v1", "jobs", "remote-job"),
                (paths[2], "batch", "v1", "jobs", "remote-job"),
            ]
            for spec in watchers:
                proc = multiprocessing.get_context("spawn").Process(target=watch_process, args=(*spec, events), daemon=True)
                proc.start()
                watch_procs.append(proc)
            threading.Thread(target=collect, args=(events,), daemon=True).start()
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

            time.sleep(3)  # let the watcher processes start
            counts_before = [request_counts(api) for api in apis] if args.requests else []
            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=16) as pool:
                if args.rate > 0:
                    futures = []
                    for i in range(n):
                        delay = started + i / args.rate - time.monotonic()
                        if delay > 0:
                            time.sleep(delay)
                        futures.append(pool.submit(submit, i))
                    for future in futures:
                        future.result()
                else:
                    list(pool.map(submit, range(n)))
            submitted = time.monotonic()
            deadline = time.monotonic() + 1800
            while len(manager_done) < n and time.monotonic() < deadline:
                time.sleep(1)
            finished = time.monotonic()
            if args.requests:
                time.sleep(3)  # the last deletions and events
                for cluster, api, before in zip(clusters.clusters, apis, counts_before):
                    print_requests(cluster.name, before, request_counts(api), n)
                    reasons: dict[str, int] = {}
                    for event in client.CoreV1Api(api).list_namespaced_event(NS).items:
                        key = f"{event.involved_object.kind}/{event.reason}"
                        reasons[key] = reasons.get(key, 0) + 1
                    print("    events:", ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])))
        finally:
            stop.set()
            for proc in watch_procs:
                proc.terminate()
            for ctl in controllers:
                ctl.stop()
            clusters.down()

    dispatch = [remote_created[j] - reserved[j] for j in remote_created if j in reserved]
    sync = [manager_done[j] - remote_done[j] for j in manager_done if j in remote_done]
    print(f"submitted {n} Jobs in {submitted - started:.1f}s; {len(manager_done)} Complete on the manager after {finished - started:.1f}s")
    if dispatch:
        span = max(remote_created.values()) - min(reserved.values())  # wall-clock seconds
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
