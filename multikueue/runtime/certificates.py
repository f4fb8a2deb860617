"""Certificates and keys for one local cluster.

Each cluster gets its own CA, a serving certificate for kube-apiserver on
loopback, an admin client certificate (group ``system:masters``) for the
components and the developer, and the key pair that signs service-account
tokens. RSA 2048 keeps generation well under a second per cluster.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class ClusterPKI:
    """Paths of the PEM files of one cluster."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path

    @classmethod
    def in_directory(cls, directory: Path) -> "ClusterPKI":
        return cls(
            ca_cert=directory / "ca.crt",
            ca_key=directory / "ca.key",
            serving_cert=directory / "apiserver.crt",
            serving_key=directory / "apiserver.key",
            admin_cert=directory / "admin.crt",
            admin_key=directory / "admin.key",
            sa_key=directory / "sa.key",
            sa_pub=directory / "sa.pub",
        )


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: rsa.RSAPublicKey) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def _leaf(
    ca_key: rsa.RSAPrivateKey,
    ca_name: x509.Name,
    subject: x509.Name,
    usage: ExtendedKeyUsageOID,
    san: x509.SubjectAlternativeName | None = None,
) -> tuple[x509.Certificate, rsa.RSAPrivateKey]:
    key = _new_key()
    builder = (
        _builder(subject, ca_name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def generate(directory: Path, cluster_name: str) -> ClusterPKI:
    """Write a fresh PKI for ``cluster_name`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _new_key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"multikueue-{cluster_name}-ca")])
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    san = x509.SubjectAlternativeName(
        [
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes"),
            x509.DNSName("kubernetes.default"),
            x509.DNSName("kubernetes.default.svc"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
        ]
    )
    serving, serving_key = _leaf(
        ca_key,
        ca_name,
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        ExtendedKeyUsageOID.SERVER_AUTH,
        san,
    )
    admin, admin_key = _leaf(
        ca_key,
        ca_name,
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "multikueue-admin"),
            ]
        ),
        ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    sa_key = _new_key()
    pki = ClusterPKI.in_directory(directory)
    pki.ca_cert.write_bytes(_cert_pem(ca_cert))
    pki.ca_key.write_bytes(_key_pem(ca_key))
    pki.serving_cert.write_bytes(_cert_pem(serving))
    pki.serving_key.write_bytes(_key_pem(serving_key))
    pki.admin_cert.write_bytes(_cert_pem(admin))
    pki.admin_key.write_bytes(_key_pem(admin_key))
    pki.sa_key.write_bytes(_key_pem(sa_key))
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    for key_file in (pki.ca_key, pki.serving_key, pki.admin_key, pki.sa_key):
        key_file.chmod(0o600)
    return pki


@dataclass(frozen=True)
class ServingCertificate:
    """A self-signed CA and a serving certificate it issued, for one host."""

    ca_pem: bytes
    cert: Path
    key: Path


def serving_certificate(directory: Path, host: str) -> ServingCertificate:
    """Write a CA and a serving certificate for ``host`` (a DNS name or an IP) into ``directory``.

    Used for the controller's webhook server, whose CA goes into the webhook
    configurations' ``caBundle``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _new_key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "multikueue-webhook-ca")])
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    try:
        san_entry: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        san_entry = x509.DNSName(host)
    cert, key = _leaf(
        ca_key,
        ca_name,
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]),
        ExtendedKeyUsageOID.SERVER_AUTH,
        x509.SubjectAlternativeName([san_entry]),
    )
    result = ServingCertificate(ca_pem=_cert_pem(ca_cert), cert=directory / "tls.crt", key=directory / "tls.key")
    result.cert.write_bytes(_cert_pem(cert))
    result.key.write_bytes(_key_pem(key))
    result.key.chmod(0o600)
    return result
