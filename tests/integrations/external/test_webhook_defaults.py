"""The external kinds' defaulting webhook, as pure functions: the patch, the webhook entry, the review."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from multikueue.api.constants import Labels, MultiKueue
from multikueue.api.resources import ResourceRef
from multikueue.integrations.external.entries import CompiledFramework, load_frameworks
from multikueue.integrations.external.webhook import (
    FAILURE_POLICY,
    ExternalDefaults,
    NotAMapError,
    defaulting_patch,
    webhook_entry,
)
from multikueue.operator.webhook import ClientConfig, build_configurations, namespace_selector
from multikueue.dev.objects import apply_json_patch

pytestmark = pytest.mark.unit

PIPELINERUNS = ResourceRef("tekton.dev", "v1", "pipelineruns", True)
WIDGETS = ResourceRef("example.com", "v1alpha1", "widgets", True)


def framework(**fields: Any) -> CompiledFramework:
    entry = {"name": "PipelineRun.v1.tekton.dev", "webhook": None, **fields}
    loaded = load_frameworks([entry])
    assert loaded.ok, [str(p) for p in loaded.problems]
    return loaded.frameworks[entry["name"]]


def problems(**fields: Any) -> list[str]:
    return [str(p) for p in load_frameworks([{"name": "PipelineRun.v1.tekton.dev", **fields}]).problems]


def pipeline_run(*, queue: str | None = "pipelines", managed_by: str | None = None, labels: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"generateName": "build-", "namespace": "team-a"}
    if labels:
        meta["labels"] = {"app": "build"}
        if queue is not None:
            meta["labels"][Labels.QUEUE_NAME] = queue
    spec: dict[str, Any] = {"pipelineRef": {"name": "build"}}
    if managed_by is not None:
        spec["managedBy"] = managed_by
    return {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "metadata": meta, "spec": spec}


# --- the patch ---------------------------------------------------------------------------------


def test_a_queued_object_without_managed_by_is_handed_to_multikueue() -> None:
    assert defaulting_patch(framework(), pipeline_run()) == [
        {"op": "add", "path": "/spec/managedBy", "value": MultiKueue.MANAGED_BY}
    ]


def test_another_controllers_object_is_left_alone_even_with_a_default_queue() -> None:
    fw = framework(webhook={"defaultQueueName": "pipelines"})
    assert defaulting_patch(fw, pipeline_run(queue=None, managed_by="example.com/other")) == []


def test_an_empty_managed_by_counts_as_unset() -> None:
    assert defaulting_patch(framework(), pipeline_run(managed_by="")) == [
        {"op": "add", "path": "/spec/managedBy", "value": MultiKueue.MANAGED_BY}
    ]


def test_an_object_in_no_queue_is_left_alone_without_a_default() -> None:
    assert defaulting_patch(framework(), pipeline_run(queue=None)) == []
    assert defaulting_patch(framework(), pipeline_run(queue="")) == []


def test_the_default_queue_is_written_where_labels_are_missing_and_the_patch_is_idempotent() -> None:
    fw = framework(webhook={"defaultQueueName": "pipelines"})
    obj = pipeline_run(queue=None, labels=False)
    operations = defaulting_patch(fw, obj)
    assert operations == [
        {"op": "add", "path": "/metadata/labels", "value": {Labels.QUEUE_NAME: "pipelines"}},
        {"op": "add", "path": "/spec/managedBy", "value": MultiKueue.MANAGED_BY},
    ]
    patched = apply_json_patch(obj, operations)
    assert patched["metadata"]["labels"] == {Labels.QUEUE_NAME: "pipelines"}
    assert defaulting_patch(fw, patched) == []


def test_the_default_queue_goes_into_existing_labels_with_the_key_escaped() -> None:
    fw = framework(webhook={"defaultQueueName": "pipelines"})
    obj = pipeline_run(queue=None, managed_by=MultiKueue.MANAGED_BY)
    operations = defaulting_patch(fw, obj)
    assert operations == [{"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "pipelines"}]
    assert apply_json_patch(obj, operations)["metadata"]["labels"] == {"app": "build", Labels.QUEUE_NAME: "pipelines"}


def test_a_users_queue_is_kept() -> None:
    fw = framework(webhook={"defaultQueueName": "pipelines"})
    assert defaulting_patch(fw, pipeline_run(queue="mine")) == [
        {"op": "add", "path": "/spec/managedBy", "value": MultiKueue.MANAGED_BY}
    ]


def test_paths_of_the_entry_are_used_and_missing_parents_are_added_whole() -> None:
    fw = framework(
        managedBy="$.spec.control.managedBy",
        workload={"queueName": "$.metadata.annotations['example.com/queue']"},
        webhook={"defaultQueueName": "q"},
    )
    obj = {"metadata": {"name": "w"}, "spec": {"size": 1}}
    operations = defaulting_patch(fw, obj)
    assert operations == [
        {"op": "add", "path": "/metadata/annotations", "value": {"example.com/queue": "q"}},
        {"op": "add", "path": "/spec/control", "value": {"managedBy": MultiKueue.MANAGED_BY}},
    ]
    assert defaulting_patch(fw, apply_json_patch(obj, operations)) == []


def test_a_parent_that_is_not_a_map_is_reported() -> None:
    with pytest.raises(NotAMapError, match="/spec is list"):
        defaulting_patch(framework(), {"metadata": {"labels": {Labels.QUEUE_NAME: "q"}}, "spec": []})


def test_an_entry_without_webhook_never_patches() -> None:
    fw = load_frameworks([{"name": "PipelineRun.v1.tekton.dev"}]).frameworks["PipelineRun.v1.tekton.dev"]
    assert fw.webhook is None
    assert defaulting_patch(fw, pipeline_run()) == []


# --- the entry's fields ------------------------------------------------------------------------


def test_bad_webhook_fields_are_reported_with_the_entry_and_field() -> None:
    assert problems(webhook={"defaultQueueName": "Team_Queue"}) == [
        "externalFrameworks[PipelineRun.v1.tekton.dev].webhook.defaultQueueName: 'Team_Queue' is not a LocalQueue "
        "name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 63 characters"
    ]
    assert problems(webhook={"defaultQueue": "q"}) == [
        "externalFrameworks[PipelineRun.v1.tekton.dev].webhook.defaultQueue: unknown field "
        "(known: defaultQueueName, namespaceSelector); did you mean 'defaultQueueName'?"
    ]
    assert problems(webhook={"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Has"}]}}) == [
        "externalFrameworks[PipelineRun.v1.tekton.dev].webhook.namespaceSelector: matchExpressions[0]: "
        "operator 'Has' must be one of In, NotIn, Exists, DoesNotExist"
    ]
    assert problems(webhook="yes") == [
        "externalFrameworks[PipelineRun.v1.tekton.dev].webhook: must be a map, got a string"
    ]
    [indexed] = problems(workload={"queueName": "$.spec.params[0].value"}, webhook={"defaultQueueName": "q"})
    assert "webhook.defaultQueueName: the queue name is read at" in indexed and "list index" in indexed


def test_webhook_present_but_empty_turns_it_on() -> None:
    fw = framework()
    assert fw.webhook is not None and fw.webhook.default_queue_name is None
    assert "webhook" in fw.extended_fields


# --- the configuration -------------------------------------------------------------------------


def test_webhook_entry_without_default_queue_only_sees_queued_objects() -> None:
    entry = webhook_entry(framework(), PIPELINERUNS)
    assert entry == {
        "id": "external.pipelineruns.v1.tekton.dev",
        "rules": [
            {
                "apiGroups": ["tekton.dev"],
                "apiVersions": ["v1"],
                "resources": ["pipelineruns"],
                "operations": ["CREATE"],
                "scope": "Namespaced",
            }
        ],
        "failurePolicy": FAILURE_POLICY,
        "sideEffects": "None",
        "objectSelector": {"matchExpressions": [{"key": Labels.QUEUE_NAME, "operator": "Exists"}]},
    }


def test_webhook_entry_with_default_queue_sees_every_object_of_its_namespaces() -> None:
    selector = {"matchLabels": {"team": "a"}}
    entry = webhook_entry(framework(webhook={"defaultQueueName": "q", "namespaceSelector": selector}), PIPELINERUNS)
    assert "objectSelector" not in entry
    assert entry["namespaceSelector"] == selector


def test_the_entrys_namespace_selector_narrows_the_managed_one() -> None:
    managed = {"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "env", "operator": "Exists"}]}
    extra = {"matchLabels": {"team": "b"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}]}
    assert namespace_selector("kueue-system", managed, extra) == {
        "matchLabels": {"team": "a"},
        "matchExpressions": [
            {"key": "env", "operator": "Exists"},
            {"key": "team", "operator": "In", "values": ["b"]},
            {"key": "tier", "operator": "In", "values": ["x"]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]},
        ],
    }
    # Without an entry selector the Job webhooks' selector is unchanged.
    assert namespace_selector("kueue-system", managed) == namespace_selector("kueue-system", managed, None)


def test_build_configurations_applies_the_entry_selector_to_its_webhook_only() -> None:
    fw = framework(webhook={"namespaceSelector": {"matchLabels": {"team": "a"}}})
    other = load_frameworks([{"name": "Widget.v1alpha1.example.com", "webhook": {}}]).frameworks["Widget.v1alpha1.example.com"]
    defaults = ExternalDefaults({fw.name: (fw, PIPELINERUNS), other.name: (other, WIDGETS)})
    built = build_configurations(defaults.webhooks(), ClientConfig(url="https://127.0.0.1:9443"), "kueue-system")
    hooks = {hook["name"]: hook for hook in built["mutating"]["webhooks"]}
    pr = hooks["external.pipelineruns.v1.tekton.dev.multikueue.x-k8s.io"]
    widget = hooks["external.widgets.v1alpha1.example.com.multikueue.x-k8s.io"]
    assert {"key": "team", "operator": "In", "values": ["a"]} in pr["namespaceSelector"]["matchExpressions"]
    assert widget["namespaceSelector"] == namespace_selector("kueue-system")
    assert pr["clientConfig"] == {"url": "https://127.0.0.1:9443/external.pipelineruns.v1.tekton.dev"}
    assert built["validating"]["webhooks"] == []


# --- following reloads and answering reviews ---------------------------------------------------


def test_external_defaults_follow_the_active_entries_and_tell_listeners() -> None:
    asyncio.run(_follow_the_active_entries())


async def _follow_the_active_entries() -> None:
    calls: list[str] = []

    async def listener() -> None:
        calls.append("changed")

    fw = framework()
    plain = load_frameworks([{"name": "Widget.v1alpha1.example.com"}]).frameworks["Widget.v1alpha1.example.com"]
    defaults = ExternalDefaults()
    defaults.on_change(listener)
    assert await defaults.apply({plain.name: (plain, WIDGETS)}) is False  # no entry with webhook: nothing to serve
    assert defaults.webhooks() == {"mutating": ()}
    assert await defaults.apply({fw.name: (fw, PIPELINERUNS), plain.name: (plain, WIDGETS)}) is True
    assert await defaults.apply({fw.name: (fw, PIPELINERUNS)}) is False
    assert [h["id"] for h in defaults.webhooks()["mutating"]] == ["external.pipelineruns.v1.tekton.dev"]
    assert await defaults.apply({}) is True
    assert calls == ["changed", "changed"]


def review(uid: str, obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "operation": operation, "namespace": "team-a", "object": obj}}  # fmt: skip


def test_review_answers_with_a_json_patch() -> None:
    fw = framework()
    defaults = ExternalDefaults({fw.name: (fw, PIPELINERUNS)})
    answer = defaults.review("external.pipelineruns.v1.tekton.dev", review("u1", pipeline_run()))
    response = answer["response"]
    assert answer["kind"] == "AdmissionReview" and response["uid"] == "u1" and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "add", "path": "/spec/managedBy", "value": MultiKueue.MANAGED_BY}
    ]


def test_review_allows_unchanged_what_it_cannot_or_need_not_patch() -> None:
    fw = framework()
    defaults = ExternalDefaults({fw.name: (fw, PIPELINERUNS)})
    hook = "external.pipelineruns.v1.tekton.dev"
    for answer in (
        defaults.review(hook, review("u2", pipeline_run(managed_by="example.com/other"))),
        defaults.review("external.gone.v1.example.com", review("u3", pipeline_run())),  # entry removed meanwhile
        defaults.review(hook, review("u4", pipeline_run(), operation="UPDATE")),
    ):
        assert answer["response"]["allowed"] is True and "patch" not in answer["response"]
    odd = defaults.review(hook, review("u5", {"metadata": {"labels": {Labels.QUEUE_NAME: "q"}}, "spec": ["x"]}))
    assert odd["response"]["allowed"] is True and "patch" not in odd["response"]
    assert "managedBy not defaulted: /spec is list, not a map" in odd["response"]["warnings"][0]
    assert defaults.handles(hook) and not defaults.handles("job-defaults") and not defaults.handles(None)
