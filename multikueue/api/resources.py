"""Where each kind the controller touches lives in the API."""

from __future__ import annotations

from dataclasses import dataclass

from multikueue.api import KueueObject
from multikueue.api.constants import GROUP, VERSION

@dataclass(frozen=True)
class ResourceRef:
    """Where a kind lives in the API: group, version, plural, and whether it is namespaced."""

    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def ref_of(model: type[KueueObject]) -> ResourceRef:
    return ResourceRef(GROUP, VERSION, model.plural, model.namespaced)


WORKLOADS = ResourceRef(GROUP, VERSION, "workloads", True)
CLUSTER_QUEUES = ResourceRef(GROUP, VERSION, "clusterqueues", False)
LOCAL_QUEUES = ResourceRef(GROUP, VERSION, "localqueues", True)
RESOURCE_FLAVORS = ResourceRef(GROUP, VERSION, "resourceflavors", False)
ADMISSION_CHECKS = ResourceRef(GROUP, VERSION, "admissionchecks", False)
MULTIKUEUE_CONFIGS = ResourceRef(GROUP, VERSION, "multikueueconfigs", False)
MULTIKUEUE_CLUSTERS = ResourceRef(GROUP, VERSION, "multikueueclusters", False)
JOBS = ResourceRef("batch", "v1", "jobs", True)
NAMESPACES = ResourceRef("", "v1", "namespaces", False)
CONFIG_MAPS = ResourceRef("", "v1", "configmaps", True)
SECRETS = ResourceRef("", "v1", "secrets", True)
EVENTS = ResourceRef("", "v1", "events", True)
LEASES = ResourceRef("coordination.k8s.io", "v1", "leases", True)
