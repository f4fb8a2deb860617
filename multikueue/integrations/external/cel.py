"""CEL expressions of the external-framework entries, compiled at load and evaluated over ``object``.

An entry's ``finished``, ``succeeded``, ``creationPatches`` and
``workload.podSets`` are CEL expressions over one variable, ``object``: the
framework object as JSON. They are compiled with celpy when the configuration
is loaded, so a syntax error is reported with the entry and never reaches an
event handler.

CEL in Kubernetes is type-checked before use; celpy does not type-check, so
this module does the cheap part of it at load: each expression is evaluated
once against a small sample object (:data:`SAMPLE_OBJECT`, an object with
empty ``metadata.labels``, ``spec`` and ``status``). A result of the wrong
type there (``"x"`` where a bool is wanted, ``null`` where a patch map is
wanted) or an unknown name or function is refused. A failure that depends on
the data (a field the sample does not have, a list index past the end) is
not: the real objects will have those fields. An expression that does not
mention ``object`` at all is constant; its value is checked completely at
load and reused afterwards without evaluating it again.

At evaluation, results come back as plain JSON values (dict, list, str, int,
float, bool, None). A wrong result type, or any evaluation error, raises
:class:`CelEvaluationError` naming the entry and field; ``missing`` on it tells
a missing key or list item (``no such key 'status'``) apart from other errors,
so callers can treat an absent field as "not yet" where that makes sense.

Objects come from tenants, so neither the conversion nor the evaluation is
unbounded (measured in ``tests/integrations/external/test_cel_bounds.py``):

- an object is converted only up to :data:`MAX_DEPTH` levels of nesting and
  :data:`MAX_SIZE` (about its JSON size in bytes); beyond, the conversion
  stops with a :class:`CelEvaluationError` (``bounded=True``) naming the
  object, instead of a ``RecursionError`` or minutes of copying;
- each evaluation has a budget of :data:`MAX_STEPS` interpreter steps (each
  AST node visited, each comprehension item bound) and :data:`MAX_SECONDS`
  of wall-clock time, checked inside celpy's interpreter (celpy has no cost
  limit of its own). An expression quadratic in a tenant's list (an
  ``exists`` inside an ``exists``) stops there with a clear error, in a
  fraction of a second, instead of running for tens of seconds. Because the
  check runs inside the interpreter, a thread evaluating it really ends at
  the budget: nothing is left running behind an abandoned result. Entries'
  expressions are written by the platform admin, so no expression is refused
  at load for its shape; the budget is what bounds them on tenant data.

Over 500 lines on purpose: the conversion, the cost budget and the evaluator
that enforces it are one safety argument (what a tenant's object can make an
expression cost), and it is read as one.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Any, Final

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError, DumpAST
from celpy.evaluation import Evaluator
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

__all__ = [
    "MAX_DEPTH",
    "MAX_SECONDS",
    "MAX_SIZE",
    "MAX_STEPS",
    "SAMPLE_OBJECT",
    "CelCompileError",
    "CelEvaluationError",
    "CelInput",
    "CelProgram",
    "ResultType",
    "cel_input",
    "check_object",
    "object_label",
    "compile_cel",
    "a_type",
    "type_name",
]

#: The object expressions are tried on at load time: every usual section present and empty.
SAMPLE_OBJECT: Final[dict[str, Any]] = {
    "apiVersion": "example.com/v1",
    "kind": "Sample",
    "metadata": {"name": "sample", "namespace": "default", "uid": "0", "labels": {}, "annotations": {}},
    "spec": {},
    "status": {},
}

#: Deepest nesting of an object's JSON that is converted or handled (Kubernetes objects nest about 10 deep).
MAX_DEPTH: Final = 100
#: Largest object handled, in (roughly) bytes of its JSON: etcd's default object limit is 1.5 MB.
MAX_SIZE: Final = 3 * 1024 * 1024
#: Interpreter steps one evaluation may take: celpy runs about 30,000 a second on one core here, so this is
#: under a second; the catalog's expressions take tens of steps (Tekton's ``finished`` on 5 conditions: 28).
MAX_STEPS: Final = 20_000
#: Wall-clock time one evaluation may take, whatever the steps: the backstop on a slow or busy machine,
#: where the steps alone could take longer (a linear pass over 1,000 items took 0.55 s at load 7 on 2 cores).
MAX_SECONDS: Final = 2.0
#: The deadline is read once per this many steps (reading the clock costs more than a step).
_CLOCK_EVERY: Final = 256

#: Raises ValueError with a message when a result has the right type but the wrong shape.
Validator = Callable[[Any], None]

_UNSET: Final = object()


class ResultType(StrEnum):
    """What an expression must give."""

    BOOL = "bool"
    MAP = "map"
    LIST = "list"


_PYTHON_TYPES: Final[dict[ResultType, type]] = {ResultType.BOOL: bool, ResultType.MAP: dict, ResultType.LIST: list}


class CelCompileError(ValueError):
    """An expression refused at load; the message says why (the caller adds the entry and field)."""


class CelEvaluationError(ValueError):
    """An expression failed on an object (or gave the wrong type).

    ``str()`` is ``<where>: <message>``, e.g.
    ``externalFrameworks[PipelineRun.v1.tekton.dev].finished: no such key 'conditions' in object.status.conditions``.
    """

    def __init__(
        self, where: str, message: str, *, missing: bool = False, undeclared: bool = False, bounded: bool = False
    ) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message
        #: The failure is a missing key or list item in the object.
        self.missing = missing
        #: The expression uses a name or function that does not exist (never data-dependent).
        self.undeclared = undeclared
        #: The object or the evaluation went past a bound (depth, size, steps, time): the object is at fault.
        self.bounded = bounded


@dataclass(frozen=True, slots=True)
class CelInput:
    """An object already converted to CEL values, so several expressions share one conversion."""

    value: Any


def object_label(obj: Any) -> str:
    """``Kind namespace/name`` of an object, for messages (whatever the object holds)."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    name = "/".join(str(part)[:253] for part in (meta.get("namespace"), meta.get("name")) if part)
    return f"{kind if isinstance(kind, str) else 'object'} {name or '(unnamed)'}"


