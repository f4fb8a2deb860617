"""ClusterQueue settings accepted but not acted on: each is named, with what the controller does instead."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.api.clusterqueue import ClusterQueueSpec
from multikueue.core.unimplemented import unimplemented_message, unimplemented_settings

pytestmark = pytest.mark.unit


def spec(**fields: Any) -> ClusterQueueSpec:
    return ClusterQueueSpec.model_validate({"resourceGroups": [], **fields})


def test_the_defaults_and_what_the_controller_does_anyway_are_not_reported() -> None:
    assert unimplemented_settings(spec()) == ()
    assert unimplemented_settings(spec(
        flavorFungibility={"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor",
                           "preference": "BorrowingOverPreemption"},
        admissionScope={"admissionMode": "NoAdmissionFairSharing"},
        preemption={"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any",
                     "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 10}},
    )) == ()  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"flavorFungibility": {"whenCanPreempt": "MayStopSearch"}}, "flavorFungibility.whenCanPreempt=MayStopSearch"),
        (
            {"flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor",
                                   "preference": "PreemptionOverBorrowing"}},
            "flavorFungibility.preference=PreemptionOverBorrowing",
        ),  # fmt: skip
        ({"admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"}}, "admissionScope.admissionMode"),
        ({"concurrentAdmissionPolicy": {"migration": {"mode": "TryPreferredFlavors"}}}, "concurrentAdmissionPolicy"),
    ],
)
def test_each_setting_not_acted_on_is_named_with_what_is_done_instead(fields: dict[str, Any], named: str) -> None:
    [note] = unimplemented_settings(spec(**fields))
    assert note.startswith(f"{named}") and "is not implemented: " in note
    assert unimplemented_message((note,)).endswith(note)


def test_several_are_named_together() -> None:
    notes = unimplemented_settings(spec(
        flavorFungibility={"whenCanPreempt": "MayStopSearch"},
        concurrentAdmissionPolicy={"migration": {"mode": "RetainFirstAdmission"}},
    ))  # fmt: skip
    assert len(notes) == 2
    assert "; ".join(notes) in unimplemented_message(notes)
