"""v1beta1 <-> v1beta2 conversion: upstream's semantics, lossless round trips, ConversionReviews.

The property tests draw objects from the generated CRD schemas themselves
(every field of every converted kind, any subset of them), so a field added
to a model is covered without touching this file. What they check:

- v1beta2 -> v1beta1 -> v1beta2 and v1beta1 -> v1beta2 -> v1beta1 give back
  the original exactly (the stash annotation included in the middle, gone at
  the end);
- a converted object has no field its version's schema lacks (the API
  server would prune it silently);
- the plain conversion (what upstream does) agrees with the cases mirrored
  from upstream's ``*_conversion_test.go``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multikueue.api import crdgen, kind_for
from multikueue.api.conversion import ANNOTATION, CONVERTERS, ConversionError, convert, review
from multikueue.api.conversion.topology import domains_of, slices_of

pytestmark = pytest.mark.unit

V1, V2 = "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"
TOPOLOGY = ".status.admission.podSetAssignments[].topologyAssignment"


# --- objects drawn from the schemas ---------------------------------------------

_WORDS = st.text(alphabet="abc-1", min_size=0, max_size=6)
_TIMES = st.sampled_from(["2026-01-02T03:04:05Z", "2025-12-31T23:59:59Z"])
_QUANTITIES = st.one_of(st.integers(0, 64), st.sampled_from(["1", "500m", "2Gi", "0"]))


def _level_values(count: int) -> st.SearchStrategy[dict[str, Any]]:
    universal = st.builds(lambda v: {"universal": v}, _WORDS)
    individual = st.builds(
        lambda roots, prefix, suffix: {
            "individual": {"roots": roots, **({"prefix": prefix} if prefix else {}), **({"suffix": suffix} if suffix else {})}
        },
        st.lists(_WORDS, min_size=count, max_size=count),
        _WORDS,
        _WORDS,
    )
    return st.one_of(universal, individual)


@st.composite
def _v2_topology(draw: st.DrawFn) -> dict[str, Any]:
    """A topology assignment as v1beta2's CEL rules allow: lengths agree (any encoding, any number of slices)."""
    levels = draw(st.lists(_WORDS, min_size=1, max_size=3))
    slices = []
    for _ in range(draw(st.integers(0, 2))):
        count = draw(st.integers(1, 3))
        counts = draw(
            st.one_of(
                st.builds(lambda n: {"universal": n}, st.integers(1, 5)),
                st.builds(lambda ns: {"individual": ns}, st.lists(st.integers(1, 5), min_size=count, max_size=count)),
            )
        )
        per_level = [draw(_level_values(count)) for _ in levels]
        slices.append({"domainCount": count, "valuesPerLevel": per_level, "podCounts": counts})
    return {"levels": levels, "slices": slices}


@st.composite
def _v1_topology(draw: st.DrawFn) -> dict[str, Any]:
    levels = draw(st.lists(_WORDS, min_size=1, max_size=3))
    domains = draw(
        st.lists(
            st.builds(lambda values, count: {"values": values, "count": count},
                      st.lists(_WORDS, min_size=len(levels), max_size=len(levels)), st.integers(1, 5)),
            max_size=3,
        )
    )
    return {"levels": levels, "domains": domains}


OVERRIDES = {V1: {TOPOLOGY: _v1_topology()}, V2: {TOPOLOGY: _v2_topology()}}


