"""Pydantic models of Kueue's ``kueue.x-k8s.io/v1beta2`` API.

Importing this package has no side effects: it defines models and constants
only. ``KINDS`` lists the nine top-level kinds in a stable order (the CRD
generator and tests iterate it).
"""

from __future__ import annotations

from multikueue.api.admissioncheck import AdmissionCheck
from multikueue.api.clusterqueue import ClusterQueue
from multikueue.api.cohort import Cohort
from multikueue.api.constants import API_VERSION, GROUP, VERSION
from multikueue.api.localqueue import LocalQueue
from multikueue.api.meta import Condition, KueueObject, ObjectMeta, OwnerReference
from multikueue.api.multikueue import MultiKueueCluster, MultiKueueConfig
from multikueue.api.quantity import Quantity, QuantityValue, format_quantity, parse_quantity
from multikueue.api.resourceflavor import ResourceFlavor
from multikueue.api.workload import Workload
from multikueue.api.workloadpriorityclass import WorkloadPriorityClass

__all__ = [
    "API_VERSION",
    "GROUP",
    "KINDS",
    "VERSION",
    "AdmissionCheck",
    "ClusterQueue",
    "Cohort",
    "Condition",
    "KueueObject",
    "LocalQueue",
    "MultiKueueCluster",
    "MultiKueueConfig",
    "ObjectMeta",
    "OwnerReference",
    "Quantity",
    "QuantityValue",
    "ResourceFlavor",
    "Workload",
    "WorkloadPriorityClass",
    "format_quantity",
    "kind_for",
    "parse_quantity",
]

#: Every top-level kind of the API group.
KINDS: tuple[type[KueueObject], ...] = (
    AdmissionCheck,
    ClusterQueue,
    Cohort,
    LocalQueue,
    MultiKueueCluster,
    MultiKueueConfig,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
)

_BY_KIND: dict[str, type[KueueObject]] = {model.kind: model for model in KINDS}


def kind_for(kind: str) -> type[KueueObject]:
    """The model class of a kind name such as ``"Workload"``; ``KeyError`` if unknown."""
    return _BY_KIND[kind]
