"""The webhook certificate's checks: when a replica must issue a new one, and what it issues."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509

from multikueue.runtime import certificates as pki
from multikueue.runtime.certificates import TlsMaterial

pytestmark = pytest.mark.unit

NAMES = ["multikueue-webhook-service.kueue-system.svc", "multikueue-webhook-service.kueue-system.svc.cluster.local"]
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def material() -> TlsMaterial:
    return pki.issue_webhook_certificate(NAMES, now=NOW)


def test_a_fresh_certificate_serves_its_names(material: TlsMaterial) -> None:
    assert pki.serving_problem(material, NAMES, now=NOW) is None
    assert pki.serving_problem(material, NAMES[:1], now=NOW + dt.timedelta(days=200)) is None
    cert = x509.load_pem_x509_certificate(material.cert_pem)
    assert pki.missing_names(cert, NAMES) == []
    assert material.ca_key_pem is not None and pki.key_matches(material) is None


@pytest.mark.parametrize("material_or_none", [None, TlsMaterial(b"", b""), TlsMaterial(b"garbage", b"garbage", b"garbage")])
def test_missing_or_garbage_is_unusable(material_or_none: TlsMaterial | None) -> None:
    assert pki.serving_problem(material_or_none, NAMES, now=NOW) is not None


def test_names_not_covered(material: TlsMaterial) -> None:
    problem = pki.serving_problem(material, [*NAMES, "other.kueue-system.svc"], now=NOW)
    assert problem == "tls.crt does not cover other.kueue-system.svc"


def test_less_than_a_third_of_the_lifetime_left_means_renew() -> None:
    month = pki.issue_webhook_certificate(NAMES, now=NOW, validity=dt.timedelta(days=30))
    assert pki.serving_problem(month, NAMES, now=NOW + dt.timedelta(days=19)) is None
    problem = pki.serving_problem(month, NAMES, now=NOW + dt.timedelta(days=21))
    assert problem is not None and "less than a third" in problem
    assert "expired" in (pki.serving_problem(month, NAMES, now=NOW + dt.timedelta(days=31)) or "")
    assert "not valid yet" in (pki.serving_problem(month, NAMES, now=NOW - dt.timedelta(days=1)) or "")


def test_an_expiring_ca_means_renew() -> None:
    short = pki.issue_webhook_certificate(NAMES, now=NOW, validity=dt.timedelta(days=30), ca_validity=dt.timedelta(days=60))
    problem = pki.serving_problem(short, NAMES, now=NOW + dt.timedelta(days=1))
    assert problem is None
    # The serving certificate still has most of its life, the CA has less than a third of its own.
    renewed = pki.issue_webhook_certificate(NAMES, short, now=NOW + dt.timedelta(days=45))
    assert renewed.ca_pem != short.ca_pem


def test_a_key_or_ca_that_does_not_belong(material: TlsMaterial) -> None:
    other = pki.issue_webhook_certificate(NAMES, now=NOW)
    assert pki.serving_problem(TlsMaterial(material.cert_pem, other.key_pem, material.ca_pem), NAMES, now=NOW) == (
        "tls.key is not the key of tls.crt"
    )
    assert pki.key_matches(TlsMaterial(material.cert_pem, other.key_pem)) == "tls.key is not the key of tls.crt"
    assert pki.serving_problem(TlsMaterial(material.cert_pem, material.key_pem, other.ca_pem), NAMES, now=NOW) == (
        "tls.crt is not issued by the CA in ca.crt"
    )


def test_renewal_keeps_the_ca_so_the_ca_bundle_does_not_change(material: TlsMaterial) -> None:
    later = NOW + dt.timedelta(days=300)
    renewed = pki.issue_webhook_certificate(NAMES, material, now=later)
    assert renewed.ca_pem == material.ca_pem and renewed.ca_key_pem == material.ca_key_pem
    assert renewed.cert_pem != material.cert_pem
    assert pki.serving_problem(renewed, NAMES, now=later) is None


def test_a_new_ca_is_bundled_with_the_previous_one_while_it_is_valid(material: TlsMaterial) -> None:
    without_ca_key = TlsMaterial(material.cert_pem, material.key_pem, material.ca_pem)
    rotated = pki.issue_webhook_certificate(NAMES, without_ca_key, now=NOW)
    bundle = x509.load_pem_x509_certificates(rotated.ca_pem or b"")
    previous = x509.load_pem_x509_certificate(material.ca_pem or b"")
    assert len(bundle) == 2 and bundle[1] == previous
    # Servers that still present the old certificate stay trusted by the new bundle.
    assert pki.serving_problem(TlsMaterial(material.cert_pem, material.key_pem, rotated.ca_pem), NAMES, now=NOW) is None
    # The bundle never grows past the new CA and the one before it.
    again = pki.issue_webhook_certificate(NAMES, TlsMaterial(rotated.cert_pem, rotated.key_pem, rotated.ca_pem), now=NOW)
    assert len(x509.load_pem_x509_certificates(again.ca_pem or b"")) == 2


def test_ip_addresses_are_ip_sans() -> None:
    local = pki.issue_webhook_certificate(["127.0.0.1"], now=NOW)
    assert pki.serving_problem(local, ["127.0.0.1"], now=NOW) is None
    assert pki.serving_problem(local, ["localhost"], now=NOW) == "tls.crt does not cover localhost"
