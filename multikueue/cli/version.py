"""``multikueue version``: this client's version and the running controllers'.

kueuectl prints the controller Deployment's image; an image tag says what a
manifest asked for, not what runs (``latest``, ``dev``), so each controller
is asked itself, on the ``/version`` of its health port (see
:mod:`multikueue.status.version`), and the image is shown beside it.
``--client`` prints only the client's line and contacts nothing.

Exit code 1 with one line when the manager cannot be reached or
``--controller-url`` does not answer; 0 when no controller is deployed
(said in the output, as kueuectl does).
"""

from __future__ import annotations

import argparse
import sys

from multikueue import __version__
from multikueue.api.configuration import DEFAULT_NAMESPACE

EXIT_ERROR = 1


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    version = commands.add_parser(
        "version",
        help="print the client's version and the running controllers' versions",
        description="Client version, then each controller's: the deployed pods' (through the apiserver's pod proxy) "
        "or the one at --controller-url.",
    )
    version.add_argument("--client", action="store_true", help="only the client's version (contacts nothing)")
    version.add_argument("--kubeconfig", help="kubeconfig of the manager (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    version.add_argument("--context", help="kubeconfig context to use (default: the current context)")
    version.add_argument(
        "--controller-namespace", default=DEFAULT_NAMESPACE, help=f"namespace of the controller's pods (default {DEFAULT_NAMESPACE})"
    )
    version.add_argument(
        "--controller-url",
        metavar="URL",
        help="ask a controller run as a process: its health address, e.g. http://127.0.0.1:8081",
    )
    version.set_defaults(handler=_version)


def _line(found: object) -> str:
    from multikueue.status.version import ControllerVersion

    assert isinstance(found, ControllerVersion)
    details = ", ".join(part for part in (found.where, f"image {found.image}" if found.image else "") if part)
    if found.version:
        return f"Controller Version: {found.version} ({details})"
    return f"Controller Version: unknown ({details}: {found.error})"


def _version(args: argparse.Namespace) -> int:
    print(f"Client Version: {__version__}")
    if args.client:
        return 0
    from multikueue.status.manager import StatusError, load_client
    from multikueue.status.version import CONTROLLER_SELECTOR, deployed_versions, url_version

    if args.controller_url:
        found = url_version(args.controller_url)
        if found.error:
            print(f"multikueue: error: the controller at {found.where} did not answer: {found.error}", file=sys.stderr)
            return EXIT_ERROR
        print(_line(found))
        return 0
    try:
        api = load_client(args.kubeconfig, args.context)
        try:
            versions = deployed_versions(api, args.controller_namespace)
        finally:
            api.close()
    except StatusError as exc:
        print(f"multikueue: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if not versions:
        print(
            f"Controller Version: no controller pods in namespace {args.controller_namespace} ({CONTROLLER_SELECTOR}); "
            "for a controller run as a process: --controller-url http://HOST:HEALTH_PORT"
        )
    for found in versions:
        print(_line(found))
    return 0
