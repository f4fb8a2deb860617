"""The CRDs a benchmark installs: their storage version only, with no conversion webhook."""

from __future__ import annotations

import pytest

from multikueue.dev import wiring

pytestmark = pytest.mark.unit


def test_only_the_storage_version_is_kept_and_conversion_is_off() -> None:
    crds = wiring.project_crds()
    converted = [crd for crd in crds if len(crd["spec"]["versions"]) > 1]
    assert converted, "no CRD serves two versions: nothing to check"
    for crd in converted:
        slim = wiring.storage_version_only(crd)
        assert [v["name"] for v in slim["spec"]["versions"]] == [v["name"] for v in crd["spec"]["versions"] if v.get("storage")]
        assert slim["spec"]["conversion"] == {"strategy": "None"}
        assert {k: v for k, v in slim["spec"].items() if k not in ("versions", "conversion")} == {
            k: v for k, v in crd["spec"].items() if k not in ("versions", "conversion")
        }
        assert len(crd["spec"]["versions"]) > 1, "the CRD given was changed"
