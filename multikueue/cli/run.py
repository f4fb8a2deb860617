"""``multikueue run``: the controller process (manager or worker role)."""

from __future__ import annotations

import argparse

from multikueue.api.configuration import DEFAULT_CONFIG_MAP, DEFAULT_NAMESPACE
from multikueue.core.lifecycle import OUTSIDE_RELEASE_GRACE_SECONDS


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = commands.add_parser("run", help="run the controller (local quota admission; MultiKueue on the manager)")
    run.add_argument("--role", choices=["manager", "worker"], default="manager")
    run.add_argument("--namespace", default=DEFAULT_NAMESPACE, help=f"controller namespace (default {DEFAULT_NAMESPACE})")
    run.add_argument("--config-map", default=DEFAULT_CONFIG_MAP, help=f"configuration ConfigMap (default {DEFAULT_CONFIG_MAP})")
    run.add_argument("--kubeconfig", help="kubeconfig of the cluster to control (default: in-cluster, then $KUBECONFIG)")
    run.add_argument("--health-port", type=int, default=8081, help="probes: /healthz (liveness) and /readyz (0 disables)")
    run.add_argument("--metrics-port", type=int, default=8080, help="Prometheus /metrics (0 disables)")
    run.add_argument(
        "--leader-elect",
        action="store_true",
        help="elect one acting replica on a coordination.k8s.io Lease in --namespace (default: act at once, one replica)",
    )
    run.add_argument(
        "--leader-election-id",
        metavar="NAME",
        help="name of that Lease (default multikueue-manager-leader / multikueue-worker-leader by --role)",
    )
    run.add_argument("--webhook-port", type=int, default=0, help="serve the Job admission webhooks on this port (0: off)")
    run.add_argument(
        "--webhook-host",
        help="URL mode: address the API server uses to reach the webhooks (default 127.0.0.1; not with --webhook-service)",
    )
    run.add_argument(
        "--webhook-service",
        metavar="NAMESPACE/NAME",
        help="the webhook configurations reach the replicas through this Service (clientConfig.service) instead of a URL",
    )
    run.add_argument("--webhook-service-port", type=int, help="port of --webhook-service (default 443)")
    run.add_argument(
        "--webhook-cert-secret",
        metavar="NAME",
        help="kubernetes.io/tls Secret in --namespace whose certificate every replica serves; a replica issues it "
        "when missing, invalid or expiring (e.g. multikueue-webhook-server-cert)",
    )
    run.add_argument(
        "--webhook-cert-dir",
        metavar="DIR",
        help="serve tls.crt/tls.key from DIR, reloaded on change (cert-manager); its ca.crt, if any, becomes the caBundle",
    )
    run.add_argument(
        "--outside-release-grace",
        type=float,
        default=OUTSIDE_RELEASE_GRACE_SECONDS,
        metavar="SECONDS",
        help="a preempted Workload no integration here runs (no owner, or an owner kind not integrated) keeps its "
        "quota this long for its own controller to release it, as upstream Kueue expects; then this controller "
        f"releases it (default {OUTSIDE_RELEASE_GRACE_SECONDS:g})",
    )
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
            leader_elect=args.leader_elect,
            leader_election_id=args.leader_election_id,
            log_level=args.controller_log_level,
            webhook_port=args.webhook_port,
            webhook_host=args.webhook_host,
            webhook_service=args.webhook_service,
            webhook_service_port=args.webhook_service_port,
            webhook_cert_secret=args.webhook_cert_secret,
            webhook_cert_dir=args.webhook_cert_dir,
            outside_release_grace=args.outside_release_grace,
        )
    )
