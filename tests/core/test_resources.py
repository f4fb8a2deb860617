"""Pod and pod-set requests: limits as requests, init and sidecar containers, overhead, counts."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from multikueue.api.workload import PodSet
from multikueue.core.flavors import PodSetRequest
from multikueue.core.resources import add, format_requests, max_of, pod_requests, pod_spec_errors, scaled

pytestmark = pytest.mark.unit


def container(name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any):
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources, **extra}


def test_app_containers_add_up() -> None:
    spec = {"containers": [container("a", {"cpu": "500m", "memory": "1Gi"}), container("b", {"cpu": 1})]}
    assert pod_requests(spec) == {"cpu": Decimal("1.5"), "memory": Decimal(2**30)}


def test_limits_are_requests_when_requests_are_missing() -> None:
    spec = {"containers": [container("a", requests={"cpu": "250m"}, limits={"cpu": "1", "nvidia.com/gpu": 2})]}
    # The explicit cpu request wins over the limit; the gpu limit becomes the request.
    assert pod_requests(spec) == {"cpu": Decimal("0.25"), "nvidia.com/gpu": Decimal(2)}


def test_regular_init_containers_count_by_their_maximum() -> None:
    spec = {
        "initContainers": [container("init-big", {"cpu": "3"}), container("init-small", {"cpu": "1", "memory": "2Gi"})],
        "containers": [container("app", {"cpu": "2", "memory": "1Gi"})],
    }
    # cpu: max(app 2, init 3) = 3; memory: max(app 1Gi, init 2Gi) = 2Gi.
    assert pod_requests(spec) == {"cpu": Decimal(3), "memory": Decimal(2 * 2**30)}


def test_sidecars_run_with_the_app_and_with_later_init_containers() -> None:
    spec = {
        "initContainers": [
            container("sidecar", {"cpu": "1"}, restartPolicy="Always"),
            container("init", {"cpu": "2"}),
        ],
        "containers": [container("app", {"cpu": "1"})],
    }
    # App phase: app 1 + sidecar 1 = 2; init phase: init 2 + sidecar started before it 1 = 3.
    assert pod_requests(spec) == {"cpu": Decimal(3)}


def test_init_container_before_a_sidecar_does_not_include_it() -> None:
    spec = {
        "initContainers": [
            container("init", {"cpu": "2"}),
            container("sidecar", {"cpu": "1"}, restartPolicy="Always"),
        ],
        "containers": [container("app", {"cpu": "4"})],
    }
    assert pod_requests(spec) == {"cpu": Decimal(5)}


def test_overhead_is_added() -> None:
    spec = {"containers": [container("app", {"cpu": "1"})], "overhead": {"cpu": "250m", "memory": "64Mi"}}
    assert pod_requests(spec) == {"cpu": Decimal("1.25"), "memory": Decimal(64 * 2**20)}


def test_pod_level_resources_replace_the_container_sum() -> None:
    spec = {"containers": [container("app", {"cpu": "1", "memory": "1Gi"})], "resources": {"limits": {"cpu": "3"}}}
    assert pod_requests(spec) == {"cpu": Decimal(3), "memory": Decimal(2**30)}


def test_empty_or_missing_spec() -> None:
    assert pod_requests(None) == {}
    assert pod_requests({"containers": [{"name": "a", "image": "x"}]}) == {}


def test_bad_quantity_is_refused() -> None:
    with pytest.raises(ValueError):
        pod_requests({"containers": [container("a", {"cpu": "lots"})]})


def test_pod_set_totals_multiply_by_count() -> None:
    pod_set = PodSet.model_validate(
        {
            "name": "workers",
            "count": 3,
            "template": {"spec": {"containers": [container("app", {"cpu": "500m", "memory": "1Gi"})]}},
        }
    )
    request = PodSetRequest.from_pod_set(pod_set)
    assert request.per_pod == {"cpu": Decimal("0.5"), "memory": Decimal(2**30)}
    assert request.total == {"cpu": Decimal("1.5"), "memory": Decimal(3 * 2**30)}
    assert format_requests(request.total) == {"cpu": "1500m", "memory": "3Gi"}


def test_helpers() -> None:
    a = {"cpu": Decimal(1)}
    b = {"cpu": Decimal(2), "memory": Decimal(5)}
    assert add(a, b) == {"cpu": Decimal(3), "memory": Decimal(5)}
    assert max_of(a, b) == {"cpu": Decimal(2), "memory": Decimal(5)}
    assert scaled(b, 2) == {"cpu": Decimal(4), "memory": Decimal(10)}


def test_pod_spec_errors() -> None:
    spec = {
        "containers": [
            container("ok", {"cpu": "1"}, {"cpu": "2"}),
            container("over", {"cpu": "3", "memory": "2Gi"}, {"cpu": "2", "memory": "1Gi"}),
            container("bad", {"cpu": "a lot"}),
        ],
        "overhead": {"memory": "?"},
    }
    errors = pod_spec_errors(spec, "spec.podSets[0].template.spec")
    assert errors[0] == (
        'spec.podSets[0].template.spec.containers[1]: Invalid value: ["cpu","memory"]: '
        "requests must not exceed its limits"
    )
    assert errors[1].startswith("spec.podSets[0].template.spec.containers[2].resources.requests[cpu]: Invalid value:")
    assert errors[2].startswith("spec.podSets[0].template.spec.overhead[memory]: Invalid value:")
    assert len(errors) == 3
    assert pod_spec_errors({"containers": [container("a", {"cpu": "1"})]}) == []
