"""Validation of the kubeconfigs that reach worker clusters, and the client built from them.

A kubeconfig in a Secret is written by whoever can write Secrets in the
controller namespace, yet it is used with the controller's own identity and
file system. Anything that makes the controller run a program (exec plugins,
auth providers), read a local file (token, CA or client certificate files),
skip server verification or talk plain HTTP is therefore refused, as upstream
Kueue does.

Checking a document and then handing the *same* document to the kubernetes
client's loader is not enough: the loader picks entries by exact equality of
names, so a context naming ``cluster: 1`` could be checked against an entry
named ``"1"`` and loaded from one named ``1``. Hence validation refuses
non-string and duplicate names, and the client is built only from the values
that were checked (:func:`client_configuration`), never from the document.
Unknown fields of the chosen entries are refused rather than dropped, so what
the administrator wrote is either used as written or reported.

Messages name entries and fields, never their values: a token or key must not
end up in a condition, an Event or a log line.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes import client

from multikueue.runtime.privatefiles import private_file

#: Condition reasons on ``MultiKueueCluster`` (upstream's values).
REASON_INSECURE = "InsecureKubeConfig"
REASON_BAD_CONFIG = "BadConfig"

#: Largest kubeconfig accepted (bytes). A real one is a few KiB; parsing a
#: multi-MiB document takes seconds of CPU on every reconnect.
MAX_KUBECONFIG_BYTES = 256 * 1024

_FILE_FIELDS_CLUSTER = ("certificate-authority",)
_FILE_FIELDS_USER = ("client-certificate", "client-key", "tokenFile")
#: Fields used from the chosen entries; everything else is refused, except ``_IGNORED``.
_CLUSTER_FIELDS = ("server", "certificate-authority-data", "tls-server-name")
_USER_FIELDS = ("token", "client-certificate-data", "client-key-data")
_CONTEXT_FIELDS = ("cluster", "user", "namespace")
#: Harmless fields written by kubectl and cloud tools; they change nothing the client does.
_IGNORED = ("extensions", "disable-compression")
_INSECURE_USER_FIELDS = {
    "exec": "uses an exec plugin",
    "auth-provider": "uses an auth provider",
    "username": "uses basic authentication",
    "password": "uses basic authentication",
    **{f: f"reads {f} from a file" for f in _FILE_FIELDS_USER},
}
_NAME_SHOWN = 64


@dataclass(frozen=True)
class KubeconfigProblem:
    """Why a kubeconfig cannot be used; ``reason`` goes into the condition."""

    reason: str
    message: str


@dataclass(frozen=True)
class ValidKubeconfig:
    """Exactly what the client is built from: the checked context, cluster and user.

    Secret material is left out of ``repr`` so that logging the object cannot leak it.
    """

    context: str
    cluster: str
    user: str
    server: str
    ca_data: bytes | None = field(default=None, repr=False)
    tls_server_name: str | None = None
    token: str | None = field(default=None, repr=False)
    client_cert_data: bytes | None = field(default=None, repr=False)
    client_key_data: bytes | None = field(default=None, repr=False)

    @property
    def document(self) -> dict[str, Any]:
        """The cleaned kubeconfig: only the checked context, cluster and user, only allowed fields."""
        cluster: dict[str, Any] = {"server": self.server}
        if self.ca_data is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca_data).decode("ascii")
        if self.tls_server_name is not None:
            cluster["tls-server-name"] = self.tls_server_name
        user: dict[str, Any] = {}
        if self.token is not None:
            user["token"] = self.token
        if self.client_cert_data is not None and self.client_key_data is not None:
            user["client-certificate-data"] = base64.b64encode(self.client_cert_data).decode("ascii")
            user["client-key-data"] = base64.b64encode(self.client_key_data).decode("ascii")
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": self.context,
            "contexts": [{"name": self.context, "context": {"cluster": self.cluster, "user": self.user}}],
            "clusters": [{"name": self.cluster, "cluster": cluster}],
            "users": [{"name": self.user, "user": user}],
        }


class KubeconfigError(ValueError):
    def __init__(self, problems: list[KubeconfigProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(p.message for p in problems))

    @property
    def reason(self) -> str:
        """InsecureKubeConfig wins over BadConfig: it is the one that needs an admin's attention."""
        if any(p.reason == REASON_INSECURE for p in self.problems):
            return REASON_INSECURE
        return REASON_BAD_CONFIG


