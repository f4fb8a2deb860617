"""The asyncio client's transport (aiohttp on the event loop) against real API servers.

What changed hands from the kubernetes client's urllib3 pool must behave as
it did: the same TLS settings, the same errors (``ApiException`` for an
answer, an ``OSError`` for none), connections and turned-away requests
tried again as often as the pool would, a proxied configuration left to the
pool. API Priority and Fairness gives the real 429: a priority level with no
seats that rejects, for one impersonated user.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import pytest_asyncio
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from urllib3 import Retry

from multikueue.api.resources import ResourceRef
from multikueue.dev.binaries import ensure_binaries
from multikueue.dev.controllers import free_port
from multikueue.dev.pytest_plugin import Clusters
from multikueue.runtime.kube import MAX_RETRY_AFTER, AsyncKube, TransportError, load_api_client, retries, retry_after

CONFIG_MAPS = ResourceRef("", "v1", "configmaps", True)
NAMESPACES = ResourceRef("", "v1", "namespaces", False)


# --- pure rules -------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("setting", "expected"),
    [(None, 3), (False, 0), (0, 0), (5, 5), (Retry(total=4), 4), (Retry(total=4, connect=1), 1), (Retry(total=None), 0)],
)
def test_requests_are_tried_again_as_often_as_the_clients_pool_would(setting: object, expected: int) -> None:
    configuration = client.Configuration()
    configuration.retries = setting
    assert retries(configuration) == expected


@pytest.mark.unit
@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (429, {"Retry-After": "1"}, 1.0),
        (503, {"Retry-After": "2"}, 2.0),
        (429, {"Retry-After": "3600"}, MAX_RETRY_AFTER),
        (429, {"Retry-After": "-5"}, 0.0),
        (429, {}, None),  # not told when: not sent again
        (429, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),
        (500, {"Retry-After": "1"}, None),  # maybe handled: never sent twice
        (409, {"Retry-After": "1"}, None),
    ],
)
def test_only_a_request_turned_away_with_a_time_is_sent_again(status: int, headers: dict[str, str], expected: float | None) -> None:
    assert retry_after(status, headers) == expected


# --- against a real API server -----------------------------------------------------------------------


@pytest_asyncio.fixture
async def kubes(integration_clusters: Clusters) -> AsyncIterator[Callable[..., AsyncKube]]:
    """``kubes(configure=None, workers=4)``: an admin client of the manager, changed by ``configure`` first; closed after the test."""
    made: list[AsyncKube] = []

    def make(configure: Callable[[client.ApiClient], None] | None = None, workers: int = 4) -> AsyncKube:
        api = load_api_client(str(integration_clusters.kubeconfigs[0]), workers)
        if configure is not None:
            configure(api)
        kube = AsyncKube(api, workers=workers)
        made.append(kube)
        return kube

    yield make
    for kube in made:
        await kube.close()


@pytest.mark.integration
@pytest.mark.asyncio
async def test_verbs_round_trip_json_and_answers_outside_2xx_are_api_exceptions(
    kubes: Callable[..., AsyncKube], namespace: str
) -> None:
    kube = kubes()
    created = await kube.create(CONFIG_MAPS, namespace, {"metadata": {"name": "one"}, "data": {"k": "v"}})
    assert created["metadata"]["uid"]
    patched = await kube.patch(CONFIG_MAPS, namespace, "one", {"data": {"k": "w"}})
    assert patched["data"] == {"k": "w"}
    assert [c["metadata"]["name"] for c in await kube.list(CONFIG_MAPS, namespace)] == ["one"]
    with pytest.raises(ApiException) as conflict:
        await kube.create(CONFIG_MAPS, namespace, {"metadata": {"name": "one"}})
    assert conflict.value.status == 409 and "already exists" in conflict.value.body
    assert conflict.value.headers["Content-Type"] == "application/json"
    assert await kube.delete(CONFIG_MAPS, namespace, "one") is True
    assert await kube.delete(CONFIG_MAPS, namespace, "one") is False
    assert await kube.get_or_none(CONFIG_MAPS, namespace, "one") is None


@pytest.mark.integration
@pytest.mark.asyncio
async def test_a_listing_comes_in_pages_of_one_snapshot(kubes: Callable[..., AsyncKube], namespace: str) -> None:
    """``limit`` and ``continue``: every object once, no page over the limit, the watch version on the last page."""
    kube = kubes()
    for i in range(5):
        await kube.create(CONFIG_MAPS, namespace, {"metadata": {"name": f"cm-{i}", "labels": {"paged": "yes"}}, "data": {"k": "v"}})
    pages = [page async for page in kube.list_pages(CONFIG_MAPS, "paged=yes", namespace=namespace, limit=2)]
    names = [[item["metadata"]["name"] for item in page["items"]] for page in pages]
    assert [len(page) for page in names] == [2, 2, 1]
    assert sorted(sum(names, [])) == ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]
    assert all(page["metadata"].get("continue") for page in pages[:-1]) and not pages[-1]["metadata"].get("continue")
    versions = {page["metadata"]["resourceVersion"] for page in pages}
    assert len(versions) == 1, f"the pages are one snapshot: {versions}"


@pytest.mark.integration
@pytest.mark.asyncio
async def test_a_closed_port_is_a_transport_error_after_the_pools_retries(kubes: Callable[..., AsyncKube]) -> None:
    port = free_port()

    def closed(api: client.ApiClient) -> None:
        api.configuration.host = f"https://127.0.0.1:{port}"

    with pytest.raises(TransportError) as raised:
        await kubes(closed).get(NAMESPACES, None, "default")
    assert isinstance(raised.value, OSError)
    assert str(raised.value) == f"GET https://127.0.0.1:{port}/api/v1/namespaces/default: cannot connect: Connection refused"


@pytest.mark.integration
@pytest.mark.asyncio
async def test_the_server_certificate_is_checked_against_tls_server_name(kubes: Callable[..., AsyncKube]) -> None:
    def named(server_name: str) -> Callable[[client.ApiClient], None]:
        def configure(api: client.ApiClient) -> None:
            api.configuration.tls_server_name = server_name

        return configure

    with pytest.raises(TransportError) as raised:
        await kubes(named("not-in-the-certificate.example")).get(NAMESPACES, None, "default")
    assert "TLS certificate not accepted" in str(raised.value), raised.value
    # A name the serving certificate holds, though not the address dialled.
    assert (await kubes(named("kubernetes.default")).get(NAMESPACES, None, "default"))["metadata"]["name"] == "default"


LEVELS = ResourceRef("flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations", False)
SCHEMAS = ResourceRef("flowcontrol.apiserver.k8s.io", "v1", "flowschemas", False)
BINDINGS = ResourceRef("rbac.authorization.k8s.io", "v1", "clusterrolebindings", False)


@pytest.fixture
def fair_server(integration_clusters: Clusters) -> Iterator[str]:
    """A second apiserver of the manager over the same etcd, with API Priority and Fairness on: its address.

    The local clusters run with it off (their tests are not to be throttled).
    """
    assert integration_clusters.local is not None
    cluster = integration_clusters.local.clusters[0]
    port, name = free_port(), "kube-apiserver-fair"
    fair = cluster.start_apiserver(
        ensure_binaries().binaries, port=port, extra_args=("--enable-priority-and-fairness=true",), log_name=name
    )
    try:
        cluster.wait_apiserver(120, port=port, log_name=name)
        yield f"https://127.0.0.1:{port}"
    finally:
        fair.stop()
        cluster.processes.remove(fair)


@pytest_asyncio.fixture
async def throttled_user(kubes: Callable[..., AsyncKube]) -> AsyncIterator[str]:
    """A user whose requests API Priority and Fairness turns away (429) while another of theirs runs: a level with no seats."""
    admin = kubes()
    name = f"mkpy-throttled-{uuid.uuid4().hex[:6]}"
    await admin.create(
        LEVELS,
        None,
        {
            "metadata": {"name": name},
            "spec": {
                "type": "Limited",
                "limited": {"nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
                            "limitResponse": {"type": "Reject"}},
            },
        },
    )  # fmt: skip
    await admin.create(
        SCHEMAS,
        None,
        {
            "metadata": {"name": name},
            "spec": {
                "priorityLevelConfiguration": {"name": name},
                "matchingPrecedence": 200,
                "rules": [{"subjects": [{"kind": "User", "user": {"name": name}}],
                           "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                              "namespaces": ["*"], "clusterScope": True}]}],
            },
        },
    )  # fmt: skip

    # Allowed everything once let through (not through system:masters: that group is exempt from the limits).
    await admin.create(
        BINDINGS,
        None,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}],
        },
    )

    try:
        yield name
    finally:
        await admin.delete(SCHEMAS, None, name)
        await admin.delete(LEVELS, None, name)
        await admin.delete(BINDINGS, None, name)


@pytest.mark.integration
@pytest.mark.local_clusters
@pytest.mark.asyncio
async def test_a_request_turned_away_by_priority_and_fairness_is_sent_again_when_the_server_says(
    kubes: Callable[..., AsyncKube], throttled_user: str, fair_server: str
) -> None:
    """The user's level has no seats: a request runs only while no other of the level runs, the rest get 429."""

    def as_user(retries: object) -> Callable[[client.ApiClient], None]:
        def configure(api: client.ApiClient) -> None:
            api.configuration.host = fair_server
            api.default_headers["Impersonate-User"] = throttled_user
            api.configuration.retries = retries

        return configure

    async def burst(kube: AsyncKube, size: int) -> list[BaseException]:
        answers = await asyncio.gather(*(kube.get(NAMESPACES, None, "default") for _ in range(size)), return_exceptions=True)
        return [a for a in answers if isinstance(a, BaseException)]

    # Never sent again: a burst meets 429s once the flow schema is in force (the server reads it within moments).
    never = kubes(as_user(False), workers=20)
    deadline = time.monotonic() + 30
    rejected: list[BaseException] = []
    while not rejected:
        assert time.monotonic() < deadline, "no request of the throttled user was ever turned away"
        rejected = await burst(never, 20)
    assert all(isinstance(e, ApiException) and e.status == 429 for e in rejected), rejected
    assert all(float(e.headers["Retry-After"]) > 0 for e in rejected if isinstance(e, ApiException))

    # Sent again as told: every request of a burst is served in the end.
    patient = kubes(as_user(10), workers=20)
    for _ in range(3):
        assert await burst(patient, 5) == []


