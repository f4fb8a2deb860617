"""``multikueue status`` (also ``kubectl multikueue status``): where each Workload is, and why.

One refresh reads the manager (Workloads, MultiKueueClusters,
AdmissionChecks), then the copies on the chosen workers, builds the report
and prints it. ``--watch`` repeats the refresh every two seconds and prints
again only when something changed. Exit code 1 with one line on stderr when
the manager cannot be used at all; trouble with a worker only shows in the
REMOTE column.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TextIO

from multikueue.api.configuration import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from kubernetes import client

    from multikueue.status.report import StatusReport

EXIT_ERROR = 1
#: Seconds between refreshes with ``--watch``.
WATCH_INTERVAL = 2.0
#: Clears a terminal and puts the cursor at the top left.
CLEAR_SCREEN = "\x1b[H\x1b[2J"


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    status = commands.add_parser(
        "status",
        help="show Workloads' admission and dispatch, worker connections and admission checks",
        description=(
            "Per Workload: queue, quota state, admission checks, nominated and chosen worker, and the state "
            "of its copy on that worker; per MultiKueueCluster: connection state; per AdmissionCheck: active or not."
        ),
    )
    status.add_argument("--kubeconfig", help="kubeconfig of the manager (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    status.add_argument("--context", help="kubeconfig context to use (default: the current context)")
    status.add_argument("-n", "--namespace", help="only Workloads of this namespace (default: all namespaces)")
    status.add_argument(
        "-o", "--output", choices=["table", "json", "yaml"], default="table", help="table for people (default), json or yaml for scripts"
    )
    status.add_argument(
        "-w", "--watch", action="store_true", help=f"refresh every {WATCH_INTERVAL:.0f}s and print again when something changed"
    )
    status.add_argument("--no-remote", action="store_true", help="do not connect to the workers (no REMOTE state)")
    status.add_argument(
        "--controller-namespace",
        default=DEFAULT_NAMESPACE,
        help=f"namespace of the workers' kubeconfig Secrets (default {DEFAULT_NAMESPACE})",
    )
    status.set_defaults(handler=_status)


def _refresh(api: client.ApiClient, args: argparse.Namespace) -> tuple[StatusReport, list[str]]:
    """One full read: the report and the warnings about objects left out."""
    from multikueue.status.manager import read_snapshot
    from multikueue.status.report import build_report
    from multikueue.status.workers import read_remote_states

    snapshot = read_snapshot(api, args.namespace)
    remote = (
        {}
        if args.no_remote
        else read_remote_states(api, snapshot.workloads, snapshot.clusters, args.controller_namespace)
    )
    return build_report(snapshot.workloads, snapshot.clusters, snapshot.checks, remote), snapshot.warnings


def _render(report: StatusReport, args: argparse.Namespace, out: TextIO, *, watching: bool) -> str:
    from multikueue.status.render import render_tables, to_json, to_yaml

    if args.output == "json":
        # While watching, one document per line, so scripts can read them line by line.
        return to_json(report, compact=watching)
    if args.output == "yaml":
        return ("---\n" if watching else "") + to_yaml(report)
    return render_tables(report, now=datetime.now(UTC), namespace=args.namespace, width=table_width(out))


def table_width(out: TextIO) -> int | None:
    """The terminal's width when ``out`` is one; None (cut nothing) for a pipe or a file, where
    ``Finished: Succe…`` would help nobody and ``grep`` or ``less -S`` take whole lines."""
    from multikueue.status.render import DEFAULT_WIDTH

    try:
        tty = out.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        tty = False
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns if tty else None


def _warn(lines: list[str], shown: set[str]) -> None:
    for line in lines:
        if line not in shown:
            print(f"multikueue: warning: {line}", file=sys.stderr)
            shown.add(line)


def show(kubeconfig: str, namespace: str) -> int:
    """Print the status table once (what ``multikueue status --kubeconfig K -n N`` prints)."""
    parser = argparse.ArgumentParser(prog="multikueue")
    register(parser.add_subparsers())
    return _status(parser.parse_args(["status", "--kubeconfig", kubeconfig, "-n", namespace]))


def _status(args: argparse.Namespace) -> int:
    from multikueue.status.manager import StatusError, load_client

    out = sys.stdout
    try:
        api = load_client(args.kubeconfig, args.context)
        try:
            report, warnings = _refresh(api, args)
            shown: set[str] = set()
            _warn(warnings, shown)
            if not args.watch:
                out.write(_render(report, args, out, watching=False))
                out.flush()
                return 0
            return _watch(api, args, report, shown, out)
        finally:
            api.close()
    except StatusError as exc:
        print(f"multikueue: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        # The reader went away (``| head``): nothing more to say.
        return 0
    except KeyboardInterrupt:
        if args.watch:
            return 0  # Ctrl-C is how a watch ends
        raise


def _watch(api: client.ApiClient, args: argparse.Namespace, report: StatusReport, shown: set[str], out: TextIO) -> int:
    """Print ``report`` and then every changed one until Ctrl-C (exit 0).

    A manager that stops answering mid-watch is reported on stderr and
    retried: the watch is for staring at a system that may be restarting.
    On a terminal the table is redrawn whenever its text changes (ages
    move); otherwise output comes only when the report's data changed.
    """
    from multikueue.status.manager import StatusError

    clear = args.output == "table" and out.isatty()
    last_text = ""
    last_report: StatusReport | None = None
    last_error = ""
    try:
        while True:
            text = _render(report, args, out, watching=True)
            # A terminal redraws when the text changes, so ages keep moving; a pipe or a script
            # gets output only when the data changed.
            changed = text != last_text if clear else report != last_report
            if changed:
                if clear:
                    out.write(CLEAR_SCREEN)
                elif args.output == "table" and last_text:
                    out.write("\n")
                out.write(text)
                out.flush()
                last_text, last_report = text, report
            time.sleep(WATCH_INTERVAL)
            try:
                report, warnings = _refresh(api, args)
                _warn(warnings, shown)
                last_error = ""
            except StatusError as exc:
                if str(exc) != last_error:
                    print(f"multikueue: error: {exc} (retrying)", file=sys.stderr)
                    last_error = str(exc)
    except KeyboardInterrupt:
        return 0