def from_schema(node: dict[str, Any], path: str, overrides: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    if path in overrides:
        return overrides[path]
    if node.get("x-kubernetes-int-or-string"):
        return _QUANTITIES
    if node.get("x-kubernetes-preserve-unknown-fields") and not node.get("properties"):
        return st.dictionaries(st.sampled_from(["spec", "metadata"]), st.just({"x": 1}), max_size=1)
    kind = node.get("type")
    if "enum" in node:
        return st.sampled_from(node["enum"])
    if kind == "string":
        return _TIMES if node.get("format") == "date-time" else _WORDS
    if kind == "integer":
        return st.integers(0, 100)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(from_schema(node["items"], f"{path}[]", overrides, depth + 1), max_size=2 if depth < 6 else 0)
    if kind == "object":
        properties = node.get("properties") or {}
        if not properties and isinstance(node.get("additionalProperties"), dict):
            return st.dictionaries(_WORDS, from_schema(node["additionalProperties"], f"{path}{{}}", overrides, depth + 1), max_size=2)
        required = set(node.get("required") or ())
        children = {k: from_schema(v, f"{path}.{k}", overrides, depth + 1) for k, v in properties.items()}
        return st.fixed_dictionaries(
            {k: s for k, s in children.items() if k in required},
            optional={k: s for k, s in children.items() if k not in required},
        )
    return st.nothing()


def _schema(kind: str, version: str) -> dict[str, Any]:
    model = kind_for(kind)
    document = crdgen.crd_document(model)
    (entry,) = [v for v in document["spec"]["versions"] if f"kueue.x-k8s.io/{v['name']}" == version]
    return entry["schema"]["openAPIV3Schema"]


def objects(kind: str, version: str) -> st.SearchStrategy[dict[str, Any]]:
    root = _schema(kind, version)
    body = {k: v for k, v in root["properties"].items() if k not in ("apiVersion", "kind", "metadata")}
    fields = from_schema({"type": "object", "properties": body}, "", OVERRIDES[version])
    metadata = st.fixed_dictionaries(
        {"name": st.just("x")},
        # Never an empty map: the API server omits it (Go's omitempty), and so does the conversion.
        optional={"annotations": st.dictionaries(st.sampled_from(["a", "b"]), _WORDS, min_size=1, max_size=1)},
    )
    return st.builds(lambda f, m: {"apiVersion": version, "kind": kind, "metadata": m, **f}, fields, metadata)


def unknown_paths(value: Any, node: dict[str, Any], path: str = "") -> list[str]:
    """Where ``value`` has a field the schema ``node`` lacks (what the API server would prune)."""
    if node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string"):
        return []
    if isinstance(value, dict):
        properties = node.get("properties")
        if properties is None:
            extra = node.get("additionalProperties")
            return [p for k, v in value.items() for p in unknown_paths(v, extra, f"{path}{{}}")] if isinstance(extra, dict) else []
        found = []
        for key, child in value.items():
            if key not in properties:
                found.append(f"{path}.{key}")
            else:
                found += unknown_paths(child, properties[key], f"{path}.{key}")
        return found
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [p for item in value for p in unknown_paths(item, node["items"], f"{path}[]")]
    return []


def _without_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k != "metadata"}


KINDS = sorted(CONVERTERS)
PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("start", "other"), [(V2, V1), (V1, V2)], ids=["from-v1beta2", "from-v1beta1"])
def test_round_trip_is_lossless(kind: str, start: str, other: str) -> None:
    @PROPERTY
    @given(objects(kind, start))
    def check(original: dict[str, Any]) -> None:
        frozen = copy.deepcopy(original)
        there = convert(original, other)
        assert original == frozen, "convert must not modify its argument"
        assert there["apiVersion"] == other
        back = convert(there, start)
        assert back == original

    check()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("version", [V1, V2])
def test_converted_objects_fit_their_schema(kind: str, version: str) -> None:
    target = V2 if version == V1 else V1
    schema = _schema(kind, target)

    @PROPERTY
    @given(objects(kind, version))
    def check(original: dict[str, Any]) -> None:
        converted = convert(original, target)
        assert unknown_paths(_without_metadata(converted), schema) == []

    check()


# --- upstream's semantics (mirrors apis/kueue/v1beta1/*_conversion_test.go) ---------------


def _plain(obj: dict[str, Any], version: str) -> dict[str, Any]:
    """The conversion without the stash annotation (what upstream's webhook returns)."""
    out = convert(obj, version)
    out.get("metadata", {}).get("annotations", {}).pop(ANNOTATION, None)
    return out


