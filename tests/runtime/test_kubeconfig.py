"""Which kubeconfigs the MultiKueue admission check accepts from a Secret."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from multikueue.runtime.privatefiles import material_directory
from multikueue.runtime.kubeconfig import (
    MAX_KUBECONFIG_BYTES,
    REASON_BAD_CONFIG,
    REASON_INSECURE,
    KubeconfigError,
    allowed_kubeconfig_path,
    client_configuration,
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


# -- names: the validated entry is the only one the client can use ----------------------


def _two_entries_named_one(**hostile_user: Any) -> dict[str, Any]:
    """Context says ``cluster: 1``/``user: 1``; a harmless entry is named "1", a hostile one 1."""
    return {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": 1, "user": 1}}],
        "clusters": [
            {"name": "1", "cluster": {"server": "https://good.example"}},
            {"name": 1, "cluster": {"server": "https://evil.example", "insecure-skip-tls-verify": True}},
        ],
        "users": [{"name": "1", "user": {"token": "harmless"}}, {"name": 1, "user": hostile_user}],
    }


@pytest.mark.parametrize(
    "hostile",
    [{"tokenFile": "/etc/hostname"}, {"exec": {"command": "id", "apiVersion": "client.authentication.k8s.io/v1"}}],
)
def test_int_names_cannot_smuggle_a_second_entry(hostile: dict[str, Any]) -> None:
    with pytest.raises(KubeconfigError) as err:
        validate_kubeconfig(yaml.safe_dump(_two_entries_named_one(**hostile)))
    assert err.value.reason == REASON_BAD_CONFIG
    assert "names must be non-empty strings" in str(err.value)


def test_context_naming_an_int_is_refused_even_without_int_entries() -> None:
    config = good()
    config["contexts"][0]["context"]["cluster"] = 1
    config["clusters"][0]["name"] = "1"
    with pytest.raises(KubeconfigError) as err:
        validate_kubeconfig(yaml.safe_dump(config))
    assert "names cluster 1: it must be a non-empty string" in str(err.value)


@pytest.mark.parametrize("section", ["clusters", "users", "contexts"])
def test_duplicate_names_are_refused(section: str) -> None:
    config = good()
    config[section].append(copy.deepcopy(config[section][0]))
    with pytest.raises(KubeconfigError) as err:
        validate_kubeconfig(yaml.safe_dump(config))
    assert f"{section} has two entries named" in str(err.value)


def test_current_context_must_be_a_string() -> None:
    config = good()
    config["current-context"] = ["worker1"]
    with pytest.raises(KubeconfigError, match="is not a string"):
        validate_kubeconfig(yaml.safe_dump(config))


# -- fields -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "words"),
    [
        ("http://127.0.0.1:6443", "must be an https:// URL"),
        ("127.0.0.1:6443", "must be an https:// URL"),
        ("https://user:pw@host:6443", "must not carry user information"),
        ("https://host:6443/?q=1", "no query or fragment"),
        ("https://", "needs a host"),
        ("https://host:notaport", "not a URL"),
        (" https://host", "whitespace"),
    ],
)
def test_server_must_be_a_plain_https_url(server: str, words: str) -> None:
    with pytest.raises(KubeconfigError) as err:
        validate_kubeconfig(_mutate("clusters", server=server))
    assert words in str(err.value)
    assert "pw" not in str(err.value)


@pytest.mark.parametrize(
    ("section", "fields", "words"),
    [
        ("clusters", {"proxy-url": "socks5://proxy:1080"}, "proxy-url, which is not supported"),
        ("clusters", {"something": 1}, "field 'something', which is not supported"),
        ("users", {"as": "system:admin"}, "field 'as', which is not supported"),
        ("users", {"client-key-data": "QQ=="}, "go together"),
        ("users", {"token": 5}, "token is not a non-empty string"),
        ("clusters", {"certificate-authority-data": "%%%"}, "not valid base64"),
        ("clusters", {"certificate-authority-data": "QUJD"}, "holds no PEM certificate"),
    ],
)
def test_unsupported_or_malformed_fields_are_bad_config(section: str, fields: dict[str, Any], words: str) -> None:
    with pytest.raises(KubeconfigError) as err:
        validate_kubeconfig(_mutate(section, **fields))
    assert err.value.reason == REASON_BAD_CONFIG
    assert words in str(err.value)


def test_harmless_kubectl_fields_are_accepted() -> None:
    config = good()
    config["clusters"][0]["cluster"].update({"extensions": [], "disable-compression": True, "insecure-skip-tls-verify": False})
    config["contexts"][0]["context"]["namespace"] = "default"
    config["users"][0]["user"]["extensions"] = []
    assert validate_kubeconfig(dump(config)).server == "https://127.0.0.1:6443"


@pytest.mark.parametrize("hostile", ["/etc/hostname", "", None])
def test_file_fields_are_refused_whatever_their_value(hostile: Any) -> None:
    with pytest.raises(KubeconfigError) as err:
        validate_kubeconfig(_mutate("users", tokenFile=hostile))
    assert err.value.reason == REASON_INSECURE


# -- what the client is built from ----------------------------------------------------------


def test_client_configuration_holds_exactly_the_validated_values() -> None:
    config = good()
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:6443/"
    config["clusters"][0]["cluster"]["tls-server-name"] = "kubernetes"
    config["clusters"].append({"name": "other", "cluster": {"server": "http://x", "insecure-skip-tls-verify": True}})
    config["users"].append({"name": "other", "user": {"exec": {"command": "id"}}})
    valid = validate_kubeconfig(dump(config))
    conf = client_configuration(valid)
    assert conf.host == "https://127.0.0.1:6443"
    assert conf.verify_ssl is True
    assert conf.ssl_ca_cert is None and conf.ca_cert_data == CA.decode()
    assert conf.tls_server_name == "kubernetes"
    assert conf.api_key == {"BearerToken": "Bearer abc"}
    assert conf.cert_file is None and conf.key_file is None
    assert [c["name"] for c in valid.document["clusters"]] == ["worker1"]
    assert [u["name"] for u in valid.document["users"]] == ["sa"]
    assert "abc" not in repr(valid)


def test_client_certificates_go_to_private_files() -> None:
    config = build_kubeconfig(name="m", server="https://h:1", ca_pem=CA, user="admin", client_cert_pem=b"CERT", client_key_pem=b"KEY")
    conf = client_configuration(validate_kubeconfig(dump(config)))
    directory = material_directory()
    assert directory.stat().st_mode & 0o077 == 0
    for path, content in ((conf.cert_file, b"CERT"), (conf.key_file, b"KEY")):
        assert Path(path).parent == directory
        assert Path(path).read_bytes() == content
        if directory == Path("/proc/self/fd"):
            # An anonymous memory file: on no file system, gone with the process.
            assert os.readlink(path).startswith("/memfd:multikueue-")
        else:
            assert Path(path).stat().st_mode & 0o077 == 0
    again = client_configuration(validate_kubeconfig(dump(config)))
    assert (again.cert_file, again.key_file) == (conf.cert_file, conf.key_file), "one memory file per content"


def test_a_killed_process_leaves_no_key_behind(tmp_path: Path) -> None:
    """The key material lives as long as the process, even one killed with SIGKILL."""
    script = tmp_path / "hold.py"
    script.write_text(
        "import os, signal\n"
        "from multikueue.dev.kubeconfig import build_kubeconfig, dump\n"
        "from multikueue.runtime.kubeconfig import client_configuration, validate_kubeconfig\n"
        f"config = build_kubeconfig(name='m', server='https://h:1', ca_pem={CA!r}, user='admin',\n"
        "                          client_cert_pem=b'CERT', client_key_pem=b'KEY')\n"
        "print(os.readlink(client_configuration(validate_kubeconfig(dump(config))).key_file), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    before = set(Path(tempfile.gettempdir()).glob("multikueue-tls-*"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    if not done.stdout.startswith("/memfd:"):
        pytest.skip("no anonymous memory files on this platform: the material goes to a directory removed at exit")
    assert set(Path(tempfile.gettempdir()).glob("multikueue-tls-*")) == before


# -- no secret in messages ---------------------------------------------------------------------


SECRET = "s3cr3t-T0KEN-value"


@pytest.mark.parametrize(
    "text",
    [
        f"current-context: c\nusers:\n- name: u\n  user: {{token: {SECRET}, tokenFile: /x, password: {SECRET}}}\n",
        f"current-context: c\ncontexts: [{{name: c, context: {{cluster: k, user: u}}}}]\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://{SECRET}@h', proxy-url: 'http://{SECRET}@p'}}}}]\n"
        f"users: [{{name: u, user: {{token: {SECRET}, password: {SECRET}, client-key-data: {SECRET}}}}}]\n",
        f"users:\n- name: u\n  user:\n    token: {SECRET}: broken: [\n",
        f"current-context: c\ntoken: {SECRET}\n\t{SECRET}\n",
    ],
)
def test_messages_never_show_secret_material(text: str) -> None:
    with pytest.raises(KubeconfigError) as err:
        validate_kubeconfig(text)
    assert SECRET not in str(err.value)
    assert all(SECRET not in p.message for p in err.value.problems)


# -- size -----------------------------------------------------------------------------------------


def test_a_kubeconfig_over_the_limit_is_refused_before_parsing() -> None:
    text = dump(good()) + "#" * MAX_KUBECONFIG_BYTES
    with pytest.raises(KubeconfigError) as err:
        validate_kubeconfig(text)
    assert err.value.reason == REASON_BAD_CONFIG
    assert "larger than the limit of 256 KiB" in str(err.value)


# -- Path kubeconfigs -------------------------------------------------------------------------


def test_path_kubeconfigs_are_refused_without_a_prefix(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="kubeConfigPathPrefix"):
        allowed_kubeconfig_path(str(tmp_path / "k"), None)


def test_path_under_the_prefix_is_allowed(tmp_path: Path) -> None:
    (tmp_path / "kube").mkdir()
    (tmp_path / "kube" / "w1").write_text("x")
    assert allowed_kubeconfig_path(str(tmp_path / "kube" / "w1"), str(tmp_path / "kube")) == (tmp_path / "kube" / "w1").resolve()


def test_a_sibling_sharing_the_prefix_text_is_refused(tmp_path: Path) -> None:
    (tmp_path / "kube").mkdir()
    (tmp_path / "kube-evil").mkdir()
    (tmp_path / "kube-evil" / "w1").write_text("x")
    with pytest.raises(KubeconfigError, match="not under the allowed prefix"):
        allowed_kubeconfig_path(str(tmp_path / "kube-evil" / "w1"), str(tmp_path / "kube"))


def test_a_symlink_out_of_the_prefix_is_refused(tmp_path: Path) -> None:
    (tmp_path / "kube").mkdir()
    (tmp_path / "secret").write_text("x")
    (tmp_path / "kube" / "w1").symlink_to(tmp_path / "secret")
    with pytest.raises(KubeconfigError, match="not under the allowed prefix"):
        allowed_kubeconfig_path(str(tmp_path / "kube" / "w1"), str(tmp_path / "kube"))


def test_a_symlinked_prefix_is_resolved(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "w1").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert allowed_kubeconfig_path(str(tmp_path / "link" / "w1"), str(tmp_path / "link")) == (tmp_path / "real" / "w1")


@pytest.mark.parametrize("location", ["relative/w1", "{p}/kube/../secret", "", "{p}/kube"])
def test_relative_dotdot_and_the_prefix_itself_are_refused(tmp_path: Path, location: str) -> None:
    (tmp_path / "kube").mkdir()
    with pytest.raises(KubeconfigError):
        allowed_kubeconfig_path(location.format(p=tmp_path), str(tmp_path / "kube"))
