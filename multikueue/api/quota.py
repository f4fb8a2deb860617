"""Quota declarations shared by ClusterQueue and Cohort.

Both kinds declare quota the same way: resource groups, each a set of
covered resources and an ordered list of flavors with a quota per resource.
The order of flavors is the order the scheduler tries them in.
"""

from __future__ import annotations

from typing import Annotated

from multikueue.api.meta import KueueModel
from multikueue.api.quantity import Quantity, QuantityValue
from multikueue.api.schema import Int64, ObjectName, Rule, Schema

__all__ = [
    "FairSharing",
    "FairSharingStatus",
    "FlavorQuotas",
    "ResourceGroup",
    "ResourceGroups",
    "ResourceQuota",
]


class ResourceQuota(KueueModel):
    """Quota of one resource in one flavor.

    ``borrowing_limit``/``lending_limit`` of ``None`` mean "no limit".
    """

    name: str
    nominal_quota: Quantity
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotas(KueueModel):
    """The quotas one ResourceFlavor provides to the group's covered resources."""

    name: ObjectName
    resources: Annotated[
        list[ResourceQuota],
        Schema(list_type="map", list_map_keys=("name",), min_items=1, max_items=64),
    ]


class ResourceGroup(KueueModel):
    """Resources that are always assigned the same flavor together (e.g. cpu and memory)."""

    crd_rules = (
        Rule(
            "self.flavors.all(f, size(f.resources) == size(self.coveredResources))",
            "every flavor must list exactly the group's coveredResources",
        ),
    )

    covered_resources: Annotated[list[str], Schema(list_type="atomic", min_items=1, max_items=64)]
    flavors: Annotated[
        list[FlavorQuotas],
        Schema(list_type="map", list_map_keys=("name",), min_items=1, max_items=64),
    ]


#: Up to 16 resource groups, replaced as a whole.
ResourceGroups = Annotated[list[ResourceGroup], Schema(list_type="atomic", max_items=16)]


class FairSharing(KueueModel):
    """Weight of a queue or cohort when fair sharing divides unused quota."""

    weight: Quantity = QuantityValue(1)


class FairSharingStatus(KueueModel):
    """How much of its fair share a queue or cohort uses (scaled by 1000)."""

    weighted_share: Int64
