"""Upstream Kueue's scheduler scalability test, upstream's controller against ours, side by side.

For each run a fresh local apiserver (the project's Go-built control plane,
``--apiserver-only``), one controller under test, and upstream's perf runner
(``test/performance/scheduler/runner`` of Kueue v0.19.2) with a generator file:
the runner creates the cohorts, ClusterQueues (``withinClusterQueue:
LowerPriority``, ``reclaimWithinCohort: Any``), LocalQueues and Workloads,
marks each admitted Workload finished after its ``runtimeMs``, and writes its
summary. The systems, run in turn (A/B/C, A/B/C, ... for ``--runs``):

- ``upstream``: upstream's ``minimalkueue`` (its scheduler and core
  controllers, ``test/performance/scheduler/minimalkueue``) as shipped, with
  upstream's CRDs on the apiserver; its client is hard-coded to 50 QPS / burst 100;
- ``upstream-raised``: the same built with that limit raised to 1000 QPS /
  burst 2000 (``go build -overlay`` with a copy of its ``main.go`` where only
  those two numbers differ);
- ``ours``: ``multikueue run --role manager`` with this project's CRDs,
  conversion ``None`` as upstream's CRD bases (no controller serves the
  webhook here; before, the API server's v1beta1 watch cache failed through
  it and relisted every Workload every few seconds, for ours only).

Both minimalkueue builds and the runner come from ``../shared/thirdparty/kueue-v0.19.2.tar.gz``
(``go build -mod=vendor``, cached under the archive's checksum). Printed: a
line per run, then the table of means (min–max when runs differ) with ratios
ours / each upstream build: wall time, average time to admission per
Workload class, median time from admission to finish of small Workloads
(from the runner's ``wlStates.csv``), evictions (the runner's count, and the
reasons from the Workloads' Preempted conditions after the run),
"object has been modified" conflicts in the runner's log, quota-time held
(the runner's ``cpuUsed``), controller CPU seconds and peak RSS, apiserver CPU
seconds (both from /proc over the runner's lifetime), the Workloads finished
(as the API server lists them after the run; the runner's recorder drops
Workload events it cannot take at once, and their count is printed too, so
its per-Workload figures can miss some), and from the manager
apiserver's audit log (``--no-audit`` leaves it off) the writes to Workloads
and the 409s answered, by client: the controller's, the runner's, each
with whose write it lost to (the one stored on the version it was sent on, read
from request bodies with ``PERF_AUDIT_LEVEL=Request``; else the last one stored before it).

    python bench/scalability.py --generator baseline-1cohort            # 6 ClusterQueues, 3,000 Workloads
    python bench/scalability.py --generator baseline --runs 2           # upstream's full baseline, 15,000
    python bench/scalability.py --systems upstream-raised,ours --not-after 08:35 --json more.json
    MINIMALKUEUE_ARGS=--zap-log-level=3 python bench/scalability.py --systems upstream-raised --keep DIR  # its cycles logged
    OURS_ARGS="--outside-release-grace 60" python bench/scalability.py --systems ours   # extra arguments of ours
    python bench/scalability.py --report runs.json more.json    # one table over both invocations
    python bench/scalability.py --systems upstream-raised,ours --runner-nice -10   # the runner ahead of both (root)

The load average is printed with each run: on a shared machine compare runs
made under similar load. Each run also prints the runner's own CPU seconds;
``--runner-nice`` puts the runner ahead of the controller and the API server
(the same for every system), to tell whether a figure depends on the runner
being kept waiting on a small machine (on this one the runner's 409s did not:
docs/decisions.md, stop 38).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tenacity
import yaml
from _dispatch_metrics import delta, request_counts
from _perf import (
    AUDIT_POLICY,
    RAISED_LIMIT,
    SHIPPED_LIMIT,
    Run,
    audit_counts,
    audit_writes,
    client_limit,
    conflict_causes,
    ensure_minimalkueue,
    ensure_runner,
    eviction_races,
    generator,
    parse_run,
    proc_stat,
    quota_demand,
    request_lines,
    run_line,
    runs_from_json,
    runs_to_json,
    table,
    upstream_crds,
    workload_count,
    write_kinds,
)
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from multikueue.dev import upstream, wiring
from multikueue.dev.binaries import Binaries, ensure_binaries
from multikueue.dev.clusterset import ClusterSet, ClusterSetOptions
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.process import ManagedProcess, spawn
from multikueue.dev.pytest_plugin import free_base_port
from _interrupt import interrupt_on_signals

SYSTEMS = ("upstream", "upstream-raised", "ours")
#: The audit log's size before the API server would rotate it (MB): never, for a run.
AUDIT_LOG_MAX_MB = 1_000_000
#: Workloads per list request after a run.
LIST_PAGE = 500
#: Named generators: (upstream's file, cohort count or None for the file's own).
NAMED = {"baseline-1cohort": ("baseline", 1), "baseline": ("baseline", None), "large-scale": ("large-scale", None)}


class Controller:
    """The controller under test: a minimalkueue binary or our ``multikueue run``."""

    def __init__(self, system: str, binary: Path | None, kubeconfig: Path, log: Path) -> None:
        self.system, self.binary, self.kubeconfig, self.log = system, binary, kubeconfig, log
        self.ours: ControllerProcess | None = None
        self.process: ManagedProcess | None = None

    def start(self) -> int:
        if self.binary is None:
            extra = tuple(os.environ.get("OURS_ARGS", "").split())  # e.g. --outside-release-grace 60
            self.ours = ControllerProcess("perf", self.kubeconfig, "manager", self.log, extra_args=extra).start()
            assert self.ours.process is not None
            return self.ours.process.pid
        # minimalkueue has no probe; its informers sync in a second or two, the runner's
        # generator creates the queues first (upstream's runner starts it the same way).
        extra = os.environ.get("MINIMALKUEUE_ARGS", "").split()  # e.g. --zap-log-level=3 to see its cycles
        self.process = spawn(f"perf/{self.system}", [str(self.binary), "--kubeconfig", str(self.kubeconfig), *extra], self.log)
        time.sleep(3)
        if not self.process.alive():
            raise RuntimeError(f"{self.system} exited at start:\n{self.process.log_tail()}")
        return self.process.pid

    def stop(self) -> float:
        """Seconds from SIGTERM to exit (SIGKILL after 20 s)."""
        started = time.monotonic()
        if self.ours is not None:
            self.ours.stop()
        elif self.process is not None:
            self.process.stop(timeout=20)
        return time.monotonic() - started


def print_our_counts(log: Path) -> None:
    """Our controller's Workload and queue status writes by kind and its scheduling cycles (its "controller stopped" line)."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if "controller stopped" in line:
            try:
                fields = json.loads(line[line.index("{"):])
            except ValueError:
                fields = {"line": line}
            print(f"ours: writes {fields.get('workload_writes')}, queue status writes {fields.get('queue_status_writes')}, "
                  f"scheduling cycles {fields.get('scheduling_cycles')} ({fields.get('scheduling_seconds')} s, "
                  f"{fields.get('preemption_plans')} preemption plans run, {fields.get('preemption_plans_skipped')} "
                  f"answered without running), {fields.get('admissions_withdrawn')} admissions withdrawn before "
                  f"their write, quota release after the watch event "
                  f"{fields.get('quota_release')}", flush=True)
            return
    print('ours: no "controller stopped" line in its log', flush=True)


