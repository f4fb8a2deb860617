"""Fixtures shared across the test tree.

The tests run with ``--import-mode=importlib``, so a test module cannot
``import conftest``: what several test files share is a fixture here (or in
the ``conftest.py`` of the folder that needs it), and a fixture that returns
a function or a small object stands for a plain helper. The fixtures of the
local clusters themselves (``integration_clusters``, ``namespace``, ...) come
from ``multikueue.dev.pytest_plugin``.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
import structlog
import yaml
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters
from multikueue.runtime.kube import AsyncKube, load_api_client


@pytest.fixture(autouse=True)
def _structlog_restored() -> Any:
    """Undo a test's structlog set-up (the CLI's ``configure``) after it.

    ``configure`` binds the logger to the ``sys.stderr`` of its moment, which
    under pytest is a capture file closed after that test: later code logging
    from the same process (an informer in an in-process test) would fail on it.
    """
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest_asyncio.fixture
async def admin_kube(integration_clusters: Clusters) -> AsyncIterator[Callable[[int], AsyncKube]]:
    """``admin_kube(i)``: an async client with the admin kubeconfig of cluster ``i`` (0 is the manager), closed after the test."""
    made: list[AsyncKube] = []

    def make(index: int) -> AsyncKube:
        kube = AsyncKube(load_api_client(str(integration_clusters.kubeconfigs[index]), 4), workers=4)
        made.append(kube)
        return kube

    yield make
    for kube in made:
        await kube.close()


#: Where the manager keeps the Secrets that MultiKueueClusters name.
KUEUE_NAMESPACE = "kueue-system"


class MultiKueueSetup:
    """Writes the manager's MultiKueue objects: kubeconfig Secrets, MultiKueueClusters, configs and checks."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.kueue = o.Kueue(api)

    def worker_kubeconfig(self, worker: str = "worker1") -> dict[str, Any]:
        """The kubeconfig of ``worker`` from the Secret ``<worker>-secret`` the dev clusters create."""
        data = client.CoreV1Api(self.api).read_namespaced_secret(f"{worker}-secret", KUEUE_NAMESPACE).data["kubeconfig"]
        return yaml.safe_load(base64.b64decode(data))  # type: ignore[no-any-return]

    @staticmethod
    def _data(kubeconfig: dict[str, Any] | str) -> dict[str, str]:
        text = kubeconfig if isinstance(kubeconfig, str) else yaml.safe_dump(kubeconfig)
        return {"kubeconfig": base64.b64encode(text.encode()).decode()}

    def put_secret(self, name: str, kubeconfig: dict[str, Any] | str) -> None:
        """Creates Secret ``kueue-system/<name>`` holding ``kubeconfig`` (a document or its text)."""
        body = client.V1Secret(metadata=client.V1ObjectMeta(name=name, namespace=KUEUE_NAMESPACE), data=self._data(kubeconfig))
        client.CoreV1Api(self.api).create_namespaced_secret(KUEUE_NAMESPACE, body)

    def update_secret(self, name: str, kubeconfig: dict[str, Any] | str) -> None:
        """Replaces the kubeconfig in Secret ``kueue-system/<name>``."""
        client.CoreV1Api(self.api).patch_namespaced_secret(name, KUEUE_NAMESPACE, {"data": self._data(kubeconfig)})

    def put_cluster(self, name: str, location: str, location_type: str = "Secret") -> None:
        """Creates MultiKueueCluster ``name`` whose kubeconfig is at ``location`` (a Secret's name or a Path)."""
        self.kueue.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster", "metadata": {"name": name},
                           "spec": {"clusterSource": {"kubeConfig": {"locationType": location_type, "location": location}}}})

    def put_config(self, name: str, clusters: list[str]) -> None:
        """Creates MultiKueueConfig ``name`` listing ``clusters``."""
        self.kueue.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": name},
                           "spec": {"clusters": clusters}})

    def put_check(self, name: str, config: str) -> None:
        """Creates the MultiKueue AdmissionCheck ``name`` whose parameters are MultiKueueConfig ``config``."""
        self.kueue.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": name},
                           "spec": {"controllerName": "kueue.x-k8s.io/multikueue",
                                    "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config}}})


@pytest.fixture
def kueue(integration_clusters: Clusters, integration_controller: ControllerProcess) -> o.Kueue:
    """The Kueue objects of the integration manager, with the controller running."""
    assert integration_controller.alive
    return o.Kueue(integration_clusters.manager)


@pytest.fixture
def multikueue_setup(integration_clusters: Clusters) -> MultiKueueSetup:
    """Writes MultiKueue objects on the integration manager (see ``MultiKueueSetup``)."""
    return MultiKueueSetup(integration_clusters.manager)
