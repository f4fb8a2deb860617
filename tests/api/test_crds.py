"""The generated CRDs: committed files are current, schemas are structural, and match upstream.

The upstream comparison is the schema-level compatibility proof: every field
upstream Kueue's ``v1beta2`` CRDs define exists in ours with the same type,
requiredness, enum, default, list semantics and limits, and ours defines no
field upstream lacks (a worker running upstream's CRDs would silently prune
it). All differences are reported at once.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from multikueue.api import KINDS, crdgen

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO.parent / "shared" / "reference" / "kueue-v1beta2-crds"
MISSING = object()

#: Keywords whose values must be identical in upstream's and our schema nodes.
EQUAL_KEYWORDS = (
    "type",
    "format",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "maxProperties",
    "nullable",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource",
)


def _reference_dir() -> Path:
    assert REFERENCE.is_dir(), (
        f"upstream CRDs not found at {REFERENCE}: the compatibility check needs "
        "../shared/reference/kueue-v1beta2-crds next to the repository"
    )
    return REFERENCE


@functools.cache
def _upstream_crd(file_name: str) -> dict[str, Any]:
    """Upstream's CRD (cached: the Workload CRD is large; callers must not modify it)."""
    path = _reference_dir() / file_name
    assert path.is_file(), f"upstream CRD {path} is missing"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)


def _version(crd: dict[str, Any], name: str = "v1beta2") -> dict[str, Any]:
    versions = [v for v in crd["spec"]["versions"] if v["name"] == name]
    assert versions, f"{crd['metadata']['name']} has no {name} version"
    return versions[0]


def _compare_nodes(upstream: dict[str, Any], ours: dict[str, Any], path: str, diffs: list[str]) -> None:
    where = path or "<root>"
    for key in EQUAL_KEYWORDS:
        up_value, our_value = upstream.get(key, MISSING), ours.get(key, MISSING)
        if up_value != our_value:
            diffs.append(f"{where}: {key} upstream={_show(up_value)} ours={_show(our_value)}")
    up_enum, our_enum = upstream.get("enum"), ours.get("enum")
    if (up_enum is None) != (our_enum is None) or (up_enum and set(up_enum) != set(our_enum or ())):
        diffs.append(f"{where}: enum upstream={up_enum} ours={our_enum}")
    if ("anyOf" in upstream) != ("anyOf" in ours):
        diffs.append(f"{where}: anyOf upstream={upstream.get('anyOf')} ours={ours.get('anyOf')}")
    if upstream.get("x-kubernetes-preserve-unknown-fields") and not ours.get("x-kubernetes-preserve-unknown-fields"):
        diffs.append(f"{where}: upstream keeps unknown fields, ours would prune them")
    if ours.get("x-kubernetes-validations") and not upstream.get("x-kubernetes-validations"):
        diffs.append(f"{where}: ours has CEL rules where upstream has none")
    if ours.get("x-kubernetes-preserve-unknown-fields"):
        return  # opaque in ours (e.g. pod templates): everything below is accepted as is
    if sorted(upstream.get("required", [])) != sorted(ours.get("required", [])):
        diffs.append(
            f"{where}: required upstream={sorted(upstream.get('required', []))} ours={sorted(ours.get('required', []))}"
        )
    up_props, our_props = upstream.get("properties", {}), ours.get("properties", {})
    for name in sorted(up_props):
        if name not in our_props:
            diffs.append(f"{path}.{name}: missing in ours")
        else:
            _compare_nodes(up_props[name], our_props[name], f"{path}.{name}", diffs)
    for name in sorted(set(our_props) - set(up_props)):
        diffs.append(f"{path}.{name}: only in ours (upstream would prune it)")
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        up_child, our_child = upstream.get(key), ours.get(key)
        if isinstance(up_child, dict) and isinstance(our_child, dict):
            _compare_nodes(up_child, our_child, path + suffix, diffs)
        elif (up_child is None) != (our_child is None):
            diffs.append(f"{where}: {key} upstream={_show(up_child)} ours={_show(our_child)}")


