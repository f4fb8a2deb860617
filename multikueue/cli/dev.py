"""``multikueue dev``: build the Kubernetes binaries and run local clusters."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from kubernetes import config as kube_config

from multikueue.dev import tekton, wiring
from multikueue.dev.binaries import KUBERNETES_VERSION, KWOK_VERSION, ensure_binaries
from multikueue.dev.clusterset import DEFAULT_BASE_PORT, ClusterSet, ClusterSetOptions
from multikueue.dev.errors import DevEnvironmentError


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    dev = commands.add_parser("dev", help="local Kubernetes control planes for development, demos and tests")
    sub = dev.add_subparsers(dest="dev_command", metavar="COMMAND")
    sub.required = True

    build = sub.add_parser(
        "build",
        help=f"build etcd/kube-apiserver/controller-manager/scheduler {KUBERNETES_VERSION} and kwok {KWOK_VERSION}",
    )
    build.add_argument("--rebuild", action="store_true", help="rebuild even if cached")
    build.add_argument(
        "--tekton",
        action="store_true",
        help="also build Tekton's controller from ../shared/thirdparty/tekton-pipeline-v1.15.0.tar.gz (about 10 minutes cold)",
    )
    build.set_defaults(handler=_build)

    clusters = sub.add_parser("clusters", help="start, stop or inspect a manager and its workers")
    csub = clusters.add_subparsers(dest="clusters_command", metavar="COMMAND")
    csub.required = True

    up = csub.add_parser("up", help="start a manager and N workers, install CRDs, wire the workers")
    _name(up)
    up.add_argument("--workers", type=int, default=2, help="number of worker clusters (default 2)")
    up.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT, help=f"first port (default {DEFAULT_BASE_PORT})")
    up.add_argument(
        "--apiserver-only",
        action="store_true",
        help="only etcd + kube-apiserver (no controller-manager, scheduler or kwok)",
    )
    up.add_argument("--nodes", type=int, default=2, help="kwok fake nodes per cluster (default 2)")
    up.add_argument(
        "--tekton",
        action="store_true",
        help="run Tekton Pipelines' controller on every worker (built from ../shared/thirdparty/tekton-pipeline-"
        "v1.15.0.tar.gz, about 10 minutes the first time; its webhook is not run); its TaskRuns' pods run on kwok",
    )
    up.set_defaults(handler=_up)

    down = csub.add_parser("down", help="stop every process of the clusters")
    _name(down)
    down.set_defaults(handler=_down)

    status = csub.add_parser("status", help="which clusters and processes are running")
    _name(status)
    status.add_argument("-o", "--output", choices=["table", "json"], default="table")
    status.set_defaults(handler=_status)

    demo = sub.add_parser(
        "demo",
        help="dispatch a Job and a PipelineRun from the manager to a worker and show `multikueue status` until both finish",
    )
    _name(demo)
    demo.add_argument("--timeout", type=float, default=240.0, help="give up after this many seconds (default 240)")
    demo.add_argument("--kind", action="store_true", help="on the kind clusters of kind-configs/up.sh (run it first)")
    demo.add_argument(
        "--tekton",
        action="store_true",
        help="build Tekton's controller if needed (about 10 minutes the first time) and run the PipelineRun under it; "
        "without this the real one is used only when already built, else the demo plays Tekton",
    )
    demo.set_defaults(handler=_demo)

    kind = sub.add_parser("kind", help="kind clusters with the controllers deployed in them (what kind-configs/up.sh runs)")
    ksub = kind.add_subparsers(dest="kind_command", metavar="COMMAND")
    ksub.required = True
    kind_up = ksub.add_parser(
        "up",
        help="create the manager and worker kind clusters, load the images, install config/default and "
        "config/worker, wire the workers, create ready queues; idempotent",
    )
    kind_up.add_argument("--node-image", required=True, help="kind node image (kind-configs/node-image.sh builds one offline)")
    kind_up.add_argument("--image", default="multikueue:dev", help="the controller image (hack/image.sh builds it)")
    kind_up.add_argument(
        "--upstream-worker",
        action="append",
        default=[],
        metavar="WORKER",
        help="run upstream Kueue on this worker (worker1 or worker2; repeatable) instead of this project's controller; "
        "built from ../shared/thirdparty/kueue-v0.19.2.tar.gz",
    )
    kind_up.add_argument(
        "--upstream-manager",
        action="store_true",
        help="run upstream Kueue on the manager instead of this project's controller: its MultiKueue dispatches "
        "to the workers (built from ../shared/thirdparty/kueue-v0.19.2.tar.gz)",
    )
    kind_up.set_defaults(handler=_kind_up)
    kind_down = ksub.add_parser("down", help="delete the kind clusters of `dev kind up` and their kubeconfigs")
    kind_down.set_defaults(handler=_kind_down)

    wire = sub.add_parser(
        "wire",
        help="connect existing clusters (e.g. kind): CRDs everywhere, worker access, Secrets and MultiKueueClusters",
    )
    wire.add_argument("--manager", required=True, type=Path, help="admin kubeconfig of the manager")
    wire.add_argument(
        "--worker",
        action="append",
        required=True,
        metavar="NAME=KUBECONFIG[@SERVER]",
        help="a worker's name and admin kubeconfig; @SERVER overrides the address the manager uses",
    )
    wire.set_defaults(handler=_wire)


def _name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default="dev", help="name of the cluster set (default dev)")


def _demo(args: argparse.Namespace) -> int:
    from multikueue.cli.status import show
    from multikueue.dev.demo import DemoOptions, run_demo

    return run_demo(DemoOptions(name=args.name, timeout=args.timeout, kind=args.kind, build_tekton=args.tekton), show_status=show)


def _build(args: argparse.Namespace) -> int:
    report = ensure_binaries(rebuild=args.rebuild)
    if report.built:
        print(f"built {', '.join(report.built)} in {report.seconds:.1f}s")
    else:
        print("binaries already built")
    print(f"control plane: {report.binaries.controlplane}")
    print(f"kwok:          {report.binaries.kwok}")
    if args.tekton:
        _, binary = tekton.ensure()
        print(f"tekton:        {binary}")
    return 0


def _up(args: argparse.Namespace) -> int:
    from multikueue.dev.demo import cli_command

    options = ClusterSetOptions(
        name=args.name,
        workers=args.workers,
        full=not args.apiserver_only,
        base_port=args.base_port,
        fake_nodes=args.nodes,
        tekton=args.tekton,
    )
    clusters = ClusterSet.plan(options)
    started = time.monotonic()
    clusters.up(options)
    print(f"local clusters {args.name!r} are up in {time.monotonic() - started:.1f}s:")
    for row in clusters.status():
        print(f"  {row['cluster']:<10} {row['server']:<26} kubeconfig: {row['kubeconfig']}")
    print(f"  try: kubectl --kubeconfig {clusters.manager.kubeconfig_path} get multikueueclusters")
    if args.tekton and clusters.workers:
        print(f"  Tekton Pipelines {tekton.VERSION} runs on {', '.join(clusters.tekton_running())} "
              f"(logs: {clusters.directory}/WORKER/logs/tekton-controller.log)")
    print(f"  stop: {cli_command()} dev clusters down" + ("" if args.name == "dev" else f" --name {args.name}"))
    return 0


def _down(args: argparse.Namespace) -> int:
    clusters = ClusterSet.load(args.name)
    clusters.down()
    print(f"local clusters {args.name!r} stopped")
    return 0


def _status(args: argparse.Namespace) -> int:
    clusters = ClusterSet.load(args.name)
    rows = clusters.status()
    if args.output == "json":
        json.dump(rows, sys.stdout, indent=2)
        print()
    else:
        for row in rows:
            state = "running" if row["healthy"] else "DEGRADED"
            print(f"{row['cluster']:<10} {state:<9} {row['server']}")
            for proc, alive in row["processes"].items():
                print(f"    {proc:<34} {'up' if alive else 'down'}")
    return 0 if all(r["healthy"] for r in rows) else 1


def _kind_up(args: argparse.Namespace) -> int:
    from multikueue.dev import kind
    from multikueue.dev.demo import cli_command

    options = kind.KindOptions(
        node_image=args.node_image,
        image=args.image,
        upstream_workers=tuple(args.upstream_worker),
        upstream_manager=args.upstream_manager,
    )
    kind.up(options)
    manager = kind.kubeconfig_path("manager")
    print(f"""
