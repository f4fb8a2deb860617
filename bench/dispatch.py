"""Benchmark: MultiKueue dispatch of N Jobs (or PipelineRuns) over two workers.

Starts three full local clusters (manager + 2 workers, kwok nodes), our
controller on each (manager role on the manager, worker role on workers),
wires a MultiKueue AdmissionCheck, submits N Jobs from 16 client threads (one 10m-CPU pod each,
running ``--run-for`` s, default 1, on kwok) to the manager, all at once or at ``--rate`` per second, and prints:

- dispatch latency: manager Workload ``QuotaReserved`` -> the Job created on a worker;
- status-sync latency: the worker's Job ``Complete`` -> the manager's Job ``Complete``;
- Jobs dispatched per second over the run;
- the manager controller's resident memory (peak sampled every 0.5 s).

    python bench/dispatch.py --jobs 1000

With ``--kind pipelinerun`` the same is measured for the generic adapter: the
Tekton CRDs (``../shared/reference/tekton``) are installed on the three
clusters, the catalog entry ``adapters/tekton-pipelinerun.yaml`` is written
into every cluster's ``multikueue-manager-config`` ConfigMap, and N
PipelineRuns (one unit of ``pipelineruns.tekton.dev`` each) are submitted.
No Tekton controller runs: a process per worker plays it, marking a worker
copy ``Succeeded`` ``--run-for`` seconds after our worker controller releases
its hold (``spec.status: PipelineRunPending``). The latencies are the same
with ``Succeeded`` in place of ``Complete``.

    python bench/dispatch.py --kind pipelinerun --jobs 1000

With ``--tekton`` (PipelineRuns only) Tekton Pipelines' real controller runs on
both workers instead (built from the third-party archive, see
``multikueue/dev/tekton.py``), and each PipelineRun is shaped like Tekton's
docs: an inline ``pipelineSpec`` of two tasks in sequence (the second takes
the first's result as a param), each a pod that kwok's stage finishes after
``--run-for`` seconds. The report adds PipelineRuns completed per minute
(Succeeded on the manager, over the time from the first submission).

    python bench/dispatch.py --kind pipelinerun --tekton --jobs 200 --rate 2

The CRDs are installed with conversion ``None``, as upstream's CRD bases
ship, since no controller serves the conversion webhook here: otherwise each
API server's watch cache for v1beta1 fails to fill and starts over every few
seconds, reading every object of the kind each time (``--conversion-webhook``
installs them as before, to compare with figures measured so).

Timestamps are wall-clock times taken by watches running in their own
processes (one per watched collection), so a flood of events on one watch
does not delay the others; each latency includes one watch delivery on each
end, which roughly cancels out.
"""

from __future__ import annotations

import argparse
import heapq
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, watch

from multikueue.api.configuration import CONFIG_KEY, DEFAULT_CONFIG_MAP
from multikueue.dev import objects as o
from multikueue.dev import tekton, wiring
from multikueue.dev.binaries import ensure_binaries
from multikueue.dev.clusterset import ClusterSet, ClusterSetOptions
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import free_base_port

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _dispatch_metrics as m  # noqa: E402 - the bench folder is no package
import _dispatch_upstream  # noqa: E402
from _interrupt import interrupt_on_signals  # noqa: E402 - the bench folder is no package

NS = "bench"
#: The checkout this script is in (its adapters/ catalog, ../shared/reference beside it).
CHECKOUT = Path(__file__).resolve().parent.parent
MANAGED_BY = "kueue.x-k8s.io/multikueue"


@dataclass(frozen=True)
class Kind:
    """What the benchmark submits: its collection, the condition that marks it done, the quota it uses."""

    noun: str
    group: str
    version: str
    plural: str
    done: str
    quota: dict[str, str]


KINDS = {
    "job": Kind("Job", "batch", "v1", "jobs", "Complete", {"cpu": "10m"}),
    "pipelinerun": Kind("PipelineRun", "tekton.dev", "v1", "pipelineruns", "Succeeded", {"pipelineruns.tekton.dev": "1"}),
}


