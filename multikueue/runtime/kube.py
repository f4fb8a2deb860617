"""The controller's asyncio client: the handful of verbs it needs, each returning plain JSON dicts.

The official ``kubernetes`` client is synchronous. Its configuration (the
kubeconfig's or the service account's server, CA, client certificate and
token, refreshed by its hooks) stays the source of truth, but the verbs go
through aiohttp on the event loop: a request through the client's urllib3
pool and a thread hand-off cost about 0.8 ms of CPU, through aiohttp about
0.3 ms, and the controller makes tens of thousands (issue 16; the figures
are in ``docs/decisions.md``). What aiohttp does not serve here (a proxy
from the kubeconfig) keeps the urllib3 path in a bounded thread pool, as do
watches (read line by line in a thread by the informer) and ``call``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import ssl
from collections.abc import AsyncGenerator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar
from urllib.parse import urlencode

import aiohttp
import certifi
import orjson
from kubernetes import client, config
from kubernetes.client.rest import ApiException, RESTResponse
from urllib3 import Retry, Timeout
from urllib3.exceptions import HTTPError

from multikueue import USER_AGENT
from multikueue.api.resources import ResourceRef

T = TypeVar("T")

#: Seconds for one request (connect, read); a hung connection must not hold a write slot forever.
REQUEST_TIMEOUT = (5, 30)
_TIMEOUT = Timeout(connect=REQUEST_TIMEOUT[0], read=REQUEST_TIMEOUT[1])
_AIO_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=REQUEST_TIMEOUT[0], sock_read=REQUEST_TIMEOUT[1])
#: The longest ``Retry-After`` honoured; a longer one is waited as this long.
MAX_RETRY_AFTER = 10.0
#: Objects per page of a listing: client-go's reflector pages by 500 too.
LIST_PAGE_SIZE = 500
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def decode_json(data: str | bytes) -> Any:
    """Parse JSON with orjson (several times faster: every watch event and write answer goes through here).

    What orjson refuses but ``json`` reads (integers beyond 64 bits, nesting
    deeper than 1,024 levels, in kinds that keep unknown fields) goes to
    ``json``, which raises as before for what is not JSON.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def load_api_client(kubeconfig: str | None, pool_size: int) -> client.ApiClient:
    """An API client from a kubeconfig file, or the in-cluster service account."""
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    api = client.ApiClient(configuration)
    api.user_agent = USER_AGENT
    return api


class TransportError(OSError):
    """No HTTP answer: the API server could not be reached, or the connection broke or timed out.

    An ``OSError``, as a refused connection is: callers that tell an
    unreachable server from an answer catch ``OSError`` (and ``ApiException``
    for answers).
    """


@dataclass(frozen=True)
class _Call:
    """One request: verb, path, JSON body, and how to read the answer."""

    method: str
    path: str
    body: Any = None
    content_type: str | None = None
    query: list[tuple[str, str]] | None = None
    decode: Callable[[bytes], Any] = decode_json

    def url(self, host: str) -> str:
        return host + self.path + ("?" + urlencode(self.query) if self.query else "")


@dataclass(frozen=True)
class _Answer:
    """What ``ApiException`` reads of an HTTP response (status, reason, body, headers)."""

    status: int
    reason: str | None
    data: bytes
    headers: Mapping[str, str]


def ssl_context(configuration: client.Configuration) -> ssl.SSLContext:
    """The TLS settings the client's urllib3 pool would use, as an ``SSLContext`` for aiohttp.

    Server verification against the configured CA (a file or PEM data;
    certifi's bundle when neither is given, as the client does), the client
    certificate if any, and ``assert_hostname: false`` / ``verify_ssl:
    false`` honoured. ``tls_server_name`` is given per request.
    """
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None, cadata=configuration.ca_cert_data or None)
    if not configuration.ssl_ca_cert and not configuration.ca_cert_data:
        context.load_verify_locations(cafile=certifi.where())
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        context.check_hostname = False
    return context


def retries(configuration: client.Configuration) -> int:
    """How many times a request that was not served is tried again: as the client's urllib3 pool would (3 unless told).

    Not served: no connection was made, or the answer was a 429 or 503 with
    ``Retry-After`` (the API server turned it away before handling it).
    """
    retries = configuration.retries
    if retries is None:
        return Retry.DEFAULT.total or 0
    if retries is False:
        return 0
    if isinstance(retries, Retry):
        return int(retries.connect if retries.connect is not None else retries.total or 0)
    return int(retries)


