"""Certificates and keys: for one local cluster, and for the controller's webhook server.

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
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
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


# -- the webhook server's certificate in a Secret ------------------------------------------
#
# Every replica serves the same certificate, kept in one Secret; whichever replica finds it
# missing or unusable issues a new one. What "unusable" means is decided here, without I/O,
# so that every replica reaches the same verdict on the same Secret.

#: The webhook CA's lifetime; the serving certificate's is :data:`WEBHOOK_CERT_VALIDITY`.
WEBHOOK_CA_VALIDITY = dt.timedelta(days=3650)
WEBHOOK_CERT_VALIDITY = dt.timedelta(days=365)
#: A certificate is renewed once less than this fraction of its lifetime is left.
RENEW_FRACTION = 1 / 3


@dataclass(frozen=True)
class TlsMaterial:
    """PEM bytes of a serving certificate, as the Secret (or a mounted directory) holds them.

    ``ca_pem`` is what clients trust (the webhook configurations' ``caBundle``):
    the issuing CA, possibly followed by the previous one during a rotation.
    ``ca_key_pem`` lets a replica renew the serving certificate under the same
    CA, so the ``caBundle`` does not change then.
    """

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes | None = None
    ca_key_pem: bytes | None = None


def _now(now: dt.datetime | None) -> dt.datetime:
    return now if now is not None else dt.datetime.now(dt.timezone.utc)


def _load_certs(pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def _load_key(pem: bytes) -> PrivateKeyTypes | None:
    try:
        return serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        return None


def _public_bytes(key: object) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)  # type: ignore[attr-defined]


def _lifetime_problem(cert: x509.Certificate, now: dt.datetime, what: str) -> str | None:
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    if now < start:
        return f"the {what} is not valid yet (from {start.isoformat()})"
    if now >= end:
        return f"the {what} expired at {end.isoformat()}"
    if (end - now) < (end - start) * RENEW_FRACTION:
        return f"the {what} expires at {end.isoformat()}: less than a third of its lifetime is left"
    return None


def _san_values(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    dns = {name.lower() for name in san.get_values_for_type(x509.DNSName)}
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return dns, ips


def missing_names(cert: x509.Certificate, names: list[str] | tuple[str, ...]) -> list[str]:
    """The ``names`` (DNS names or IP addresses) ``cert``'s SANs do not cover (exact matches only)."""
    dns, ips = _san_values(cert)
    missing = []
    for name in names:
        try:
            if str(ipaddress.ip_address(name)) not in ips:
                missing.append(name)
        except ValueError:
            if name.lower() not in dns:
                missing.append(name)
    return missing


def _issued_by(cert: x509.Certificate, cas: list[x509.Certificate]) -> bool:
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
            return True
        except (ValueError, TypeError, InvalidSignature):
            continue
    return False


def serving_problem(
    material: TlsMaterial | None, names: list[str] | tuple[str, ...], now: dt.datetime | None = None
) -> str | None:
    """Why ``material`` cannot serve ``names`` (and must be issued anew); None when it can.

    Unusable: missing or unparsable parts, a key that is not the certificate's,
    a certificate not issued by the CA in ``ca_pem``, SANs that miss one of
    ``names``, or a certificate or CA with less than a third of its lifetime left.
    """
    if material is None:
        return "no certificate yet"
    when = _now(now)
    certs, cas = _load_certs(material.cert_pem), _load_certs(material.ca_pem or b"")
    key = _load_key(material.key_pem)
    if not certs:
        return "tls.crt holds no PEM certificate"
    if key is None:
        return "tls.key holds no PEM private key"
    if not cas:
        return "ca.crt holds no PEM certificate"
    cert = certs[0]
    if _public_bytes(cert.public_key()) != _public_bytes(key.public_key()):
        return "tls.key is not the key of tls.crt"
    if not _issued_by(cert, cas):
        return "tls.crt is not issued by the CA in ca.crt"
    if missing := missing_names(cert, names):
        return f"tls.crt does not cover {', '.join(missing)}"
    return _lifetime_problem(cert, when, "serving certificate") or _lifetime_problem(cas[0], when, "CA")


def _reusable_ca(
    previous: TlsMaterial | None, now: dt.datetime
) -> tuple[x509.Certificate, rsa.RSAPrivateKey] | None:
    """The previous CA and its key, when both parse, match and the CA has enough lifetime left."""
    if previous is None or not previous.ca_pem or not previous.ca_key_pem:
        return None
    cas, key = _load_certs(previous.ca_pem), _load_key(previous.ca_key_pem)
    if not cas or key is None or _public_bytes(cas[0].public_key()) != _public_bytes(key.public_key()):
        return None
    if _lifetime_problem(cas[0], now, "CA") is not None or not isinstance(key, rsa.RSAPrivateKey):
        return None
    return cas[0], key


def issue_webhook_certificate(
    names: list[str] | tuple[str, ...],
    previous: TlsMaterial | None = None,
    *,
    now: dt.datetime | None = None,
    validity: dt.timedelta = WEBHOOK_CERT_VALIDITY,
    ca_validity: dt.timedelta = WEBHOOK_CA_VALIDITY,
) -> TlsMaterial:
    """A serving certificate for ``names`` (the first is the Common Name).

    The previous CA is kept when its key is at hand and it has enough lifetime
    left, so renewing the serving certificate leaves ``ca_pem`` unchanged.
    Otherwise a new CA is made and ``ca_pem`` lists it first, then the previous
    CA while that one is still valid: servers that still present the old
    certificate stay trusted until they have reloaded.
    """
    when = _now(now)
    reused = _reusable_ca(previous, when)
    if reused is not None:
        ca_cert, ca_key = reused
        bundle = previous.ca_pem if previous is not None and previous.ca_pem else _cert_pem(ca_cert)
    else:
        ca_key = _new_key()
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "multikueue-webhook-ca")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(when - dt.timedelta(minutes=5))
            .not_valid_after(when + ca_validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        bundle = _cert_pem(ca_cert)
        old = _load_certs(previous.ca_pem or b"") if previous is not None else []
        if old and when < old[0].not_valid_after_utc:
            bundle += _cert_pem(old[0])
    sans: list[x509.GeneralName] = []
    for name in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            sans.append(x509.DNSName(name))
    key = _new_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(when - dt.timedelta(minutes=5))
        .not_valid_after(min(when + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return TlsMaterial(cert_pem=_cert_pem(cert), key_pem=_key_pem(key), ca_pem=bundle, ca_key_pem=_key_pem(ca_key))


def key_matches(material: TlsMaterial) -> str | None:
    """Why ``material`` cannot be loaded (no certificate, no key, or not each other's); None when it can."""
    certs, key = _load_certs(material.cert_pem), _load_key(material.key_pem)
    if not certs:
        return "no PEM certificate in tls.crt"
    if key is None:
        return "no PEM private key in tls.key"
    if _public_bytes(certs[0].public_key()) != _public_bytes(key.public_key()):
        return "tls.key is not the key of tls.crt"
    return None
