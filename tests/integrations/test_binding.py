"""How a copy names its prebuilt Workload: label when it fits, annotation otherwise, read back from either."""

from __future__ import annotations

import pytest

from multikueue.integrations.binding import bind, bound_workload_name, is_label_value

pytestmark = pytest.mark.unit

KEY = "kueue.x-k8s.io/prebuilt-workload-name"


def test_a_short_name_goes_in_the_label() -> None:
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    bind(labels, annotations, "job-hello-abcde")
    assert labels == {KEY: "job-hello-abcde"} and annotations == {}
    assert bound_workload_name({"metadata": {"labels": labels}}) == "job-hello-abcde"


def test_a_long_name_goes_in_the_annotation_and_drops_a_stale_label() -> None:
    name = "job-" + "y" * 60 + "-abcde"
    assert not is_label_value(name)
    labels = {KEY: "stale"}
    annotations: dict[str, str] = {}
    bind(labels, annotations, name)
    assert labels == {} and annotations == {KEY: name}
    assert bound_workload_name({"metadata": {"labels": labels, "annotations": annotations}}) == name


@pytest.mark.parametrize("obj", [{}, {"metadata": None}, {"metadata": {"labels": "oops", "annotations": 3}}])
def test_unbound_or_malformed_objects_have_no_binding(obj: dict) -> None:
    assert bound_workload_name(obj) is None
