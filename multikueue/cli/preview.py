"""``multikueue config preview ENTRY-FILE OBJECT-FILE``: what the manager would make of one object.

Like tekton-kueue's ``mutate`` command, for checking an entry before it is
deployed: it prints the Workload the manager would create for OBJECT (an
object of the entry's kind, as YAML) and the copy of OBJECT it would create
on a worker (managed-by field removed, MultiKueue labels added, hold value
set, ``creationPatches`` applied). Nothing talks to a cluster.

The controller's own code does the work, not a re-implementation: the entry
is loaded as ``config validate`` loads it
(:func:`multikueue.cli.config.validate_file`, i.e. ``load_frameworks``), the
Workload comes from :func:`multikueue.integrations.external.workload.decide`
(the manager's decision for an object without a Workload) and the worker
copy from :meth:`~multikueue.integrations.external.adapter.GenericAdapter.remote_copy`,
the calls the reconciler and the MultiKueue applier make.

What a file cannot tell is said on stderr (``note: ...``): the object's UID
(part of the Workload name's hash; the API server assigns it), the value of
a WorkloadPriorityClass (read from the cluster; ``--priority`` gives it).

Errors are one line each on stderr, ``FILE: message``, and exit status 1.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from multikueue.api.constants import Labels
from multikueue.cli.config import validate_file
from multikueue.controllers.multikueue.remote_workload import remote_workload_copy
from multikueue.integrations.binding import bound_workload_name
from multikueue.integrations.external import workload as external
from multikueue.integrations.external.adapter import GenericAdapter, default_resource_ref
from multikueue.integrations.external.entries import CompiledFramework

__all__ = ["PreviewError", "add_parser", "preview"]

EXIT_OK = 0
EXIT_ERROR = 1
#: The origin of a manager whose Configuration does not set ``multiKueue.origin``.
DEFAULT_ORIGIN = "multikueue"


class PreviewError(Exception):
    """A one-line reason the preview cannot be made, already naming the file."""


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``preview`` under ``multikueue config``."""
    parser = sub.add_parser(
        "preview",
        help="print the Workload and the worker copy the manager would create for an object",
        description=(
            "Print the Workload the manager would create for OBJECT-FILE (one object of the entry's kind) "
            "under the external-framework entry in ENTRY-FILE, and the copy of the object it would create "
            "on a worker (after the hold value and creationPatches). ENTRY-FILE is one entry (as in "
            "adapters/), a list of entries, a Configuration or a ConfigMap holding one; --entry picks one "
            "when it holds several. Uses the controller's own code; no cluster is contacted."
        ),
    )
    parser.add_argument("entry_file", type=Path, metavar="ENTRY-FILE")
    parser.add_argument("object_file", type=Path, metavar="OBJECT-FILE")
    parser.add_argument("--entry", metavar="NAME", help="the entry to use (Kind.version.group) when ENTRY-FILE holds several")
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="output format (default yaml)")
    parser.add_argument(
        "--origin", default=DEFAULT_ORIGIN, help=f"the manager's multiKueue.origin (default {DEFAULT_ORIGIN!r})"
    )
    parser.add_argument(
        "--priority",
        type=int,
        metavar="N",
        help="value of the WorkloadPriorityClass the object names (the controller reads it from the cluster)",
    )
    parser.add_argument(
        "-n", "--namespace", help="namespace of the object when its file has none (default: 'default', as kubectl)"
    )
    parser.add_argument(
        "--plural", help="the kind's resource plural, when not lowercase kind + 's' (the default pod set counts it)"
    )
    parser.add_argument(
        "--worker-workload",
        action="store_true",
        help="also print the Workload copy the manager creates on the worker",
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        documents, notes = preview(
            args.entry_file,
            args.object_file,
            entry=args.entry,
            origin=args.origin,
            priority=args.priority,
            namespace=args.namespace,
            plural=args.plural,
            worker_workload=args.worker_workload,
        )
    except PreviewError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_ERROR
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(_render(documents, args.output), end="")
    return EXIT_OK


def preview(
    entry_file: Path,
    object_file: Path,
    *,
    entry: str | None = None,
    origin: str = DEFAULT_ORIGIN,
    priority: int | None = None,
    namespace: str | None = None,
    plural: str | None = None,
    worker_workload: bool = False,
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """``([(title, document), ...], notes)``: the manager's Workload (if it makes one) and the worker copy.

    Raises :class:`PreviewError` for an unusable entry file, entry or object.
    """
    framework, notes = _framework(entry_file, entry)
    adapter = GenericAdapter(framework, default_resource_ref(framework, plural=plural))
    obj = _object(object_file, adapter, namespace, notes)
    meta = obj["metadata"]
    where = f"{meta['namespace']}/{meta['name']}"
    reason = adapter.unmanaged_reason(obj)
    if reason is not None:
        notes.append(f"{reason}: the manager would not dispatch it (the copy below is what it would send if it did)")
    try:
        adapter.check(obj)
        priority_class = adapter.priority_class(obj)
        if priority_class and priority is None:
            notes.append(
                f"the object names WorkloadPriorityClass {priority_class!r}, whose value the controller reads "
                "from the cluster: priority 0 and no priorityClassRef shown (pass --priority N)"
            )
        action = external.decide(adapter, obj, None, priority=priority)
        documents: list[tuple[str, dict[str, Any]]] = []
        if action.workload is not None:
            wl = action.workload
            workload_name = wl.name
            documents.append((f"Workload the manager creates for {framework.kind} {where}", wl.to_k8s()))
        else:
            workload_name = adapter.workload_name(obj)
            notes.append(_no_workload_reason(adapter, obj, framework))
        body = adapter.remote_copy(obj, origin=origin, workload_name=workload_name)
        documents.append((f"{framework.kind} copy the manager creates on the worker (Workload {workload_name})", body))
        if worker_workload and action.workload is not None:
            documents.append(
                ("Workload copy the manager creates on the worker", remote_workload_copy(action.workload, origin=origin))
            )
    except ValueError as exc:  # CelEvaluationError and the pod-set checks: they name the entry and field
        raise PreviewError(f"{object_file}: {_one_line(str(exc))}") from None
    return documents, notes


def _framework(path: Path, name: str | None) -> tuple[CompiledFramework, list[str]]:
    """The entry to use, and notes about the other entries of the file."""
    report = validate_file(path)
    frameworks = report.frameworks.frameworks if report.frameworks is not None else {}
    problems = report.frameworks.problems if report.frameworks is not None else []
    if report.frameworks is None:  # the file itself is wrong (unreadable, not YAML, no entries)
        raise PreviewError(f"{path}: {_one_line(report.problems[0])}")
    if name is None:
        names = list(dict.fromkeys([*frameworks, *(p.entry for p in problems)]))
        if len(names) > 1:
            raise PreviewError(f"{path}: holds {len(names)} entries ({', '.join(names)}); pick one with --entry NAME")
        if not names:
            raise PreviewError(f"{path}: holds no external-framework entries")
        name = names[0]
    own = [p for p in problems if p.entry == name]
    if own:
        raise PreviewError(f"{path}: {'; '.join(_one_line(str(p)) for p in own)}")
    if name not in frameworks:
        known = ", ".join(frameworks) or "none"
        raise PreviewError(f"{path}: no entry {name!r} (entries: {known})")
    notes = [f"{path}: another entry is invalid: {_one_line(str(p))}" for p in problems]
    return frameworks[name], notes


def _object(path: Path, adapter: GenericAdapter, namespace: str | None, notes: list[str]) -> dict[str, Any]:
    """The one object in ``path``, of the entry's kind, with a name and a namespace."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PreviewError(f"{path}: not YAML: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise PreviewError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise PreviewError(f"{path}: not YAML: {_yaml_error(exc)}") from None
    if len(documents) != 1:
        raise PreviewError(f"{path}: holds {len(documents)} YAML documents; expected one {adapter.kind}")
    obj = documents[0]
    wanted = f"{adapter.kind} ({adapter.api_version})"
    if not isinstance(obj, dict):
        raise PreviewError(f"{path}: not a Kubernetes object (a YAML {type(obj).__name__}); expected a {wanted}")
    given = f"{obj.get('kind') or '(no kind)'} ({obj.get('apiVersion') or 'no apiVersion'})"
    if (obj.get("apiVersion"), obj.get("kind")) != (adapter.api_version, adapter.kind):
        raise PreviewError(f"{path}: is a {given}; entry {adapter.gvk} is for a {wanted}")
    obj = copy.deepcopy(obj)
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise PreviewError(f"{path}: metadata must be a map")
    if not meta.get("name"):
        generate = meta.get("generateName")
        if not generate:
            raise PreviewError(f"{path}: metadata has neither name nor generateName")
        meta["name"] = f"{generate}xxxxx"
        notes.append(f"generateName {generate!r}: the API server adds 5 random characters; shown as {meta['name']!r}")
    if not meta.get("namespace"):
        meta["namespace"] = namespace or "default"
    if not meta.get("uid"):
        notes.append(
            "the object has no uid (the API server assigns it): the Workload name's last 5 characters "
            "and its owner reference's uid will differ"
        )
    return obj


def _no_workload_reason(adapter: GenericAdapter, obj: dict[str, Any], framework: CompiledFramework) -> str:
    prebuilt = bound_workload_name(obj)
    if prebuilt:
        return f"the object names a prebuilt Workload ({Labels.PREBUILT_WORKLOAD_NAME}={prebuilt}): the manager creates none"
    if not adapter.creates_workload:
        return (
            f"entry {framework.name} has no `workload`: the manager creates no Workload (upstream Kueue or another "
            "controller must); the worker copy below names the Workload upstream's naming gives"
        )
    if not adapter.queue_name(obj):
        assert framework.workload is not None
        return (
            f"no queue name at {framework.workload.queue_name.canonical}: the manager creates no Workload, "
            "so the object is never dispatched"
        )
    return "the object has already finished (the entry's `finished` is true): the manager creates no Workload"


def _render(documents: list[tuple[str, dict[str, Any]]], output: str) -> str:
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": [doc for _, doc in documents]}, indent=2) + "\n"
    parts = [f"# {title}\n{yaml.safe_dump(doc, sort_keys=False)}" for title, doc in documents]
    return "---\n".join(parts)


def _yaml_error(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return _one_line(str(exc))


def _one_line(text: str) -> str:
    return " ".join(text.split())
