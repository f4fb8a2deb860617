"""The pure parts of ``bench/_perf.py``: the runner's output into figures, the table and its ratios."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.dev.pytest_plugin import bench_module

pytestmark = pytest.mark.unit


perf = bench_module("_perf")

SUMMARY = """\
clusterQueueClasses:
  cq:
    cpuAverageUsage: 52000
    cpuUsed: 9000000000
    firstEventTime: "2026-11-23T07:00:00Z"
    lastEventTime: "2026-11-23T07:03:00Z"
    nominalQuota: 120000
droppedWorkloadEvents: 0
workloadClasses:
  large:
    averageTimeToAdmissionMs: 10800
    averageTimeToFinishMs: 12000
    count: 300
    totalEvictions: 20
  medium:
    averageTimeToAdmissionMs: 80000
    averageTimeToFinishMs: 80600
    count: 600
    totalEvictions: 4
  small:
    averageTimeToAdmissionMs: 121000
    averageTimeToFinishMs: 121300
    count: 2100
    totalEvictions: 0
"""

WL_CSV = """\
id,class name,namespace,name,ms to admitted,ms to finish,num evictions
0,small,ns,a,1000,1220,0
1,small,ns,b,2000,2300,0
2,small,ns,c,3000,3210,1
3,small,ns,d,4000,0,0
4,large,ns,e,500,9000,0
"""

RUNNER_LOG = """\
2026-11-23T07:00:01Z ERROR Reconciler error {"error": "Operation cannot be fulfilled on workloads.kueue.x-k8s.io \\"a\\": the object has been modified; please apply your changes to the latest version and try again"}
2026-11-23T07:00:02Z INFO fine
2026-11-23T07:00:03Z ERROR Reconciler error {"error": "... the object has been modified; please apply ..."}
"""


def _wl(*conditions: dict[str, str]) -> dict[str, object]:
    return {"status": {"conditions": list(conditions)}}


def test_summary_figures() -> None:
    import yaml

    summary = yaml.safe_load(SUMMARY)
    assert perf.admission_ms(summary) == {"large": 10800.0, "medium": 80000.0, "small": 121000.0}
    assert perf.evictions(summary) == 24
    assert perf.quota_time(summary) == 9_000_000_000
    assert perf.evictions({}) == 0 and perf.quota_time({"clusterQueueClasses": None}) == 0


def test_admission_to_finish_is_the_median_over_finished_workloads_of_the_class() -> None:
    rows = perf.workload_rows(WL_CSV)
    assert perf.median_admission_to_finish_ms(rows) == 220.0  # 220, 300, 210; d never finished
    assert perf.median_admission_to_finish_ms(rows, "large") == 8500.0
    assert perf.median_admission_to_finish_ms(rows, "medium") is None
    assert perf.finished(rows) == (4, 5)


def test_generator_counts() -> None:
    config = {"cohorts": [{"count": 1, "queuesSets": [{"count": 6, "workloadsSets": [
        {"count": 350, "workloads": [{"request": 1, "runtimeMs": 200}]},
        {"count": 100, "workloads": [{"request": 5, "runtimeMs": 500}]},
        {"count": 50, "workloads": [{"request": 20, "runtimeMs": 1000}]},
    ]}]}]}  # fmt: skip
    assert perf.workload_count(config) == 3000
    assert perf.quota_demand(config) == 7_920_000_000  # the 1-cohort baseline: 7.9×10⁹ mCPU·ms


def test_conflicts_counted_in_the_runner_log() -> None:
    assert perf.conflicts(RUNNER_LOG) == 2
    assert perf.conflicts("") == 0


def test_eviction_reasons_from_conditions() -> None:
    workloads = [
        _wl({"type": "Preempted", "status": "True", "reason": "InClusterQueue", "message": "x"}),
        # readmitted: upstream resets the condition and keeps the message after "Previously: "
        _wl({"type": "Preempted", "status": "False", "reason": "QuotaReserved",
             "message": "Previously: Preempted to accommodate a workload (UID: u, JobUID: j) due to reclamation within the cohort; preemptor path: /c/q; preemptee path: /c/p"}),  # fmt: skip
        _wl({"type": "Preempted", "status": "False", "reason": "QuotaReserved",
             "message": "Previously: Preempted to accommodate a workload (UID: u, JobUID: j) due to reclamation within the cohort while borrowing; preemptor path: a; preemptee path: b"}),  # fmt: skip
        _wl({"type": "Preempted", "status": "False", "reason": "QuotaReserved", "message": "Previously: something else"}),
        _wl({"type": "Evicted", "status": "True", "reason": "Preempted"}),
        _wl({"type": "Evicted", "status": "False", "reason": "QuotaReserved"}),
        _wl({"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}),
        {"status": {}},
        {},
    ]
    assert dict(perf.eviction_reasons(workloads)) == {
        "InClusterQueue": 1,
        "InCohortReclamation": 1,
        "InCohortReclaimWhileBorrowing": 1,
        "Preempted/earlier": 1,
        "Evicted/Preempted": 1,
        "Evicted/earlier": 1,
    }


def test_ratio_formatting() -> None:
    assert perf.ratio(166, 170) == "0.98"
    assert perf.ratio(122.5, 23.5) == "5.21"
    assert perf.ratio(230, 12) == "19.2"
    assert perf.ratio(5000, 2) == "2500"
    assert perf.ratio(1, 0) == "–"
    assert perf.ratio(None, 3) == "–" and perf.ratio(3, None) == "–"


def test_raise_client_limit_changes_only_the_two_numbers() -> None:
    main_go = "x := 1\n\tkubeConfig.QPS = 50\n\tkubeConfig.Burst = 100\n\tlog.Info()\n"
    raised = perf.raise_client_limit(main_go)
    assert raised == "x := 1\n\tkubeConfig.QPS = 1000\n\tkubeConfig.Burst = 2000\n\tlog.Info()\n"
    with pytest.raises(ValueError):
        perf.raise_client_limit("kubeConfig.QPS = 20\n")


def _run(system: str, wall: float, **kw: object) -> object:
    return perf.parse_run(
        system, SUMMARY, WL_CSV, RUNNER_LOG, kw.pop("workloads", []),  # type: ignore[arg-type]
        wall_s=wall, controller_cpu_s=kw.pop("cpu", 10.0), controller_peak_kib=kw.pop("peak", 204800),  # type: ignore[arg-type]
        apiserver_cpu_s=100.0, requests=kw.pop("requests", None),  # type: ignore[arg-type]
    )  # fmt: skip


def test_requests_per_workload_leave_watches_out_and_count_workload_writes() -> None:
    counts = {("PATCH", "workloads/status"): 10.0, ("PUT", "workloads/status"): 5.0, ("POST", "workloads"): 5.0,
              ("APPLY", "workloads/status"): 5.0, ("WATCH", "workloads"): 3.0, ("GET", "clusterqueues"): 5.0}  # fmt: skip
    ours = _run("ours", 166, requests=counts)
    assert ours.workloads == 5 and ours.requests["PATCH workloads/status"] == 10.0
    assert ours.requests_per_workload() == 6.0
    assert ours.requests_per_workload(perf.WRITE_VERBS, ("workloads", "workloads/status")) == 4.0
    assert perf.request_lines(ours)[0] == "    2.00  PATCH workloads/status"
    assert "6.0 API requests per Workload" in perf.run_line(ours)
    assert perf.runs_from_json(perf.runs_to_json([ours])) == [ours]
    text = perf.table([_run("upstream", 170), ours], ["upstream", "ours"])
    assert "| API requests per Workload, every client (WATCH left out) | – | 6.0 | – |" in text
    assert "| writes to Workloads per Workload (PATCH/APPLY/PUT workloads and workloads/status, every client) | – | 4.00 | – |" in text


def test_parse_run_and_table() -> None:
    runs = [
        _run("upstream", 170, cpu=20.0),
        _run("upstream", 180, cpu=30.0),
        _run("upstream-raised", 144),
        _run("ours", 166, cpu=125.0, peak=2048 * 1024,
             workloads=[_wl({"type": "Preempted", "status": "True", "reason": "InCohortReclamation"})]),  # fmt: skip
    ]
    first = runs[0]
    assert first.admission_to_finish_ms == 220.0 and first.conflicts == 2 and first.evictions == 24
    assert (first.finished, first.workloads) == (4, 5) and first.controller_peak_mib == 200
    text = perf.table(runs, ["upstream", "upstream-raised", "ours"])
    lines = text.splitlines()
    assert lines[0] == "| figure | upstream | upstream-raised | ours | ours / upstream | ours / upstream-raised |"
    wall = next(line for line in lines if line.startswith("| wall time"))
    assert wall == "| wall time (s) | 175 (170–180) | 144 | 166 | 0.95 | 1.15 |"
    cpu = next(line for line in lines if line.startswith("| controller CPU"))
    assert cpu == "| controller CPU seconds | 25.0 (20.0–30.0) | 10.0 | 125.0 | 5.00 | 12.5 |"
    small = next(line for line in lines if "admission, small" in line)
    assert small.endswith("| 121.0 | 121.0 | 121.0 | 1.00 | 1.00 |")
    assert lines[-1].startswith("| eviction reasons") and "| none | none | InCohortReclamation 1 |" in lines[-1]
    # without ours: no ratio columns; a system with no runs shows dashes
    alone = perf.table(runs[:1], ["upstream", "upstream-raised"]).splitlines()
    assert alone[0] == "| figure | upstream | upstream-raised |"
    assert alone[2] == "| wall time (s) | 170 | – |"
    assert "wall 170 s" in perf.run_line(first)


def test_runs_survive_json() -> None:
    runs = [_run("upstream", 170), _run("ours", 166)]
    again = perf.runs_from_json(perf.runs_to_json(runs))
    assert again == runs
    assert perf.table(again, ["upstream", "ours"]) == perf.table(runs, ["upstream", "ours"])


def test_the_runners_cpu_and_nice_value_are_shown_and_runs_saved_before_them_still_load() -> None:
    import dataclasses
    import json

    plain, ahead = _run("ours", 166), _run("ours", 150)
    ahead.runner_cpu_s, ahead.runner_nice = 42.5, -10
    assert "runner CPU 42.5 s (nice -10)" in perf.run_line(ahead) and "runner CPU" not in perf.run_line(plain)
    older = json.dumps([{k: v for k, v in dataclasses.asdict(plain).items() if k not in ("runner_cpu_s", "runner_nice")}])
    assert perf.runs_from_json(older) == [plain]
    text = perf.table([plain, ahead], ["ours"])
    assert "| runner CPU seconds (its rusage) | 42.5 |" in text
    assert "different nice values (-10, 0)" in text
    assert "different nice values" not in perf.table([ahead], ["ours"])


def test_client_limit_read_from_minimalkueues_log() -> None:
    line = '2026-11-23T07:39:03.74Z\tINFO\tminimalkueue/main.go:143\tK8S Client\t{"Host": "https://127.0.0.1:1", "qps": 1000, "burst": 2000}\n'
    assert perf.client_limit_in_log("Start minimalkueue\n" + line) == (1000.0, 2000)
    assert perf.client_limit_in_log("nothing") is None


def test_a_run_without_summary_is_counted_from_the_workloads_and_left_out_of_the_means() -> None:
    finished = _wl({"type": "Finished", "status": "True", "reason": "ByTest"})
    pending = _wl({"type": "QuotaReserved", "status": "False", "reason": "Pending"})
    timed_out = perf.parse_run(
        "ours", "", "", RUNNER_LOG, [finished, finished, pending], wall_s=900, controller_cpu_s=800.0,
        controller_peak_kib=1024 * 1024, apiserver_cpu_s=300.0, incomplete="runner exit 1: context deadline exceeded",
    )  # fmt: skip
    assert (timed_out.finished, timed_out.workloads) == (2, 3)
    assert timed_out.admission_ms == {} and timed_out.admission_to_finish_ms is None and timed_out.quota_time == 0
    line = perf.run_line(timed_out)
    assert line.startswith("ours [incomplete: runner exit 1: context deadline exceeded]: wall 900 s, admission – / – / – s")
    text = perf.table([_run("upstream", 170), _run("ours", 166), timed_out], ["upstream", "ours"])
    assert "| wall time (s) | 170 | 166 | 0.98 |" in text
    assert text.splitlines()[-2:] == ["Left out of the means (no summary from the runner):", f"- {line}"]


def test_finished_comes_from_the_api_server_when_the_runners_recorder_dropped_events() -> None:
    finished = _wl({"type": "Finished", "status": "True", "reason": "ByTest"})
    # wlStates.csv says 4 of 5 finished (d's Finished event was dropped); the API server has all five finished.
    dropped = SUMMARY.replace("droppedWorkloadEvents: 0", "droppedWorkloadEvents: 1647")
    run = perf.parse_run(
        "ours", dropped, WL_CSV, RUNNER_LOG, [finished] * 5, wall_s=900, controller_cpu_s=300.0,
        controller_peak_kib=1024, apiserver_cpu_s=100.0,
    )  # fmt: skip
    assert (run.finished, run.workloads, run.recorded_finished, run.dropped_events) == (5, 5, 4, 1647)
    line = perf.run_line(run)
    assert "finished 5/5" in line and "finished by the runner's count 4" in line
    assert "Workload events dropped by the runner's recorder 1647" in line
    text = perf.table([run], ["ours"])
    assert "| Workloads finished (as listed from the API server after the run) | 5 |" in text
    assert "| Workload events the runner's recorder dropped (its per-Workload figures miss them) | 1,647 |" in text
    # the same counts on both sides: nothing extra on the line; without a list, the runner's count
    agreed = _run("ours", 166, workloads=[finished] * 4 + [_wl()])
    assert agreed.recorded_finished is None and "runner's count" not in perf.run_line(agreed)
    assert (_run("ours", 166).finished, _run("ours", 166).recorded_finished) == (4, None)


def _audit_line(agent: str, verb: str, code: int, stage: str = "ResponseComplete") -> str:
    import json

    return json.dumps({"stage": stage, "verb": verb, "userAgent": agent, "responseStatus": {"code": code}})


def test_audit_counts_writes_and_conflicts_by_client() -> None:
    lines = [
        _audit_line("kueue-perf-runner-v0.19.2/v0.0.0 (linux/amd64)", "patch", 200),
        _audit_line("kueue-perf-runner-v0.19.2/v0.0.0 (linux/amd64)", "update", 409),
        _audit_line("multikueue/0.1.0", "patch", 200),
        _audit_line("multikueue/0.1.0", "patch", 409),
        _audit_line("multikueue/0.1.0", "patch", 409, stage="ResponseStarted"),  # not a second request
        _audit_line("multikueue/0.1.0", "create", 201),  # not a write to an existing Workload
        "not json",
    ]
    counts = perf.audit_counts(perf.audit_writes(lines))
    assert counts == {"controller writes": 2, "controller 409s": 1, "runner writes": 2, "runner 409s": 1}
    run = _run("ours", 166)
    run.audit = counts
    conflicts = next(line for line in perf.table([run], ["ours"]).splitlines() if "answered to the controller" in line)
    assert conflicts == "| 409 conflicts answered to the controller (audit log) | 1 |"
    assert "409s to the controller 1 / to the runner 1" in perf.run_line(run)


def _write(agent: str, name: str, received: str, done: str, code: int, status: dict[str, Any] | None = None) -> str:
    """One audit line; ``status`` is the request body's status (a Request-level log), left out when ``None``."""
    import json

    event: dict[str, Any] = {
        "stage": "ResponseComplete",
        "verb": "patch",
        "userAgent": agent,
        "objectRef": {"namespace": "cq-0", "name": name, "uid": f"uid-{name}"},
        "requestReceivedTimestamp": f"2026-11-27T06:00:{received}Z",
        "stageTimestamp": f"2026-11-27T06:00:{done}Z",
        "responseStatus": {"code": code},
    }
    if status is not None:
        event["requestObject"] = {"status": status}
    return json.dumps(event)


