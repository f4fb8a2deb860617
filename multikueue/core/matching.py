"""Label selectors, node affinity and tolerations, as the scheduler reads them.

Three small matchers with Kubernetes' semantics:

- :func:`selector_matches`: a ``metav1.LabelSelector`` (a ClusterQueue's
  ``namespaceSelector``) against a namespace's labels. ``None`` matches
  nothing and ``{}`` matches everything, as upstream Kueue converts a nil
  selector to ``labels.Nothing()``.
- :func:`flavor_matches_pod`: a ResourceFlavor's ``nodeLabels`` against a
  pod's ``nodeSelector`` and required node affinity. Only keys the flavor
  labels are compared, because the flavor says nothing about other labels
  (upstream's ``flavorSelector``): a term left empty by that filter matches
  any flavor.
- :func:`untolerated_taint`: the first NoSchedule/NoExecute taint of a
  flavor that no toleration tolerates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from multikueue.api.core import Taint, Toleration
from multikueue.api.meta import LabelSelector, LabelSelectorRequirement

__all__ = [
    "NodeSelectorTerm",
    "flavor_matches_pod",
    "format_taint",
    "required_affinity_terms",
    "selector_matches",
    "tolerates",
    "untolerated_taint",
]

#: One ``nodeSelectorTerms`` entry reduced to its ``matchExpressions`` dicts.
NodeSelectorTerm = tuple[Mapping[str, Any], ...]


# --- label selectors ---------------------------------------------------------


def _requirement_matches(operator: str, key: str, values: Sequence[str], labels: Mapping[str, str]) -> bool:
    """One selector requirement; unknown operators match nothing (the API server rejects them anyway)."""
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt"):
        # Node selector only: the label and the single value are integers.
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, IndexError, ValueError):
            return False
        return have > want if operator == "Gt" else have < want
    return False


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy ``selector``; ``None`` matches nothing, an empty selector everything."""
    if selector is None:
        return False
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    requirements: Iterable[LabelSelectorRequirement] = selector.match_expressions or ()
    return all(_requirement_matches(r.operator, r.key, r.values or [], labels) for r in requirements)


# --- node affinity -----------------------------------------------------------


def required_affinity_terms(pod_spec: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...]:
    """The ``matchExpressions`` of each required node-affinity term of a ``PodSpec`` dict."""
    affinity = pod_spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms: list[NodeSelectorTerm] = []
    for term in required.get("nodeSelectorTerms") or ():
        expressions = (term or {}).get("matchExpressions") or ()
        terms.append(tuple(e for e in expressions if isinstance(e, Mapping)))
    return tuple(terms)


def flavor_matches_pod(
    node_labels: Mapping[str, str],
    node_selector: Mapping[str, str],
    affinity_terms: Sequence[NodeSelectorTerm],
) -> bool:
    """Whether nodes with ``node_labels`` would satisfy the pod's node selector and required affinity.

    Requirements on keys the flavor does not label are ignored. The terms
    are ORed; one that loses all its expressions to that filter matches.
    """
    for key, value in node_selector.items():
        if key in node_labels and node_labels[key] != value:
            return False
    if not affinity_terms:
        return True
    for term in affinity_terms:
        relevant = [e for e in term if e.get("key") in node_labels]
        if not relevant:
            return True
        if all(
            _requirement_matches(str(e.get("operator", "")), str(e["key"]), list(e.get("values") or ()), node_labels)
            for e in relevant
        ):
            return True
    return False


# --- taints and tolerations ----------------------------------------------------

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """``core/v1`` ``Toleration.ToleratesTaint``: effect, key and (for ``Equal``) value must agree."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    operator = toleration.operator or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.value or "") == (taint.value or "")
    return False


def untolerated_taint(taints: Iterable[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    """The first NoSchedule/NoExecute taint no toleration tolerates, or ``None``."""
    for taint in taints:
        if taint.effect not in _BLOCKING_EFFECTS:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def format_taint(taint: Taint) -> str:
    """A taint as upstream Kueue prints it in messages (Go's ``%s`` of ``corev1.Taint``).

    For example ``{instance spot NoSchedule <nil>}``: key, value, effect and
    the time it was added.
    """
    added = "<nil>" if taint.time_added is None else taint.time_added.strftime("%Y-%m-%d %H:%M:%S +0000 UTC")
    return f"{{{taint.key} {taint.value or ''} {taint.effect} {added}}}"