def _show(value: Any) -> str:
    return "<absent>" if value is MISSING or value is None else repr(value)


def _column_facts(version: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (c["name"], c["type"], c["jsonPath"], c.get("priority", 0)) for c in version.get("additionalPrinterColumns", [])
    ]


def test_generated_crds_match_upstream_v1beta2() -> None:
    diffs: list[str] = []
    documents = crdgen.crd_documents()
    assert len(documents) == 9
    for file_name, ours in documents.items():
        upstream = _upstream_crd(file_name)
        up_version, our_version = _version(upstream), _version(ours)
        prefix = file_name.removeprefix("kueue.x-k8s.io_").removesuffix(".yaml")
        for key in ("group", "names", "scope"):
            if upstream["spec"][key] != ours["spec"][key]:
                diffs.append(f"{prefix}: spec.{key} upstream={upstream['spec'][key]} ours={ours['spec'][key]}")
        if upstream["metadata"]["name"] != ours["metadata"]["name"]:
            diffs.append(f"{prefix}: metadata.name differs")
        up_status = up_version.get("subresources", {}).get("status") is not None
        our_status = our_version.get("subresources", {}).get("status") is not None
        if up_status != our_status:
            diffs.append(f"{prefix}: status subresource upstream={up_status} ours={our_status}")
        if _column_facts(up_version) != _column_facts(our_version):
            diffs.append(
                f"{prefix}: printer columns upstream={_column_facts(up_version)} ours={_column_facts(our_version)}"
            )
        if not (our_version["served"] and our_version["storage"]):
            diffs.append(f"{prefix}: v1beta2 must be served and stored")
        node_diffs: list[str] = []
        _compare_nodes(
            up_version["schema"]["openAPIV3Schema"], our_version["schema"]["openAPIV3Schema"], "", node_diffs
        )
        diffs.extend(f"{prefix}: {d}" for d in node_diffs)
    assert not diffs, f"{len(diffs)} differences from upstream v1beta2:\n" + "\n".join(diffs)


# --- committed files ----------------------------------------------------------


def test_committed_crds_are_up_to_date() -> None:
    """The CI's CRD generation check: config/crd/bases is what the models generate."""
    stale = crdgen.check_crds(REPO / crdgen.CRD_DIR)
    assert not stale, (
        f"config/crd/bases is out of date for: {', '.join(stale)}; "
        f"run `{crdgen.REGENERATE_COMMAND}` (or `python -m multikueue.api.crdgen`) and commit the result"
    )


def test_generation_is_stable() -> None:
    assert crdgen.generate_files() == crdgen.generate_files()


def test_every_file_says_it_is_generated_and_by_what() -> None:
    for name, text in crdgen.generate_files().items():
        assert text.startswith("# Generated"), name
        assert crdgen.REGENERATE_COMMAND in text.splitlines()[0], name


def test_generate_crds_has_one_crd_per_kind_and_kustomization_lists_them() -> None:
    crds = crdgen.generate_crds()
    assert sorted(crds) == sorted(f"kueue.x-k8s.io_{model.plural}.yaml" for model in KINDS)
    kustomization = yaml.safe_load(crdgen.generate_files()[crdgen.KUSTOMIZATION])
    assert kustomization["resources"] == sorted(f"bases/{name}" for name in crds)
    assert set(crdgen.generate_files()) == {crdgen.KUSTOMIZATION, *(f"bases/{name}" for name in crds)}
    for name, text in crds.items():
        document = yaml.safe_load(text)
        assert document["kind"] == "CustomResourceDefinition", name
        # v1beta2 first (stored), then v1beta1 (served through conversion, tests/api/test_crd_v1beta1.py).
        assert [v["name"] for v in document["spec"]["versions"]] == ["v1beta2", "v1beta1"], name


