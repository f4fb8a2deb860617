"""The webhook configurations, the certificate sources and the flags, without a cluster."""

from __future__ import annotations

import asyncio
import base64
import copy
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kubernetes.client.rest import ApiException

from multikueue.api.meta import LabelSelector
from multikueue.api.resources import SECRETS
from multikueue.integrations.batchjob.webhook import WEBHOOKS
from multikueue.operator import webhook, webhook_tls
from multikueue.operator.app import ControllerOptions, StartupError, webhook_options
from multikueue.runtime import certificates as pki

pytestmark = pytest.mark.unit

SERVICE_NAMES = ["svc.kueue-system.svc", "svc.kueue-system.svc.cluster.local"]


# -- selectors and client configs --------------------------------------------------------------


def test_without_a_managed_selector_only_the_exclusion() -> None:
    assert webhook.namespace_selector("kueue-system") == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}]
    }


def test_a_managed_selector_is_combined_with_the_exclusion() -> None:
    managed = LabelSelector.model_validate(
        {"matchLabels": {"kueue.openshift.io/managed": "true"}, "matchExpressions": [{"key": "team", "operator": "Exists"}]}
    )
    selector = webhook.namespace_selector("ctl", managed)
    assert selector == {
        "matchLabels": {"kueue.openshift.io/managed": "true"},
        "matchExpressions": [
            {"key": "team", "operator": "Exists"},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "ctl"]},
        ],
    }
    # The same from the document's dict form, which is left untouched.
    raw = {"matchLabels": {"opt": "in"}}
    assert webhook.namespace_selector("ctl", raw)["matchLabels"] == {"opt": "in"} and raw == {"matchLabels": {"opt": "in"}}


def test_service_references_replace_the_url() -> None:
    client = webhook.ClientConfig(service=("kueue-system", "svc", 443), ca_pem=b"CA")
    configurations = webhook.build_configurations(WEBHOOKS, client, "kueue-system", managed_namespaces={"matchLabels": {"a": "b"}})
    [mutating] = configurations["mutating"]["webhooks"]
    [validating] = configurations["validating"]["webhooks"]
    assert mutating["clientConfig"] == {
        "service": {"namespace": "kueue-system", "name": "svc", "port": 443, "path": "/job-defaults"},
        "caBundle": base64.b64encode(b"CA").decode(),
    }
    assert validating["clientConfig"]["service"]["path"] == "/job-validation"
    for hook in (mutating, validating):
        assert hook["failurePolicy"] == "Fail"
        assert hook["namespaceSelector"]["matchLabels"] == {"a": "b"}
        assert "url" not in hook["clientConfig"]


def test_url_mode_and_a_ca_left_to_the_injector() -> None:
    client = webhook.ClientConfig(url="https://127.0.0.1:9443", ca_pem=None)
    configurations = webhook.build_configurations(WEBHOOKS, client, "ns", name="test-config")
    [mutating] = configurations["mutating"]["webhooks"]
    assert mutating["clientConfig"] == {"url": "https://127.0.0.1:9443/job-defaults"}
    assert configurations["validating"]["metadata"]["name"] == "test-config"


def _stored(body: dict[str, Any]) -> dict[str, Any]:
    """What the API server stores: its defaults filled in."""
    stored = copy.deepcopy(body)
    for hook in stored["webhooks"]:
        hook.setdefault("objectSelector", {})
        if body["kind"] == "MutatingWebhookConfiguration":
            hook.setdefault("reinvocationPolicy", "Never")
        for rule in hook["rules"]:
            rule.setdefault("scope", "*")
    stored["metadata"]["resourceVersion"] = "1"
    return stored


def test_same_webhooks_ignores_server_defaults_but_not_removals() -> None:
    client = webhook.ClientConfig(url="https://127.0.0.1:9443", ca_pem=b"CA")
    plain = webhook.build_configurations(WEBHOOKS, client, "ns")
    opted = webhook.build_configurations(WEBHOOKS, client, "ns", managed_namespaces={"matchLabels": {"a": "b"}})
    for reason in ("mutating", "validating"):
        assert webhook.same_webhooks(_stored(plain[reason])["webhooks"], plain[reason]["webhooks"])
        assert not webhook.same_webhooks(_stored(opted[reason])["webhooks"], plain[reason]["webhooks"])
    moved = webhook.build_configurations(WEBHOOKS, webhook.ClientConfig(service=("ns", "svc", 443), ca_pem=b"CA"), "ns")
    assert not webhook.same_webhooks(_stored(plain["mutating"])["webhooks"], moved["mutating"]["webhooks"])


