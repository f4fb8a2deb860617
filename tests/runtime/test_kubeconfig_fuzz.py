"""Differential fuzzing of kubeconfig validation against the kubernetes client's own loader.

Hypothesis generates kubeconfig documents, hostile shapes included (int, None
and duplicate names, exec plugins and auth providers, file fields, insecure
flags, non-https servers, a current-context naming a missing or ambiguous
entry, unknown fields). For every document the validator accepts:

- the kubernetes client's loader (``load_kube_config_from_dict`` into a fresh
  ``Configuration``), given the *original* document, would use exactly what
  was validated: host, CA, token, client certificate, TLS verification on, no
  proxy, no file named by the document;
- building our client from the validated values and sending a request with it
  opens no file (except the private TLS material directory, for client
  certificates) and starts no process, checked with an audit hook
  (``sys.addaudithook``) that only records while the code under test runs in
  this thread.

For every document it refuses, it refuses with :class:`KubeconfigError` and
nothing else.
"""

from __future__ import annotations

import atexit
import base64
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from datetime import datetime, timedelta, timezone

import pytest
import urllib3
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client, config

from multikueue.runtime.privatefiles import material_directory
from multikueue.runtime.kubeconfig import (
    KubeconfigError,
    ValidKubeconfig,
    client_configuration,
    validate_kubeconfig,
)

pytestmark = pytest.mark.unit



def _self_signed() -> tuple[bytes, bytes]:
    """A real certificate and key, so that TLS set-up (cadata, client certificate) really runs."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fuzz")])
    now = datetime.now(timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


CA, KEY = _self_signed()
HOST_FILE = "/etc/hostname"
_FORBIDDEN_PREFIXES = ("subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "pty.spawn")


# -- the audit hook ---------------------------------------------------------------------------


class _Recorder:
    """Collects audit events of the watched thread while ``watching``; audit hooks cannot be removed."""

    def __init__(self) -> None:
        self.thread: int | None = None
        self.events: list[tuple[str, tuple[Any, ...]]] = []

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if self.thread is None or threading.get_ident() != self.thread:
            return
        if event == "open" or event.startswith(_FORBIDDEN_PREFIXES):
            self.events.append((event, args))

    @contextmanager
    def watching(self) -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
        self.events = []
        self.thread = threading.get_ident()
        try:
            yield self.events
        finally:
            self.thread = None


_recorder = _Recorder()
sys.addaudithook(_recorder)


def _opened(events: list[tuple[str, tuple[Any, ...]]]) -> list[str]:
    return [str(args[0]) for event, args in events if event == "open"]


def _started(events: list[tuple[str, tuple[Any, ...]]]) -> list[str]:
    return [event for event, _ in events if event != "open"]


# -- a server that accepts and hangs up (so a request really connects) ----------------------


@pytest.fixture(scope="module")
def hangup_port() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


# -- documents ----------------------------------------------------------------------------------

PORT = "PORT"  # replaced by the hang-up server's port
NAMES = st.one_of(
    st.sampled_from(["a", "a", "a", "b", "1"]), st.integers(0, 1), st.none(), st.just(""), st.booleans(), st.just(["a"])
)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


SERVERS = st.sampled_from(
    [
        f"https://127.0.0.1:{PORT}",
        f"https://127.0.0.1:{PORT}/",
        f"https://127.0.0.1:{PORT}/prefix",
        f"HTTPS://127.0.0.1:{PORT}",
        f"http://127.0.0.1:{PORT}",
        f"127.0.0.1:{PORT}",
        f"https://user:pw@127.0.0.1:{PORT}",
        f"https://127.0.0.1:{PORT}?x=1",
        "https://",
        "",
        5,
        None,
    ]
)
CLUSTER_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "server": SERVERS,
    "certificate-authority-data": st.sampled_from([_b64(CA), _b64(CA), "QUJD", "%%", 7]),
    "certificate-authority": st.sampled_from([HOST_FILE, "", None]),
    "insecure-skip-tls-verify": st.sampled_from([False, False, True, "true", 1, 0, None]),
    "tls-server-name": st.sampled_from(["kubernetes", "", 3]),
    "proxy-url": st.sampled_from(["http://127.0.0.1:3128", ""]),
    "extensions": st.just([]),
    "disable-compression": st.booleans(),
    "surprise": st.integers(),
}
USER_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "token": st.sampled_from(["tok", "tok", "", 5, None]),
    "tokenFile": st.sampled_from([HOST_FILE, "", None]),
    "exec": st.just({"command": "id", "apiVersion": "client.authentication.k8s.io/v1"}),
    "auth-provider": st.just({"name": "oidc", "config": {}}),
    "client-certificate-data": st.sampled_from([_b64(CA), "%%"]),
    "client-key-data": st.sampled_from([_b64(KEY), "%%"]),
    "client-certificate": st.just(HOST_FILE),
    "client-key": st.just(HOST_FILE),
    "username": st.just("u"),
    "password": st.just("p"),
    "as": st.just("system:admin"),
    "extensions": st.just([]),
}


GOOD_CLUSTERS = st.tuples(
    st.sampled_from([f"https://127.0.0.1:{PORT}", f"https://127.0.0.1:{PORT}/", f"https://127.0.0.1:{PORT}/prefix"]),
    st.sampled_from((True, True, True, False)),
    st.sampled_from([{}, {}, {"tls-server-name": "fuzz"}, {"insecure-skip-tls-verify": False}, {"extensions": []}]),
).map(lambda t: {"server": t[0], **({"certificate-authority-data": _b64(CA)} if t[1] else {}), **t[2]})
GOOD_USERS = st.sampled_from(
    [
        {"token": "tok"},
        {"client-certificate-data": _b64(CA), "client-key-data": _b64(KEY)},
        {"token": "tok", "client-certificate-data": _b64(CA), "client-key-data": _b64(KEY)},
        {},
    ]
)


def _mostly(usual: Any, other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual`` about three times in four, else ``other``: hostile shapes stay common enough without drowning the accepted ones."""
    return st.sampled_from((True, True, True, False)).flatmap(lambda use: st.just(usual) if use else other)


