"""Fixtures of the controllers' integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest_asyncio

from multikueue.dev.pytest_plugin import Clusters
from multikueue.runtime.kube import AsyncKube, load_api_client


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
        kube.close()