def cq(version: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": version, "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": spec}


def test_cluster_queue_cohort_becomes_cohort_name_and_back() -> None:
    """TestConvertClusterQueue (cohort <-> cohortName)."""
    v2 = convert(cq(V1, {"cohort": "team", "queueingStrategy": "StrictFIFO"}), V2)
    assert v2 == cq(V2, {"cohortName": "team", "queueingStrategy": "StrictFIFO"})
    assert convert(v2, V1) == cq(V1, {"cohort": "team", "queueingStrategy": "StrictFIFO"})


def test_cluster_queue_admission_checks_become_a_strategy() -> None:
    v2 = _plain(cq(V1, {"admissionChecks": ["ac1", "ac2"]}), V2)
    assert v2["spec"] == {"admissionChecksStrategy": {"admissionChecks": [{"name": "ac1"}, {"name": "ac2"}]}}
    # The stash gives the v1beta1 form back as long as the strategy is unchanged ...
    stashed = convert(cq(V1, {"admissionChecks": ["ac1", "ac2"]}), V2)
    assert convert(stashed, V1)["spec"] == {"admissionChecks": ["ac1", "ac2"]}
    # ... and upstream's answer once a v1beta2 client changed it (never both forms at once).
    stashed["spec"]["admissionChecksStrategy"]["admissionChecks"].append({"name": "ac3"})
    assert convert(stashed, V1)["spec"] == {
        "admissionChecksStrategy": {"admissionChecks": [{"name": "ac1"}, {"name": "ac2"}, {"name": "ac3"}]}
    }


def test_deprecated_fungibility_values_become_may_stop_search() -> None:
    v1 = cq(V1, {"flavorFungibility": {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"}})
    assert _plain(v1, V2)["spec"]["flavorFungibility"] == {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"}


def test_v1beta2_only_field_survives_a_v1beta1_edit() -> None:
    """kubectl edit through v1beta1 keeps concurrentAdmissionPolicy, which v1beta1 cannot show."""
    stored = cq(V2, {"cohortName": "a", "concurrentAdmissionPolicy": {"migration": {"mode": "Disabled"}}})
    seen = convert(stored, V1)
    assert "concurrentAdmissionPolicy" not in seen["spec"]
    assert ANNOTATION in seen["metadata"]["annotations"]
    seen["spec"]["cohort"] = "b"
    written = convert(seen, V2)
    assert written["spec"] == {"cohortName": "b", "concurrentAdmissionPolicy": {"migration": {"mode": "Disabled"}}}
    assert "annotations" not in written["metadata"]


def test_local_queue_flavor_usage_is_renamed() -> None:
    """TestConvertLocalQueue (flavorUsage <-> flavorsUsage)."""
    usage = [{"name": "default", "resources": [{"name": "cpu", "total": "1"}]}]
    v1 = {"apiVersion": V1, "kind": "LocalQueue", "metadata": {"name": "lq"}, "status": {"flavorUsage": usage}}
    v2 = convert(v1, V2)
    assert v2["status"] == {"flavorsUsage": usage}
    assert convert(v2, V1) == v1


def test_multikueue_cluster_kubeconfig_moves_under_cluster_source() -> None:
    """TestConvertMultiKueueCluster."""
    v1 = {
        "apiVersion": V1,
        "kind": "MultiKueueCluster",
        "metadata": {"name": "w1"},
        "spec": {"kubeConfig": {"location": "w1-secret", "locationType": "Secret"}},
    }
    v2 = convert(v1, V2)
    assert v2["spec"] == {"clusterSource": {"kubeConfig": {"location": "w1-secret", "locationType": "Secret"}}}
    assert convert(v2, V1) == v1
    profile = {**v2, "spec": {"clusterSource": {"clusterProfileRef": {"name": "p"}}}}
    assert _plain(profile, V1)["spec"] == {"clusterProfileRef": {"name": "p"}}


@pytest.mark.parametrize(
    ("source", "group", "kind"),
    [
        ("kueue.x-k8s.io/workloadpriorityclass", "kueue.x-k8s.io", "WorkloadPriorityClass"),
        ("scheduling.k8s.io/priorityclass", "scheduling.k8s.io", "PriorityClass"),
    ],
)
def test_workload_priority_class_source_becomes_a_ref(source: str, group: str, kind: str) -> None:
    """TestConvertWorkload (priorityClassSource/priorityClassName <-> priorityClassRef)."""
    v1 = {
        "apiVersion": V1,
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {"priorityClassSource": source, "priorityClassName": "high", "priority": 100},
        "status": {"accumulatedPastExexcutionTimeSeconds": 7},
    }
    v2 = convert(v1, V2)
    assert v2["spec"] == {"priorityClassRef": {"group": group, "kind": kind, "name": "high"}, "priority": 100}
    assert v2["status"] == {"accumulatedPastExecutionTimeSeconds": 7}
    assert convert(v2, V1) == v1


def test_topology_domains_pack_into_one_compact_slice() -> None:
    """Upstream's single-slice encoding: shared prefix/suffix, universal values and counts."""
    levels = ["rack", "kubernetes.io/hostname"]
    domains = [
        {"values": ["r1", "node-a-x"], "count": 2},
        {"values": ["r1", "node-bb-x"], "count": 2},
    ]
    (piece,) = slices_of(levels, domains)
    assert piece == {
        "domainCount": 2,
        "valuesPerLevel": [
            {"universal": "r1"},
            {"individual": {"prefix": "node-", "roots": ["a", "bb"], "suffix": "-x"}},
        ],
        "podCounts": {"universal": 2},
    }
    assert domains_of({"levels": levels, "slices": [piece]}) == domains


def test_overlapping_prefix_and_suffix_are_trimmed() -> None:
    (piece,) = slices_of(["h"], [{"values": ["ababa"], "count": 1}, {"values": ["aba"], "count": 3}])
    values = piece["valuesPerLevel"][0]["individual"]
    assert [values.get("prefix", "") + r + values.get("suffix", "") for r in values["roots"]] == ["ababa", "aba"]
    assert piece["podCounts"] == {"individual": [1, 3]}


def test_inconsistent_topology_is_a_conversion_error() -> None:
    broken = {"levels": ["a", "b"], "slices": [{"domainCount": 1, "valuesPerLevel": [{"universal": "x"}], "podCounts": {"universal": 1}}]}
    with pytest.raises(ConversionError, match="1 valuesPerLevel entries for 2 levels"):
        domains_of(broken)


def test_same_version_is_returned_as_is() -> None:
    obj = cq(V2, {"cohortName": "a"})
    assert convert(obj, V2) is obj


def test_unparsable_stash_is_ignored() -> None:
    obj = cq(V1, {"cohort": "a"})
    obj["metadata"]["annotations"] = {ANNOTATION: "{not json"}
    assert convert(obj, V2) == cq(V2, {"cohortName": "a"})


# --- ConversionReview ------------------------------------------------------------


def _review(desired: str, *objs: dict[str, Any], api_version: str = "apiextensions.k8s.io/v1") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "ConversionReview",
        "request": {"uid": "u-1", "desiredAPIVersion": desired, "objects": list(objs)},
    }


def test_review_converts_every_object() -> None:
    answer = review(_review(V2, cq(V1, {"cohort": "a"}), cq(V2, {"cohortName": "b"})))
    assert answer["apiVersion"] == "apiextensions.k8s.io/v1" and answer["kind"] == "ConversionReview"
    response = answer["response"]
    assert response["uid"] == "u-1" and response["result"] == {"status": "Success"}
    assert [o["spec"] for o in response["convertedObjects"]] == [{"cohortName": "a"}, {"cohortName": "b"}]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_review("kueue.x-k8s.io/v1alpha1", cq(V1, {})), "cannot convert to 'kueue.x-k8s.io/v1alpha1'"),
        (_review(V2, cq("kueue.x-k8s.io/v9", {})), "cannot convert from 'kueue.x-k8s.io/v9'"),
        (
            _review(V2, {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": "f"}}),
            "'ResourceFlavor' has no conversion",
        ),
        (_review(V2, cq(V1, {}), api_version="apiextensions.k8s.io/v1beta1"), "use apiextensions.k8s.io/v1"),
        (_review(V2, "not an object"), "objects[0] is not an object"),  # type: ignore[arg-type]
        ({"kind": "ConversionReview", "apiVersion": "apiextensions.k8s.io/v1"}, "no request"),
        ({"apiVersion": "apiextensions.k8s.io/v1", "request": {"objects": []}}, "no uid"),
        ([1, 2], "not a ConversionReview"),
    ],
)
def test_review_failures_say_why(body: Any, message: str) -> None:
    response = review(body)["response"]
    assert response["result"]["status"] == "Failure"
    assert message in response["result"]["message"]
    assert response["convertedObjects"] == []
    json.dumps(response)  # the answer is JSON as it is
