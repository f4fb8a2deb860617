"""Merge patches between two documents."""

from __future__ import annotations

import pytest

from multikueue.integrations.patch import apply_merge_patch, merge_patch

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("current", "wanted"),
    [
        ({}, {}),
        ({"a": 1}, {"a": 1}),
        ({"a": 1}, {"a": 2}),
        ({"a": 1, "b": 2}, {"a": 1}),
        ({"u": {"succeeded": ["x"], "failed": ["y"]}}, {"u": {}}),
        ({"conditions": [{"type": "A"}]}, {"conditions": [{"type": "A"}, {"type": "B"}]}),
        ({"active": 2}, {"succeeded": 2}),
    ],
)
def test_patch_turns_current_into_wanted(current: dict, wanted: dict) -> None:
    assert apply_merge_patch(current, merge_patch(current, wanted)) == wanted


def test_equal_documents_give_an_empty_patch() -> None:
    assert merge_patch({"a": {"b": [1]}}, {"a": {"b": [1]}}) == {}


def test_nested_key_removed_is_nulled() -> None:
    assert merge_patch({"u": {"succeeded": ["x"]}}, {"u": {}}) == {"u": {"succeeded": None}}