def check_object(obj: Any, where: str) -> None:
    """Raise :class:`CelEvaluationError` (``bounded=True``) when ``obj`` nests deeper than
    :data:`MAX_DEPTH` or is larger than :data:`MAX_SIZE`.

    Iterative, so it cannot itself overflow the stack; callers run it before
    any recursive handling (copies, merge patches, serialisation) of a
    tenant's object.
    """
    size = 0
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        kind = type(value)
        if kind is str:
            size += len(value) + 2
        elif kind is dict or kind is list or kind is tuple or isinstance(value, Mapping):
            if depth > MAX_DEPTH:
                raise _too_deep(obj, where)
            if kind is dict or isinstance(value, Mapping):
                for key, item in value.items():
                    size += len(key) + 4 if type(key) is str else 8
                    stack.append((item, depth + 1))
            else:
                stack.extend((item, depth + 1) for item in value)
            size += 2
        else:
            size += 8
        if size > MAX_SIZE:
            raise _too_large(obj, where)


def _too_deep(obj: Any, where: str) -> CelEvaluationError:
    return CelEvaluationError(
        where, f"{object_label(obj)} nests deeper than {MAX_DEPTH} levels; it is not handled: flatten it", bounded=True
    )


def _too_large(obj: Any, where: str) -> CelEvaluationError:
    return CelEvaluationError(
        where, f"{object_label(obj)} is larger than {MAX_SIZE / (1024 * 1024):g} MiB; it is not handled: make it smaller", bounded=True
    )


def cel_input(obj: Mapping[str, Any], where: str = "object") -> CelInput:
    """Convert a JSON object once for any number of :meth:`CelProgram.evaluate` calls.

    :class:`CelEvaluationError` (``bounded=True``, prefixed with ``where``)
    when the object is deeper than :data:`MAX_DEPTH` or larger than :data:`MAX_SIZE`.
    """
    budget = [MAX_SIZE]
    try:
        return CelInput(_to_cel(obj, MAX_DEPTH, budget))
    except _TooDeep:
        raise _too_deep(obj, where) from None
    except _TooLarge:
        raise _too_large(obj, where) from None
    except RecursionError:  # a Mapping type that nests on its own; cannot happen with JSON
        raise _too_deep(obj, where) from None


class _TooDeep(Exception):
    pass


class _TooLarge(Exception):
    pass


_new_str = str.__new__


