"""The informer against a real kube-apiserver: listing, events, relists, stops, kinds not served yet."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
from kubernetes import client

from multikueue.api.resources import ResourceRef
from multikueue.dev import objects as o
from multikueue.dev import wiring
from multikueue.dev.controllers import free_port
from multikueue.dev.pytest_plugin import Clusters
from multikueue.runtime import informer as informer_module
from multikueue.runtime.informer import ADDED, DELETED, MODIFIED, NOT_USABLE, Informer, InformerState
from multikueue.runtime.kube import AsyncKube

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

CONFIG_MAPS = ResourceRef("", "v1", "configmaps", True)


class Recorder:
    """A handler that remembers (event type, name) and the objects."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.closed = False
        self.after_close: list[tuple[str, str]] = []

    def __call__(self, event_type: str, obj: dict[str, Any]) -> None:
        event = (event_type, obj["metadata"]["name"])
        (self.after_close if self.closed else self.events).append(event)


async def until(predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


@pytest_asyncio.fixture
async def worker(integration_clusters: Clusters) -> AsyncIterator[AsyncKube]:
    kube = AsyncKube(integration_clusters.worker(1), workers=4)
    yield kube
    await kube.close()


@pytest.fixture
def label() -> str:
    """A label value of this test only: the informers select on it, so other tests' objects stay out."""
    return uuid.uuid4().hex[:10]


def config_map(namespace: str, name: str, label: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "labels": {"informer-test": label, **labels}}, "data": {"k": "v"}}


async def create(kube: AsyncKube, namespace: str, name: str, label: str, **labels: str) -> None:
    await kube.create(CONFIG_MAPS, namespace, config_map(namespace, name, label, **labels))


def informer_of(kube: AsyncKube, label: str, handler: Recorder | None = None, **kwargs: Any) -> Informer:
    return Informer(kube, CONFIG_MAPS, handler, label_selector=f"informer-test={label}", cluster="worker1", **kwargs)


async def test_lists_then_delivers_watch_events(worker: AsyncKube, namespace: str, label: str) -> None:
    await create(worker, namespace, "first", label)
    await create(worker, namespace, "second", label)
    await worker.create(CONFIG_MAPS, namespace, {"metadata": {"name": "unlabelled", "namespace": namespace}})
    seen = Recorder()
    informer = informer_of(worker, label, seen)
    informer.start()
    try:
        assert await asyncio.wait_for(informer.wait_settled(), 30) is InformerState.SYNCED
        assert informer.synced.is_set() and informer.last_error is None
        assert sorted(seen.events) == [(ADDED, "first"), (ADDED, "second")]
        assert sorted(informer.store.objects) == [(namespace, "first"), (namespace, "second")]
        await create(worker, namespace, "third", label)
        await worker.patch(CONFIG_MAPS, namespace, "first", {"data": {"k": "changed"}})
        await worker.delete(CONFIG_MAPS, namespace, "second")
        await until(lambda: len(seen.events) >= 5, "three watch events")
        assert seen.events[2:] == [(ADDED, "third"), (MODIFIED, "first"), (DELETED, "second")]
        assert sorted(informer.store.objects) == [(namespace, "first"), (namespace, "third")]
        assert informer.get(namespace, "first")["data"] == {"k": "changed"}  # type: ignore[index]
    finally:
        await informer.stop()


