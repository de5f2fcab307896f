from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
import pytest

from hami.errors import ApiError, BudgetRefused, Conflict, Gone, InvalidInput, NotFound, TooManyRequests
from hami.k8s.client import ClientSettings, KubeClient, PatchType, api_error
from hami.k8s.config import KubeConfig
from hami.k8s.records import EventType
from hami.k8s.resources import LEASES, NODES, PODS
from hami.protocol.objects import Node, Pod
from tests.unit.k8s.conftest import FakeClock, FakeSleep
from tests.unit.k8s.fakeapi import FakeApi, Reply, Stream, event_line, obj, status_body

PODS_ALL = "/api/v1/pods"


async def test_get_decodes_into_the_view_and_sends_the_token(api: FakeApi, client: KubeClient) -> None:
    body = obj("p", "7", spec={"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}, extra={"big": 1})
    api.script("GET", "/api/v1/namespaces/default/pods/p", Reply(body=body))
    pod = await client.get(PODS, "p", namespace="default", type=Pod)
    assert pod.metadata.resource_version == "7"
    assert pod.spec.node_name == "n1"
    (request,) = api.calls("GET")
    assert request.headers["authorization"] == "Bearer t0ken"
    assert request.headers["accept"] == "application/json"
    assert request.headers["user-agent"].startswith("hami/")


@pytest.mark.parametrize(
    ("status", "cls"),
    [(404, NotFound), (409, Conflict), (410, Gone), (403, ApiError), (501, ApiError), (422, ApiError)],
    ids=["404-not-found", "409-conflict", "410-gone", "403-plain", "501-plain", "422-plain"],
)
async def test_failed_requests_map_to_the_error_tree_with_the_status_message(
    api: FakeApi, client: KubeClient, status: int, cls: type[ApiError]
) -> None:
    api.script("GET", "/api/v1/nodes/n1", Reply(status, status_body(status, f'nodes "n1" said {status}')))
    with pytest.raises(ApiError) as caught:
        await client.get(NODES, "n1", type=Node)
    assert type(caught.value) is cls
    assert caught.value.status == status
    assert str(caught.value) == f'nodes "n1" said {status}'


def test_a_body_that_is_not_a_status_still_gives_a_message() -> None:
    assert str(api_error(502, b"<html>bad gateway</html>", "GET /x")) == "<html>bad gateway</html>"
    assert str(api_error(503, b"", "GET /x")) == "GET /x: HTTP 503"


async def test_an_unreachable_server_is_an_api_error_with_status_0(clock: FakeClock, sleep: FakeSleep) -> None:
    config = KubeConfig(server="http://127.0.0.1:9")  # discard port: nothing listens
    async with KubeClient(config, ClientSettings(connect_timeout=1), clock=clock, sleep=sleep) as kube:
        with pytest.raises(ApiError) as caught:
            await kube.get(NODES, "n1", type=Node)
    assert caught.value.status == 0
    assert "GET /api/v1/nodes/n1: ConnectError" in str(caught.value)


async def test_a_response_that_does_not_fit_the_view_is_invalid_input(api: FakeApi, client: KubeClient) -> None:
    api.script("GET", "/api/v1/nodes/n1", Reply(body={"metadata": {"name": 5}}))
    with pytest.raises(InvalidInput, match=r"GET /api/v1/nodes/n1: undecodable response"):
        await client.get(NODES, "n1", type=Node)


async def test_list_follows_continue_tokens_and_returns_the_snapshot_version(api: FakeApi, client: KubeClient) -> None:
    api.script(
        "GET",
        PODS_ALL,
        Reply(
            body={"metadata": {"resourceVersion": "10", "continue": "tok1"}, "items": [obj("a", "1"), obj("b", "2")]}
        ),
        Reply(body={"metadata": {"resourceVersion": "10", "continue": "tok2"}, "items": [obj("c", "3")]}),
        Reply(body={"metadata": {"resourceVersion": "10"}, "items": None}),
    )
    result = await client.list(PODS, type=Pod, label_selector="app=x", limit=2)
    assert [p.metadata.name for p in result.items] == ["a", "b", "c"]
    assert result.resource_version == "10"
    queries = [r.query for r in api.calls("GET", PODS_ALL)]
    assert queries == [
        {"labelSelector": "app=x", "limit": "2"},
        {"labelSelector": "app=x", "limit": "2", "continue": "tok1"},
        {"labelSelector": "app=x", "limit": "2", "continue": "tok2"},
    ]


async def test_an_expired_continue_token_restarts_the_list_unpaginated(api: FakeApi, client: KubeClient) -> None:
    api.script(
        "GET",
        PODS_ALL,
        Reply(body={"metadata": {"resourceVersion": "10", "continue": "tok1"}, "items": [obj("a", "1")]}),
        Reply(410, status_body(410, "The provided continue parameter is too old", "Expired")),
        Reply(body={"metadata": {"resourceVersion": "20"}, "items": [obj("a", "1"), obj("b", "15")]}),
    )
    result = await client.list(PODS, type=Pod, limit=1)
    assert [p.metadata.name for p in result.items] == ["a", "b"]
    assert result.resource_version == "20"
    assert [r.query for r in api.calls("GET", PODS_ALL)][-1] == {}


async def test_the_next_page_is_requested_while_the_consumer_works_on_this_one(
    api: FakeApi, client: KubeClient
) -> None:
    api.script(
        "GET",
        PODS_ALL,
        Reply(body={"metadata": {"resourceVersion": "10", "continue": "tok1"}, "items": [obj("a", "1")]}),
        Reply(body={"metadata": {"resourceVersion": "10", "continue": "tok2"}, "items": [obj("b", "2")]}),
        Reply(body={"metadata": {"resourceVersion": "10"}, "items": [obj("c", "3")]}),
    )
    pages = client.list_pages(PODS, type=Pod, limit=1)
    first = await anext(pages)
    await wait_until(lambda: len(api.calls("GET", PODS_ALL)) == 2)  # asked for before the consumer asks
    assert [p.metadata.name for p in first.items] == ["a"]
    assert api.calls("GET", PODS_ALL)[1].query == {"limit": "1", "continue": "tok1"}
    second = await anext(pages)
    assert [p.metadata.name for p in second.items] == ["b"]
    await pages.aclose()  # the consumer stops early: the request for the third page is dropped
    await asyncio.sleep(0)
    assert not [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "KubeClient._request"]  # type: ignore[union-attr]


async def test_a_failed_page_ahead_is_raised_to_the_consumer(api: FakeApi, client: KubeClient) -> None:
    api.script(
        "GET",
        PODS_ALL,
        Reply(body={"metadata": {"resourceVersion": "10", "continue": "tok1"}, "items": [obj("a", "1")]}),
        Reply(403, status_body(403, "pods is forbidden")),
    )
    seen: list[str] = []

    async def consume() -> None:
        async for page in client.list_pages(PODS, type=Pod, limit=1):
            seen.extend(p.metadata.name for p in page.items)

    with pytest.raises(ApiError, match="pods is forbidden"):
        await consume()
    assert seen == ["a"]


async def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("patch_type", list(PatchType), ids=[p.name.lower() for p in PatchType])
async def test_patch_sends_the_content_type_of_its_kind(
    api: FakeApi, client: KubeClient, patch_type: PatchType
) -> None:
    api.script("PATCH", "/api/v1/nodes/n1", Reply(body={"metadata": {"name": "n1", "resourceVersion": "9"}}))
    body: object = [{"op": "remove", "path": "/x"}] if patch_type is PatchType.JSON else {"metadata": {"labels": None}}
    node = await client.patch(NODES, "n1", body, type=Node, patch_type=patch_type)
    assert node.metadata.resource_version == "9"
    (request,) = api.calls("PATCH")
    assert request.headers["content-type"] == patch_type.value
    assert msgspec.json.decode(request.body) == body


async def test_create_delete_and_binding_use_the_right_paths_and_bodies(api: FakeApi, client: KubeClient) -> None:
    lease = {"metadata": {"name": "l", "namespace": "kube-system"}, "spec": {"holderIdentity": "me"}}
    api.script("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", Reply(201, lease))
    api.script("DELETE", "/api/v1/namespaces/ns/pods/p", Reply(body=status_body(200, "ok")))
    api.script("POST", "/api/v1/namespaces/ns/pods/p/binding", Reply(201, status_body(201, "")))
    created = await client.create(LEASES, lease, namespace="kube-system", type=msgspec.Raw)
    assert msgspec.json.decode(created) == lease
    await client.delete(PODS, "p", namespace="ns", grace_period_seconds=0)
    await client.create_binding("ns", "p", "uid-1", "node-7")
    delete, binding = api.calls("DELETE")[0], api.calls("POST")[1]
    assert msgspec.json.decode(delete.body) == {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    assert msgspec.json.decode(binding.body) == {
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1"},
        "target": {"kind": "Node", "name": "node-7", "namespace": "", "uid": "", "apiVersion": "v1"},
        "kind": "Binding",
        "apiVersion": "v1",
    }


async def test_watch_streams_typed_events_and_asks_for_bookmarks(api: FakeApi, client: KubeClient) -> None:
    added = event_line("ADDED", obj("a", "11"))
    api.script(
        "WATCH",
        PODS_ALL,
        Stream(
            [
                added[:20],  # one event split across chunks
                added[20:] + b"\n" + event_line("MODIFIED", obj("a", "12")) + b"\n",
                event_line("WEIRD", obj("a", "13")) + b"\n",  # unknown types are skipped
                event_line("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "14"}}) + b"\n",
                event_line("DELETED", obj("a", "15")),  # the last line may lack its newline
            ]
        ),
    )
    async with client.watch(PODS, type=Pod, resource_version="10", timeout_seconds=60) as events:
        seen = [(e.type, e.object.metadata.name, e.object.metadata.resource_version) async for e in events]
    assert seen == [
        (EventType.ADDED, "a", "11"),
        (EventType.MODIFIED, "a", "12"),
        (EventType.BOOKMARK, "", "14"),
        (EventType.DELETED, "a", "15"),
    ]
    (request,) = api.calls("WATCH")
    assert request.query == {
        "watch": "1",
        "resourceVersion": "10",
        "timeoutSeconds": "60",
        "allowWatchBookmarks": "true",
    }


async def test_a_pod_bookmark_as_the_api_server_sends_it_is_read(api: FakeApi, client: KubeClient) -> None:
    # kube-apiserver's bookmark is a zero-valued object with only metadata.resourceVersion set; for a Pod that
    # means "spec": {"containers": null}, which the compact Pod view does not accept. Undecodable, it made the
    # reflector relist every pod at each bookmark (seen in the extender's e2e logs).
    bookmark = (
        b'{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"215",'
        b'"annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"containers":null},"status":{}}}\n'
    )
    api.script("WATCH", PODS_ALL, Stream([bookmark, event_line("ADDED", obj("a", "216"))]))

    async with client.watch(PODS, type=Pod, resource_version="200", timeout_seconds=60) as events:
        seen = [(e.type, e.object.metadata.name, e.object.metadata.resource_version) async for e in events]

    assert seen == [(EventType.BOOKMARK, "", "215"), (EventType.ADDED, "a", "216")]


async def test_a_watch_error_event_raises_the_status_it_carries(api: FakeApi, client: KubeClient) -> None:
    error = event_line("ERROR", status_body(410, "too old resource version: 10 (20)", "Expired"))
    api.script("WATCH", PODS_ALL, Stream([event_line("ADDED", obj("a", "11")) + b"\n", error + b"\n"]))
    seen = []
    with pytest.raises(Gone, match="too old resource version"):
        async with client.watch(PODS, type=Pod, resource_version="10") as events:
            seen = [e async for e in events]
    assert seen == []  # the exception interrupted the comprehension


async def test_a_watch_refused_at_start_raises_before_any_event(api: FakeApi, client: KubeClient) -> None:
    api.script("WATCH", PODS_ALL, Reply(410, status_body(410, "gone at start")))
    with pytest.raises(Gone, match="gone at start"):
        async with client.watch(PODS, type=Pod, resource_version="10"):
            pytest.fail("the context must not be entered")


async def test_a_broken_stream_is_an_api_error_with_status_0(api: FakeApi, client: KubeClient) -> None:
    api.script("WATCH", PODS_ALL, Stream([event_line("ADDED", obj("a", "11")) + b"\n"], end="break"))
    seen: list[str] = []

    async def consume() -> None:
        async with client.watch(PODS, type=Pod, resource_version="10") as events:
            async for event in events:
                seen.append(event.object.metadata.name)

    with pytest.raises(ApiError, match="stream broken") as caught:
        await consume()
    assert caught.value.status == 0
    assert seen == ["a"]


async def test_requests_beyond_the_burst_wait_for_tokens(api: FakeApi, clock: FakeClock, sleep: FakeSleep) -> None:
    for _ in range(4):
        api.script("GET", "/api/v1/nodes/n1", Reply(body={"metadata": {"name": "n1"}}))
    async with KubeClient(KubeConfig(server=api.url), ClientSettings(qps=10, burst=2), clock=clock, sleep=sleep) as k:
        for _ in range(4):
            await k.get(NODES, "n1", type=Node)
    # two from the burst; the third waits a tenth of a second (FakeSleep advances the clock); so does the fourth
    assert sleep.delays == pytest.approx([0.1, 0.1])


async def test_a_token_file_is_reread_every_minute(api: FakeApi, clock: FakeClock, sleep: FakeSleep, tmp_path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    for _ in range(3):
        api.script("GET", "/api/v1/nodes/n1", Reply(body={}))
    async with KubeClient(KubeConfig(server=api.url, token_file=token), clock=clock, sleep=sleep) as kube:
        await kube.get(NODES, "n1", type=Node)
        token.write_text("two")
        clock.advance(30)
        await kube.get(NODES, "n1", type=Node)
        clock.advance(31)
        await kube.get(NODES, "n1", type=Node)
    assert [r.headers["authorization"] for r in api.calls("GET")] == ["Bearer one", "Bearer one", "Bearer two"]


THROTTLED = status_body(429, "too many requests, please try again later", "TooManyRequests")


async def test_a_throttled_write_waits_for_retry_after_and_is_sent_again(
    api: FakeApi, client: KubeClient, sleep: FakeSleep
) -> None:
    path = "/api/v1/namespaces/default/pods/p"
    api.script(
        "PATCH",
        path,
        Reply(429, THROTTLED, headers={"Retry-After": "1"}),
        Reply(429, THROTTLED, headers={"Retry-After": "2"}),
        Reply(body=obj("p", "2")),
    )
    pod = await client.patch(PODS, "p", {"metadata": {"uid": "uid-p"}}, namespace="default", type=Pod)
    assert pod.metadata.resource_version == "2"
    assert sleep.delays == [1.0, 2.0]
    assert len(api.calls("PATCH", path)) == 3
    assert client.retries == 2


async def test_retry_after_is_capped_and_without_one_the_wait_doubles(
    api: FakeApi, client: KubeClient, sleep: FakeSleep
) -> None:
    api.script("POST", "/api/v1/namespaces/default/pods/p/binding",
               Reply(429, THROTTLED, headers={"Retry-After": "120"}), Reply(429, THROTTLED), Reply(429, THROTTLED),
               Reply(201, {"kind": "Status", "code": 201}))  # fmt: skip
    await client.create_binding("default", "p", "uid-p", "n1")
    assert sleep.delays == pytest.approx([10.0, 0.4, 0.8])  # capped at retry_wait_max; then 0.2 × 2^attempt


async def test_an_eviction_a_budget_refuses_is_not_repeated_and_says_so(
    api: FakeApi, client: KubeClient, sleep: FakeSleep
) -> None:
    path = "/api/v1/namespaces/default/pods/p/eviction"
    refused = status_body(429, "Cannot evict pod as it would violate the pod's disruption budget.", "TooManyRequests")
    api.script("POST", path, Reply(429, refused, headers={"Retry-After": "10"}))
    with pytest.raises(BudgetRefused):
        await client.evict("default", "p", "uid-p")
    assert sleep.delays == []
    [call] = api.calls("POST", path)
    assert msgspec.json.decode(call.body)["deleteOptions"] == {"preconditions": {"uid": "uid-p"}}


async def test_a_storm_longer_than_the_budget_raises_too_many_requests(
    api: FakeApi, client: KubeClient, sleep: FakeSleep
) -> None:
    path = "/api/v1/nodes/n1"
    api.script("GET", path, *[Reply(429, THROTTLED, headers={"Retry-After": "6"}) for _ in range(6)])
    with pytest.raises(TooManyRequests) as caught:
        await client.get(NODES, "n1", type=Node)
    assert caught.value.retry_after == 6.0
    assert sleep.delays == [6.0, 6.0, 6.0]  # a fourth wait would pass the 20 s budget
    assert len(api.calls("GET", path)) == 4


@pytest.mark.parametrize(
    ("method", "status", "headers", "sent"),
    [
        ("GET", 503, {}, 2),  # reading twice is harmless
        ("PATCH", 503, {}, 1),  # a write of unknown fate is not repeated
        ("PATCH", 500, {"Retry-After": "1"}, 2),  # the server says it refused it
        ("PATCH", 403, {"Retry-After": "1"}, 1),  # a refusal for good is not retried
    ],
)
async def test_server_errors_are_retried_only_where_safe(
    api: FakeApi, client: KubeClient, method: str, status: int, headers: dict[str, str], sent: int
) -> None:
    path = "/api/v1/nodes/n1"
    api.script(method, path, Reply(status, status_body(status, "busy"), headers=headers), Reply(body=obj("n1", "5")))
    if method == "GET":
        await client.get(NODES, "n1", type=Node)
    elif sent == 2:
        await client.patch(NODES, "n1", {}, type=Node)
    else:
        with pytest.raises(ApiError) as caught:
            await client.patch(NODES, "n1", {}, type=Node)
        assert caught.value.status == status
    assert len(api.calls(method, path)) == sent


async def test_a_refused_connection_is_retried_for_writes_too_within_the_budget(
    clock: FakeClock, sleep: FakeSleep
) -> None:
    config = KubeConfig(server="http://127.0.0.1:9")  # discard port: nothing listens, nothing is ever sent
    settings = ClientSettings(connect_timeout=1, retry_budget=3.0, retry_jitter=0.0)
    async with KubeClient(config, settings, clock=clock, sleep=sleep) as kube:
        with pytest.raises(ApiError) as caught:
            await kube.create_binding("default", "p", "uid-p", "n1")
    assert caught.value.status == 0
    assert sleep.delays == pytest.approx([0.2, 0.4, 0.8, 1.6])  # the next (3.2 s) would pass the budget


async def test_retry_waits_are_spread_by_jitter_within_bounds(api: FakeApi, clock: FakeClock, sleep: FakeSleep) -> None:
    path = "/api/v1/nodes/n1"
    api.script("GET", path, *[Reply(429, THROTTLED, headers={"Retry-After": "1"}) for _ in range(5)], Reply(body={}))
    settings = ClientSettings(retry_jitter=0.5)
    async with KubeClient(KubeConfig(server=api.url), settings, clock=clock, sleep=sleep) as kube:
        await kube.get(NODES, "n1", type=Node)
    assert len(sleep.delays) == 5
    assert all(1.0 <= d <= 1.5 for d in sleep.delays)
    assert len(set(sleep.delays)) > 1  # not all in lock step
