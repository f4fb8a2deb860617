"""kopf's admission webhook server, and the webhook configurations that point at it.

kopf serves the webhooks the integrations register (``kopf.on.mutate`` /
``kopf.on.validate``). The ``MutatingWebhookConfiguration`` and
``ValidatingWebhookConfiguration`` named :data:`CONFIGURATION_NAME` are
written here, not by kopf's managed mode, for two reasons:

- kopf's generator has no ``namespaceSelector`` nor ``matchConditions`` and
  makes every webhook match every Job of the cluster; ours leave out
  ``kube-system`` and the controller's own namespace (as upstream Kueue) and
  take each webhook's scope from the integration that owns it
  (:data:`multikueue.integrations.batchjob.webhook.WEBHOOKS`);
- kopf removes its webhooks when the controller stops, so queued Jobs created
  while it is down would be accepted unsuspended and run on the manager. Ours
  stay (``failurePolicy: Fail``): those Jobs are refused until the controller
  is back, as with upstream Kueue, while Jobs outside the webhooks' scope are
  never held up.

The serving certificate is generated at start (its CA goes into each
webhook's ``caBundle``), so nothing has to be provisioned for the local
clusters; in a cluster, pass the Service's DNS name as ``host``.
"""

from __future__ import annotations

import copy
import tempfile
import urllib.parse
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf
import structlog
from kubernetes.client.rest import ApiException

from multikueue.api.configuration import DEFAULT_NAMESPACE
from multikueue.api.resources import ResourceRef
from multikueue.integrations.batchjob.webhook import WEBHOOKS as JOB_WEBHOOKS
from multikueue.runtime import certificates as pki
from multikueue.runtime.kube import AsyncKube

log = structlog.get_logger(__name__)

CONFIGURATION_NAME = "multikueue.x-k8s.io"
#: Upstream's request timeout for its webhooks (the API server's default is also 10 s).
TIMEOUT_SECONDS = 10
#: Namespaces whose Jobs never reach the webhooks, besides the controller's own.
EXCLUDED_NAMESPACES = ("kube-system",)

CONFIGURATIONS = {
    "mutating": ResourceRef("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", False),
    "validating": ResourceRef("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", False),
}
KINDS = {"mutating": "MutatingWebhookConfiguration", "validating": "ValidatingWebhookConfiguration"}


@dataclass(frozen=True)
class WebhookOptions:
    port: int
    #: The address the API server uses to reach this process (a DNS name or an IP).
    host: str = "127.0.0.1"
    #: Where to listen.
    addr: str = "0.0.0.0"
    #: The controller's namespace: its Jobs (if any) never go through the webhooks.
    namespace: str = DEFAULT_NAMESPACE


def namespace_selector(namespace: str) -> dict[str, Any]:
    """Every namespace except kube-system and the controller's (upstream's selector, by namespace name)."""
    excluded = list(dict.fromkeys([*EXCLUDED_NAMESPACES, namespace]))
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded}]}


def build_configurations(
    webhooks: Mapping[str, Iterable[Mapping[str, Any]]],
    client_config: Mapping[str, Any],
    namespace: str,
) -> dict[str, dict[str, Any]]:
    """The two configuration objects, by ``"mutating"``/``"validating"``.

    ``webhooks`` are the integrations' entries (an ``id``, which is both the
    handler id kopf routes by and the URL path, plus the webhook fields);
    ``client_config`` is what kopf's server reports (``url``, ``caBundle``).
    """
    configurations = {}
    for reason, ref in CONFIGURATIONS.items():
        entries = []
        for entry in webhooks.get(reason, ()):
            fields = {key: copy.deepcopy(value) for key, value in entry.items() if key != "id"}
            config = dict(client_config)
            config["url"] = f"{str(config['url']).rstrip('/')}/{urllib.parse.quote(entry['id'])}"
            entries.append(
                {
                    "name": f"{entry['id']}.{CONFIGURATION_NAME}",
                    "admissionReviewVersions": ["v1"],
                    "matchPolicy": "Equivalent",
                    "timeoutSeconds": TIMEOUT_SECONDS,
                    "namespaceSelector": namespace_selector(namespace),
                    **fields,
                    "clientConfig": config,
                }
            )
        configurations[reason] = {
            "apiVersion": f"{ref.group}/{ref.version}",
            "kind": KINDS[reason],
            "metadata": {"name": CONFIGURATION_NAME},
            "webhooks": entries,
        }
    return configurations


async def apply_configurations(kube: AsyncKube, configurations: Mapping[str, dict[str, Any]]) -> None:
    """Create each configuration, or replace the webhooks of the existing one (a merge patch replaces the list)."""
    for reason, body in configurations.items():
        ref = CONFIGURATIONS[reason]
        try:
            await kube.create(ref, None, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            await kube.patch(ref, None, CONFIGURATION_NAME, {"webhooks": body["webhooks"]})


class ConfiguringServer:
    """kopf's HTTPS webhook server that, once listening, writes the configurations pointing at it.

    Given to kopf as ``settings.admission.server`` (a ``WebhookFn`` consumer
    yielding client configurations). kopf's managed mode stays off
    (``settings.admission.managed`` is None), so nothing else writes the
    configurations and nothing removes them at exit.
    """

    def __init__(self, server: kopf.WebhookServer, kube: AsyncKube, namespace: str) -> None:
        self._server = server
        self._kube = kube
        self._namespace = namespace

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        async for client_config in self._server(fn):
            configurations = build_configurations(JOB_WEBHOOKS, client_config, self._namespace)
            try:
                await apply_configurations(self._kube, configurations)
            except ApiException as exc:
                log.error(
                    "cannot write the webhook configurations; Jobs are not defaulted or validated by this process",
                    configuration=CONFIGURATION_NAME,
                    status=exc.status,
                    reason=exc.reason,
                    fix="grant the controller create/patch on mutating- and validatingwebhookconfigurations",
                )
                raise
            log.info("webhook configurations written", configuration=CONFIGURATION_NAME, url=client_config.get("url"))
            yield client_config


def server(options: WebhookOptions, kube: AsyncKube) -> ConfiguringServer:
    """The server for ``settings.admission.server``: HTTPS with a fresh certificate for ``options.host``.

    ``kube`` is the manager's client, used to write the webhook configurations.
    """
    directory = Path(tempfile.mkdtemp(prefix="multikueue-webhook-"))
    cert = pki.serving_certificate(directory, options.host)
    https = kopf.WebhookServer(
        addr=options.addr,
        port=options.port,
        host=options.host,
        certfile=str(cert.cert),
        pkeyfile=str(cert.key),
        cadata=cert.ca_pem,
    )
    return ConfiguringServer(https, kube, options.namespace)
