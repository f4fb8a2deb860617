"""MultiKueueConfig and MultiKueueCluster: the workers a manager dispatches to.

A MultiKueueCluster says how to reach one worker (a kubeconfig in a Secret
or a file, or a ClusterProfile); its ``Active`` condition is the connection
state. A MultiKueueConfig lists the clusters one MultiKueue AdmissionCheck
dispatches to.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import Field

from multikueue.api.meta import Conditions, KueueModel, KueueObject
from multikueue.api.schema import Rule, Schema

__all__ = [
    "ClusterProfileReference",
    "ClusterSource",
    "KubeConfig",
    "LocationType",
    "MultiKueueCluster",
    "MultiKueueClusterSpec",
    "MultiKueueClusterStatus",
    "MultiKueueConfig",
    "MultiKueueConfigSpec",
    "QuotaManagement",
]


class LocationType(StrEnum):
    """Where a worker's kubeconfig is kept."""

    #: A Secret in the controller's namespace, key ``kubeconfig``.
    SECRET = "Secret"
    #: A file on the controller's disk.
    PATH = "Path"


class QuotaManagement(StrEnum):
    """Who keeps the manager's quota in line with the workers' (upstream feature)."""

    MANUAL = "Manual"
    AUTOMATED = "Automated"


class KubeConfig(KueueModel):
    """Where to read the kubeconfig for a worker."""

    location: Annotated[str, Schema(min_length=1, max_length=256)]
    location_type: LocationType = LocationType.SECRET


class ClusterProfileReference(KueueModel):
    """A ClusterProfile (multicluster inventory API) describing how to reach the worker."""

    name: Annotated[str, Schema(min_length=1, max_length=256)]


class ClusterSource(KueueModel):
    """How to connect to the worker: exactly one of the two sources."""

    crd_rules = (
        Rule(
            "[has(self.kubeConfig), has(self.clusterProfileRef)].filter(x, x).size() == 1",
            "set exactly one of kubeConfig and clusterProfileRef",
        ),
    )

    kube_config: KubeConfig | None = None
    cluster_profile_ref: ClusterProfileReference | None = None


class MultiKueueClusterSpec(KueueModel):
    """Connection details of one worker."""

    cluster_source: ClusterSource


class MultiKueueClusterStatus(KueueModel):
    """Connection state, as condition ``Active``."""

    conditions: Conditions | None = None


class MultiKueueCluster(KueueObject):
    """One worker cluster the manager can dispatch Workloads to."""

    kind: ClassVar[str] = "MultiKueueCluster"
    plural: ClassVar[str] = "multikueueclusters"
    namespaced: ClassVar[bool] = False
    short_names: ClassVar[tuple[str, ...]] = ("mkc",)

    spec: Annotated[MultiKueueClusterSpec, Schema(required=False)]
    status: MultiKueueClusterStatus = Field(default_factory=MultiKueueClusterStatus)


class MultiKueueConfigSpec(KueueModel):
    """The workers one MultiKueue AdmissionCheck dispatches to."""

    clusters: Annotated[
        list[Annotated[str, Schema(max_length=256)]],
        Schema(
            list_type="atomic",
            min_items=1,
            max_items=20,
            rules=(
                Rule(
                    "size(self.filter(c, size(self.filter(d, d == c)) > 1)) == 0",
                    "each cluster may be listed only once",
                ),
            ),
        ),
    ]
    quota_management: QuotaManagement | None = None


class MultiKueueConfig(KueueObject):
    """A named list of MultiKueueClusters, referenced by an AdmissionCheck's parameters."""

    kind: ClassVar[str] = "MultiKueueConfig"
    plural: ClassVar[str] = "multikueueconfigs"
    namespaced: ClassVar[bool] = False
    short_names: ClassVar[tuple[str, ...]] = ("mkconf",)

    spec: Annotated[MultiKueueConfigSpec, Schema(required=False)]