def announce_ready(api: client.CustomObjectsApi, group: str, version: str, plural: str, out: Any) -> str:
    """The collection's resourceVersion now, after telling the bench this watch is about to start.

    The bench submits only once every watch said so: a watch that starts
    after the first objects were created would time them at its initial list,
    late (seen before: negative dispatch latencies when the manager's Workload
    watch started after the workers' Job watches).
    """
    while True:
        try:
            listed = api.list_namespaced_custom_object(group, version, NS, plural, limit=1)
            break
        except Exception:  # noqa: BLE001 - the apiserver may be busy; a benchmark retries
            time.sleep(0.5)
    out.put(("ready", time.time(), ("", False)))
    return str(listed["metadata"].get("resourceVersion", ""))


def watch_process(kubeconfig: str, group: str, version: str, plural: str, kind: str, done: str, out: Any) -> None:
    """Watch one collection in the bench namespace; send (kind, name, event time, object digest) to ``out``.

    ``done`` is the condition type whose ``True`` status the watch times (``Complete``, ``Succeeded``).
    """
    from kubernetes import config as kconfig

    api = client.CustomObjectsApi(kconfig.new_client_from_config(config_file=kubeconfig))
    version_seen = announce_ready(api, group, version, plural, out)
    while True:
        try:
            for event in watch.Watch().stream(
                api.list_namespaced_custom_object, group, version, NS, plural, resource_version=version_seen, timeout_seconds=30, deserialize=False
            ):
                now = time.time()
                obj = event["object"]
                version_seen = obj["metadata"].get("resourceVersion", version_seen)
                out.put((kind, now, digest(kind, obj, done)))
        except Exception:  # noqa: BLE001 - a benchmark watch just retries
            version_seen = ""
            time.sleep(0.2)


def digest(kind: str, obj: dict[str, Any], done: str) -> tuple[str, bool]:
    """(job name, the fact this watch times) of one event, small enough to pass between processes."""
    if kind == "manager-workload":
        owners = obj["metadata"].get("ownerReferences") or []
        return (owners[0]["name"] if owners else "", o.is_true(obj, "QuotaReserved"))
    return (obj["metadata"]["name"], condition_true(obj, done))


def condition_true(obj: dict[str, Any], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or [])


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class DelayQueue:
    """Calls ``act(started, name, uid)`` ``delay`` seconds after :meth:`add`, on a small pool (the stand-ins' clock).

    A heap served by one thread: the stand-ins for Tekton and for kube's Job
    controller finish what they saw released after ``--run-for`` seconds.
    """

    def __init__(self, act: Any) -> None:
        self._act = act
        self._due: list[tuple[float, float, str, str]] = []  # (due monotonic, started wall clock, name, uid)
        self._ready = threading.Condition()
        threading.Thread(target=self._serve, daemon=True).start()

    def add(self, delay: float, started: float, name: str, uid: str) -> None:
        with self._ready:
            heapq.heappush(self._due, (time.monotonic() + delay, started, name, uid))
            self._ready.notify()

    def _serve(self) -> None:
        with ThreadPoolExecutor(max_workers=4) as pool:
            while True:
                with self._ready:
                    while not self._due or self._due[0][0] > time.monotonic():
                        self._ready.wait(timeout=self._due[0][0] - time.monotonic() if self._due else None)
                    _, started, name, uid = heapq.heappop(self._due)
                pool.submit(self._act, started, name, uid)


