"""The generic adapter: managed-by, worker copy, status sync, pod sets, finish and hold."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from multikueue.integrations.base import Adapter
from multikueue.integrations.external.cel import CelEvaluationError
from multikueue.integrations.external.entries import CompiledFramework, load_frameworks
from multikueue.integrations.external.adapter import GenericAdapter, default_resource_ref, guess_plural
from multikueue.integrations.patch import apply_merge_patch
from multikueue.api.constants import Labels, MultiKueue
from multikueue.api.workload import PodSet
from multikueue.api.resources import ResourceRef

pytestmark = pytest.mark.unit

WIDGET = "Widget.v1alpha1.example.com"
TEKTON = "PipelineRun.v1.tekton.dev"
TEKTON_FINISHED = (
    "has(object.status) && has(object.status.conditions) && "
    'object.status.conditions.exists(c, c.type == "Succeeded" && c.status != "Unknown")'
)
TEKTON_SUCCEEDED = 'object.status.conditions.exists(c, c.type == "Succeeded" && c.status == "True")'


def framework(entry: dict[str, Any]) -> CompiledFramework:
    loaded = load_frameworks([entry])
    assert loaded.problems == []
    return loaded.frameworks[entry["name"]]


def adapter(entry: dict[str, Any], plural: str | None = None) -> GenericAdapter:
    compiled = framework(entry)
    return GenericAdapter(compiled, default_resource_ref(compiled, plural=plural))


def widget(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1alpha1",
        "kind": "Widget",
        "metadata": {
            "name": "w1",
            "namespace": "team-a",
            "uid": "1234",
            "resourceVersion": "99",
            "generation": 3,
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "finalizers": ["example.com/cleanup"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "9"}],
            "labels": {Labels.QUEUE_NAME: "user-queue", "app": "demo"},
            "annotations": {"note": "hello"},
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {"control": {"managedBy": MultiKueue.MANAGED_BY, "mode": "fast"}, "size": 3, **spec},
        "status": {"phase": "Running"},
    }


def test_satisfies_the_adapter_protocol() -> None:
    instance: Adapter = adapter({"name": TEKTON})
    assert instance.gvk == TEKTON
    assert (instance.kind, instance.api_version) == ("PipelineRun", "tekton.dev/v1")
    assert instance.ref == ResourceRef("tekton.dev", "v1", "pipelineruns", True)


def test_ref_must_match_the_gvk() -> None:
    with pytest.raises(ValueError, match="does not match"):
        GenericAdapter(framework({"name": TEKTON}), ResourceRef("tekton.dev", "v1beta1", "pipelineruns", True))


def test_plural_guess() -> None:
    assert guess_plural("PipelineRun") == "pipelineruns"


@pytest.mark.parametrize(
    ("spec", "managed"),
    [
        ({"managedBy": MultiKueue.MANAGED_BY}, True),
        ({"managedBy": "tekton.dev/pipeline"}, False),
        ({}, False),
    ],
)
def test_managed_by_default_path(spec: dict[str, Any], managed: bool) -> None:
    assert adapter({"name": TEKTON}).managed_by_multikueue({"spec": spec}) is managed


def test_managed_by_custom_path() -> None:
    custom = adapter({"name": WIDGET, "managedBy": "$.spec.control.managedBy"})
    assert custom.managed_by_multikueue(widget())
    assert not custom.managed_by_multikueue({"spec": {"managedBy": MultiKueue.MANAGED_BY}})


def test_remote_copy_keeps_spec_labels_annotations_and_drops_the_rest() -> None:
    custom = adapter({"name": WIDGET, "managedBy": "$.spec.control.managedBy"})
    original = widget()
    before = copy.deepcopy(original)
    remote = custom.remote_copy(original, origin="manager-1", workload_name="widget-w1-abc")
    assert original == before  # untouched
    assert remote == {
        "apiVersion": "example.com/v1alpha1",
        "kind": "Widget",
        "metadata": {
            "name": "w1",
            "namespace": "team-a",
            "labels": {
                Labels.QUEUE_NAME: "user-queue",
                "app": "demo",
                Labels.MULTIKUEUE_ORIGIN: "manager-1",
                Labels.PREBUILT_WORKLOAD_NAME: "widget-w1-abc",
            },
            "annotations": {"note": "hello"},
        },
        "spec": {"control": {"mode": "fast"}, "size": 3},
    }
    remote["spec"]["size"] = 10
    assert original["spec"]["size"] == 3  # a deep copy


def test_remote_copy_of_a_long_workload_name_uses_an_annotation() -> None:
    name = "w" * 70
    remote = adapter({"name": TEKTON}).remote_copy(
        {"metadata": {"name": "p"}, "spec": {"managedBy": MultiKueue.MANAGED_BY}}, origin="o", workload_name=name
    )
    assert Labels.PREBUILT_WORKLOAD_NAME not in remote["metadata"]["labels"]
    assert remote["metadata"]["annotations"][Labels.PREBUILT_WORKLOAD_NAME] == name
    assert remote["spec"] == {}


def test_remote_copy_with_hold_and_patches() -> None:
    custom = adapter(
        {
            "name": WIDGET,
            "managedBy": "$.spec.control.managedBy",
            "hold": {"path": "$.spec.suspend", "value": True},
            "creationPatches": [
                '{"metadata": {"annotations": {"example.com/from": "manager", "note": null}}}',
                # The second patch sees the first one's result.
                '{"spec": {"copyOf": object.metadata.name + "/" + object.metadata.annotations["example.com/from"]}}',
                # A patch cannot detach the copy from its Workload or manager.
                '{"metadata": {"name": "other", "labels": null}}',
            ],
        }
    )
    remote = custom.remote_copy(widget(), origin="manager-1", workload_name="wl")
    assert remote["spec"] == {"control": {"mode": "fast"}, "size": 3, "suspend": True, "copyOf": "w1/manager"}
    assert remote["metadata"]["name"] == "w1"
    assert remote["metadata"]["annotations"] == {"example.com/from": "manager"}
    assert remote["metadata"]["labels"] == {Labels.MULTIKUEUE_ORIGIN: "manager-1", Labels.PREBUILT_WORKLOAD_NAME: "wl"}
    assert custom.is_held(remote)
    assert custom.release_patch(remote) == {"spec": {"suspend": None}}
    released = apply_merge_patch(remote, custom.release_patch(remote))
    assert "suspend" not in released["spec"] and not custom.is_held(released)
    assert custom.release_patch(released) is None
    assert custom.hold_value is True


def test_remote_copy_patch_failing_names_the_field() -> None:
    custom = adapter({"name": WIDGET, "creationPatches": ['{"spec": {"x": object.spec.missing}}']})
    with pytest.raises(CelEvaluationError) as err:
        custom.remote_copy(widget(), origin="o", workload_name="wl")
    assert str(err.value) == (
        f"externalFrameworks[{WIDGET}].creationPatches[0]: no such key 'missing' in object.spec.missing"
    )


def test_tekton_hold_on_spec_status() -> None:
    tekton = adapter({"name": TEKTON, "hold": {"path": "$.spec.status", "value": "PipelineRunPending"}})
    run = {"metadata": {"name": "p"}, "spec": {"managedBy": MultiKueue.MANAGED_BY, "pipelineRef": {"name": "x"}}}
    remote = tekton.remote_copy(run, origin="o", workload_name="wl")
    assert remote["spec"] == {"pipelineRef": {"name": "x"}, "status": "PipelineRunPending"}
    assert tekton.release_patch(remote) == {"spec": {"status": None}}
    assert not tekton.is_held({"spec": {"status": "Cancelled"}})
    assert not adapter({"name": TEKTON}).is_held(remote)  # no hold configured


def conditions(*items: tuple[str, str]) -> list[dict[str, str]]:
    return [{"type": t, "status": s, "reason": "R", "lastTransitionTime": "2024-01-01T00:00:00Z"} for t, s in items]


def test_status_patch_whole_status_with_nested_conditions() -> None:
    tekton = adapter({"name": TEKTON})
    local = {"status": {"conditions": conditions(("Succeeded", "Unknown")), "startTime": "t0", "stale": 1}}
    remote = {"status": {"conditions": conditions(("Succeeded", "True")), "startTime": "t0", "completionTime": "t1"}}
    patch = tekton.status_patch(local, remote)
    assert patch == {
        "status": {"conditions": conditions(("Succeeded", "True")), "completionTime": "t1", "stale": None}
    }
    assert apply_merge_patch(local, patch) == remote
    assert tekton.status_patch(remote, copy.deepcopy(remote)) is None


def test_status_patch_nested_maps_are_diffed() -> None:
    tekton = adapter({"name": TEKTON})
    local = {"status": {"childReferences": {"a": {"x": 1, "y": 2}}}}
    remote = {"status": {"childReferences": {"a": {"x": 1, "y": 3}}}}
    assert tekton.status_patch(local, remote) == {"status": {"childReferences": {"a": {"y": 3}}}}


def test_status_patch_from_nothing_and_to_nothing() -> None:
    tekton = adapter({"name": TEKTON})
    assert tekton.status_patch({}, {"status": {"a": 1}}) == {"status": {"a": 1}}
    assert tekton.status_patch({"status": {"a": 1}}, {}) == {"status": {"a": None}}
    assert tekton.status_patch({}, {}) is None
    assert tekton.status_patch({"status": {}}, {}) is None


def test_status_patch_only_the_synced_paths() -> None:
    partial = adapter({"name": WIDGET, "statusSync": ["$.status.conditions", "$.status.progress.percent"]})
    local = {"status": {"conditions": conditions(("Ready", "False")), "localOnly": "kept", "progress": {"eta": 5}}}
    remote = {
        "status": {"conditions": conditions(("Ready", "True")), "workerOnly": "ignored", "progress": {"percent": 50}}
    }
    assert partial.status_patch(local, remote) == {
        "status": {"conditions": conditions(("Ready", "True")), "progress": {"percent": 50}}
    }
    synced = apply_merge_patch(local, partial.status_patch(local, remote))
    assert synced["status"]["localOnly"] == "kept" and synced["status"]["progress"] == {"eta": 5, "percent": 50}
    assert partial.status_patch(synced, remote) is None
    # Gone on the worker: deleted on the manager.
    assert partial.status_patch(synced, {"status": {}}) == {
        "status": {"conditions": None, "progress": {"percent": None}}
    }


def test_status_patch_with_no_synced_paths() -> None:
    assert adapter({"name": WIDGET, "statusSync": []}).status_patch({}, {"status": {"a": 1}}) is None


def tekton_run(status: str | None) -> dict[str, Any]:
    run: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {}}
    if status is not None:
        run["status"] = {"conditions": conditions(("Succeeded", status))}
    return run


@pytest.mark.parametrize(
    ("status", "expected"),
    [(None, (False, False)), ("Unknown", (False, False)), ("True", (True, True)), ("False", (True, False))],
)
def test_finished_and_succeeded(status: str | None, expected: tuple[bool, bool]) -> None:
    tekton = adapter({"name": TEKTON, "finished": TEKTON_FINISHED, "succeeded": TEKTON_SUCCEEDED})
    assert tekton.finished(tekton_run(status)) == expected
    assert tekton.is_finished(tekton_run(status)) is expected[0]


def test_missing_fields_count_as_not_finished() -> None:
    bare = adapter({"name": TEKTON, "finished": 'object.status.phase == "Done"'})
    assert bare.finished({}) == (False, False)
    assert bare.finished({"status": {"phase": "Done"}}) == (True, True)  # no `succeeded`: a success


def test_other_errors_in_finished_are_raised() -> None:
    bad = adapter({"name": TEKTON, "finished": "object.status.count > 1"})
    with pytest.raises(CelEvaluationError) as err:
        bad.finished({"status": {"count": "two"}})
    assert str(err.value).startswith(f"externalFrameworks[{TEKTON}].finished: no matching overload")


def test_without_finished_the_object_never_finishes_by_itself() -> None:
    upstream = adapter({"name": TEKTON})
    assert upstream.is_finished(tekton_run("True")) is False
    assert upstream.finished(tekton_run("True")) == (False, False)


def test_default_pod_set_counts_one_unit_of_the_kind() -> None:
    tekton = adapter({"name": TEKTON, "workload": {}})
    assert tekton.creates_workload
    [pod_set] = tekton.pod_sets(tekton_run(None))
    assert pod_set == {
        "name": "main",
        "count": 1,
        "template": {
            "spec": {"containers": [{"name": "main", "resources": {"requests": {"pipelineruns.tekton.dev": "1"}}}]}
        },
    }
    assert PodSet.model_validate(pod_set).count == 1


def test_default_pod_set_uses_the_real_plural() -> None:
    custom = adapter({"name": WIDGET, "workload": {}}, plural="widgetz")
    assert custom.pod_sets({})[0]["template"]["spec"]["containers"][0]["resources"]["requests"] == {
        "widgetz.example.com": "1"
    }


def test_pod_sets_from_cel() -> None:
    custom = adapter(
        {
            "name": WIDGET,
            "workload": {
                "podSets": (
                    '[{"name": "driver", "count": 1, "requests": {"cpu": "500m"}},'
                    ' {"name": "workers", "count": object.spec.size, "minCount": 1,'
                    '  "requests": {"cpu": 2, "memory": "4Gi"}}]'
                )
            },
        }
    )
    pod_sets = custom.pod_sets(widget())
    assert [(p["name"], p["count"], p.get("minCount")) for p in pod_sets] == [("driver", 1, None), ("workers", 3, 1)]
    assert pod_sets[1]["template"]["spec"]["containers"] == [
        {"name": "main", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}
    ]
    parsed = [PodSet.model_validate(p) for p in pod_sets]
    assert parsed[1].min_count == 1


def test_pod_sets_shape_is_checked_at_evaluation() -> None:
    custom = adapter({"name": WIDGET, "workload": {"podSets": '[{"name": "main", "count": object.spec.size}]'}})
    with pytest.raises(CelEvaluationError) as err:
        custom.pod_sets(widget())
    assert str(err.value) == f"externalFrameworks[{WIDGET}].workload.podSets: pod set [0] has no 'requests'"
    zero = adapter(
        {"name": WIDGET, "workload": {"podSets": '[{"name": "main", "count": object.spec.size, "requests": {}}]'}}
    )
    with pytest.raises(CelEvaluationError, match="count must be an int >= 1"):
        zero.pod_sets(widget(size=0))


def test_queue_name_and_priority_class() -> None:
    default = adapter({"name": TEKTON})
    obj = {"metadata": {"labels": {Labels.QUEUE_NAME: "q", Labels.PRIORITY_CLASS: "high"}}}
    assert (default.queue_name(obj), default.priority_class(obj)) == ("q", "high")
    assert (default.queue_name({}), default.priority_class({})) == (None, None)
    assert default.queue_name({"metadata": {"labels": {Labels.QUEUE_NAME: ""}}}) is None
    custom = adapter(
        {"name": WIDGET, "workload": {"queueName": "$.spec.queue", "priorityClass": "$.metadata.annotations.prio"}}
    )
    assert custom.queue_name({"spec": {"queue": "q2"}}) == "q2"
    assert custom.priority_class({"metadata": {"annotations": {"prio": "low"}}}) == "low"
    with pytest.raises(CelEvaluationError, match=r"workload.queueName: \$.spec.queue holds int, not a string"):
        custom.queue_name({"spec": {"queue": 5}})
    assert not default.creates_workload