def _bad(message: str) -> KubeconfigError:
    return KubeconfigError([KubeconfigProblem(REASON_BAD_CONFIG, message)])


def _show(name: object) -> str:
    """A name for a message, shortened: names are not secret, but need not fill a condition."""
    text = repr(name)
    return text if len(text) <= _NAME_SHOWN else text[: _NAME_SHOWN - 3] + "..."


def _entries(document: dict[str, Any], section: str, key: str) -> dict[str, dict[str, Any]]:
    """The entries of ``section`` by name; every name must be a distinct non-empty string.

    The client's loader compares names exactly (``1`` is not ``"1"``), and a
    duplicate would leave it to the loader which one is used: both are refused
    so that the entry checked is the only one that can be meant.
    """
    raw = document.get(section)
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise _bad(f"{section} must be a list")
    found: dict[str, dict[str, Any]] = {}
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise _bad(f"{section}[{index}] is not a mapping")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise _bad(f"{section}[{index}] has name {_show(name)}: names must be non-empty strings (quote them)")
        if name in found:
            raise _bad(f"{section} has two entries named {_show(name)}: names must be unique")
        body = entry.get(key)
        if not isinstance(body, dict):
            raise _bad(f"{section} entry {_show(name)}: {key} is missing or not a mapping")
        found[name] = body
    return found


def _decode(value: object, what: str, problems: list[KubeconfigProblem]) -> bytes | None:
    if not isinstance(value, str):
        problems.append(KubeconfigProblem(REASON_BAD_CONFIG, f"{what} is not a string"))
        return None
    try:
        return base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        problems.append(KubeconfigProblem(REASON_BAD_CONFIG, f"{what} is not valid base64"))
        return None


def _check_server(server: object, where: str, problems: list[KubeconfigProblem]) -> str:
    """The server URL without trailing slashes (as the client uses it); only ``https`` with a host."""
    if not isinstance(server, str) or not server:
        problems.append(KubeconfigProblem(REASON_BAD_CONFIG, f"{where} has no server"))
        return ""
    if server != server.strip() or any(ord(c) < 33 or ord(c) == 127 for c in server):
        problems.append(KubeconfigProblem(REASON_BAD_CONFIG, f"{where}: server URL contains whitespace or control characters"))
        return ""
    try:
        parts = urlsplit(server)
        port = parts.port
    except ValueError:
        problems.append(KubeconfigProblem(REASON_BAD_CONFIG, f"{where}: server is not a URL"))
        return ""
    if parts.scheme.lower() != "https":
        problems.append(
            KubeconfigProblem(REASON_INSECURE, f"{where}: server must be an https:// URL (got scheme {parts.scheme!r})")
        )
        return ""
    if parts.username is not None or parts.password is not None:
        # Not echoed: the userinfo may hold a password.
        problems.append(KubeconfigProblem(REASON_INSECURE, f"{where}: server URL must not carry user information"))
        return ""
    if not parts.hostname or parts.query or parts.fragment or (port is not None and port == 0):
        problems.append(
            KubeconfigProblem(REASON_BAD_CONFIG, f"{where}: server {server!r} needs a host and no query or fragment")
        )
        return ""
    return server.rstrip("/")


def _unknown(body: dict[str, Any], allowed: tuple[str, ...], where: str, problems: list[KubeconfigProblem]) -> None:
    for key in body:
        if key in allowed or key in _IGNORED:
            continue
        if key == "proxy-url":
            problems.append(
                KubeconfigProblem(
                    REASON_BAD_CONFIG,
                    f"{where} sets proxy-url, which is not supported: set HTTPS_PROXY in the controller's environment instead",
                )
            )
        else:
            problems.append(
                KubeconfigProblem(REASON_BAD_CONFIG, f"{where} has field {_show(key)}, which is not supported: remove it")
            )