def test_conflict_causes_name_the_write_each_409_lost_to() -> None:
    runner, ours = "kueue-perf-runner-v0.19.2/v0.0.0", "multikueue/0.1.0"
    lines = [
        # a: reserved by us, evicted by us, then the runner's Finished is refused.
        _write(ours, "a", "01.000000", "01.010000", 200),
        _write(ours, "a", "01.500000", "01.510000", 200),
        _write(runner, "a", "01.520000", "01.530000", 409),
        # b: the runner finishes it, then our eviction (decided before we saw that) is refused.
        _write(ours, "b", "01.000000", "01.010000", 200),
        _write(runner, "b", "01.400000", "01.410000", 200),
        _write(ours, "b", "01.450000", "01.460000", 409),
        # c: a 409 with no successful write in the window, and one still in flight when it was refused.
        _write(ours, "c", "01.000000", "05.000000", 200),
        _write(runner, "c", "04.900000", "04.910000", 409),
        # d: reserved by us; then the runner's Finished and our eviction are sent together, the Finished
        # is stored first: ours lost to it, not to our own reservation before both.
        _write(ours, "d", "01.000000", "01.010000", 200),
        _write(runner, "d", "01.400000", "01.450000", 200),
        _write(ours, "d", "01.420000", "01.470000", 409),
        "not json",
    ]
    assert perf.conflict_causes(perf.audit_writes(lines)) == {
        ("runner", "controller"): 1, ("controller", "runner"): 2, ("runner", "none"): 1,
    }  # fmt: skip


