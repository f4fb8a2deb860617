"""Cohort: a group of ClusterQueues (and child cohorts) that lend quota to each other.

ClusterQueues join a cohort by naming it in ``spec.cohortName``; a Cohort
object is only needed to give the cohort quota of its own, a parent cohort,
or a fair-sharing weight.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from multikueue.api.meta import KueueModel, KueueObject
from multikueue.api.quota import FairSharing, FairSharingStatus, ResourceGroups
from multikueue.api.schema import ObjectName

__all__ = ["Cohort", "CohortSpec", "CohortStatus"]


class CohortSpec(KueueModel):
    """The cohort's parent, its own quota and its fair-sharing weight."""

    parent_name: ObjectName | None = None
    resource_groups: ResourceGroups | None = None
    fair_sharing: FairSharing | None = None


class CohortStatus(KueueModel):
    """Fair-sharing state of the cohort."""

    fair_sharing: FairSharingStatus | None = None


class Cohort(KueueObject):
    """A node in the tree of cohorts that share quota."""

    kind: ClassVar[str] = "Cohort"
    plural: ClassVar[str] = "cohorts"
    namespaced: ClassVar[bool] = False
    short_names: ClassVar[tuple[str, ...]] = ("co",)

    spec: CohortSpec = Field(default_factory=CohortSpec)
    status: CohortStatus = Field(default_factory=CohortStatus)
