"""``multikueue list|stop|resume``: the operator verbs of ``kubectl kueue`` (kueuectl), on the manager.

- ``list workloads|clusterqueues|localqueues`` (``wl``, ``cq``, ``lq``):
  kueuectl's columns plus the worker a Workload runs on and each queue's
  stop policy. On a terminal the table is drawn by ``rich`` and fits the
  window; into a pipe or file it is plain aligned text, never cut, so
  ``awk``/``grep`` see whole values; ``-o json`` gives one record per row.
- ``stop workload NAME``: ``spec.active: false`` (upstream's deactivation:
  the Workload gives its quota back and its job is suspended).
- ``stop clusterqueue|localqueue NAME``: ``spec.stopPolicy: HoldAndDrain``
  (nothing new is admitted and what runs is evicted), or ``Hold`` with
  ``--keep-already-running``.
- ``resume ...``: ``spec.active: true`` / ``spec.stopPolicy: None``.

A missing object, an unreachable manager, a refused permission: one line on
stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from multikueue.status.listing import ListKind, Table

EXIT_ERROR = 1
#: Wider than any line: plain output is never cut.
UNLIMITED = 1_000_000


def _connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig of the manager (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument("--context", help="kubeconfig context to use (default: the current context)")


def _kind_choices() -> list[str]:
    from multikueue.status.listing import KINDS

    return [alias for kind in KINDS for alias in kind.aliases]


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    kinds = _kind_choices()
    listing = commands.add_parser(
        "list",
        help="list Workloads, ClusterQueues or LocalQueues with their state (like kubectl kueue list)",
        description="List Workloads, ClusterQueues or LocalQueues of the manager with their state, kueuectl's columns.",
    )
    listing.add_argument("kind", choices=kinds, metavar="KIND", help="workloads (wl), clusterqueues (cq) or localqueues (lq)")
    _connection_options(listing)
    listing.add_argument("-n", "--namespace", help="namespace (default: the context's namespace, else default)")
    listing.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    listing.add_argument("-l", "--selector", help="label selector, e.g. team=a")
    listing.add_argument("--clusterqueue", help="workloads: only those of this ClusterQueue")
    listing.add_argument("--localqueue", help="workloads: only those of this LocalQueue")
    listing.add_argument(
        "--status",
        action="append",
        type=str.upper,
        choices=["PENDING", "QUOTARESERVED", "ADMITTED", "FINISHED"],
        help="workloads: only these states (repeatable)",
    )
    listing.add_argument("-o", "--output", choices=["table", "json"], default="table", help="table (default) or json records")
    listing.add_argument("--no-headers", action="store_true", help="table without its header line")
    listing.set_defaults(handler=_list)

    for verb, doing in (("stop", "stop"), ("resume", "resume")):
        parser = commands.add_parser(
            verb,
            help=f"{doing} a Workload, ClusterQueue or LocalQueue (spec.active / spec.stopPolicy)",
            description=(
                "stop: a Workload gets spec.active=false; a ClusterQueue or LocalQueue spec.stopPolicy=HoldAndDrain "
                "(Hold with --keep-already-running)."
                if verb == "stop"
                else "resume: a Workload gets spec.active=true; a ClusterQueue or LocalQueue spec.stopPolicy=None."
            ),
        )
        parser.add_argument("kind", choices=kinds, metavar="KIND", help="workload (wl), clusterqueue (cq) or localqueue (lq)")
        parser.add_argument("name", metavar="NAME")
        _connection_options(parser)
        parser.add_argument("-n", "--namespace", help="namespace of a Workload or LocalQueue (default: the context's, else default)")
        if verb == "stop":
            parser.add_argument(
                "--keep-already-running",
                action="store_true",
                help="queues: stop admitting but let admitted Workloads run (stopPolicy Hold instead of HoldAndDrain)",
            )
        parser.set_defaults(handler=_stop if verb == "stop" else _resume)


# --- output ------------------------------------------------------------------------


def write_table(table: Table, out: TextIO, *, headers: bool = True, width: int | None = None) -> None:
    """``table`` on ``out``: with rich on a terminal (fitted to ``width``), plain and whole otherwise."""
    if out.isatty():
        from rich.console import Console
        from rich.table import Table as RichTable

        rich_table = RichTable(box=None, show_header=headers, header_style="bold", pad_edge=False, show_edge=False)
        for column in table.columns:
            rich_table.add_column(column.header, no_wrap=True, overflow="ellipsis")
        for row in table.rows:
            rich_table.add_row(*row)
        Console(file=out, width=width, highlight=False, soft_wrap=False).print(rich_table)
        return
    out.write(render_plain(table, headers=headers))


def render_plain(table: Table, *, headers: bool = True) -> str:
    """kubectl's plain layout: columns aligned by spaces, nothing cut, a newline at the end."""
    from multikueue.status.render import render_table

    text = render_table(table.columns, table.rows, UNLIMITED)
    lines = text.split("\n")
    if not headers:
        lines = lines[1:]
    return "".join(line + "\n" for line in lines)


