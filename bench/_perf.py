"""Shared parts of the benchmarks that run upstream Kueue's scheduler perf runner.

``bench/upstream_scheduler.py`` (our controller alone) and
``bench/scalability.py`` (upstream's ``minimalkueue`` against ours) both use:

- the builds from upstream's source archive (Kueue v0.19.2, see
  ``multikueue/dev/upstream.py``), cached under the archive's checksum: the
  runner (``test/performance/scheduler/runner``) and ``minimalkueue``
  (``test/performance/scheduler/minimalkueue``), the latter also with its
  hard-coded client limit raised (a ``go build -overlay`` that swaps in a copy
  of ``main.go`` with the two numbers changed; the unpacked source is not
  touched);
- the generator files (upstream's, with the cohort count changed);
- ``/proc`` readings of a process (CPU seconds, peak RSS);
- the parsing of what the runner leaves (``summary.yaml``, ``wlStates.csv``,
  its log) and of the Workloads' conditions into one row per run, and the
  side-by-side table with ratios. These parts are pure (unit-tested in
  ``tests/bench/test_perf.py``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import statistics
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from _dispatch_metrics import Counts, requests_total  # the bench folder is no package
from _dispatch_metrics import table as request_table
from multikueue.dev import upstream
from multikueue.dev.binaries import binaries_dir
from multikueue.dev.thirdparty import build_go_binary

RUNNER_PACKAGE = "./test/performance/scheduler/runner"
MINIMALKUEUE_PACKAGE = "./test/performance/scheduler/minimalkueue"
MINIMALKUEUE_MAIN = Path("test/performance/scheduler/minimalkueue/main.go")
#: minimalkueue's client limit as shipped (``kubeConfig.QPS = 50``, ``kubeConfig.Burst = 100``) and raised.
SHIPPED_LIMIT = (50, 100)
RAISED_LIMIT = (1000, 2000)
GENERATORS = {
    "baseline": Path("test/performance/scheduler/configs/baseline/generator.yaml"),
    "large-scale": Path("test/performance/scheduler/configs/large-scale/generator.yaml"),
}
CLASSES = ("small", "medium", "large")
CONFLICT = "object has been modified"
WRITE_VERBS = ("PATCH", "APPLY", "PUT")


# -- builds -------------------------------------------------------------------


def _build(source: upstream.Source, target: Path, package: str, what: str, extra: Sequence[str] = ()) -> Path:
    return build_go_binary(source, target, package, what, extra)


def ensure_runner(source: upstream.Source) -> Path:
    target = binaries_dir() / f"kueue-perf-runner-{upstream.VERSION}-{source.short}"
    return _build(source, target, RUNNER_PACKAGE, "upstream's scheduler perf runner")


def raise_client_limit(main_go: str, limit: tuple[int, int] = RAISED_LIMIT) -> str:
    """minimalkueue's ``main.go`` with its hard-coded ``kubeConfig.QPS``/``Burst`` replaced (both must be found)."""
    qps, burst = SHIPPED_LIMIT
    old = (f"kubeConfig.QPS = {qps}\n", f"kubeConfig.Burst = {burst}\n")
    if not all(main_go.count(line) == 1 for line in old):
        raise ValueError(f"minimalkueue's main.go no longer sets {old[0].strip()} / {old[1].strip()} once each")
    return main_go.replace(old[0], f"kubeConfig.QPS = {limit[0]}\n").replace(old[1], f"kubeConfig.Burst = {limit[1]}\n")


def ensure_minimalkueue(source: upstream.Source, raised: bool = False) -> Path:
    """Upstream's minimalkueue, as shipped or with its client limit raised to :data:`RAISED_LIMIT`."""
    kind = "minimalkueue-raised" if raised else "minimalkueue"
    target = binaries_dir() / f"kueue-{kind}-{upstream.VERSION}-{source.short}"
    if target.is_file() or not raised:
        return _build(source, target, MINIMALKUEUE_PACKAGE, "upstream's minimalkueue")
    scratch = binaries_dir() / f".{kind}-overlay"
    scratch.mkdir(parents=True, exist_ok=True)
    original = source.root / MINIMALKUEUE_MAIN
    (scratch / "main.go").write_text(raise_client_limit(original.read_text()))
    (scratch / "overlay.json").write_text(json.dumps({"Replace": {str(original): str(scratch / "main.go")}}))
    what = f"upstream's minimalkueue with its client limit raised to {RAISED_LIMIT[0]} QPS / burst {RAISED_LIMIT[1]}"
    return _build(source, target, MINIMALKUEUE_PACKAGE, what, [f"-overlay={scratch / 'overlay.json'}"])