kind clusters are up, the controllers run in them; admin kubeconfigs in {kind.state_dir()}
  the manager:  export KUBECONFIG={manager}
  status:       kubectl get multikueueclusters,admissionchecks,clusterqueues
  submit a Job: kubectl create -f examples/kind/sample-job.yaml   (runs {kind.JOB_IMAGE} on a worker)
  watch it:     {cli_command()} status --kubeconfig {manager} -n default
  e2e on kind:  ./hack/test.sh -m e2e --clusters kind
  remove all:   kind-configs/down.sh""")
    for role in options.upstream_roles:
        print(f"  {role} runs upstream Kueue {kind.upstream.VERSION} (batch Jobs; the e2e suite needs every cluster on this project's controller)")
    return 0


def _kind_down(args: argparse.Namespace) -> int:
    from multikueue.dev import kind

    kind.down()
    print("kind clusters deleted")
    return 0


def _parse_worker(spec: str) -> wiring.WorkerEndpoint:
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise DevEnvironmentError(f"--worker {spec!r} is not NAME=KUBECONFIG[@SERVER]")
    path, _, server = rest.partition("@")
    return wiring.endpoint_from_kubeconfig(name, Path(path), server or None)


def _wire(args: argparse.Namespace) -> int:
    workers = [_parse_worker(spec) for spec in args.worker]
    manager = kube_config.new_client_from_config(config_file=str(args.manager))
    crds = wiring.project_crds()
    for api in [manager, *(w.admin_api for w in workers)]:
        wiring.install_crds(api, crds)
    for access in wiring.connect_workers(manager, workers):
        print(f"worker {access.cluster_name}: Secret kueue-system/{access.secret_name}, MultiKueueCluster {access.cluster_name}")
    return 0
