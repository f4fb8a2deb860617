"""Which remote objects the GC deletes."""

from __future__ import annotations

import pytest

from multikueue.controllers.multikueue.gc import find_orphans
from multikueue.api import Workload

pytestmark = pytest.mark.unit


def wl(ns: str, name: str) -> Workload:
    return Workload.from_k8s({"metadata": {"namespace": ns, "name": name}, "spec": {"podSets": []}})


def job(ns: str, name: str, workload: str | None) -> tuple[str, tuple[str, str], dict]:
    labels = {"kueue.x-k8s.io/prebuilt-workload-name": workload} if workload else {}
    return ("jobs", (ns, name), {"metadata": {"namespace": ns, "name": name, "labels": labels}})


def test_orphans_are_those_without_a_local_workload() -> None:
    local = {("a", "kept")}
    remote = {("a", "kept"): wl("a", "kept"), ("a", "gone"): wl("a", "gone"), ("b", "kept"): wl("b", "kept")}
    jobs = [job("a", "j1", "kept"), job("a", "j2", "gone"), job("a", "j3", None)]
    orphans = find_orphans(remote, jobs, lambda key: key in local)
    assert orphans.workloads == [("a", "gone"), ("b", "kept")]
    assert orphans.jobs == [("jobs", "a", "j2"), ("jobs", "a", "j3")]


def test_nothing_to_collect() -> None:
    orphans = find_orphans({("a", "x"): wl("a", "x")}, [job("a", "j", "x")], lambda key: True)
    assert orphans.workloads == [] and orphans.jobs == []


def test_a_job_bound_by_annotation_is_not_an_orphan() -> None:
    """A Workload name over 63 characters travels in the annotation: the GC must read it there too.

    Reading only the label deleted such running remote Jobs within seconds, in
    a loop every gcInterval (issue 10, item 2).
    """
    long_name = "job-" + "x" * 70 + "-abcde"
    bound = ("jobs", ("a", "long"), {"metadata": {"namespace": "a", "name": "long", "annotations": {"kueue.x-k8s.io/prebuilt-workload-name": long_name}}})
    orphans = find_orphans({}, [bound], lambda key: key == ("a", long_name))
    assert orphans.jobs == []
    orphans = find_orphans({}, [bound], lambda key: False)
    assert orphans.jobs == [("jobs", "a", "long")]