def is_busy_answer(exc: BaseException) -> bool:
    """An answer of an API server still catching up (timeout, throttling, unavailable): worth asking again."""
    return isinstance(exc, ApiException) and exc.status in (429, 500, 503, 504)


def list_workloads(api: client.ApiClient) -> list[dict[str, Any]]:
    """Every Workload after a run, a page at a time, a page the API server is too busy for asked again.

    Why pages and retries: after upstream's large-scale generator was cut
    short, one list of every Workload took longer than the API server's
    60 s and the bench stopped with a 504 instead of reporting the run.
    """
    objects = client.CustomObjectsApi(api)
    items: list[dict[str, Any]] = []
    token: str | None = None
    retrying = tenacity.Retrying(  # each iteration over it starts over: one per page
        retry=tenacity.retry_if_exception(is_busy_answer),
        wait=tenacity.wait_exponential(multiplier=1, max=30),
        stop=tenacity.stop_after_attempt(6),
        reraise=True,
    )
    while True:
        for attempt in retrying:
            with attempt:
                page = objects.list_cluster_custom_object(
                    "kueue.x-k8s.io", "v1beta2", "workloads", limit=LIST_PAGE, _continue=token
                )
        items.extend(page["items"])
        token = page["metadata"].get("continue")
        if not token:
            return items


