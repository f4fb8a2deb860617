"""CEL expressions of external-framework entries: load-time checks, evaluation, results as JSON."""

from __future__ import annotations

import pytest

from multikueue.integrations.external.cel import (
    CelCompileError,
    CelEvaluationError,
    ResultType,
    cel_input,
    compile_cel,
)

pytestmark = pytest.mark.unit

WHERE = "externalFrameworks[PipelineRun.v1.tekton.dev].finished"
FINISHED = (
    "has(object.status) && has(object.status.conditions) && "
    'object.status.conditions.exists(c, c.type == "Succeeded" && c.status != "Unknown")'
)


def run(source: str, result_type: ResultType, obj: dict) -> object:
    return compile_cel(source, result_type, where=WHERE).evaluate(obj)


def test_bool_over_object() -> None:
    done = {"status": {"conditions": [{"type": "Succeeded", "status": "False"}]}}
    running = {"status": {"conditions": [{"type": "Succeeded", "status": "Unknown"}]}}
    assert run(FINISHED, ResultType.BOOL, done) is True
    assert run(FINISHED, ResultType.BOOL, running) is False
    assert run(FINISHED, ResultType.BOOL, {}) is False


def test_results_come_back_as_plain_json() -> None:
    value = run(
        '{"a": [1, 2.5, "x", true, null], "b": {"c": object.metadata.name}, '
        '"t": string(timestamp("2024-01-01T00:00:00Z"))}',
        ResultType.MAP,
        {"metadata": {"name": "n"}},
    )
    assert value == {"a": [1, 2.5, "x", True, None], "b": {"c": "n"}, "t": "2024-01-01T00:00:00Z"}
    assert type(value["a"][0]) is int and type(value["a"][3]) is bool  # type: ignore[index]
    assert type(value) is dict


@pytest.mark.parametrize(
    ("source", "result_type", "words"),
    [
        ('"x"', ResultType.BOOL, "gives a string, expected a bool"),
        ("1", ResultType.BOOL, "gives an int, expected a bool"),
        ("null", ResultType.MAP, "gives a null, expected a map"),
        ('{"a": 1}', ResultType.LIST, "gives a map, expected a list"),
        ("[]", ResultType.MAP, "gives a list, expected a map"),
        ('has(object.spec.x) ? true : "no"', ResultType.BOOL, "gives a string, expected a bool"),
        ("1 +", ResultType.BOOL, "syntax error: the expression ends too early"),
        ("a b", ResultType.BOOL, "syntax error at line 1, column 3: unexpected 'b'"),
        ('"abc', ResultType.BOOL, "unexpected character '\"'"),
        ("foo(object)", ResultType.BOOL, "undeclared reference to 'foo'"),
        ("obj.status", ResultType.BOOL, "undeclared reference to 'obj'"),
        ("1 / 0", ResultType.BOOL, "divide by zero"),
        ('{1: "a"}', ResultType.MAP, "non-string key"),
        ('b"x"', ResultType.MAP, "bytes"),
        ("", ResultType.BOOL, "non-empty string"),
    ],
)
def test_refused_at_load(source: str, result_type: ResultType, words: str) -> None:
    with pytest.raises(CelCompileError) as err:
        compile_cel(source, result_type, where=WHERE)
    assert words in str(err.value)


@pytest.mark.parametrize(
    "source",
    [
        'object.status.conditions.exists(c, c.type == "Succeeded")',  # no conditions on the sample
        "object.status.conditions[0].status == 'True'",
        "object.spec.replicas > 1",
    ],
)
def test_data_dependent_failures_are_not_refused_at_load(source: str) -> None:
    compile_cel(source, ResultType.BOOL, where=WHERE)


def test_missing_field_is_a_clear_error_marked_missing() -> None:
    program = compile_cel('object.status.conditions.exists(c, c.type == "Succeeded")', ResultType.BOOL, where=WHERE)
    with pytest.raises(CelEvaluationError) as err:
        program.evaluate({"status": {}})
    assert err.value.missing
    assert str(err.value) == f"{WHERE}: no such key 'conditions' in object.status.conditions"
    with pytest.raises(CelEvaluationError) as err:
        compile_cel("object.spec.items[3] == 1", ResultType.BOOL, where=WHERE).evaluate({"spec": {"items": []}})
    assert err.value.missing and "list index out of range" in str(err.value)


def test_wrong_type_at_evaluation_names_entry_and_field() -> None:
    program = compile_cel("object.spec.flag", ResultType.BOOL, where=WHERE)
    assert program.evaluate({"spec": {"flag": True}}) is True
    with pytest.raises(CelEvaluationError) as err:
        program.evaluate({"spec": {"flag": "yes"}})
    assert str(err.value) == f"{WHERE}: gives a string, expected a bool"
    assert not err.value.missing


def test_other_evaluation_errors_are_not_missing() -> None:
    program = compile_cel("object.spec.x + 1 == 2", ResultType.BOOL, where=WHERE)
    with pytest.raises(CelEvaluationError) as err:
        program.evaluate({"spec": {"x": "one"}})
    assert not err.value.missing
    assert "no matching overload for + applied to '(string, int)'" in str(err.value)


def test_error_inside_a_map_result_is_raised() -> None:
    program = compile_cel('{"a": object.spec.nope}', ResultType.MAP, where=WHERE)
    with pytest.raises(CelEvaluationError) as err:
        program.evaluate({"spec": {}})
    assert err.value.missing


def test_constant_expressions_are_computed_once() -> None:
    program = compile_cel('{"metadata": {"annotations": {"a": "b"}}}', ResultType.MAP, where=WHERE)
    assert program.is_constant and not program.uses_object
    first = program.evaluate({})
    first["metadata"]["annotations"]["a"] = "changed"
    assert program.evaluate({}) == {"metadata": {"annotations": {"a": "b"}}}


def test_validator_runs_on_results_and_on_constants_at_load() -> None:
    def positive(value: object) -> None:
        if not value:
            raise ValueError("must not be empty")

    with pytest.raises(CelCompileError, match="must not be empty"):
        compile_cel("[]", ResultType.LIST, where=WHERE, validate=positive)
    program = compile_cel("object.spec.items", ResultType.LIST, where=WHERE, validate=positive)
    assert program.evaluate({"spec": {"items": [1]}}) == [1]
    with pytest.raises(CelEvaluationError, match="must not be empty"):
        program.evaluate({"spec": {"items": []}})


def test_one_conversion_serves_several_expressions() -> None:
    data = cel_input({"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}})
    finished = compile_cel(FINISHED, ResultType.BOOL, where=WHERE)
    succeeded = compile_cel(
        'object.status.conditions.exists(c, c.type == "Succeeded" && c.status == "True")', ResultType.BOOL, where=WHERE
    )
    assert finished.evaluate(data) is True and succeeded.evaluate(data) is True


def test_fast_conversion_matches_celpy() -> None:
    import celpy

    doc = {"a": [1, 2.5, "x", True, None, {"b": []}], "c": {"d": {"e": "f"}}, "g": (1, 2), "h": -3}
    converted = cel_input(doc).value
    assert converted == celpy.json_to_cel({**doc, "g": [1, 2]})
    assert type(converted["c"]["d"]["e"]) is type(celpy.json_to_cel("s"))
    assert type(converted["a"][3]) is type(celpy.json_to_cel(True))
