"""Upstream Kueue's scheduler scalability test, run against this project's controller.

Upstream's runner (``test/performance/scheduler/runner`` of Kueue v0.19.2,
built from ``../shared/thirdparty/kueue-v0.19.2.tar.gz`` and cached like the
other binaries) creates the cohorts, ClusterQueues (with their preemption
policies: ``withinClusterQueue: LowerPriority``, ``reclaimWithinCohort: Any``),
LocalQueues and Workloads of a generator file, marks each admitted Workload
finished after its ``runtimeMs``, and writes a summary (time to admission per
Workload class, evictions, ClusterQueue usage). This script starts a local
apiserver and our controller, runs the runner against them with upstream's
baseline generator (``--cohorts`` cohorts of 6 ClusterQueues, 500 Workloads
each), and prints the summary with the controller's CPU seconds and peak RSS.

    python bench/upstream_scheduler.py --cohorts 1

Figures depend on the machine (a ratio against upstream needs upstream's
``minimalkueue`` run on the same machine: ``bench/scalability.py``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _perf import ensure_runner, generator, proc_stat

from multikueue.dev import upstream, wiring
from multikueue.dev.binaries import ensure_binaries
from multikueue.dev.clusterset import ClusterSet, ClusterSetOptions
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import free_base_port
from _interrupt import interrupt_on_signals


def main() -> int:
    interrupt_on_signals()  # Ctrl-C or SIGTERM still takes the clusters down
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cohorts", type=int, default=1, help="cohorts of upstream's baseline (5 there; 1 fits two cores)")
    parser.add_argument("--timeout", default="10m", help="the runner's maximum record time")
    parser.add_argument("--keep", metavar="DIR", help="keep the runner's output and the controller's log here")
    args = parser.parse_args()

    source = upstream.ensure_source()
    runner = ensure_runner(source)
    config = generator(source, "baseline", args.cohorts)
    binaries = ensure_binaries().binaries
    with tempfile.TemporaryDirectory(prefix="upstream-scheduler-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        (work / "generator.yaml").write_text(yaml.safe_dump(config))
        (work / "out").mkdir(exist_ok=True)
        options = ClusterSetOptions(
            name="perf", workers=0, full=False, base_port=free_base_port(1), directory=Path(tmp) / "clusters", wire=False
        )
        clusters = ClusterSet.plan(options)
        clusters.up(options, binaries)
        controller = ControllerProcess("manager", clusters.manager.kubeconfig_path, "manager", work / "controller.log")
        try:
            wiring.ensure_namespace(clusters.api(clusters.manager), wiring.CONTROLLER_NAMESPACE)
            controller.start()
            assert controller.process is not None
            cpu_before, _ = proc_stat(controller.process.pid)
            started = time.monotonic()
            result = subprocess.run(
                [str(runner), "-o", str(work / "out"), "-generatorConfig", str(work / "generator.yaml"), "-timeout", args.timeout],
                # The runner's test helpers look for the Kueue checkout (PROJECT_DIR/.. or a Makefile above the cwd).
                cwd=source.root,
                env={**os.environ, "KUBECONFIG": str(clusters.manager.kubeconfig_path)},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                check=False,
            )
            wall = time.monotonic() - started
            cpu_after, peak = proc_stat(controller.process.pid)
        finally:
            controller.stop()
            clusters.down()
        (work / "runner.log").write_text(result.stdout)
        if result.returncode != 0:
            print(f"the runner failed (exit {result.returncode}); last lines:\n" + "\n".join(result.stdout.splitlines()[-20:]))
            return 1
        summary = yaml.safe_load((work / "out" / "summary.yaml").read_text())
        print(yaml.safe_dump(summary, sort_keys=False).rstrip())
        evictions = sum(c.get("totalEvictions", 0) for c in summary.get("workloadClasses", {}).values())
        print(f"\nwall time {wall:.0f} s; evictions (preemptions) {evictions}; "
              f"controller CPU {cpu_after - cpu_before:.1f} s; controller peak RSS {peak / 1024:.0f} MiB")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
