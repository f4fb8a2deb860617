"""The few ``core/v1`` types the Kueue API embeds field by field.

Flavor assignment compares a ResourceFlavor's taints with a pod set's
tolerations, so these are typed models rather than opaque dicts. Large core
types (pod templates, affinity) stay opaque ``dict[str, Any]`` in the
models that embed them.
"""

from __future__ import annotations

from typing import Annotated

from multikueue.api.meta import KueueModel, Time
from multikueue.api.schema import Int64, Rule, Schema

__all__ = ["TAINT_RULES", "TOLERATION_RULES", "Taint", "Toleration", "Tolerations"]

_EFFECTS = "['NoSchedule', 'PreferNoSchedule', 'NoExecute']"


class Taint(KueueModel):
    """A node taint that every node of a ResourceFlavor carries."""

    key: str
    effect: str
    value: str | None = None
    time_added: Time | None = None


class Toleration(KueueModel):
    """A pod toleration (``core/v1`` Toleration)."""

    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: Int64 | None = None


#: Checks the API server applies to a list of taints.
TAINT_RULES: tuple[Rule, ...] = (
    Rule(f"self.all(t, t.effect in {_EFFECTS})", f"taint effect must be one of {_EFFECTS}"),
)

#: Checks the API server applies to a list of tolerations (what ``core/v1`` validates for pods).
TOLERATION_RULES: tuple[Rule, ...] = (
    Rule(
        "self.all(t, !has(t.key) ? t.operator == 'Exists' : true)",
        "a toleration without a key must use operator Exists",
    ),
    Rule(
        "self.all(t, has(t.tolerationSeconds) ? t.effect == 'NoExecute' : true)",
        "tolerationSeconds needs effect NoExecute",
    ),
    Rule(
        "self.all(t, !has(t.operator) || t.operator in ['Equal', 'Exists'])",
        "toleration operator must be Equal or Exists",
    ),
    Rule(
        "self.all(t, has(t.operator) && t.operator == 'Exists' ? !has(t.value) : true)",
        "a toleration with operator Exists must not have a value",
    ),
    Rule(
        f"self.all(t, !has(t.effect) || t.effect in {_EFFECTS})",
        f"toleration effect must be one of {_EFFECTS}",
    ),
)

#: Up to 8 tolerations, replaced as a whole.
Tolerations = Annotated[list[Toleration], Schema(list_type="atomic", max_items=8, rules=TOLERATION_RULES)]