def one_run(
    system: str,
    index: int,
    *,
    source: upstream.Source,
    runner: Path,
    binary: Path | None,
    binaries: Binaries,
    generator_file: Path,
    timeout: str,
    work: Path,
    audit: bool = True,
    runner_nice: int = 0,
    runner_qps: float | None = None,
) -> Run:
    out = work / f"{index:02d}-{system}"
    out.mkdir(parents=True, exist_ok=True)
    audit_args: tuple[str, ...] = ()
    if audit:
        (out / "audit-policy.yaml").write_text(AUDIT_POLICY)
        # One file whatever its size: 0 is not "no limit" but the log rotator's default of 100 MB, past which
        # the figures below were read from the last part only (upstream's large-scale run rotated after 18 min).
        audit_args = (
            f"--audit-policy-file={out / 'audit-policy.yaml'}", f"--audit-log-path={out / 'audit.log'}",
            "--audit-log-format=json", f"--audit-log-maxsize={AUDIT_LOG_MAX_MB}", "--audit-log-mode=batch",
        )  # fmt: skip
    options = ClusterSetOptions(
        name=f"perf-{index}",
        workers=0,
        full=False,
        base_port=free_base_port(1),
        directory=out / "cluster",
        wire=False,
        install_crds=binary is None,
        # Ours without the conversion webhook nobody serves here, as upstream's CRD bases: otherwise the API
        # server's v1beta1 watch cache relists every Workload every few seconds (ours only, before).
        conversion_webhook=False,
        manager_apiserver_args=audit_args,
    )
    clusters = ClusterSet.plan(options)
    clusters.up(options, binaries)
    controller = Controller(system, binary, clusters.manager.kubeconfig_path, out / "controller.log")
    try:
        api = clusters.api(clusters.manager)
        if binary is None:
            wiring.ensure_namespace(api, wiring.CONTROLLER_NAMESPACE)
        else:
            wiring.install_crds(api, upstream_crds(source))
        apiserver = next(p for p in clusters.manager.processes if p.name.endswith("/kube-apiserver"))
        pid = controller.start()
        load = os.getloadavg()
        cpu_before, _ = proc_stat(pid)
        api_before, _ = proc_stat(apiserver.pid)
        requests_before = request_counts(api)
        started = time.monotonic()
        with (out / "runner.log").open("w") as log:
            process = subprocess.Popen(
                [*(("nice", "-n", str(runner_nice)) if runner_nice else ()),
                 str(runner), "-o", str(out), "-generatorConfig", str(generator_file), "-timeout", timeout,
                 *(("-qps", f"{runner_qps:g}", "-burst", str(round(2 * runner_qps))) if runner_qps else ())],
                # The runner's test helpers look for the Kueue checkout (PROJECT_DIR/.. or a Makefile above the cwd).
                cwd=source.root,
                env={**os.environ, "KUBECONFIG": str(clusters.manager.kubeconfig_path)},
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                # wait4 rather than wait: the runner's own CPU seconds come with its exit status.
                _, status, usage = os.wait4(process.pid, 0)
            except BaseException:  # interrupted (bench/_interrupt.py): no runner left writing to a cluster going down
                process.kill()
                process.wait()
                raise
            process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        cpu_after, peak = proc_stat(pid)
        api_after, _ = proc_stat(apiserver.pid)
        requests = delta(requests_before, request_counts(api))
        try:
            workloads = list_workloads(api)
        except ApiException as exc:
            print(f"{system}: could not list the Workloads after the run ({exc.status} {exc.reason}): "
                  "no eviction reasons for this run", flush=True)
            workloads = []
        stop_s = controller.stop()
    finally:
        controller.stop()
        clusters.down()
    runner_log = (out / "runner.log").read_text(errors="replace")
    if binary is None:
        print_our_counts(out / "controller.log")
    incomplete = None
    if process.returncode != 0 or not (out / "summary.yaml").is_file():
        errors = [line for line in runner_log.splitlines() if "\tERROR\t" in line and "Reconciler error" not in line]
        incomplete = f"runner exit {process.returncode}" + (f": {errors[-1].split(chr(9))[-1][:200]}" if errors else "")
    read = lambda name: (out / name).read_text() if (out / name).is_file() else ""  # noqa: E731
    run = parse_run(
        system,
        read("summary.yaml"),
        read("wlStates.csv"),
        runner_log,
        workloads,
        wall_s=wall,
        controller_cpu_s=cpu_after - cpu_before,
        controller_peak_kib=peak,
        apiserver_cpu_s=api_after - api_before,
        load=load,
        stop_s=stop_s,
        incomplete=incomplete,
        requests=requests,
    )
    run.runner_cpu_s = usage.ru_utime + usage.ru_stime
    run.runner_nice = runner_nice
    if runner_qps:
        run.extra["runner qps"] = runner_qps
    if audit and (out / "audit.log").is_file():  # written by the apiserver as it stopped (batch mode)
        with (out / "audit.log").open(errors="replace") as lines:
            writes = audit_writes(lines)
        run.audit = audit_counts(writes)
        kinds = write_kinds(writes)  # None without request bodies (PERF_AUDIT_LEVEL=Request)
        causes = conflict_causes(writes, kinds)
        run.extra["409s after"] = {f"{refused} refused after {last}'s write": n for (refused, last), n in causes.most_common()}
        if (races := eviction_races(writes, kinds)) is not None:
            run.extra["eviction races"] = dict(races)
    return run


def duration_s(text: str) -> float:
    """A Go duration as the runner takes it (``15m``, ``90s``, ``1h``, ``1m30s``)."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(n) * units[u] for n, u in re.findall(r"([0-9.]+)(ms|h|m|s)", text))


def not_after(text: str) -> dt.datetime:
    """``HH:MM`` (UTC, today) or an ISO time."""
    now = dt.datetime.now(dt.UTC)
    if len(text) <= 5:
        hour, minute = (int(x) for x in text.split(":"))
        return now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    parsed = dt.datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def settle(load: float, longest: float = 300.0) -> float:
    """Wait until the 1-minute load average is at most ``load`` (or ``longest`` seconds passed); the seconds waited."""
    started = time.monotonic()
    while os.getloadavg()[0] > load and time.monotonic() - started < longest:
        time.sleep(5)
    return time.monotonic() - started


def main() -> int:
    interrupt_on_signals()  # Ctrl-C or SIGTERM still takes the clusters down
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generator", default="baseline-1cohort", help=f"{', '.join(NAMED)}, or a generator file")
    parser.add_argument("--cohorts", type=int, help="override the generator's cohort count")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, run in this order each round ({', '.join(SYSTEMS)})")
    parser.add_argument("--runs", type=int, default=1, help="rounds (each system once per round)")
    parser.add_argument("--timeout", default="30m", help="the runner's maximum record time (ours needed 13 min for 3,000 Workloads under load)")
    parser.add_argument("--not-after", type=not_after, metavar="HH:MM", help="start no run that could end after this time (UTC)")
    parser.add_argument("--keep", metavar="DIR", help="keep each run's output, logs and clusters' logs here")
    parser.add_argument("--json", metavar="FILE", help="also write every run's figures here")
    parser.add_argument(
        "--runner-nice", type=int, default=0, metavar="N",
        help="run upstream's runner under nice -n N (negative, as root: ahead of the controller and the API server "
        "on a small machine, so that the instrument is not the one kept waiting; the same for every system)",
    )  # fmt: skip
    parser.add_argument(
        "--runner-qps", type=float, metavar="QPS",
        help="limit upstream's runner's client to QPS (burst twice that; the same for every system). Without it the "
        "runner creates every queue's Workloads at once, as upstream's own make targets run it; with upstream's "
        "large-scale generator (1,000 ClusterQueues) on two cores one of its creations then outlived the API "
        "server's 60 s request timeout in a run of ours, which ends the runner",
    )  # fmt: skip
    parser.add_argument(
        "--settle", type=float, metavar="LOAD",
        help="before each run wait (at most 5 min) until the 1-minute load average is at most LOAD: a run started "
        "right after another one inherits its load, and single runs then disagree more than the effects looked for",
    )  # fmt: skip
    parser.add_argument("--no-audit", action="store_true", help="no audit log on the manager's apiserver (it counts each client's writes and 409s)")
    parser.add_argument("--report", nargs="+", metavar="JSON", help="run nothing: print the table over the runs saved by --json")
    args = parser.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if unknown := [s for s in systems if s not in SYSTEMS]:
        parser.error(f"unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    if args.report:
        saved = [run for path in args.report for run in runs_from_json(Path(path).read_text())]
        if len(generators := {str(r.extra.get("generator")) for r in saved}) > 1:
            print(f"warning: these runs used different generators ({', '.join(sorted(generators))})")
        for run in saved:
            print(run_line(run))
        print()
        print(table(saved, [s for s in systems if any(r.system == s for r in saved)]))
        return 0

    source = upstream.ensure_source()
    runner = ensure_runner(source)
    builds: dict[str, Path | None] = {
        "upstream": ensure_minimalkueue(source) if "upstream" in systems else None,
        "upstream-raised": ensure_minimalkueue(source, raised=True) if "upstream-raised" in systems else None,
        "ours": None,
    }
    name, cohorts = NAMED.get(args.generator, (args.generator, None))
    config = generator(source, name, args.cohorts if args.cohorts is not None else cohorts)
    binaries = ensure_binaries().binaries
    print(
        f"generator {args.generator}: {sum(c['count'] for c in config['cohorts'])} cohort(s), "
        f"{workload_count(config):,} Workloads needing {quota_demand(config):.3g} mCPU·ms of quota-time; systems {', '.join(systems)}, {args.runs} round(s)\n"
        f"upstream = minimalkueue {upstream.VERSION} as shipped (client {SHIPPED_LIMIT[0]} QPS / burst {SHIPPED_LIMIT[1]}); "
        f"upstream-raised = the same with that hard-coded limit raised to {RAISED_LIMIT[0]} QPS / burst {RAISED_LIMIT[1]} "
        "(a copy of its main.go with those two numbers changed, go build -overlay)"
        + (f"; the runner under nice -n {args.runner_nice}" if args.runner_nice else "")
        + (f"; the runner's client limited to {args.runner_qps:g} QPS" if args.runner_qps else ""),
        flush=True,
    )
    for system in ("upstream", "upstream-raised"):
        if (build := builds[system]) is not None:
            limit = client_limit(build)
            found = "not found in its log" if limit is None else f"{limit[0]:g} QPS / burst {limit[1]}"
            print(f"{system}: {build.name}, client limit in use (its own log line): {found}", flush=True)
    runs: list[Run] = []
    longest = 0.0
    with tempfile.TemporaryDirectory(prefix="scalability-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        generator_file = work / "generator.yaml"
        generator_file.write_text(yaml.safe_dump(config))
        index = 0
        for round_ in range(args.runs):
            for system in systems:
                index += 1
                # Set-up and teardown take a minute or two; a run may last until the runner's timeout
                # after the generator's end (under a minute for the baselines).
                budget = max(longest * 1.3, duration_s(args.timeout) + 60) + 120
                if args.not_after and dt.datetime.now(dt.UTC) + dt.timedelta(seconds=budget) > args.not_after:
                    print(f"--- not starting {system} (round {round_ + 1}): it could end after {args.not_after:%H:%M} UTC", flush=True)
                    continue
                waited = settle(args.settle) if args.settle is not None else None
                print(
                    f"--- round {round_ + 1}: {system} (load {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
                    + (f", after waiting {waited:.0f} s for it to settle" if waited and waited >= 1 else "") + ")",
                    flush=True,
                )  # fmt: skip
                started = time.monotonic()
                try:
                    run = one_run(
                        system, index, source=source, runner=runner, binary=builds[system], binaries=binaries,
                        generator_file=generator_file, timeout=args.timeout, work=work, audit=not args.no_audit,
                        runner_nice=args.runner_nice, runner_qps=args.runner_qps,
                    )  # fmt: skip
                except RuntimeError as exc:
                    print(f"{system}: {exc}", flush=True)
                    continue
                longest = max(longest, time.monotonic() - started)
                run.extra.update(generator=args.generator, cohorts=args.cohorts, at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
                runs.append(run)
                print(run_line(run), flush=True)
                if lines := request_lines(run):
                    print("  API requests per Workload (every client, over the runner's lifetime):", *lines, sep="\n  ", flush=True)
                if causes := run.extra.get("409s after"):
                    print("  409s by the write each refused one lost to (audit log):", ", ".join(f"{k}: {n}" for k, n in causes.items()), flush=True)
                if races := run.extra.get("eviction races"):
                    print("  evictions against the runner's Finished (request bodies):", ", ".join(f"{k}: {n}" for k, n in races.items()), flush=True)
                if args.json:
                    Path(args.json).write_text(runs_to_json(runs))
    if not runs:
        return 1
    print()
    print(table(runs, systems))
    return 0


if __name__ == "__main__":
    sys.exit(main())
