"""The webhook server's certificate: where it comes from, and serving it with reloads.

Three sources (chosen by :class:`multikueue.operator.webhook.WebhookOptions`):

- :class:`LocalCertificate`: a fresh CA and certificate at start, for the
  local clusters and the tests (nothing to provision, nothing shared).
- :class:`SecretCertificate`: a ``kubernetes.io/tls`` Secret in the
  controller's namespace that every replica serves. A replica that finds it
  missing, unparsable, not covering the webhook's names or with less than a
  third of its lifetime left issues a new one and writes it with optimistic
  concurrency (create, or a patch carrying the resourceVersion read); on a
  409 it reads the Secret again and serves the winner's. The Secret also
  holds ``ca.key``, so renewing the serving certificate keeps the CA and
  the webhook configurations' ``caBundle`` unchanged.
- :class:`DirectoryCertificate`: ``tls.crt``/``tls.key`` (and ``ca.crt``
  if present) in a mounted directory, kept current by cert-manager or the
  like; this process never writes them.

:class:`ReloadableContext` is the ``ssl.SSLContext`` given to kopf's server.
A new certificate is loaded into that same context, so every TLS handshake
after the reload presents it, without closing the listening socket.
"""

from __future__ import annotations

import base64
import ssl
from pathlib import Path
from typing import Any, Protocol

import structlog
from kubernetes.client.rest import ApiException

from multikueue.api.resources import SECRETS
from multikueue.runtime import certificates as pki
from multikueue.runtime.certificates import TlsMaterial
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.privatefiles import private_file, transient_file

log = structlog.get_logger(__name__)

#: Keys of the Secret (those of ``kubernetes.io/tls`` plus the CA and its key).
TLS_CRT, TLS_KEY, CA_CRT, CA_KEY = "tls.crt", "tls.key", "ca.crt", "ca.key"
#: Attempts at writing the Secret before giving up (each 409 re-reads it).
WRITE_ATTEMPTS = 5


class CertificateError(Exception):
    """No usable certificate; the message says what to fix."""


class CertificateSource(Protocol):
    #: Whether the certificate can change while running (then it is polled).
    changes: bool

    def describe(self) -> str: ...

    async def load(self) -> TlsMaterial:
        """The certificate to serve now (issuing one first, where this source may)."""
        ...


class LocalCertificate:
    """A fresh CA and serving certificate for ``names``, made once."""

    changes = False

    def __init__(self, names: list[str]) -> None:
        self._names = names
        self._material: TlsMaterial | None = None

    def describe(self) -> str:
        return "generated at start"

    async def load(self) -> TlsMaterial:
        if self._material is None:
            self._material = pki.issue_webhook_certificate(self._names)
        return self._material


def material_of(secret: dict[str, Any] | None) -> TlsMaterial | None:
    """The certificate a Secret holds (None when there is no Secret); missing keys read as empty."""
    if secret is None:
        return None
    data = secret.get("data") or {}

    def value(key: str) -> bytes:
        try:
            return base64.b64decode(data.get(key) or "")
        except ValueError:
            return b""

    return TlsMaterial(
        cert_pem=value(TLS_CRT), key_pem=value(TLS_KEY), ca_pem=value(CA_CRT) or None, ca_key_pem=value(CA_KEY) or None
    )


def secret_data(material: TlsMaterial) -> dict[str, str]:
    parts = {TLS_CRT: material.cert_pem, TLS_KEY: material.key_pem, CA_CRT: material.ca_pem, CA_KEY: material.ca_key_pem}
    return {key: base64.b64encode(value).decode("ascii") for key, value in parts.items() if value}


class SecretCertificate:
    """The certificate every replica shares, in Secret ``namespace/name``, issued when unusable."""

    changes = True

    def __init__(self, kube: AsyncKube, namespace: str, name: str, names: list[str]) -> None:
        self._kube = kube
        self.namespace = namespace
        self.name = name
        self.names = names

    def describe(self) -> str:
        return f"Secret {self.namespace}/{self.name}"

    async def load(self) -> TlsMaterial:
        for _ in range(WRITE_ATTEMPTS):
            try:
                secret = await self._kube.get_or_none(SECRETS, self.namespace, self.name)
            except ApiException as exc:
                raise CertificateError(
                    f"cannot read Secret {self.namespace}/{self.name}: {exc.status} {exc.reason}; "
                    "grant the controller get, create and patch on secrets in its namespace"
                ) from None
            current = material_of(secret)
            problem = pki.serving_problem(current, self.names)
            if problem is None:
                assert current is not None
                return current
            issued = pki.issue_webhook_certificate(self.names, current)
            try:
                if secret is None:
                    await self._kube.create(SECRETS, self.namespace, self._body(issued))
                else:
                    rv = secret["metadata"].get("resourceVersion")
                    await self._kube.patch(
                        SECRETS, self.namespace, self.name, {"metadata": {"resourceVersion": rv}, "data": secret_data(issued)}
                    )
            except ApiException as exc:
                if exc.status == 409:
                    continue  # another replica wrote first: read and serve the winner's
                raise CertificateError(
                    f"cannot write Secret {self.namespace}/{self.name}: {exc.status} {exc.reason}; "
                    "grant the controller get, create and patch on secrets in its namespace"
                ) from None
            log.info("webhook certificate issued", secret=f"{self.namespace}/{self.name}", reason=problem, names=self.names)
            return issued
        raise CertificateError(f"Secret {self.namespace}/{self.name} kept changing while this replica wrote it")

    def _body(self, material: TlsMaterial) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "multikueue"},
            },
            "type": "kubernetes.io/tls",
            "data": secret_data(material),
        }


class DirectoryCertificate:
    """``tls.crt``, ``tls.key`` and (optionally) ``ca.crt`` in a directory someone else keeps current."""

    changes = True

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def describe(self) -> str:
        return f"directory {self.directory}"

    async def load(self) -> TlsMaterial:
        try:
            cert = (self.directory / TLS_CRT).read_bytes()
            key = (self.directory / TLS_KEY).read_bytes()
        except OSError as exc:
            raise CertificateError(f"cannot read {exc.filename}: {exc.strerror}") from None
        ca_path = self.directory / CA_CRT
        ca = ca_path.read_bytes() if ca_path.is_file() else None
        material = TlsMaterial(cert_pem=cert, key_pem=key, ca_pem=ca or None)
        if problem := pki.key_matches(material):
            raise CertificateError(f"{self.directory}: {problem}")
        return material


class ReloadableContext:
    """The server's ``ssl.SSLContext``; :meth:`load` swaps the certificate for the next handshakes.

    ``ssl`` reads a certificate and key only from paths; they are given
    memory files (:mod:`multikueue.runtime.privatefiles`), so no private key
    is left on disk when the process ends, whichever way it ends.
    """

    def __init__(self) -> None:
        self.context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
        self.material: TlsMaterial | None = None

    def load(self, material: TlsMaterial) -> None:
        """Serve ``material`` from the next handshake on (``ssl.SSLError`` if it does not load)."""
        with transient_file(material.cert_pem) as cert, transient_file(material.key_pem) as key:
            self.context.load_cert_chain(cert, key)
        self.material = material

    def initial_files(self) -> tuple[Path, Path]:
        """Files with the current certificate that never change (kopf's server restarts when its files change)."""
        assert self.material is not None
        return Path(private_file(self.material.cert_pem)), Path(private_file(self.material.key_pem))
