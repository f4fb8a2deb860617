"""Workload names must equal upstream Kueue's for the same owner.

The expected values were not produced by the code under test. Upstream's
``getHash`` (pkg/controller/jobframework/workload_names.go) writes into one
SHA-1: kind, "\\n", group, "\\n", owner name, "\\n", owner UID, and keeps the
first 5 hex digits; the prefix ``<lowercase kind>-<name>`` is cut to
253 - 1 - 5 = 247 characters. The digests below were computed in a shell, e.g.

    printf 'Job\\nbatch\\nmy-job\\n0f3a9c2e-7b1d-4c55-9e1a-2d7f6b8c4e10' | sha1sum
    -> b0be6c2be3996526c6ddaff4c1b56e037b2d0250
"""

from __future__ import annotations

import re

import pytest

from multikueue.integrations.batchjob.job import workload_name
from multikueue.integrations.naming import SHORT_MAX_WORKLOAD_NAME_LENGTH, workload_name_for_owner

pytestmark = pytest.mark.unit

UID = "0f3a9c2e-7b1d-4c55-9e1a-2d7f6b8c4e10"


def test_batch_job_name_matches_upstream() -> None:
    assert workload_name_for_owner("my-job", UID, "Job", "batch") == "job-my-job-b0be6"


def test_other_kinds_use_their_lowercase_kind_and_group() -> None:
    # printf 'JobSet\njobset.x-k8s.io\ntrainer\n11111111-2222-3333-4444-555555555555' | sha1sum -> d3099c...
    name = workload_name_for_owner("trainer", "11111111-2222-3333-4444-555555555555", "JobSet", "jobset.x-k8s.io")
    assert name == "jobset-trainer-d3099"


def test_workload_name_of_a_job_dict() -> None:
    job = {"metadata": {"name": "my-job", "uid": UID}}
    assert workload_name(job) == "job-my-job-b0be6"


def test_workload_name_needs_a_uid() -> None:
    with pytest.raises(ValueError, match="uid"):
        workload_name({"metadata": {"name": "my-job"}})


def test_long_name_is_cut_to_253_characters_and_hashes_the_full_name() -> None:
    long_name = "a" * 300
    name = workload_name_for_owner(long_name, "uid-1", "Job", "batch")
    # printf 'Job\nbatch\n<300 x a>\nuid-1' | sha1sum -> 1e11d1...
    assert name == "job-" + "a" * 243 + "-1e11d"
    assert len(name) == 253


def test_names_sharing_a_long_prefix_still_differ() -> None:
    first = workload_name_for_owner("a" * 300, "uid-1", "Job", "batch")
    second = workload_name_for_owner("a" * 301, "uid-1", "Job", "batch")
    # printf 'Job\nbatch\n<301 x a>\nuid-1' | sha1sum -> bb1554...
    assert second == "job-" + "a" * 243 + "-bb155"
    assert first != second


def test_name_at_the_limit_is_not_cut() -> None:
    owner = "b" * (247 - len("job-"))
    name = workload_name_for_owner(owner, "uid", "Job", "batch")
    assert name.startswith("job-" + owner + "-")
    assert len(name) == 253


def test_short_names_fit_a_label_value() -> None:
    name = workload_name_for_owner("a" * 300, "uid-1", "Job", "batch", max_length=SHORT_MAX_WORKLOAD_NAME_LENGTH)
    assert name == "job-" + "a" * 53 + "-1e11d"
    assert len(name) == 63


def test_name_is_a_valid_object_name() -> None:
    name = workload_name_for_owner("my-job.v2", UID, "Job", "batch")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", name)
    assert re.fullmatch(r"[0-9a-f]{5}", name.rsplit("-", 1)[1])
