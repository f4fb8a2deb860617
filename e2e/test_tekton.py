"""PipelineRun dispatch with the real Tekton controller on the workers.

Tekton Pipelines v1.15.0's controller, built from the third-party archive
(:mod:`multikueue.dev.tekton`), runs on both e2e workers (fixture
``tekton_workers``); nothing plays Tekton here. A PipelineRun shaped like
Tekton's documentation (inline ``pipelineSpec``, two tasks, params, a result)
is submitted to the manager with the catalog entry
(``adapters/tekton-pipelinerun.yaml``): our manager builds its Workload and
copies it, held, to the worker that admits it; our worker controller releases
the hold; Tekton makes the TaskRuns and their pods, which kwok's stages finish
(``hack/kwok/stages.yaml``: exit 0, or the exit code in the pod's
``multikueue.x-k8s.io/exit-code`` annotation, task results from
``multikueue.x-k8s.io/results``); the status Tekton writes comes back to the
manager's PipelineRun.

Tekton's webhook is not run (see :mod:`multikueue.dev.tekton`): the
PipelineRuns here are valid, so the controller's own defaulting suffices.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from multikueue.dev import objects as o
from multikueue.dev import wiring
from multikueue.dev.paths import source_checkout
from multikueue.dev.process import ManagedProcess
from multikueue.dev.pytest_plugin import Clusters

# A cold build of Tekton's controller (about 10 minutes on two cores) happens in the first test's set-up.
pytestmark = [pytest.mark.e2e, pytest.mark.local_clusters, pytest.mark.timeout(1800)]

MANAGED_BY = "kueue.x-k8s.io/multikueue"
CONFIG_MAP = "multikueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
PR = ("tekton.dev", "v1", "pipelineruns")
TR = ("tekton.dev", "v1", "taskruns")
RESULTS = "multikueue.x-k8s.io/results"
EXIT_CODE = "multikueue.x-k8s.io/exit-code"
RUN_FOR = "multikueue.x-k8s.io/run-for"
GREETING = "Hello Tekton!"


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def get(api: client.ApiClient, gvr: tuple[str, str, str], ns: str, name: str) -> dict[str, Any] | None:
    try:
        return custom(api).get_namespaced_custom_object(gvr[0], gvr[1], ns, gvr[2], name)  # type: ignore[no-any-return]
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def catalog_entry() -> dict[str, Any]:
    return yaml.safe_load((source_checkout() / "adapters" / "tekton-pipelinerun.yaml").read_text())


def _configuration(api: client.ApiClient) -> str | None:
    try:
        config_map = client.CoreV1Api(api).read_namespaced_config_map(CONFIG_MAP, wiring.CONTROLLER_NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return (config_map.data or {}).get(CONFIG_KEY)


def _write_configuration(api: client.ApiClient, text: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP, "namespace": wiring.CONTROLLER_NAMESPACE},
        "data": {CONFIG_KEY: text},
    }
    wiring.apply(api, [body])


@pytest.fixture(scope="module")
def tekton_entry(e2e_clusters: Clusters, e2e_controllers: list[Any], tekton_workers: list[ManagedProcess]) -> Iterator[None]:
    """The catalog's PipelineRun entry in every cluster's Configuration (picked up live); the found ones put back after."""
    found = [_configuration(api) for api in e2e_clusters.all]
    for api, text in zip(e2e_clusters.all, found):
        document = yaml.safe_load(text or "") or {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}
        document.setdefault("multiKueue", {})["externalFrameworks"] = [catalog_entry()]
        _write_configuration(api, yaml.safe_dump(document))
    # The catalog entry's `webhook: {}`: PipelineRuns submitted without spec.managedBy get it on the manager.
    o.wait_for(lambda: PR_WEBHOOK in mutating_hooks(e2e_clusters.manager), 30, what="the PipelineRun webhook registered")
    try:
        yield
    finally:
        for api, text in zip(e2e_clusters.all, found):
            document = yaml.safe_load(text or "") or {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}
            (document.get("multiKueue") or {}).pop("externalFrameworks", None)
            _write_configuration(api, yaml.safe_dump(document))


PR_WEBHOOK = "external.pipelineruns.v1.tekton.dev.multikueue.x-k8s.io"


def mutating_hooks(api: client.ApiClient) -> list[str]:
    admission = client.AdmissionregistrationV1Api(api)
    return [hook.name for config in admission.list_mutating_webhook_configuration().items for hook in config.webhooks or []]


def setup_queues(clusters: Clusters, ns: str) -> None:
    """A MultiKueue check over both workers; a ClusterQueue everywhere capping PipelineRuns at 4."""
    manager = o.Kueue(clusters.manager)
    check, config = f"mk-{ns}", f"mkc-{ns}"
    manager.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": config},
                    "spec": {"clusters": ["worker1", "worker2"]}})
    manager.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": check},
                    "spec": {"controllerName": MANAGED_BY,
                             "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config}}})
    for api, checks in [(clusters.manager, [check]), (clusters.worker(1), None), (clusters.worker(2), None)]:
        k = o.Kueue(api)
        k.create(o.resource_flavor(f"default-{ns}"))
        k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"pipelineruns.tekton.dev": 4}}, checks=checks, scale_cpu=False))
        k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    o.wait_for(lambda: o.is_true(manager.get("AdmissionCheck", check), "Active"), 60, what="MultiKueue check active")


def docs_pipeline_run(
    ns: str, name: str, *, fail_goodbye: bool = False, hello_runs_for: str | None = None, managed_by: bool = True
) -> dict[str, Any]:
    """Tekton's getting-started PipelineRun, inline: ``hello`` makes a result that ``goodbye`` takes as a param.

    The ``multikueue.x-k8s.io/*`` annotations in the tasks' metadata reach
    their pods and tell kwok what the step would have done (the scripts never run).
    ``managed_by=False`` leaves ``spec.managedBy`` to the manager's webhook (the entry's ``webhook: {}``).
    """
    hello_annotations = {RESULTS: '{"greeting": "%s"}' % GREETING}
    if hello_runs_for:
        hello_annotations[RUN_FOR] = hello_runs_for
    goodbye_annotations = {EXIT_CODE: "1"} if fail_goodbye else {}
    run = {
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {
            "managedBy": MANAGED_BY,
            "params": [{"name": "username", "value": "Tekton"}],
            "pipelineSpec": {
                "params": [{"name": "username", "type": "string"}],
                "results": [{"name": "greeting", "description": "what hello said", "value": "$(tasks.hello.results.greeting)"}],
                "tasks": [
                    {
                        "name": "hello",
                        "params": [{"name": "username", "value": "$(params.username)"}],
                        "taskSpec": {
                            "metadata": {"annotations": hello_annotations},
                            "params": [{"name": "username", "type": "string"}],
                            "results": [{"name": "greeting", "description": "the greeting"}],
                            "steps": [
                                {
                                    "name": "hello",
                                    "image": "ubuntu",
                                    "script": '#!/bin/bash\necho "Hello $(params.username)!" | tee $(results.greeting.path)\n',
                                }
                            ],
                        },
                    },
                    {
                        "name": "goodbye",
                        "runAfter": ["hello"],
                        "params": [{"name": "greeting", "value": "$(tasks.hello.results.greeting)"}],
                        "taskSpec": {
                            "metadata": {"annotations": goodbye_annotations},
                            "params": [{"name": "greeting", "type": "string"}],
                            "steps": [
                                {"name": "goodbye", "image": "ubuntu", "script": '#!/bin/bash\necho "$(params.greeting) Goodbye!"\n'}
                            ],
                        },
                    },
                ],
            },
        },
    }
    if not managed_by:
        del run["spec"]["managedBy"]
    return run


def workload_for(api: client.ApiClient, ns: str, name: str) -> dict[str, Any] | None:
    for wl in o.Kueue(api).list("Workload", ns):
        if any(r["kind"] == "PipelineRun" and r["name"] == name for r in wl["metadata"].get("ownerReferences") or []):
            return wl
    return None


def worker_copy(clusters: Clusters, ns: str, name: str) -> tuple[int, dict[str, Any]] | None:
    for index in (1, 2):
        obj = get(clusters.worker(index), PR, ns, name)
        if obj is not None:
            return index, obj
    return None


def succeeded(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``Succeeded`` condition once it is no longer Unknown."""
    found = o.condition(obj, "Succeeded")
    return found if found and found.get("status") != "Unknown" else None


def submit(clusters: Clusters, body: dict[str, Any]) -> None:
    ns = body["metadata"]["namespace"]
    custom(clusters.manager).create_namespaced_custom_object(PR[0], PR[1], ns, PR[2], body)


def finished_on_manager(clusters: Clusters, ns: str, name: str, timeout: float = 120) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        obj = get(clusters.manager, PR, ns, name)
        return obj if succeeded(obj) else None

    return o.wait_for(done, timeout, 0.5, what=f"manager PipelineRun {name} finished")


class WorkerHistory:
    """The last version the workers' watches showed of each PipelineRun, TaskRun and pod of a namespace,
    and every ``Succeeded`` condition each of them showed.

    Kept after deletion: once the manager has the final status it deletes
    the worker's copy, and Kubernetes' garbage collector its TaskRuns and
    pods, often within a tenth of a second; a watch sees every version a poll
    could miss.
    """

    KINDS = ("PipelineRun", "TaskRun", "Pod")

    def __init__(self, clusters: Clusters, ns: str) -> None:
        self.ns = ns
        self.latest: dict[tuple[int, str, str], dict[str, Any]] = {}
        self.conditions: dict[tuple[int, str, str], list[dict[str, Any]]] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._follow, args=(index, kind, clusters.worker(index)), daemon=True)
            for index in (1, 2)
            for kind in self.KINDS
        ]
        for thread in self.threads:
            thread.start()

    def _follow(self, index: int, kind: str, api: client.ApiClient) -> None:
        if kind == "Pod":
            func: Any = client.CoreV1Api(api).list_namespaced_pod
            args: tuple[Any, ...] = (self.ns,)
        else:
            gvr = PR if kind == "PipelineRun" else TR
            func, args = custom(api).list_namespaced_custom_object, (gvr[0], gvr[1], self.ns, gvr[2])
        version = None
        while not self.stop.is_set():
            try:
                for event in watch.Watch().stream(func, *args, resource_version=version, timeout_seconds=5):
                    obj = event["object"]
                    if not isinstance(obj, dict):
                        obj = api.sanitize_for_serialization(obj)
                    version = obj["metadata"]["resourceVersion"]
                    key = (index, kind, obj["metadata"]["name"])
                    with self.lock:
                        self.latest[key] = obj
                        seen = self.conditions.setdefault(key, [])
                        condition = succeeded(obj)
                        if condition is not None and condition not in seen:
                            seen.append(condition)
                    if self.stop.is_set():
                        return
            except ApiException as exc:
                if exc.status != 410:
                    raise
                version = None  # expired: list again

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)

    def get(self, index: int, kind: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return copy.deepcopy(self.latest.get((index, kind, name)))

    def succeeded_conditions(self, index: int, kind: str, name: str) -> list[dict[str, Any]]:
        """Every distinct ``Succeeded`` condition the object showed, oldest first."""
        with self.lock:
            return copy.deepcopy(self.conditions.get((index, kind, name), []))

    def of_kind(self, index: int, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [copy.deepcopy(obj) for (i, k, _), obj in self.latest.items() if i == index and k == kind]


@pytest.fixture
def history(e2e_clusters: Clusters, namespace: str) -> Iterator[WorkerHistory]:
    recorder = WorkerHistory(e2e_clusters, namespace)
    try:
        yield recorder
    finally:
        recorder.close()


def finished_on_worker(
    history: WorkerHistory, index: int, name: str
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, str]]:
    """The worker's PipelineRun as Tekton finished it, its TaskRuns and their pods' phases (last versions seen)."""
    run = o.wait_for(lambda: succeeded(history.get(index, "PipelineRun", name)) and history.get(index, "PipelineRun", name),
                     120, 0.2, what=f"worker{index} PipelineRun {name} finished by Tekton")
    pods = {p["metadata"]["name"]: p["status"]["phase"] for p in history.of_kind(index, "Pod")}
    return run, history.of_kind(index, "TaskRun"), pods


def gone_from_workers(clusters: Clusters, ns: str, name: str) -> bool:
    return worker_copy(clusters, ns, name) is None


def pipeline_task(taskruns: list[dict[str, Any]], task: str) -> dict[str, Any]:
    return next(t for t in taskruns if t["metadata"]["labels"]["tekton.dev/pipelineTask"] == task)


def test_docs_pipelinerun_runs_on_a_worker_under_tekton_and_its_status_comes_back(
    e2e_clusters: Clusters, tekton_entry: None, namespace: str, history: WorkerHistory
) -> None:
    ns = namespace
    setup_queues(e2e_clusters, ns)
    # Submitted as a Tekton user writes it, without spec.managedBy: the manager's webhook sets it.
    submit(e2e_clusters, docs_pipeline_run(ns, "hello-goodbye", managed_by=False))

    wl = o.wait_for(lambda: workload_for(e2e_clusters.manager, ns, "hello-goodbye"), 60, what="Workload built by the manager")
    index, held = o.wait_for(lambda: worker_copy(e2e_clusters, ns, "hello-goodbye"), 60, what="PipelineRun copied to a worker")
    assert "managedBy" not in held["spec"]
    manager_run = finished_on_manager(e2e_clusters, ns, "hello-goodbye")
    o.wait_for(lambda: gone_from_workers(e2e_clusters, ns, "hello-goodbye"), 60, what="worker copy removed")
    worker_run, taskruns, pods = finished_on_worker(history, index, "hello-goodbye")

    # Tekton really ran it there: two TaskRuns, each with its pod, both succeeded.
    assert sorted(t["metadata"]["labels"]["tekton.dev/pipelineTask"] for t in taskruns) == ["goodbye", "hello"]
    for taskrun in taskruns:
        assert o.is_true(taskrun, "Succeeded"), taskrun.get("status")
        assert pods[taskrun["status"]["podName"]] == "Succeeded"
    goodbye = pipeline_task(taskruns, "goodbye")
    assert goodbye["spec"]["params"] == [{"name": "greeting", "value": GREETING}], "hello's result fed goodbye's param"

    # The manager's PipelineRun ends with the status Tekton wrote on the worker.
    status, theirs = manager_run["status"], worker_run["status"]
    condition = succeeded(manager_run)
    assert condition is not None and condition["status"] == "True" and condition["reason"] == "Succeeded"
    assert status["conditions"] == theirs["conditions"]
    assert status["startTime"] == theirs["startTime"] and status["completionTime"] == theirs["completionTime"]
    assert {c["pipelineTaskName"] for c in status["childReferences"]} == {"hello", "goodbye"}
    assert status["childReferences"] == theirs["childReferences"]
    assert status["results"] == theirs["results"] == [{"name": "greeting", "value": GREETING}]
    assert manager_run["spec"]["managedBy"] == MANAGED_BY

    finished = o.wait_for(
        lambda: o.condition(o.Kueue(e2e_clusters.manager).get("Workload", wl["metadata"]["name"], ns), "Finished"), 60,
        what="manager Workload Finished",
    )
    assert finished["reason"] == "Succeeded"


def test_a_failing_task_fails_the_managers_pipelinerun_with_tektons_reason(
    e2e_clusters: Clusters, tekton_entry: None, namespace: str, history: WorkerHistory
) -> None:
    ns = namespace
    setup_queues(e2e_clusters, ns)
    submit(e2e_clusters, docs_pipeline_run(ns, "goodbye-fails", fail_goodbye=True))
    index, _ = o.wait_for(lambda: worker_copy(e2e_clusters, ns, "goodbye-fails"), 60, what="PipelineRun copied to a worker")
    manager_run = finished_on_manager(e2e_clusters, ns, "goodbye-fails")
    o.wait_for(lambda: gone_from_workers(e2e_clusters, ns, "goodbye-fails"), 60, what="worker copy removed")
    worker_run, taskruns, pods = finished_on_worker(history, index, "goodbye-fails")

    condition = succeeded(manager_run)
    assert condition is not None and condition["status"] == "False"
    assert condition["reason"] == "Failed"  # Tekton's PipelineRunReasonFailed
    assert condition == succeeded(worker_run)
    assert "Failed: 1" in condition["message"], condition["message"]
    assert manager_run["status"]["completionTime"] == worker_run["status"]["completionTime"]

    goodbye = pipeline_task(taskruns, "goodbye")
    failed = succeeded(goodbye)
    assert failed is not None and failed["status"] == "False" and failed["reason"] == "StepFailed"
    assert "exited with code 1" in failed["message"], failed["message"]
    assert pods[goodbye["status"]["podName"]] == "Failed"

    wl = workload_for(e2e_clusters.manager, ns, "goodbye-fails")
    assert wl is not None
    finished = o.wait_for(
        lambda: o.condition(o.Kueue(e2e_clusters.manager).get("Workload", wl["metadata"]["name"], ns), "Finished"), 60,
        what="manager Workload Finished",
    )
    assert finished["reason"] == "Failed"


def test_cancelling_on_the_manager_cancels_the_workers_copy(
    e2e_clusters: Clusters, tekton_entry: None, namespace: str, history: WorkerHistory
) -> None:
    ns = namespace
    setup_queues(e2e_clusters, ns)
    submit(e2e_clusters, docs_pipeline_run(ns, "cancel-me", hello_runs_for="600s"))
    index, _ = o.wait_for(lambda: worker_copy(e2e_clusters, ns, "cancel-me"), 60, what="PipelineRun copied to a worker")

    def hello_running() -> bool:
        return any((o.condition(t, "Succeeded") or {}).get("reason") == "Running" for t in history.of_kind(index, "TaskRun"))

    o.wait_for(hello_running, 90, 0.5, what="hello's TaskRun running on the worker")
    patch = {"spec": {"status": "Cancelled"}}
    custom(e2e_clusters.manager).patch_namespaced_custom_object(PR[0], PR[1], ns, PR[2], "cancel-me", patch)

    manager_run = finished_on_manager(e2e_clusters, ns, "cancel-me")
    o.wait_for(lambda: gone_from_workers(e2e_clusters, ns, "cancel-me"), 60, what="worker copy removed")
    worker_run, taskruns, _ = finished_on_worker(history, index, "cancel-me")
    assert worker_run["spec"]["status"] == "Cancelled", "the cancellation was pushed to the worker's copy"
    condition = succeeded(manager_run)
    assert condition is not None and condition["status"] == "False" and condition["reason"] == "Cancelled", condition
    # Tekton can write its Cancelled condition twice (a second reconcile from a stale cache sets it
    # again with a new lastTransitionTime, as stop 23's CI saw); the manager keeps the one it
    # concluded on, which must be one the worker's copy showed.
    assert condition in history.succeeded_conditions(index, "PipelineRun", "cancel-me"), (
        condition, history.succeeded_conditions(index, "PipelineRun", "cancel-me"))
    # Tekton cancelled the running TaskRun (its own status follows on the TaskRun's next reconcile).
    assert pipeline_task(taskruns, "hello")["spec"].get("status") == "TaskRunCancelled"
    assert not any(t["metadata"]["labels"]["tekton.dev/pipelineTask"] == "goodbye" for t in taskruns)

    wl = workload_for(e2e_clusters.manager, ns, "cancel-me")
    assert wl is not None
    finished = o.wait_for(
        lambda: o.condition(o.Kueue(e2e_clusters.manager).get("Workload", wl["metadata"]["name"], ns), "Finished"), 60,
        what="manager Workload Finished",
    )
    assert finished["reason"] == "Failed"