def test_main_check_fails_naming_stale_files_and_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert crdgen.main(["--check", "--dir", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert "kueue.x-k8s.io_workloads.yaml" in error
    assert crdgen.REGENERATE_COMMAND in error

    assert crdgen.main(["--dir", str(tmp_path)]) == 0
    assert crdgen.main(["--check", "--dir", str(tmp_path)]) == 0

    (tmp_path / "bases/kueue.x-k8s.io_workloads.yaml").write_text("# edited\n", encoding="utf-8")
    (tmp_path / "bases/kueue.x-k8s.io_gone.yaml").write_text("# a kind that no longer exists\n", encoding="utf-8")
    (tmp_path / "bases/kustomization.yaml").write_text("# the old layout's\n", encoding="utf-8")
    assert crdgen.check_crds(tmp_path) == [
        "bases/kueue.x-k8s.io_gone.yaml", "bases/kueue.x-k8s.io_workloads.yaml", "bases/kustomization.yaml"
    ]
    capsys.readouterr()
    assert crdgen.main(["--check", "--dir", str(tmp_path)]) == 1
    assert "bases/kueue.x-k8s.io_gone.yaml, bases/kueue.x-k8s.io_workloads.yaml" in capsys.readouterr().err

    crdgen.write_crds(tmp_path)
    assert not (tmp_path / "bases/kueue.x-k8s.io_gone.yaml").exists()
    assert not (tmp_path / "bases/kustomization.yaml").exists()
    assert crdgen.check_crds(tmp_path) == []


# --- structural schemas -------------------------------------------------------


def _schema_nodes(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path, node)]
    for name, child in node.get("properties", {}).items():
        nodes.extend(_schema_nodes(child, f"{path}.{name}"))
    if isinstance(node.get("items"), dict):
        nodes.extend(_schema_nodes(node["items"], f"{path}[]"))
    if isinstance(node.get("additionalProperties"), dict):
        nodes.extend(_schema_nodes(node["additionalProperties"], f"{path}{{}}"))
    return nodes


def _structural_problems(path: str, node: dict[str, Any]) -> list[str]:
    problems = []
    where = path or "<root>"
    if "$ref" in node:
        problems.append(f"{where}: $ref")
    if node.get("x-kubernetes-int-or-string"):
        if node.get("anyOf") != [{"type": "integer"}, {"type": "string"}] or "type" in node:
            problems.append(f"{where}: int-or-string must be exactly anyOf integer/string without type")
    else:
        if "type" not in node:
            problems.append(f"{where}: no type")
        if "anyOf" in node or "oneOf" in node or "allOf" in node:
            problems.append(f"{where}: anyOf/oneOf/allOf outside an int-or-string")
    if node.get("x-kubernetes-preserve-unknown-fields") and node.get("type") != "object":
        problems.append(f"{where}: preserve-unknown-fields on a non-object")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{where}: both properties and additionalProperties")
    if node.get("type") == "array" and "items" not in node:
        problems.append(f"{where}: array without items")
    if "nullable" in node:
        problems.append(f"{where}: nullable (upstream has none)")
    list_type = node.get("x-kubernetes-list-type")
    if list_type == "map":
        item = node.get("items", {})
        for key in node.get("x-kubernetes-list-map-keys", []):
            key_schema = item.get("properties", {}).get(key)
            if key_schema is None:
                problems.append(f"{where}: list-map key {key} is not a property of the items")
            elif key not in item.get("required", []) and "default" not in key_schema:
                problems.append(f"{where}: list-map key {key} must be required or defaulted")
    elif list_type == "set" and node.get("items", {}).get("type") in ("object", "array"):
        problems.append(f"{where}: set lists must hold scalars")
    elif "x-kubernetes-list-map-keys" in node:
        problems.append(f"{where}: list-map keys without list-type map")
    for key in node.get("required", []):
        if key not in node.get("properties", {}):
            problems.append(f"{where}: required {key} is not a property")
    return problems


def test_schemas_are_structural() -> None:
    problems = []
    for file_name, document in crdgen.crd_documents().items():
        for version in document["spec"]["versions"]:
            root = version["schema"]["openAPIV3Schema"]
            for path, node in _schema_nodes(root, ""):
                problems.extend(f"{file_name}: {p}" for p in _structural_problems(path, node))
    assert not problems, "\n".join(problems)


def test_opaque_nodes_are_only_the_pod_template() -> None:
    opaque = []
    for file_name, document in crdgen.crd_documents().items():
        root = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        opaque += [
            f"{file_name}:{path}"
            for path, node in _schema_nodes(root, "")
            if node.get("x-kubernetes-preserve-unknown-fields")
        ]
    assert opaque == ["kueue.x-k8s.io_workloads.yaml:.spec.podSets[].template"]


# --- CEL rules ----------------------------------------------------------------


def _rules_by_path(root: dict[str, Any]) -> dict[str, list[str]]:
    return {
        path: [entry["rule"] for entry in node["x-kubernetes-validations"]]
        for path, node in _schema_nodes(root, "")
        if node.get("x-kubernetes-validations")
    }


def _all_rules() -> list[tuple[str, str]]:
    found = []
    for file_name, document in crdgen.crd_documents().items():
        root = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, rules in _rules_by_path(root).items():
            found.extend((f"{file_name}:{path or '<root>'}", rule) for rule in rules)
    return found


def test_cel_rules_parse() -> None:
    environment = celpy.Environment()
    errors = []
    for where, rule in _all_rules():
        try:
            environment.compile(rule)
        except celpy.CELParseError as err:
            errors.append(f"{where}: {rule}: {err}")
    assert not errors, "\n".join(errors)


def test_rule_messages_are_ours_and_short() -> None:
    for file_name, document in crdgen.crd_documents().items():
        root = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, node in _schema_nodes(root, ""):
            for entry in node.get("x-kubernetes-validations", []):
                assert 0 < len(entry["message"]) <= 100, f"{file_name}:{path}: {entry['message']}"


# --- CEL rules behave like upstream's -------------------------------------------
#
# Our rules are written independently, so check they decide like upstream's:
# evaluate both rule sets at each schema location on sample values (already
# defaulted, as the API server validates after defaulting) and require the
# same verdict. Transition rules (those using ``oldSelf``) only run on
# updates, so they are skipped for samples without an old value. A rule that
# fails to evaluate counts as a rejection, as in the API server.

_ENV = celpy.Environment()


@functools.cache
def _program(rule: str) -> celpy.Runner:
    return _ENV.program(_ENV.compile(rule))


def _accepts(rules: list[str], new: Any, old: Any) -> bool:
    activation = {"self": celpy.json_to_cel(new)}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(old)
    for rule in rules:
        if old is None and "oldSelf" in rule:
            continue
        try:
            result = _program(rule).evaluate(activation)
        except celpy.CELEvalError:  # an evaluation error rejects the object
            return False
        if not isinstance(result, celpy.celtypes.BoolType) or not result:
            return False
    return True


def _wl(
    *,
    pod_sets: int = 1,
    reserved: bool = False,
    admitted: bool = False,
    assignments: int | None = None,
    queue: str | None = "q",
    ref: dict[str, str] | None = None,
    max_exec: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "active": True,
        "podSets": [{"name": f"p{i}", "count": 1, "template": {}} for i in range(pod_sets)],
    }
    if queue is not None:
        spec["queueName"] = queue
    if ref is not None:
        spec["priorityClassRef"] = ref
        spec["priority"] = 1
    if max_exec is not None:
        spec["maximumExecutionTimeSeconds"] = max_exec
    conditions = []
    if reserved:
        conditions.append({"type": "QuotaReserved", "status": "True"})
    if admitted:
        conditions.append({"type": "Admitted", "status": "True"})
    status: dict[str, Any] = {"conditions": conditions} if conditions else {}
    if assignments is not None:
        status["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [{"name": f"p{i}"} for i in range(assignments)],
        }
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {}, "spec": spec, "status": status}


