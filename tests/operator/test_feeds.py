"""The feeds' parsing: what of a watched object the cache gets."""

from __future__ import annotations

import pytest

from multikueue.operator.feeds import without_managed_fields

pytestmark = pytest.mark.unit


def test_managed_fields_are_dropped_before_parsing_and_the_body_is_left_alone() -> None:
    body = {
        "kind": "Workload",
        "metadata": {"name": "w", "labels": {"a": "b"}, "managedFields": [{"manager": "kueue", "fieldsV1": {}}]},
        "spec": {"queueName": "q"},
    }
    slim = without_managed_fields(body)
    assert slim == {"kind": "Workload", "metadata": {"name": "w", "labels": {"a": "b"}}, "spec": {"queueName": "q"}}
    assert "managedFields" in body["metadata"]  # kopf's body is not changed
    plain = {"metadata": {"name": "w"}}
    assert without_managed_fields(plain) is plain  # nothing to drop: no copy
