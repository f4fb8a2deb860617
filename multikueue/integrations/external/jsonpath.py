"""JSONPaths of the external-framework entries: parsed once, then read and written cheaply.

An entry names fields of the framework's objects with JSONPaths
(``$.spec.managedBy``, ``$.metadata.labels['kueue.x-k8s.io/queue-name']``).
They are parsed with jsonpath-ng at load time, so a typo is reported with the
entry instead of failing on the first object. Every place an entry uses a path
needs exactly one location (a field to read, set or delete), so a path that
can select several places (wildcards, filters, slices, unions, ``..``) is
refused with a message saying so. The accepted paths are reduced to a tuple of
steps (keys and list indices) and walked directly: reading a field on every
event is then a few dictionary look-ups, not a jsonpath-ng query.

Accepted spellings, all meaning the same path:

- ``$.metadata.labels['kueue.x-k8s.io/queue-name']`` (or with double quotes);
- ``.metadata.labels.kueue\\.x-k8s\\.io/queue-name`` and
  ``{.metadata.labels.kueue\\.x-k8s\\.io/queue-name}`` (kubectl's style:
  optional braces, escaped dots, no ``$``);
- ``metadata.labels['kueue.x-k8s.io/queue-name']`` (no leading ``$.``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

from jsonpath_ng import jsonpath as jp
from jsonpath_ng.ext import parse as _parse

__all__ = ["JsonPath", "JsonPathError", "Step", "compile_path"]

#: One step of a single-location path: a map key or a list index.
Step = str | int

_MISSING: Final = object()
#: A dotted segment that jsonpath-ng reads as a plain name.
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


class JsonPathError(ValueError):
    """A path that cannot be used; the message says why (jsonpath-ng's own words for syntax errors)."""


@dataclass(frozen=True)
class JsonPath:
    """A parsed single-location JSONPath.

    ``text`` is what the user wrote (kept for messages); ``steps`` the keys
    and indices from the root. ``steps == ()`` is the whole document.
    """

    text: str
    steps: tuple[Step, ...]

    def __str__(self) -> str:
        return self.canonical

    @property
    def canonical(self) -> str:
        """The path in one normal spelling: ``$.a.b['x.y/z'][0]``."""
        out = "$"
        for step in self.steps:
            if isinstance(step, int):
                out += f"[{step}]"
            elif _PLAIN_NAME.match(step):
                out += f".{step}"
            else:
                out += "['" + step.replace("\\", "\\\\").replace("'", "\\'") + "']"
        return out

    @property
    def has_indices(self) -> bool:
        """Whether a step is a list index (such paths can be read but not written by merge patches)."""
        return any(isinstance(step, int) for step in self.steps)

    def is_within(self, other: JsonPath) -> bool:
        """Whether this path is ``other`` or lies under it."""
        return self.steps[: len(other.steps)] == other.steps

    def relative_to(self, other: JsonPath) -> tuple[Step, ...]:
        """The steps below ``other`` (which must contain this path)."""
        if not self.is_within(other):
            raise JsonPathError(f"{self} is not under {other}")
        return self.steps[len(other.steps) :]

    def lookup(self, doc: Any) -> tuple[bool, Any]:
        """``(True, value)`` when the location exists (its value may be ``None``), else ``(False, None)``."""
        node = doc
        for step in self.steps:
            if isinstance(step, int):
                if not isinstance(node, list) or not -len(node) <= step < len(node):
                    return False, None
                node = node[step]
            else:
                if not isinstance(node, Mapping):
                    return False, None
                node = node.get(step, _MISSING)
                if node is _MISSING:
                    return False, None
        return True, node

    def get(self, doc: Any, default: Any = None) -> Any:
        """The value at this path, or ``default`` when a step is missing."""
        found, value = self.lookup(doc)
        return value if found else default

    def set(self, doc: MutableMapping[str, Any], value: Any) -> None:
        """Put ``value`` at this path in ``doc`` (in place), creating missing maps on the way.

        A missing list, an index past the end, or a step through a scalar is
        an error: there is no single sensible way to create them.
        """
        if not self.steps:
            raise JsonPathError("cannot set the whole document ($)")
        parent = self._parent(doc, create=True)
        last = self.steps[-1]
        if isinstance(last, int):
            if not isinstance(parent, list) or not -len(parent) <= last < len(parent):
                raise JsonPathError(f"cannot set {self}: no list item {last} there")
            parent[last] = value
        else:
            if not isinstance(parent, MutableMapping):
                raise JsonPathError(f"cannot set {self}: its parent is not a map")
            parent[last] = value

    def delete(self, doc: MutableMapping[str, Any]) -> bool:
        """Remove the field at this path from ``doc`` (in place); whether it was there.

        Parents emptied by the removal are kept (``spec.control: {}``): the
        object's owner may require the parent to exist.
        """
        if not self.steps:
            raise JsonPathError("cannot delete the whole document ($)")
        parent = self._parent(doc, create=False)
        last = self.steps[-1]
        if isinstance(last, int):
            if isinstance(parent, list) and -len(parent) <= last < len(parent):
                del parent[last]
                return True
            return False
        if isinstance(parent, MutableMapping) and last in parent:
            del parent[last]
            return True
        return False

    def nest(self, leaf: Any, *, below: JsonPath | None = None) -> dict[str, Any]:
        """A merge patch placing ``leaf`` at this path (relative to ``below`` when given).

        Only map keys can be expressed in a merge patch (RFC 7386), hence
        paths with list indices are refused.
        """
        steps = self.relative_to(below) if below is not None else self.steps
        if not steps:
            raise JsonPathError(f"{self} names the document itself; there is no field to patch")
        if any(isinstance(step, int) for step in steps):
            raise JsonPathError(f"{self} has a list index; a merge patch can only address map keys")
        node: Any = leaf
        for step in reversed(steps):
            node = {step: node}
        return node

    def _parent(self, doc: Any, *, create: bool) -> Any:
        node = doc
        for step in self.steps[:-1]:
            if isinstance(step, int):
                if not isinstance(node, list) or not -len(node) <= step < len(node):
                    if create:
                        raise JsonPathError(f"cannot set {self}: no list item {step} there")
                    return None
                node = node[step]
                continue
            if not isinstance(node, MutableMapping):
                if create:
                    raise JsonPathError(f"cannot set {self}: {step!r} is inside a value that is not a map")
                return None
            child = node.get(step)
            if child is None:
                if not create:
                    return None
                child = node[step] = {}
            node = child
        return node


def _normalise(text: str) -> str:
    """Turn the other accepted spellings into jsonpath-ng's (see the module docstring)."""
    path = text.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1].strip()
    if not path.startswith("$"):
        path = "$" + path if path.startswith((".", "[")) else "$." + path
    if "\\." in path:
        path = _quote_escaped_segments(path)
    return path


