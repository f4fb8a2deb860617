"""Loading ``multiKueue.externalFrameworks``: every bad entry is reported with its name and field."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from multikueue.integrations.external.entries import (
    DEFAULT_MANAGED_BY,
    GVK,
    FrameworkProblem,
    load_frameworks,
    parse_pod_sets,
)
from multikueue.api.configuration import load_configuration

pytestmark = pytest.mark.unit

TEKTON = "PipelineRun.v1.tekton.dev"
FULL_ENTRY = f"""
name: {TEKTON}
managedBy: $.spec.managedBy
workload:
  podSets: '[{{"name": "main", "count": 1, "requests": {{"cpu": "1"}}}}]'
  queueName: "$.metadata.labels['kueue.x-k8s.io/queue-name']"
  priorityClass: "$.metadata.labels['kueue.x-k8s.io/priority-class']"
creationPatches:
- '{{"metadata": {{"annotations": {{"example.com/from": "manager"}}}}}}'
statusSync: ["$.status"]
finished: 'has(object.status) && has(object.status.conditions) && object.status.conditions.exists(c, c.type == "Succeeded" && c.status != "Unknown")'
succeeded: 'object.status.conditions.exists(c, c.type == "Succeeded" && c.status == "True")'
hold: {{path: $.spec.status, value: PipelineRunPending}}
"""


def problems_of(*entries: Any) -> list[str]:
    return [str(p) for p in load_frameworks(list(entries)).problems]


def only_problem(entry: Any) -> str:
    found = problems_of(entry)
    assert len(found) == 1, found
    return found[0]


def assert_only_problem(entry: dict[str, Any], field: str, words: str) -> None:
    """An entry for ``TEKTON`` with ``entry``'s fields has one problem: at ``field``, saying ``words``."""
    problem = only_problem({"name": TEKTON, **entry})
    assert problem.startswith(f"externalFrameworks[{TEKTON}].{field}: "), problem
    assert words in problem


def test_upstream_entry_gets_the_defaults() -> None:
    loaded = load_frameworks([{"name": TEKTON}])
    assert loaded.ok
    framework = loaded.frameworks[TEKTON]
    assert framework.gvk == GVK("PipelineRun", "v1", "tekton.dev")
    assert framework.api_version == "tekton.dev/v1"
    assert str(framework.managed_by) == DEFAULT_MANAGED_BY
    assert [str(p) for p in framework.status_sync] == ["$.status"]
    assert framework.workload is None and framework.hold is None and framework.finished is None
    assert framework.extended_fields == []


def test_every_extension_field_loads() -> None:
    loaded = load_frameworks([yaml.safe_load(FULL_ENTRY)])
    assert loaded.problems == []
    framework = loaded.frameworks[TEKTON]
    assert framework.extended_fields == [
        "managedBy",
        "workload",
        "creationPatches",
        "statusSync",
        "finished",
        "succeeded",
        "hold",
    ]
    assert framework.workload is not None and framework.workload.pod_sets is not None
    assert framework.hold is not None and framework.hold.value == "PipelineRunPending"
    assert len(framework.creation_patches) == 1


def test_empty_workload_key_still_asks_for_a_workload() -> None:
    framework = load_frameworks([{"name": TEKTON, "workload": None}]).frameworks[TEKTON]
    assert framework.workload is not None and framework.workload.pod_sets is None
    assert str(framework.workload.queue_name) == "$.metadata.labels['kueue.x-k8s.io/queue-name']"


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("PipelineRun", "'PipelineRun' is not Kind.version.group"),
        ("PipelineRun.v1", "is not Kind.version.group"),
        ("pipelineRun.v1.tekton.dev", "kind 'pipelineRun' must start with an uppercase letter"),
        ("Pipeline-Run.v1.tekton.dev", "kind 'Pipeline-Run' must start with an uppercase letter"),
        ("PipelineRun.V1.tekton.dev", "version 'V1' must look like v1, v1beta1 or v1alpha2"),
        ("PipelineRun.1.tekton.dev", "version '1'"),
        ("PipelineRun.v1gamma1.tekton.dev", "version 'v1gamma1'"),
        ("Widget.v1.example", "group 'example' must be a lowercase DNS subdomain with at least one dot"),
        ("Pod.v1.core", "group 'core'"),
        ("Widget.v1.Example.com", "group 'Example.com'"),
        ("Widget.v1.example..com", "group 'example..com'"),
        ("Job.v1.batch", "batch/v1 Job is built in"),
    ],
)
def test_bad_gvk(name: str, words: str) -> None:
    problem = only_problem({"name": name})
    assert problem.startswith(f"externalFrameworks[{name}].name: ")
    assert words in problem


