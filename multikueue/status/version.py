"""The version of running controllers, from the ``/version`` of their health port.

A deployed controller (``config/default``: pods labelled
``app.kubernetes.io/name=multikueue``) is asked through the apiserver's pod
proxy (``/api/v1/namespaces/NS/pods/POD:PORT/proxy/version``), so only the
user's kubeconfig is needed (and the ``pods/proxy`` permission cluster
admins have); a controller run as a process is asked at its address
(``--controller-url``). The image each pod runs is shown too, as kueuectl
shows it, and is all that is said when the pod cannot be asked.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from multikueue.status.calls import call
from multikueue.status.errors import api_status, describe
from multikueue.status.manager import MANAGER_TIMEOUT, StatusError

__all__ = ["CONTROLLER_SELECTOR", "ControllerVersion", "deployed_versions", "health_port", "url_version"]

#: The labels config/manager/deployment.yaml gives the controller's pods.
CONTROLLER_SELECTOR = "app.kubernetes.io/name=multikueue,app.kubernetes.io/component=controller-manager"
#: The container and port names in that Deployment.
CONTAINER, PORT_NAME = "manager", "health"


@dataclass(frozen=True)
class ControllerVersion:
    """What one controller said, or why it could not be asked."""

    where: str
    version: str | None = None
    image: str | None = None
    error: str | None = None


def _version_of(document: Any) -> str:
    if isinstance(document, dict) and isinstance(document.get("version"), str):
        return document["version"]
    raise ValueError("the answer has no version field (a controller older than /version?)")


def url_version(url: str, timeout: float = 5.0) -> ControllerVersion:
    """Ask ``url`` (``http://HOST:HEALTH_PORT``, ``/version`` appended unless given)."""
    target = url.rstrip("/") if url.rstrip("/").endswith("/version") else url.rstrip("/") + "/version"
    try:
        with urllib.request.urlopen(target, timeout=timeout) as response:  # noqa: S310 - an address the user gave
            return ControllerVersion(target, version=_version_of(json.loads(response.read())))
    except urllib.error.HTTPError as exc:
        return ControllerVersion(target, error=f"{exc.code} {exc.reason}")
    except (OSError, ValueError) as exc:
        return ControllerVersion(target, error=describe(exc) if isinstance(exc, OSError) else str(exc))


def health_port(pod: dict[str, Any]) -> tuple[int | None, str | None]:
    """The ``health`` port and the image of the pod's ``manager`` container (the first container otherwise)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    container = next((c for c in containers if c.get("name") == CONTAINER), containers[0] if containers else {})
    port = next((p.get("containerPort") for p in container.get("ports") or [] if p.get("name") == PORT_NAME), None)
    return port, container.get("image")


def deployed_versions(api: client.ApiClient, namespace: str, selector: str = CONTROLLER_SELECTOR) -> list[ControllerVersion]:
    """Each controller pod in ``namespace``: its image and the version its health port answers."""
    host = api.configuration.host
    try:
        pods = call(client.CoreV1Api(api).list_namespaced_pod, namespace, label_selector=selector, _request_timeout=MANAGER_TIMEOUT)
    except ApiException as exc:
        if exc.status == 403:
            raise StatusError(f"not allowed to list pods in {namespace} on the manager at {host} ({api_status(exc)})") from None
        if not exc.status:
            raise StatusError(f"cannot reach the manager at {host}: {api_status(exc)}") from None
        raise StatusError(f"the manager at {host} answered {api_status(exc)} when listing pods in {namespace}") from None
    except Exception as exc:  # noqa: BLE001 - network failures come in many types
        raise StatusError(f"cannot reach the manager at {host}: {describe(exc)}") from None
    found = []
    for pod in sorted(api.sanitize_for_serialization(pods.items), key=lambda p: p["metadata"]["name"]):
        name = pod["metadata"]["name"]
        where = f"pod {namespace}/{name}"
        port, image = health_port(pod)
        if port is None:
            found.append(ControllerVersion(where, image=image, error=f"no container port named {PORT_NAME}"))
            continue
        if (pod.get("status") or {}).get("phase") != "Running":
            found.append(ControllerVersion(where, image=image, error=f"pod {(pod.get('status') or {}).get('phase') or 'not running'}"))
            continue
        try:
            response = client.CoreV1Api(api).connect_get_namespaced_pod_proxy_with_path(
                f"{name}:{port}", namespace, "version", _preload_content=False, _request_timeout=MANAGER_TIMEOUT
            )
            status = int(getattr(response, "status", 200) or 200)
            if status >= 400:
                # 404: a controller older than /version, or another server on that port.
                found.append(ControllerVersion(where, image=image, error=f"pod proxy answered {status} {getattr(response, 'reason', '')}".rstrip()))
                continue
            data = json.loads(response.data)
            found.append(ControllerVersion(where, version=_version_of(data), image=image))
        except ApiException as exc:
            found.append(ControllerVersion(where, image=image, error=f"pod proxy answered {api_status(exc)}"))
        except ValueError as exc:
            found.append(ControllerVersion(where, image=image, error=str(exc)))
        except Exception as exc:  # noqa: BLE001
            found.append(ControllerVersion(where, image=image, error=describe(exc)))
    return found