def _quote_escaped_segments(path: str) -> str:
    """``$.a.b\\.c/d`` -> ``$.a['b.c/d']``: kubectl escapes dots inside a key, jsonpath-ng quotes the key."""
    out: list[str] = []
    i, n = 0, len(path)
    while i < n:
        char = path[i]
        if char in "'\"":  # copy a quoted key untouched
            end = i + 1
            while end < n and path[end] != char:
                end += 2 if path[end] == "\\" else 1
            out.append(path[i : end + 1])
            i = end + 1
        elif char == "." and i + 1 < n and path[i + 1] not in ".[":
            end = i + 1
            segment: list[str] = []
            while end < n and path[end] not in ".[":
                if path[end] == "\\" and end + 1 < n:
                    segment.append(path[end + 1])
                    end += 2
                else:
                    segment.append(path[end])
                    end += 1
            raw = path[i + 1 : end]
            key = "".join(segment)
            out.append(f"['{key}']" if "\\" in raw else f".{raw}")
            i = end
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _steps(expr: Any, text: str) -> tuple[Step, ...]:
    """The keys and indices of a single-location expression; JsonPathError for anything else."""
    if isinstance(expr, jp.Root):
        return ()
    if isinstance(expr, jp.Child):
        return _steps(expr.left, text) + _steps_of_leaf(expr.right, text)
    if isinstance(expr, jp.Fields | jp.Index):
        # A path without "$": jsonpath-ng roots it implicitly.
        return _steps_of_leaf(expr, text)
    raise _not_single(expr, text)


def _steps_of_leaf(expr: Any, text: str) -> tuple[Step, ...]:
    if isinstance(expr, jp.Fields) and len(expr.fields) == 1 and expr.fields[0] != "*":
        return (expr.fields[0],)
    if isinstance(expr, jp.Index) and len(expr.indices) == 1:
        return (expr.indices[0],)
    if isinstance(expr, jp.Child):
        return _steps(expr, text)
    raise _not_single(expr, text)


def _not_single(expr: Any, text: str) -> JsonPathError:
    kind = {
        "Wildcard": "a wildcard",
        "Descendants": "'..' (descendants)",
        "Slice": "a slice",
        "Union": "a union",
        "Filter": "a filter",
        "Fields": "several fields",
        "Index": "several indices",
    }.get(type(expr).__name__)
    what = f"{kind}, which can select several places" if kind else f"'{expr}', which is not a key or a list index"
    return JsonPathError(
        f"{text!r} has {what}; this field needs a single location "
        "such as $.spec.managedBy or $.metadata.labels['example.com/key']"
    )


def compile_path(text: str) -> JsonPath:
    """Parse ``text`` into a :class:`JsonPath`; :class:`JsonPathError` with the reason if it cannot be used."""
    if not isinstance(text, str) or not text.strip():
        raise JsonPathError("a JSONPath must be a non-empty string such as $.spec.managedBy")
    normalised = _normalise(text)
    try:
        expr = _parse(normalised)
    except Exception as exc:  # jsonpath-ng raises several unrelated exception types
        hint = ""
        if "/" in normalised:
            hint = " (quote keys with dots or slashes: $.metadata.labels['example.com/key'])"
        raise JsonPathError(f"{text!r} is not a valid JSONPath: {exc}{hint}") from None
    return JsonPath(text=text, steps=_steps(expr, text))
