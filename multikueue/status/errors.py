"""Short descriptions of why an API call failed, for one-line messages.

The ``kubernetes`` client surfaces network failures as urllib3 exceptions
whose text runs to several hundred characters (object reprs, retry
bookkeeping). The status command puts the cause in a table cell or a single
stderr line, so it wants "connection refused", not the repr of a pool.
"""

from __future__ import annotations

import ssl

from kubernetes.client.rest import ApiException
from urllib3.exceptions import ConnectTimeoutError, ReadTimeoutError

__all__ = ["api_status", "describe"]


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what caused it, outermost first (urllib3 keeps the cause in ``reason`` too)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        reason = getattr(current, "reason", None)
        current = reason if isinstance(reason, BaseException) else current.__cause__ or current.__context__
    return seen


def api_status(exc: ApiException) -> str:
    """``403 Forbidden``: the HTTP status and its reason phrase.

    The client reports TLS failures as status 0 with the error text as the
    reason; that text is what explains them.
    """
    if not exc.status:
        text = str(exc.reason or "no answer").strip().splitlines()
        return (text[0] if text else "no answer")[:200]
    return f"{exc.status} {exc.reason}".strip()


def describe(exc: BaseException) -> str:
    """A few words on why a request failed: ``connection refused``, ``timed out``, ``403 Forbidden``..."""
    if isinstance(exc, ApiException):
        return api_status(exc)
    chain = _chain(exc)
    for item in chain:
        if isinstance(item, ssl.SSLCertVerificationError):
            return f"TLS verification failed ({item.verify_message})"
        if isinstance(item, ssl.SSLError):
            return f"TLS error ({item.reason or item})"
    for item in reversed(chain):
        if isinstance(item, OSError) and item.strerror:
            return item.strerror[0].lower() + item.strerror[1:]
    # urllib3's NewConnectionError derives from ConnectTimeoutError: the OSError above comes first.
    if any(isinstance(item, ConnectTimeoutError | ReadTimeoutError | TimeoutError) for item in chain):
        return "timed out"
    text = str(chain[-1]).strip().splitlines()
    return (text[0] if text else type(chain[-1]).__name__)[:200]