def _to_cel(value: Any, depth: int, budget: list[int]) -> Any:
    """JSON to celpy values, as ``celpy.json_to_cel`` but about 3 times faster, and bounded.

    Conversion is most of the cost of an evaluation on a large object, and
    every value of a Kubernetes object is a str, dict, list, int, bool, float
    or None: exact types are tested first, strings (the bulk) are built
    without ``StringType``'s argument checks, maps are filled without
    ``MapType``'s per-key checks (JSON keys are unique strings already).
    ``depth`` is how many more levels of maps and lists may follow;
    ``budget[0]`` the bytes (roughly, as :func:`check_object` counts) still allowed.
    """
    kind = type(value)
    if kind is str:
        budget[0] -= len(value)
        if budget[0] < 0:
            raise _TooLarge
        return _new_str(celtypes.StringType, value)
    if kind is dict:
        return _map_to_cel(value, depth, budget)
    if kind is list or kind is tuple:
        if depth <= 0:
            raise _TooDeep
        budget[0] -= 8 * len(value) + 2  # each item counted as at least a number's 8 bytes
        if budget[0] < 0:
            raise _TooLarge
        return celtypes.ListType([_to_cel(item, depth - 1, budget) for item in value])
    if kind is bool:
        return celtypes.BoolType(value)
    if kind is int:
        return celtypes.IntType(value)
    if kind is float:
        return celtypes.DoubleType(value)
    if value is None:
        return None
    if isinstance(value, Mapping):  # e.g. kopf's Body
        return _map_to_cel(value, depth, budget)
    return celpy.json_to_cel(value)


def _map_to_cel(value: Mapping[Any, Any], depth: int, budget: list[int]) -> Any:
    if depth <= 0:
        raise _TooDeep
    budget[0] -= 2
    out = celtypes.MapType()
    for key, item in value.items():
        budget[0] -= 12  # the key's quotes and colon, the value counted as at least 8 bytes
        if type(key) is str:
            budget[0] -= len(key)
            cel_key = _new_str(celtypes.StringType, key)
        else:
            cel_key = _to_cel(key, depth - 1, budget)
        dict.__setitem__(out, cel_key, _to_cel(item, depth - 1, budget))
    if budget[0] < 0:
        raise _TooLarge
    return out


def a_type(value: Any) -> str:
    """``type_name`` with its article, for messages: "an int", "a string"."""
    name = type_name(value)
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def type_name(value: Any) -> str:
    """The CEL name of a plain JSON value's type, for messages."""
    if value is None:
        return "null"
    for python_type, name in ((bool, "bool"), (int, "int"), (float, "double"), (str, "string")):
        if isinstance(value, python_type):
            return name
    if isinstance(value, Mapping):
        return "map"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


@cache
def _environment() -> celpy.Environment:
    # The interpreted runner: celpy 0.5's transpiling runner mishandles ``has()`` inside ``&&``.
    return celpy.Environment()


class CelProgram:
    """One compiled expression, with the type its result must have and where it comes from."""

    def __init__(
        self,
        source: str,
        result_type: ResultType,
        where: str,
        runner: celpy.Runner,
        *,
        uses_object: bool,
        validate: Validator | None,
    ) -> None:
        self.source = source
        self.result_type = result_type
        self.where = where
        self.uses_object = uses_object
        self._runner = runner
        self._validate = validate
        self._constant: Any = _UNSET

    def __repr__(self) -> str:
        return f"CelProgram({self.where}: {self.source!r} -> {self.result_type})"

    @property
    def is_constant(self) -> bool:
        """Whether the value was computed once at load (the expression does not read ``object``)."""
        return self._constant is not _UNSET

    def evaluate(self, obj: Mapping[str, Any] | CelInput) -> Any:
        """The result as plain JSON values; :class:`CelEvaluationError` on any failure or a wrong type."""
        if self._constant is not _UNSET:
            return copy.deepcopy(self._constant)
        value = self.run(obj)
        self._check(value)
        return value

    def run(self, obj: Mapping[str, Any] | CelInput) -> Any:
        """Evaluate without the type check or the constant cache (the benchmark measures this).

        Every failure, whatever its type (celpy lets plain Python errors
        through, a ``RecursionError`` on a deep result, a ``MemoryError``), and
        the budget running out, raise :class:`CelEvaluationError`.
        """
        activation = {"object": (obj if isinstance(obj, CelInput) else cel_input(obj, self.where)).value}
        budget = _Budget(MAX_STEPS, time.monotonic() + MAX_SECONDS)
        try:
            evaluator = _BudgetedEvaluator(self._runner.ast, self._runner.new_activation(), budget)
            result = evaluator.evaluate(activation)
            return _to_python(result)
        except _OverBudget as over:
            raise CelEvaluationError(self.where, str(over), bounded=True) from None
        except celpy.CELEvalError as err:
            message, missing, undeclared = _describe(err)
            raise CelEvaluationError(self.where, message, missing=missing, undeclared=undeclared) from None
        except _NotJson as err:
            raise CelEvaluationError(self.where, str(err)) from None
        except RecursionError:
            raise CelEvaluationError(self.where, "the expression or its result nests too deeply", bounded=True) from None
        except MemoryError:
            raise CelEvaluationError(self.where, "out of memory evaluating the expression on this object", bounded=True) from None
        except Exception as exc:  # celpy raises plain Python errors for some bad operands
            raise CelEvaluationError(self.where, f"{type(exc).__name__}: {str(exc)[:300]}") from None

    def _check(self, value: Any) -> None:
        if not isinstance(value, _PYTHON_TYPES[self.result_type]):
            raise CelEvaluationError(self.where, f"gives {a_type(value)}, expected a {self.result_type}")
        if self._validate is not None:
            try:
                self._validate(value)
            except ValueError as exc:
                raise CelEvaluationError(self.where, str(exc)) from None

    def _check_at_load(self) -> None:
        """Refuse what is wrong whatever the object (see the module docstring)."""
        try:
            value = self.run(SAMPLE_OBJECT)
        except CelEvaluationError as err:
            if err.undeclared or not self.uses_object:
                raise CelCompileError(err.message) from None
            return
        if not isinstance(value, _PYTHON_TYPES[self.result_type]):
            raise CelCompileError(f"gives {a_type(value)}, expected a {self.result_type}")
        if not self.uses_object:
            try:
                self._check(value)
            except CelEvaluationError as err:
                raise CelCompileError(err.message) from None
            self._constant = value


