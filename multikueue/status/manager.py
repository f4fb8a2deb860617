"""Reading the manager: its kubeconfig, then its Workloads, MultiKueueClusters and AdmissionChecks.

Every failure that makes the report impossible becomes a :class:`StatusError`
whose text is the single line the command prints before exiting with 1, and
which says which of the usual suspects it is: a kubeconfig that cannot be
loaded, an apiserver that does not answer, credentials it refuses, or the
``kueue.x-k8s.io`` CRDs missing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from multikueue.api import AdmissionCheck, KueueObject, MultiKueueCluster, Workload
from multikueue.api.constants import GROUP, VERSION
from multikueue import USER_AGENT
from multikueue.status.calls import call
from multikueue.status.errors import api_status, describe

__all__ = ["MANAGER_TIMEOUT", "ManagerSnapshot", "StatusError", "load_client", "read_snapshot"]

#: (connect, read) seconds for each request to the manager.
MANAGER_TIMEOUT = (3, 15)


class StatusError(Exception):
    """The report cannot be made; the message is one line for stderr."""


class ManagerSnapshot(BaseModel):
    """The manager's objects the report is built from, parsed."""

    model_config = ConfigDict(frozen=True)

    workloads: list[Workload] = Field(default_factory=list)
    clusters: list[MultiKueueCluster] = Field(default_factory=list)
    checks: list[AdmissionCheck] = Field(default_factory=list)
    #: Objects left out because they do not parse, one line each.
    warnings: list[str] = Field(default_factory=list)


def _kubeconfig_path(explicit: str | None) -> str | None:
    """``--kubeconfig``, else ``$KUBECONFIG`` (read now: the client library reads it at import), else ~/.kube/config."""
    if explicit:
        return explicit
    env = os.environ.get("KUBECONFIG")
    if env:
        return env
    default = Path.home() / ".kube" / "config"
    return str(default) if default.exists() else None


def load_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An API client for the manager, kubectl's way: a kubeconfig file, or in-cluster credentials.

    Unlike the kubeconfigs of workers, the user's own kubeconfig is not
    restricted: exec plugins and files are how most clusters log people in.
    Requests are not retried, so an unreachable manager fails fast.
    """
    configuration = client.Configuration()
    path = _kubeconfig_path(kubeconfig)
    if path is not None:
        missing = [p for p in path.split(os.pathsep) if p and not Path(p).expanduser().exists()]
        if len(missing) == len([p for p in path.split(os.pathsep) if p]):
            raise StatusError(f"kubeconfig {path} not found")
        try:
            config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        except (config.ConfigException, ValueError, TypeError, OSError) as exc:
            raise StatusError(f"cannot use kubeconfig {path}: {_one_line(exc)}") from None
    else:
        if context:
            raise StatusError(f"--context {context} given but no kubeconfig found (--kubeconfig, $KUBECONFIG, ~/.kube/config)")
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            raise StatusError(
                "no kubeconfig: pass --kubeconfig, set KUBECONFIG or create ~/.kube/config"
            ) from None
    configuration.retries = False
    api = client.ApiClient(configuration)
    api.user_agent = USER_AGENT  # audit logs and metrics name the CLI, as they name the controller
    return api


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _list(api: client.ApiClient, plural: str, namespace: str | None) -> list[dict[str, Any]]:
    objects = client.CustomObjectsApi(api)
    if namespace:
        result = call(
            objects.list_namespaced_custom_object, GROUP, VERSION, namespace, plural, _request_timeout=MANAGER_TIMEOUT
        )
    else:
        result = call(objects.list_cluster_custom_object, GROUP, VERSION, plural, _request_timeout=MANAGER_TIMEOUT)
    return list(result.get("items") or [])


def _parse(model: type[KueueObject], items: list[dict[str, Any]], warnings: list[str]) -> list[Any]:
    parsed: list[Any] = []
    for item in items:
        try:
            parsed.append(model.from_k8s(item))
        except (ValidationError, ValueError) as exc:
            meta = item.get("metadata") or {}
            name = "/".join(p for p in (meta.get("namespace"), meta.get("name")) if p)
            warnings.append(f"{model.kind} {name} left out: it does not parse ({_one_line(exc)})")
    return parsed


def read_snapshot(api: client.ApiClient, namespace: str | None = None) -> ManagerSnapshot:
    """Workloads (of ``namespace``, or all), MultiKueueClusters and AdmissionChecks of the manager.

    All three lists are tried before a missing CRD is reported, so the
    message names every missing one at once.
    """
    host = api.configuration.host
    lists: dict[str, list[dict[str, Any]]] = {}
    missing: list[str] = []
    for model in (Workload, MultiKueueCluster, AdmissionCheck):
        try:
            lists[model.plural] = _list(api, model.plural, namespace if model.namespaced else None)
        except ApiException as exc:
            if exc.status == 404:
                missing.append(f"{model.plural}.{GROUP}")
                continue
            if exc.status == 401:
                raise StatusError(f"the manager at {host} refused the kubeconfig's credentials ({api_status(exc)})") from None
            if exc.status == 403:
                raise StatusError(
                    f"not allowed to list {model.plural}.{GROUP} on the manager at {host} ({api_status(exc)})"
                ) from None
            if not exc.status:
                raise StatusError(f"cannot reach the manager at {host}: {api_status(exc)}") from None
            raise StatusError(
                f"the manager at {host} answered {api_status(exc)} when listing {model.plural}.{GROUP}"
            ) from None
        except Exception as exc:  # noqa: BLE001 - network failures come in many types
            raise StatusError(f"cannot reach the manager at {host}: {describe(exc)}") from None
    if missing:
        raise StatusError(
            f"the Kueue CRDs are not installed on the manager at {host}: {', '.join(missing)} ({VERSION}) not found"
        )
    warnings: list[str] = []
    return ManagerSnapshot(
        workloads=_parse(Workload, lists[Workload.plural], warnings),
        clusters=_parse(MultiKueueCluster, lists[MultiKueueCluster.plural], warnings),
        checks=_parse(AdmissionCheck, lists[AdmissionCheck.plural], warnings),
        warnings=warnings,
    )