def play_tekton(kubeconfig: str, run_for: float) -> None:
    """Play Tekton on one worker: a released PipelineRun copy succeeds ``run_for`` seconds later.

    One watch on the bench namespace; a copy with neither ``spec.status``
    (the hold our worker controller clears) nor a status yet goes into a delay
    queue (a heap served by one thread), which patches its ``/status`` with
    Tekton's ``Succeeded`` condition when due. The patch carries the copy's
    UID, so a copy deleted and created again meanwhile is not touched.
    """
    from kubernetes import config as kconfig

    api = client.CustomObjectsApi(kconfig.new_client_from_config(config_file=kubeconfig))
    group, version, plural = "tekton.dev", "v1", "pipelineruns"
    scheduled: set[str] = set()

    def succeed(started: float, name: str, uid: str) -> None:
        now = time.time()
        status = {
            "startTime": rfc3339(started),
            "completionTime": rfc3339(now),
            "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "Tasks Completed: 1 (Failed: 0, Cancelled 0), Skipped: 0", "lastTransitionTime": rfc3339(now)}],
        }
        try:
            api.patch_namespaced_custom_object_status(group, version, NS, plural, name, {"metadata": {"uid": uid}, "status": status})
        except client.ApiException as exc:
            if exc.status not in (404, 409):  # gone, or another copy under the same name
                print(f"fake tekton: {name}: {exc.status} {exc.reason}", flush=True)

    delays = DelayQueue(succeed)
    version_seen = ""
    while True:
        try:
            for event in watch.Watch().stream(
                api.list_namespaced_custom_object, group, version, NS, plural, resource_version=version_seen, timeout_seconds=30, deserialize=False
            ):
                obj = event["object"]
                version_seen = obj["metadata"].get("resourceVersion", version_seen)
                uid = obj["metadata"].get("uid", "")
                if event["type"] == "DELETED" or uid in scheduled or "status" in (obj.get("spec") or {}) or obj.get("status"):
                    continue
                scheduled.add(uid)
                delays.add(run_for, time.time(), obj["metadata"]["name"], uid)
        except Exception:  # noqa: BLE001 - a benchmark watch just retries
            version_seen = ""
            time.sleep(0.2)


def play_jobs(kubeconfig: str, run_for: float, out: Any, cluster: str) -> None:
    """Play kube's Job controller on an apiserver-only worker, and watch its Jobs for the latencies.

    Nothing runs a worker's Jobs when the worker is only etcd + kube-apiserver
    (``--apiserver-only-workers``): once our worker controller has admitted the
    Workload copy and unsuspended the Job, this process marks the Job
    succeeded ``run_for`` seconds later, with the status kube's Job controller
    writes (``SuccessCriteriaMet`` then ``Complete``, ``succeeded: 1``,
    ``startTime``, ``completionTime``; the apiserver refuses ``Complete``
    without the others). That is what our worker controller's Job integration
    needs to finish the worker's Workload, and what the manager copies back.
    The watch also stands in for ``watch_process`` on this worker: every event
    goes to ``out`` as ``remote``, each status write as ``played:<cluster>`` (so its
    requests can be told apart from the controllers').
    """
    from kubernetes import config as kconfig

    api = kconfig.new_client_from_config(config_file=kubeconfig)
    batch, custom = client.BatchV1Api(api), client.CustomObjectsApi(api)  # the watch reads plain dicts (cheaper than models)
    scheduled: set[str] = set()

    def succeed(started: float, name: str, uid: str) -> None:
        now = time.time()
        condition = {"status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods",
                     "lastTransitionTime": rfc3339(now)}
        status = {
            "startTime": rfc3339(started),
            "completionTime": rfc3339(max(now, started + 1)),
            "succeeded": 1,
            "uncountedTerminatedPods": {},
            "conditions": [{"type": "SuccessCriteriaMet", **condition}, {"type": "Complete", **condition}],
        }
        try:
            batch.patch_namespaced_job_status(name, NS, {"metadata": {"uid": uid}, "status": status})
            out.put((f"played:{cluster}", time.time(), (name, True)))
        except client.ApiException as exc:
            if exc.status not in (404, 409):  # gone, or another copy under the same name
                print(f"job stand-in: {name}: {exc.status} {exc.reason} {exc.body}", flush=True)

    delays = DelayQueue(succeed)
    version_seen = announce_ready(custom, "batch", "v1", "jobs", out)
    while True:
        try:
            for event in watch.Watch().stream(
                custom.list_namespaced_custom_object, "batch", "v1", NS, "jobs", resource_version=version_seen, timeout_seconds=30, deserialize=False
            ):
                now = time.time()
                obj = event["object"]
                version_seen = obj["metadata"].get("resourceVersion", version_seen)
                name, uid = obj["metadata"]["name"], obj["metadata"].get("uid", "")
                out.put(("remote", now, (name, condition_true(obj, "Complete"))))
                if event["type"] == "DELETED" or uid in scheduled or (obj.get("spec") or {}).get("suspend") is not False:
                    continue
                if (obj.get("status") or {}).get("conditions"):
                    continue
                scheduled.add(uid)
                delays.add(run_for, now, name, uid)
        except Exception:  # noqa: BLE001 - a benchmark watch just retries
            version_seen = ""
            time.sleep(0.2)


