"""API calls that wait out an apiserver's "try again shortly" (429 with Retry-After).

An apiserver answers 429 while a resource's storage is (re)initializing,
e.g. just after it started or after a CRD was installed, and under load
shedding (API Priority and Fairness). client-go retries these on its own;
the Python client does not, so the status command would otherwise report a
healthy cluster as broken. Waits are short and few: the command must stay
quick, and a cluster that keeps saying 429 is reported as such.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes.client.rest import ApiException

__all__ = ["ATTEMPTS", "MAX_WAIT", "call"]

T = TypeVar("T")

#: Tries per call, the first included.
ATTEMPTS = 4
#: Longest wait between tries, in seconds, whatever Retry-After says.
MAX_WAIT = 1.0


def _retry_after(exc: ApiException) -> float:
    header = (exc.headers or {}).get("Retry-After") if exc.headers else None
    try:
        return min(MAX_WAIT, max(0.1, float(header))) if header else 0.5
    except ValueError:
        return 0.5


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, tried again after a 429 up to :data:`ATTEMPTS` times."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            if exc.status != 429 or attempt == ATTEMPTS:
                raise
            time.sleep(_retry_after(exc))
    raise AssertionError("unreachable")
