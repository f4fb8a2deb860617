"""The local control planes report the Kubernetes release they are built from."""

from __future__ import annotations

import subprocess

import pytest
from kubernetes import client

from multikueue.dev.binaries import KUBERNETES_VERSION
from multikueue.dev.pytest_plugin import Clusters

pytestmark = pytest.mark.integration


def test_the_apiserver_reports_its_release(integration_clusters: Clusters) -> None:
    """Clients that check the server's version (``kubectl version``, knative in Tekton's controller) need a real one."""
    info = client.VersionApi(integration_clusters.manager).get_code()
    assert info.git_version == KUBERNETES_VERSION
    assert (info.major, info.minor) == ("1", KUBERNETES_VERSION.split(".")[1])


def test_kubectl_version_works_against_it(integration_clusters: Clusters) -> None:
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(integration_clusters.kubeconfigs[0]), "version", "-o", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert f'"gitVersion": "{KUBERNETES_VERSION}"' in out
