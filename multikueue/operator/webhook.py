"""kopf's admission webhook server (the integrations register their webhooks on it).

kopf serves the webhooks and keeps a ``MutatingWebhookConfiguration`` and a
``ValidatingWebhookConfiguration`` named :data:`CONFIGURATION_NAME` pointing at
this process. The serving certificate is generated at start (its CA goes into
the configuration's ``caBundle``), so nothing has to be provisioned for the
local clusters; in a cluster, pass the Service's DNS name as ``host``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import kopf
import structlog

from multikueue.runtime import certificates as pki

log = structlog.get_logger(__name__)

CONFIGURATION_NAME = "multikueue.x-k8s.io"


@dataclass(frozen=True)
class WebhookOptions:
    port: int
    #: The address the API server uses to reach this process (a DNS name or an IP).
    host: str = "127.0.0.1"
    #: Where to listen.
    addr: str = "0.0.0.0"


def server(options: WebhookOptions) -> kopf.WebhookServer:
    directory = Path(tempfile.mkdtemp(prefix="multikueue-webhook-"))
    cert = pki.serving_certificate(directory, options.host)
    return kopf.WebhookServer(
        addr=options.addr,
        port=options.port,
        host=options.host,
        certfile=str(cert.cert),
        pkeyfile=str(cert.key),
        cadata=cert.ca_pem,
    )
