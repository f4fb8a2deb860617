"""WorkloadPriorityClass: a priority for Workloads that does not affect pod scheduling.

A job names it with the ``kueue.x-k8s.io/priority-class`` label; the
Workload's ``spec.priority`` is its ``value``. Unlike a pod PriorityClass it
only orders and preempts Workloads inside Kueue.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from multikueue.api.meta import KueueObject
from multikueue.api.schema import Int32, Schema

__all__ = ["WorkloadPriorityClass"]


class WorkloadPriorityClass(KueueObject):
    """A named priority value; higher values are admitted first and may preempt lower ones."""

    kind: ClassVar[str] = "WorkloadPriorityClass"
    plural: ClassVar[str] = "workloadpriorityclasses"
    namespaced: ClassVar[bool] = False
    short_names: ClassVar[tuple[str, ...]] = ("wpc",)

    value: Int32
    description: Annotated[str, Schema(max_length=2048)] | None = None
