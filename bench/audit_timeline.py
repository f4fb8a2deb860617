"""Who wrote which Workloads when, from a kept scalability run's audit log: a timeline by window.

Why: two systems can end with the same totals and differ in what they did
first. On upstream's large-scale generator, upstream's controller wrote almost
only large Workloads after its first 30 s (their one admission write each),
while ours admitted medium and small ones around the large ones that waited,
which the large ones then evicted; in its first two minutes ours wrote 2.7
times as often and the runner's finishing writes were mostly refused (409).
This prints that picture for any run kept with ``--keep``.

    python bench/scalability.py --generator large-scale --systems ours --keep /tmp/run
    python bench/audit_timeline.py /tmp/run/01-ours --until 180
    python bench/audit_timeline.py /tmp/run/01-ours --window 120 --until 720 --inversions

Per window: the controller's Workload writes by class (the name's first
part: ``small-0-3-1`` is ``small``) and by which write to that Workload it
was (1st, 2nd, 3+); the runner's writes by HTTP code. The audit policy of
the scalability bench logs updates and patches of Workloads only. With
``--inversions``, also the medium Workloads admitted in each window and how
many of them while a large one of their own ClusterQueue existed and waited
(upstream's run of its large-scale generator: 178 over the whole run; ours
about 5,000-6,000, all in the first four minutes).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import yaml


def _start(run: Path) -> datetime:
    """When the runner started (its log's "Start runner" line): time 0 of the timeline."""
    with (run / "runner.log").open() as log:
        for line in log:
            if "Start runner" in line:
                return datetime.fromisoformat(line.split("\t")[0][:26])
    raise SystemExit(f"{run}/runner.log has no 'Start runner' line: is this a run directory kept by bench/scalability.py?")


def _seconds(stamp: str, start: datetime) -> float:
    """An audit or runner-log timestamp (RFC 3339, nanoseconds cut to microseconds) as seconds after ``start``."""
    return (datetime.fromisoformat(stamp[:26]) - start).total_seconds()


def _workload_writes(run: Path, start: datetime) -> Iterator[tuple[float, tuple[str, str], bool, int | None]]:
    """The audit log's Workload writes in order: (seconds after ``start``, (namespace, name), by the runner, HTTP code)."""
    with (run / "audit.log").open() as audit:
        for line in audit:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if ref.get("resource") != "workloads":
                continue
            key = (ref.get("namespace", ""), ref.get("name", ""))
            by_runner = "runner" in event.get("userAgent", "")
            yield _seconds(event["stageTimestamp"], start), key, by_runner, event["responseStatus"].get("code")


def timeline(run: Path, window: float, until: float) -> dict[int, Counter[tuple[str, str, str]]]:
    """Counts per window index of (who, class, what): who is ``controller`` or ``runner``."""
    writes: Counter[tuple[str, str]] = Counter()
    bins: dict[int, Counter[tuple[str, str, str]]] = defaultdict(Counter)
    for at, key, by_runner, code in _workload_writes(run, _start(run)):
        if at > until:
            break
        kind = key[1].split("-")[0]
        if by_runner:
            bins[int(at // window)][("runner", kind, str(code))] += 1
            continue
        writes[key] += 1
        nth = {1: "1st", 2: "2nd"}.get(writes[key], "3+")
        bins[int(at // window)][("controller", kind, nth)] += 1
    return bins


def inversions(run: Path, window: float, until: float) -> dict[int, tuple[int, int]]:
    """Per window index: (medium Workloads admitted in it, those of them admitted while a large one of
    their own ClusterQueue existed and waited), a queue's priority order broken on upstream's generators.

    A Workload's admission is the controller's last successful write before the runner's first write
    (its finish); a queue's large Workloads exist from the end of its generation group of the large
    class (the runner's ``generator.go`` "End generation" line of the group with the large class's
    creation interval, read from the generator file beside the run) and wait until their own admission.
    """
    start = _start(run)
    interval = _large_interval(run)
    large_from: dict[str, float] = {}
    with (run / "runner.log").open() as log:
        for line in log:
            if "End generation" in line and f'"delay": "{interval}"' in line:
                namespace = json.loads(line.rstrip("\n").split("\t")[-1]).get("namespace", "")
                large_from[namespace] = _seconds(line.split("\t")[0], start)
    admitted: dict[tuple[str, str], float] = {}
    done: set[tuple[str, str]] = set()
    for at, key, by_runner, code in _workload_writes(run, start):
        if key in done:
            continue
        if by_runner:
            done.add(key)
        elif code == 200:
            admitted[key] = at
    large_admitted: dict[str, list[float]] = {}
    for (namespace, name), at in admitted.items():
        if name.startswith("large") and (namespace, name) in done:
            large_admitted.setdefault(namespace, []).append(at)
    counts: dict[int, tuple[int, int]] = {}
    for (namespace, name), at in admitted.items():
        if not name.startswith("medium") or (namespace, name) not in done or at > until:
            continue
        waited = large_from.get(namespace, float("inf")) <= at and any(t > at for t in large_admitted.get(namespace, ()))
        total, inverted = counts.get(int(at // window), (0, 0))
        counts[int(at // window)] = (total + 1, inverted + waited)
    return counts


def _large_interval(run: Path) -> str:
    """The large class's ``creationIntervalMs`` in the run's generator file, as the runner logs it ("700ms")."""
    generator = yaml.safe_load((run.parent / "generator.yaml").read_text())
    for cohort in generator["cohorts"]:
        for queues in cohort["queuesSets"]:
            for workloads in queues["workloadsSets"]:
                if any(w["className"] == "large" for w in workloads["workloads"]):
                    return f"{workloads['creationIntervalMs']}ms"
    raise SystemExit("the generator file has no class named 'large'")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory kept by bench/scalability.py --keep (holds runner.log, audit.log)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds per line (default 30)")
    parser.add_argument("--until", type=float, default=180.0, help="seconds after the runner started (default 180)")
    parser.add_argument("--inversions", action="store_true",
                        help="also count medium Workloads admitted while a large one of their queue waited, per window")
    args = parser.parse_args()
    inverted = inversions(args.run, args.window, args.until) if args.inversions else {}
    for index, counts in sorted(timeline(args.run, args.window, args.until).items()):
        controller = ", ".join(f"{kind} {nth} {n}" for (who, kind, nth), n in sorted(counts.items()) if who == "controller")
        runner = Counter[str]()
        for (who, _, code), n in counts.items():
            if who == "runner":
                runner[code] += n
        print(f"{index * args.window:6.0f}s  controller: {controller or '-'}")
        print(f"{'':8}runner: {', '.join(f'{code} {n}' for code, n in sorted(runner.items())) or '-'}")
        if args.inversions:
            total, waited = inverted.get(index, (0, 0))
            print(f"{'':8}medium admitted: {total}, while a large one of their queue waited: {waited}")


if __name__ == "__main__":
    main()
