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

Per window: the controller's Workload writes by class (the name's first
part: ``small-0-3-1`` is ``small``) and by which write to that Workload it
was (1st, 2nd, 3+); the runner's writes by HTTP code. The audit policy of
the scalability bench logs updates and patches of Workloads only.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path


def _start(run: Path) -> datetime:
    """When the runner started (its log's "Start runner" line): time 0 of the timeline."""
    with (run / "runner.log").open() as log:
        for line in log:
            if "Start runner" in line:
                return datetime.fromisoformat(line.split("\t")[0][:26])
    raise SystemExit(f"{run}/runner.log has no 'Start runner' line: is this a run directory kept by bench/scalability.py?")


def timeline(run: Path, window: float, until: float) -> dict[int, Counter[tuple[str, str, str]]]:
    """Counts per window index of (who, class, what): who is ``controller`` or ``runner``."""
    start = _start(run)
    writes: Counter[tuple[str, str]] = Counter()
    bins: dict[int, Counter[tuple[str, str, str]]] = defaultdict(Counter)
    with (run / "audit.log").open() as audit:
        for line in audit:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if ref.get("resource") != "workloads":
                continue
            at = (datetime.fromisoformat(event["stageTimestamp"][:26]) - start).total_seconds()
            if at > until:
                break
            name = ref.get("name", "")
            kind = name.split("-")[0]
            if "runner" in event.get("userAgent", ""):
                bins[int(at // window)][("runner", kind, str(event["responseStatus"].get("code")))] += 1
                continue
            key = (ref.get("namespace", ""), name)
            writes[key] += 1
            nth = {1: "1st", 2: "2nd"}.get(writes[key], "3+")
            bins[int(at // window)][("controller", kind, nth)] += 1
    return bins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory kept by bench/scalability.py --keep (holds runner.log, audit.log)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds per line (default 30)")
    parser.add_argument("--until", type=float, default=180.0, help="seconds after the runner started (default 180)")
    args = parser.parse_args()
    for index, counts in sorted(timeline(args.run, args.window, args.until).items()):
        controller = ", ".join(f"{kind} {nth} {n}" for (who, kind, nth), n in sorted(counts.items()) if who == "controller")
        runner = Counter[str]()
        for (who, _, code), n in counts.items():
            if who == "runner":
                runner[code] += n
        print(f"{index * args.window:6.0f}s  controller: {controller or '-'}")
        print(f"{'':8}runner: {', '.join(f'{code} {n}' for code, n in sorted(runner.items())) or '-'}")


if __name__ == "__main__":
    main()
