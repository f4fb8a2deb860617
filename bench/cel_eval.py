"""Benchmark: cost of the generic adapter's per-object work for a Tekton PipelineRun.

Loads the catalog entry ``adapters/tekton-pipelinerun.yaml`` (plus, for what
that entry does not use, a pod-set expression and two creation patches) and
times, on a PipelineRun of realistic size (about 5 KB of JSON: 10 params, 6 tasks,
child references, results; the size is printed), each of:

- converting the object to CEL values (done once per object and shared);
- the ``finished`` and ``succeeded`` expressions, each with its own conversion;
- ``GenericAdapter.finished`` (both tests, one conversion);
- the ``workload.podSets`` expression and ``pod_sets`` (default and CEL);
- one creation patch that reads the object, and one constant patch (computed at load);
- ``remote_copy`` (managedBy removed, labels, hold, the two patches);
- ``status_patch`` between a running and a finished status, and between equal ones.

It prints microseconds per call (mean over ``--iterations`` calls, best of
``--repeat`` rounds; about a minute with the defaults)::

    python bench/cel_eval.py --iterations 10000 --repeat 1
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from multikueue.integrations.external.cel import cel_input
from multikueue.integrations.external.entries import load_frameworks
from multikueue.integrations.external.adapter import GenericAdapter, default_resource_ref
from multikueue.api.constants import Labels, MultiKueue

CATALOG_ENTRY = Path(__file__).parents[1] / "adapters" / "tekton-pipelinerun.yaml"
POD_SETS = (
    '[{"name": "main", "count": has(object.spec.params) ? size(object.spec.params) : 1,'
    ' "requests": {"cpu": "500m", "memory": "1Gi"}}]'
)
PATCH_READING_OBJECT = '{"metadata": {"annotations": {"example.com/origin-name": object.metadata.name}}}'
CONSTANT_PATCH = '{"metadata": {"labels": {"example.com/dispatched": "true"}}}'


def pipeline_run(succeeded: str) -> dict[str, Any]:
    """A PipelineRun as the API returns it mid-flight or at the end (``succeeded``: Unknown/True/False)."""
    tasks = [
        {
            "name": f"task-{i}",
            "taskRef": {"name": f"build-step-{i}", "kind": "Task"},
            "params": [{"name": "image", "value": f"registry.example.com/app/step-{i}:v1.2.3"}],
            "runAfter": [f"task-{i - 1}"] if i else [],
            "workspaces": [{"name": "source", "workspace": "shared"}],
        }
        for i in range(6)
    ]
    return {
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": {
            "name": "build-and-test-x7k2p",
            "namespace": "team-a",
            "uid": "5b0c3f9e-8d7a-4a55-9a53-3a1b1f0c2d11",
            "resourceVersion": "123456",
            "generation": 1,
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {
                Labels.QUEUE_NAME: "user-queue",
                "tekton.dev/pipeline": "build-and-test",
                "app.kubernetes.io/part-of": "app",
            },
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 800 + "}"},
            "managedFields": [{"manager": "kubectl", "operation": "Update", "time": "2024-05-01T10:00:00Z"}],
        },
        "spec": {
            "managedBy": MultiKueue.MANAGED_BY,
            "pipelineRef": {"name": "build-and-test"},
            "params": [{"name": f"param-{i}", "value": f"value-{i}-" + "v" * 20} for i in range(10)],
            "workspaces": [{"name": "shared", "volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"],
                                                                             "resources": {"requests": {"storage": "1Gi"}}}}}],
            "taskRunTemplate": {"serviceAccountName": "pipeline", "podTemplate": {"nodeSelector": {"pool": "ci"}}},
            "timeouts": {"pipeline": "1h0m0s"},
        },
        "status": {
            "conditions": [
                {
                    "type": "Succeeded",
                    "status": succeeded,
                    "reason": {"Unknown": "Running", "True": "Succeeded", "False": "Failed"}[succeeded],
                    "message": "Tasks Completed: 6 (Failed: 0, Cancelled 0), Skipped: 0",
                    "lastTransitionTime": "2024-05-01T10:05:00Z",
                }
            ],
            "startTime": "2024-05-01T10:00:01Z",
            **({} if succeeded == "Unknown" else {"completionTime": "2024-05-01T10:05:00Z"}),
            "childReferences": [
                {"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "name": f"build-and-test-x7k2p-task-{i}",
                 "pipelineTaskName": f"task-{i}"}
                for i in range(6)
            ],
            "pipelineSpec": {"tasks": tasks, "workspaces": [{"name": "shared"}]},
            "results": [{"name": "digest", "value": "sha256:" + "0" * 64}],
            "provenance": {"featureFlags": {"enableAPIFields": "beta", "resultExtractionMethod": "termination-message"}},
        },
    }


def measure(fn: Callable[[], Any], iterations: int, repeat: int) -> float:
    """Microseconds per call: the best of ``repeat`` rounds of ``iterations`` calls."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    catalog = yaml.safe_load(CATALOG_ENTRY.read_text())
    extended = {
        **catalog,
        "workload": {"podSets": POD_SETS},
        "creationPatches": [PATCH_READING_OBJECT, CONSTANT_PATCH],
    }
    loaded = load_frameworks([catalog])
    assert loaded.ok, loaded.problems
    plain = loaded.frameworks[catalog["name"]]
    loaded = load_frameworks([extended])
    assert loaded.ok, loaded.problems
    framework = loaded.frameworks[catalog["name"]]
    catalog_adapter = GenericAdapter(plain, default_resource_ref(plain))
    adapter = GenericAdapter(framework, default_resource_ref(framework))
    assert framework.finished and framework.succeeded and framework.workload and framework.workload.pod_sets
    pod_sets_program = framework.workload.pod_sets
    reading_patch, constant_patch = framework.creation_patches

    running, done = pipeline_run("Unknown"), pipeline_run("True")
    done_copy = copy.deepcopy(done)
    size = len(json.dumps(done))
    assert adapter.finished(done) == (True, True) and adapter.finished(running) == (False, False)
    assert adapter.status_patch(running, done) is not None and adapter.status_patch(done, done_copy) is None

    cases: list[tuple[str, Callable[[], Any]]] = [
        ("JSON -> CEL conversion of the object", lambda: cel_input(done)),
        ("finished (CEL, own conversion)", lambda: framework.finished.evaluate(done)),  # type: ignore[union-attr]
        ("succeeded (CEL, own conversion)", lambda: framework.succeeded.evaluate(done)),  # type: ignore[union-attr]
        ("adapter.finished (both, one conversion)", lambda: adapter.finished(done)),
        ("podSets (CEL, own conversion)", lambda: pod_sets_program.evaluate(done)),
        ("adapter.pod_sets (CEL + shape check)", lambda: adapter.pod_sets(done)),
        ("adapter.pod_sets (catalog default)", lambda: catalog_adapter.pod_sets(done)),
        ("creation patch reading object (CEL)", lambda: reading_patch.evaluate(done)),
        ("creation patch, constant (cached)", lambda: constant_patch.evaluate(done)),
        ("creation patch, constant (CEL run)", lambda: constant_patch.run(done)),
        ("remote_copy (catalog entry: hold)", lambda: catalog_adapter.remote_copy(done, origin="m", workload_name="wl")),
        ("remote_copy (+ both patches)", lambda: adapter.remote_copy(done, origin="m", workload_name="wl")),
        ("status_patch running -> finished", lambda: adapter.status_patch(running, done)),
        ("status_patch equal (no patch)", lambda: adapter.status_patch(done, done_copy)),
    ]
    print(f"PipelineRun of {size} bytes of JSON; {args.iterations} calls, best of {args.repeat}")
    width = max(len(name) for name, _ in cases)
    for name, fn in cases:
        print(f"{name:<{width}}  {measure(fn, args.iterations, args.repeat):10.1f} us")


if __name__ == "__main__":
    main()