def parse_kubeconfig(text: str | bytes) -> dict[str, Any]:
    """The YAML document as a mapping; :class:`KubeconfigError` (BadConfig) if too large or not a mapping."""
    size = len(text.encode() if isinstance(text, str) else text)
    if size > MAX_KUBECONFIG_BYTES:
        raise _bad(f"kubeconfig is {size} bytes, larger than the limit of {MAX_KUBECONFIG_BYTES // 1024} KiB")
    try:
        # The pure-Python loader on purpose: run in a thread it yields the GIL
        # every few milliseconds, while libyaml's would hold it for the whole
        # parse (about 0.1 s at the size limit) and stall the event loop anyway.
        document = yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506 - a safe loader
    except yaml.MarkedYAMLError as exc:
        # Only the position: the parser's excerpt of the document could show a token.
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise _bad(f"kubeconfig is not valid YAML{where}: {exc.problem or 'syntax error'}") from None
    except yaml.YAMLError:
        raise _bad("kubeconfig is not valid YAML") from None
    if not isinstance(document, dict):
        raise _bad("kubeconfig is not a YAML mapping")
    return document


def validate_kubeconfig(text: str | bytes) -> ValidKubeconfig:
    """Parse and check a kubeconfig; raise :class:`KubeconfigError` listing every problem of the chosen entries."""
    document = parse_kubeconfig(text)
    context_name = document.get("current-context")
    if not context_name:
        raise _bad("kubeconfig has no current-context")
    if not isinstance(context_name, str):
        raise _bad(f"current-context {_show(context_name)} is not a string")
    contexts = _entries(document, "contexts", "context")
    clusters = _entries(document, "clusters", "cluster")
    users = _entries(document, "users", "user")
    context = contexts.get(context_name)
    if context is None:
        raise _bad(f"current-context {_show(context_name)} is not among the contexts")

    problems: list[KubeconfigProblem] = []
    _unknown(context, _CONTEXT_FIELDS, f"context {_show(context_name)}", problems)
    cluster_name, user_name = context.get("cluster"), context.get("user")
    for kind, name in (("cluster", cluster_name), ("user", user_name)):
        if not isinstance(name, str) or not name:
            problems.append(
                KubeconfigProblem(REASON_BAD_CONFIG, f"context {_show(context_name)} names {kind} {_show(name)}: it must be a non-empty string")
            )
    if problems:
        raise KubeconfigError(problems)
    assert isinstance(cluster_name, str) and isinstance(user_name, str)
    cluster = clusters.get(cluster_name)
    user = users.get(user_name)
    if cluster is None:
        problems.append(
            KubeconfigProblem(REASON_BAD_CONFIG, f"context {_show(context_name)} names cluster {_show(cluster_name)}, which is not defined")
        )
        cluster = {}
    if user is None:
        problems.append(
            KubeconfigProblem(REASON_BAD_CONFIG, f"context {_show(context_name)} names user {_show(user_name)}, which is not defined")
        )
        user = {}
    where_cluster, where_user = f"cluster {_show(cluster_name)}", f"user {_show(user_name)}"

    # -- cluster
    insecure = cluster.get("insecure-skip-tls-verify")
    if insecure is not None and insecure is not False:
        problems.append(KubeconfigProblem(REASON_INSECURE, f"{where_cluster} sets insecure-skip-tls-verify"))
    for name in _FILE_FIELDS_CLUSTER:
        if name in cluster:
            problems.append(
                KubeconfigProblem(REASON_INSECURE, f"{where_cluster} reads {name} from a file; embed it as {name}-data")
            )
    _unknown(
        cluster, (*_CLUSTER_FIELDS, "insecure-skip-tls-verify", *_FILE_FIELDS_CLUSTER), where_cluster, problems
    )
    server = _check_server(cluster.get("server"), where_cluster, problems) if clusters.get(cluster_name) is not None else ""
    ca_data = None
    if "certificate-authority-data" in cluster:
        ca_data = _decode(cluster["certificate-authority-data"], f"{where_cluster}: certificate-authority-data", problems)
        if ca_data is not None and b"-----BEGIN CERTIFICATE-----" not in ca_data:
            problems.append(KubeconfigProblem(REASON_BAD_CONFIG, f"{where_cluster}: certificate-authority-data holds no PEM certificate"))
            ca_data = None
    tls_server_name = cluster.get("tls-server-name")
    if tls_server_name is not None and (not isinstance(tls_server_name, str) or not tls_server_name):
        problems.append(KubeconfigProblem(REASON_BAD_CONFIG, f"{where_cluster}: tls-server-name is not a non-empty string"))
        tls_server_name = None

    # -- user
    for name, what in _INSECURE_USER_FIELDS.items():
        if name in user:
            problem = KubeconfigProblem(REASON_INSECURE, f"{where_user} {what}")
            if problem not in problems:
                problems.append(problem)
    _unknown(user, (*_USER_FIELDS, *_INSECURE_USER_FIELDS), where_user, problems)
    token = user.get("token")
    if token is not None and (not isinstance(token, str) or not token):
        problems.append(KubeconfigProblem(REASON_BAD_CONFIG, f"{where_user}: token is not a non-empty string"))
        token = None
    cert = key = None
    if "client-certificate-data" in user or "client-key-data" in user:
        if "client-certificate-data" not in user or "client-key-data" not in user:
            problems.append(
                KubeconfigProblem(REASON_BAD_CONFIG, f"{where_user}: client-certificate-data and client-key-data go together")
            )
        else:
            cert = _decode(user["client-certificate-data"], f"{where_user}: client-certificate-data", problems)
            key = _decode(user["client-key-data"], f"{where_user}: client-key-data", problems)
    if problems:
        raise KubeconfigError(problems)
    return ValidKubeconfig(
        context=context_name,
        cluster=cluster_name,
        user=user_name,
        server=server,
        ca_data=ca_data,
        tls_server_name=tls_server_name,
        token=token,
        client_cert_data=cert,
        client_key_data=key,
    )