@pytest.mark.parametrize("name", ["JobSet.v1alpha2.jobset.x-k8s.io", "RayJob.v1.ray.io", "Widget.v2beta3.a.b.c"])
def test_good_gvk(name: str) -> None:
    assert problems_of({"name": name}) == []


def test_duplicate_gvk_second_entry_is_the_problem() -> None:
    loaded = load_frameworks([{"name": TEKTON, "finished": "true"}, {"name": TEKTON}])
    assert [str(p) for p in loaded.problems] == [
        f"externalFrameworks[{TEKTON}].name: duplicate of entry #0; only the first entry of a GVK is used"
    ]
    assert loaded.frameworks[TEKTON].finished is not None  # the first one is kept


@pytest.mark.parametrize(
    ("entry", "field", "words"),
    [
        ({"managedBy": "$.spec.a["}, "managedBy", "is not a valid JSONPath"),
        ({"managedBy": "$.spec.items[*].managedBy"}, "managedBy", "a wildcard"),
        ({"managedBy": "$"}, "managedBy", "names the whole object"),
        ({"managedBy": "$.spec.items[0]"}, "managedBy", "list index"),
        ({"workload": {"queueName": "$.metadata.labels[?(@ == 1)]"}}, "workload.queueName", "a filter"),
        ({"workload": {"priorityClass": "$.metadata..x"}}, "workload.priorityClass", "descendants"),
        ({"statusSync": ["$.spec"]}, "statusSync[0]", "is not under $.status"),
        ({"statusSync": ["$.status", "$.status.conditions[0]"]}, "statusSync[1]", "list index"),
        ({"hold": {"path": "$.status.phase", "value": "x"}}, "hold.path", "under $.status"),
        ({"hold": {"path": "$.spec.managedBy", "value": "x"}}, "hold.path", "managedBy field"),
        ({"hold": {"path": "$.spec.x[", "value": "x"}}, "hold.path", "is not a valid JSONPath"),
    ],
)
def test_bad_jsonpath(entry: dict[str, Any], field: str, words: str) -> None:
    assert_only_problem(entry, field, words)


@pytest.mark.parametrize(
    ("entry", "field", "words"),
    [
        ({"finished": "object.status.conditions.exists(c, c.type == 'x'"}, "finished", "syntax error"),
        ({"finished": "true", "succeeded": "1 +"}, "succeeded", "the expression ends too early"),
        ({"creationPatches": ["{}", "{'a': }"]}, "creationPatches[1]", "syntax error"),
        ({"workload": {"podSets": "[{"}}, "workload.podSets", "syntax error"),
        ({"finished": "nope(object)"}, "finished", "undeclared reference to 'nope'"),
    ],
)
def test_cel_that_does_not_compile(entry: dict[str, Any], field: str, words: str) -> None:
    assert_only_problem(entry, field, words)


@pytest.mark.parametrize(
    ("entry", "field", "words"),
    [
        ({"finished": '"x"'}, "finished", "gives a string, expected a bool"),
        ({"finished": "true", "succeeded": "1"}, "succeeded", "gives an int, expected a bool"),
        ({"creationPatches": ['"spec"']}, "creationPatches[0]", "gives a string, expected a map"),
        ({"creationPatches": ["[]"]}, "creationPatches[0]", "gives a list, expected a map"),
        ({"workload": {"podSets": "{}"}}, "workload.podSets", "gives a map, expected a list"),
        ({"workload": {"podSets": "[]"}}, "workload.podSets", "must not be empty"),
        (
            {"workload": {"podSets": '[{"name": "main", "count": 0, "requests": {}}]'}},
            "workload.podSets",
            "count must be an int >= 1",
        ),
    ],
)
def test_cel_of_wrong_result_type(entry: dict[str, Any], field: str, words: str) -> None:
    assert_only_problem(entry, field, words)


