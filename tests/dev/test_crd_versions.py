"""The CRDs a benchmark installs: conversion ``None``, as upstream's CRD bases, since no webhook runs there."""

from __future__ import annotations

import pytest

from multikueue.dev import wiring

pytestmark = pytest.mark.unit


def test_conversion_is_off_and_everything_else_kept() -> None:
    crds = wiring.project_crds()
    converted = [crd for crd in crds if (crd["spec"].get("conversion") or {}).get("strategy") == "Webhook"]
    assert converted, "no CRD names a conversion webhook: nothing to check"
    for crd in converted:
        plain = wiring.without_conversion_webhook(crd)
        assert plain["spec"]["conversion"] == {"strategy": "None"}
        assert {k: v for k, v in plain["spec"].items() if k != "conversion"} == {
            k: v for k, v in crd["spec"].items() if k != "conversion"
        }
        assert crd["spec"]["conversion"]["strategy"] == "Webhook", "the CRD given was changed"
