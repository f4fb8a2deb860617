"""Benchmark: local quota admission of N Workloads on one ClusterQueue.

Starts a local apiserver (etcd + kube-apiserver, from the cached binaries)
and this project's controller (``multikueue run``), then measures two things:

1. **stream**: N Workloads are created (16 client threads) while the
   ClusterQueue is open; for each, the time from its creation (the create
   call's return) to the moment a watch sees ``QuotaReserved=True``. Prints
   p50/p99 and the admission rate over the run.
2. **backlog**: N Workloads are created while the ClusterQueue is held
   (``stopPolicy: Hold``), then it is opened; prints how fast the backlog is
   admitted (admissions per second from opening to the last admission).
3. **paced**: ``--paced`` Workloads created at ``--rate`` per second, below
   what the controller admits: creation -> ``QuotaReserved`` p50/p99 then
   measure the path of one admission, not the queue in front of it (in the
   stream, 16 threads create faster than the controller admits, so its
   latencies mostly measure the backlog, and they swing with how the two
   share the CPUs).

    python bench/admission.py --workloads 1000 --paced 500 --rate 50

Figures depend on the machine; the issue's target is >= 200 admissions/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client, watch

from multikueue.dev import objects as o
from multikueue.dev import wiring
from multikueue.dev.binaries import ensure_binaries
from multikueue.dev.clusterset import ClusterSet, ClusterSetOptions
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import free_base_port
from _interrupt import interrupt_on_signals


class ReservationWatch:
    """Records when each Workload of a namespace is first seen with QuotaReserved=True."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.reserved: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        try:
            self._watch()
        except Exception:  # noqa: BLE001 - the apiserver going away at the end of the run
            if not self._stop.is_set():
                raise

    def _watch(self) -> None:
        objects = client.CustomObjectsApi(self.api)
        while not self._stop.is_set():
            stream = watch.Watch()
            for event in stream.stream(
                objects.list_namespaced_custom_object,
                "kueue.x-k8s.io",
                "v1beta2",
                self.namespace,
                "workloads",
                timeout_seconds=30,
            ):
                obj = event["object"]
                name = obj["metadata"]["name"]
                if name not in self.reserved and o.is_true(obj, "QuotaReserved"):
                    self.reserved[name] = time.monotonic()
                if self._stop.is_set():
                    stream.stop()
                    break


def controller_cpu_seconds(controller: ControllerProcess) -> float | None:
    """CPU seconds the controller process used so far (Linux /proc), or None."""
    if controller.process is None:
        return None
    try:
        fields = Path(f"/proc/{controller.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14, 15 of stat)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def create_all(api: client.ApiClient, namespace: str, prefix: str, count: int, rate: float | None = None) -> dict[str, float]:
    """Create ``count`` Workloads from 16 threads, as fast as they go or ``rate`` per second."""
    kueue = o.Kueue(api)
    created: dict[str, float] = {}
    start = time.monotonic()

    def one(i: int) -> None:
        if rate is not None:
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
        name = f"{prefix}-{i:05d}"
        body = o.workload(namespace, name, "user-queue", {"cpu": "1"})
        # As the Job integration creates them (and upstream's do): with the resource-in-use finalizer.
        body["metadata"]["finalizers"] = ["kueue.x-k8s.io/resource-in-use"]
        kueue.create(body)
        created[name] = time.monotonic()

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(one, range(count)))
    return created