def configure_pipelineruns(api: client.ApiClient) -> None:
    """Tekton's CRDs and the catalog's PipelineRun entry in the controller's ConfigMap (default settings otherwise, as for Jobs)."""
    tekton = [d for d in wiring.load_documents(CHECKOUT.parent / "shared" / "reference" / "tekton") if d.get("kind") == "CustomResourceDefinition"]
    wiring.install_crds(api, tekton)
    entry = yaml.safe_load((CHECKOUT / "adapters" / "tekton-pipelinerun.yaml").read_text())
    document = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "multiKueue": {"externalFrameworks": [entry]}}
    wiring.ensure_namespace(api, wiring.CONTROLLER_NAMESPACE)
    wiring.apply(api, [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": DEFAULT_CONFIG_MAP, "namespace": wiring.CONTROLLER_NAMESPACE},
                        "data": {CONFIG_KEY: yaml.safe_dump(document)}}])


def tekton_pipeline_run(name: str, run_for: float) -> dict[str, Any]:
    """A docs-shaped PipelineRun for MultiKueue: two tasks in sequence, a param, a result, each task's pod running ``run_for`` s."""
    def task(task_name: str, extra: dict[str, Any]) -> dict[str, Any]:
        annotations = {"multikueue.x-k8s.io/run-for": f"{run_for:g}s"}
        if task_name == "build":
            annotations["multikueue.x-k8s.io/results"] = '{"digest": "sha256:0123"}'
        return {"name": task_name, **extra, "taskSpec": {
            "metadata": {"annotations": annotations},
            "params": [{"name": "input", "type": "string"}],
            "results": [{"name": "digest"}] if task_name == "build" else [],
            "steps": [{"name": "main", "image": "ubuntu", "script": "echo $(params.input)"}],
        }}

    return {
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {
            "managedBy": MANAGED_BY,
            "params": [{"name": "revision", "value": "main"}],
            "pipelineSpec": {
                "params": [{"name": "revision", "type": "string"}],
                "results": [{"name": "digest", "value": "$(tasks.build.results.digest)"}],
                "tasks": [
                    task("build", {"params": [{"name": "input", "value": "$(params.revision)"}]}),
                    task("test", {"runAfter": ["build"], "params": [{"name": "input", "value": "$(tasks.build.results.digest)"}]}),
                ],
            },
        },
    }


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def print_requests(name: str, counts: m.Counts, jobs: int, noun: str = "Job", detail: bool = True, played: int = 0) -> float:
    """One cluster's requests per ``noun`` (every verb but the streaming ones), by verb, and with ``detail`` by verb and resource.

    ``played``: status writes made by the bench's Job stand-in on this
    cluster, said apart (they are kube's Job controller's on a full worker).
    """
    total = m.requests_total(counts) / jobs
    verbs = ", ".join(f"{verb} {v / jobs:.2f}" for verb, v in m.by_verb(counts).items() if v / jobs >= 0.005)
    aside = f"; of which the bench's Job stand-in {played / jobs:.2f} PATCH jobs/status" if played else ""
    print(f"{name}: {total:.1f} requests per {noun} ({verbs}; WATCH left out){aside}")
    if detail:
        print(f"    {'per ' + noun:>9}  verb    resource")
        for per_job, verb, resource in m.table(counts, jobs):
            print(f"    {per_job:9.2f}  {verb:<7} {resource}")
    return total


