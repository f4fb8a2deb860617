"""Kubeconfig documents for the local clusters.

Every kubeconfig written here is self-contained: the CA and credentials are
embedded as data, never referenced as files, and no exec plugin or auth
provider is used. That is what the MultiKueue admission check accepts from a
Secret, so the same builder serves the developer's admin kubeconfig and the
worker-access kubeconfigs stored on the manager.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def build_kubeconfig(
    *,
    name: str,
    server: str,
    ca_pem: bytes,
    user: str,
    token: str | None = None,
    client_cert_pem: bytes | None = None,
    client_key_pem: bytes | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """Return a kubeconfig with one cluster, one user and one current context."""
    if (token is None) == (client_cert_pem is None):
        raise ValueError("give exactly one of token or client certificate")
    credentials: dict[str, str] = {}
    if token is not None:
        credentials["token"] = token
    else:
        assert client_cert_pem is not None and client_key_pem is not None
        credentials["client-certificate-data"] = _b64(client_cert_pem)
        credentials["client-key-data"] = _b64(client_key_pem)
    context: dict[str, str] = {"cluster": name, "user": user}
    if namespace:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": name, "context": context}],
        "current-context": name,
        "preferences": {},
    }


def dump(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False)


def write(config: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump(config))
    path.chmod(0o600)
    return path
