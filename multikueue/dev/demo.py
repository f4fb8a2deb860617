"""``multikueue dev demo``: a Job and a PipelineRun dispatched from the manager to a worker, shown live.

What it does, on the local clusters (started when they are not running):

1. installs the Tekton PipelineRun CRD on every cluster (upstream's from
   ``../shared/reference/tekton`` when it is beside the checkout, else the
   stand-in in ``hack/demo``), and writes each cluster's ConfigMap with the
   catalog entry ``adapters/tekton-pipelinerun.yaml``;
2. starts our controller on every cluster (manager role on the manager);
3. creates the queues: a ClusterQueue with a MultiKueue admission check on
   the manager, plain ones on the workers;
4. submits a ``batch/v1`` Job and a PipelineRun to the manager;
5. prints ``multikueue status`` every few seconds until both are Finished.

The clusters and the controllers keep running afterwards, so another Job
submitted to the manager is dispatched too: the controllers are recorded
with their cluster's processes (as Tekton's are), ``multikueue dev clusters
down`` stops them with the rest, and a later demo on the same clusters
reuses them. The closing lines print commands that work as printed: the
``multikueue`` of this Python by its full path, since the set-up scripts
install it in a virtualenv that is not on the user's PATH.

``--kind``: the same on the kind clusters of ``kind-configs/up.sh``, whose
controllers are already deployed (step 2 is skipped; the ConfigMaps keep
their Configuration and get the catalog entry); the Job's pod runs there
for real.

Tekton: when its controller has been built (``multikueue dev build
--tekton``, or ``--tekton`` here, which builds it; see
:mod:`multikueue.dev.tekton`), the real one runs on the workers (started
there if the running clusters do not have it yet) and turns the released
PipelineRun into TaskRuns and pods that kwok finishes. Otherwise, and on
kind, the demo plays Tekton on the worker, marking the worker's copy
``Succeeded`` a few seconds after our worker controller released it
(:class:`TektonStandIn`). It says which it used. Everything else is the real
dispatch.
"""

from __future__ import annotations

import shlex
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from multikueue.dev import kind, tekton
from multikueue.dev import objects as o
from multikueue.dev import wiring
from multikueue.dev.clusterset import ClusterSet, ClusterSetOptions
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.errors import DevEnvironmentError
from multikueue.dev.localcluster import LocalCluster, write_state
from multikueue.dev.paths import source_checkout
from multikueue.dev.process import ManagedProcess
from multikueue.dev.progress import Heartbeat

PR = ("tekton.dev", "v1", "pipelineruns")
MANAGED_BY = "kueue.x-k8s.io/multikueue"
CONFIG_MAP = "multikueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
#: How long the worker's PipelineRun "runs" before the demo marks it Succeeded.
PIPELINE_SECONDS = 4.0
#: The name of a controller's process among its cluster's (``ControllerProcess`` names it ``CLUSTER/controller``).
CONTROLLER_PROCESS = "controller"
#: Seconds between two "still starting" lines (the guide's bar: progress during every step over ten seconds).
PROGRESS_INTERVAL = 10.0


def shell_path(path: Path, home: Path | None = None) -> str:
    """``path`` as a shell word that works when pasted: ``~/...`` under the home folder, else quoted when needed."""
    home = Path.home() if home is None else home
    try:
        relative = path.relative_to(home).as_posix()
    except ValueError:
        return shlex.quote(str(path))
    if relative != "." and shlex.quote(relative) == relative:
        return f"~/{relative}"
    return shlex.quote(str(path))


def cli_command(executable: str | None = None, home: Path | None = None) -> str:
    """How to run this installation's ``multikueue`` from any shell.

    ``hack/lib.sh`` installs it in a virtualenv that its scripts activate but
    the user's shell does not: a bare ``multikueue`` is "command not found"
    there. So: the script beside this Python (``~/.cache/multikueue/venv/bin/multikueue``),
    else this Python with ``-m multikueue.cli.main``. Not resolved through
    symlinks: a virtualenv's ``python`` is a link to the system's, which
    does not have the packages.
    """
    python = Path(executable or sys.executable)
    script = python.parent / "multikueue"
    if script.is_file():
        return shell_path(script, home)
    return f"{shell_path(python, home)} -m multikueue.cli.main"