class _OverBudget(BaseException):
    """The evaluation's budget ran out.

    A BaseException so that nothing inside celpy (which catches ``Exception``
    in places, and logs the operands) swallows or logs it on the way out.
    """


class _Budget:
    """Steps left and the deadline of one evaluation, shared by the evaluator and its nested ones."""

    __slots__ = ("deadline", "steps", "taken")

    def __init__(self, steps: int, deadline: float) -> None:
        self.steps = steps
        self.deadline = deadline
        self.taken = 0

    def spend(self) -> None:
        self.taken += 1
        if self.taken > self.steps:
            raise _OverBudget(
                f"the evaluation took more than {self.steps} steps on this object and was stopped "
                "(is an expression nested over a long list of the object?)"
            )
        if self.taken % _CLOCK_EVERY == 0 and time.monotonic() > self.deadline:
            raise _OverBudget(
                f"the evaluation took longer than {MAX_SECONDS:g} s on this object and was stopped "
                "(is an expression nested over a long list of the object?)"
            )


class _BudgetedEvaluator(Evaluator):
    """celpy's interpreter, spending one step of the budget per node visited and per comprehension item.

    Comprehensions (``exists``, ``all``, ``map``, ``filter``) evaluate their
    body with a nested evaluator per item; :meth:`sub_evaluator` makes those
    share the budget, so nesting cannot escape it.
    """

    def __init__(self, ast: lark.Tree, activation: Any, budget: _Budget) -> None:
        super().__init__(ast, activation)
        self._budget = budget

    def visit(self, tree: lark.Tree) -> Any:
        self._budget.spend()
        return super().visit(tree)

    def evaluate(self, context: Any = None) -> Any:
        self._budget.spend()
        return super().evaluate(context)

    def sub_evaluator(self, ast: lark.Tree) -> Evaluator:
        return _BudgetedEvaluator(ast, self.activation, self._budget)


def compile_cel(
    source: str, result_type: ResultType, *, where: str, validate: Validator | None = None
) -> CelProgram:
    """Compile ``source``; :class:`CelCompileError` for a syntax error, an unknown name or a wrong result type.

    ``where`` (``externalFrameworks[NAME].FIELD``) prefixes evaluation errors;
    ``validate`` checks the shape of results of the right type.
    """
    if not isinstance(source, str) or not source.strip():
        raise CelCompileError("a CEL expression must be a non-empty string")
    env = _environment()
    try:
        ast = env.compile(source)
    except CELParseError as err:
        raise CelCompileError(_syntax_message(source, err)) from None
    except Exception as exc:  # lark can raise other errors for odd input
        raise CelCompileError(f"cannot parse: {exc}") from None
    program = CelProgram(
        source,
        result_type,
        where,
        env.program(ast),
        uses_object=_mentions_object(ast),
        validate=validate,
    )
    program._check_at_load()
    return program


