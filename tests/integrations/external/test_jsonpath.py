"""JSONPaths of external-framework entries: spellings, single locations, get/set/delete."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.integrations.external.jsonpath import JsonPathError, compile_path

pytestmark = pytest.mark.unit

QUEUE_LABEL = ("metadata", "labels", "kueue.x-k8s.io/queue-name")


@pytest.mark.parametrize(
    "text",
    [
        "$.metadata.labels['kueue.x-k8s.io/queue-name']",
        '$.metadata.labels["kueue.x-k8s.io/queue-name"]',
        r".metadata.labels.kueue\.x-k8s\.io/queue-name",
        r"{.metadata.labels.kueue\.x-k8s\.io/queue-name}",
        "metadata.labels['kueue.x-k8s.io/queue-name']",
        "$['metadata']['labels']['kueue.x-k8s.io/queue-name']",
    ],
)
def test_label_keys_with_dots_and_slashes(text: str) -> None:
    path = compile_path(text)
    assert path.steps == QUEUE_LABEL
    assert path.canonical == "$.metadata.labels['kueue.x-k8s.io/queue-name']"
    assert path.get({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}}) == "q"


def test_indices_and_canonical_form() -> None:
    path = compile_path("$.status.conditions[0].type")
    assert path.steps == ("status", "conditions", 0, "type")
    assert path.has_indices
    assert str(path) == "$.status.conditions[0].type"
    assert path.get({"status": {"conditions": [{"type": "Succeeded"}]}}) == "Succeeded"
    assert path.get({"status": {"conditions": []}}, "none") == "none"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("$.spec.items[*].x", "a wildcard"),
        ("$.spec.*", "a wildcard"),
        ("$.spec..managedBy", "'..' (descendants)"),
        ("$.spec.x[0:2]", "a slice"),
        ("$.spec.x[?(@.a == 1)]", "a filter"),
        ("$.spec['a','b']", "several fields"),
        ("$.spec.x[0,1]", "several indices"),
    ],
)
def test_paths_selecting_several_places_are_refused(text: str, words: str) -> None:
    with pytest.raises(JsonPathError) as err:
        compile_path(text)
    assert words in str(err.value)
    assert "single location" in str(err.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("$.spec.a[", "is not a valid JSONPath"),
        ("$.metadata.labels.kueue.x-k8s.io/queue-name", "quote keys with dots or slashes"),
        ("", "non-empty string"),
        ("   ", "non-empty string"),
    ],
)
def test_syntax_errors_are_explained(text: str, words: str) -> None:
    with pytest.raises(JsonPathError) as err:
        compile_path(text)
    assert words in str(err.value)


def test_lookup_tells_null_from_missing() -> None:
    path = compile_path("$.spec.managedBy")
    assert path.lookup({"spec": {"managedBy": None}}) == (True, None)
    assert path.lookup({"spec": {}}) == (False, None)
    assert path.lookup({"spec": "scalar"}) == (False, None)
    assert path.lookup({}) == (False, None)


def test_set_creates_missing_maps() -> None:
    doc: dict[str, Any] = {"spec": {"other": 1}}
    compile_path("$.spec.control.managedBy").set(doc, "x")
    assert doc == {"spec": {"other": 1, "control": {"managedBy": "x"}}}


def test_set_through_a_scalar_is_an_error() -> None:
    with pytest.raises(JsonPathError, match="not a map"):
        compile_path("$.spec.a.b").set({"spec": {"a": 5}}, 1)


def test_set_into_an_existing_list_item() -> None:
    doc = {"spec": {"items": [{"a": 1}]}}
    compile_path("$.spec.items[0].a").set(doc, 2)
    assert doc == {"spec": {"items": [{"a": 2}]}}
    with pytest.raises(JsonPathError, match="no list item 3"):
        compile_path("$.spec.items[3].a").set(doc, 2)


def test_delete_keeps_the_parent() -> None:
    doc = {"spec": {"control": {"managedBy": "x"}}}
    path = compile_path("$.spec.control.managedBy")
    assert path.delete(doc) is True
    assert doc == {"spec": {"control": {}}}
    assert path.delete(doc) is False
    assert compile_path("$.nothing.here").delete(doc) is False


def test_whole_document_cannot_be_set_or_deleted() -> None:
    root = compile_path("$")
    assert root.steps == ()
    assert root.get({"a": 1}) == {"a": 1}
    with pytest.raises(JsonPathError):
        root.set({}, 1)
    with pytest.raises(JsonPathError):
        root.delete({})


def test_nest_builds_a_merge_patch() -> None:
    status = compile_path("$.status")
    path = compile_path("$.status.conditions")
    assert path.nest(None) == {"status": {"conditions": None}}
    assert path.nest([1], below=status) == {"conditions": [1]}
    assert path.is_within(status) and not status.is_within(path)
    with pytest.raises(JsonPathError, match="list index"):
        compile_path("$.status.c[0]").nest(1)
