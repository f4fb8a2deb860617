#!/usr/bin/env python3
"""Check the Grafana dashboard's queries against a real Prometheus scraping running controllers.

Brings up a local cluster set of its own (a manager and two workers, full
control planes with kwok nodes, on free ports, in
``~/.cache/multikueue/clusters/dashboard-check``), starts our controller on
each (manager role on the manager, worker role on the workers), wires a
MultiKueue ClusterQueue whose quota is smaller than the load, starts
Prometheus (the Debian package's binary) scraping the three controllers'
``/metrics`` every 2 s, and submits Jobs: a burst (some wait for quota),
then one every few seconds. Once there is history, every query of
``config/grafana/multikueue-dashboard.json`` (Grafana's variables replaced:
``$instance``/``$cluster_queue`` by ``.*``, ``$__rate_interval`` by ``1m``,
``$__range`` by ``15m``) runs through Prometheus's HTTP API; each must return
at least one series with a number (not NaN). Then headless Chromium takes
screenshots of Prometheus's graph page with each dashboard panel's queries.

    sudo apt-get install -y prometheus chromium      # once
    ~/.cache/multikueue/venv/bin/python hack/dashboard-check.py --screenshots /tmp/shots

``--demo`` checks the dashboard over the demo's own controllers instead
(``./hack/demo.sh`` leaves them running): Prometheus scrapes them while the
demo runs once more, then the same queries and screenshots.

    ./hack/demo.sh && ~/.cache/multikueue/venv/bin/python hack/dashboard-check.py --demo --screenshots /tmp/shots

Exit status 0 when every query returned data. ``--keep`` leaves the
clusters, controllers and Prometheus running (their addresses are printed);
stop them with ``multikueue dev clusters down --name dashboard-check`` and by
killing the printed process ids.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's multikueue, whatever the venv points at
from multikueue.dev import objects as o  # noqa: E402
from multikueue.dev import scenarios  # noqa: E402
from multikueue.dev.clusterset import ClusterSet, ClusterSetOptions  # noqa: E402
from multikueue.dev.controllers import ControllerProcess, free_port  # noqa: E402
from multikueue.dev.pytest_plugin import free_base_port  # noqa: E402

CHECKOUT = Path(__file__).resolve().parents[1]
DASHBOARD = CHECKOUT / "config" / "grafana" / "multikueue-dashboard.json"
#: Grafana's variables, as the check fills them in.
VARIABLES = {"$__rate_interval": "1m", "$__range": "15m", "$instance": ".*", "$cluster_queue": ".*"}
SCRAPE_INTERVAL = "2s"


def dashboard_queries(path: Path = DASHBOARD) -> list[tuple[str, str, str]]:
    """(row, panel title, PromQL with the variables filled in) of every panel target, in dashboard order."""
    rows, row = [], ""
    for panel in json.loads(path.read_text())["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            continue
        for target in panel["targets"]:
            expr = target["expr"]
            for name in sorted(VARIABLES, key=len, reverse=True):  # $__range before $__rate_interval's prefix
                expr = expr.replace(name, VARIABLES[name])
            rows.append((row, panel["title"], expr))
    return rows


class Prometheus:
    """The Debian ``prometheus`` binary, scraping ``targets`` (instance name -> host:port), storing under ``directory``."""

    def __init__(self, directory: Path, targets: dict[str, str]) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        directory.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "scrape_configs": [
                {
                    "job_name": "multikueue",
                    # instance named after the cluster: the dashboard's legends read "manager", not an address.
                    "static_configs": [{"targets": [address], "labels": {"instance": name}} for name, address in targets.items()],
                }
            ],
        }
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> "Prometheus":
        binary = shutil.which("prometheus")
        if binary is None:
            sys.exit("prometheus not found: sudo apt-get install -y prometheus")
        log = (self.directory / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [binary, f"--config.file={self.directory / 'prometheus.yml'}", f"--storage.tsdb.path={self.directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        o.wait_for(lambda: self._ready(), 30, what="Prometheus ready")
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise RuntimeError(f"query failed: {expr}: {body}")
        return list(body["data"]["result"])

    def targets_up(self) -> dict[str, str]:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=5) as response:
            active = json.load(response)["data"]["activeTargets"]
        return {t["labels"]["instance"]: t["health"] for t in active}

    def graph_url(self, exprs: list[str], range_input: str = "10m") -> str:
        params: dict[str, str] = {}
        for i, expr in enumerate(exprs):
            params |= {f"g{i}.expr": expr, f"g{i}.tab": "0", f"g{i}.range_input": range_input, f"g{i}.stacked": "0"}
        return f"{self.url}/graph?" + urllib.parse.urlencode(params)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
            self.process = None


class Load:
    """Submits Jobs to the manager: ``burst`` at once, then one every ``every`` seconds until stopped."""

    def __init__(self, manager: client.ApiClient, ns: str, burst: int, every: float, run_for: str) -> None:
        self.batch = client.BatchV1Api(manager)
        self.ns, self.burst, self.every, self.run_for = ns, burst, every, run_for
        self.submitted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def _submit(self) -> None:
        name = f"job-{self.submitted:03d}"
        body = o.batch_job(self.ns, name, "user-queue", {"cpu": "1"}, managed_by=scenarios.MANAGED_BY, run_for=self.run_for)
        self.batch.create_namespaced_job(self.ns, body)
        self.submitted += 1

    def _run(self) -> None:
        for _ in range(self.burst):
            self._submit()
        while not self._stop.wait(self.every):
            try:
                self._submit()
            except Exception as exc:  # noqa: BLE001 - keep the load going; say why one failed
                print(f"    (a Job was not submitted: {exc})", flush=True)

    def start(self) -> "Load":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def has_number(result: list[dict[str, Any]]) -> bool:
    """Whether some series has a finite value (histogram_quantile over no observations gives NaN)."""
    return any(not math.isnan(float(s["value"][1])) for s in result if "value" in s)


def check(prometheus: Prometheus) -> list[tuple[str, str, str, int, bool]]:
    """Run every dashboard query; (row, panel, query, series, has a number) each."""
    results = []
    for row, panel, expr in dashboard_queries():
        result = prometheus.query(expr)
        results.append((row, panel, expr, len(result), has_number(result)))
    return results


def screenshot(url: str, path: Path, size: str = "1400,2200", wait_ms: int = 15000) -> None:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        print("    chromium not found (sudo apt-get install -y chromium): no screenshot", flush=True)
        return
    subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={size}",
         f"--virtual-time-budget={wait_ms}", f"--screenshot={path}", url],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip


def report(prometheus: Prometheus, screenshots: Path | None, window: str) -> bool:
    """Run and print every dashboard query, take the screenshots; True when every query returned a number."""
    results = check(prometheus)
    width = max(len(panel) for _, panel, _, _, _ in results)
    for _, panel, expr, series, number in results:
        verdict = "ok" if series and number else ("NaN only" if series else "EMPTY")
        print(f"  {verdict:8} {panel:{width}}  {series:3} series  {expr}")
    ok = all(series and number for _, _, _, series, number in results)
    if screenshots is not None:
        screenshots.mkdir(parents=True, exist_ok=True)
        by_panel: dict[str, list[str]] = {}
        for _, panel, expr, _, _ in results:
            by_panel.setdefault(panel, []).append(expr)
        for index, (panel, exprs) in enumerate(by_panel.items(), 1):
            slug = "".join(c if c.isalnum() else "-" for c in panel.lower()).strip("-")
            path = screenshots / f"panel-{index:02d}-{slug}.png"
            screenshot(prometheus.graph_url(exprs, window), path, size=f"1400,{300 + 745 * len(exprs)}")
            print(f"--- screenshot of panel {panel!r} ({len(exprs)} queries): {path}", flush=True)
    print("--- every dashboard query returned data" if ok else "--- some dashboard queries returned no data", flush=True)
    return ok


def demo_metrics_ports(name: str) -> dict[str, str]:
    """cluster -> host:port of the /metrics of the controllers ``./hack/demo.sh`` left running on the set ``name``."""
    from multikueue.dev.demo import running_controller

    try:
        clusters = ClusterSet.load(name)
    except Exception as exc:  # noqa: BLE001 - any reason the set is not there reads the same to the user
        sys.exit(f"no local cluster set {name!r} ({exc}): run ./hack/demo.sh first")
    ports = {}
    for cluster in clusters.clusters:
        process = running_controller(cluster.processes, cluster.name)
        if process is None or "--metrics-port" not in process.argv:
            sys.exit(f"no controller of the demo runs on {cluster.name!r}: run ./hack/demo.sh (it leaves them running)")
        ports[cluster.name] = f"127.0.0.1:{process.argv[process.argv.index('--metrics-port') + 1]}"
    return ports


def follow_up_job(name: str) -> None:
    """What the demo's closing lines suggest next: ``examples/jobs/job.yaml`` into its namespace, waited for until finished.

    Also what makes the histogram panels show numbers: the demo's queue is
    new, so its series are born holding the demo's one observation and
    ``rate()`` sees no increase until a second one.
    """
    clusters = ClusterSet.load(name)
    manager = clusters.api(clusters.clusters[0])
    namespaces = client.CoreV1Api(manager).list_namespace().items
    demo = max((n for n in namespaces if n.metadata.name.startswith("demo-")), key=lambda n: n.metadata.creation_timestamp)
    ns = demo.metadata.name
    body = yaml.safe_load((CHECKOUT / "examples" / "jobs" / "job.yaml").read_text())
    body["metadata"]["namespace"] = ns
    job = client.BatchV1Api(manager).create_namespaced_job(ns, body)
    print(f"--- the demo's suggested next step: examples/jobs/job.yaml as {ns}/{job.metadata.name}; waiting for it to finish", flush=True)

    def finished() -> bool:
        status = client.BatchV1Api(manager).read_namespaced_job(job.metadata.name, ns).status
        return any(c.type in ("Complete", "Failed") and c.status == "True" for c in status.conditions or [])

    o.wait_for(finished, 180, 1, f"Job {ns}/{job.metadata.name} finished")


def check_demo(args: argparse.Namespace) -> int:
    """The dashboard over the demo's own controllers: Prometheus scrapes them while the demo runs once more."""
    ports = demo_metrics_ports(args.name)
    work = Path(tempfile.mkdtemp(prefix="dashboard-check-demo-"))
    print(f"--- the demo's controllers, /metrics on {ports}", flush=True)
    prometheus = Prometheus(work / "prometheus", ports).start()
    try:
        print(f"--- Prometheus on {prometheus.url}, scraping every {SCRAPE_INTERVAL}; running the demo (a Job and a PipelineRun)", flush=True)
        time.sleep(6)  # a few scrapes before the demo's Workloads: rates need two samples around them
        demo = subprocess.run([sys.executable, "-m", "multikueue.cli.main", "dev", "demo", "--name", args.name], check=False)
        if demo.returncode != 0:
            print(f"--- the demo failed (exit {demo.returncode})", flush=True)
            return 1
        follow_up_job(args.name)
        time.sleep(10)
        print(f"--- targets: {prometheus.targets_up()}", flush=True)
        return 0 if report(prometheus, args.screenshots, "5m") else 1
    finally:
        if args.keep:
            print(f"--- kept running: Prometheus {prometheus.url} (pid {prometheus.process.pid if prometheus.process else '-'})")
        else:
            prometheus.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="dashboard-check", help="the local cluster set's name (its own directory and ports)")
    parser.add_argument("--demo", action="store_true",
                        help="instead of a cluster set and load of its own: the controllers ./hack/demo.sh left running "
                        "(set 'dev' unless --name), scraped while the demo runs once more")  # fmt: skip
    parser.add_argument("--burst", type=int, default=10, help="Jobs submitted at once (the manager's quota is 6 CPUs: some wait)")
    parser.add_argument("--every", type=float, default=4.0, help="then one Job every this many seconds")
    parser.add_argument("--run-for", default="15s", help="how long each Job's pod runs on the kwok nodes")
    parser.add_argument("--history", type=float, default=90.0, help="seconds of load before the queries run")
    parser.add_argument("--screenshots", type=Path, help="directory for PNGs of Prometheus's graph page, one per dashboard panel")
    parser.add_argument("--keep", action="store_true", help="leave clusters, controllers and Prometheus running")
    args = parser.parse_args(argv)
    if args.demo:
        if args.name == "dashboard-check":
            args.name = "dev"
        return check_demo(args)

    options = ClusterSetOptions(name=args.name, workers=2, full=True, base_port=free_base_port(3))
    clusters = ClusterSet.plan(options)
    print(f"--- local clusters {args.name!r} (manager + 2 workers) in {clusters.directory}", flush=True)
    clusters.up(options)
    work = clusters.directory / "dashboard-check"
    work.mkdir(parents=True, exist_ok=True)
    controllers: list[ControllerProcess] = []
    prometheus: Prometheus | None = None
    load: Load | None = None
    try:
        for index, cluster in enumerate(clusters.clusters):
            role = "manager" if index == 0 else "worker"
            ctl = ControllerProcess(cluster.name, cluster.kubeconfig_path, role, work / f"{cluster.name}-controller.log", webhooks=index == 0)
            controllers.append(ctl.start())
        ports = {ctl.name: f"127.0.0.1:{ctl.metrics_port}" for ctl in controllers}
        print(f"--- controllers running, /metrics on {ports}", flush=True)
        prometheus = Prometheus(work / "prometheus", ports).start()
        print(f"--- Prometheus on {prometheus.url}, scraping every {SCRAPE_INTERVAL}", flush=True)
        apis = [clusters.api(c) for c in clusters.clusters]
        ns = f"dash-{uuid.uuid4().hex[:4]}"
        for api in apis:
            client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        scenarios.multikueue_queues(apis[0], apis[1:], ns, worker_cpu=(4, 4), manager_cpu=6)
        load = Load(apis[0], ns, args.burst, args.every, args.run_for).start()
        print(f"--- load: {args.burst} Jobs at once into ClusterQueue cq-{ns} (6 CPUs; workers 4 each), then one every {args.every:g}s "
              f"(1 CPU, {args.run_for} each); {args.history:g}s of history first", flush=True)  # fmt: skip
        time.sleep(args.history)
        print(f"--- targets: {prometheus.targets_up()}; {load.submitted} Jobs submitted", flush=True)
        window = f"{int(args.history // 60) + 2}m"  # the load's whole history, not an empty hour
        return 0 if report(prometheus, args.screenshots, window) else 1
    finally:
        if load is not None:
            load.stop()
        if args.keep:
            print(f"--- kept running: Prometheus {prometheus.url if prometheus else '-'} "
                  f"(pid {prometheus.process.pid if prometheus and prometheus.process else '-'}), controllers "
                  f"{[(c.name, c.process.pid if c.process else None) for c in controllers]}; "
                  f"multikueue dev clusters down --name {args.name}")  # fmt: skip
        else:
            if prometheus is not None:
                prometheus.stop()
            for ctl in controllers:
                ctl.stop()
            clusters.down()


if __name__ == "__main__":
    sys.exit(main())
