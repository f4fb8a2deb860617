"""Benchmark: the manager controller's memory and CPU per Workload, and a pass/fail target.

For each count of ``--workloads`` (a fresh local apiserver each time: etcd +
kube-apiserver from the cached binaries), this starts ``multikueue run
--role manager``, creates the queues, then gives N Workloads the life
upstream's scalability runner gives them: they are created (8 client
threads) over ``--queues`` ClusterQueues whose quota holds ``--fit`` of them
at once (the rest wait and are told why), each with the resource-in-use
finalizer as the Job integration writes it; each one seen admitted is marked
``Finished`` ``--runtime`` seconds later (a status update, as the runner
does); the run ends when every one finished and the queues hold no quota.

The Workloads stay (as in the runner's run), so the controller holds all N
at the end. Printed per N: RSS once the queues exist (start), peak RSS
(``VmHWM``), RSS at the end, MB per 1,000 Workloads ((peak - start) / N *
1000), controller CPU milliseconds per Workload over the run, and PASS/FAIL
against the targets of issue 16: at most ``--target-mb`` MB per 1,000
Workloads (50, the Kueue overview's figure) and, with ``--target-peak-mib``,
a peak RSS limit. Exits 1 when a target is missed.

    python bench/memory.py                          # 1,000 and 3,000
    python bench/memory.py --workloads 1000,3000,10000
    python bench/memory.py --workloads 1000 --heap-profile /tmp/heap.txt

``--heap-profile FILE`` starts tracemalloc in the controller once the queues
exist (``bench/_heapdump``, through ``PYTHONPATH``: the controller has no
hook of its own) and writes the top allocation sites still alive at the end
of the run; figures taken so are inflated by tracemalloc's bookkeeping and
are not compared with the targets. Memory figures hold on a loaded machine;
CPU ones vary with load.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from multikueue.dev import objects as o
from multikueue.dev import wiring
from multikueue.dev.binaries import Binaries, ensure_binaries
from multikueue.dev.clusterset import ClusterSet, ClusterSetOptions
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import free_base_port
from _interrupt import interrupt_on_signals

NAMESPACE = "memory"
#: The Kueue overview's figure for upstream: about 50 MB per 1,000 Workloads.
TARGET_MB_PER_1000 = 50.0
HEAPDUMP_DIR = Path(__file__).resolve().parent / "_heapdump"


def proc_status(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (KiB) of a process."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def queue_counts(kueue: o.Kueue, queues: int) -> tuple[int, int]:
    """(admitted, reserving) Workloads summed over the benchmark's ClusterQueues, as their status says."""
    admitted = reserving = 0
    for i in range(queues):
        status = kueue.get("ClusterQueue", f"cq-{i}").get("status") or {}
        admitted += int(status.get("admittedWorkloads") or 0)
        reserving += int(status.get("reservingWorkloads") or 0)
    return admitted, reserving


def wait(
    what: str, done: Any, timeout: float, controller: ControllerProcess, kueue: o.Kueue, queues: int, progress: Any
) -> float:
    """Poll ``done()`` until true (progress on stderr); seconds waited. Fails on timeout or when the controller died."""
    started = time.monotonic()
    reported = started
    while not done():
        if time.monotonic() - reported > 15:
            reported = time.monotonic()
            print(f"  ... {what}: {reported - started:.0f} s, admitted/reserving {queue_counts(kueue, queues)}, {progress()}", file=sys.stderr, flush=True)
        if not controller.alive:
            raise RuntimeError(f"controller exited while waiting for {what}:\n{controller.process and controller.process.log_tail()}")
        if time.monotonic() - started > timeout:
            sample = kueue.get_or_none("Workload", "wl-00000", NAMESPACE) or {}
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}; wl-00000: {(sample.get('status') or {}).get('conditions')}")
        time.sleep(0.5)
    return time.monotonic() - started


def finish(kueue: o.Kueue, name: str) -> None:
    """Mark a Workload Finished with a status update on the version read (retried on conflict), as the runner does."""
    while True:
        wl = kueue.get("Workload", name, NAMESPACE)
        conditions = [c for c in (wl.get("status") or {}).get("conditions") or [] if c.get("type") != "Finished"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done",
                           "lastTransitionTime": now})  # fmt: skip
        wl.setdefault("status", {})["conditions"] = conditions
        try:
            kueue.objects.replace_namespaced_custom_object_status(o.GROUP, o.VERSION, NAMESPACE, "workloads", name, wl)
            return
        except ApiException as exc:
            if exc.status != 409:
                raise


