"""ClusterQueue settings the controller accepts but does not act on are named where the user looks.

Issue 16's acceptance: configured policies the controller does not implement
are reported (a log line and an Event on the ClusterQueue), never silently
ignored. The controller runs as its own process against the integration
manager; its queue status writer names them once per spec, in a Warning Event
in ``default`` (where the API server takes Events about cluster-scoped objects).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from multikueue.core.unimplemented import EVENT_REASON
from multikueue.dev import objects as o
from multikueue.dev.pytest_plugin import Clusters
from multikueue.runtime.events import CLUSTER_SCOPED_EVENTS_NAMESPACE

pytestmark = pytest.mark.integration


def _warnings(clusters: Clusters, names: tuple[str, ...]) -> list[Any]:
    events = client.CoreV1Api(clusters.manager).list_namespaced_event(CLUSTER_SCOPED_EVENTS_NAMESPACE).items
    return [e for e in events if e.reason == EVENT_REASON and e.involved_object.name in names]


def test_a_setting_not_acted_on_is_named_once_per_spec_in_a_warning_event(
    kueue: o.Kueue, integration_clusters: Clusters, namespace: str
) -> None:
    ns = namespace
    kueue.create(o.resource_flavor(f"default-{ns}"))
    plain, odd = f"plain-{ns}", f"odd-{ns}"
    kueue.create(o.cluster_queue(plain, {f"default-{ns}": {"cpu": 1}}, scale_cpu=False))
    body = o.cluster_queue(odd, {f"default-{ns}": {"cpu": 1}}, scale_cpu=False)
    body["spec"]["flavorFungibility"] = {"whenCanPreempt": "MayStopSearch"}
    uid = kueue.create(body)["metadata"]["uid"]

    [event] = o.wait_for(lambda: _warnings(integration_clusters, (plain, odd)), 30, what="a Warning Event on the queue")
    assert event.type == "Warning" and event.involved_object.name == odd
    assert event.involved_object.kind == "ClusterQueue" and event.involved_object.uid == uid
    assert "flavorFungibility.whenCanPreempt=MayStopSearch is not implemented" in event.message

    # Its status is written meanwhile (a sync a second): the spec is the same, so it is not named again.
    o.wait_for(lambda: o.is_true(kueue.get("ClusterQueue", odd), "Active"), 30, what="the queue's status written")
    time.sleep(3)
    assert len(_warnings(integration_clusters, (plain, odd))) == 1

    # Another setting not acted on: named again, with both.
    kueue.patch("ClusterQueue", odd, {"spec": {"admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"}}})

    def both() -> list[Any] | None:
        found = _warnings(integration_clusters, (plain, odd))
        return found if len(found) >= 2 else None

    [second] = [e for e in o.wait_for(both, 30, what="a second Event") if e.metadata.name != event.metadata.name]
    assert "admissionScope.admissionMode=UsageBasedAdmissionFairSharing" in second.message and "whenCanPreempt" in second.message