# --- handlers ----------------------------------------------------------------------


def _fail(message: str) -> int:
    print(f"multikueue: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def _namespace(args: argparse.Namespace) -> str:
    from multikueue.status.objects import context_namespace

    return str(args.namespace or context_namespace(args.kubeconfig, args.context))


def _list(args: argparse.Namespace) -> int:
    from multikueue.status.listing import (
        cluster_queue_table,
        kind_named,
        local_queue_table,
        workload_status,
        workload_table,
    )
    from multikueue.status.manager import StatusError, load_client
    from multikueue.status.objects import list_objects

    kind = kind_named(args.kind)
    workload_only = [flag for flag, value in (("--clusterqueue", args.clusterqueue), ("--localqueue", args.localqueue), ("--status", args.status)) if value]
    if workload_only and kind.kind != "Workload":
        return _fail(f"{', '.join(workload_only)} only apply to workloads")
    try:
        namespace = None if (args.all_namespaces or not kind.namespaced) else _namespace(args)
        api = load_client(args.kubeconfig, args.context)
        try:
            items = list_objects(api, kind, namespace, args.selector)
            now = datetime.now(UTC)
            if kind.kind == "Workload":
                queues = list_objects(api, kind_named("localqueues"), namespace)
                if args.localqueue:
                    items = [w for w in items if (w.get("spec") or {}).get("queueName") == args.localqueue]
                if args.status:
                    items = [w for w in items if workload_status(w) in args.status]
                table = workload_table(items, queues, now=now, show_namespace=namespace is None)
                if args.clusterqueue:
                    index = [c.header for c in table.columns].index("CLUSTERQUEUE")
                    table = type(table)(table.columns, [r for r in table.rows if r[index] == args.clusterqueue])
            elif kind.kind == "ClusterQueue":
                table = cluster_queue_table(items, now=now)
            else:
                table = local_queue_table(items, now=now, show_namespace=namespace is None)
        finally:
            api.close()
    except StatusError as exc:
        return _fail(str(exc))
    try:
        if args.output == "json":
            sys.stdout.write(json.dumps(table.records(), indent=2) + "\n")
        elif not table.rows:
            where = f" in {namespace} namespace" if namespace else ""
            print(f"No {kind.plural} found{where}.", file=sys.stderr)
        else:
            write_table(table, sys.stdout, headers=not args.no_headers)
        sys.stdout.flush()
    except BrokenPipeError:
        return 0
    return 0


def _change(args: argparse.Namespace, patch_for: Any, done: str) -> int:
    from multikueue.status.listing import kind_named
    from multikueue.status.manager import StatusError, load_client
    from multikueue.status.objects import patch_object

    kind: ListKind = kind_named(args.kind)
    try:
        patch = patch_for(kind)
    except ValueError as exc:
        return _fail(str(exc))
    try:
        namespace = _namespace(args) if kind.namespaced else None
        api = load_client(args.kubeconfig, args.context)
        try:
            patch_object(api, kind, args.name, namespace, patch)
        finally:
            api.close()
    except StatusError as exc:
        return _fail(str(exc))
    print(f"{kind.resource}/{args.name} {done}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    from multikueue.status.listing import stop_patch

    return _change(args, lambda kind: stop_patch(kind, keep_running=args.keep_already_running), "stopped")


def _resume(args: argparse.Namespace) -> int:
    from multikueue.status.listing import resume_patch

    return _change(args, resume_patch, "resumed")
