"""A thin asyncio face over the blocking ``kubernetes`` client.

The controller is asyncio all the way (kopf), while the official client is
synchronous; every call therefore runs in a dedicated thread pool so that a
slow request never blocks the event loop. Only the handful of verbs the
controller needs are here, each returning plain JSON dicts.
"""

from __future__ import annotations

import asyncio
import functools
import json
from urllib.parse import urlencode
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

import orjson
from kubernetes import client, config
from kubernetes.client.rest import ApiException, RESTResponse
from urllib3 import Timeout

from multikueue.api.resources import ResourceRef

T = TypeVar("T")

#: Seconds for one request (connect, read); a hung connection must not hold a write slot forever.
REQUEST_TIMEOUT = (5, 30)
_TIMEOUT = Timeout(connect=REQUEST_TIMEOUT[0], read=REQUEST_TIMEOUT[1])
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
    return client.ApiClient(configuration)


class AsyncKube:
    """Async calls on one cluster, through a bounded thread pool."""

    def __init__(self, api: client.ApiClient, workers: int = 32) -> None:
        self.api = api
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube")

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()

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

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str | None = None,
        query: list[tuple[str, str]] | None = None,
        decode: Callable[[bytes], Any] = decode_json,
    ) -> Any:
        """One request through the client's auth and connection pool; JSON in, JSON out (read by ``decode``).

        Straight to the client's urllib3 pool, with the client's own headers
        and auth (a refreshed token included): its generic path walks the
        body to sanitise it and serialises it again with ``json``, a fifth
        of this thread's time under load for bodies that are plain JSON.
        """
        headers = {**self.api.default_headers, "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        self.api.update_params_for_auth(headers, None, ["BearerToken"], path, method, None)
        url = self.api.configuration.host + path
        if query:
            url += "?" + urlencode(query)
        raw = self.api.rest_client.pool_manager.request(
            method, url, body=None if body is None else self._encode(body), headers=headers, timeout=_TIMEOUT, preload_content=True
        )
        response = RESTResponse(raw)
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=response)
        return decode(response.data) if response.data else None

    def _encode(self, body: Any) -> bytes:
        try:
            return orjson.dumps(body)
        except TypeError:  # orjson.JSONEncodeError: a type it does not write (non-string keys...): the client's way
            return json.dumps(self.api.sanitize_for_serialization(body)).encode()

    async def discover(self, group: str, version: str) -> dict[str, Any]:
        """The API server's resource list for ``group/version`` (discovery); 404 when not served."""
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        return await self.call(self._request, "GET", path)  # type: ignore[no-any-return]

    async def list_all(
        self,
        ref: ResourceRef,
        label_selector: str = "",
        *,
        decode: Callable[[bytes], Any] = decode_json,
        namespace: str | None = None,
        field_selector: str = "",
    ) -> dict[str, Any]:
        """The list response for ``ref`` across all namespaces (or in ``namespace``), ``metadata.resourceVersion`` included.

        ``decode`` parses the body (the informer's parser copes with any nesting depth).
        """
        query = _selectors(label_selector, field_selector)
        path = self._path(ResourceRef(ref.group, ref.version, ref.plural, namespace is not None), namespace)
        return await self.call(self._request, "GET", path, None, None, query, decode)  # type: ignore[no-any-return]

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
        return await self.call(self._request, "GET", self._path(ref, namespace, name))

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
        result = await self.call(self._request, "GET", path, None, None, query)
        return list(result.get("items", []))

    async def create(self, ref: ResourceRef, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        return await self.call(self._request, "POST", self._path(ref, namespace), body)

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
        return await self.call(self._request, "PATCH", path, patch, content_type)

    async def delete(self, ref: ResourceRef, namespace: str | None, name: str, propagation: str = "Background") -> bool:
        """Delete; False when it was already gone."""
        try:
            await self.call(
                self._request,
                "DELETE",
                self._path(ref, namespace, name),
                {"propagationPolicy": propagation},
                "application/json",
            )
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    # -- core ------------------------------------------------------------

    async def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        """Post an Event; the answer is not read (the client's typed call would build a model of it, for nothing)."""
        await self.call(self._request, "POST", f"/api/v1/namespaces/{namespace}/events", body, None, None, _ignore)


def _ignore(_: bytes) -> None:
    return None


def _selectors(label_selector: str, field_selector: str) -> list[tuple[str, str]]:
    """The query parameters of a listing's or watch's selectors."""
    query = [("labelSelector", label_selector)] if label_selector else []
    return query + ([("fieldSelector", field_selector)] if field_selector else [])
