"""kopf's admission webhook server for the Job mutating/validating webhooks.

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
from typing import Any

import kopf
import structlog

from multikueue.runtime import certificates as pki
from multikueue.integrations.batchjob import job as batchjob
from multikueue.integrations.batchjob.webhook import mutate_job, validate_job

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


def register(registry: kopf.OperatorRegistry, queue_has_multikueue_check: Any) -> None:
    """Register the Job webhooks; ``queue_has_multikueue_check(namespace, queue) -> bool | None``."""

    @kopf.on.mutate("batch", "v1", "jobs", operations=["CREATE"], registry=registry, id="job-defaults")
    async def default_job(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        job = dict(body)
        queue = batchjob.queue_name(job)
        namespace = body.get("metadata", {}).get("namespace") or ""
        has_check = queue_has_multikueue_check(namespace, queue) if queue else None
        for operation in mutate_job(job, queue_has_multikueue_check=has_check):
            path = operation["path"].strip("/").split("/")
            if path == ["spec"]:
                continue
            patch.setdefault(path[0], {})[path[1]] = operation["value"]

    @kopf.on.validate("batch", "v1", "jobs", operations=["CREATE", "UPDATE"], registry=registry, id="job-validation")
    async def validate(body: kopf.Body, **_: Any) -> None:
        errors = validate_job(dict(body))
        if errors:
            raise kopf.AdmissionError("; ".join(errors), code=422)
