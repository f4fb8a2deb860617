"""Workload names derived from the job that owns them, exactly as upstream Kueue derives them.

Upstream (``jobframework.GetWorkloadNameForOwnerWithGVK``) names the Workload
of a job ``<lowercase kind>-<owner name>-<hash>``: the prefix is cut so the
whole name fits in a CRD object name, and the hash is the first five hex
digits of a SHA-1 over the owner's kind, group, name and UID joined by
newlines. Using the same scheme means a Job handled by this project and by
upstream Kueue gets the same Workload name, so tools, docs and workers that
look a Workload up by name keep working.
"""

from __future__ import annotations

import hashlib

__all__ = [
    "HASH_LENGTH",
    "MAX_WORKLOAD_NAME_LENGTH",
    "SHORT_MAX_WORKLOAD_NAME_LENGTH",
    "workload_name_for_owner",
]

#: Hex digits of the SHA-1 kept at the end of the name.
HASH_LENGTH = 5
#: Longest name of a CRD object (a DNS-1123 subdomain); upstream's default limit.
MAX_WORKLOAD_NAME_LENGTH = 253
#: Upstream's limit when its ``ShortWorkloadNames`` feature gate is on (alpha, off
#: by default): a label value must fit 63 characters, and Workload names end up in labels.
SHORT_MAX_WORKLOAD_NAME_LENGTH = 63


def _owner_hash(owner_name: str, owner_uid: str, kind: str, group: str) -> str:
    """SHA-1 hex over ``kind \\n group \\n name \\n uid``, the fields and order upstream hashes."""
    digest = hashlib.sha1(usedforsecurity=False)
    digest.update("\n".join((kind, group, owner_name, owner_uid)).encode())
    return digest.hexdigest()


def workload_name_for_owner(
    owner_name: str,
    owner_uid: str,
    kind: str,
    group: str,
    *,
    max_length: int = MAX_WORKLOAD_NAME_LENGTH,
) -> str:
    """The name upstream Kueue gives the Workload of this owner.

    ``kind`` is the owner's kind as written in its GVK (``"Job"``) and
    ``group`` its API group (``"batch"`` for ``batch/v1``; ``""`` for core).
    The prefix ``<lowercase kind>-<owner name>`` is cut to ``max_length - 6``
    characters (room for ``-`` and the hash); the hash is always computed over
    the full, uncut owner name, so two long names sharing a prefix still get
    different Workloads. Pass ``max_length=SHORT_MAX_WORKLOAD_NAME_LENGTH`` to
    match an upstream Kueue running with ``ShortWorkloadNames``.
    """
    max_prefix = max_length - 1 - HASH_LENGTH
    prefix = f"{kind.lower()}-{owner_name}"[:max_prefix]
    return f"{prefix}-{_owner_hash(owner_name, owner_uid, kind, group)[:HASH_LENGTH]}"