async def test_bookmarks_and_renewed_watches_deliver_nothing(
    worker: AsyncKube, namespace: str, label: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quiet short watches end and are renewed from the last bookmark's version, never relisting."""
    lines: list[str] = []
    streams: list[Any] = []
    original = informer_module.iter_resp_lines

    def spy(response: Any) -> Iterator[str]:
        streams.append(response)
        for line in original(response):
            lines.append(line)
            yield line

    monkeypatch.setattr(informer_module, "iter_resp_lines", spy)
    await create(worker, namespace, "only", label)
    seen = Recorder()
    informer = informer_of(worker, label, seen, watch_seconds=4)
    informer.start()
    try:
        await asyncio.wait_for(informer.synced.wait(), 30)
        # The apiserver sends a bookmark about 2s before a watch's timeout when the version moved on:
        # objects outside the selector move it without sending the informer anything.
        for i in range(40):
            await worker.create(CONFIG_MAPS, namespace, {"metadata": {"name": f"other-{i}", "namespace": namespace}})
            if len(streams) >= 3:
                break
            await asyncio.sleep(0.5)
        assert len(streams) >= 3, "the 4s watch was not renewed twice"
        assert any('"BOOKMARK"' in line for line in lines), "no bookmark over two renewed watches"
        assert seen.events == [(ADDED, "only")], "a bookmark or a renewal reached the handler (or caused a relist)"
        assert informer.state is InformerState.SYNCED
        await create(worker, namespace, "later", label)
        await until(lambda: seen.events[-1] == (ADDED, "later"), "an event on the renewed watch")
    finally:
        await informer.stop()


@pytest.mark.parametrize("page_size", [500, 1], ids=["one-page", "a-page-per-object"])
async def test_410_gone_relists_and_hands_over_what_was_missed(
    worker: AsyncKube, namespace: str, label: str, monkeypatch: pytest.MonkeyPatch, page_size: int
) -> None:
    """A watch ended by an ``ERROR`` event with code 410 (expired version) relists at once.

    The apiserver's watch cache keeps every event of the last 75s, so a real expiry cannot be
    provoked quickly; the first watch's stream is replaced by the ERROR event it would send.
    With pages of one object, the listings come in several pages and hand over the same events.
    """
    await create(worker, namespace, "vanishes", label)
    await create(worker, namespace, "stays", label)
    seen = Recorder()
    informer = informer_of(worker, label, seen, list_page_size=page_size)
    original = informer_module.iter_resp_lines
    streams: list[Any] = []

    def first_watch_expires(response: Any) -> Iterator[str]:
        streams.append(response)
        if len(streams) > 1:
            yield from original(response)
            return
        # Change things behind the informer's back, then expire its watch.
        core = client.CoreV1Api(worker.api)
        core.delete_namespaced_config_map("vanishes", namespace)
        core.create_namespaced_config_map(namespace, config_map(namespace, "appears", label))  # type: ignore[arg-type]
        yield json.dumps({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                                                      "reason": "Expired", "message": "too old resource version: 1 (200)"}})

    monkeypatch.setattr(informer_module, "iter_resp_lines", first_watch_expires)
    started = time.monotonic()
    informer.start()
    try:
        await until(lambda: len(seen.events) >= 5, "the relist's events")
        assert time.monotonic() - started < 10, "the relist after 410 waited for a backoff"
        assert sorted(seen.events[:2]) == [(ADDED, "stays"), (ADDED, "vanishes")]
        assert sorted(seen.events[2:]) == [(ADDED, "appears"), (DELETED, "vanishes"), (MODIFIED, "stays")]
        assert sorted(informer.store.objects) == [(namespace, "appears"), (namespace, "stays")]
        assert informer.state is InformerState.SYNCED and informer.last_error is None
        await until(lambda: len(streams) >= 2, "a new watch after the relist")
        await create(worker, namespace, "later", label)
        await until(lambda: seen.events[-1] == (ADDED, "later"), "events on the new watch")
    finally:
        await informer.stop()


async def test_broken_connection_relists(worker: AsyncKube, namespace: str, label: str) -> None:
    await create(worker, namespace, "kept", label)
    seen = Recorder()
    informer = informer_of(worker, label, seen, backoff_initial=0.2)
    informer.start()
    try:
        await asyncio.wait_for(informer.synced.wait(), 30)
        await until(lambda: informer._response is not None, "the watch to be open")
        informer._interrupt()  # the network drops the connection
        await until(lambda: (MODIFIED, "kept") in seen.events, "the relist after the break")
        await create(worker, namespace, "after", label)
        await until(lambda: (ADDED, "after") in seen.events, "events on the new watch")
        assert informer.state is InformerState.SYNCED
    finally:
        await informer.stop()


async def test_indexer_lookups(worker: AsyncKube, namespace: str, label: str) -> None:
    def by_app(obj: dict[str, Any]) -> list[str]:
        app = (obj["metadata"].get("labels") or {}).get("app")
        return [f"{obj['metadata']['namespace']}/{app}"] if app else []

    await create(worker, namespace, "a1", label, app="alpha")
    await create(worker, namespace, "a2", label, app="alpha")
    await create(worker, namespace, "b1", label, app="beta")
    informer = informer_of(worker, label, indexers={"app": by_app})
    informer.start()
    try:
        await asyncio.wait_for(informer.synced.wait(), 30)
        names = lambda app: [o["metadata"]["name"] for o in informer.by_index("app", f"{namespace}/{app}")]  # noqa: E731
        assert names("alpha") == ["a1", "a2"] and names("beta") == ["b1"]
        await worker.patch(CONFIG_MAPS, namespace, "a2", {"metadata": {"labels": {"app": "beta"}}})
        await worker.delete(CONFIG_MAPS, namespace, "b1")
        await until(lambda: names("beta") == ["a2"], "the index to follow the change and the delete")
        assert names("alpha") == ["a1"]
    finally:
        await informer.stop()