def wait_reserved(watcher: ReservationWatch, names: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not names <= watcher.reserved.keys():
        if time.monotonic() > deadline:
            missing = len(names - watcher.reserved.keys())
            raise RuntimeError(f"{missing} workloads not reserved after {timeout:.0f}s")
        time.sleep(0.05)


def main() -> None:
    interrupt_on_signals()  # Ctrl-C or SIGTERM still takes the clusters down
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--paced", type=int, default=500, help="Workloads of the paced phase (0: skip it)")
    parser.add_argument("--rate", type=float, default=50.0, help="creations per second in the paced phase")
    parser.add_argument("--keep-log", metavar="FILE", help="copy the controller's log here")
    args = parser.parse_args()
    n = args.workloads
    binaries = ensure_binaries().binaries
    with tempfile.TemporaryDirectory() as tmp:
        options = ClusterSetOptions(
            name="bench", workers=0, full=False, base_port=free_base_port(1), directory=Path(tmp) / "clusters", wire=False
        )
        clusters = ClusterSet.plan(options)
        clusters.up(options, binaries)
        controller = ControllerProcess("manager", clusters.manager.kubeconfig_path, "manager", Path(tmp) / "controller.log")
        try:
            api = clusters.api(clusters.manager)
            wiring.ensure_namespace(api, wiring.CONTROLLER_NAMESPACE)
            controller.start()
            core = client.CoreV1Api(api)
            kueue = o.Kueue(api)
            for ns in ("stream", "backlog", "paced"):
                core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
                kueue.create(o.resource_flavor(f"flavor-{ns}"))
                cq = o.cluster_queue(f"cq-{ns}", {f"flavor-{ns}": {"cpu": max(n, args.paced) * 2}})
                if ns == "backlog":
                    cq["spec"]["stopPolicy"] = "Hold"
                kueue.create(cq)
                kueue.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
            time.sleep(1)

            # 1. stream
            watcher = ReservationWatch(api, "stream")
            watcher.start()
            time.sleep(0.5)
            started = time.monotonic()
            created = create_all(api, "stream", "wl", n)
            created_done = time.monotonic()
            wait_reserved(watcher, set(created), 300)
            watcher.stop()
            latencies = [watcher.reserved[name] - t for name, t in created.items()]
            last = max(watcher.reserved.values())
            print(
                f"stream: {n} workloads created in {created_done - started:.2f}s "
                f"({n / (created_done - started):.0f}/s); all reserved {last - started:.2f}s after the first create "
                f"-> {n / (last - started):.0f} admissions/s"
            )
            print(
                f"stream: creation -> QuotaReserved p50 {statistics.median(latencies) * 1000:.0f} ms, "
                f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
            )

            # 2. backlog
            watcher = ReservationWatch(api, "backlog")
            watcher.start()
            created = create_all(api, "backlog", "wl", n)
            time.sleep(2)  # let every Workload reach the controller's cache
            opened = time.monotonic()
            kueue.patch("ClusterQueue", "cq-backlog", {"spec": {"stopPolicy": "None"}})
            wait_reserved(watcher, set(created), 300)
            watcher.stop()
            last = max(watcher.reserved.values())
            first = min(watcher.reserved.values())
            print(
                f"backlog: {n} held workloads admitted {last - opened:.2f}s after opening the queue "
                f"-> {n / (last - opened):.0f} admissions/s (first after {(first - opened) * 1000:.0f} ms)"
            )

            # 3. paced
            if args.paced:
                watcher = ReservationWatch(api, "paced")
                watcher.start()
                time.sleep(0.5)
                created = create_all(api, "paced", "wl", args.paced, rate=args.rate)
                wait_reserved(watcher, set(created), 300)
                watcher.stop()
                latencies = [watcher.reserved[name] - t for name, t in created.items()]
                print(
                    f"paced: {args.paced} workloads at {args.rate:g}/s: creation -> QuotaReserved "
                    f"p50 {statistics.median(latencies) * 1000:.0f} ms, p99 {percentile(latencies, 0.99) * 1000:.0f} ms, "
                    f"max {max(latencies) * 1000:.0f} ms"
                )
            cpu = controller_cpu_seconds(controller)
            if cpu is not None:
                print(f"controller CPU (user+system) over the whole run: {cpu:.1f} s")
        finally:
            controller.stop()
            clusters.down()
            if args.keep_log:
                Path(args.keep_log).write_text(controller.logs())


if __name__ == "__main__":
    main()
