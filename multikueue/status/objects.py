"""Reading and patching Kueue objects on the manager for ``multikueue list|stop|resume``.

Every failure becomes a :class:`~multikueue.status.manager.StatusError`
whose text is the one line the command prints before exiting with 1: the
object that is missing (and where), the apiserver that does not answer, the
permission it refuses, or the CRD that is not installed.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from multikueue.api.constants import GROUP, VERSION
from multikueue.status.calls import call
from multikueue.status.errors import api_status, describe
from multikueue.status.listing import ListKind
from multikueue.status.manager import MANAGER_TIMEOUT, StatusError, _kubeconfig_path

__all__ = ["context_namespace", "get_object", "list_objects", "patch_object"]


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's context (kubectl's default for ``-n``), else ``default``."""
    path = _kubeconfig_path(kubeconfig)
    if path is None:
        return "default"
    try:
        contexts, active = config.list_kube_config_contexts(config_file=path)
    except (config.ConfigException, OSError, ValueError, TypeError):
        return "default"
    chosen = next((c for c in contexts or [] if c.get("name") == context), None) if context else active
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


def _where(kind: ListKind, name: str | None, namespace: str | None) -> str:
    what = f"{kind.kind} {namespace}/{name}" if name and namespace and kind.namespaced else f"{kind.kind} {name}" if name else kind.plural
    return what


def _fail(exc: BaseException, api: client.ApiClient, kind: ListKind, verb: str, name: str | None, namespace: str | None) -> StatusError:
    host = api.configuration.host
    what = _where(kind, name, namespace)
    if isinstance(exc, ApiException):
        if exc.status == 404 and name:
            # A 404 on a named object is either the object or its whole kind missing; the list tells them apart.
            return StatusError(f"{what} not found on the manager at {host}")
        if exc.status == 404:
            return StatusError(f"the Kueue CRDs are not installed on the manager at {host}: {kind.plural}.{GROUP} ({VERSION}) not found")
        if exc.status == 401:
            return StatusError(f"the manager at {host} refused the kubeconfig's credentials ({api_status(exc)})")
        if exc.status == 403:
            return StatusError(f"not allowed to {verb} {kind.plural}.{GROUP} on the manager at {host} ({api_status(exc)})")
        if not exc.status:
            return StatusError(f"cannot reach the manager at {host}: {api_status(exc)}")
        return StatusError(f"the manager at {host} answered {api_status(exc)} to {verb} {what}")
    return StatusError(f"cannot reach the manager at {host}: {describe(exc)}")


def list_objects(
    api: client.ApiClient, kind: ListKind, namespace: str | None, selector: str | None = None
) -> list[dict[str, Any]]:
    """The objects of ``kind`` (of ``namespace``, or all namespaces when None), as the API returns them."""
    objects = client.CustomObjectsApi(api)
    extra: dict[str, Any] = {"_request_timeout": MANAGER_TIMEOUT}
    if selector:
        extra["label_selector"] = selector
    try:
        if kind.namespaced and namespace:
            result = call(objects.list_namespaced_custom_object, GROUP, VERSION, namespace, kind.plural, **extra)
        else:
            result = call(objects.list_cluster_custom_object, GROUP, VERSION, kind.plural, **extra)
    except Exception as exc:  # noqa: BLE001 - network failures come in many types
        raise _fail(exc, api, kind, "list", None, namespace) from None
    return list(result.get("items") or [])


def get_object(api: client.ApiClient, kind: ListKind, name: str, namespace: str | None) -> dict[str, Any]:
    objects = client.CustomObjectsApi(api)
    try:
        if kind.namespaced:
            return call(  # type: ignore[no-any-return]
                objects.get_namespaced_custom_object, GROUP, VERSION, namespace, kind.plural, name, _request_timeout=MANAGER_TIMEOUT
            )
        return call(objects.get_cluster_custom_object, GROUP, VERSION, kind.plural, name, _request_timeout=MANAGER_TIMEOUT)  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001
        raise _fail(exc, api, kind, "get", name, namespace) from None


def patch_object(
    api: client.ApiClient, kind: ListKind, name: str, namespace: str | None, patch: dict[str, Any]
) -> dict[str, Any]:
    """Merge-patch the object; a missing one is reported, never created."""
    objects = client.CustomObjectsApi(api)
    try:
        if kind.namespaced:
            return call(  # type: ignore[no-any-return]
                objects.patch_namespaced_custom_object, GROUP, VERSION, namespace, kind.plural, name, patch,
                _request_timeout=MANAGER_TIMEOUT,
            )
        return call(  # type: ignore[no-any-return]
            objects.patch_cluster_custom_object, GROUP, VERSION, kind.plural, name, patch, _request_timeout=MANAGER_TIMEOUT
        )
    except Exception as exc:  # noqa: BLE001
        raise _fail(exc, api, kind, "patch", name, namespace) from None
