"""The object store: lookups, what each mutator reports changed, and ClusterQueue Active state."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.api.clusterqueue import ClusterQueue
from multikueue.api.workload import Workload
from multikueue.core.cache.store import ClusterQueueState, ObjectStore, local_queue_of
from multikueue.core.quota import QuotaNode

pytestmark = pytest.mark.unit

#: The ``build`` fixture (``Builders`` in this folder's conftest).
Build = Any


def put_cq(store: ObjectStore, cluster_queue: ClusterQueue) -> ClusterQueueState:
    return store.put_cluster_queue(cluster_queue, QuotaNode(cluster_queue.name, is_cohort=False))


def test_flavor_changes_report_the_cluster_queues_using_them(build: Build) -> None:
    store = ObjectStore()
    state = put_cq(store, build.cluster_queue("cq"))
    put_cq(store, build.cluster_queue("other", {"other-flavor": {"cpu": 1}}))
    assert (state.active, state.reason) == (False, "FlavorNotFound")
    assert state.message == "Can't admit new workloads: references missing ResourceFlavor(s): default-flavor."

    assert store.put_flavor(build.flavor()) == ["cq"]
    assert (state.active, state.reason, state.message) == (True, "Ready", "Can admit new workloads")
    assert store.put_flavor(build.flavor()) == []  # same spec: nothing to re-evaluate
    assert store.put_flavor(build.flavor(nodeLabels={"zone": "a"})) == ["cq"]
    assert store.flavors["default-flavor"].spec.node_labels == {"zone": "a"}

    assert store.remove_flavor("default-flavor") == ["cq"]
    assert store.remove_flavor("default-flavor") == []
    assert not state.active and "default-flavor" not in store.flavors


def test_active_state_lists_every_problem_and_takes_the_reason_from_the_first(build: Build) -> None:
    store = ObjectStore()
    strategy = {"admissionChecks": [{"name": "missing"}, {"name": "off"}]}
    state = put_cq(store, build.cluster_queue(stopPolicy="Hold", admissionChecksStrategy=strategy))
    assert store.put_admission_check(build.check("off", active=False)) == ["cq"]
    assert state.reason == "Stopped"
    assert state.message == (
        "Can't admit new workloads: is stopped, references missing ResourceFlavor(s): default-flavor, "
        "references missing AdmissionCheck(s): missing, references inactive AdmissionCheck(s): off."
    )


def test_admission_checks_report_users_only_when_their_activity_changes(build: Build) -> None:
    store = ObjectStore()
    store.put_flavor(build.flavor())
    state = put_cq(store, build.cluster_queue(admissionChecksStrategy={"admissionChecks": [{"name": "ac"}]}))
    assert state.reason == "AdmissionCheckNotFound"
    assert store.put_admission_check(build.check("ac", active=True, controller="one")) == ["cq"]
    assert state.active
    assert store.put_admission_check(build.check("ac", active=True, controller="two")) == []
    assert store.admission_check_controller("ac") == "two"  # the controller is kept even when nothing else changed
    assert store.put_admission_check(build.check("ac", active=False)) == ["cq"]
    assert state.reason == "AdmissionCheckInactive"
    assert store.remove_admission_check("ac") == ["cq"]
    assert store.admission_check_controller("ac") is None
    assert state.reason == "AdmissionCheckNotFound"


def test_cluster_queue_lookups_and_reindexing(build: Build) -> None:
    store = ObjectStore()
    first = build.cluster_queue("cq")
    state = put_cq(store, first)
    assert store.cluster_queue_state("cq") is state and state.obj is first
    assert len(state.groups) == 1 and store.cluster_queue_names() == ["cq"]

    relabelled = first.model_copy(update={"metadata": first.metadata.model_copy(update={"labels": {"a": "b"}})})
    assert store.keep_if_same_spec(relabelled)
    assert store.cluster_queue_state("cq").obj is relabelled  # type: ignore[union-attr]
    assert not store.keep_if_same_spec(build.cluster_queue("cq", {"gpu-flavor": {"gpu": 1}}))
    assert not store.keep_if_same_spec(build.cluster_queue("unknown"))

    put_cq(store, build.cluster_queue("cq", {"gpu-flavor": {"gpu": 1}}))
    assert store.put_flavor(build.flavor()) == []  # no longer uses default-flavor
    assert store.put_flavor(build.flavor("gpu-flavor")) == ["cq"]

    assert store.remove_cluster_queue("cq") and not store.remove_cluster_queue("cq")
    assert store.cluster_queue_state("cq") is None and store.cluster_queue_names() == []
    assert store.remove_flavor("gpu-flavor") == []


def test_local_queues_report_the_cluster_queues_they_leave_and_join(build: Build) -> None:
    store = ObjectStore()
    assert store.put_local_queue(build.local_queue("b", cq="cq")) == ("cq",)
    assert store.put_local_queue(build.local_queue("a", cq="cq")) == ("cq",)
    assert store.put_local_queue(build.local_queue("a", cq="cq")) == ()  # same spec
    assert sorted(store.local_queues_in("cq")) == [("default", "a"), ("default", "b")]
    assert store.put_local_queue(build.local_queue("a", cq="other")) == ("cq", "other")
    assert list(store.local_queues_in("cq")) == [("default", "b")]
    assert list(store.local_queues_in("nothing")) == []
    assert store.local_queue_keys() == [("default", "a"), ("default", "b")]
    assert store.local_queue(("default", "a")).spec.cluster_queue == "other"  # type: ignore[union-attr]

    assert store.remove_local_queue(("default", "a")) == ("other",)
    assert store.remove_local_queue(("default", "a")) == ()
    assert store.local_queue(("default", "a")) is None


def test_cohorts_priority_classes_and_namespaces(build: Build) -> None:
    store = ObjectStore()
    cohorts = store.cohorts
    assert store.put_cohort(build.cohort("team", parent="org"))
    assert not store.put_cohort(build.cohort("team", parent="org"))
    assert cohorts["team"].spec.parent_name == "org"  # a live read-only view
    assert store.remove_cohort("team") and not store.remove_cohort("team")
    assert "team" not in cohorts

    classes = store.priority_classes
    assert store.put_priority_class(build.priority_class("high", 10))
    assert not store.put_priority_class(build.priority_class("high", 10))
    assert classes == {"high": 10}
    assert store.remove_priority_class("high") and not store.remove_priority_class("high")

    assert store.namespace_labels("ns") == {}
    assert store.put_namespace("ns", {"team": "a"}) and not store.put_namespace("ns", {"team": "a"})
    assert store.namespace_labels("ns") == {"team": "a"}
    assert store.put_namespace("ns", None) and store.namespace_labels("ns") == {}
    assert store.remove_namespace("ns") and not store.remove_namespace("ns")


def test_an_older_resource_version_never_replaces_a_newer_workload(build: Build) -> None:
    store = ObjectStore()
    assert store.put_workload(build.workload("w", resource_version="20", queue="q")) == ("default", "w")
    assert store.put_workload(build.workload("w", resource_version="7", queue="old")) is None
    assert store.workload(("default", "w")).spec.queue_name == "q"  # type: ignore[union-attr]
    # Not comparable (not numbers): the newest event wins.
    assert store.put_workload(build.workload("w", resource_version="abc", queue="new")) == ("default", "w")
    assert store.workload(("default", "w")).spec.queue_name == "new"  # type: ignore[union-attr]


def test_workload_snapshot_and_removal(build: Build) -> None:
    store = ObjectStore()
    store.put_workload(build.workload("a"))
    store.put_workload(build.workload("b", namespace="other", queue="q"))
    items = store.workloads_items()
    assert store.remove_workload(("default", "a")) and not store.remove_workload(("default", "a"))
    assert [key for key, _ in items] == [("default", "a"), ("other", "b")]  # the snapshot did not change
    assert [key for key, _ in store.workloads_items()] == [("other", "b")]
    assert local_queue_of(items[1][1]) == ("other", "q")


def test_stored_workloads_keep_no_managed_fields(build: Build) -> None:
    # Field managers' records are about half of a Workload's memory and nothing reads them.
    store = ObjectStore()
    body = build.workload("w", resource_version="3").to_k8s()
    body["metadata"]["managedFields"] = [{"manager": "kueue", "operation": "Update", "fieldsV1": {"f:spec": {}}}]
    body["metadata"]["somethingNewer"] = "kept"
    store.put_workload(Workload.from_k8s(body))
    stored = store.workload(("default", "w"))
    assert stored is not None
    assert "managedFields" not in stored.to_k8s()["metadata"]
    assert stored.to_k8s()["metadata"]["somethingNewer"] == "kept"  # other unknown metadata stays