def _body(fields: dict[str, st.SearchStrategy[Any]], usual: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[Any]:
    """Mostly a usable body, often with one or two extra fields; sometimes sparse or not a mapping at all."""
    extra = st.dictionaries(st.sampled_from(sorted(fields)), st.none(), max_size=2).flatmap(
        lambda keys: st.fixed_dictionaries({k: fields[k] for k in keys})
    )
    with_extra = st.tuples(usual, extra).map(lambda t: {**t[0], **t[1]})
    sparse = st.sampled_from([{}, None, "text", []])
    return st.sampled_from((0, 0, 1, 1, 1, 2, 3)).flatmap(lambda i: (usual, with_extra, extra, sparse)[i])


def _entries(key: str, body: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The entry named "a" first (usually), then possibly others, with hostile names among them."""
    first = st.fixed_dictionaries({"name": _mostly("a", NAMES), key: body})
    other = st.fixed_dictionaries({"name": _mostly("b", NAMES), key: body})
    listed = st.tuples(first, st.lists(other, max_size=2)).map(lambda t: [t[0], *t[1]])
    rare = st.one_of(st.lists(other, max_size=1), st.none(), st.just("x"))
    return st.sampled_from((True, True, True, True, True, False)).flatmap(lambda use: listed if use else rare)


CONTEXT = _mostly(
    {"cluster": "a", "user": "a"},
    st.one_of(
        st.fixed_dictionaries({"cluster": NAMES, "user": NAMES}),
        st.fixed_dictionaries({"cluster": st.just("a"), "user": st.just("a"), "namespace": st.just("ns")}),
        st.fixed_dictionaries({"cluster": NAMES, "user": NAMES, "weird": st.just(1)}),
    ),
)
DOCUMENTS = st.fixed_dictionaries(
    {
        "apiVersion": st.just("v1"),
        "kind": st.just("Config"),
        "current-context": _mostly("a", st.one_of(NAMES, st.just("missing"))),
        "contexts": _entries("context", CONTEXT),
        "clusters": _entries("cluster", _body(CLUSTER_FIELDS, GOOD_CLUSTERS)),
        "users": _entries("user", _body(USER_FIELDS, GOOD_USERS)),
    }
)


def _with_port(document: Any, port: int) -> Any:
    if isinstance(document, dict):
        return {k: _with_port(v, port) for k, v in document.items()}
    if isinstance(document, list):
        return [_with_port(v, port) for v in document]
    if isinstance(document, str):
        return document.replace(PORT, str(port))
    return document


# -- the properties --------------------------------------------------------------------------

_LOADER_TEMP = Path(tempfile.mkdtemp(prefix="kubeconfig-loader-"))
atexit.register(shutil.rmtree, _LOADER_TEMP, ignore_errors=True)  # the loader writes certificates there


def _without_nulls(document: Any) -> Any:
    """The document with null-valued keys left out: what client-go (upstream Kueue's loader) reads a null as.

    The Python loader refuses some nulls (``insecure-skip-tls-verify: null`` raises "Expected key"), where
    client-go and the validator read them as absent; the comparison is with what the keys mean, not with
    that quirk.
    """
    if isinstance(document, dict):
        return {k: _without_nulls(v) for k, v in document.items() if v is not None}
    if isinstance(document, list):
        return [_without_nulls(v) for v in document]
    return document


def _loader_configuration(document: dict[str, Any]) -> tuple[client.Configuration, list[tuple[str, tuple[Any, ...]]]]:
    loaded = client.Configuration()
    with _recorder.watching() as events:
        config.load_kube_config_from_dict(
            _without_nulls(yaml.safe_load(yaml.safe_dump(document))), client_configuration=loaded, temp_file_path=str(_LOADER_TEMP)
        )
    return loaded, list(events)


def _content(path: str | None) -> bytes | None:
    return None if path is None else Path(path).read_bytes()


def _assert_loader_agrees(document: dict[str, Any], valid: ValidKubeconfig) -> None:
    loaded, events = _loader_configuration(document)
    assert not _started(events), f"the loader would start a process: {_started(events)}"
    outside = [p for p in _opened(events) if Path(p).parent != _LOADER_TEMP]
    assert not outside, f"the loader would open files named by the document: {outside}"
    assert loaded.host == valid.server
    assert loaded.verify_ssl is True
    assert _content(loaded.ssl_ca_cert) == valid.ca_data
    assert (loaded.tls_server_name or None) == valid.tls_server_name
    expected_key = {"BearerToken": f"Bearer {valid.token}"} if valid.token else {}
    assert loaded.api_key == expected_key
    assert _content(loaded.cert_file) == valid.client_cert_data
    assert _content(loaded.key_file) == valid.client_key_data
    assert not loaded.username and not loaded.password
    assert loaded.proxy == client.Configuration().proxy
    # What we build holds the same values, without any file for the CA or the token.
    ours = client_configuration(valid)
    assert (ours.host, ours.verify_ssl, ours.tls_server_name) == (loaded.host, True, loaded.tls_server_name)
    assert ours.api_key == loaded.api_key
    assert ours.ssl_ca_cert is None
    assert (ours.ca_cert_data.encode() if ours.ca_cert_data else None) == valid.ca_data


def _build_and_use(valid: ValidKubeconfig) -> list[tuple[str, tuple[Any, ...]]]:
    with _recorder.watching() as events:
        configuration = client_configuration(valid)
        configuration.retries = False
        api = client.ApiClient(configuration)
        try:
            api.call_api("GET", configuration.host + "/readyz", header_params={}, _request_timeout=(0.5, 0.5))
        except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            # The server hangs up during the handshake: the TLS set-up (CA, client certificate) has run.
            assert "cadata" not in str(exc) and "PEM lib" not in str(exc), f"TLS set-up failed: {exc}"
        finally:
            api.close()
    return list(events)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(document=DOCUMENTS)
def test_an_accepted_kubeconfig_is_used_exactly_as_validated(document: dict[str, Any], hangup_port: int) -> None:
    document = _with_port(document, hangup_port)
    text = yaml.safe_dump(document)
    with _recorder.watching() as events:
        try:
            valid = validate_kubeconfig(text)
        except KubeconfigError:
            valid = None
    assert not events, f"validation touched files or processes: {events}"
    if valid is None:
        return
    _assert_loader_agrees(document, valid)
    used = _build_and_use(valid)
    assert not _started(used), f"building or using the client started a process: {_started(used)}"
    material = material_directory()
    foreign = [p for p in _opened(used) if Path(p).parent != material]
    assert not foreign, f"building or using the client opened files: {foreign}"
    if valid.client_cert_data is None:
        assert not _opened(used), "a token kubeconfig must not open any file"


@settings(max_examples=200, deadline=None, database=None)
@given(text=st.one_of(st.text(max_size=200), DOCUMENTS.map(yaml.safe_dump).map(lambda t: t[: len(t) // 2])))
def test_any_text_is_accepted_or_refused_with_a_kubeconfig_error(text: str) -> None:
    try:
        validate_kubeconfig(text)
    except KubeconfigError:
        pass


def test_the_generator_reaches_both_outcomes(hangup_port: int) -> None:
    """Guards the strategy: the properties above are vacuous if nothing (or everything) is accepted."""
    outcomes: set[bool] = set()

    @settings(max_examples=100, deadline=None, database=None)
    @given(document=DOCUMENTS)
    def probe(document: dict[str, Any]) -> None:
        try:
            validate_kubeconfig(yaml.safe_dump(_with_port(document, hangup_port)))
            outcomes.add(True)
        except KubeconfigError:
            outcomes.add(False)

    probe()
    assert outcomes == {True, False}


def test_the_audit_hook_sees_opens_and_processes() -> None:
    """Guards the hook: a property that records nothing proves nothing."""
    with _recorder.watching() as events:
        Path(HOST_FILE).read_bytes()
        try:
            import subprocess

            subprocess.run(["true"], check=False)
        except OSError:
            pass
    assert HOST_FILE in _opened(events)
    assert any(e.startswith("subprocess.") for e in _started(events))


def test_the_loader_follows_the_exact_name_the_old_check_confused() -> None:
    """The bypass this suite guards against: ``user: 1`` makes the loader use the entry named 1, not "1"."""
    document = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": 1, "user": 1}}],
        "clusters": [
            {"name": "1", "cluster": {"server": "https://good.example"}},
            {"name": 1, "cluster": {"server": "https://evil.example", "insecure-skip-tls-verify": True}},
        ],
        "users": [{"name": "1", "user": {"token": "harmless"}}, {"name": 1, "user": {"tokenFile": HOST_FILE}}],
    }
    loaded, events = _loader_configuration(document)
    assert loaded.host == "https://evil.example" and loaded.verify_ssl is False
    assert HOST_FILE in _opened(events)
    with pytest.raises(KubeconfigError):
        validate_kubeconfig(yaml.safe_dump(document))
