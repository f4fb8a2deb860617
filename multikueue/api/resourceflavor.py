"""ResourceFlavor: a kind of node (hardware, pricing model, zone) quota is counted in.

The scheduler matches a pod set against a flavor's ``node_labels`` and
``node_taints``; once admitted, the flavor's labels and tolerations are
injected into the job's pods so they land on matching nodes.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from multikueue.api.core import TAINT_RULES, Taint, Tolerations
from multikueue.api.meta import KueueModel, KueueObject
from multikueue.api.schema import ObjectName, Rule, Schema

__all__ = ["ResourceFlavor", "ResourceFlavorSpec"]


class ResourceFlavorSpec(KueueModel):
    """Which nodes the flavor stands for."""

    crd_rules = (
        Rule(
            "!has(self.topologyName) || self.nodeLabels.size() >= 1",
            "a flavor with a topologyName needs at least one nodeLabel",
        ),
        Rule(
            "!has(oldSelf.topologyName) || (has(self.topologyName) && self.topologyName == oldSelf.topologyName)",
            "topologyName cannot change or be removed once set",
        ),
    )

    node_labels: Annotated[dict[str, str], Schema(map_type="atomic", max_properties=8)] | None = None
    node_taints: Annotated[list[Taint], Schema(list_type="atomic", max_items=8, rules=TAINT_RULES)] | None = None
    tolerations: Tolerations | None = None
    topology_name: ObjectName | None = None


class ResourceFlavor(KueueObject):
    """A flavor of resources that ClusterQueues give quota in."""

    kind: ClassVar[str] = "ResourceFlavor"
    plural: ClassVar[str] = "resourceflavors"
    namespaced: ClassVar[bool] = False
    short_names: ClassVar[tuple[str, ...]] = ("flavor", "flavors", "rf")

    spec: ResourceFlavorSpec = Field(default_factory=ResourceFlavorSpec)
