"""The informer's store: keys, indexes, and the events a relist hands to consumers."""

from __future__ import annotations

from typing import Any

import pytest
import structlog.testing
from kubernetes.client.rest import ApiException

from multikueue.runtime.informer import ADDED, DELETED, MODIFIED, Store, brief, object_key

pytestmark = pytest.mark.unit

PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"


def obj(name: str, namespace: str = "ns", version: str = "1", prebuilt: str | None = None) -> dict[str, Any]:
    labels = {PREBUILT: prebuilt} if prebuilt else {}
    return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": version, "labels": labels}}


def by_prebuilt(o: dict[str, Any]) -> list[str]:
    value = (o["metadata"].get("labels") or {}).get(PREBUILT)
    return [f"{o['metadata']['namespace']}/{value}"] if value else []


def test_object_key_of_namespaced_and_cluster_scoped_objects() -> None:
    assert object_key(obj("a", "ns")) == ("ns", "a")
    assert object_key({"metadata": {"name": "c"}}) == ("", "c")
    assert object_key({}) == ("", "")


def test_apply_adds_updates_and_deletes() -> None:
    store = Store()
    store.apply(ADDED, obj("a"))
    store.apply(MODIFIED, obj("a", version="2"))
    store.apply(ADDED, obj("b"))
    assert len(store) == 2
    assert store.get(("ns", "a"))["metadata"]["resourceVersion"] == "2"  # type: ignore[index]
    store.apply(DELETED, obj("a", version="3"))
    assert ("ns", "a") not in store and ("ns", "b") in store
    store.apply(DELETED, obj("never-seen"))  # a delete of an unknown object is harmless
    assert len(store) == 1


def test_index_follows_adds_changes_and_deletes() -> None:
    store = Store({"prebuilt": by_prebuilt})
    store.apply(ADDED, obj("job-a", prebuilt="wl-1"))
    store.apply(ADDED, obj("job-b", prebuilt="wl-1"))
    store.apply(ADDED, obj("job-c"))
    assert store.keys_by_index("prebuilt", "ns/wl-1") == {("ns", "job-a"), ("ns", "job-b")}
    assert [o["metadata"]["name"] for o in store.by_index("prebuilt", "ns/wl-1")] == ["job-a", "job-b"]
    store.apply(MODIFIED, obj("job-a", version="2", prebuilt="wl-2"))  # the label moved
    assert store.keys_by_index("prebuilt", "ns/wl-1") == {("ns", "job-b")}
    assert store.keys_by_index("prebuilt", "ns/wl-2") == {("ns", "job-a")}
    store.apply(DELETED, obj("job-b"))
    assert store.by_index("prebuilt", "ns/wl-1") == []
    assert store.keys_by_index("prebuilt", "ns/missing") == set()
    with pytest.raises(KeyError):
        store.keys_by_index("no-such-index", "x")


def test_a_failing_index_function_leaves_the_object_out_of_that_index_only() -> None:
    def broken(o: dict[str, Any]) -> list[str]:
        raise KeyError("spec")

    store = Store({"broken": broken, "prebuilt": by_prebuilt})
    with structlog.testing.capture_logs() as logs:
        store.apply(ADDED, obj("a", prebuilt="wl"))
        store.apply(DELETED, obj("a"))
        store.apply(ADDED, obj("a", prebuilt="wl"))
    assert store.get(("ns", "a")) is not None
    assert store.keys_by_index("prebuilt", "ns/wl") == {("ns", "a")}
    assert logs and all(e["log_level"] == "error" and e["index"] == "broken" and e["object"] == "ns/a" for e in logs)


def test_first_listing_is_all_added() -> None:
    store = Store()
    events = store.replace([obj("a"), obj("b")])
    assert [(t, o["metadata"]["name"]) for t, o in events] == [(ADDED, "a"), (ADDED, "b")]


def test_relist_deletes_the_vanished_updates_the_rest_and_adds_the_new() -> None:
    store = Store({"prebuilt": by_prebuilt})
    store.replace([obj("gone", prebuilt="wl-gone"), obj("kept", prebuilt="wl-1")])
    events = store.replace([obj("kept", version="5", prebuilt="wl-2"), obj("new")])
    assert [(t, o["metadata"]["name"]) for t, o in events] == [(MODIFIED, "kept"), (ADDED, "new"), (DELETED, "gone")]
    deleted = events[-1][1]
    assert deleted["metadata"]["resourceVersion"] == "1", "the DELETED event carries the last known state"
    assert sorted(store.objects) == [("ns", "kept"), ("ns", "new")]
    assert store.keys_by_index("prebuilt", "ns/wl-gone") == set()
    assert store.keys_by_index("prebuilt", "ns/wl-1") == set()
    assert store.keys_by_index("prebuilt", "ns/wl-2") == {("ns", "kept")}


def test_relist_to_empty_deletes_everything() -> None:
    store = Store()
    store.replace([obj("a"), obj("b", namespace="other")])
    events = store.replace([])
    assert sorted((t, object_key(o)) for t, o in events) == [(DELETED, ("ns", "a")), (DELETED, ("other", "b"))]
    assert len(store) == 0


def test_same_name_in_two_namespaces_are_two_objects() -> None:
    store = Store()
    store.replace([obj("a", namespace="x"), obj("a", namespace="y")])
    assert len(store) == 2
    store.apply(DELETED, obj("a", namespace="x"))
    assert list(store.objects) == [("y", "a")]


def test_brief_names_api_answers_by_status() -> None:
    assert brief(ApiException(status=404, reason="Not Found")) == "404 Not Found"
    assert brief(ConnectionRefusedError("[Errno 111] Connection refused\nmore")) == "[Errno 111] Connection refused"
    assert brief(TimeoutError()) == "TimeoutError"


def test_stored_objects_keep_no_managed_fields() -> None:
    # Kept for each object's whole life, they were about half of its memory; no consumer reads them.
    store = Store()
    listed = obj("a")
    listed["metadata"]["managedFields"] = [{"manager": "kueue", "fieldsV1": {"f:spec": {}}}]
    store.replace([listed])
    watched = obj("b")
    watched["metadata"]["managedFields"] = [{"manager": "kueue"}]
    store.apply(ADDED, watched)
    assert all("managedFields" not in o["metadata"] for o in store.objects.values())
    assert store.get(("ns", "a"))["metadata"]["resourceVersion"] == "1"  # type: ignore[index]


def test_a_store_of_keys_only_keeps_no_object_and_still_hands_over_deletions() -> None:
    """The Workload feed's store: the cache holds each Workload's parse, the store only what a relist needs."""
    store = Store(keep_objects=False)
    store.apply(ADDED, obj("a"))
    store.apply(ADDED, obj("b"))
    store.apply(MODIFIED, obj("a", version="2"))
    assert len(store) == 2 and ("ns", "a") in store
    assert store.get(("ns", "a")) is None, "no object is kept"
    events = store.replace([obj("b", version="3"), obj("c")])
    assert events == [
        (MODIFIED, obj("b", version="3")),
        (ADDED, obj("c")),
        (DELETED, {"metadata": {"namespace": "ns", "name": "a"}}),
    ]
    store.apply(DELETED, obj("b"))
    assert len(store) == 1
    with pytest.raises(ValueError):
        Store({"prebuilt": by_prebuilt}, keep_objects=False)
