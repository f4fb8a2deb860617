"""Entry point: assemble the sub-commands and turn known errors into exit codes."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from multikueue import __version__
from multikueue.cli import completion, config, crds, dev, preview, queues, run, status, version
from multikueue.dev.errors import DevEnvironmentError
from multikueue.runtime.logging import configure

EXIT_ERROR = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="multikueue",
        description="Kueue's multi-cluster job dispatcher (MultiKueue) in Python.",
    )
    parser.add_argument("--version", action="version", version=f"multikueue {__version__}")
    parser.add_argument("--log-level", default="WARNING", help="log level of the command's own logs (stderr)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    run.register(commands)
    crds.register(commands)
    dev.register(commands)
    preview.add_parser(config.register(commands))
    status.register(commands)
    queues.register(commands)
    version.register(commands)
    completion.register(commands, parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure(json_output=False, level=args.log_level)
    try:
        return int(args.handler(args) or 0)
    except DevEnvironmentError as exc:
        print(f"multikueue: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