def running_controller(processes: Sequence[ManagedProcess], cluster: str) -> ManagedProcess | None:
    """The controller an earlier demo left running on ``cluster``, if it still runs."""
    name = f"{cluster}/{CONTROLLER_PROCESS}"
    return next((p for p in processes if p.name == name and p.alive()), None)


def record_controller(cluster: LocalCluster, process: ManagedProcess) -> None:
    """Put ``process`` among ``cluster``'s processes (in place of a dead one of the same name): stopped with them."""
    cluster.processes[:] = [p for p in cluster.processes if p.name != process.name]
    cluster.processes.append(process)  # last: stopped first, before the apiserver it talks to


def closing_lines(
    *, command: str, manager_kubeconfig: str, ns: str, name: str = "dev", kind: bool = False, logs: str = "",
    checkout: str = "",
) -> list[str]:
    """What the demo prints at the end: the commands to go on with, each working as printed."""
    status = f"    {command} status --kubeconfig {manager_kubeconfig} -n {ns}"
    if kind:
        return ["--- the kind clusters and their controllers keep running:", status, f"    {checkout}kind-configs/down.sh"]
    job = f"{checkout}examples/jobs/job.yaml"
    return [
        f"--- the clusters and the controllers keep running (controller logs in {logs}); for example:",
        status,
        f"    sed 's/namespace: default/namespace: {ns}/' {job} | kubectl --kubeconfig {manager_kubeconfig} create -f -",
        f"    {command} dev clusters down" + ("" if name == "dev" else f" --name {name}") + "   # stops the controllers too",
    ]


@dataclass(frozen=True)
class DemoOptions:
    name: str = "dev"
    timeout: float = 240.0
    refresh: float = 3.0
    #: On the kind clusters of kind-configs/up.sh (their controllers already deployed) instead of local ones.
    kind: bool = False
    #: Build Tekton's controller if it is not built yet (without: the real one only when already built).
    build_tekton: bool = False


def _clusters(options: DemoOptions, *, with_tekton: bool) -> ClusterSet:
    try:
        clusters = ClusterSet.load(options.name)
        if clusters.running():
            print(f"--- using the running local clusters {options.name!r}")
            return clusters
    except DevEnvironmentError:
        pass
    cluster_options = ClusterSetOptions(name=options.name, workers=2, full=True, tekton=with_tekton)
    clusters = ClusterSet.plan(cluster_options)
    what = f"local clusters {options.name!r} (a manager and two workers" + (", Tekton on the workers)" if with_tekton else ")")
    with Heartbeat(what, verb="starting", done="started", estimate="about a minute on two cores", interval=PROGRESS_INTERVAL,
                   out=sys.stdout):  # fmt: skip
        clusters.up(cluster_options)
    return clusters


def _built_tekton(options: DemoOptions) -> tuple[tekton.Source, Path] | None:
    """Tekton's source and controller when built (or when asked to build it); None: play Tekton."""
    if options.kind:
        return None  # kind's nodes are real: step pods would need Tekton's images, which are not here
    try:
        source = tekton.ensure_source()
        if options.build_tekton or tekton.binary_path(source).is_file():
            return source, tekton.ensure_binary(source)
    except DevEnvironmentError as exc:
        if options.build_tekton:
            raise
        print(f"--- (Tekton's controller not usable: {str(exc).splitlines()[0]})")
    return None


def _pipelinerun_crd() -> list[dict[str, Any]]:
    upstream = source_checkout().parent / "shared" / "reference" / "tekton"
    if upstream.is_dir():
        return [d for d in wiring.load_documents(upstream) if d.get("kind") == "CustomResourceDefinition"]
    return wiring.load_documents(source_checkout() / "hack" / "demo" / "pipelinerun-crd.yaml")


