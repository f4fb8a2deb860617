"""``multikueue run``: the controller process (manager or worker role)."""

from __future__ import annotations

import argparse
import random

from multikueue.api.configuration import DEFAULT_CONFIG_MAP, DEFAULT_NAMESPACE


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = commands.add_parser("run", help="run the controller (local quota admission; MultiKueue on the manager)")
    run.add_argument("--role", choices=["manager", "worker"], default="manager")
    run.add_argument("--namespace", default=DEFAULT_NAMESPACE, help=f"controller namespace (default {DEFAULT_NAMESPACE})")
    run.add_argument("--config-map", default=DEFAULT_CONFIG_MAP, help=f"configuration ConfigMap (default {DEFAULT_CONFIG_MAP})")
    run.add_argument("--kubeconfig", help="kubeconfig of the cluster to control (default: in-cluster, then $KUBECONFIG)")
    run.add_argument("--health-port", type=int, default=8081, help="liveness endpoint /healthz (0 disables)")
    run.add_argument("--metrics-port", type=int, default=8080, help="Prometheus /metrics (0 disables)")
    run.add_argument(
        "--peering",
        metavar="NAME",
        help="ClusterKopfPeering name for leader election between replicas (default: standalone)",
    )
    run.add_argument(
        "--priority",
        type=int,
        help="peering priority of this replica; the highest acts (default: random, so replicas never tie)",
    )
    run.add_argument("--webhook-port", type=int, default=0, help="serve the Job admission webhooks on this port (0: off)")
    run.add_argument("--webhook-host", default="127.0.0.1", help="address the API server uses to reach the webhooks")
    run.add_argument("--controller-log-level", default="INFO", help="level of the controller's JSON logs")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from multikueue.operator.app import ControllerOptions, main

    return main(
        ControllerOptions(
            role=args.role,
            namespace=args.namespace,
            config_map=args.config_map,
            kubeconfig=args.kubeconfig,
            health_port=args.health_port,
            metrics_port=args.metrics_port,
            peering=args.peering,
            priority=args.priority if args.priority is not None else random.randint(1, 1_000_000),
            log_level=args.controller_log_level,
            webhook_port=args.webhook_port,
            webhook_host=args.webhook_host,
        )
    )