@pytest.mark.parametrize(
    ("entry", "field", "words"),
    [
        ({"finishd": "true"}, "finishd", "unknown field (known: name, managedBy, workload"),
        ({"finishd": "true"}, "finishd", "did you mean 'finished'?"),
        ({"workload": {"podSet": "[]"}}, "workload.podSet", "did you mean 'podSets'?"),
        ({"hold": {"path": "$.spec.suspend", "value": True, "release": "x"}}, "hold.release", "unknown field"),
        ({"managed_by": "$.spec.x"}, "managed_by", "did you mean 'managedBy'?"),
        ({"finished": True}, "finished", "must be a string, got a bool"),
        ({"creationPatches": "{}"}, "creationPatches", "must be a list, got a string"),
        ({"hold": {"path": "$.spec.suspend"}}, "hold.value", "is required"),
        ({"hold": {"path": "$.spec.suspend", "value": None}}, "hold.value", "must not be null"),
        ({"workload": "yes"}, "workload", "must be a map, got a string"),
        ({"succeeded": "true"}, "succeeded", "needs `finished` too"),
    ],
)
def test_unknown_and_mistyped_fields(entry: dict[str, Any], field: str, words: str) -> None:
    assert_only_problem(entry, field, words)


def test_entries_without_a_usable_name_are_named_by_position() -> None:
    assert problems_of({"name": TEKTON}, "Widget.v1.example.com", {}, {"name": 5}) == [
        "externalFrameworks[#1].name: an entry must be a map with at least `name`, got a string",
        "externalFrameworks[#2].name: is required",
        "externalFrameworks[#3].name: must be a string, got an int",
    ]


def test_all_problems_of_one_entry_are_reported_together() -> None:
    found = problems_of({"name": TEKTON, "finished": '"x"', "managedBy": "$.a[", "statusSync": ["$.spec"]})
    assert [p.split(": ")[0] for p in found] == [
        f"externalFrameworks[{TEKTON}].managedBy",
        f"externalFrameworks[{TEKTON}].statusSync[0]",
        f"externalFrameworks[{TEKTON}].finished",
    ]


def test_a_bad_entry_is_dropped_and_the_others_kept() -> None:
    loaded = load_frameworks(
        [{"name": TEKTON, "finished": '"x"'}, {"name": "JobSet.v1alpha2.jobset.x-k8s.io"}, {"name": "bad"}]
    )
    assert list(loaded.frameworks) == ["JobSet.v1alpha2.jobset.x-k8s.io"]
    assert len(loaded.problems) == 2 and not loaded.ok


def test_problem_text() -> None:
    assert str(FrameworkProblem(TEKTON, "finished", "boom")) == f"externalFrameworks[{TEKTON}].finished: boom"


def test_entries_straight_from_the_configuration() -> None:
    loaded = load_configuration(
        f"""
multiKueue:
  externalFrameworks:
  - name: {TEKTON}
    finished: 'true'
  - just-a-string
  - name: Widget.v1alpha1.example.com
    managedBy: $.spec.control.managedBy
"""
    )
    assert loaded.unused == []
    frameworks = load_frameworks(loaded.config.multi_kueue.external_frameworks)
    assert list(frameworks.frameworks) == [TEKTON, "Widget.v1alpha1.example.com"]
    assert [str(p) for p in frameworks.problems] == [
        "externalFrameworks[#1].name: an entry must be a map with at least `name`, got a string"
    ]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ([{"name": "main", "count": 1}], "has no 'requests'"),
        ([{"name": "main", "count": 1, "requests": {}, "cnt": 1}], "unknown key 'cnt'"),
        ([{"name": "Main", "count": 1, "requests": {}}], "must be a DNS label"),
        ([{"name": "a", "count": 1, "requests": {}}, {"name": "a", "count": 1, "requests": {}}], "used twice"),
        ([{"name": "a", "count": True, "requests": {}}], "count must be an int"),
        ([{"name": "a", "count": 2, "minCount": 3, "requests": {}}], "minCount must be an int from 1 to count (2)"),
        ([{"name": "a", "count": 1, "requests": {"cpu": "lots"}}], "request 'cpu': invalid quantity"),
        ([{"name": "a", "count": 1, "requests": {"cpu": 1.5}}], "must be a quantity string or an int"),
        ([{"name": "a", "count": 1, "requests": {"cpu": "-1"}}], "must not be negative"),
        ([{"name": "a", "count": 1, "requests": []}], "requests must be a map"),
        (["main"], "pod set [0] must be a map, got a string"),
        ([{"name": f"p{i}", "count": 1, "requests": {}} for i in range(19)], "at most 18"),
    ],
)
def test_pod_set_shape(value: Any, words: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_pod_sets(value)
    assert words in str(err.value)


def test_pod_sets_accept_int_and_string_quantities() -> None:
    [pod_set] = parse_pod_sets([{"name": "main", "count": 4, "minCount": 2, "requests": {"cpu": 2, "memory": "1Gi"}}])
    assert (pod_set.count, pod_set.min_count, pod_set.requests) == (4, 2, {"cpu": "2", "memory": "1Gi"})
