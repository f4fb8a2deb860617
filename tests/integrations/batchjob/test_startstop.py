"""Starting and stopping a Job: the patches that admit it on its flavors and suspend it again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from multikueue.api.core import Toleration
from multikueue.api.meta import ObjectMeta
from multikueue.api.resourceflavor import ResourceFlavor, ResourceFlavorSpec
from multikueue.api.workload import AdmissionCheckState, PodSetUpdate, Workload
from multikueue.integrations.batchjob import job as batchjob
from multikueue.integrations.batchjob.job import build_workload
from multikueue.integrations.batchjob.startstop import MissingFlavorError, PatchStep, PodSetMergeConflict, start_patch, stop_patch, stop_steps
from multikueue.integrations.patch import apply_merge_patch

pytestmark = pytest.mark.unit

#: The builders of the ``api_job`` (conftest.py), ``partial_job`` and ``admitted`` fixtures.
JobFactory = Callable[..., dict[str, Any]]
Admit = Callable[..., Workload]

#: The toleration of ``api_job()``'s pod template, and the one flavor ``on-demand`` adds.
TOLERATION = {"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
SPOT = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}

FLAVORS = {
    "on-demand": ResourceFlavor(
        metadata=ObjectMeta(name="on-demand"),
        spec=ResourceFlavorSpec(node_labels={"instance": "on-demand"}, tolerations=[Toleration(**SPOT)]),
    ),
    "gpu": ResourceFlavor(metadata=ObjectMeta(name="gpu"), spec=ResourceFlavorSpec(node_labels={"accel": "a100"})),
}


@pytest.fixture
def admitted(reserve: Callable[..., Workload]) -> Admit:
    """``admitted(job, flavors=None, count=None)``: the Workload of ``job``, admitted on ``flavors``."""

    def build(job: dict[str, Any], **assignment: Any) -> Workload:
        return reserve(build_workload(job, priority=None, priority_class=None), **assignment)

    return build


def apply_steps(job: dict[str, Any], steps: list[PatchStep]) -> dict[str, Any]:
    """``job`` after the API server applied each step's merge patch in turn."""
    for step in steps:
        if step.subresource == "status":
            assert set(step.patch) == {"status"}, "a status write only changes status"
        else:
            assert "status" not in step.patch
        job = apply_merge_patch(job, step.patch)
    return job


# --- start -----------------------------------------------------------------------


