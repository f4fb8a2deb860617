"""Bounds on tenants' objects: CEL evaluation budget, depth and size of converted and handled objects."""

from __future__ import annotations

import time
from typing import Any

import pytest

from multikueue.api.constants import MultiKueue
from multikueue.integrations.external import cel
from multikueue.integrations.external.adapter import GenericAdapter, default_resource_ref
from multikueue.integrations.external.cel import (
    MAX_DEPTH,
    MAX_SIZE,
    CelEvaluationError,
    ResultType,
    cel_input,
    check_object,
    compile_cel,
)
from multikueue.integrations.external.entries import load_frameworks

pytestmark = pytest.mark.unit

WHERE = "externalFrameworks[Widget.v1.example.com].finished"
#: Quadratic in the length of ``spec.items``: every pair is compared (never true, so nothing short-circuits).
QUADRATIC = "object.spec.items.exists(a, object.spec.items.exists(b, a.v == b.v + 1000000))"


def nested(depth: int) -> dict[str, Any]:
    """A Widget nested ``depth`` levels deep in all (the object itself is level 1, its ``spec`` level 2)."""
    inner: dict[str, Any] = {}
    for _ in range(depth - 2):
        inner = {"a": inner}
    return {"kind": "Widget", "metadata": {"name": "deep", "namespace": "team-a"}, "spec": inner}


@pytest.fixture
def widget_adapter() -> GenericAdapter:
    loaded = load_frameworks([{
        "name": "Widget.v1.example.com",
        "finished": "has(object.status.done) && object.status.done",
        "workload": {"podSets": '[{"name": "main", "count": 1, "requests": {"cpu": "1"}}]'},
    }])
    assert loaded.problems == []
    framework = loaded.frameworks["Widget.v1.example.com"]
    return GenericAdapter(framework, default_resource_ref(framework))


def test_quadratic_expression_over_300_items_stops_within_the_budget() -> None:
    program = compile_cel(QUADRATIC, ResultType.BOOL, where=WHERE)
    obj = {"spec": {"items": [{"v": i} for i in range(300)]}}
    started = time.perf_counter()
    with pytest.raises(CelEvaluationError) as caught:
        program.evaluate(obj)
    elapsed = time.perf_counter() - started
    print(f"\nquadratic exists(exists()) over 300 items: stopped after {elapsed:.3f} s ({caught.value.message})")
    assert caught.value.bounded and not caught.value.missing
    assert str(caught.value).startswith(WHERE + ": the evaluation took ")
    assert "was stopped" in caught.value.message
    assert elapsed < cel.MAX_SECONDS + 1.0


def test_the_step_budget_alone_stops_it_deterministically(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cel, "MAX_SECONDS", 3600.0)
    monkeypatch.setattr(cel, "MAX_STEPS", 2000)  # a tenth of the real one, to keep the test quick
    program = compile_cel(QUADRATIC, ResultType.BOOL, where=WHERE)
    with pytest.raises(CelEvaluationError, match="more than 2000 steps"):
        program.evaluate({"spec": {"items": [{"v": i} for i in range(300)]}})
    # Nested comprehensions share the one budget: the steps of the inner ones count.
    assert compile_cel(QUADRATIC, ResultType.BOOL, where=WHERE).evaluate({"spec": {"items": [{"v": 1}] * 10}}) is False


def test_the_clock_stops_it_whatever_the_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cel, "MAX_STEPS", 10**9)
    monkeypatch.setattr(cel, "MAX_SECONDS", 0.2)
    program = compile_cel(QUADRATIC, ResultType.BOOL, where=WHERE)
    started = time.perf_counter()
    with pytest.raises(CelEvaluationError, match="longer than 0.2 s"):
        program.evaluate({"spec": {"items": [{"v": i} for i in range(300)]}})
    assert time.perf_counter() - started < 1.5


