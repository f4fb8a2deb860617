"""``multikueue status``: one-line causes of failed calls, and waiting out 429s."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException
from urllib3.exceptions import MaxRetryError, NewConnectionError, ReadTimeoutError

from multikueue.status import calls
from multikueue.status.errors import describe

pytestmark = pytest.mark.unit


def _refused() -> NewConnectionError:
    try:
        raise ConnectionRefusedError(111, "Connection refused")
    except ConnectionRefusedError as cause:
        try:
            raise NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused") from cause  # type: ignore[arg-type]
        except NewConnectionError as exc:
            return exc


def test_connection_refused_is_not_mistaken_for_a_timeout() -> None:
    # urllib3's NewConnectionError derives from ConnectTimeoutError.
    assert describe(_refused()) == "connection refused"
    assert describe(MaxRetryError(None, "/api", reason=_refused())) == "connection refused"  # type: ignore[arg-type]


def test_timeouts_and_tls_failures() -> None:
    assert describe(ReadTimeoutError(None, "/api", "Read timed out.")) == "timed out"  # type: ignore[arg-type]
    error = ssl.SSLCertVerificationError(1, "certificate verify failed")
    error.verify_message = "self-signed certificate"
    assert describe(error) == "TLS verification failed (self-signed certificate)"


def test_api_errors_keep_status_and_reason() -> None:
    assert describe(ApiException(status=403, reason="Forbidden")) == "403 Forbidden"
    # The client reports TLS failures as status 0 with the text as the reason.
    assert describe(ApiException(status=0, reason="SSLError\nmore")) == "SSLError"


def test_call_waits_out_429_then_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls.time, "sleep", lambda _: None)
    answers: list[object] = [ApiException(status=429, reason="Too Many Requests"), "ok"]

    def flaky() -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert calls.call(flaky) == "ok"
    attempts = []

    def always_busy() -> None:
        attempts.append(1)
        raise ApiException(status=429, reason="Too Many Requests")

    with pytest.raises(ApiException):
        calls.call(always_busy)
    assert len(attempts) == calls.ATTEMPTS

    def forbidden() -> None:
        attempts.append(1)
        raise ApiException(status=403, reason="Forbidden")

    attempts.clear()
    with pytest.raises(ApiException):
        calls.call(forbidden)
    assert len(attempts) == 1


def test_the_cli_names_itself_to_the_api_server(tmp_path: Path) -> None:
    """The status CLI's clients send our User-Agent, as the controller's do, so an audit log tells them apart."""
    from multikueue import USER_AGENT
    from multikueue.status.manager import load_client

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    api = load_client(str(kubeconfig))
    assert api.user_agent == USER_AGENT
