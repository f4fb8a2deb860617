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

With ``--evictions`` (a run kept with ``PERF_AUDIT_LEVEL=Request``, whose audit
log holds the write bodies), also each eviction by the victim's class, its
reason, and whether the preemptor's ClusterQueue was the victim's own (the
condition message's paths), with how long the victim had held its quota when
it was evicted: upstream's full baseline showed ours evicting medium Workloads
0.17 s after admitting them (median) and large ones reclaimed 0.15 s after
they borrowed, Workloads admitted into the gap between two large ones.

    PERF_AUDIT_LEVEL=Request python bench/scalability.py --generator baseline --systems ours --keep /tmp/run
    python bench/audit_timeline.py /tmp/run/01-ours --window 10 --until 120 --evictions

With ``--usage`` (request bodies too), also how many ClusterQueues were above
their nominal quota at each window's end, by how many CPUs in all, and how
many held any quota: on the large-scale generator upstream lent twice as much
in its first minute and then left 230 ClusterQueues without quota for a
minute rather than reclaim (decisions, stop 53).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

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


def _stored_writes(run: Path, start: datetime) -> Iterator[tuple[float, tuple[str, str], bool, dict[str, Any]]]:
    """The audit log's successful Workload writes in order: (seconds after ``start``, (namespace, name), by the
    runner, the status the write sent; empty without request bodies)."""
    with (run / "audit.log").open() as audit:
        for line in audit:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if ref.get("resource") != "workloads" or event.get("responseStatus", {}).get("code") != 200:
                continue
            key = (ref.get("namespace", ""), ref.get("name", ""))
            status = (event.get("requestObject") or {}).get("status") or {}
            yield _seconds(event["stageTimestamp"], start), key, "runner" in event.get("userAgent", ""), status


def _evictions(run: Path, start: datetime) -> Iterator[tuple[float, str, str, str, float]]:
    """Each eviction of a Workload holding quota, in order: (seconds after ``start``, the victim's
    class, its ``Preempted`` reason, ``own`` or ``other`` for the preemptor's ClusterQueue, seconds the
    victim had held its quota).

    A controller's successful write that sets an ``admission`` is a reservation (the first of a
    hold counts); one whose ``Preempted`` and ``Evicted`` conditions are True ends the hold as an
    eviction; a runner's write ends it too (its finish, or its release of an evicted Workload).
    """
    held: dict[tuple[str, str], float] = {}
    for at, key, by_runner, status in _stored_writes(run, start):
        if by_runner:
            held.pop(key, None)
            continue
        conditions = {c.get("type"): c for c in status.get("conditions") or ()}
        preempted = conditions.get("Preempted", {})
        if preempted.get("status") == "True" and conditions.get("Evicted", {}).get("status") == "True":
            if key in held:
                path = str(preempted.get("message", "")).partition("preemptor path: ")[2].split(";")[0]
                own = "own" if path.rsplit("/", 1)[-1] == key[0] else "other"
                yield at, key[1].split("-")[0], str(preempted.get("reason", "")), own, at - held.pop(key)
        elif status.get("admission"):
            held.setdefault(key, at)


def print_evictions(run: Path, window: float, until: float) -> None:
    """Evictions per class, reason and preemptor's queue with the victims' hold percentiles; then per window."""
    found = [e for e in _evictions(run, _start(run)) if e[0] <= until]
    if not found:
        print("evictions: none found (the audit log needs request bodies: PERF_AUDIT_LEVEL=Request)")
        return
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    per_window: dict[int, Counter[str]] = defaultdict(Counter)
    for at, kind, reason, own, hold in found:
        groups[(kind, reason, own)].append(hold)
        per_window[int(at // window)][kind] += 1
    print(f"evictions: {len(found)}; the victim's hold of its quota when evicted, seconds (p10 / median / p90)")
    for (kind, reason, own), holds in sorted(groups.items(), key=lambda item: -len(item[1])):
        holds.sort()
        p10, p50, p90 = (holds[min(len(holds) - 1, int(q * len(holds)))] for q in (0.1, 0.5, 0.9))
        print(f"  {kind:<8} {reason:<20} preemptor's queue {own:<5} {len(holds):6}  {p10:.2f} / {p50:.2f} / {p90:.2f}")
    for index, counts in sorted(per_window.items()):
        print(f"{index * window:6.0f}s  evicted: {', '.join(f'{kind} {n}' for kind, n in sorted(counts.items()))}")


def _cpus(quantity: object) -> float:
    """A CPU quantity ("20", "500m") in CPUs."""
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _nominal_quotas(run: Path) -> dict[str, float]:
    """Each queue set's nominal CPU quota by its class name (the ClusterQueue name's first part)."""
    generator = yaml.safe_load((run.parent / "generator.yaml").read_text())
    return {q["className"]: _cpus(q["nominalQuota"]) for c in generator["cohorts"] for q in c["queuesSets"]}


def usage(run: Path, window: float, until: float) -> dict[int, tuple[int, float, int]]:
    """At the end of each window: (ClusterQueues above their nominal quota, the CPUs above it in all, the
    ClusterQueues holding any quota), replayed from the audit log's request bodies.

    A controller's write that sets an ``admission`` starts (or restates) a hold of the CPUs its pod sets
    use; a controller's write setting ``QuotaReserved=False`` ends it (a release), and so does any write of
    the runner (its finish, or its release of an evicted Workload). An eviction alone does not: its quota
    is held until released, in both systems. Why: who borrowed how much, and when, is what decides
    whether a ClusterQueue's own Workloads must reclaim their quota (decisions, stop 53).
    """
    nominal = _nominal_quotas(run)
    start = _start(run)
    holds: dict[tuple[str, str], tuple[str, float]] = {}
    used: dict[str, float] = defaultdict(float)
    result: dict[int, tuple[int, float, int]] = {}

    def snapshot(index: int) -> None:
        above = [cpus - nominal.get(name.split("-")[0], 0.0) for name, cpus in used.items()]
        result[index] = (sum(1 for a in above if a > 1e-6), sum(a for a in above if a > 1e-6), sum(1 for c in used.values() if c > 1e-6))

    def drop(key: tuple[str, str]) -> None:
        if key in holds:
            name, cpus = holds.pop(key)
            used[name] -= cpus

    index = 0
    for at, key, by_runner, status in _stored_writes(run, start):
        if at > until:
            break
        while at >= (index + 1) * window:
            snapshot(index)
            index += 1
        admission = status.get("admission") or {}
        released = any(c.get("type") == "QuotaReserved" and c.get("status") == "False" for c in status.get("conditions") or ())
        if by_runner or (released and not admission):
            drop(key)
        elif admission.get("clusterQueue"):
            drop(key)
            cpus = sum(_cpus((ps.get("resourceUsage") or {}).get("cpu", 0)) for ps in admission.get("podSetAssignments") or ())
            holds[key] = (admission["clusterQueue"], cpus)
            used[admission["clusterQueue"]] += cpus
    while index * window < until and index not in result:
        snapshot(index)
        index += 1
    return result


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
    parser.add_argument("--evictions", action="store_true",
                        help="also each eviction: class, reason, preemptor's queue, how long the victim held its quota "
                        "(needs PERF_AUDIT_LEVEL=Request)")
    parser.add_argument("--usage", action="store_true",
                        help="also, at each window's end, the ClusterQueues above their nominal quota, the CPUs borrowed "
                        "and the ClusterQueues holding quota (needs PERF_AUDIT_LEVEL=Request)")
    args = parser.parse_args()
    used = usage(args.run, args.window, args.until) if args.usage else {}
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
        if args.usage:
            borrowing, borrowed, holding = used.get(index, (0, 0.0, 0))
            print(f"{'':8}at its end: {borrowing} ClusterQueues borrowing {borrowed:.0f} CPUs; {holding} holding quota")
    if args.evictions:
        print_evictions(args.run, args.window, args.until)


if __name__ == "__main__":
    main()