_UNREACHABLE_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def client_limit_in_log(text: str) -> tuple[float, int] | None:
    """(QPS, burst) from minimalkueue's ``K8S Client`` log line, if there."""
    match = re.search(r'K8S Client"?\s+\{[^}]*"qps":\s*([0-9.]+),\s*"burst":\s*([0-9]+)', text)
    return (float(match[1]), int(match[2])) if match else None


def client_limit(binary: Path) -> tuple[float, int] | None:
    """The client limit a minimalkueue build really uses: it logs it (at info) before its first request,
    so it is started against an unreachable server and read from its log."""
    with tempfile.TemporaryDirectory(prefix="minimalkueue-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(_UNREACHABLE_KUBECONFIG)
        try:
            proc = subprocess.run(
                [str(binary), "--kubeconfig", str(kubeconfig), "--zap-log-level=info"],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            return client_limit_in_log(str(exc.stdout or "") + str(exc.stderr or ""))
        return client_limit_in_log(proc.stdout + proc.stderr)


def upstream_crds(source: upstream.Source) -> list[dict[str, Any]]:
    """Upstream's own CRDs (``config/components/crd/bases``), as minimalkueue expects them."""
    bases = source.root / "config" / "components" / "crd" / "bases"
    return [yaml.safe_load(p.read_text()) for p in sorted(bases.glob("*.yaml"))]


def generator(source: upstream.Source, name: str, cohorts: int | None) -> dict[str, Any]:
    """A generator file: upstream's ``baseline`` / ``large-scale`` or a path; ``cohorts`` overrides each cohort set's count."""
    path = source.root / GENERATORS[name] if name in GENERATORS else Path(name)
    config: dict[str, Any] = yaml.safe_load(path.read_text())
    if cohorts is not None:
        for cohort in config["cohorts"]:
            cohort["count"] = cohorts
    return config


def workload_count(config: Mapping[str, Any]) -> int:
    return sum(
        c["count"] * q["count"] * s["count"] * len(s["workloads"])
        for c in config["cohorts"]
        for q in c["queuesSets"]
        for s in q["workloadsSets"]
    )


def quota_demand(config: Mapping[str, Any]) -> int:
    """The quota-time the Workloads need (mCPU·ms: request × runtime summed), the floor of the runner's ``cpuUsed``."""
    return sum(
        c["count"] * q["count"] * s["count"] * w["request"] * 1000 * w["runtimeMs"]
        for c in config["cohorts"]
        for q in c["queuesSets"]
        for s in q["workloadsSets"]
        for w in s["workloads"]
    )


# -- processes ------------------------------------------------------------------


def proc_stat(pid: int) -> tuple[float, int]:
    """(CPU seconds, peak RSS in KiB) of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    peak = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmHWM:"))
    return cpu, peak


# -- parsing (pure) ---------------------------------------------------------------


def admission_ms(summary: Mapping[str, Any]) -> dict[str, float]:
    """Average time to admission per Workload class (the runner's ``averageTimeToAdmissionMs``)."""
    return {name: float(c.get("averageTimeToAdmissionMs", 0)) for name, c in (summary.get("workloadClasses") or {}).items()}


def evictions(summary: Mapping[str, Any]) -> int:
    return sum(int(c.get("totalEvictions", 0)) for c in (summary.get("workloadClasses") or {}).values())


def quota_time(summary: Mapping[str, Any]) -> int:
    """Quota-time held (mCPU·ms), the runner's ``cpuUsed`` summed over the ClusterQueue classes."""
    return sum(int(c.get("cpuUsed", 0)) for c in (summary.get("clusterQueueClasses") or {}).values())


def workload_rows(csv_text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(csv_text)))


def dropped_events(summary: Mapping[str, Any]) -> int:
    """Workload events the runner's recorder dropped (``droppedWorkloadEvents``).

    Its reconciler hands every Workload event to the recorder through a
    channel of 1,000 and drops what does not fit rather than wait, so under a
    stream of writes its per-Workload figures (time to admission and to
    finish, evictions, finished) miss those events: a Workload whose Finished
    event was dropped counts as never finished in ``wlStates.csv``.
    """
    return int(summary.get("droppedWorkloadEvents") or 0)


def finished_workloads(workloads: Iterable[Mapping[str, Any]]) -> int:
    """Workloads whose ``Finished`` condition is true, as the API server has them."""
    return sum(
        1 for wl in workloads
        if any(c.get("type") == "Finished" and c.get("status") == "True" for c in (wl.get("status") or {}).get("conditions") or [])
    )  # fmt: skip


def finished(rows: Iterable[Mapping[str, str]]) -> tuple[int, int]:
    """(finished, total) Workloads in ``wlStates.csv`` (``ms to finish`` 0: never finished while recorded)."""
    rows = list(rows)
    return sum(1 for r in rows if int(r["ms to finish"]) > 0), len(rows)


def median_admission_to_finish_ms(rows: Iterable[Mapping[str, str]], workload_class: str = "small") -> float | None:
    """Median of ``ms to finish`` − ``ms to admitted`` over the finished Workloads of a class.

    The runner records the last admission and the first finish, both from the
    Workload's first event, so for an evicted and readmitted Workload this is
    from its last admission."""
    spans = [
        int(r["ms to finish"]) - int(r["ms to admitted"])
        for r in rows
        if r["class name"] == workload_class and int(r["ms to finish"]) > 0
    ]
    return float(statistics.median(spans)) if spans else None


def conflicts(runner_log: str) -> int:
    """Update conflicts the runner met (its reconciler logs the error of each failed write)."""
    return runner_log.count(CONFLICT)


#: Upstream's preemption messages (``HumanReadablePreemptionReasons``), longest first, to their reasons.
PREEMPTION_MESSAGES = (
    ("reclamation within the cohort while borrowing", "InCohortReclaimWhileBorrowing"),
    ("reclamation within the cohort", "InCohortReclamation"),
    ("Fair Sharing within the cohort", "InCohortFairSharing"),
    ("prioritization in the ClusterQueue", "InClusterQueue"),
)


def eviction_reasons(workloads: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """Why Workloads were last evicted, one count per Workload ever evicted.

    The ``Preempted`` condition's reason (InClusterQueue, InCohortReclamation,
    ...) while it is True; once the Workload is readmitted upstream turns it
    False with reason ``QuotaReserved`` and message ``Previously: <message>``,
    so the reason is read back from upstream's wording of the message. Without
    a ``Preempted`` condition, the ``Evicted`` condition's reason
    (``Evicted/<reason>``; ``Evicted/earlier`` once reset). Only the latest
    eviction of each Workload is visible this way (the runner's count is the total)."""
    reasons: Counter[str] = Counter()
    for wl in workloads:
        conditions = {c.get("type"): c for c in (wl.get("status") or {}).get("conditions") or []}
        preempted, evicted = conditions.get("Preempted"), conditions.get("Evicted")
        if preempted is not None and preempted.get("status") == "True":
            reasons[str(preempted.get("reason") or "unknown")] += 1
        elif preempted is not None:
            message = str(preempted.get("message") or "")
            reasons[next((reason for text, reason in PREEMPTION_MESSAGES if f"due to {text}" in message), "Preempted/earlier")] += 1
        elif evicted is not None and evicted.get("status") == "True":
            reasons[f"Evicted/{evicted.get('reason') or 'unknown'}"] += 1
        elif evicted is not None:
            reasons["Evicted/earlier"] += 1
    return reasons


@dataclass
class Run:
    """One run's figures (``None``: not measured)."""

    system: str
    wall_s: float
    admission_ms: dict[str, float]
    admission_to_finish_ms: float | None
    evictions: int
    eviction_reasons: dict[str, int]
    conflicts: int
    quota_time: int
    controller_cpu_s: float
    controller_peak_mib: float
    apiserver_cpu_s: float
    #: Finished Workloads: as listed from the API server after the run when that list was read, else the runner's count.
    finished: int = 0
    workloads: int = 0
    #: The runner's own count of finished Workloads (``wlStates.csv``) when it differs from ``finished``.
    recorded_finished: int | None = None
    #: Workload events the runner's recorder dropped (:func:`dropped_events`).
    dropped_events: int = 0
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    stop_s: float | None = None
    #: Why the runner wrote no summary (e.g. its recording timed out); such a run is left out of the table's means.
    incomplete: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: The API server's requests over the runner's lifetime, every client together: ``"VERB resource"`` -> count.
    requests: dict[str, float] = field(default_factory=dict)
    #: From the API server's audit log: writes to Workloads and the 409s among them, by client
    #: (``"controller writes"``, ``"controller 409s"``, ``"runner writes"``, ``"runner 409s"``); empty: not audited.
    audit: dict[str, int] = field(default_factory=dict)
    #: The runner's own CPU seconds (user + system, from its rusage); ``None``: not measured (older runs).
    runner_cpu_s: float | None = None
    #: The runner's nice value (``--runner-nice``): 0 as the controller and the API server, negative ahead of them.
    runner_nice: int = 0

    def request_counts(self) -> Counts:
        """``requests`` keyed by (verb, resource) again, as ``bench/_dispatch_metrics.py`` counts them."""
        counts: Counts = {}
        for key, count in self.requests.items():
            verb, _, resource = key.partition(" ")
            counts[(verb, resource)] = count
        return counts

    def requests_per_workload(self, verbs: Iterable[str] | None = None, resources: Iterable[str] | None = None) -> float | None:
        """Requests per Workload of the generator (WATCH and the other streaming verbs left out), optionally only these."""
        if not self.requests or not self.workloads:
            return None
        wanted_verbs, wanted_resources = set(verbs or ()), set(resources or ())
        counts = {
            (verb, resource): count
            for (verb, resource), count in self.request_counts().items()
            if (not wanted_verbs or verb in wanted_verbs) and (not wanted_resources or resource in wanted_resources)
        }
        return requests_total(counts) / self.workloads


#: The manager apiserver's audit policy for a run: one line per write to a Workload, without bodies
#: (``PERF_AUDIT_LEVEL=Request`` keeps each write's body too, to see what an eviction or a 409 carried).
AUDIT_POLICY = f"""\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: {os.environ.get("PERF_AUDIT_LEVEL", "Metadata")}
  resources:
  - group: kueue.x-k8s.io
    resources: ["workloads", "workloads/status"]
  verbs: ["update", "patch"]
- level: None
"""


def audit_writes(lines: Iterable[str], runner_agent: str = "perf-runner") -> list[tuple[dict[str, Any], str, int]]:
    """The completed writes (update, patch) to Workloads in an audit log (JSON lines), parsed once for the figures below.

    Each is (event, "runner" or "controller", HTTP code). The runner names
    itself (``kueue-perf-runner-...``); every other writer is the controller
    under test (the benchmark itself only reads).
    """
    writes = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("stage") != "ResponseComplete" or event.get("verb") not in ("update", "patch"):
            continue
        who = "runner" if runner_agent in (event.get("userAgent") or "") else "controller"
        writes.append((event, who, int((event.get("responseStatus") or {}).get("code") or 0)))
    return writes


def audit_counts(writes: Iterable[tuple[dict[str, Any], str, int]]) -> dict[str, int]:
    """Writes to Workloads and the 409s among them, by client (from :func:`audit_writes`)."""
    counts = {"controller writes": 0, "controller 409s": 0, "runner writes": 0, "runner 409s": 0}
    for _, who, code in writes:
        counts[f"{who} writes"] += 1
        if code == 409:
            counts[f"{who} 409s"] += 1
    return counts


def conflict_causes(
    writes: Sequence[tuple[dict[str, Any], str, int]], kinds: Sequence[str] | None = None, window_s: float = 3.0
) -> Counter[tuple[str, str]]:
    """Each 409 on a Workload write (from :func:`audit_writes`), by who was refused and whose write it lost to.

    With request bodies (``PERF_AUDIT_LEVEL=Request``) the write it lost to
    is the one that was stored on the same resourceVersion it was sent on
    (the first of them to complete, if several). Otherwise, and for a
    refused write whose rival sent no version (upstream's loose applies), the
    last successful write to the same Workload (by namespace, name and UID)
    that completed before it did, within ``window_s``; "none" when there was
    none. Timestamps alone cannot settle two writes in flight together: the
    audit stamps a write when its response is complete, after it was stored,
    so the winner may be stamped after the loser.

    The result is (refused client, winner's client): the runner's "Finished"
    losing to an eviction is (runner, controller); an eviction decided before
    the runner's "Finished" was seen is (controller, runner). Given ``kinds``
    (:func:`write_kinds`) each side also names what the write did, e.g.
    ("runner finish", "controller evict").
    """
    by_workload: dict[tuple[str, str, str], list[tuple[datetime, str | None, str, int]]] = {}
    for i, (event, who, code) in enumerate(writes):
        done = _audit_time(event["stageTimestamp"])
        version = ((event.get("requestObject") or {}).get("metadata") or {}).get("resourceVersion")
        by_workload.setdefault(_workload_key(event), []).append((done, version, f"{who} {kinds[i]}" if kinds else who, code))
    causes: Counter[tuple[str, str]] = Counter()
    for events in by_workload.values():
        stored = [(done, version, by) for done, version, by, c in events if c != 409]
        for refused, sent_on, who, code in events:
            if code != 409:
                continue
            same_base = [(done, by) for done, version, by in stored if sent_on is not None and version == sent_on]
            before = [(done, by) for done, _, by in stored if 0 <= (refused - done).total_seconds() <= window_s]
            causes[(who, min(same_base)[1] if same_base else max(before)[1] if before else "none")] += 1
    return causes


def _body_says(event: Mapping[str, Any]) -> tuple[bool, bool, bool, bool]:
    """What a write's body (``PERF_AUDIT_LEVEL=Request``) sets: admission, Evicted=True, Finished=True, QuotaReserved=False."""
    status = ((event.get("requestObject") or {}).get("status")) or {}
    true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    false = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "False"}
    return bool(status.get("admission")), "Evicted" in true, "Finished" in true, "QuotaReserved" in false


def write_kinds(writes: Sequence[tuple[dict[str, Any], str, int]]) -> list[str] | None:
    """What each write (from :func:`audit_writes`, in that order) did, read from its body; ``None`` without bodies.

    Needs a Request-level audit log (``PERF_AUDIT_LEVEL=Request``). Kinds:
    ``evict`` (the controller sets ``Evicted=True`` while the Workload holds
    the quota of its last reservation; upstream's apply restates the
    admission, ours clears it), ``reserve`` (sets an admission, not
    evicted), ``finish`` (``Finished=True``), ``finish eviction`` (the
    runner sets ``QuotaReserved=False``: upstream's runner does the second
    step of an eviction, as a job controller would), ``pending`` (the
    controller's "why it waits"), ``other``. Each Workload's writes are
    followed in the order they were received.
    """
    if not any("requestObject" in event for event, _, _ in writes):
        return None
    kinds = ["other"] * len(writes)
    state: dict[tuple[str, str, str], dict[str, bool]] = {}
    for i in _received_order(writes):
        event, who, code = writes[i]
        key = _workload_key(event)
        s = state.setdefault(key, {"held": False, "evicted": False})
        admission, evicted, finished, unreserved = _body_says(event)
        if who == "controller" and evicted and s["held"] and not s["evicted"]:
            kinds[i] = "evict"  # upstream's apply restates the admission; ours clears it in the same write
        elif admission and not evicted:
            kinds[i] = "reserve"
        elif finished:
            kinds[i] = "finish"
        elif unreserved:
            kinds[i] = "finish eviction" if who == "runner" else "pending"
        if code != 200:
            continue
        if kinds[i] == "reserve":
            s.update(held=True, evicted=False)
        elif kinds[i] == "evict":
            s.update(held=admission, evicted=True)
        elif kinds[i] in ("finish eviction", "pending"):
            s["held"] = False
    return kinds


def eviction_races(writes: Sequence[tuple[dict[str, Any], str, int]], kinds: Sequence[str] | None) -> Counter[str] | None:
    """How the controller's evictions met the runner's "Finished" of the same Workload; ``None`` without bodies.

    ``kinds`` is :func:`write_kinds` of ``writes`` (``None`` without bodies). Counted:

    - ``evictions``: sent (refused ones included);
    - ``on a finished Workload, refused``: sent after the runner's Finished
      was written, and answered 409 (ours: written on the version the plan
      saw);
    - ``on a finished Workload, written``: the same, written anyway
      (upstream's loose apply: the Workload ends both Finished and Evicted);
    - ``runner's Finished refused after it``: the runner's Finished sent on
      the version before the eviction, refused.

    Both systems' races are then on the same footing: the first two rows
    are the same race, which upstream's controller never sees as a 409.
    """
    if kinds is None:
        return None
    races: Counter[str] = Counter()
    finished: set[tuple[str, str, str]] = set()
    evicted: set[tuple[str, str, str]] = set()
    for i in _received_order(writes):
        event, who, code = writes[i]
        key = _workload_key(event)
        kind = kinds[i]
        if kind == "evict":
            races["evictions"] += 1
            if key in finished:
                races["on a finished Workload, " + ("refused" if code == 409 else "written")] += 1
        if kind == "finish" and code == 409 and key in evicted:
            races["runner's Finished refused after it"] += 1
        if code != 200:
            continue
        if kind == "reserve":
            finished.discard(key)
            evicted.discard(key)
        elif kind == "finish":
            finished.add(key)
        elif kind == "evict":
            evicted.add(key)
    return races


def _workload_key(event: Mapping[str, Any]) -> tuple[str, str, str]:
    """The Workload an audited write went to: namespace, name and UID."""
    ref = event.get("objectRef") or {}
    return (str(ref.get("namespace")), str(ref.get("name")), str(ref.get("uid")))


def _received_order(writes: Sequence[tuple[dict[str, Any], str, int]]) -> list[int]:
    """The indexes of ``writes`` in the order the API server received them."""
    return sorted(range(len(writes)), key=lambda i: str(writes[i][0].get("requestReceivedTimestamp")))


def _audit_time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def runs_to_json(runs: Iterable[Run]) -> str:
    return json.dumps([r.__dict__ for r in runs], indent=1)


def runs_from_json(text: str) -> list[Run]:
    """Runs saved by :func:`runs_to_json` (``--json``), to print one table over several invocations."""
    return [Run(**{**item, "load": tuple(item.get("load") or (0.0, 0.0, 0.0))}) for item in json.loads(text)]


def parse_run(
    system: str,
    summary_yaml: str,
    wl_csv: str,
    runner_log: str,
    workloads: Iterable[Mapping[str, Any]],
    *,
    wall_s: float,
    controller_cpu_s: float,
    controller_peak_kib: int,
    apiserver_cpu_s: float,
    load: tuple[float, float, float] = (0.0, 0.0, 0.0),
    stop_s: float | None = None,
    incomplete: str | None = None,
    requests: Mapping[tuple[str, str], float] | None = None,
) -> Run:
    """One run's figures.

    The finished count is the API server's (the Workloads listed after the
    run) whenever that list was read: the runner's own count misses the
    Workloads whose Finished event its recorder dropped (:func:`dropped_events`),
    which made a complete run look like one that left Workloads unfinished.
    """
    summary = yaml.safe_load(summary_yaml) or {}
    rows = workload_rows(wl_csv) if wl_csv else []
    workloads = list(workloads)
    recorded = None
    if workloads:
        done, total = finished_workloads(workloads), len(workloads)
        if rows and (counted := finished(rows)) != (done, total):
            recorded = counted[0]
    else:
        done, total = finished(rows)
    return Run(
        system=system,
        wall_s=wall_s,
        admission_ms=admission_ms(summary),
        admission_to_finish_ms=median_admission_to_finish_ms(rows),
        evictions=evictions(summary),
        eviction_reasons=dict(eviction_reasons(workloads)),
        conflicts=conflicts(runner_log),
        quota_time=quota_time(summary),
        controller_cpu_s=controller_cpu_s,
        controller_peak_mib=controller_peak_kib / 1024,
        apiserver_cpu_s=apiserver_cpu_s,
        finished=done,
        workloads=total,
        recorded_finished=recorded,
        dropped_events=dropped_events(summary),
        load=load,
        stop_s=stop_s,
        incomplete=incomplete,
        requests={f"{verb} {resource}": count for (verb, resource), count in sorted((requests or {}).items())},
    )


# -- the table (pure) -------------------------------------------------------------


def ratio(ours: float | None, theirs: float | None) -> str:
    """``ours / theirs`` to two decimals (three significant digits above 10); ``–`` when either is missing or theirs is 0."""
    if ours is None or theirs is None or theirs == 0:
        return "–"
    r = ours / theirs
    return f"{r:.2f}" if r < 10 else f"{r:.3g}" if r < 1000 else f"{r:.0f}"


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "–"
    if abs(value) >= 1e7:
        return f"{value:.2e}"
    return f"{value:,.{digits}f}"


def _spread(values: Sequence[float | None], digits: int) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "–"
    mean = _num(statistics.fmean(present), digits)
    if len(present) == 1 or min(present) == max(present):
        return mean
    return f"{mean} ({_num(min(present), digits)}–{_num(max(present), digits)})"


#: (label, how to read one run's figure, digits)
FIGURES: list[tuple[str, Any, int]] = [
    ("wall time (s)", lambda r: r.wall_s, 0),
    *[(f"average time to admission, {c} (s)", (lambda c: lambda r: r.admission_ms.get(c, 0) / 1000)(c), 1) for c in CLASSES],
    ("median time from admission to finish, small (s)", lambda r: None if r.admission_to_finish_ms is None else r.admission_to_finish_ms / 1000, 2),
    ("evictions (runner's count)", lambda r: r.evictions, 0),
    ('"object has been modified" conflicts seen by the runner', lambda r: r.conflicts, 0),
    ("quota-time held (runner's cpuUsed, mCPU·ms)", lambda r: r.quota_time, 0),
    ("controller CPU seconds", lambda r: r.controller_cpu_s, 1),
    ("controller peak RSS (MiB)", lambda r: r.controller_peak_mib, 0),
    ("apiserver CPU seconds", lambda r: r.apiserver_cpu_s, 1),
    ("runner CPU seconds (its rusage)", lambda r: r.runner_cpu_s, 1),
    ("API requests per Workload, every client (WATCH left out)", lambda r: r.requests_per_workload(), 1),
    ("writes to Workloads per Workload (PATCH/APPLY/PUT workloads and workloads/status, every client)",
     lambda r: r.requests_per_workload(WRITE_VERBS, ("workloads", "workloads/status")), 2),
    ("writes to Workloads per Workload, the controller's (audit log)",
     lambda r: r.audit["controller writes"] / r.workloads if r.audit and r.workloads else None, 2),
    ("409 conflicts answered to the controller (audit log)", lambda r: r.audit.get("controller 409s"), 0),
    ("409 conflicts answered to the runner (audit log)", lambda r: r.audit.get("runner 409s"), 0),
    ("Workloads finished (as listed from the API server after the run)", lambda r: r.finished, 0),
    ("Workload events the runner's recorder dropped (its per-Workload figures miss them)", lambda r: r.dropped_events, 0),
]


def table(runs: Sequence[Run], systems: Sequence[str], ours: str = "ours") -> str:
    """The side-by-side table: the mean of each system's runs (min–max when they differ) and ours / each other system."""
    by_system = {s: [r for r in runs if r.system == s and not r.incomplete] for s in systems}
    others = [s for s in systems if s != ours and by_system[s]]
    header = ["figure", *systems, *(f"{ours} / {s}" for s in others if ours in systems)]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for label, read, digits in FIGURES:
        cells = [label]
        for s in systems:
            cells.append(_spread([read(r) for r in by_system[s]], digits))
        if ours in systems:
            mine = _mean([read(r) for r in by_system[ours]])
            for s in others:
                cells.append(ratio(mine, _mean([read(r) for r in by_system[s]])))
        lines.append("| " + " | ".join(cells) + " |")
    reasons = ["eviction reasons (Workloads' Preempted/Evicted conditions, summed over runs)"]
    for s in systems:
        total: Counter[str] = Counter()
        for r in by_system[s]:
            total.update(r.eviction_reasons)
        reasons.append(", ".join(f"{k} {v}" for k, v in sorted(total.items())) or "none")
    reasons += [""] * (len(header) - len(reasons))
    lines.append("| " + " | ".join(reasons) + " |")
    if any(r.extra.get("eviction races") for r in runs if r.system in systems):
        races = ["evictions against the runner's Finished (Request-level audit, summed over the runs that have it)"]
        for s in systems:
            summed: Counter[str] = Counter()
            for r in by_system[s]:
                summed.update(r.extra.get("eviction races") or {})
            races.append(", ".join(f"{k} {v}" for k, v in summed.items()) or "no bodies")
        races += [""] * (len(header) - len(races))
        lines.append("| " + " | ".join(races) + " |")
    if len(nice := {r.runner_nice for r in runs if r.system in systems}) > 1:
        lines.append("")
        lines.append(f"These runs gave the runner different nice values ({', '.join(map(str, sorted(nice)))}): compare like with like.")
    left_out = [r for r in runs if r.incomplete and r.system in systems]
    if left_out:
        lines.append("")
        lines.append("Left out of the means (no summary from the runner):")
        lines += [f"- {run_line(r)}" for r in left_out]
    return "\n".join(lines)


def request_lines(run: Run, floor: float = 0.05) -> list[str]:
    """The run's requests per Workload by verb and resource, largest first (at least ``floor`` per Workload)."""
    if not run.requests or not run.workloads:
        return []
    return [f"{per:8.2f}  {verb} {resource}" for per, verb, resource in request_table(run.request_counts(), run.workloads, floor)]


def run_line(run: Run) -> str:
    """One line per run, printed as it ends."""
    adm = " / ".join(f"{run.admission_ms[c] / 1000:.1f}" if c in run.admission_ms else "–" for c in CLASSES)
    a2f = "–" if run.admission_to_finish_ms is None else f"{run.admission_to_finish_ms / 1000:.2f}"
    stop = "" if run.stop_s is None else f", stopped in {run.stop_s:.1f} s"
    per_wl = run.requests_per_workload()
    requests = "" if per_wl is None else f", {per_wl:.1f} API requests per Workload"
    if run.audit:
        requests += f", 409s to the controller {run.audit['controller 409s']} / to the runner {run.audit['runner 409s']}"
    incomplete = f" [incomplete: {run.incomplete}]" if run.incomplete else ""
    runner = "" if run.runner_cpu_s is None else f", runner CPU {run.runner_cpu_s:.1f} s"
    runner += f" (nice {run.runner_nice})" if run.runner_nice else ""
    if run.recorded_finished is not None:
        runner += f", finished by the runner's count {run.recorded_finished}"
    if run.dropped_events:
        runner += f", Workload events dropped by the runner's recorder {run.dropped_events}"
    return (
        f"{run.system}{incomplete}: wall {run.wall_s:.0f} s, admission {adm} s, small admission→finish {a2f} s, "
        f"evictions {run.evictions} {dict(run.eviction_reasons) or ''}, conflicts {run.conflicts}, "
        f"quota-time {run.quota_time:.3g}, controller CPU {run.controller_cpu_s:.1f} s / peak {run.controller_peak_mib:.0f} MiB, "
        f"apiserver CPU {run.apiserver_cpu_s:.1f} s{runner}, finished {run.finished}/{run.workloads}, "
        f"load {' '.join(f'{x:.1f}' for x in run.load)}{requests}{stop}"
    )
