"""The external kinds' defaulting webhook on a real apiserver, served by a manager controller.

A manager whose Configuration lists the Widget (``WIDGET_ENTRY`` plus
``webhook: {defaultQueueName: user-queue}``) and opts one namespace in with
``managedJobsNamespaceSelector`` (in place of the session controller, on its
webhook port) registers the Widget's mutating webhook: a Widget created
without managedBy in the opted-in namespace gets it (at the entry's path,
``spec.control.managedBy``) and the default queue, and the manager builds its
Workload; one naming another controller keeps its value; one in a namespace
that has not opted in is stored as written. A ConfigMap change adding a kind
registers that kind's webhook, and a bad ``webhook`` field is reported on the
ConfigMap like any entry problem.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from multikueue.api.constants import Labels, MultiKueue
from multikueue.dev import objects as o
from multikueue.dev import wiring
from multikueue.dev.controllers import ControllerProcess, in_place_of
from multikueue.dev.pytest_plugin import Clusters
from multikueue.dev.scenarios import WIDGET, WIDGET_CRD, WIDGET_ENTRY, widget
from multikueue.operator.webhook import CONFIGURATION_NAME

pytestmark = pytest.mark.integration

OPT_IN = "multikueue.test/external-webhook"
CONFIG_KEY = "controller_manager_config.yaml"
GADGET = ("example.com", "v1", "gadgets")
WIDGET_HOOK = f"external.widgets.v1alpha1.example.com.{CONFIGURATION_NAME}"
GADGET_HOOK = f"external.gadgets.v1.example.com.{CONFIGURATION_NAME}"


def _document(ns: str, entries: list[dict[str, Any]]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "managedJobsNamespaceSelector": {"matchLabels": {OPT_IN: ns}},
            "multiKueue": {"externalFrameworks": entries},
        }
    )


def _mutating_hooks(api: client.ApiClient) -> list[str]:
    config = client.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(CONFIGURATION_NAME)
    return [hook.name for hook in config.webhooks or []]


def _unmanaged_widget(ns: str, name: str, *, queue: bool = True, managed_by: str | None = None) -> dict[str, Any]:
    body = widget(ns, name)
    del body["spec"]["control"]["managedBy"]
    if managed_by is not None:
        body["spec"]["control"]["managedBy"] = managed_by
    if not queue:
        del body["metadata"]["labels"][Labels.QUEUE_NAME]
    return body


def _create(api: client.ApiClient, gvr: tuple[str, str, str], body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    group, version, plural = gvr
    return client.CustomObjectsApi(api).create_namespaced_custom_object(  # type: ignore[no-any-return]
        group, version, body["metadata"]["namespace"], plural, body, **({"dry_run": "All"} if dry_run else {})
    )


def _warnings(api: client.ApiClient, config: str) -> list[str]:
    events = client.CoreV1Api(api).list_namespaced_event(
        "kueue-system", field_selector=f"involvedObject.name={config},involvedObject.kind=ConfigMap"
    )
    return [e.message for e in events.items if e.reason == "InvalidExternalFramework"]


def test_listed_kinds_get_managed_by_and_a_default_queue_in_opted_in_namespaces(
    integration_clusters: Clusters, integration_controller: ControllerProcess, namespace: str, tmp_path: Path
) -> None:
    api = integration_clusters.manager
    core, k = client.CoreV1Api(api), o.Kueue(api)
    ns, other = namespace, f"{namespace}-out"
    config = f"ext-webhook-{ns}"
    gadget_crd = o.open_crd(GADGET[0], "Gadget", GADGET[2], GADGET[1])
    wiring.install_crds(api, [copy.deepcopy(WIDGET_CRD), gadget_crd])
    entry = {**WIDGET_ENTRY, "webhook": {"defaultQueueName": "user-queue"}}
    core.create_namespaced_config_map(
        "kueue-system",
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name=config), data={CONFIG_KEY: _document(ns, [entry])}),
    )
    core.patch_namespace(ns, {"metadata": {"labels": {OPT_IN: ns}}})
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    k.create(o.resource_flavor(f"default-{ns}"))
    k.create(o.cluster_queue(f"cq-{ns}", {f"default-{ns}": {"cpu": 8}}))
    k.create(o.local_queue(ns, "user-queue", f"cq-{ns}"))
    try:
        with in_place_of(integration_controller, "ext-webhook", tmp_path / "ext-webhook.log", config):
            o.wait_for(lambda: WIDGET_HOOK in _mutating_hooks(api), 30, what="the Widget's webhook registered")
            # The API server applies a changed webhook configuration a moment after it is stored.
            o.wait_for(lambda: "managedBy" in _create(api, WIDGET, _unmanaged_widget(ns, "queued"), dry_run=True)["spec"]["control"],
                       30, what="the API server calling the Widget's webhook")  # fmt: skip

            queued = _create(api, WIDGET, _unmanaged_widget(ns, "queued"))
            assert queued["spec"]["control"] == {"managedBy": MultiKueue.MANAGED_BY, "color": "blue"}
            assert queued["metadata"]["labels"][Labels.QUEUE_NAME] == "user-queue"

            unqueued = _create(api, WIDGET, _unmanaged_widget(ns, "unqueued", queue=False))
            assert unqueued["metadata"]["labels"][Labels.QUEUE_NAME] == "user-queue"  # the default queue
            assert unqueued["spec"]["control"]["managedBy"] == MultiKueue.MANAGED_BY

            theirs = _create(api, WIDGET, _unmanaged_widget(ns, "theirs", queue=False, managed_by="example.com/other"))
            assert theirs["spec"]["control"]["managedBy"] == "example.com/other"
            assert Labels.QUEUE_NAME not in (theirs["metadata"].get("labels") or {})  # not ours: not queued either

            outside = _create(api, WIDGET, _unmanaged_widget(other, "outside", queue=False))
            assert "managedBy" not in outside["spec"]["control"]
            assert Labels.QUEUE_NAME not in (outside["metadata"].get("labels") or {})

            # The defaulted Widgets are MultiKueue's: the manager builds their Workloads in the default queue.
            def queues() -> list[str]:
                return sorted(wl["spec"].get("queueName") for wl in k.list("Workload", ns))

            o.wait_for(lambda: queues() == ["user-queue", "user-queue"], 30, what="Workloads of the two defaulted Widgets")

            # A bad webhook field: reported on the ConfigMap with the entry's name; the Widget keeps working.
            bad_gadget = {"name": "Gadget.v1.example.com", "webhook": {"defaultQueueName": "Not_A_Queue"}}
            core.patch_namespaced_config_map(config, "kueue-system", {"data": {CONFIG_KEY: _document(ns, [entry, bad_gadget])}})
            o.wait_for(
                lambda: any(
                    "externalFrameworks[Gadget.v1.example.com].webhook.defaultQueueName: 'Not_A_Queue' is not a LocalQueue name"
                    in message
                    for message in _warnings(api, config)
                ),
                30,
                what="the bad webhook field reported on the ConfigMap",
            )
            assert GADGET_HOOK not in _mutating_hooks(api) and WIDGET_HOOK in _mutating_hooks(api)

            # The reload adding a kind registers its webhook, without a restart.
            gadget_entry = {"name": "Gadget.v1.example.com", "webhook": {}}
            core.patch_namespaced_config_map(config, "kueue-system", {"data": {CONFIG_KEY: _document(ns, [entry, gadget_entry])}})
            o.wait_for(lambda: GADGET_HOOK in _mutating_hooks(api), 30, what="the Gadget's webhook registered after the reload")
            gadget = {
                "apiVersion": "example.com/v1",
                "kind": "Gadget",
                "metadata": {"name": "g", "namespace": ns, "labels": {Labels.QUEUE_NAME: "user-queue"}},
                "spec": {"size": 1},
            }
            # The API server applies a changed webhook configuration a moment after it is stored.
            o.wait_for(lambda: "managedBy" in _create(api, GADGET, gadget, dry_run=True)["spec"], 30,
                       what="the API server calling the Gadget's webhook")  # fmt: skip
            assert _create(api, GADGET, gadget)["spec"] == {"size": 1, "managedBy": MultiKueue.MANAGED_BY}
            # No default queue: an unqueued Gadget never reaches the webhook (queue-name objectSelector).
            unqueued_gadget = {**gadget, "metadata": {"name": "g2", "namespace": ns}}
            assert _create(api, GADGET, unqueued_gadget)["spec"] == {"size": 1}

            # Removing the entry removes its webhook.
            core.patch_namespaced_config_map(config, "kueue-system", {"data": {CONFIG_KEY: _document(ns, [entry])}})
            o.wait_for(lambda: GADGET_HOOK not in _mutating_hooks(api), 30, what="the Gadget's webhook removed")
    finally:
        # The session controller writes its own webhooks back (no external ones) before other tests run.
        o.wait_for(
            lambda: not any(name.startswith("external.") for name in _mutating_hooks(api)),
            30,
            what="the session controller's webhook configuration",
        )
        core.delete_namespace(other)
        core.delete_namespaced_config_map(config, "kueue-system")
