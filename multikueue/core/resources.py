"""Resource requests of pods and pod sets, as exact decimals.

Quota is counted in the same units Kubernetes schedules in, so a pod's
request is computed the way the kubelet and kube-scheduler see it
(``k8s.io/component-helpers/resource.PodRequests``):

- a container's request for a resource defaults to its limit when only the
  limit is set (the API server does the same defaulting for pods);
- app containers run together, so their requests add up;
- sidecars (init containers with ``restartPolicy: Always``) start before the
  app containers and keep running, so they add to the app containers and to
  every regular init container that starts after them;
- regular init containers run one at a time before the app containers, so
  the pod needs the largest of them (plus the sidecars already running);
- the pod needs ``max(apps + sidecars, largest init step)``, plus the
  RuntimeClass ``overhead``;
- pod-level ``spec.resources`` (requests, defaulting to limits), when set,
  replaces the container sum for the resources it names.

A pod set asks for ``count`` such pods. Values are :class:`decimal.Decimal`
parsed with :func:`multikueue.api.quantity.parse_quantity`; an unparsable
quantity raises ``ValueError``. Workload pod templates are opaque to the API
server, so such input can arrive: :func:`pod_spec_errors` lists what is wrong
(unparsable quantities, requests above limits) so the Workload can be told
instead of crashing anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from multikueue.api.quantity import format_quantity, parse_quantity

__all__ = [
    "Requests",
    "add",
    "container_requests",
    "format_requests",
    "max_of",
    "parse_resource_list",
    "pod_requests",
    "pod_spec_errors",
    "scaled",
]

#: Resource name -> amount, e.g. ``{"cpu": Decimal("1.5"), "memory": Decimal(2**30)}``.
Requests = dict[str, Decimal]


def parse_resource_list(resources: Mapping[str, Any] | None) -> Requests:
    """A ``ResourceList`` dict (``{"cpu": "500m"}``) as exact amounts."""
    return {name: parse_quantity(value) for name, value in (resources or {}).items()}


def add(*parts: Mapping[str, Decimal]) -> Requests:
    """The resource-wise sum of several request maps."""
    total: Requests = {}
    for part in parts:
        for name, value in part.items():
            total[name] = total.get(name, Decimal(0)) + value
    return total


def max_of(*parts: Mapping[str, Decimal]) -> Requests:
    """The resource-wise maximum of several request maps."""
    result: Requests = {}
    for part in parts:
        for name, value in part.items():
            if name not in result or value > result[name]:
                result[name] = value
    return result


def scaled(requests: Mapping[str, Decimal], factor: int) -> Requests:
    """Every amount multiplied by ``factor`` (per-pod requests x pod count)."""
    return {name: value * factor for name, value in requests.items()}


def format_requests(requests: Mapping[str, Decimal]) -> dict[str, str]:
    """Amounts written back as Kubernetes quantities (``{"cpu": "1500m"}``)."""
    return {name: format_quantity(value) for name, value in requests.items()}


def _requests_defaulting_to_limits(resources: Mapping[str, Any] | None) -> Requests:
    """``requests``, with ``limits`` filling in resources that have no request."""
    resources = resources or {}
    requests = parse_resource_list(resources.get("limits"))
    requests.update(parse_resource_list(resources.get("requests")))
    return requests


def container_requests(container: Mapping[str, Any]) -> Requests:
    """What one container asks for (requests, defaulting to limits)."""
    return _requests_defaulting_to_limits(container.get("resources"))


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def pod_requests(pod_spec: Mapping[str, Any] | None) -> Requests:
    """What one pod of this ``PodSpec`` dict needs while it runs (see the module docstring)."""
    spec = pod_spec or {}
    apps = add(*(container_requests(c) for c in _containers(spec.get("containers"))))
    sidecars: Requests = {}
    largest_init: Requests = {}
    for init in _containers(spec.get("initContainers")):
        own = container_requests(init)
        if _is_sidecar(init):
            sidecars = add(sidecars, own)
            step = sidecars
        else:
            step = add(own, sidecars)
        largest_init = max_of(largest_init, step)
    requests = max_of(add(apps, sidecars), largest_init)
    pod_level = _requests_defaulting_to_limits(spec.get("resources"))
    requests.update(pod_level)
    return add(requests, parse_resource_list(spec.get("overhead")))


def _containers(value: Any) -> Iterable[Mapping[str, Any]]:
    if not isinstance(value, list):
        return ()
    return (c for c in value if isinstance(c, Mapping))


def _quantity_errors(resources: Mapping[str, Any], path: str) -> list[str]:
    """Unparsable quantities among ``requests``/``limits`` (or ``overhead``) of ``resources``."""
    errors: list[str] = []
    for kind in ("requests", "limits", "overhead"):
        values = resources.get(kind) or {}
        if not isinstance(values, Mapping):
            errors.append(f"{path}.{kind}: Invalid value: {values!r}: must be an object")
            continue
        for name, value in values.items():
            try:
                parse_quantity(value)
            except (ValueError, TypeError) as err:
                errors.append(f"{path}.{kind}[{name}]: Invalid value: {value!r}: {err}")
    return errors


def _over_limit(resources: Mapping[str, Any], path: str) -> list[str]:
    requests = parse_resource_list(resources.get("requests"))
    limits = parse_resource_list(resources.get("limits"))
    names = sorted(name for name, value in requests.items() if name in limits and value > limits[name])
    if not names:
        return []
    quoted = ",".join(f'"{name}"' for name in names)
    return [f"{path}: Invalid value: [{quoted}]: requests must not exceed its limits"]


def pod_spec_errors(pod_spec: Mapping[str, Any] | None, path: str = "spec") -> list[str]:
    """What makes a ``PodSpec`` dict unusable for quota: bad quantities, requests above limits.

    Messages follow upstream Kueue's resource validation (``field.Invalid``
    with ``requests must not exceed its limits``); ``path`` prefixes them.
    """
    spec = pod_spec or {}
    # (path of the owner, its resources dict, path of that resources dict)
    parts: list[tuple[str, Any, str]] = []
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(_containers(spec.get(kind))):
            owner = f"{path}.{kind}[{index}]"
            parts.append((owner, container.get("resources") or {}, f"{owner}.resources"))
    if spec.get("resources") is not None:
        parts.append((f"{path}.resources", spec["resources"], f"{path}.resources"))
    errors: list[str] = []
    for owner, resources, resources_path in parts:
        if not isinstance(resources, Mapping):
            errors.append(f"{resources_path}: Invalid value: {resources!r}: must be an object")
            continue
        bad = _quantity_errors(resources, resources_path)
        errors.extend(bad or _over_limit(resources, owner))
    overhead = spec.get("overhead") or {}
    if isinstance(overhead, Mapping):
        errors.extend(_quantity_errors({"overhead": overhead}, path))
    return errors