def retry_after(status: int, headers: Mapping[str, str]) -> float | None:
    """Seconds to wait before sending again, for a 429 or 503 that says when (at most :data:`MAX_RETRY_AFTER`)."""
    if status not in (429, 503):
        return None
    try:
        return min(MAX_RETRY_AFTER, max(0.0, float(headers.get("Retry-After", ""))))
    except ValueError:  # absent, or an HTTP date (the API server sends seconds)
        return None


class AsyncKube:
    """Async calls on one cluster: aiohttp on the event loop, and a bounded thread pool for the blocking client.

    The aiohttp session is made on first use in the running event loop (an
    ``AsyncKube`` may be built before the loop runs) and made again if the
    loop changes; ``workers`` bounds the connections as it bounds the threads.
    """

    def __init__(self, api: client.ApiClient, workers: int = 32) -> None:
        self.api = api
        self._workers = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube")
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        #: A proxy is the urllib3 pool's business (aiohttp does not speak SOCKS, nor the client's no_proxy rules).
        self._threaded = bool(api.configuration.proxy)
        self._retries = retries(api.configuration)

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def close(self) -> None:
        """Close the connections (the aiohttp session first, in its own loop if that is the running one)."""
        session, self._session = self._session, None
        if session is not None and self._session_loop is asyncio.get_running_loop():
            await session.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    def _aio(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session_loop is not loop or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=ssl_context(self.api.configuration), limit=self._workers)
            self._session = aiohttp.ClientSession(connector=connector, timeout=_AIO_TIMEOUT, trust_env=False)
            self._session_loop = loop
        return self._session

    async def _send(self, request: _Call) -> Any:
        """One request, JSON in, JSON out (read by ``request.decode``): ``ApiException`` for an answer
        outside 2xx, ``TransportError`` for no answer."""
        if self._threaded:
            return await self.call(self._request, request)
        method, body = request.method, request.body
        headers = self._headers(request)
        url = request.url(self.api.configuration.host)
        data = None if body is None else self._encode(body)
        attempt = 0
        while True:
            try:
                async with self._aio().request(
                    method, url, data=data, headers=headers, server_hostname=self.api.configuration.tls_server_name or None
                ) as response:
                    payload = await response.read()
                    status, reason, answer_headers = response.status, response.reason, response.headers
            except aiohttp.ClientConnectorError as exc:
                # Not connected, so not sent: tried again as the client's urllib3 pool would.
                attempt += 1
                if attempt > self._retries:
                    raise TransportError(f"{method} {url}: {_describe(exc)}") from exc
                continue
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                raise TransportError(f"{method} {url}: {_describe(exc)}") from exc
            wait = retry_after(status, answer_headers)
            if wait is None or attempt >= self._retries:
                break
            # Turned away unprocessed (API Priority and Fairness, a server starting): as told, then again.
            attempt += 1
            await asyncio.sleep(wait)
        if not 200 <= status <= 299:
            raise ApiException(http_resp=_Answer(status, reason, payload, answer_headers))
        return request.decode(payload) if payload else None

    def _headers(self, request: _Call) -> dict[str, str]:
        """The client's own headers and auth (a refreshed token included)."""
        headers = {**self.api.default_headers, "Accept": "application/json"}
        if request.body is not None:
            headers["Content-Type"] = request.content_type or "application/json"
        self.api.update_params_for_auth(headers, None, ["BearerToken"], request.path, request.method, None)
        return headers

    # -- generic objects (custom resources and built-in kinds alike) --------

    def _path(self, ref: ResourceRef, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{ref.group}/{ref.version}" if ref.group else f"/api/{ref.version}"
        if ref.namespaced:
            base += f"/namespaces/{namespace}"
        base += f"/{ref.plural}"
        if name:
            base += f"/{name}"
        if sub:
            base += f"/{sub}"
        return base

    def _request(self, request: _Call) -> Any:
        """``_send`` through the client's urllib3 pool (blocking: from a thread).

        Straight to the pool, with the client's own headers and auth: its
        generic path walks the body to sanitise it and serialises it again
        with ``json``, a fifth of a thread's time under load for bodies that
        are plain JSON.
        """
        headers = self._headers(request)
        url = request.url(self.api.configuration.host)
        method, body = request.method, request.body
        try:
            raw = self.api.rest_client.pool_manager.request(
                method, url, body=None if body is None else self._encode(body), headers=headers, timeout=_TIMEOUT, preload_content=True
            )
        except HTTPError as exc:
            raise TransportError(f"{method} {url}: {exc}") from exc
        response = RESTResponse(raw)
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=response)
        return request.decode(response.data) if response.data else None

    def _encode(self, body: Any) -> bytes:
        try:
            return orjson.dumps(body)
        except TypeError:  # orjson.JSONEncodeError: a type it does not write (non-string keys...): the client's way
            return json.dumps(self.api.sanitize_for_serialization(body)).encode()

    async def discover(self, group: str, version: str) -> dict[str, Any]:
        """The API server's resource list for ``group/version`` (discovery); 404 when not served."""
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        return await self._send(_Call("GET", path))  # type: ignore[no-any-return]

    async def list_pages(
        self,
        ref: ResourceRef,
        label_selector: str = "",
        *,
        decode: Callable[[bytes], Any] = decode_json,
        namespace: str | None = None,
        field_selector: str = "",
        limit: int = LIST_PAGE_SIZE,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The listing of ``ref`` across all namespaces (or in ``namespace``), as list responses of at most ``limit`` objects.

        The pages (``limit`` and ``continue``) are one snapshot: the last
        one's ``metadata.resourceVersion`` is where a watch starts. In pages
        so that listing many objects never holds the whole answer, raw and
        parsed, at once; an expired ``continue`` token (410) is raised like
        any failed request, and the caller lists again from the start.
        ``decode`` parses each body (the informer's parser copes with any nesting depth).
        """
        query = _selectors(label_selector, field_selector) + [("limit", str(limit))]
        path = self._path(ResourceRef(ref.group, ref.version, ref.plural, namespace is not None), namespace)
        token = ""
        while True:
            page = await self._send(_Call("GET", path, query=query + ([("continue", token)] if token else []), decode=decode))
            token = (page.get("metadata") or {}).get("continue") or ""
            yield page
            if not token:
                return

    def open_watch(
        self,
        ref: ResourceRef,
        *,
        resource_version: str,
        label_selector: str,
        timeout_seconds: int,
        namespace: str | None = None,
        field_selector: str = "",
    ) -> Any:
        """Start a watch of ``ref`` across all namespaces (or in ``namespace``); the raw response to read lines from.

        Blocking: call it from a thread.
        """
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(timeout_seconds))]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        query += _selectors(label_selector, field_selector)
        path = self._path(ResourceRef(ref.group, ref.version, ref.plural, namespace is not None), namespace)
        _, url, headers, _, _ = self.api.param_serialize(
            method="GET", resource_path=path, query_params=query, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
        )
        response = self.api.call_api("GET", url, header_params=headers, _request_timeout=(5, timeout_seconds + 15))
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException(http_resp=response)
        return response.response

    async def get(self, ref: ResourceRef, namespace: str | None, name: str) -> dict[str, Any]:
        return await self._send(_Call("GET", self._path(ref, namespace, name)))

    async def get_or_none(self, ref: ResourceRef, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return await self.get(ref, namespace, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def list(
        self, ref: ResourceRef, namespace: str | None = None, label_selector: str | None = None, field_selector: str = ""
    ) -> list[dict[str, Any]]:
        query = _selectors(label_selector or "", field_selector)
        path = self._path(ResourceRef(ref.group, ref.version, ref.plural, ref.namespaced and namespace is not None), namespace)
        result = await self._send(_Call("GET", path, query=query))
        return list(result.get("items", []))

    async def create(self, ref: ResourceRef, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        return await self._send(_Call("POST", self._path(ref, namespace), body))

    async def patch(
        self,
        ref: ResourceRef,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        status: bool = False,
        content_type: str = MERGE_PATCH,
    ) -> dict[str, Any]:
        path = self._path(ref, namespace, name, "status" if status else None)
        return await self._send(_Call("PATCH", path, patch, content_type))

    async def delete(self, ref: ResourceRef, namespace: str | None, name: str, propagation: str = "Background") -> bool:
        """Delete; False when it was already gone."""
        try:
            await self._send(_Call("DELETE", self._path(ref, namespace, name), {"propagationPolicy": propagation}, "application/json"))
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    # -- core ------------------------------------------------------------

    async def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        """Post an Event; the answer is not read (the client's typed call would build a model of it, for nothing)."""
        await self._send(_Call("POST", f"/api/v1/namespaces/{namespace}/events", body, decode=_ignore))


def _ignore(_: bytes) -> None:
    return None


def _describe(exc: BaseException) -> str:
    """A transport failure in a few words (aiohttp's messages name the SSL context, not the cause)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"TLS certificate not accepted: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        cause = exc.os_error
        return f"cannot connect: {os.strerror(cause.errno) if cause.errno else cause}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    if isinstance(exc, asyncio.TimeoutError):
        return str(exc) or f"no answer within {REQUEST_TIMEOUT[1]}s"
    return str(exc) or type(exc).__name__


def _selectors(label_selector: str, field_selector: str) -> list[tuple[str, str]]:
    """The query parameters of a listing's or watch's selectors."""
    query = [("labelSelector", label_selector)] if label_selector else []
    return query + ([("fieldSelector", field_selector)] if field_selector else [])