def test_with_bodies_a_409_lost_to_the_write_stored_on_the_same_version() -> None:
    import json

    runner, ours = "kueue-perf-runner-v0.19.2/v0.0.0", "multikueue/0.1.0"

    def on(line: str, version: str | None) -> str:
        event = json.loads(line)
        event["requestObject"] = {"metadata": {"resourceVersion": version} if version else {}, "status": {}}
        return json.dumps(event)

    lines = [
        # a: our eviction (on 10) stored; then the runner's write and our report, both sent on 11. The runner's
        # is stored first but its response completes last, so by timestamps ours would have lost to our eviction.
        on(_write(ours, "a", "01.000000", "01.050000", 200), "10"),
        on(_write(runner, "a", "01.100000", "01.400000", 200), "11"),
        on(_write(ours, "a", "01.200000", "01.300000", 409), "11"),
        # b: the rival sent no version (a loose apply): by completion order.
        on(_write(ours, "b", "01.000000", "01.010000", 200), None),
        on(_write(runner, "b", "01.020000", "01.030000", 409), "10"),
    ]
    assert perf.conflict_causes(perf.audit_writes(lines)) == {("controller", "runner"): 1, ("runner", "controller"): 1}


def test_eviction_races_put_refused_and_loose_evictions_of_finished_workloads_on_one_footing() -> None:
    runner, ours = "kueue-perf-runner-v0.19.2/v0.0.0", "multikueue/0.1.0"

    def cond(type_: str, status: str = "True") -> dict[str, Any]:
        return {"type": type_, "status": status}

    reserve = {"admission": {"clusterQueue": "cq"}, "conditions": [cond("QuotaReserved")]}
    evict = {"admission": None, "conditions": [cond("QuotaReserved", "False"), cond("Evicted")]}
    # Upstream's eviction is an apply that restates the admission it leaves in place.
    loose_evict = {"admission": {"clusterQueue": "cq"}, "conditions": [cond("QuotaReserved"), cond("Evicted"), cond("Preempted")]}
    finish = {"conditions": [cond("Finished")]}
    lines = [
        # a: evicted, then the runner's Finished (read before the eviction) is refused.
        _write(ours, "a", "01.000000", "01.010000", 200, reserve),
        _write(ours, "a", "01.500000", "01.510000", 200, evict),
        _write(runner, "a", "01.520000", "01.530000", 409, finish),
        # b: finished, then our eviction decided before we saw it is refused.
        _write(ours, "b", "01.000000", "01.010000", 200, reserve),
        _write(runner, "b", "01.400000", "01.410000", 200, finish),
        _write(ours, "b", "01.450000", "01.460000", 409, evict),
        # c: the same race against a loose apply: written on the finished Workload.
        _write(ours, "c", "01.000000", "01.010000", 200, reserve),
        _write(runner, "c", "01.400000", "01.410000", 200, finish),
        _write(ours, "c", "01.450000", "01.460000", 200, loose_evict),
        # d: a later "why it waits" write still carries Evicted=True: not a second eviction.
        _write(ours, "d", "01.000000", "01.010000", 200, reserve),
        _write(ours, "d", "01.500000", "01.510000", 200, evict),
        _write(ours, "d", "02.000000", "02.010000", 200, {"conditions": [cond("QuotaReserved", "False"), cond("Evicted")]}),
        # e: upstream's eviction, then the runner's Finished (read before it) is refused.
        _write(ours, "e", "01.000000", "01.010000", 200, reserve),
        _write(ours, "e", "01.500000", "01.510000", 200, loose_evict),
        _write(runner, "e", "01.520000", "01.530000", 409, finish),
    ]
    writes = perf.audit_writes(lines)
    kinds = perf.write_kinds(writes)
    races = perf.eviction_races(writes, kinds)
    assert races == {
        "evictions": 5,
        "runner's Finished refused after it": 2,
        "on a finished Workload, refused": 1,
        "on a finished Workload, written": 1,
    }
    bare = perf.audit_writes([_write(ours, "a", "01.000000", "01.010000", 200)])
    assert perf.eviction_races(bare, perf.write_kinds(bare)) is None, "no bodies"
    # With bodies, each side of a 409 says what its write did.
    assert perf.conflict_causes(writes, kinds) == {
        ("runner finish", "controller evict"): 2,
        ("controller evict", "runner finish"): 1,
    }