def _configure(apis: list[client.ApiClient], *, installed: bool = False) -> None:
    """The Tekton catalog entry in every cluster's ConfigMap (read live by the controllers).

    ``installed``: the controllers run from config/default and config/worker
    (kind): their Configuration is kept and only the entry added to it.
    """
    entry = yaml.safe_load((source_checkout() / "adapters" / "tekton-pipelinerun.yaml").read_text())
    for index, api in enumerate(apis):
        document: dict[str, Any] = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}
        if installed:
            current = client.CoreV1Api(api).read_namespaced_config_map(CONFIG_MAP, wiring.CONTROLLER_NAMESPACE)
            document = yaml.safe_load((current.data or {}).get(CONFIG_KEY) or "") or document
        elif index == 0:
            document["multiKueue"] = {"origin": "multikueue-demo", "gcInterval": "30s"}
        frameworks = [f for f in document.setdefault("multiKueue", {}).get("externalFrameworks") or [] if f.get("kind") != entry.get("kind")]
        document["multiKueue"]["externalFrameworks"] = [*frameworks, entry]
        wiring.apply(api, [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "namespace": wiring.CONTROLLER_NAMESPACE}, "data": {CONFIG_KEY: yaml.safe_dump(document)}}])


def _queues(apis: list[client.ApiClient], ns: str) -> None:
    manager = o.Kueue(apis[0])
    check = f"multikueue-{ns}"
    manager.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": check}, "spec": {"clusters": ["worker1", "worker2"]}})
    manager.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": check},
                    "spec": {"controllerName": MANAGED_BY, "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": check}}})
    # Memory too: examples/jobs/job.yaml asks for it (the closing lines suggest submitting it).
    quotas = {f"default-{ns}": {"cpu": 8, "memory": "16Gi", "pipelineruns.tekton.dev": 4}}
    for index, api in enumerate(apis):
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        k = o.Kueue(api)
        k.create(o.resource_flavor(f"default-{ns}"))
        k.create(o.cluster_queue(f"cq-{ns}", quotas, checks=[check] if index == 0 else None))
        k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    o.wait_for(lambda: o.is_true(manager.get("AdmissionCheck", check), "Active"), 60, what="the MultiKueue admission check to become Active")


def _submit(manager: client.ApiClient, ns: str) -> None:
    job = o.batch_job(ns, "hello", "user-queue", {"cpu": "1"}, managed_by=MANAGED_BY, run_for="5s")
    client.BatchV1Api(manager).create_namespaced_job(ns, job)
    client.CustomObjectsApi(manager).create_namespaced_custom_object(*PR[:2], ns, PR[2], pipeline_run(ns, "build"))
    print(f"--- submitted Job {ns}/hello and PipelineRun {ns}/build to the manager")


def pipeline_run(ns: str, name: str) -> dict[str, Any]:
    """A PipelineRun as Tekton's docs write one (inline spec, two tasks, a param, a result), for MultiKueue.

    The ``multikueue.x-k8s.io/*`` annotations of a task reach its pod and tell
    kwok's stage what the step would have done (the scripts never run):
    how long it runs and the result it writes.
    """
    step = {"name": "main", "image": "ubuntu"}
    return {
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {
            "managedBy": MANAGED_BY,
            "params": [{"name": "revision", "value": "main"}],
            "pipelineSpec": {
                "params": [{"name": "revision", "type": "string"}],
                "results": [{"name": "image", "value": "$(tasks.build.results.image)"}],
                "tasks": [
                    {
                        "name": "build",
                        "params": [{"name": "revision", "value": "$(params.revision)"}],
                        "taskSpec": {
                            "metadata": {"annotations": {"multikueue.x-k8s.io/run-for": "3s",
                                                         "multikueue.x-k8s.io/results": '{"image": "example.com/app@sha256:0123"}'}},
                            "params": [{"name": "revision", "type": "string"}],
                            "results": [{"name": "image"}],
                            "steps": [{**step, "script": "echo build $(params.revision) > $(results.image.path)"}],
                        },
                    },
                    {
                        "name": "test",
                        "runAfter": ["build"],
                        "params": [{"name": "image", "value": "$(tasks.build.results.image)"}],
                        "taskSpec": {
                            "metadata": {"annotations": {"multikueue.x-k8s.io/run-for": "2s"}},
                            "params": [{"name": "image", "type": "string"}],
                            "steps": [{**step, "script": "echo test $(params.image)"}],
                        },
                    },
                ],
            },
        },
    }