def finished_workloads(api: client.ApiClient) -> tuple[int, int]:
    """(Workloads in the bench namespace, of which ``Finished``), listed in pages so 10,000 of them stay cheap to read."""
    custom = client.CustomObjectsApi(api)
    total = finished = 0
    token = None
    while True:
        page = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", NS, "workloads", limit=500, _continue=token)
        for wl in page["items"]:
            total += 1
            finished += condition_true(wl, "Finished")
        token = page["metadata"].get("continue")
        if not token:
            return total, finished


def count_objects(api: client.ApiClient, group: str, version: str, plural: str) -> int:
    """How many objects of a collection are left in the bench namespace (a worker's copies, after the manager's clean-up)."""
    page = client.CustomObjectsApi(api).list_namespaced_custom_object(group, version, NS, plural, limit=1)
    return len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0)


pct = m.pct


def main() -> None:
    interrupt_on_signals()  # Ctrl-C or SIGTERM still takes the clusters down
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=sorted(KINDS), default="job", help="what to submit: Jobs, or PipelineRuns through the generic adapter")
    parser.add_argument("--jobs", type=int, default=1000, help="how many Jobs (or PipelineRuns)")
    parser.add_argument("--workers", type=int, default=2, help="how many worker clusters (each with our controller in the worker role)")
    parser.add_argument(
        "--apiserver-only-workers",
        action="store_true",
        help="clusters of etcd + kube-apiserver only (no kube-controller-manager, scheduler, kwok): the bench plays kube's Job controller on the workers",
    )
    parser.add_argument(
        "--manager",
        choices=["ours", "upstream"],
        default="ours",
        help="the MultiKueue manager: our controller, or upstream Kueue's binary (v0.19.2, built from ../shared/thirdparty) as a local process",
    )
    parser.add_argument("--requests", action="store_true", help="also print each worker's requests per Job by verb and resource, and the Events")
    parser.add_argument("--rate", type=float, default=0.0, help="Jobs submitted per second (default: as fast as 16 threads go)")
    parser.add_argument("--run-for", type=float, default=1.0, help="seconds each Job's pod (or PipelineRun, or each Tekton task's pod) runs on its worker")
    parser.add_argument("--keep-logs", type=Path, help="copy the controllers' logs into this folder at the end")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for every Job to finish on the manager after the last submission")
    parser.add_argument(
        "--conversion-webhook",
        action="store_true",
        help="install the CRDs naming the conversion webhook, which nobody serves here, as before "
        "(each cluster's API server then relists every object of the kind every few seconds): to compare with older figures",
    )
    parser.add_argument(
        "--tekton",
        action="store_true",
        help="with --kind pipelinerun: run the real Tekton controller on the workers (built from ../shared/thirdparty) instead of playing it",
    )
    args = parser.parse_args()
    if args.tekton and args.kind != "pipelinerun":
        parser.error("--tekton goes with --kind pipelinerun")
    if args.tekton and args.apiserver_only_workers:
        parser.error("--tekton needs full clusters (kwok runs the TaskRuns' pods)")
    if args.manager == "upstream" and args.kind != "job":
        parser.error("--manager upstream runs Jobs only (upstream's manager is configured with integrations.frameworks: [batch/job])")
    if args.workers < 1:
        parser.error("--workers must be 1 or more")
    n = args.jobs
    kind = KINDS[args.kind]
    noun = kind.noun
    played_jobs = args.apiserver_only_workers and args.kind == "job"
    binaries = ensure_binaries().binaries
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        options = ClusterSetOptions(
            name="bench", workers=args.workers, full=not args.apiserver_only_workers, base_port=free_base_port(args.workers + 1),
            directory=Path(tmp) / "clusters", fake_nodes=4, tekton=args.tekton,
            # Upstream's manager needs upstream's CRDs on the manager, so the CRDs and the wiring are done after start-up.
            install_crds=args.manager == "ours", wire=args.manager == "ours",
            # No controller serves conversion here: a v1beta1 watch cache would relist every few seconds.
            conversion_webhook=args.conversion_webhook,
        )
        clusters = ClusterSet.plan(options)
        clusters.up(options, binaries)
        controllers: list[ControllerProcess] = []
        upstream_manager = None
        stop = threading.Event()
        watch_procs: list[Any] = []
        try:
            if args.manager == "upstream":
                _dispatch_upstream.prepare_clusters(clusters)
            if args.kind == "pipelinerun":
                for cluster in clusters.clusters:
                    configure_pipelineruns(clusters.api(cluster))
            for index, cluster in enumerate(clusters.clusters):
                role = "manager" if index == 0 else "worker"
                if role == "manager" and args.manager == "upstream":
                    upstream_manager = _dispatch_upstream.start_manager(clusters, Path(tmp) / "upstream-manager")
                    continue
                controllers.append(ControllerProcess(cluster.name, cluster.kubeconfig_path, role, Path(tmp) / f"{cluster.name}.log").start(timeout=180))
            apis = [clusters.api(c) for c in clusters.clusters]
            for api in apis:
                client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
                k = o.Kueue(api)
                k.create(o.resource_flavor("default"))
            manager = o.Kueue(apis[0])
            worker_names = [c.name for c in clusters.workers]
            manager.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": "bench"}, "spec": {"clusters": worker_names}})
            manager.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": "bench"},
                            "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "bench"}}})
            quota = {resource: n for resource in kind.quota}
            manager.create(o.cluster_queue("cq", {"default": quota}, checks=["bench"]))
            manager.create(o.local_queue(NS, "user-queue", "cq"))
            for api in apis[1:]:
                o.Kueue(api).create(o.cluster_queue("cq", {"default": quota}))
                o.Kueue(api).create(o.local_queue(NS, "user-queue", "cq"))
            o.wait_for(lambda: o.is_true(manager.get("AdmissionCheck", "bench"), "Active"), 120, what="check active")

            reserved: dict[str, float] = {}
            remote_created: dict[str, float] = {}
            remote_done: dict[str, float] = {}
            manager_done: dict[str, float] = {}
            played: dict[str, int] = {}  # worker -> status writes of the Job stand-in
            watches_ready = [0]

            def collect(queue: Any) -> None:
                while not stop.is_set():
                    try:
                        source, at, (name, fact) = queue.get(timeout=0.5)
                    except Exception:  # noqa: BLE001 - queue.Empty
                        continue
                    if source == "ready":
                        watches_ready[0] += 1
                    elif source == "manager-workload":
                        if fact and name:
                            reserved.setdefault(name, at)
                    elif source == "remote":
                        remote_created.setdefault(name, at)
                        if fact:
                            remote_done.setdefault(name, at)
                    elif source.startswith("played:"):
                        played[source[7:]] = played.get(source[7:], 0) + 1
                    elif fact:
                        manager_done.setdefault(name, at)

            events: Any = multiprocessing.get_context("spawn").Queue()
            paths = [str(c.kubeconfig_path) for c in clusters.clusters]
            gvr = (kind.group, kind.version, kind.plural)
            watchers = [
                (paths[0], "kueue.x-k8s.io", "v1beta2", "workloads", "manager-workload", "QuotaReserved"),
                (paths[0], *gvr, "manager", kind.done),
            ]
            if not played_jobs:
                watchers += [(path, *gvr, "remote", kind.done) for path in paths[1:]]
            for spec in watchers:
                proc = multiprocessing.get_context("spawn").Process(target=watch_process, args=(*spec, events), daemon=True)
                proc.start()
                watch_procs.append(proc)
            if played_jobs:
                for name, path in zip(worker_names, paths[1:]):
                    proc = multiprocessing.get_context("spawn").Process(target=play_jobs, args=(path, args.run_for, events, name), daemon=True)
                    proc.start()
                    watch_procs.append(proc)
            if args.kind == "pipelinerun" and not args.tekton:
                for path in paths[1:]:
                    proc = multiprocessing.get_context("spawn").Process(target=play_tekton, args=(path, args.run_for), daemon=True)
                    proc.start()
                    watch_procs.append(proc)
            threading.Thread(target=collect, args=(events,), daemon=True).start()
            peak = [0.0]
            if upstream_manager is not None:
                manager_pid = upstream_manager.pid
            else:
                manager_pid = controllers[0].process.pid if controllers[0].process else 0

            def sample() -> None:
                while not stop.is_set():
                    peak[0] = max(peak[0], rss_mib(manager_pid))
                    time.sleep(0.5)

            threading.Thread(target=sample, daemon=True).start()
            time.sleep(1)
            idle = rss_mib(manager_pid)
            batch = client.BatchV1Api(apis[0])
            custom = client.CustomObjectsApi(apis[0])

            def submit(i: int) -> None:
                if args.tekton:
                    custom.create_namespaced_custom_object(*gvr[:2], NS, gvr[2], tekton_pipeline_run(f"pr-{i:05d}", args.run_for))
                    return
                if args.kind == "pipelinerun":
                    body = {
                        "apiVersion": "tekton.dev/v1",
                        "kind": "PipelineRun",
                        "metadata": {"name": f"pr-{i:05d}", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
                        "spec": {"managedBy": MANAGED_BY, "pipelineRef": {"name": "build"}},
                    }
                    custom.create_namespaced_custom_object(*gvr[:2], NS, gvr[2], body)
                    return
                body = o.batch_job(NS, f"job-{i:05d}", "user-queue", kind.quota, managed_by=MANAGED_BY)
                body["spec"]["template"]["metadata"] = {"annotations": {"multikueue.x-k8s.io/run-for": f"{args.run_for:g}s"}}
                batch.create_namespaced_job(NS, body)

            watching = len(watchers) + (len(worker_names) if played_jobs else 0)
            o.wait_for(lambda: watches_ready[0] >= watching or None, 180, what=f"{watching} watch processes started")
            counts_before = [m.request_counts(api) for api in apis]
            cpu_before = m.process_cpu_ms(manager_pid)
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
            deadline = time.monotonic() + args.timeout
            last_report = time.monotonic()
            while len(manager_done) < n and time.monotonic() < deadline:
                time.sleep(1)
                if time.monotonic() - last_report >= 30:
                    last_report = time.monotonic()
                    print(f"  {time.monotonic() - started:.0f}s: {len(reserved)} reserved, {len(remote_created)} on workers, "
                          f"{len(remote_done)} done there, {len(manager_done)} {kind.done} on the manager; "
                          f"manager RSS {rss_mib(manager_pid):.0f} MiB", flush=True)
            finished = time.monotonic()
            cpu_used = m.process_cpu_ms(manager_pid) - cpu_before
            # The manager's clean-up of the workers' copies follows each finish: wait for it (it is part of the cost per Job).
            cleanup_deadline = time.monotonic() + 120
            left: dict[str, tuple[int, int]] = {}
            while time.monotonic() < cleanup_deadline:
                left = {c.name: (count_objects(api, "kueue.x-k8s.io", "v1beta2", "workloads"), count_objects(api, *gvr))
                        for c, api in zip(clusters.workers, apis[1:])}
                if not any(w + j for w, j in left.values()):
                    break
                time.sleep(2)
            cleaned = time.monotonic()
            cpu_with_cleanup = m.process_cpu_ms(manager_pid) - cpu_before
            time.sleep(3)  # the last deletions and events
            counts = [m.delta(before, m.request_counts(api)) for api, before in zip(apis, counts_before)]
            listed, finished_count = finished_workloads(apis[0])
            print()
            print(f"== {args.manager} manager, {n} {noun}s, {args.workers} workers ({'apiserver-only, Jobs played by the bench' if args.apiserver_only_workers else 'full clusters'}), "
                  f"run-for {args.run_for:g}s, rate {args.rate or 'all at once'} ==")
            print(f"requests per {noun} (apiserver_request_total, every verb but WATCH, before submission -> after the workers' copies were removed):")
            print_requests(clusters.manager.name + " (includes the bench's own POST per " + noun + ")", counts[0], n, noun)
            worker_totals = []
            for cluster, count in zip(clusters.workers, counts[1:]):
                dispatched_here = max(1, round(sum(v for (verb, res), v in count.items() if verb == "POST" and res == gvr[2])))
                total = print_requests(cluster.name, count, n, noun, detail=args.requests, played=played.get(cluster.name, 0))
                worker_totals.append(total)
                print(f"    ({dispatched_here} {noun}s created here: {total * n / dispatched_here:.1f} requests per {noun} dispatched to it)")
            print(f"all workers together: {sum(worker_totals):.1f} requests per {noun}")
            if args.requests:
                for cluster, api in zip(clusters.clusters, apis):
                    reasons: dict[str, int] = {}
                    for event in client.CoreV1Api(api).list_namespaced_event(NS).items:
                        key = f"{event.involved_object.kind}/{event.reason}"
                        reasons[key] = reasons.get(key, 0) + 1
                    print(f"    {cluster.name} events:", ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])))
            print(f"manager controller CPU: {cpu_used / n:.1f} ms per {noun} (submission -> last finish, {cpu_used / 1000:.0f} s), "
                  f"{cpu_with_cleanup / n:.1f} ms per {noun} with the clean-up of the workers' copies ({cleaned - finished:.0f} s more)")
            if finished_count != n or listed != n:
                failures.append(f"{finished_count} of {listed} Workloads Finished on the manager, {n} {noun}s submitted")
            if len(manager_done) != n:
                failures.append(f"{len(manager_done)} of {n} {noun}s {kind.done} on the manager after {args.timeout:.0f}s")
            leftovers = {w: v for w, v in left.items() if sum(v)}
            if leftovers:
                failures.append("workers' copies not removed (Workloads, " + noun + "s): " + ", ".join(f"{w} {v}" for w, v in leftovers.items()))
            print(f"every Workload finished: {'yes' if finished_count == n == listed else 'NO'} ({finished_count} of {listed} Finished on the manager; "
                  f"workers' copies left: {sum(sum(v) for v in left.values())})")
        finally:
            stop.set()
            for proc in watch_procs:
                proc.terminate()
            for ctl in controllers:
                ctl.stop()
            if args.keep_logs:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
            if upstream_manager is not None:
                upstream_manager.stop(timeout=20)
                if args.keep_logs:
                    shutil.copy2(upstream_manager.log, args.keep_logs / "upstream-kueue.log")
            if args.keep_logs:
                for log in Path(tmp).glob("*.log"):
                    shutil.copy2(log, args.keep_logs / log.name)
            clusters.down()

    dispatch = [remote_created[j] - reserved[j] for j in remote_created if j in reserved]
    sync = [manager_done[j] - remote_done[j] for j in manager_done if j in remote_done]
    done = kind.done
    print(f"submitted {n} {noun}s in {submitted - started:.1f}s; {len(manager_done)} {done} on the manager after {finished - started:.1f}s")
    if dispatch:
        span = max(remote_created.values()) - min(reserved.values())  # wall-clock seconds
        print(
            f"dispatch (manager QuotaReserved -> worker {noun} created): p50 {statistics.median(dispatch) * 1000:.0f} ms, "
            f"p99 {pct(dispatch, 0.99) * 1000:.0f} ms over {len(dispatch)} {noun}s; {len(remote_created) / span:.0f} {noun}s dispatched/s"
        )
    if sync:
        print(
            f"status sync (worker {noun} {done} -> manager {noun} {done}): p50 {statistics.median(sync) * 1000:.0f} ms, "
            f"p99 {pct(sync, 0.99) * 1000:.0f} ms over {len(sync)} {noun}s"
        )
    if args.tekton and manager_done:
        print(f"{noun}s completed per minute (Succeeded on the manager): {len(manager_done) / (finished - started) * 60:.1f}"
              f" over {finished - started:.0f}s, real Tekton {tekton.VERSION} on both workers")
    print(f"manager controller RSS ({args.manager}): {idle:.0f} MiB before, {peak[0]:.0f} MiB peak")
    if failures:
        for failure in failures:
            print(f"FAILED: {failure}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
