"""``multikueue config validate FILE...``: check external-framework entries before deploying them.

FILE may be the manager's Configuration document, a ConfigMap manifest holding
it under ``controller_manager_config.yaml``, or external-framework entries on
their own (one entry, or a list of them, as in the ``adapters/`` catalog).
The checks are those the controller runs when it loads the ConfigMap
(:func:`multikueue.integrations.external.entries.load_frameworks`), so a file that
passes here loads without problems there.

Output: one line per problem (``FILE: externalFrameworks[NAME].FIELD:
MESSAGE``) and exit status 1; or one summary line per file and 0.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from multikueue.integrations.external.entries import FrameworkSet, load_frameworks
from multikueue.api.configuration import CONFIG_KEY, ConfigurationError, load_configuration

__all__ = ["FileReport", "register", "summary", "validate_file"]

EXIT_OK = 0
EXIT_PROBLEMS = 1


def register(commands: argparse._SubParsersAction) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    """Add ``config`` and its ``validate``; returns its sub-commands (``preview`` is added there by main)."""
    config = commands.add_parser("config", help="the manager's Configuration (ConfigMap) and its external frameworks")
    sub = config.add_subparsers(dest="config_command", metavar="COMMAND")
    sub.required = True
    validate = sub.add_parser(
        "validate",
        help="check a Configuration, a ConfigMap holding one, or external-framework entries",
        description=(
            "Check each FILE as the controller checks its ConfigMap: GVK format, duplicates, "
            "JSONPath and CEL syntax, CEL result types, unknown fields. Prints one line per problem "
            "and exits 1, or a summary and exits 0."
        ),
    )
    validate.add_argument("files", nargs="+", type=Path, metavar="FILE")
    validate.set_defaults(handler=_validate)
    return sub


@dataclass
class FileReport:
    """What one file holds: problems (already in words) and the frameworks that loaded."""

    path: Path
    problems: list[str] = field(default_factory=list)
    frameworks: FrameworkSet | None = None
    what: str = ""


def _validate(args: argparse.Namespace) -> int:
    status = EXIT_OK
    for path in args.files:
        report = validate_file(path)
        if report.problems:
            status = EXIT_PROBLEMS
            for problem in report.problems:
                print(f"{path}: {problem}")
        else:
            print(f"{path}: {summary(report)}")
    return status


def validate_file(path: Path) -> FileReport:
    """Read, recognise and check one file; never raises for bad content."""
    report = FileReport(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        report.problems.append(f"not YAML: not UTF-8 text (byte {exc.start})")
        return report
    except OSError as exc:
        report.problems.append(f"cannot read: {exc.strerror or exc}")
        return report
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        report.problems.append(f"not YAML: {_one_line(exc)}")
        return report
    if not documents:
        report.problems.append("empty: expected a Configuration, a ConfigMap holding one, or external-framework entries")
        return report
    entries: list[Any] = []
    kinds: list[str] = []
    for document in documents:
        found = _entries_of(document, report)
        if found is not None:
            kind, items = found
            kinds.append(kind)
            entries.extend(items)
    if not kinds and not report.problems:
        report.problems.append(
            "holds no Configuration, ConfigMap with "
            f"{CONFIG_KEY}, or external-framework entries (maps with `name: Kind.version.group`)"
        )
    if report.problems:
        return report
    report.what = " + ".join(dict.fromkeys(kinds))
    report.frameworks = load_frameworks(entries)
    report.problems.extend(str(problem) for problem in report.frameworks.problems)
    return report


def _entries_of(document: Any, report: FileReport) -> tuple[str, list[Any]] | None:
    """``(what the document is, its external-framework entries)``; None for documents of other kinds."""
    if isinstance(document, list):
        return "entries", document
    if not isinstance(document, dict):
        report.problems.append(
            f"not a YAML map or list (a plain {type(document).__name__}): "
            "expected a Configuration, a ConfigMap holding one, or external-framework entries"
        )
        return None
    kind = document.get("kind")
    if kind == "ConfigMap":
        data = document.get("data") or {}
        if CONFIG_KEY not in data:
            name = (document.get("metadata") or {}).get("name", "?")
            report.problems.append(f"ConfigMap {name} has no data key {CONFIG_KEY}")
            return None
        return _configuration(data[CONFIG_KEY], report, "ConfigMap")
    if kind == "Configuration" or "multiKueue" in document or str(document.get("apiVersion", "")).startswith("config.kueue"):
        return _configuration(yaml.safe_dump(document), report, "Configuration")
    if kind is None and "name" in document:
        return "entry", [document]
    return None  # another manifest in the same file (a Namespace, a Deployment, ...)


def _configuration(text: Any, report: FileReport, what: str) -> tuple[str, list[Any]] | None:
    if not isinstance(text, str):
        report.problems.append(f"{CONFIG_KEY} must be a string holding the Configuration document")
        return None
    try:
        loaded = load_configuration(text)
    except ConfigurationError as exc:
        report.problems.append(str(exc))
        return None
    return what, [framework.entry() for framework in loaded.config.multi_kueue.external_frameworks]


def summary(report: FileReport) -> str:
    """``valid <what>: N external frameworks: A (extended: x, y), B (upstream format)``."""
    frameworks = report.frameworks.frameworks if report.frameworks else {}
    if not frameworks:
        return f"valid {report.what}: no external frameworks"
    described = ", ".join(
        f"{name} ({'extended: ' + ', '.join(fields) if (fields := fw.extended_fields) else 'upstream format'})"
        for name, fw in frameworks.items()
    )
    count = len(frameworks)
    return f"valid {report.what}: {count} external framework{'s' if count != 1 else ''}: {described}"


def _one_line(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as ``line L, column C: problem (context)``."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        context = f" ({exc.context})" if exc.context else ""
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}{context}"
    return " ".join(str(exc).split())