class Finisher:
    """Marks each admitted Workload Finished ``runtime_s`` after its admission is seen, as upstream's runner does."""

    def __init__(self, api: client.ApiClient, kueue: o.Kueue, runtime_s: float) -> None:
        self.api, self.kueue, self.runtime_s = api, kueue, runtime_s
        self.finished: set[str] = set()
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=8)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _finish(self, name: str) -> None:
        time.sleep(self.runtime_s)
        finish(self.kueue, name)
        self.finished.add(name)

    def _run(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                stream = watch.Watch()
                for event in stream.stream(
                    self.kueue.objects.list_namespaced_custom_object, o.GROUP, o.VERSION, NAMESPACE, "workloads",
                    timeout_seconds=30, resource_version=version,
                ):  # fmt: skip
                    obj = event["object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    name = obj["metadata"]["name"]
                    if name not in self._seen and o.is_true(obj, "Admitted") and not o.is_true(obj, "Finished"):
                        self._seen.add(name)
                        self._pool.submit(self._finish, name)
                    if self._stop.is_set():
                        stream.stop()
                        return
            except ApiException as exc:
                if exc.status != 410:
                    raise
                version = None  # expired: list again (what was seen is remembered)
            except Exception:  # noqa: BLE001 - the apiserver going away at the end of the run
                if self._stop.is_set():
                    return
                time.sleep(1)


def one_run(
    n: int, queues: int, fit: float, runtime_s: float, binaries: Binaries, work: Path, heap_profile: Path | None
) -> dict[str, float]:
    options = ClusterSetOptions(
        name=f"memory-{n}", workers=0, full=False, base_port=free_base_port(1), directory=work / "clusters", wire=False
    )
    clusters = ClusterSet.plan(options)
    clusters.up(options, binaries)
    env_before = dict(os.environ)
    if heap_profile is not None:
        # The controller inherits this process's environment (multikueue.dev.process.spawn).
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HEAPDUMP_DIR), os.environ.get("PYTHONPATH")]))
        os.environ["MULTIKUEUE_HEAP_DUMP"] = str(heap_profile)
    controller = ControllerProcess("memory", clusters.manager.kubeconfig_path, "manager", work / "controller.log")
    try:
        api = clusters.api(clusters.manager)
        wiring.ensure_namespace(api, wiring.CONTROLLER_NAMESPACE)
        controller.start(timeout=120)
        os.environ.clear()
        os.environ.update(env_before)
        assert controller.process is not None
        pid = controller.process.pid
        kueue = o.Kueue(api)
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        kueue.create(o.resource_flavor("default"))
        # Each queue holds ``fit`` of its Workloads at once: the rest wait (and are told why), as in the runner's run.
        per_queue = max(1, round(n / queues * fit))
        for i in range(queues):
            kueue.create(o.cluster_queue(f"cq-{i}", {"default": {"cpu": per_queue}}, scale_cpu=False))
            kueue.create(o.local_queue(NAMESPACE, f"lq-{i}", f"cq-{i}"))
        time.sleep(3)  # queues in the cache, status written: the controller at rest
        start_kib = proc_status(pid)["VmRSS"]
        cpu_start = cpu_seconds(pid)
        if heap_profile is not None:
            os.kill(pid, signal.SIGUSR1)  # trace from here: the growth
        finisher = Finisher(api, kueue, runtime_s)
        finisher.start()
        started = time.monotonic()

        def create(i: int) -> None:
            body = o.workload(NAMESPACE, f"wl-{i:05d}", f"lq-{i % queues}", {"cpu": "1"})
            body["metadata"]["finalizers"] = ["kueue.x-k8s.io/resource-in-use"]
            body["metadata"]["labels"] = {"class": "small"}
            kueue.create(body)

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(create, range(n)))
        created_s = time.monotonic() - started
        run_s = wait(
            "every Workload admitted and finished, its quota released",
            lambda: len(finisher.finished) >= n and queue_counts(kueue, queues) == (0, 0),
            300 + n * 0.3,
            controller,
            kueue,
            queues,
            lambda: f"{len(finisher.finished)} finished",
        )
        time.sleep(2)
        finisher.stop()
        cpu = cpu_seconds(pid) - cpu_start
        status = proc_status(pid)
        if heap_profile is not None:
            os.kill(pid, signal.SIGUSR2)
            deadline = time.monotonic() + 600
            while not heap_profile.is_file() and time.monotonic() < deadline:
                time.sleep(1)
        return {
            "workloads": n,
            "start_mib": start_kib / 1024,
            "peak_mib": status["VmHWM"] / 1024,
            "end_mib": status["VmRSS"] / 1024,
            "mb_per_1000": (status["VmHWM"] - start_kib) * 1024 / 1e6 / n * 1000,
            "cpu_ms_per_wl": cpu * 1000 / n,
            "cpu_s": cpu,
            "create_s": created_s,
            "run_s": run_s,
        }
    finally:
        os.environ.clear()
        os.environ.update(env_before)
        controller.stop()
        clusters.down()


