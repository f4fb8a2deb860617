"""Webhook servers sharing one certificate Secret, on a real apiserver.

The servers run in the test's process with their own configuration objects
(a webhook no request ever matches), so the session controller's webhooks are
left alone. Their configurations reference a Service, as in a cluster: the
API server stores the reference without resolving it, and the test reaches
each server directly, checking the certificate it presents against the
Secret's CA for the Service's DNS name.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from cryptography import x509
from kubernetes import client

from multikueue.dev.controllers import free_port
from multikueue.dev.pytest_plugin import Clusters
from multikueue.operator import webhook
from multikueue.operator.webhook_tls import material_of, secret_data
from multikueue.runtime import certificates as pki
from multikueue.runtime.kube import AsyncKube

pytestmark = pytest.mark.integration

T = TypeVar("T")

_RULE = {"apiGroups": ["example.invalid"], "apiVersions": ["v1"], "resources": ["nothings"], "operations": ["CREATE"]}
#: Webhooks no request matches (a group nothing serves).
HARMLESS = {
    "mutating": ({"id": "nothing-defaults", "rules": [_RULE], "failurePolicy": "Ignore", "sideEffects": "None"},),
    "validating": ({"id": "nothing-validation", "rules": [_RULE], "failurePolicy": "Ignore", "sideEffects": "None"},),
}


async def _eventually(check: Callable[[], Awaitable[T]], timeout: float, what: str) -> T:
    deadline = asyncio.get_running_loop().time() + timeout
    last: Any = None
    while asyncio.get_running_loop().time() < deadline:
        try:
            last = await check()
            if last:
                return last
        except (OSError, ssl.SSLError, client.ApiException) as exc:
            last = exc
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def _presented(port: int, ca_pem: bytes, hostname: str) -> x509.Certificate:
    """The certificate a server presents, verified against ``ca_pem`` for ``hostname``."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock, context.wrap_socket(sock, server_hostname=hostname) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


async def _serve(server: webhook.ConfiguringServer) -> None:
    async def fn(*_: Any, **__: Any) -> dict[str, Any]:
        return {}

    iterator: AsyncIterator[Any] = server(fn)  # type: ignore[arg-type]
    async for _ in iterator:
        pass


def test_replicas_share_the_secret_and_reload_its_replacement(integration_clusters: Clusters, namespace: str) -> None:
    ns = namespace
    api = integration_clusters.manager
    admission = client.AdmissionregistrationV1Api(api)
    core = client.CoreV1Api(api)
    name = f"test-{ns}"
    options = webhook.WebhookOptions(
        port=free_port(),
        addr="127.0.0.1",
        namespace=ns,
        service=f"{ns}/webhook-service",
        cert_secret="multikueue-webhook-server-cert",
        configuration_name=name,
        poll_seconds=0.5,
    )
    hostname = options.names()[0]

    def versions() -> tuple[str, str]:
        return (
            admission.read_mutating_webhook_configuration(name).metadata.resource_version,
            admission.read_validating_webhook_configuration(name).metadata.resource_version,
        )

    def secret() -> client.V1Secret:
        return core.read_namespaced_secret("multikueue-webhook-server-cert", ns)

    async def scenario() -> None:
        kube = AsyncKube(api)
        first = webhook.server(options, kube, HARMLESS)
        await first.prepare()
        second = webhook.server(dataclasses.replace(options, port=free_port()), kube, HARMLESS)
        tasks = [asyncio.create_task(_serve(first))]
        loop = asyncio.get_running_loop()
        try:
            issued = material_of(secret().to_dict())
            assert issued is not None and pki.serving_problem(issued, options.names()) is None
            assert secret().type == "kubernetes.io/tls"

            async def listening(port: int, ca: bytes) -> x509.Certificate:
                return await loop.run_in_executor(None, _presented, port, ca, hostname)

            served = await _eventually(lambda: listening(first.options.port, issued.ca_pem or b""), 20, what="the first server")
            assert served == x509.load_pem_x509_certificate(issued.cert_pem)
            await _eventually(lambda: asyncio.to_thread(lambda: bool(versions())), 20, what="the configurations")
            before, secret_version = versions(), secret().metadata.resource_version
            [hook] = admission.read_mutating_webhook_configuration(name).webhooks
            assert base64.b64decode(hook.client_config.ca_bundle) == issued.ca_pem
            assert (hook.client_config.service.namespace, hook.client_config.service.name) == (ns, "webhook-service")
            assert hook.client_config.service.path == "/nothing-defaults" and hook.client_config.url is None
            assert [e.key for e in hook.namespace_selector.match_expressions] == ["kubernetes.io/metadata.name"]

            # A second replica serves the first one's certificate and writes nothing.
            await second.prepare()
            tasks.append(asyncio.create_task(_serve(second)))
            served = await _eventually(lambda: listening(second.options.port, issued.ca_pem or b""), 20, what="the second server")
            assert served == x509.load_pem_x509_certificate(issued.cert_pem)
            await asyncio.sleep(1.5)  # a few polls
            assert versions() == before and secret().metadata.resource_version == secret_version

            # The Secret is replaced (a new CA too): both replicas reload it, the caBundle follows.
            replacement = pki.issue_webhook_certificate(options.names())
            core.patch_namespaced_secret("multikueue-webhook-server-cert", ns, {"data": secret_data(replacement)})
            expected = x509.load_pem_x509_certificate(replacement.cert_pem)
            for server in (first, second):

                async def presents_new(port: int = server.options.port) -> bool:
                    return await listening(port, replacement.ca_pem or b"") == expected

                await _eventually(presents_new, 20, what=f"port {server.options.port} presenting the new certificate")
            [hook] = admission.read_validating_webhook_configuration(name).webhooks
            assert base64.b64decode(hook.client_config.ca_bundle) == replacement.ca_pem

            # A Secret that no longer covers the Service's names is issued anew by a replica.
            wrong = pki.issue_webhook_certificate(["elsewhere.svc"])
            core.patch_namespaced_secret("multikueue-webhook-server-cert", ns, {"data": secret_data(wrong)})

            async def reissued() -> bool:
                current = material_of(secret().to_dict())
                return current is not None and pki.serving_problem(current, options.names()) is None

            await _eventually(reissued, 20, what="the Secret issued anew")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            admission.delete_mutating_webhook_configuration(name)
            admission.delete_validating_webhook_configuration(name)

    asyncio.run(scenario())
