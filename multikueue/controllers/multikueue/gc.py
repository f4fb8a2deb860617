"""Garbage collection of remote objects whose local Workload is gone (pure).

Deleting a Job on the manager deletes its Workload, and the dispatcher then
deletes the remote copies. If a worker was unreachable at that moment, or the
manager restarted in between, the copies stay behind: the periodic GC finds
every remote Workload and job carrying this manager's origin label whose
local Workload no longer exists, and deletes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from multikueue.api import Workload
from multikueue.api.constants import Labels

ObjectKey = tuple[str, str]


@dataclass(frozen=True)
class Orphans:
    workloads: list[ObjectKey]
    #: (plural of the job kind, namespace, name)
    jobs: list[tuple[str, str, str]]


def find_orphans(
    remote_workloads: Mapping[ObjectKey, Workload],
    remote_jobs: Iterable[tuple[str, ObjectKey, Mapping[str, Any]]],
    local_exists: Callable[[ObjectKey], bool],
) -> Orphans:
    """Remote objects of this origin whose local Workload does not exist.

    A job belongs to the Workload named by its ``prebuilt-workload-name``
    label (the Workload has the same namespace and name on both sides).
    """
    workloads = sorted(key for key in remote_workloads if not local_exists(key))
    jobs = []
    for plural, (namespace, name), obj in remote_jobs:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        workload = labels.get(Labels.PREBUILT_WORKLOAD_NAME)
        if workload is None or not local_exists((namespace, workload)):
            jobs.append((plural, namespace, name))
    return Orphans(workloads=workloads, jobs=sorted(jobs))
