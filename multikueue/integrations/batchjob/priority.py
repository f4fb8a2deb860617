"""Where a Job's Workload gets its priority, in upstream's order (pure).

1. the ``kueue.x-k8s.io/priority-class`` label: a WorkloadPriorityClass;
2. else the pod template's ``priorityClassName``: a pod PriorityClass
   (``scheduling.k8s.io``), as the pods themselves would get it;
3. else the ``globalDefault`` PriorityClass, if the cluster has one;
4. else none (priority 0).

The Workload records its source in ``spec.priorityClassRef`` and the value
in ``spec.priority``. A named class the cache does not know gives no
priority yet (the Workload is created without one, as before a class exists).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from multikueue.api.constants import Labels
from multikueue.api.workload import PriorityClassKind, PriorityClassRef
from multikueue.integrations.batchjob.job import labels_of, section, template_of

__all__ = ["priority_of"]

Lookup = Callable[[str], "int | None"]


def _pod_priority_class_name(job: Mapping[str, Any]) -> str | None:
    name = section(template_of(job), "spec").get("priorityClassName")
    return name if isinstance(name, str) and name else None


def priority_of(
    job: Mapping[str, Any],
    workload_priority_class: Lookup,
    pod_priority_class: Lookup,
    default_pod_priority_class: str | None,
) -> tuple[int | None, PriorityClassRef | None]:
    """The priority value and its source for ``job``'s Workload (``(None, None)``: none)."""
    name = labels_of(job).get(Labels.PRIORITY_CLASS)
    if name:
        value = workload_priority_class(name)
        if value is None:
            return None, None
        return value, PriorityClassRef(group="kueue.x-k8s.io", kind=PriorityClassKind.WORKLOAD_PRIORITY_CLASS, name=name)
    pod_class = _pod_priority_class_name(job) or default_pod_priority_class
    if pod_class:
        value = pod_priority_class(pod_class)
        if value is not None:
            return value, PriorityClassRef(group="scheduling.k8s.io", kind=PriorityClassKind.PRIORITY_CLASS, name=pod_class)
    return None, None