class FakeKube:
    """Objects by (plural, namespace, name), with resourceVersions and 409s like the API server."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []
        self.before_write: list[Any] = []
        self._rv = 0

    def _key(self, ref: Any, namespace: str | None, name: str) -> tuple[str, str | None, str]:
        return (ref.plural, namespace, name)

    def _bump(self, body: dict[str, Any]) -> dict[str, Any]:
        self._rv += 1
        body["metadata"]["resourceVersion"] = str(self._rv)
        return copy.deepcopy(body)

    async def get_or_none(self, ref: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        found = self.objects.get(self._key(ref, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def get(self, ref: Any, namespace: str | None, name: str) -> dict[str, Any]:
        found = await self.get_or_none(ref, namespace, name)
        if found is None:
            raise ApiException(status=404)
        return found

    async def create(self, ref: Any, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        while self.before_write:
            await self.before_write.pop(0)()
        key = self._key(ref, namespace, body["metadata"]["name"])
        if key in self.objects:
            raise ApiException(status=409)
        self.writes.append(("create", ref.plural))
        self.objects[key] = _stored(body) if "webhooks" in body else copy.deepcopy(body)
        return self._bump(self.objects[key])

    async def patch(self, ref: Any, namespace: str | None, name: str, patch: dict[str, Any], **_: Any) -> dict[str, Any]:
        while self.before_write:
            await self.before_write.pop(0)()
        key = self._key(ref, namespace, name)
        current = self.objects[key]
        rv = (patch.get("metadata") or {}).get("resourceVersion")
        if rv is not None and rv != current["metadata"]["resourceVersion"]:
            raise ApiException(status=409)
        self.writes.append(("patch", ref.plural))
        for field, value in patch.items():
            if field == "metadata":
                continue
            if field == "webhooks":
                current[field] = _stored({"kind": current["kind"], "metadata": {}, "webhooks": value})["webhooks"]
            elif isinstance(value, dict):
                current.setdefault(field, {}).update(value)
            else:
                current[field] = value
        return self._bump(current)


def test_configurations_are_written_once_then_left_alone() -> None:
    kube = FakeKube()
    client = webhook.ClientConfig(service=("ns", "svc", 443), ca_pem=b"CA")
    configurations = webhook.build_configurations(WEBHOOKS, client, "ns")
    assert asyncio.run(webhook.apply_configurations(kube, configurations)) == ["mutating", "validating"]
    assert asyncio.run(webhook.apply_configurations(kube, configurations)) == []
    rotated = webhook.build_configurations(WEBHOOKS, webhook.ClientConfig(service=("ns", "svc", 443), ca_pem=b"CA2"), "ns")
    assert asyncio.run(webhook.apply_configurations(kube, rotated)) == ["mutating", "validating"]
    assert kube.writes == [("create", "mutatingwebhookconfigurations"), ("create", "validatingwebhookconfigurations")] + [
        ("patch", "mutatingwebhookconfigurations"),
        ("patch", "validatingwebhookconfigurations"),
    ]


def test_without_a_ca_the_injected_bundle_is_kept() -> None:
    kube = FakeKube()
    with_ca = webhook.build_configurations(WEBHOOKS, webhook.ClientConfig(service=("ns", "svc", 443), ca_pem=b"INJECTED"), "ns")
    asyncio.run(webhook.apply_configurations(kube, with_ca))
    without = webhook.build_configurations(WEBHOOKS, webhook.ClientConfig(service=("ns", "svc", 443)), "ns")
    assert asyncio.run(webhook.apply_configurations(kube, without)) == []
    opted = webhook.build_configurations(
        WEBHOOKS, webhook.ClientConfig(service=("ns", "svc", 443)), "ns", managed_namespaces={"matchLabels": {"a": "b"}}
    )
    assert asyncio.run(webhook.apply_configurations(kube, opted)) == ["mutating", "validating"]
    for (plural, _, _), body in kube.objects.items():
        [hook] = body["webhooks"]
        assert hook["clientConfig"]["caBundle"] == base64.b64encode(b"INJECTED").decode(), plural


# -- the Secret --------------------------------------------------------------------------------


def test_a_missing_secret_is_created_and_then_served_as_is() -> None:
    kube = FakeKube()
    source = webhook_tls.SecretCertificate(kube, "kueue-system", "cert", SERVICE_NAMES)  # type: ignore[arg-type]
    first = asyncio.run(source.load())
    secret = kube.objects[("secrets", "kueue-system", "cert")]
    assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    assert asyncio.run(source.load()) == first
    assert kube.writes == [("create", "secrets")]


def test_a_replica_that_loses_the_create_race_serves_the_winners_certificate() -> None:
    kube = FakeKube()
    winner = pki.issue_webhook_certificate(SERVICE_NAMES)

    async def other_replica_creates() -> None:
        kube.objects[("secrets", "kueue-system", "cert")] = {
            "metadata": {"name": "cert", "namespace": "kueue-system", "resourceVersion": "7"},
            "data": webhook_tls.secret_data(winner),
        }

    kube.before_write.append(other_replica_creates)
    source = webhook_tls.SecretCertificate(kube, "kueue-system", "cert", SERVICE_NAMES)  # type: ignore[arg-type]
    assert asyncio.run(source.load()) == winner
    assert kube.writes == []


def test_an_unusable_secret_is_replaced_with_its_resource_version() -> None:
    kube = FakeKube()
    wrong_names = pki.issue_webhook_certificate(["elsewhere.svc"])
    kube.objects[("secrets", "kueue-system", "cert")] = {
        "metadata": {"name": "cert", "namespace": "kueue-system", "resourceVersion": "3"},
        "data": webhook_tls.secret_data(wrong_names),
    }
    replaced = asyncio.run(webhook_tls.SecretCertificate(kube, "kueue-system", "cert", SERVICE_NAMES).load())  # type: ignore[arg-type]
    assert pki.serving_problem(replaced, SERVICE_NAMES) is None
    # Same CA (its key was in the Secret), so the caBundle does not change.
    assert replaced.ca_pem == wrong_names.ca_pem
    assert webhook_tls.material_of(kube.objects[("secrets", "kueue-system", "cert")]) == replaced
    assert kube.writes == [("patch", "secrets")]


def test_a_secret_changed_meanwhile_is_read_again() -> None:
    kube = FakeKube()
    kube.objects[("secrets", "kueue-system", "cert")] = {
        "metadata": {"name": "cert", "namespace": "kueue-system", "resourceVersion": "3"},
        "data": {},
    }
    winner = pki.issue_webhook_certificate(SERVICE_NAMES)

    async def other_replica_writes() -> None:
        secret = kube.objects[("secrets", "kueue-system", "cert")]
        secret["data"] = webhook_tls.secret_data(winner)
        secret["metadata"]["resourceVersion"] = "4"

    kube.before_write.append(other_replica_writes)
    source = webhook_tls.SecretCertificate(kube, "kueue-system", "cert", SERVICE_NAMES)  # type: ignore[arg-type]
    assert asyncio.run(source.load()) == winner
    assert kube.writes == []
    assert SECRETS.plural == "secrets"


# -- a mounted directory -----------------------------------------------------------------------


def test_a_directory_without_ca_leaves_the_bundle_alone(tmp_path: Path) -> None:
    material = pki.issue_webhook_certificate(SERVICE_NAMES)
    (tmp_path / "tls.crt").write_bytes(material.cert_pem)
    (tmp_path / "tls.key").write_bytes(material.key_pem)
    loaded = asyncio.run(webhook_tls.DirectoryCertificate(tmp_path).load())
    assert loaded.ca_pem is None and loaded.cert_pem == material.cert_pem
    (tmp_path / "ca.crt").write_bytes(material.ca_pem or b"")
    assert asyncio.run(webhook_tls.DirectoryCertificate(tmp_path).load()).ca_pem == material.ca_pem
    (tmp_path / "tls.key").write_bytes(pki.issue_webhook_certificate(SERVICE_NAMES).key_pem)
    with pytest.raises(webhook_tls.CertificateError, match="not the key"):
        asyncio.run(webhook_tls.DirectoryCertificate(tmp_path).load())
    with pytest.raises(webhook_tls.CertificateError, match="cannot read"):
        asyncio.run(webhook_tls.DirectoryCertificate(tmp_path / "missing").load())


# -- reloading without a restart ---------------------------------------------------------------


def _served(port: int, ca_pem: bytes) -> bytes:
    context = ssl.create_default_context(cadata=(ca_pem or b"").decode())
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        with context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_the_next_handshake_presents_the_reloaded_certificate() -> None:
    first = pki.issue_webhook_certificate(["127.0.0.1"])
    second = pki.issue_webhook_certificate(["127.0.0.1"])
    tls = webhook_tls.ReloadableContext()
    tls.load(first)

    async def scenario() -> tuple[bytes, bytes]:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=tls.context)
        port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        before = await loop.run_in_executor(None, _served, port, first.ca_pem)
        tls.load(second)
        after = await loop.run_in_executor(None, _served, port, second.ca_pem)
        server.close()
        await server.wait_closed()
        return before, after

    before, after = asyncio.run(scenario())
    assert x509.load_der_x509_certificate(before) == x509.load_pem_x509_certificate(first.cert_pem)
    assert x509.load_der_x509_certificate(after) == x509.load_pem_x509_certificate(second.cert_pem)


def test_refresh_writes_the_new_ca_before_serving_it() -> None:
    kube = FakeKube()
    options = webhook.WebhookOptions(port=9443, service="ns/svc", cert_secret="cert", namespace="ns")
    server = webhook.server(options, kube)  # type: ignore[arg-type]
    asyncio.run(server.prepare())
    asyncio.run(server.configure(server.tls.material))  # type: ignore[arg-type]
    assert asyncio.run(server.refresh()) is False
    replacement = pki.issue_webhook_certificate(options.names())
    secret = kube.objects[("secrets", "ns", "cert")]
    secret["data"] = webhook_tls.secret_data(replacement)
    assert asyncio.run(server.refresh()) is True
    assert server.tls.material == replacement
    hook = kube.objects[("mutatingwebhookconfigurations", None, webhook.CONFIGURATION_NAME)]["webhooks"][0]
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == replacement.ca_pem
    assert hook["clientConfig"]["service"] == {"namespace": "ns", "name": "svc", "port": 443, "path": "/job-defaults"}


# -- flags -------------------------------------------------------------------------------------


def test_the_service_names_are_what_the_certificate_must_cover() -> None:
    assert webhook.WebhookOptions(port=1, service="kueue-system/svc").names() == SERVICE_NAMES
    assert webhook.WebhookOptions(port=1, host="10.0.0.5").names() == ["10.0.0.5"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"webhook_cert_secret": "s"}, "without --webhook-port"),
        ({"webhook_port": 9443, "webhook_service": "ns/svc", "webhook_host": "h"}, "exclude each other"),
        ({"webhook_port": 9443, "webhook_service_port": 8443}, "--webhook-service-port needs --webhook-service"),
        ({"webhook_port": 9443, "webhook_cert_secret": "s", "webhook_cert_dir": "/d"}, "exclude each other"),
        ({"webhook_port": 9443, "webhook_service": "svc"}, "NAMESPACE/NAME"),
    ],
)
def test_conflicting_flags_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(StartupError, match=message):
        webhook_options(ControllerOptions(**fields))


def test_flags_make_the_options() -> None:
    assert webhook_options(ControllerOptions()) is None
    local = webhook_options(ControllerOptions(webhook_port=9443))
    assert local is not None and local.host == "127.0.0.1" and local.service is None and local.cert_secret is None
    cluster = webhook_options(
        ControllerOptions(webhook_port=9443, webhook_service="kueue-system/svc", webhook_cert_secret="cert", namespace="kueue-system")
    )
    assert cluster is not None and cluster.service_ref == ("kueue-system", "svc") and cluster.service_port == 443
    assert isinstance(webhook.certificate_source(cluster, FakeKube()), webhook_tls.SecretCertificate)  # type: ignore[arg-type]
