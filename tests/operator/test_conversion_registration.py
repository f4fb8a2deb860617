"""Pointing the CRDs' conversion at the webhook server, and routing ``/convert`` (no cluster)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from multikueue.api import crdgen
from multikueue.operator import webhook

pytestmark = pytest.mark.unit

URL = webhook.ClientConfig(url="https://127.0.0.1:9443", ca_pem=b"CA")
SERVICE = webhook.ClientConfig(service=("kueue-system", "multikueue-webhook-service", 443), ca_pem=b"CA")


def test_every_converted_kind_is_registered() -> None:
    assert webhook.conversion_crd_names() == [
        "admissionchecks.kueue.x-k8s.io",
        "clusterqueues.kueue.x-k8s.io",
        "cohorts.kueue.x-k8s.io",
        "localqueues.kueue.x-k8s.io",
        "multikueueclusters.kueue.x-k8s.io",
        "multikueueconfigs.kueue.x-k8s.io",
        "workloads.kueue.x-k8s.io",
    ]


def test_url_mode_replaces_the_generated_service_reference() -> None:
    generated = crdgen.conversion_stanza()
    patch = webhook.conversion_patch(generated, webhook.conversion_spec(URL))
    assert patch is not None
    config = patch["spec"]["conversion"]["webhook"]["clientConfig"]
    assert config == {"url": "https://127.0.0.1:9443/convert", "caBundle": "Q0E=", "service": None}


def test_service_mode_only_adds_the_ca_to_the_generated_stanza() -> None:
    generated = crdgen.conversion_stanza()
    patch = webhook.conversion_patch(generated, webhook.conversion_spec(SERVICE))
    assert patch is not None
    config = patch["spec"]["conversion"]["webhook"]["clientConfig"]
    assert config["service"] == {**generated["webhook"]["clientConfig"]["service"]}
    assert config["caBundle"] == "Q0E=" and "url" not in config


def test_nothing_to_write_when_it_already_says_so() -> None:
    desired = webhook.conversion_spec(SERVICE)
    stored = copy.deepcopy(desired)
    del stored["webhook"]["clientConfig"]["service"]["port"]  # the API server's default, left out
    assert webhook.conversion_patch(stored, desired) is None


def test_an_injected_ca_is_kept_when_the_server_has_none() -> None:
    """cert-manager's CA injector fills caBundle; a directory certificate without ca.crt must not erase it."""
    no_ca = webhook.ClientConfig(service=("kueue-system", "multikueue-webhook-service", 443))
    stored = crdgen.conversion_stanza(ca_bundle="SU5KRUNURUQ=")
    assert webhook.conversion_patch(stored, webhook.conversion_spec(no_ca)) is None


def test_strategy_none_is_turned_into_the_webhook() -> None:
    patch = webhook.conversion_patch({"strategy": "None"}, webhook.conversion_spec(URL))
    assert patch is not None and patch["spec"]["conversion"]["strategy"] == "Webhook"


class FakeKube:
    def __init__(self, crds: dict[str, dict[str, Any]]) -> None:
        self.crds = crds
        self.patches: list[tuple[str, Any]] = []

    async def get_or_none(self, ref: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.crds.get(name)

    async def patch(self, ref: Any, namespace: str | None, name: str, body: Any) -> dict[str, Any]:
        self.patches.append((name, body))
        return {}


def test_apply_patches_installed_crds_and_reports_missing_ones() -> None:
    kube = FakeKube({"clusterqueues.kueue.x-k8s.io": {"spec": {"conversion": crdgen.conversion_stanza()}}})
    patched, missing = asyncio.run(
        webhook.apply_conversion(kube, URL, ["clusterqueues.kueue.x-k8s.io", "workloads.kueue.x-k8s.io"])  # type: ignore[arg-type]
    )
    assert patched == ["clusterqueues.kueue.x-k8s.io"] and missing == ["workloads.kueue.x-k8s.io"]
    assert kube.patches[0][1]["spec"]["conversion"]["webhook"]["clientConfig"]["url"].endswith("/convert")


def test_serve_conversion_answers_failures_without_raising() -> None:
    answer = asyncio.run(webhook.serve_conversion({"apiVersion": "apiextensions.k8s.io/v1", "request": {"uid": "u"}}))
    assert answer["response"]["result"]["status"] == "Success"  # no objects: nothing to convert
    answer = asyncio.run(webhook.serve_conversion({"nonsense": True}))
    assert answer["response"]["result"]["status"] == "Failure"


def test_big_reviews_convert_off_the_loop() -> None:
    objects = [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": f"q{i}"}, "spec": {"cohort": "c"}}
        for i in range(50)
    ]
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "u", "desiredAPIVersion": "kueue.x-k8s.io/v1beta2", "objects": objects},
    }
    answer = asyncio.run(webhook.serve_conversion(body))
    assert [o["spec"] for o in answer["response"]["convertedObjects"]] == [{"cohortName": "c"}] * 50


def test_repairs_leave_another_replicas_registration_alone() -> None:
    other = crdgen.conversion_stanza(url="https://127.0.0.1:1111", ca_bundle="T1RIRVI=")
    kube = FakeKube(
        {
            "clusterqueues.kueue.x-k8s.io": {"spec": {"conversion": other}},
            "workloads.kueue.x-k8s.io": {"spec": {"conversion": crdgen.conversion_stanza()}},  # re-applied: no CA
        }
    )
    names = ["clusterqueues.kueue.x-k8s.io", "workloads.kueue.x-k8s.io"]
    patched, _ = asyncio.run(webhook.apply_conversion(kube, URL, names, repair_only=True))  # type: ignore[arg-type]
    assert patched == ["workloads.kueue.x-k8s.io"]
    patched, _ = asyncio.run(webhook.apply_conversion(kube, URL, names))  # type: ignore[arg-type]
    assert patched == names  # at start (and on a new CA) this replica takes over


def test_the_controller_registers_conversion_whenever_it_serves_webhooks() -> None:
    from multikueue.operator.app import ControllerOptions, webhook_options

    local = webhook_options(ControllerOptions(webhook_port=9443))
    cluster = webhook_options(ControllerOptions(webhook_port=9443, webhook_service="kueue-system/svc"))
    assert local is not None and local.conversion and cluster is not None and cluster.conversion
    assert webhook.WebhookOptions(port=1).conversion is False  # servers of their own (tests) leave the CRDs alone
