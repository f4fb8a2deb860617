"""The controller reads upstream's Configuration document from its ConfigMap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.errors import DevEnvironmentError
from multikueue.dev.pytest_plugin import Clusters

pytestmark = pytest.mark.integration

UPSTREAM = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health:
  healthProbeBindAddress: :8081
integrations:
  frameworks: [batch/job, kubeflow.org/mpijob]
multiKueue:
  gcInterval: 30s
"""


def config_map(api: client.ApiClient, name: str, text: str) -> None:
    body = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, namespace="kueue-system"),
        data={"controller_manager_config.yaml": text},
    )
    client.CoreV1Api(api).create_namespaced_config_map("kueue-system", body)


def test_unused_sections_are_logged(integration_clusters: Clusters, namespace: str, tmp_path: Path) -> None:
    config_map(integration_clusters.manager, f"cfg-{namespace}", UPSTREAM)
    ctl = ControllerProcess(
        "configured", integration_clusters.kubeconfigs[0], "manager", tmp_path / "ctl.log",
        extra_args=("--config-map", f"cfg-{namespace}"),
    )
    try:
        ctl.start()
        line = o.wait_for(
            lambda: next((json.loads(l) for l in ctl.logs().splitlines() if "sections not used" in l), None),
            10,
            what="the log line about unused sections",
        )
        assert ".health" in line["sections"]
        assert ".integrations.frameworks[kubeflow.org/mpijob]" in line["sections"]
    finally:
        ctl.stop()


def test_a_configmap_that_is_not_yaml_stops_the_start_with_a_clear_message(
    integration_clusters: Clusters, namespace: str, tmp_path: Path
) -> None:
    config_map(integration_clusters.manager, f"bad-{namespace}", "{this is: [not yaml")
    ctl = ControllerProcess(
        "misconfigured", integration_clusters.kubeconfigs[0], "manager", tmp_path / "ctl.log",
        extra_args=("--config-map", f"bad-{namespace}"),
    )
    with pytest.raises(DevEnvironmentError):
        ctl.start(timeout=20)
    # start() gives up when the process exits, or after 20 s on a loaded machine: it must end on its own.
    assert ctl.process is not None
    o.wait_for(lambda: not ctl.process.alive(), 60, what="the misconfigured controller to exit")
    error = json.loads(ctl.logs().strip().splitlines()[-1])
    assert error["event"] == "controller cannot start"
    assert f"ConfigMap kueue-system/bad-{namespace}" in error["error"] and "not valid YAML" in error["error"]