def _mentions_object(ast: lark.Tree) -> bool:
    return any(
        isinstance(token, lark.Token) and token.type == "IDENT" and token.value == "object"
        for token in ast.scan_values(lambda value: isinstance(value, lark.Token))
    )


def _syntax_message(source: str, err: CELParseError) -> str:
    """One line: where, what was unexpected, and the text around it."""
    # celpy raises its error while handling lark's, which holds the offending token.
    cause = err.__context__
    if isinstance(cause, UnexpectedEOF) or (isinstance(cause, UnexpectedToken) and cause.token.type == "$END"):
        tail = " ".join(source.split())
        tail = tail if len(tail) <= 40 else "..." + tail[-37:]
        return f"syntax error: the expression ends too early ({tail!r})"
    if isinstance(cause, UnexpectedToken):
        what = f"unexpected {cause.token.value!r}"
    elif isinstance(cause, UnexpectedCharacters):
        what = f"unexpected character {cause.char!r}"
    else:
        what = str(err.args[0]).splitlines()[0] if err.args else "syntax error"
    if err.line is None or err.column is None:
        return f"syntax error: {what}"
    lines = source.splitlines() or [""]
    line = lines[min(err.line, len(lines)) - 1]
    start = max(err.column - 21, 0)
    excerpt = ("..." if start else "") + line[start : err.column + 19] + ("..." if err.column + 19 < len(line) else "")
    return f"syntax error at line {err.line}, column {err.column}: {what} (in {excerpt.strip()!r})"


# --- results back to JSON -----------------------------------------------------------------


class _NotJson(Exception):
    """A result that has no JSON form (bytes, a type, a map with non-string keys)."""


def _to_python(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, celpy.CELEvalError):
        raise value
    if isinstance(value, bool | celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.TimestampType | celtypes.DurationType):
        return str(value)
    if isinstance(value, celtypes.BytesType | bytes):
        raise _NotJson("gives bytes, which have no JSON form")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                kind = type(key).__name__.removesuffix("Type").lower()
                raise _NotJson(f"gives a map with a non-string key ({kind}); JSON keys are strings")
            out[str(key)] = _to_python(item)
        return out
    if isinstance(value, list | tuple):
        return [_to_python(item) for item in value]
    raise _NotJson(f"gives a {type(value).__name__}, which has no JSON form")


# --- celpy's errors in plain words ---------------------------------------------------------

_UNDECLARED = re.compile(r"undeclared reference to '([^']+)'")
_NO_MEMBER = re.compile(r"no such member in mapping: '([^']*)'")
_CEL_CLASS = re.compile(r"<class 'celpy\.celtypes\.(\w+?)Type'>")
_RULE = re.compile(r"Token\('RULE', '(\w+)'\)")
_OPERATORS = {
    "relation_eq": "==",
    "relation_ne": "!=",
    "relation_lt": "<",
    "relation_le": "<=",
    "relation_gt": ">",
    "relation_ge": ">=",
    "relation_in": "in",
    "addition_add": "+",
    "addition_sub": "-",
    "multiplication_mul": "*",
    "multiplication_div": "/",
    "multiplication_mod": "%",
    "unary_not": "!",
    "unary_neg": "-",
}


def _describe(err: celpy.CELEvalError) -> tuple[str, bool, bool]:
    """``(message, missing, undeclared)`` for one celpy evaluation error."""
    text = str(err.args[0]) if err.args else "evaluation error"
    cause = err.args[1] if len(err.args) > 1 else None
    expr = ""
    if err.tree is not None:
        try:
            expr = f" in {DumpAST.display(err.tree)}"
        except Exception:  # the dump is only a nicety
            expr = ""
    if match := _UNDECLARED.search(text):
        return (
            f"undeclared reference to {match[1]!r} (only `object` and CEL's standard functions exist)",
            False,
            True,
        )
    if match := _NO_MEMBER.search(text):
        return f"no such key {match[1]!r}{expr}", True, False
    if cause is IndexError:
        return f"list index out of range{expr}", True, False
    text = _CEL_CLASS.sub(lambda m: m[1].lower(), text)
    text = _RULE.sub(lambda m: _OPERATORS.get(m[1], m[1]), text)
    text = text.replace("found no matching overload", "no matching overload")
    return f"{text}{expr}", False, False
