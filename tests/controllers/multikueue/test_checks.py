"""When a MultiKueue AdmissionCheck is active, and what its message says."""

from __future__ import annotations

import pytest

from multikueue.controllers.multikueue.checks import ClusterHealth, active_write_needed, check_status
from multikueue.api import AdmissionCheck, MultiKueueConfig

pytestmark = pytest.mark.unit


def check(params: dict | None = None) -> AdmissionCheck:
    spec: dict = {"controllerName": "kueue.x-k8s.io/multikueue"}
    if params is not None:
        spec["parameters"] = params
    return AdmissionCheck.from_k8s({"metadata": {"name": "mk"}, "spec": spec})


PARAMS = {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "cfg"}
CONFIG = {"cfg": MultiKueueConfig.from_k8s({"metadata": {"name": "cfg"}, "spec": {"clusters": ["w1", "w2"]}})}
UP = ClusterHealth(True, "Active", "Connected")
DOWN = ClusterHealth(False, "ClientConnectionFailed", "cannot reach https://127.0.0.1:1")


def test_all_clusters_active() -> None:
    status = check_status(check(PARAMS), CONFIG, {"w1": UP, "w2": UP})
    assert (status.active, status.reason, status.config) == (True, "Active", "cfg")


def test_some_clusters_inactive_stays_active_and_names_them() -> None:
    status = check_status(check(PARAMS), CONFIG, {"w1": UP, "w2": DOWN})
    assert status.active
    assert status.message == "Inactive clusters: w2 (ClientConnectionFailed: cannot reach https://127.0.0.1:1)"


def test_no_cluster_active() -> None:
    status = check_status(check(PARAMS), CONFIG, {"w1": DOWN})
    assert not status.active and status.reason == "NoUsableClusters"
    assert "w1 (ClientConnectionFailed" in status.message and "w2 (MultiKueueCluster not found)" in status.message


def test_missing_config() -> None:
    status = check_status(check(PARAMS), {}, {})
    assert (status.active, status.reason) == (False, "BadConfig")
    assert status.message == "MultiKueueConfig 'cfg' not found"


@pytest.mark.parametrize("params", [None, {**PARAMS, "kind": "ProvisioningRequestConfig"}, {**PARAMS, "apiGroup": "example.com"}])
def test_parameters_not_naming_a_multikueue_config(params: dict | None) -> None:
    status = check_status(check(params), CONFIG, {"w1": UP})
    assert (status.active, status.reason) == (False, "BadConfig")
    assert "must name a MultiKueueConfig" in status.message


ACTIVE = (True, "Active", "")
NO_CLUSTERS = (False, "NoUsableClusters", "Inactive clusters: w1 (ClientConnectionFailed: refused)")


def test_the_cached_condition_decides_until_this_process_writes() -> None:
    assert not active_write_needed(ACTIVE, None, ACTIVE)
    assert active_write_needed(NO_CLUSTERS, None, ACTIVE)
    assert active_write_needed(None, None, ACTIVE)


def test_after_its_own_write_a_stale_cache_does_not_hide_a_change() -> None:
    """Seen in the HA test: a re-leading replica wrote 'no usable clusters' while connecting; the
    connection's success then compared equal to the cache's stale True and was never written."""
    assert active_write_needed(ACTIVE, NO_CLUSTERS, ACTIVE)
    assert not active_write_needed(NO_CLUSTERS, ACTIVE, ACTIVE)  # written already; the cache lags behind it