def test_start_unsuspends_and_injects_flavor_labels_and_tolerations(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    patch = start_patch(job, admitted(job), FLAVORS)
    started = apply_merge_patch(job, patch)
    assert started["spec"]["suspend"] is False
    pod = started["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd", "instance": "on-demand"}
    assert pod["spec"]["tolerations"] == [TOLERATION, SPOT]
    assert pod["metadata"]["labels"][batchjob.POD_SET_LABEL] == "main"
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "sample"
    assert pod["metadata"]["annotations"] == {"note": "keep"}
    # Only what changes is written.
    assert patch == {
        "spec": {
            "suspend": False,
            "template": {
                "metadata": {"labels": {batchjob.POD_SET_LABEL: "main"}},
                "spec": {"nodeSelector": {"instance": "on-demand"}, "tolerations": [TOLERATION, SPOT]},
            },
        }
    }


def test_start_merges_every_flavor_of_the_pod_set(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    started = apply_merge_patch(job, start_patch(job, admitted(job, flavors={"cpu": "on-demand", "nvidia.com/gpu": "gpu"}), FLAVORS))
    assert started["spec"]["template"]["spec"]["nodeSelector"] == {"disk": "ssd", "instance": "on-demand", "accel": "a100"}


def test_start_of_a_started_job_changes_nothing_else(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    wl = admitted(job)
    started = apply_merge_patch(job, start_patch(job, wl, FLAVORS))
    assert start_patch(started, wl, FLAVORS) == {"spec": {"suspend": False}}


def test_start_without_a_template_selector(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    del job["spec"]["template"]["spec"]["nodeSelector"]
    del job["spec"]["template"]["spec"]["tolerations"]
    started = apply_merge_patch(job, start_patch(job, admitted(job), FLAVORS))
    assert started["spec"]["template"]["spec"]["nodeSelector"] == {"instance": "on-demand"}
    assert started["spec"]["template"]["spec"]["tolerations"] == [SPOT]


def test_start_applies_admission_check_pod_set_updates(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    wl = admitted(job)
    wl.status.admission_checks = [
        AdmissionCheckState(
            name="prov",
            state="Ready",
            pod_set_updates=[PodSetUpdate(name="main", labels={"booked": "yes"}, node_selector={"zone": "a"})],
        )
    ]
    pod = apply_merge_patch(job, start_patch(job, wl, FLAVORS))["spec"]["template"]
    assert pod["metadata"]["labels"]["booked"] == "yes"
    assert pod["spec"]["nodeSelector"]["zone"] == "a"


def test_conflicting_selector_is_refused(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    job["spec"]["template"]["spec"]["nodeSelector"]["instance"] = "spot"
    with pytest.raises(PodSetMergeConflict, match="instance"):
        start_patch(job, admitted(job), FLAVORS)


def test_unknown_flavor_is_reported(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    with pytest.raises(MissingFlavorError, match="missing"):
        start_patch(job, admitted(job, flavors={"cpu": "missing"}), FLAVORS)


def test_start_needs_an_admission(api_job: JobFactory) -> None:
    job = api_job()
    with pytest.raises(ValueError, match="admission"):
        start_patch(job, build_workload(job, priority=None, priority_class=None), FLAVORS)


def test_flavors_may_be_given_as_api_dicts(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    as_dicts = {name: flavor.to_k8s() for name, flavor in FLAVORS.items()}
    assert start_patch(job, admitted(job).to_k8s(), as_dicts) == start_patch(job, admitted(job), FLAVORS)


# --- stop ------------------------------------------------------------------------


def running(job: dict[str, Any], wl: Workload) -> dict[str, Any]:
    """The Job after start, with the Job controller's status."""
    started = apply_merge_patch(job, start_patch(job, wl, FLAVORS))
    started["status"] = {"active": 3, "ready": 3, "startTime": "2025-01-01T00:01:00Z"}
    return started


def test_stop_steps_restore_exactly_the_original_template(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    wl = admitted(job)
    stopped = apply_steps(running(job, wl), stop_steps(running(job, wl), wl))
    assert stopped["spec"]["suspend"] is True
    assert stopped["spec"]["template"] == job["spec"]["template"]
    assert "startTime" not in stopped["status"]
    assert batchjob.STOPPING_ANNOTATION not in stopped["metadata"]["annotations"]


def test_stop_steps_are_upstreams_three_writes(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    wl = admitted(job)
    steps = stop_steps(running(job, wl), wl)
    assert [s.subresource for s in steps] == ["", "status", ""]
    assert steps[0].patch == {
        "metadata": {"annotations": {batchjob.STOPPING_ANNOTATION: "true"}},
        "spec": {"suspend": True},
    }
    assert steps[1].patch == {"status": {"startTime": None}}
    assert steps[2].patch["metadata"] == {"annotations": {batchjob.STOPPING_ANNOTATION: None}}
    assert steps[2].patch["spec"]["template"]["spec"] == {"nodeSelector": {"instance": None}, "tolerations": [TOLERATION]}


def test_interrupted_stop_resumes(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    wl = admitted(job)
    steps = stop_steps(running(job, wl), wl)
    half_way = apply_steps(running(job, wl), steps[:1])
    stopped = apply_steps(half_way, stop_steps(half_way, wl))
    assert stopped["spec"]["template"] == job["spec"]["template"]
    assert stopped["spec"]["suspend"] is True
    assert batchjob.STOPPING_ANNOTATION not in stopped["metadata"]["annotations"]


def test_stopped_job_needs_no_steps(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    assert stop_steps(job, admitted(job)) == []


def test_stop_patch_in_one_write_restores_the_template(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    wl = admitted(job)
    started = apply_merge_patch(job, start_patch(job, wl, FLAVORS))
    stopped = apply_merge_patch(started, stop_patch(started, wl))
    assert stopped["spec"]["suspend"] is True
    assert stopped["spec"]["template"] == job["spec"]["template"]
    assert stop_patch(job, wl) == {"spec": {"suspend": True}}


def test_stop_removes_a_selector_the_original_did_not_have(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    del job["spec"]["template"]["spec"]["nodeSelector"]
    del job["spec"]["template"]["spec"]["tolerations"]
    wl = admitted(job)
    started = apply_merge_patch(job, start_patch(job, wl, FLAVORS))
    patch = stop_patch(started, wl)
    assert patch["spec"]["template"]["spec"] == {"nodeSelector": None, "tolerations": None}
    assert apply_merge_patch(started, patch)["spec"]["template"] == job["spec"]["template"]


# --- partial admission ---------------------------------------------------------------


@pytest.fixture
def partial_job(api_job: JobFactory) -> JobFactory:
    """``partial_job(sync_completions=False)``: an ``api_job()`` that may be admitted with fewer pods."""

    def build(*, sync_completions: bool = False) -> dict[str, Any]:
        job = api_job()
        job["metadata"]["annotations"][batchjob.MIN_PARALLELISM_ANNOTATION] = "1"
        if sync_completions:
            job["metadata"]["annotations"][batchjob.COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION] = "true"
            job["spec"]["completionMode"] = "Indexed"
        return job

    return build


def test_partial_admission_sets_parallelism_and_stop_restores_it(admitted: Admit, partial_job: JobFactory) -> None:
    job = partial_job()
    wl = admitted(job, count=2)
    started = apply_merge_patch(job, start_patch(job, wl, FLAVORS))
    assert (started["spec"]["parallelism"], started["spec"]["completions"]) == (2, 3)
    stopped = apply_steps(started, stop_steps(started, wl))
    assert (stopped["spec"]["parallelism"], stopped["spec"]["completions"]) == (3, 3)


def test_partial_admission_can_also_set_completions(admitted: Admit, partial_job: JobFactory) -> None:
    job = partial_job(sync_completions=True)
    wl = admitted(job, count=2)
    started = apply_merge_patch(job, start_patch(job, wl, FLAVORS))
    assert (started["spec"]["parallelism"], started["spec"]["completions"]) == (2, 2)
    stopped = apply_merge_patch(started, stop_patch(started, wl))
    assert (stopped["spec"]["parallelism"], stopped["spec"]["completions"]) == (3, 3)


def test_without_min_parallelism_counts_are_left_alone(api_job: JobFactory, admitted: Admit) -> None:
    job = api_job()
    patch = start_patch(job, admitted(job, count=2), FLAVORS)
    assert "parallelism" not in patch["spec"]
