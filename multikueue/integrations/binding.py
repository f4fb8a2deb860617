"""How an object names the prebuilt Workload it is bound to (shared by every kind).

A job copied to a worker runs under the Workload the manager copied there
(its *prebuilt* Workload). The name travels in the label
``kueue.x-k8s.io/prebuilt-workload-name`` when it can be a label value (63
characters at most), else in the annotation of the same key, as upstream
writes it. Every reader (the worker's integrations, the manager's remote
watches, the garbage collector) must read both: a reader that looked at the
label only would take a copy bound by annotation for an orphan.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from typing import Any

from multikueue.api.constants import Labels

#: The annotation carrying the name when it cannot be a label value (same key as the label).
PREBUILT_WORKLOAD_ANNOTATION = Labels.PREBUILT_WORKLOAD_NAME
_LABEL_VALUE_MAX_LENGTH = 63
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def is_label_value(value: str) -> bool:
    """Whether ``value`` may be a label value (63 characters at most, alphanumeric ends)."""
    return len(value) <= _LABEL_VALUE_MAX_LENGTH and _LABEL_VALUE.match(value) is not None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def bound_workload_name(obj: Mapping[str, Any]) -> str | None:
    """The prebuilt Workload ``obj`` is bound to (label first, then annotation), or None."""
    meta = _mapping(obj.get("metadata"))
    name = _mapping(meta.get("labels")).get(Labels.PREBUILT_WORKLOAD_NAME) or _mapping(
        meta.get("annotations")
    ).get(PREBUILT_WORKLOAD_ANNOTATION)
    return str(name) if name else None


def bind(labels: MutableMapping[str, str], annotations: MutableMapping[str, str], workload_name: str) -> None:
    """Record ``workload_name`` in ``labels`` when it fits a label value, else in ``annotations``."""
    if is_label_value(workload_name):
        labels[Labels.PREBUILT_WORKLOAD_NAME] = workload_name
    else:
        labels.pop(Labels.PREBUILT_WORKLOAD_NAME, None)
        annotations[PREBUILT_WORKLOAD_ANNOTATION] = workload_name
