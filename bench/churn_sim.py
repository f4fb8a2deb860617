"""Preemption churn of the scheduler on a generator file, without an API server: a discrete-event simulation.

Why: the scalability bench (``bench/scalability.py``) shows how many evictions a
run makes, and upstream's counts, but not which decision made them; a real run
takes minutes and its timing varies. This drives :func:`multikueue.core.schedule`
over a :class:`multikueue.core.Cache` on a simulated clock, as the scheduling loop
and upstream's perf runner do, and prints what it evicted and why.

The model (deterministic; every figure an option):

- Workloads of a generator file (upstream's format, as the scalability bench
  reads it) arrive at ``creationIntervalMs`` steps, each set starting at 0;
- every change reaches the cache ``--latency`` after its cause (a write and
  its watch event; the runner's own writes too);
- a cycle runs ``--coalesce`` after the first change that follows the last
  cycle, at the ``next_cycle_at`` a cycle asks for, and at least every second
  (the scheduling loop's waits);
- an admitted Workload is finished by the runner ``runtimeMs`` plus
  ``--runner-lag`` after its admission reached the cache (the runner's one
  reconciler falls that far behind on the full baseline); an evicted one is
  released by the runner ``--runner-lag`` after its eviction, or by the
  controller after ``--release-grace`` if that comes first, and waits in its
  queue again.

    python bench/churn_sim.py --generator bench/generators/one-queue-large-medium.yaml
    python bench/churn_sim.py --generator baseline-1cohort --requeue-batch 0     # parked Workloads wake at once

``--generator`` takes the scalability bench's names (upstream's files, from the
source archive) or a path.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from multikueue.api.clusterqueue import ClusterQueue
from multikueue.api.localqueue import LocalQueue
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import Workload
from multikueue.core import Cache, CycleResult, lifecycle, schedule
from multikueue.core.scheduler import CycleMemo
from multikueue.core.cache import WorkloadKey
from multikueue.core.cache.queues import REQUEUE_BATCH

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
FLAVOR = "default"


@dataclass(order=True)
class _Event:
    at: float
    seq: int
    action: Callable[[], None] = field(compare=False)


@dataclass
class Figures:
    """What a simulated run did."""

    admitted_after: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    evictions: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    evicted_by_class: Counter[str] = field(default_factory=Counter)
    #: (victim's class, preemptor's class, reason) -> evictions.
    by_preemptor: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: Evictions whose preemptor existed already when its victim was admitted.
    preemptor_was_waiting: int = 0
    #: Of those, what the preemptor was doing when its victim was admitted.
    preemptor_state: Counter[str] = field(default_factory=Counter)
    #: Evictions per minute of simulated time.
    per_minute: Counter[int] = field(default_factory=Counter)
    cycles: int = 0
    finished: int = 0
    end: float = 0.0


def _cluster_queue(name: str, cohort: str, spec: dict[str, Any]) -> ClusterQueue:
    quota: dict[str, Any] = {"name": "cpu", "nominalQuota": spec["nominalQuota"]}
    if spec.get("borrowingLimit") is not None:
        quota["borrowingLimit"] = spec["borrowingLimit"]
    body = {
        "cohortName": cohort,
        "namespaceSelector": {},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {
            "withinClusterQueue": spec.get("withinClusterQueue", "Never"),
            "reclaimWithinCohort": spec.get("reclaimWithinCohort", "Never"),
        },
        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": FLAVOR, "resources": [quota]}]}],
    }
    return ClusterQueue.from_k8s({"metadata": {"name": name}, "spec": body})


def _workload(namespace: str, name: str, cls: dict[str, Any], created: float) -> Workload:
    pod = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": str(cls["request"])}}}]}
    return Workload.from_k8s(
        {
            "metadata": {
                "namespace": namespace,
                "name": name,
                "creationTimestamp": (EPOCH + timedelta(seconds=created)).isoformat(),
                "labels": {"class": cls["className"]},
            },
            "spec": {
                "queueName": "lq",
                "priority": cls.get("priority", 0),
                "podSets": [{"name": "main", "count": 1, "template": {"spec": pod}}],
            },
        }
    )


class Simulation:
    """One run of a generator file over a fresh cache."""

    def __init__(
        self,
        config: dict[str, Any],
        *,
        latency: float,
        coalesce: float,
        requeue_batch: float,
        runner_lag: float = 0.0,
        release_grace: float = 5.0,
        arrival_stretch: float = 1.0,
        arrival_jitter: float = 0.0,
        seed: int = 0,
        runner_write: float = 0.0,
        runner_write_after: float = 0.04,
        max_queues: int | None = None,
    ) -> None:
        self.cache = Cache(requeue_batch=timedelta(seconds=requeue_batch))
        self.latency, self.coalesce = latency, coalesce
        self.runner_lag, self.release_grace = runner_lag, release_grace
        #: The runner as one writer (``--runner-write`` seconds a write): its finishes and releases queue up.
        self.runner_write, self.runner_write_after = runner_write, runner_write_after
        self._last_creation = 0.0
        self._runner_tasks: list[tuple[float, int, Callable[[float], bool]]] = []
        self._runner_busy = False
        rng = random.Random(seed)
        self.figures = Figures()
        self._events: list[_Event] = []
        self._seq = itertools.count()
        self._cycle_at: float | None = None
        self._memo = CycleMemo()  # handed from cycle to cycle, as the scheduling loop does
        self.max_queues = max_queues
        self._created: dict[WorkloadKey, tuple[float, str, float]] = {}  # created, class, runtime (s)
        self._runs: dict[WorkloadKey, int] = {}  # which admission a finish belongs to
        self._admitted_at: dict[WorkloadKey, float] = {}  # when each Workload was last admitted
        #: Per Workload, at its last admission: the higher-priority pending Workloads of its cohort and their state.
        self._waiting_at_admission: dict[WorkloadKey, dict[WorkloadKey, str]] = {}
        self.cache.upsert_flavor(ResourceFlavor.from_k8s({"metadata": {"name": FLAVOR}, "spec": {}}))
        for c, (cohort_set, cohort_index) in enumerate(
            (s, i) for s in config["cohorts"] for i in range(s["count"])
        ):
            cohort = f"{cohort_set['className']}-{c}"
            for queue_set in cohort_set["queuesSets"]:
                for q in range(queue_set["count"]):
                    cq = f"{queue_set['className']}-{c}-{q}"
                    self.cache.upsert_namespace(cq, {"kubernetes.io/metadata.name": cq})
                    self.cache.upsert_cluster_queue(_cluster_queue(cq, cohort, queue_set))
                    self.cache.upsert_local_queue(
                        LocalQueue.from_k8s({"metadata": {"namespace": cq, "name": "lq"}, "spec": {"clusterQueue": cq}})
                    )
                    for s, workload_set in enumerate(queue_set["workloadsSets"]):
                        interval = workload_set["creationIntervalMs"] / 1000
                        for i in range(workload_set["count"]):
                            for cls in workload_set["workloads"]:
                                at = i * interval * arrival_stretch + rng.uniform(0, arrival_jitter)
                                self._last_creation = max(self._last_creation, at)
                                self._arrive(cq, f"{cls['className']}-{s}-{i}", cls, at)
        del cohort_index

    # --- the clock -------------------------------------------------------------------------------

    def _at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, _Event(when, next(self._seq), action))

    def _changed(self, now: float) -> None:
        """A change reached the cache: a cycle follows after the coalescing wait, unless one is due sooner."""
        self._want_cycle(now + self.coalesce)

    def _want_cycle(self, when: float) -> None:
        if self._cycle_at is None or when < self._cycle_at:
            self._cycle_at = when
            self._at(when, lambda: self._cycle(when))

    def run(self) -> Figures:
        now = 0.0
        while self._events:
            event = heapq.heappop(self._events)
            now = event.at
            event.action()
            if self._cycle_at is None and len(self._created) > self.figures.finished:
                self._want_cycle(now + 1.0)  # the loop's one-second wait
        self.figures.end = now
        return self.figures

    # --- what the runner and the API server do ----------------------------------------------------

    def _arrive(self, namespace: str, name: str, cls: dict[str, Any], created: float) -> None:
        key = (namespace, name)
        self._created[key] = (created, cls["className"], cls["runtimeMs"] / 1000)

        def apply() -> None:
            self.cache.upsert_workload(_workload(namespace, name, cls, created))
            self._changed(created + self.latency)

        self._at(created + self.latency, apply)

    def _cycle(self, now: float) -> None:
        if self._cycle_at != now:
            return  # superseded by an earlier one
        self._cycle_at = None
        self.figures.cycles += 1
        result: CycleResult = schedule(self.cache, EPOCH + timedelta(seconds=now), heads_per_queue=8, memo=self._memo,
                                          max_queues=self.max_queues)
        for decision in result.admitted:
            self._at(now + self.latency, lambda d=decision, t=now: self._confirm(d, t))
        for preemption in result.preempted:
            self._at(now + self.latency, lambda p=preemption, t=now: self._evict(p, t))
        for update in result.pending:
            self._at(now + self.latency, lambda u=update, t=now: self._pending(u, t))
        if result.next_cycle_at is not None:
            self._want_cycle(max(now, (result.next_cycle_at - EPOCH).total_seconds()))
        if result.more:
            self._changed(now)

    def _update(self, key: WorkloadKey, status: dict[str, Any]) -> Workload | None:
        wl = self.cache.workload(key)
        if wl is None:
            return None
        body = wl.to_k8s()
        body["status"] = {**body.get("status", {}), **status}
        body["status"] = {k: v for k, v in body["status"].items() if v is not None}
        updated = Workload.from_k8s(body)
        self.cache.upsert_workload(updated)
        return updated

    def _confirm(self, decision: Any, decided: float) -> None:
        now = decided + self.latency
        wl = self.cache.workload(decision.key)
        if wl is None or wl.status.admission is not None:
            return
        status = lifecycle.reservation_status(wl, decision.admission, decision.admission_checks, EPOCH + timedelta(seconds=now))
        self._update(decision.key, status)
        created, cls, runtime = self._created[decision.key]
        self.figures.admitted_after[cls].append(now - created)
        run = self._runs[decision.key] = self._runs.get(decision.key, 0) + 1
        self._admitted_at[decision.key] = now
        self._waiting_at_admission[decision.key] = self._higher_waiting(decision.key)
        done = now + runtime + self.runner_lag + self.latency
        if self.runner_write:
            self._at(done, lambda: self._runner_add(done, lambda t: self._finish(decision.key, run, t)))
        else:
            self._at(done, lambda: self._finish(decision.key, run, done))
        self._changed(now)

    def _higher_waiting(self, key: WorkloadKey) -> dict[WorkloadKey, str]:
        """The pending Workloads of higher priority in the cohort of ``key``'s ClusterQueue, and their state."""
        cq = key[0]
        tree = self.cache.cohort_root(cq)
        wl = self.cache.workload(key)
        found: dict[WorkloadKey, str] = {}
        if wl is None:
            return found
        mine = wl.spec.priority or 0
        for other in self.cache.cluster_queue_names():
            if self.cache.cohort_root(other) != tree:
                continue
            for p in self.cache.pending_in_local_queue((other, "lq")):
                if p.priority <= mine:
                    continue
                message = p.condition[1] if p.condition else ""
                state = "parked" if self.cache.is_parked(p.key, other) else "awake"
                if "Pending the preemption" in message:
                    state += ", waiting for victims"
                elif message:
                    state += ", told: " + message.split(":")[0][:40]
                found[p.key] = state + (" (same CQ)" if other == cq else "")
        return found

    # --- the runner as one writer --------------------------------------------------------------------

    def _runner_add(self, ready: float, task: Callable[[float], bool]) -> None:
        """Queue a runner task (its reconciler is one worker); it returns whether it wrote."""
        heapq.heappush(self._runner_tasks, (ready, next(self._seq), task))
        if not self._runner_busy:
            self._runner_next(ready)

    def _runner_next(self, now: float) -> None:
        if not self._runner_tasks:
            self._runner_busy = False
            return
        _, _, task = heapq.heappop(self._runner_tasks)
        self._runner_busy = True
        # The task looks at the Workload when the worker takes it; its write lands one write time later.
        # The API server answers more slowly while the runner's generator still creates Workloads.
        write = self.runner_write if now < self._last_creation else self.runner_write_after
        wrote = task(now + write)
        end = now + (write if wrote else 0.0)
        self._at(end, lambda: self._runner_next(end))

    def _finish(self, key: WorkloadKey, run: int, now: float) -> bool:
        wl = self.cache.workload(key)
        if wl is None or self._runs.get(key) != run or wl.status.admission is None:
            return False  # evicted since: the runner finishes only what still runs
        condition = {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done",
                     "lastTransitionTime": (EPOCH + timedelta(seconds=now)).isoformat()}
        conditions = [c.to_dict() for c in wl.status.conditions or ()] + [condition]
        self._update(key, {"conditions": conditions})
        self.figures.finished += 1
        self._changed(now)
        return True

    def _evict(self, preemption: Any, decided: float) -> None:
        now = decided + self.latency
        wl = self.cache.workload(preemption.victim)
        if wl is None or wl.status.admission is None or lifecycle.awaits_release(wl):
            return
        update = lifecycle.preempted(wl, preemption.reason, preemption.message, EPOCH + timedelta(seconds=now))
        assert update.status is not None
        self._update(preemption.victim, dict(update.status))
        self._runs[preemption.victim] = self._runs.get(preemption.victim, 0) + 1
        # The runner plays the job controller: it releases the quota one write later (the two-step eviction),
        # unless it lags behind the controller's release of a Workload with no owner.
        if self.runner_write:
            # The runner releases when its worker gets to it (a write even when the controller released first:
            # its message differs); the controller releases a Workload with no owner after the grace.
            victim = preemption.victim
            self._at(now + self.latency, lambda: self._runner_add(now + self.latency, lambda t: self._release(victim, t) or True))
            grace, run = now + self.release_grace, self._runs[victim]  # a re-admission since counts a new run
            self._at(grace, lambda: self._runs.get(victim) == run and self._release(victim, grace))
        else:
            release = now + min(self.runner_lag, self.release_grace) + self.latency
            self._at(release, lambda: self._release(preemption.victim, release))
        cls = self._created[preemption.victim][1]
        self.figures.evictions[preemption.victim[1]] += 1
        self.figures.evicted_by_class[cls] += 1
        self.figures.reasons[preemption.reason] += 1
        self.figures.by_preemptor[(cls, self._created[preemption.preemptor][1], preemption.reason)] += 1
        self.figures.per_minute[int(now // 60)] += 1
        if self._created[preemption.preemptor][0] < self._admitted_at.get(preemption.victim, now):
            self.figures.preemptor_was_waiting += 1  # the preemptor was created before its victim was admitted
            state = self._waiting_at_admission.get(preemption.victim, {}).get(preemption.preemptor, "not pending")
            self.figures.preemptor_state[state] += 1
        self._changed(now)

    def _release(self, key: WorkloadKey, now: float) -> bool:
        wl = self.cache.workload(key)
        if wl is None or not lifecycle.awaits_release(wl):
            return False
        update = lifecycle.released(wl, EPOCH + timedelta(seconds=now))
        assert update.status is not None
        self._update(key, dict(update.status))
        self._changed(now)
        return True

    def _pending(self, update: Any, decided: float) -> None:
        wl = self.cache.workload(update.key)
        if wl is None or wl.status.admission is not None or wl.is_finished:
            return
        self._update(update.key, lifecycle.pending_status(wl, update.reason, update.message, EPOCH + timedelta(seconds=decided + self.latency)))


def _load(name: str) -> dict[str, Any]:
    if Path(name).exists():
        return yaml.safe_load(Path(name).read_text())
    sys.path.insert(0, str(Path(__file__).parent))
    from _perf import generator  # noqa: PLC0415 - only for upstream's named files (needs the source archive)

    from multikueue.dev import upstream  # noqa: PLC0415

    cohorts = 1 if name == "baseline-1cohort" else None
    return generator(upstream.ensure_source(), "baseline" if name == "baseline-1cohort" else name, cohorts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generator", required=True, help="a generator file, or baseline / baseline-1cohort")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds from a write to its watch event (default 0.02)")
    parser.add_argument("--coalesce", type=float, default=0.05, help="the loop's wait before a cycle (default 0.05)")
    parser.add_argument("--requeue-batch", type=float, default=REQUEUE_BATCH.total_seconds(),
                        help=f"seconds before parked Workloads wake after a release (default {REQUEUE_BATCH.total_seconds():g})")
    parser.add_argument("--runner-lag", type=float, default=0.0,
                        help="seconds the runner's finish and release come late (15-20 on the full baseline; default 0)")
    parser.add_argument("--release-grace", type=float, default=5.0,
                        help="seconds before the controller releases an evicted Workload with no owner (default 5)")
    parser.add_argument("--arrival-stretch", type=float, default=1.0,
                        help="creation times multiplied by this (the runner took 2.5-4 min, not 1, on the full baseline)")
    parser.add_argument("--arrival-jitter", type=float, default=0.0,
                        help="up to this many seconds added at random to each creation (the runner's goroutines race)")
    parser.add_argument("--seed", type=int, default=0, help="of the jitter")
    parser.add_argument("--runner-write", type=float, default=0.0,
                        help="model the runner as one writer taking this many seconds a write (0.14 in the full "
                             "baseline's generation phase with ours, 0.09 with upstream's); 0: a fixed --runner-lag")
    parser.add_argument("--runner-write-after", type=float, default=0.04,
                        help="the runner's write time once every Workload is created (default 0.04)")
    parser.add_argument("--max-queues", type=int, default=0,
                        help="a cycle takes whole quota trees up to this many ClusterQueues, the rest the next cycle "
                             "(the scheduling loop's MAX_QUEUES_PER_CYCLE); 0: every changed tree in one cycle (default)")
    args = parser.parse_args()
    sim = Simulation(_load(args.generator), latency=args.latency, coalesce=args.coalesce,
                     requeue_batch=args.requeue_batch, runner_lag=args.runner_lag, release_grace=args.release_grace,
                     arrival_stretch=args.arrival_stretch, arrival_jitter=args.arrival_jitter, seed=args.seed,
                     runner_write=args.runner_write, runner_write_after=args.runner_write_after,
                     max_queues=args.max_queues or None)
    figures = sim.run()
    print(f"simulated {figures.end:.1f} s, {figures.cycles} cycles, {figures.finished} finished; "
          f"latency {args.latency} s, coalesce {args.coalesce} s, requeue batch {args.requeue_batch} s, "
          f"runner lag {args.runner_lag} s, release grace {args.release_grace} s, runner write {args.runner_write} s")
    for cls, waits in sorted(figures.admitted_after.items()):
        print(f"  {cls}: {len(waits)} admissions, mean wait {statistics.fmean(waits):.2f} s, "
              f"evicted {figures.evicted_by_class[cls]} times")
    print(f"  evictions {sum(figures.evictions.values())} {dict(figures.reasons)}; "
          f"most evicted: {figures.evictions.most_common(5)}")
    print("  by victim, preemptor, reason: "
          + ", ".join(f"{v}<-{p} {r} {n}" for (v, p, r), n in figures.by_preemptor.most_common(6)))
    print(f"  victims admitted while their preemptor waited: {figures.preemptor_was_waiting} "
          f"{figures.preemptor_state.most_common(6)}")
    print("  per minute: " + " ".join(f"{figures.per_minute[m]}" for m in range(max(figures.per_minute, default=-1) + 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