# -- the client ------------------------------------------------------------------------


def client_configuration(valid: ValidKubeconfig) -> client.Configuration:
    """A client configuration holding exactly the checked values (never a path from the kubeconfig).

    The CA is given as data (no file); a bearer token goes under the
    Authorization header as the kubernetes client's loader would put it.
    """
    configuration = client.Configuration()
    configuration.host = valid.server
    configuration.verify_ssl = True
    configuration.ssl_ca_cert = None
    if valid.ca_data is not None:
        configuration.ca_cert_data = valid.ca_data.decode("ascii", errors="replace")
    if valid.tls_server_name is not None:
        configuration.tls_server_name = valid.tls_server_name
    if valid.token is not None:
        configuration.api_key = {"BearerToken": f"Bearer {valid.token}"}
    if valid.client_cert_data is not None and valid.client_key_data is not None:
        configuration.cert_file = private_file(valid.client_cert_data)
        configuration.key_file = private_file(valid.client_key_data)
    return configuration


# -- kubeconfig files ------------------------------------------------------------------


def allowed_kubeconfig_path(location: str, prefix: str | None) -> Path:
    """The resolved path of a ``locationType: Path`` kubeconfig, if it lies under ``prefix``.

    Refused (BadConfig) when no prefix is configured, when the path is not
    absolute or holds ``..``, or when it resolves (symlinks followed) outside
    the prefix; the comparison is by path components, so ``/etc/kube-evil`` is
    not under ``/etc/kube``.
    """
    if not prefix:
        raise _bad(
            f"kubeconfig path {location!r} refused: Path kubeconfigs are disabled; "
            "set multiKueue.kubeConfigPathPrefix in the controller Configuration to the directory that holds them"
        )
    raw = Path(location)
    if not location or not raw.is_absolute() or ".." in raw.parts:
        raise _bad(f"kubeconfig path {location!r} must be absolute and must not contain '..'")
    allowed = Path(prefix).resolve()
    resolved = raw.resolve()
    if not resolved.is_relative_to(allowed) or resolved == allowed:
        raise _bad(f"kubeconfig path {location!r} is not under the allowed prefix {str(allowed)!r}")
    return resolved