def test_ordinary_expressions_are_far_from_the_budget() -> None:
    # A linear pass over a long list, as a real entry would do, still evaluates.
    program = compile_cel("object.spec.items.all(i, i.v >= 0)", ResultType.BOOL, where=WHERE)
    assert program.evaluate({"spec": {"items": [{"v": i} for i in range(500)]}}) is True
    # The quadratic one on a short list too: the budget is about cost, not shape.
    quadratic = compile_cel(QUADRATIC, ResultType.BOOL, where=WHERE)
    assert quadratic.evaluate({"spec": {"items": [{"v": i} for i in range(20)]}}) is False


def test_600_levels_deep_is_a_clear_error_not_a_recursion_error() -> None:
    program = compile_cel("has(object.spec.a)", ResultType.BOOL, where=WHERE)
    with pytest.raises(CelEvaluationError) as caught:
        program.evaluate(nested(600))
    assert caught.value.bounded
    assert str(caught.value) == (
        f"{WHERE}: Widget team-a/deep nests deeper than {MAX_DEPTH} levels; it is not handled: flatten it"
    )


def test_depth_limit_is_exact() -> None:
    check_object(nested(MAX_DEPTH), "here")
    cel_input(nested(MAX_DEPTH))
    with pytest.raises(CelEvaluationError, match="nests deeper than"):
        check_object(nested(MAX_DEPTH + 1), "here")
    with pytest.raises(CelEvaluationError, match="nests deeper than"):
        cel_input(nested(MAX_DEPTH + 1), "here")


def test_deeper_than_python_recursion_is_still_a_clear_error() -> None:
    with pytest.raises(CelEvaluationError, match="nests deeper than"):
        check_object(nested(50_000), "here")
    with pytest.raises(CelEvaluationError, match="nests deeper than"):
        cel_input(nested(50_000), "here")


def test_an_object_over_the_size_limit_is_refused() -> None:
    big = {"kind": "Widget", "metadata": {"name": "big", "namespace": "team-a"}, "spec": {"blob": "x" * (MAX_SIZE + 1)}}
    with pytest.raises(CelEvaluationError, match="Widget team-a/big is larger than 3 MiB"):
        check_object(big, "here")
    with pytest.raises(CelEvaluationError, match="Widget team-a/big is larger than 3 MiB"):
        cel_input(big, "here")


def test_many_small_values_count_towards_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cel, "MAX_SIZE", 256 * 1024)  # the same counting as at 3 MiB, a twelfth of the work
    many = {"kind": "Widget", "metadata": {"name": "many"}, "spec": {"items": [[0] * 100 for _ in range(400)]}}
    with pytest.raises(CelEvaluationError, match="Widget many is larger than 0.25 MiB"):
        check_object(many, "here")
    with pytest.raises(CelEvaluationError, match="Widget many is larger than 0.25 MiB"):
        cel_input(many, "here")
    few = {"kind": "Widget", "metadata": {"name": "few"}, "spec": {"items": [[0] * 100 for _ in range(250)]}}
    check_object(few, "here")
    cel_input(few, "here")


def test_a_result_as_deep_as_allowed_comes_back() -> None:
    program = compile_cel("object.spec", ResultType.MAP, where=WHERE)
    assert program.evaluate(nested(MAX_DEPTH)) == nested(MAX_DEPTH)["spec"]


def test_the_adapter_refuses_a_deep_object_everywhere_it_copies_or_evaluates(widget_adapter: GenericAdapter) -> None:
    deep = nested(600)
    deep["spec"]["managedBy"] = MultiKueue.MANAGED_BY
    ok = nested(3)
    for call in (
        lambda: widget_adapter.remote_copy(deep, origin="m", workload_name="wl"),
        lambda: widget_adapter.status_patch(ok, deep),
        lambda: widget_adapter.status_patch(deep, ok),
        lambda: widget_adapter.finished(deep),
        lambda: widget_adapter.is_finished(deep),
        lambda: widget_adapter.check(deep),
    ):
        with pytest.raises(CelEvaluationError) as caught:
            call()
        assert caught.value.bounded
        assert "Widget team-a/deep nests deeper than 100 levels" in str(caught.value)
        assert str(caught.value).startswith("externalFrameworks[Widget.v1.example.com]")
    widget_adapter.check(ok)