_WPC = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
_PC = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"}
_TOLERATIONS = [
    [],
    [{"key": "a", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
    [{"operator": "Exists"}],
    [{}],
    [{"key": "a"}],
    [{"key": "a", "tolerationSeconds": 5, "effect": "NoSchedule"}],
    [{"key": "a", "tolerationSeconds": 5, "effect": "NoExecute"}],
    [{"key": "a", "operator": "Lt", "value": "1"}],
    [{"key": "a", "operator": "Exists", "value": "x"}],
    [{"key": "a", "effect": "Sometimes"}],
]
_GROUP = {
    "coveredResources": ["cpu", "memory"],
    "flavors": [
        {"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1}, {"name": "memory", "nominalQuota": 1}]}
    ],
}
_SHORT_GROUP = {
    "coveredResources": ["cpu", "memory"],
    "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1}]}],
}
_BORROWING_GROUP = {
    "coveredResources": ["cpu"],
    "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1, "borrowingLimit": 1}]}],
}
_SLICE = {"domainCount": 2, "podCounts": {"universal": 1}, "valuesPerLevel": [{"universal": "a"}]}

#: (file, schema path) -> samples of (new value, old value or None).
RULE_SAMPLES: dict[tuple[str, str], list[tuple[Any, Any]]] = {
    ("admissionchecks", ".spec.controllerName"): [("a", None), ("a", "a"), ("b", "a")],
    ("localqueues", ".spec.clusterQueue"): [("a", None), ("a", "a"), ("b", "a")],
    ("clusterqueues", ".spec"): [
        ({}, None),
        ({"resourceGroups": [_GROUP]}, None),
        ({"resourceGroups": [_BORROWING_GROUP]}, None),
        ({"cohortName": "c", "resourceGroups": [_BORROWING_GROUP]}, None),
        ({"cohortName": "c"}, None),
    ],
    ("clusterqueues", ".spec.flavorFungibility"): [
        ({"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"}, None),
        (
            {
                "whenCanBorrow": "MayStopSearch",
                "whenCanPreempt": "TryNextFlavor",
                "preference": "BorrowingOverPreemption",
            },
            None,
        ),
        (
            {
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "TryNextFlavor",
                "preference": "BorrowingOverPreemption",
            },
            None,
        ),
        (
            {
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "MayStopSearch",
                "preference": "PreemptionOverBorrowing",
            },
            None,
        ),
    ],
    ("clusterqueues", ".spec.preemption"): [
        (
            {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never", "borrowWithinCohort": {"policy": "Never"}},
            None,
        ),
        (
            {
                "reclaimWithinCohort": "Never",
                "withinClusterQueue": "Never",
                "borrowWithinCohort": {"policy": "LowerPriority"},
            },
            None,
        ),
        (
            {
                "reclaimWithinCohort": "Any",
                "withinClusterQueue": "Never",
                "borrowWithinCohort": {"policy": "LowerPriority"},
            },
            None,
        ),
        ({"reclaimWithinCohort": "Never", "withinClusterQueue": "LowerPriority"}, None),
    ],
    ("clusterqueues", ".spec.resourceGroups[]"): [(_GROUP, None), (_SHORT_GROUP, None)],
    ("cohorts", ".spec.resourceGroups[]"): [(_GROUP, None), (_SHORT_GROUP, None)],
    ("multikueueclusters", ".spec.clusterSource"): [
        ({}, None),
        ({"kubeConfig": {"location": "s", "locationType": "Secret"}}, None),
        ({"clusterProfileRef": {"name": "p"}}, None),
        ({"kubeConfig": {"location": "s", "locationType": "Secret"}, "clusterProfileRef": {"name": "p"}}, None),
    ],
    ("multikueueconfigs", ".spec.clusters"): [(["a"], None), (["a", "b"], None), (["a", "b", "a"], None), ([], None)],
    ("resourceflavors", ".spec"): [
        ({}, None),
        ({"topologyName": "t"}, None),
        ({"topologyName": "t", "nodeLabels": {"zone": "a"}}, None),
        ({"topologyName": "t", "nodeLabels": {}}, None),
        ({"topologyName": "u", "nodeLabels": {"zone": "a"}}, {"topologyName": "t", "nodeLabels": {"zone": "a"}}),
        ({"nodeLabels": {"zone": "a"}}, {"topologyName": "t", "nodeLabels": {"zone": "a"}}),
        ({"topologyName": "t", "nodeLabels": {"zone": "a"}}, {"nodeLabels": {"zone": "a"}}),
        ({"topologyName": "t", "nodeLabels": {"zone": "b"}}, {"topologyName": "t", "nodeLabels": {"zone": "a"}}),
    ],
    ("resourceflavors", ".spec.nodeTaints"): [
        ([{"key": "k", "effect": "NoSchedule"}], None),
        ([{"key": "k", "effect": "NoExecute"}, {"key": "j", "effect": "Never"}], None),
    ],
    ("resourceflavors", ".spec.tolerations"): [(t, None) for t in _TOLERATIONS],
    ("workloads", ".status.admissionChecks[].podSetUpdates[].tolerations"): [(t, None) for t in _TOLERATIONS],
    ("workloads", ""): [
        (_wl(reserved=True, assignments=1), None),
        (_wl(pod_sets=2, reserved=True, assignments=1), None),
        (_wl(pod_sets=2, assignments=1), None),
        (_wl(reserved=True), None),
        (_wl(queue="other", reserved=True, assignments=1), _wl(reserved=True, assignments=1)),
        (_wl(queue=None, reserved=True, assignments=1), _wl(reserved=True, assignments=1)),
        (_wl(queue="other"), _wl(reserved=True, assignments=1)),
        (_wl(queue="other"), _wl()),
        (_wl(ref=_WPC, reserved=True, assignments=1), _wl(reserved=True, assignments=1)),
        (_wl(reserved=True, assignments=1), _wl(ref=_WPC, reserved=True, assignments=1)),
        (_wl(ref=_PC, reserved=True, assignments=1), _wl(ref=_WPC, reserved=True, assignments=1)),
        (_wl(ref={**_WPC, "name": "low"}, reserved=True, assignments=1), _wl(ref=_WPC, reserved=True, assignments=1)),
        (_wl(ref={**_PC, "name": "low"}, reserved=True, assignments=1), _wl(ref=_PC, reserved=True, assignments=1)),
        (_wl(ref={**_PC, "name": "low"}), _wl(ref=_PC)),
        (
            _wl(max_exec=10, reserved=True, admitted=True, assignments=1),
            _wl(max_exec=5, reserved=True, admitted=True, assignments=1),
        ),
        (
            _wl(reserved=True, admitted=True, assignments=1),
            _wl(max_exec=5, reserved=True, admitted=True, assignments=1),
        ),
        (_wl(max_exec=10), _wl(max_exec=5, reserved=True, admitted=True, assignments=1)),
    ],
    ("workloads", ".spec"): [
        ({}, None),
        ({"priorityClassRef": _WPC}, None),
        ({"priorityClassRef": _WPC, "priority": 5}, None),
    ],
    ("workloads", ".spec.podSets[]"): [
        ({"name": "main", "count": 2, "minCount": 1, "template": {}}, None),
        ({"name": "main", "count": 1, "minCount": 2, "template": {}}, None),
        ({"name": "main", "count": 1, "template": {}}, None),
    ],
    ("workloads", ".spec.priorityClassRef"): [
        (_WPC, None),
        (_PC, None),
        ({"group": "kueue.x-k8s.io", "kind": "PriorityClass", "name": "x"}, None),
        ({"group": "scheduling.k8s.io", "kind": "WorkloadPriorityClass", "name": "x"}, None),
    ],
    ("workloads", ".status"): [
        ({}, None),
        ({"clusterName": "w1"}, None),
        ({"clusterName": "w1", "nominatedClusterNames": ["w1", "w2"]}, None),
        ({"clusterName": "w1", "nominatedClusterNames": []}, None),
        ({"nominatedClusterNames": ["w1", "w2"]}, None),
        ({"clusterName": "w2"}, {"clusterName": "w1"}),
        ({}, {"clusterName": "w1"}),
        ({"clusterName": "w1"}, {"nominatedClusterNames": ["w1"]}),
    ],
    ("workloads", ".status.admission.podSetAssignments[].topologyAssignment"): [
        ({"levels": ["zone"], "slices": [_SLICE]}, None),
        ({"levels": ["zone", "rack"], "slices": [_SLICE]}, None),
        ({"levels": ["zone"], "slices": []}, None),
    ],
    ("workloads", ".status.admission.podSetAssignments[].topologyAssignment.slices[]"): [
        (_SLICE, None),
        ({**_SLICE, "podCounts": {"individual": [1, 2]}}, None),
        ({**_SLICE, "podCounts": {"individual": [1]}}, None),
        ({**_SLICE, "valuesPerLevel": [{"individual": {"roots": ["a", "b"]}}]}, None),
        ({**_SLICE, "valuesPerLevel": [{"individual": {"roots": ["a"]}}]}, None),
    ],
    ("workloads", ".status.admission.podSetAssignments[].topologyAssignment.slices[].podCounts"): [
        ({}, None),
        ({"universal": 1}, None),
        ({"individual": [1]}, None),
        ({"universal": 1, "individual": [1]}, None),
    ],
    ("workloads", ".status.admission.podSetAssignments[].topologyAssignment.slices[].valuesPerLevel[]"): [
        ({}, None),
        ({"universal": "a"}, None),
        ({"individual": {"roots": ["a"]}}, None),
        ({"universal": "a", "individual": {"roots": ["a"]}}, None),
    ],
}


def _rules_in(document: dict[str, Any]) -> dict[str, list[str]]:
    return _rules_by_path(_version(document)["schema"]["openAPIV3Schema"])


def test_cel_rules_decide_like_upstream() -> None:
    mismatches = []
    unsampled = []
    for file_name, ours in crdgen.crd_documents().items():
        short = file_name.removeprefix("kueue.x-k8s.io_").removesuffix(".yaml")
        our_rules = _rules_in(ours)
        up_rules = _rules_in(_upstream_crd(file_name))
        for path in sorted(set(our_rules) | set(up_rules)):
            samples = RULE_SAMPLES.get((short, path))
            if not samples:
                unsampled.append(f"{short}:{path or '<root>'}")
                continue
            for new, old in samples:
                verdict_ours = _accepts(our_rules.get(path, []), new, old)
                verdict_up = _accepts(up_rules.get(path, []), new, old)
                if verdict_ours != verdict_up:
                    mismatches.append(
                        f"{short}:{path or '<root>'}: new={new} old={old}: upstream "
                        f"{'accepts' if verdict_up else 'rejects'}, ours {'accepts' if verdict_ours else 'rejects'}"
                    )
    assert not unsampled, "rules without samples (add them to RULE_SAMPLES): " + ", ".join(unsampled)
    assert not mismatches, "\n".join(mismatches)


def test_rule_samples_exercise_both_verdicts() -> None:
    """Samples that all pass (or all fail) would prove nothing."""
    documents = crdgen.crd_documents()
    one_sided = []
    for (short, path), samples in RULE_SAMPLES.items():
        rules = _rules_in(documents[f"kueue.x-k8s.io_{short}.yaml"])[path]
        verdicts = {_accepts(rules, new, old) for new, old in samples}
        if verdicts != {True, False}:
            one_sided.append(f"{short}:{path or '<root>'} -> {verdicts}")
    assert not one_sided, "\n".join(one_sided)


def test_the_committed_bases_folder_holds_only_crds_so_kubectl_apply_f_takes_it_as_is() -> None:
    """``kubectl apply -f config/crd/bases/`` applies every file there: a kustomization.yaml in it would fail."""
    for path in sorted((REPO / crdgen.CRD_DIR / crdgen.BASES).iterdir()):
        assert yaml.safe_load(path.read_text())["kind"] == "CustomResourceDefinition", path.name
