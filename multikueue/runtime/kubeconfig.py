"""Validation of the kubeconfigs that reach worker clusters.

A kubeconfig in a Secret is written by whoever can write Secrets in the
controller namespace, yet it is used with the controller's own identity and
file system. Anything that makes the controller run a program (exec plugins,
auth providers), read a local file (token, CA or client certificate files) or
skip server verification is therefore refused, as upstream Kueue does. The
check is pure: it takes the document text and says what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

#: Condition reasons on ``MultiKueueCluster`` (upstream's values).
REASON_INSECURE = "InsecureKubeConfig"
REASON_BAD_CONFIG = "BadConfig"

_FILE_FIELDS_CLUSTER = ("certificate-authority",)
_FILE_FIELDS_USER = ("client-certificate", "client-key", "tokenFile")


@dataclass(frozen=True)
class KubeconfigProblem:
    """Why a kubeconfig cannot be used; ``reason`` goes into the condition."""

    reason: str
    message: str


@dataclass(frozen=True)
class ValidKubeconfig:
    """The parts of an accepted kubeconfig the remote client needs."""

    document: dict[str, Any]
    context: str
    cluster: str
    user: str
    server: str


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


def _named(document: dict[str, Any], section: str, key: str, name: str) -> dict[str, Any] | None:
    for entry in document.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(key)
            return value if isinstance(value, dict) else {}
    return None


def validate_kubeconfig(text: str | bytes) -> ValidKubeconfig:
    """Parse and check a kubeconfig; raise :class:`KubeconfigError` listing every problem."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeconfigError([KubeconfigProblem(REASON_BAD_CONFIG, f"kubeconfig is not valid YAML: {exc}")]) from None
    if not isinstance(document, dict):
        raise KubeconfigError([KubeconfigProblem(REASON_BAD_CONFIG, "kubeconfig is not a YAML mapping")])

    problems: list[KubeconfigProblem] = []
    context_name = document.get("current-context")
    if not context_name:
        raise KubeconfigError([KubeconfigProblem(REASON_BAD_CONFIG, "kubeconfig has no current-context")])
    context = _named(document, "contexts", "context", context_name)
    if context is None:
        raise KubeconfigError(
            [KubeconfigProblem(REASON_BAD_CONFIG, f"current-context {context_name!r} is not among the contexts")]
        )
    cluster_name = str(context.get("cluster") or "")
    user_name = str(context.get("user") or "")
    cluster = _named(document, "clusters", "cluster", cluster_name)
    user = _named(document, "users", "user", user_name)
    if cluster is None:
        problems.append(
            KubeconfigProblem(REASON_BAD_CONFIG, f"context {context_name!r} names cluster {cluster_name!r}, which is not defined")
        )
        cluster = {}
    if user is None:
        problems.append(
            KubeconfigProblem(REASON_BAD_CONFIG, f"context {context_name!r} names user {user_name!r}, which is not defined")
        )
        user = {}
    server = str(cluster.get("server") or "")
    if not server and cluster_name:
        problems.append(KubeconfigProblem(REASON_BAD_CONFIG, f"cluster {cluster_name!r} has no server"))

    if cluster.get("insecure-skip-tls-verify"):
        problems.append(
            KubeconfigProblem(REASON_INSECURE, f"cluster {cluster_name!r} sets insecure-skip-tls-verify")
        )
    for field in _FILE_FIELDS_CLUSTER:
        if cluster.get(field):
            problems.append(
                KubeconfigProblem(
                    REASON_INSECURE,
                    f"cluster {cluster_name!r} reads {field} from a file; embed it as {field}-data",
                )
            )
    if "exec" in user:
        problems.append(KubeconfigProblem(REASON_INSECURE, f"user {user_name!r} uses an exec plugin"))
    if "auth-provider" in user:
        problems.append(KubeconfigProblem(REASON_INSECURE, f"user {user_name!r} uses an auth provider"))
    for field in _FILE_FIELDS_USER:
        if user.get(field):
            problems.append(
                KubeconfigProblem(REASON_INSECURE, f"user {user_name!r} reads {field} from a file")
            )
    if user.get("username") or user.get("password"):
        problems.append(KubeconfigProblem(REASON_INSECURE, f"user {user_name!r} uses basic authentication"))
    if problems:
        raise KubeconfigError(problems)
    return ValidKubeconfig(
        document=document, context=context_name, cluster=cluster_name, user=user_name, server=server
    )
