"""Which kubeconfigs the MultiKueue admission check accepts from a Secret."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from multikueue.runtime.kubeconfig import (
    REASON_BAD_CONFIG,
    REASON_INSECURE,
    KubeconfigError,
    validate_kubeconfig,
)
from multikueue.dev.kubeconfig import build_kubeconfig, dump

pytestmark = pytest.mark.unit

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def good() -> dict[str, Any]:
    return build_kubeconfig(name="worker1", server="https://127.0.0.1:6443", ca_pem=CA, user="sa", token="abc")


def test_generated_token_kubeconfig_is_accepted() -> None:
    valid = validate_kubeconfig(dump(good()))
    assert valid.server == "https://127.0.0.1:6443"
    assert valid.cluster == "worker1"


def test_generated_client_cert_kubeconfig_is_accepted() -> None:
    config = build_kubeconfig(
        name="m", server="https://127.0.0.1:1", ca_pem=CA, user="admin", client_cert_pem=CA, client_key_pem=CA
    )
    validate_kubeconfig(dump(config))


def _mutate(section: str, **fields: Any) -> str:
    config = copy.deepcopy(good())
    key = "cluster" if section == "clusters" else "user"
    config[section][0][key].update(fields)
    return dump(config)


@pytest.mark.parametrize(
    ("section", "fields", "words"),
    [
        ("users", {"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}}, "exec plugin"),
        ("users", {"auth-provider": {"name": "gcp"}}, "auth provider"),
        ("users", {"tokenFile": "/var/run/token"}, "tokenFile from a file"),
        ("users", {"client-certificate": "/tmp/c.crt"}, "client-certificate from a file"),
        ("users", {"client-key": "/tmp/c.key"}, "client-key from a file"),
        ("users", {"username": "u", "password": "p"}, "basic authentication"),
        ("clusters", {"certificate-authority": "/etc/ca.crt"}, "certificate-authority from a file"),
        ("clusters", {"insecure-skip-tls-verify": True}, "insecure-skip-tls-verify"),
    ],
)
def test_insecure_kubeconfigs_are_refused(section: str, fields: dict[str, Any], words: str) -> None:
    with pytest.raises(KubeconfigError) as err:
        validate_kubeconfig(_mutate(section, **fields))
    assert err.value.reason == REASON_INSECURE
    assert words in str(err.value)


def test_every_problem_is_reported_at_once() -> None:
    config = good()
    config["users"][0]["user"] = {"exec": {"command": "x"}, "tokenFile": "/t"}
    config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    with pytest.raises(KubeconfigError) as err:
        validate_kubeconfig(dump(config))
    assert len(err.value.problems) == 3


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not yaml: [", "not valid YAML"),
        ("- a list", "not a YAML mapping"),
        ("apiVersion: v1\nkind: Config\n", "no current-context"),
        ("current-context: nowhere\ncontexts: []\n", "'nowhere' is not among the contexts"),
    ],
)
def test_malformed_kubeconfigs_are_bad_config(text: str, words: str) -> None:
    with pytest.raises(KubeconfigError) as err:
        validate_kubeconfig(text)
    assert err.value.reason == REASON_BAD_CONFIG
    assert words in str(err.value)


def test_context_naming_missing_cluster_and_user() -> None:
    config = good()
    config["contexts"][0]["context"] = {"cluster": "ghost", "user": "nobody"}
    with pytest.raises(KubeconfigError) as err:
        validate_kubeconfig(yaml.safe_dump(config))
    assert err.value.reason == REASON_BAD_CONFIG
    assert "'ghost'" in str(err.value) and "'nobody'" in str(err.value)


def test_builder_requires_exactly_one_credential() -> None:
    with pytest.raises(ValueError):
        build_kubeconfig(name="x", server="https://h", ca_pem=CA, user="u")