def main() -> int:
    interrupt_on_signals()  # Ctrl-C or SIGTERM still takes the clusters down
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="1000,3000", help="comma-separated counts, one fresh run each")
    parser.add_argument("--queues", type=int, default=6, help="ClusterQueues (and LocalQueues) the Workloads spread over")
    parser.add_argument("--fit", type=float, default=0.1, help="share of a queue's Workloads its quota holds at once")
    parser.add_argument("--runtime", type=float, default=0.2, help="seconds from admission seen to Finished written")
    parser.add_argument("--target-mb", type=float, default=TARGET_MB_PER_1000, help="most MB per 1,000 Workloads")
    parser.add_argument("--target-peak-mib", type=float, help="most peak RSS (MiB) at any count (upstream's 199 on the scalability run)")
    parser.add_argument("--heap-profile", type=Path, metavar="FILE", help="trace allocations; write the top sites here (one count only)")
    parser.add_argument("--keep-log", metavar="DIR", help="copy each run's controller log here")
    args = parser.parse_args()
    counts = [int(x) for x in args.workloads.split(",") if x.strip()]
    if args.heap_profile and len(counts) != 1:
        parser.error("--heap-profile takes one count")
    binaries = ensure_binaries().binaries
    results: list[dict[str, float]] = []
    failed = False
    for n in counts:
        with tempfile.TemporaryDirectory(prefix="memory-") as tmp:
            try:
                result = one_run(n, args.queues, args.fit, args.runtime, binaries, Path(tmp), args.heap_profile)
            finally:
                if args.keep_log and (Path(tmp) / "controller.log").is_file():
                    Path(args.keep_log).mkdir(parents=True, exist_ok=True)
                    (Path(args.keep_log) / f"controller-{n}.log").write_bytes((Path(tmp) / "controller.log").read_bytes())
        results.append(result)
        misses = []
        if result["mb_per_1000"] > args.target_mb:
            misses.append(f"{result['mb_per_1000']:.1f} MB per 1,000 > {args.target_mb:g}")
        if args.target_peak_mib is not None and result["peak_mib"] > args.target_peak_mib:
            misses.append(f"peak {result['peak_mib']:.0f} MiB > {args.target_peak_mib:g}")
        verdict = "n/a (tracemalloc)" if args.heap_profile else ("FAIL: " + "; ".join(misses) if misses else "PASS")
        failed = failed or (bool(misses) and not args.heap_profile)
        print(
            f"{n:>6,} Workloads: RSS start {result['start_mib']:.0f} MiB, "
            f"peak {result['peak_mib']:.0f} MiB, end {result['end_mib']:.0f} MiB -> {result['mb_per_1000']:.1f} MB per 1,000 "
            f"Workloads (target <= {args.target_mb:g}); CPU {result['cpu_s']:.1f} s = {result['cpu_ms_per_wl']:.1f} ms per Workload "
            f"(created in {result['create_s']:.0f} s, all finished in {result['run_s']:.0f} s); {verdict}",
            flush=True,
        )
    if args.heap_profile:
        print(f"heap profile: {args.heap_profile}")
    if len(results) > 1:
        print("\n   N  | MB/1000 WL | peak MiB | CPU ms/WL")
        for r in results:
            print(f"{int(r['workloads']):>6} | {r['mb_per_1000']:10.1f} | {r['peak_mib']:8.0f} | {r['cpu_ms_per_wl']:9.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
