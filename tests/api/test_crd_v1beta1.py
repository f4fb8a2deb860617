"""The generated CRDs' v1beta1 version: served, not stored, converted by webhook, and upstream's schema.

Upstream Kueue v0.19.2 serves v1beta1 next to v1beta2 (its CRDs, in
``../shared/reference/kueue-v1beta2-crds``, carry both). Ours derives v1beta1
from v1beta2 with :mod:`multikueue.api.conversion.schema`; this checks that
every field upstream's v1beta1 defines is there with the same type, enum,
format and default (the two defaults left out on purpose excepted), and that
ours adds no field upstream's v1beta1 lacks, so upstream's v1beta1
manifests apply unchanged and nothing is silently pruned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from multikueue.api import crdgen
from multikueue.api.conversion import CONVERTERS

pytestmark = pytest.mark.unit

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "kueue-v1beta2-crds"
#: Upstream v1beta1 defaults ours leaves out (see multikueue/api/conversion/schema.py for why).
DEFAULTS_LEFT_OUT = {
    ("kueue.x-k8s.io_admissionchecks.yaml", ".spec.retryDelayMinutes"),
    ("kueue.x-k8s.io_workloads.yaml", ".spec.priorityClassSource"),
}


def _version(crd: dict[str, Any], name: str) -> dict[str, Any]:
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == name]
    return version


def _nodes(node: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    out = {prefix or ".": node}
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return out  # opaque (pod templates): nothing below is compared
    for name, child in (node.get("properties") or {}).items():
        out.update(_nodes(child, f"{prefix}.{name}"))
    if isinstance(node.get("items"), dict):
        out.update(_nodes(node["items"], f"{prefix}[]"))
    if isinstance(node.get("additionalProperties"), dict):
        out.update(_nodes(node["additionalProperties"], f"{prefix}{{}}"))
    return out


def _under_opaque(path: str, nodes: dict[str, dict[str, Any]]) -> bool:
    return any(
        path.startswith(other) and path != other and node.get("x-kubernetes-preserve-unknown-fields")
        for other, node in nodes.items()
    )


@pytest.mark.parametrize("file_name", sorted(crdgen.crd_documents()))
def test_v1beta1_has_upstreams_fields(file_name: str) -> None:
    assert REFERENCE.is_dir(), f"upstream CRDs not found at {REFERENCE}"
    upstream = yaml.safe_load((REFERENCE / file_name).read_text(encoding="utf-8"))
    ours = crdgen.crd_documents()[file_name]
    up = _nodes(_version(upstream, "v1beta1")["schema"]["openAPIV3Schema"])
    our = _nodes(_version(ours, "v1beta1")["schema"]["openAPIV3Schema"])
    diffs = [f"{p}: missing in ours" for p in up if p not in our and not _under_opaque(p, our)]
    diffs += [f"{p}: only in ours" for p in our if p not in up and not _under_opaque(p, up)]
    for path in sorted(set(up) & set(our)):
        for key in ("type", "format", "default", "x-kubernetes-int-or-string"):
            if (file_name, path) in DEFAULTS_LEFT_OUT and key == "default":
                continue
            if up[path].get(key) != our[path].get(key):
                diffs.append(f"{path}: {key} upstream={up[path].get(key)!r} ours={our[path].get(key)!r}")
        up_enum, our_enum = up[path].get("enum"), our[path].get("enum")
        if up_enum is not None and set(up_enum) != set(our_enum or ()):
            diffs.append(f"{path}: enum upstream={up_enum} ours={our_enum}")
    assert not diffs, "\n".join(diffs)


@pytest.mark.parametrize("document", list(crdgen.crd_documents().values()), ids=lambda d: d["metadata"]["name"])
def test_versions_and_conversion(document: dict[str, Any]) -> None:
    spec = document["spec"]
    assert {(v["name"], v["served"], v["storage"]) for v in spec["versions"]} == {
        ("v1beta2", True, True),
        ("v1beta1", True, False),
    }
    assert _version(document, "v1beta1")["deprecated"] is True
    kind = spec["names"]["kind"]
    if kind in CONVERTERS:
        conversion = spec["conversion"]
        assert conversion["strategy"] == "Webhook"
        assert conversion["webhook"]["conversionReviewVersions"] == ["v1"]
        assert conversion["webhook"]["clientConfig"]["service"]["path"] == crdgen.CONVERSION_PATH
    else:
        # Same schema in both versions: the API server only rewrites apiVersion.
        assert "conversion" not in spec
        assert (
            _version(document, "v1beta1")["schema"] == _version(document, "v1beta2")["schema"]
        ), f"{kind} differs between versions but has no conversion"


def test_upstream_converts_a_subset_of_ours() -> None:
    """Upstream's config/default converts these five; ours also AdmissionCheck and MultiKueueConfig (lossless)."""
    assert {"ClusterQueue", "Cohort", "LocalQueue", "MultiKueueCluster", "Workload"} <= set(CONVERTERS)


def test_v1beta1_printer_columns_follow_renames() -> None:
    crd = crdgen.crd_documents()["kueue.x-k8s.io_clusterqueues.yaml"]
    columns = {c["name"]: c["jsonPath"] for c in _version(crd, "v1beta1")["additionalPrinterColumns"]}
    assert columns["Cohort"] == ".spec.cohort"