@pytest.mark.integration
@pytest.mark.asyncio
async def test_a_proxied_configuration_keeps_the_clients_pool(integration_clusters: Clusters) -> None:
    """aiohttp does not speak SOCKS nor the client's no_proxy rules: a proxy leaves the requests to urllib3."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(integration_clusters.kubeconfigs[0]), client_configuration=configuration)
    proxy = free_port()
    configuration.proxy = f"http://127.0.0.1:{proxy}"  # nobody listens: the request goes there, and fails
    configuration.retries = False
    kube = AsyncKube(client.ApiClient(configuration), workers=2)
    try:
        with pytest.raises(TransportError) as raised:
            await kube.get(NAMESPACES, None, "default")
        assert "Unable to connect to proxy" in str(raised.value) and f"port={proxy}" in str(raised.value), raised.value
    finally:
        await kube.close()


@pytest.mark.integration
@pytest.mark.asyncio
async def test_a_client_survives_its_event_loop_and_serves_the_next(integration_clusters: Clusters) -> None:
    """An AsyncKube may be built before the loop runs and outlive one (tests, the CLI): its session follows the loop."""
    kube = AsyncKube(load_api_client(str(integration_clusters.kubeconfigs[0]), 2), workers=2)

    def in_another_loop() -> str:
        return asyncio.run(kube.get(NAMESPACES, None, "default"))["metadata"]["name"]

    assert await asyncio.to_thread(in_another_loop) == "default"
    assert (await kube.get(NAMESPACES, None, "default"))["metadata"]["name"] == "default"
    await kube.close()
