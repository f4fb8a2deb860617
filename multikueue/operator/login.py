"""kopf's credentials, taken from the API client the controller already built.

kopf's stock ``login_via_client`` re-reads ``$KUBECONFIG`` through the
``kubernetes`` package, which captures that variable at import time; handing
kopf the configuration we loaded from ``--kubeconfig`` keeps both clients on
the same cluster and identity.
"""

from __future__ import annotations

from typing import Any

import kopf
from kubernetes import client


def connection_info(configuration: client.Configuration) -> kopf.ConnectionInfo:
    header = configuration.get_api_key_with_prefix("BearerToken") or configuration.get_api_key_with_prefix(
        "authorization"
    )
    parts = header.split(" ", 1) if header else []
    scheme, token = (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme=scheme,
        token=token,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


def register(registry: kopf.OperatorRegistry, api: client.ApiClient) -> None:
    @kopf.on.login(registry=registry, id="login")
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(api.configuration)
