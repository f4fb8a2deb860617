"""The advice a worker's MultiKueueCluster carries when its apiserver refuses to list Workloads."""

from __future__ import annotations

import pytest

from multikueue.controllers.multikueue.connection import listing_advice

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (429, "try again later"),  # storage (re)initializing: not an RBAC or CRD problem
        (403, "RBAC"),
        (401, "RBAC"),
        (404, "CRDs are installed"),
        (500, "RBAC of the kubeconfig's user and that the Kueue CRDs"),
    ],
)
def test_the_advice_fits_the_answer(status: int, says: str) -> None:
    assert says in listing_advice(status)
    if status == 429:
        assert "RBAC" not in listing_advice(status) and "CRD" not in listing_advice(status)
