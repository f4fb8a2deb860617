"""Garbage collection of remote objects whose local Workload is gone.

Deleting a Job on the manager deletes its Workload, and the dispatcher then
deletes the remote copies. If a worker was unreachable at that moment, or the
manager restarted in between, the copies stay behind: the periodic GC finds
every remote Workload and job carrying this manager's origin label whose
local Workload no longer exists, and deletes them.

:func:`find_orphans` is the pure decision; :class:`GarbageCollector` runs it
periodically over every connected worker and deletes what it found.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from dataclasses import dataclass
from typing import Any

import structlog
from kubernetes.client.rest import ApiException

from multikueue.api.resources import WORKLOADS
from multikueue.controllers.multikueue.clusters import ClusterManager
from multikueue.integrations.binding import bound_workload_name

log = structlog.get_logger(__name__)

ObjectKey = tuple[str, str]


@dataclass(frozen=True)
class Orphans:
    workloads: list[ObjectKey]
    #: (plural of the job kind, namespace, name)
    jobs: list[tuple[str, str, str]]


def find_orphans(
    remote_workloads: Mapping[ObjectKey, object],
    remote_jobs: Iterable[tuple[str, ObjectKey, Mapping[str, Any]]],
    local_exists: Callable[[ObjectKey], bool],
) -> Orphans:
    """Remote objects of this origin whose local Workload does not exist.

    A job belongs to the Workload named by its ``prebuilt-workload-name``
    label or annotation (the Workload has the same namespace and name on
    both sides).
    """
    workloads = sorted(key for key in remote_workloads if not local_exists(key))
    jobs = []
    for plural, (namespace, name), obj in remote_jobs:
        workload = bound_workload_name(obj)
        if workload is None or not local_exists((namespace, workload)):
            jobs.append((plural, namespace, name))
    return Orphans(workloads=workloads, jobs=sorted(jobs))


class GarbageCollector:
    """Deletes this origin's remote objects whose local Workload is gone.

    :meth:`collect` is one pass; the leading replica runs it every
    ``interval`` (``operator/wiring.py``), so a standby never deletes.
    """

    def __init__(self, clusters: ClusterManager, local_exists: Callable[[ObjectKey], bool], *, interval: timedelta) -> None:
        self.clusters = clusters
        self.local_exists = local_exists
        self.interval = interval

    async def collect(self) -> None:
        refs = {r.plural: r for r in self.clusters.job_refs()}
        for remote in list(self.clusters.clusters.values()):
            if not remote.state.active or remote.kube is None:
                continue
            jobs = [(plural, key, obj) for (plural, key), obj in remote.jobs.items()]
            orphans = find_orphans(remote.workloads, jobs, self.local_exists)
            try:
                # Only what is not being deleted already, and a log line only when the delete found something.
                for plural, namespace, name in orphans.jobs:
                    job = remote.jobs.get((plural, (namespace, name))) or {}
                    if plural in refs and not (job.get("metadata") or {}).get("deletionTimestamp"):
                        if await remote.kube.delete(refs[plural], namespace, name):
                            log.info("gc: remote job deleted", cluster=remote.name, job=f"{namespace}/{name}")
                for namespace, name in orphans.workloads:
                    copy = remote.workloads.get((namespace, name))
                    if copy is not None and copy.deleting:
                        continue
                    if await remote.kube.delete(WORKLOADS, namespace, name):
                        log.info("gc: remote workload deleted", cluster=remote.name, workload=f"{namespace}/{name}")
            except ApiException as exc:
                log.warning("gc pass incomplete", cluster=remote.name, status=exc.status, error=exc.reason)
            except Exception as exc:  # noqa: BLE001 - the worker may vanish mid-pass; the next pass retries
                log.warning("gc pass incomplete", cluster=remote.name, error=str(exc)[:200])
