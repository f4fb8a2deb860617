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
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Any, Final

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError, DumpAST
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

__all__ = [
    "SAMPLE_OBJECT",
    "CelCompileError",
    "CelEvaluationError",
    "CelInput",
    "CelProgram",
    "ResultType",
    "cel_input",
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

    def __init__(self, where: str, message: str, *, missing: bool = False, undeclared: bool = False) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message
        #: The failure is a missing key or list item in the object.
        self.missing = missing
        #: The expression uses a name or function that does not exist (never data-dependent).
        self.undeclared = undeclared


@dataclass(frozen=True, slots=True)
class CelInput:
    """An object already converted to CEL values, so several expressions share one conversion."""

    value: Any


def cel_input(obj: Mapping[str, Any]) -> CelInput:
    """Convert a JSON object once for any number of :meth:`CelProgram.evaluate` calls."""
    return CelInput(_to_cel(obj))


_new_str = str.__new__


def _to_cel(value: Any) -> Any:
    """JSON to celpy values, as ``celpy.json_to_cel`` but about 3 times faster.

    Conversion is most of the cost of an evaluation on a large object, and
    every value of a Kubernetes object is a str, dict, list, int, bool, float
    or None: exact types are tested first, strings (the bulk) are built
    without ``StringType``'s argument checks, maps are filled without
    ``MapType``'s per-key checks (JSON keys are unique strings already).
    """
    kind = type(value)
    if kind is str:
        return _new_str(celtypes.StringType, value)
    if kind is dict:
        return _map_to_cel(value)
    if kind is list or kind is tuple:
        return celtypes.ListType([_to_cel(item) for item in value])
    if kind is bool:
        return celtypes.BoolType(value)
    if kind is int:
        return celtypes.IntType(value)
    if kind is float:
        return celtypes.DoubleType(value)
    if value is None:
        return None
    if isinstance(value, Mapping):  # e.g. kopf's Body
        return _map_to_cel(value)
    return celpy.json_to_cel(value)


def _map_to_cel(value: Mapping[Any, Any]) -> Any:
    out = celtypes.MapType()
    for key, item in value.items():
        dict.__setitem__(out, _new_str(celtypes.StringType, key) if type(key) is str else _to_cel(key), _to_cel(item))
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
        """Evaluate without the type check or the constant cache (the benchmark measures this)."""
        activation = {"object": (obj if isinstance(obj, CelInput) else cel_input(obj)).value}
        try:
            result = self._runner.evaluate(activation)
            return _to_python(result)
        except celpy.CELEvalError as err:
            message, missing, undeclared = _describe(err)
            raise CelEvaluationError(self.where, message, missing=missing, undeclared=undeclared) from None
        except _NotJson as err:
            raise CelEvaluationError(self.where, str(err)) from None
        except RecursionError:
            raise CelEvaluationError(self.where, "the expression nests too deeply") from None
        except Exception as exc:  # celpy raises plain Python errors for some bad operands
            raise CelEvaluationError(self.where, f"{type(exc).__name__}: {exc}") from None

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