class TektonStandIn:
    """Plays Tekton on the workers: a released PipelineRun copy succeeds a few seconds later."""

    def __init__(self, workers: list[client.ApiClient], ns: str) -> None:
        self.workers = workers
        self.ns = ns
        self.seen: dict[tuple[int, str], float] = {}

    def step(self) -> None:
        for index, api in enumerate(self.workers):
            objects = client.CustomObjectsApi(api)
            for run in objects.list_namespaced_custom_object(*PR[:2], self.ns, PR[2])["items"]:
                name = run["metadata"]["name"]
                if "status" in run.get("spec", {}) or (run.get("status") or {}).get("conditions"):
                    continue  # still held by its Workload, or already done
                started = self.seen.setdefault((index, name), time.monotonic())
                if time.monotonic() - started >= PIPELINE_SECONDS:
                    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    status = {"startTime": now, "completionTime": now, "conditions": [
                        {"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "Tasks Completed: 2 (Failed: 0)", "lastTransitionTime": now}]}
                    objects.patch_namespaced_custom_object_status(*PR[:2], self.ns, PR[2], name, {"status": status})
                    print(f"--- (playing Tekton on worker{index + 1}: PipelineRun {self.ns}/{name} Succeeded)")


def _show_pipelinerun(manager: client.ApiClient, ns: str, *, real: bool) -> None:
    """What the manager's PipelineRun says now, and who ran it."""
    run = client.CustomObjectsApi(manager).get_namespaced_custom_object(*PR[:2], ns, PR[2], "build")
    status = run.get("status") or {}
    condition = o.condition(run, "Succeeded") or {}
    print(f"--- PipelineRun {ns}/build on the manager: Succeeded={condition.get('status')} ({condition.get('reason')}: "
          f"{condition.get('message')})")
    if real:
        children = ", ".join(f"{c['pipelineTaskName']}={c['name']}" for c in status.get("childReferences") or [])
        results = ", ".join(f"{r['name']}={r['value']}" for r in status.get("results") or [])
        print(f"    run by the real Tekton controller on the worker: TaskRuns {children}; results {results}")
    else:
        print("    (Tekton was played by the demo: no TaskRuns were made)")


def _finished(manager: client.ApiClient, ns: str) -> bool:
    workloads = o.Kueue(manager).list("Workload", ns)
    return len(workloads) == 2 and all(o.is_true(w, "Finished") for w in workloads)


def _kind_apis() -> list[client.ApiClient]:
    paths = [kind.kubeconfig_path(role) for role in kind.ROLES]
    if not all(p.exists() for p in paths):
        raise DevEnvironmentError(f"kind clusters not found ({paths[0].parent}); run kind-configs/up.sh first")
    o.CPU_SCALE = kind.CPU_SCALE
    return [config.new_client_from_config(config_file=str(p)) for p in paths]


def run_demo(options: DemoOptions, show_status: Callable[[str, str], Any]) -> int:
    """Run the demo; ``show_status(manager kubeconfig, namespace)`` prints the status table (the CLI's)."""
    built = _built_tekton(options)
    if options.kind:
        apis = _kind_apis()
        manager_kubeconfig = str(kind.kubeconfig_path("manager"))
    else:
        clusters = _clusters(options, with_tekton=built is not None)
        apis = [clusters.api(c) for c in clusters.clusters]
        manager_kubeconfig = str(clusters.manager.kubeconfig_path)
    if built is not None:
        clusters.start_tekton(built)  # a no-op where it runs already
        print(f"--- Tekton: the real controller (Tekton Pipelines {tekton.VERSION}, {built[1].name}) runs on "
              f"{', '.join(clusters.tekton_running())}; its TaskRuns' pods run on kwok nodes")
    else:
        for api in apis:
            wiring.install_crds(api, _pipelinerun_crd())
        print("--- Tekton: not built here, so the demo plays it on the workers (marks a released PipelineRun Succeeded "
              f"after {PIPELINE_SECONDS:.0f}s); build the real one with `multikueue dev build --tekton` or `./hack/demo.sh --tekton`")
    _configure(apis, installed=options.kind)
    ns = f"demo-{uuid.uuid4().hex[:4]}"
    logs = Path(kind.state_dir() if options.kind else clusters.directory) / "demo-logs"
    try:
        if options.kind:
            print("--- controllers: deployed in the kind clusters (kubectl -n kueue-system logs deploy/multikueue-controller-manager)")
        else:
            _start_controllers(clusters, logs)
        _queues(apis, ns)
        _submit(apis[0], ns)
        stand_in = TektonStandIn(apis[1:], ns) if built is None else None
        deadline = time.monotonic() + options.timeout
        last = 0.0
        while time.monotonic() < deadline:
            if stand_in is not None:
                stand_in.step()
            done = _finished(apis[0], ns)
            if done or time.monotonic() - last >= options.refresh:
                last = time.monotonic()
                print(f"\n=== multikueue status -n {ns}  ({time.strftime('%H:%M:%S')})")
                show_status(manager_kubeconfig, ns)
            if done:
                print("\n--- both finished on the workers; the manager's Job and PipelineRun carry their final status")
                _show_pipelinerun(apis[0], ns, real=built is not None)
                return 0
            time.sleep(0.5)
        print(f"--- not finished after {options.timeout:.0f}s; see the controller logs in {logs}")
        return 1
    finally:
        checkout = "" if Path.cwd().resolve() == source_checkout().resolve() else f"{shell_path(source_checkout())}/"
        lines = closing_lines(
            command=cli_command(), manager_kubeconfig=shell_path(Path(manager_kubeconfig)), ns=ns, name=options.name,
            kind=options.kind, logs=shell_path(logs), checkout=checkout,
        )  # fmt: skip
        print("\n".join(lines))


def _start_controllers(clusters: ClusterSet, logs: Path) -> None:
    """Our controller on every cluster (manager role on the manager), left running when the demo ends.

    Each is recorded with its cluster's processes in the set's state file, so
    ``multikueue dev clusters down`` stops it; one an earlier demo left
    running is reused (two managers on one cluster would both act).
    """
    logs.mkdir(parents=True, exist_ok=True)
    started, reused = [], []
    for index, cluster in enumerate(clusters.clusters):
        if running_controller(cluster.processes, cluster.name) is not None:
            reused.append(cluster.name)
            continue
        role = "manager" if index == 0 else "worker"
        controller = ControllerProcess(cluster.name, cluster.kubeconfig_path, role, logs / f"{cluster.name}.log", webhooks=index == 0)
        try:
            with Heartbeat(f"our controller on {cluster.name} ({role} role)", verb="starting", done="started",
                           estimate="seconds", interval=PROGRESS_INTERVAL, out=sys.stdout):  # fmt: skip
                controller.start()
        finally:
            if controller.process is not None:  # recorded even when it did not become ready: down stops it
                record_controller(cluster, controller.process)
                write_state(clusters.state_file, clusters.clusters, {"name": clusters.name})
        started.append(cluster.name)
    if reused:
        print(f"--- controllers already running on {', '.join(reused)} (left by an earlier demo); logs in {logs}")
    if started:
        print(f"--- controllers started on {', '.join(started)}; they keep running after the demo (logs in {logs})")