async def test_stop_is_prompt_and_final(worker: AsyncKube, namespace: str, label: str) -> None:
    seen = Recorder()
    informer = informer_of(worker, label, seen)  # a 60s watch: stop must not wait for it to time out
    informer.start()
    await asyncio.wait_for(informer.synced.wait(), 30)
    await until(lambda: informer._response is not None, "the watch to be open")
    thread = informer._thread
    assert thread is not None and thread.is_alive()
    # An event the watch thread may already have queued for the loop must not be delivered.
    client.CoreV1Api(worker.api).create_namespaced_config_map(namespace, config_map(namespace, "racing", label))  # type: ignore[arg-type]
    seen.closed = True
    started = time.monotonic()
    await informer.stop()
    assert time.monotonic() - started < 3, "stop() waited for the watch to time out"
    await until(lambda: not thread.is_alive(), "the watch thread to return after its last word", 1)
    await create(worker, namespace, "after-stop", label)
    await asyncio.sleep(1.5)
    assert seen.after_close == []
    assert [t for t in threading.enumerate() if t.name.startswith("watch worker1 configmaps")] == []


async def test_kind_not_served_is_reported_and_retried_until_its_crd_exists(
    worker: AsyncKube, integration_clusters: Clusters, label: str
) -> None:
    group = f"t{label}.informer.example.com"
    ref = ResourceRef(group, "v1", "widgets", True)
    states: list[InformerState] = []
    seen = Recorder()
    informer = Informer(
        worker, ref, seen, on_health=lambda i: states.append(i.state), not_usable=NOT_USABLE,
        cluster="worker1", backoff_initial=0.2, backoff_max=1.0,
    )
    informer.start()
    api = integration_clusters.worker(1)
    crd = o.open_crd(group, "Widget", "widgets")
    try:
        assert await asyncio.wait_for(informer.wait_settled(), 30) is InformerState.UNSERVED
        assert informer.last_status == 404 and not informer.synced.is_set()
        await asyncio.sleep(1.5)  # retried meanwhile, still not served
        assert informer.state is InformerState.UNSERVED
        await asyncio.to_thread(wiring.install_crds, api, [crd])
        await asyncio.to_thread(wiring.ensure_namespace, api, "default")
        await asyncio.wait_for(informer.synced.wait(), 30)
        assert informer.last_status is None and informer.last_error is None
        await worker.create(ref, "default", {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w1", "namespace": "default"}})
        await until(lambda: (ADDED, "w1") in seen.events, "the new kind's event")
        assert states[0] is InformerState.UNSERVED and states[-1] is InformerState.SYNCED
    finally:
        await informer.stop()
        await asyncio.to_thread(client.ApiextensionsV1Api(api).delete_custom_resource_definition, f"widgets.{group}")


async def test_not_served_without_the_tolerant_mode_is_a_failure(worker: AsyncKube) -> None:
    informer = Informer(worker, ResourceRef("nothing.example.com", "v1", "things", True), cluster="worker1")
    informer.start()
    try:
        assert await asyncio.wait_for(informer.wait_settled(), 30) is InformerState.FAILED
        assert informer.last_status == 404 and informer.last_error == "404 Not Found"
    finally:
        await informer.stop()


async def test_unreachable_cluster_is_a_failure_without_status(integration_clusters: Clusters) -> None:
    api = integration_clusters.worker(1)
    api.configuration.host = f"https://127.0.0.1:{free_port()}"
    kube = AsyncKube(api, workers=2)
    informer = Informer(kube, CONFIG_MAPS, cluster="closed", not_usable=NOT_USABLE, backoff_initial=0.1, backoff_max=0.5)
    informer.start()
    try:
        assert await asyncio.wait_for(informer.wait_settled(), 30) is InformerState.FAILED
        assert informer.last_status is None and informer.last_error
        started = time.monotonic()
        await informer.stop()
        assert time.monotonic() - started < 3
    finally:
        await informer.stop()
        await kube.close()
