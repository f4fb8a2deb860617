"""``multikueue crds generate``: write or check the CRDs generated from the models."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from multikueue.api import crdgen

DEFAULT_DIR = crdgen.CRD_DIR


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    crds = commands.add_parser("crds", help="the kueue.x-k8s.io CRDs generated from the pydantic models")
    sub = crds.add_subparsers(dest="crds_command", metavar="COMMAND")
    sub.required = True
    gen = sub.add_parser("generate", help="write the CRD YAML (or check it with --check)")
    gen.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"output folder (default {DEFAULT_DIR})")
    gen.add_argument("--check", action="store_true", help="exit 1 if the files differ from what would be generated")
    gen.set_defaults(handler=_generate)


def _generate(args: argparse.Namespace) -> int:
    if args.check:
        stale = crdgen.check_crds(args.dir)
        if stale:
            print(
                f"CRDs in {args.dir} are out of date: {', '.join(stale)}; run `multikueue crds generate`",
                file=sys.stderr,
            )
            return 1
        print(f"CRDs in {args.dir} are up to date")
        return 0
    written = crdgen.write_crds(args.dir)
    for path in written:
        print(path)
    return 0
