"""The HTTP surface: /filter and /bind bodies, size limit, health and readiness (spec webhook §2.1–§2.3)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from hami.protocol import keys
from hami.server.app import EXTENDER_BODY_LIMIT, build_app
from tests.unit.server.support import NS, World, gpu_node, gpu_pod


@pytest.fixture
async def http(world: World) -> AsyncIterator[httpx.AsyncClient]:
    world.add_node(gpu_node("n1"))
    transport = httpx.ASGITransport(app=build_app(world.extender))
    async with httpx.AsyncClient(transport=transport, base_url="http://hami") as client:
        yield client


def pod_json(world: World, name: str) -> dict[str, object]:
    stored = world.add_pod(gpu_pod(name))
    return msgspec.to_builtins(stored)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param(b"{", "ExtenderArgs: not valid JSON: Input data was truncated (got '{')", id="truncated-json"),
        pytest.param(b"[]", "ExtenderArgs: expected a JSON object (got 'list')", id="not-an-object"),
        pytest.param(b"null", "ExtenderArgs: expected a JSON object (got 'NoneType')", id="json-null"),
        pytest.param(b"{}", "ExtenderArgs.Pod: extender args missing pod", id="missing-pod"),
        pytest.param(b'{"Pod": null}', "ExtenderArgs.Pod: extender args missing pod", id="null-pod"),
        pytest.param(
            b'{"Pod": {"metadata": {"name": 3}}}',
            "ExtenderArgs: Expected `str`, got `int` - at `$.pod.metadata.name` (got '…')",
            id="wrong-field-type-names-the-path",
        ),
        pytest.param(
            b'{"Pod":"\xff"}',
            'ExtenderArgs: contains bytes that are not UTF-8 (JSON text must be UTF-8) (got \'{"Pod":"\ufffd"}\')',
            id="bad-utf8",
        ),
        pytest.param(
            b'{"Pod":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            'ExtenderArgs: is nested too deeply to read (got \'{"Pod":' + "[" * 73 + "')",
            id="nested-100000-deep",
        ),
        pytest.param(
            b'{"Pod": {}, "NodeNames": "n1"}',
            "ExtenderArgs: Expected `array | null`, got `str` - at `$.nodenames` (got '…')",
            id="nodenames-not-a-list",
        ),
    ],
)
async def test_malformed_filter_body_gets_200_with_an_error_naming_the_problem(
    http: httpx.AsyncClient, body: bytes, error: str
) -> None:
    response = await http.post("/filter", content=body)

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"Error": error}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param(b"{", "ExtenderBindingArgs: not valid JSON: Input data was truncated (got '{')", id="truncated"),
        pytest.param(b"{}", "ExtenderBindingArgs.podname: required field is empty", id="no-pod-name"),
        pytest.param(
            b'{"PodName":"\xff"}',
            "ExtenderBindingArgs: contains bytes that are not UTF-8 (JSON text must be UTF-8) "
            '(got \'{"PodName":"\ufffd"}\')',
            id="bad-utf8",
        ),
        pytest.param(
            b'{"PodName": ["p"], "PodNamespace": "ns", "Node": "n1"}',
            "ExtenderBindingArgs: Expected `str`, got `array` - at `$.podname` (got '…')",
            id="wrong-type",
        ),
        pytest.param(
            b"[" * 100_000 + b"]" * 100_000,
            "ExtenderBindingArgs: is nested too deeply to read (got '" + "[" * 80 + "')",
            id="nested-100000-deep",
        ),
        pytest.param(
            b'{"PodName": "p", "PodNamespace": "ns", "Node": ""}',
            "ExtenderBindingArgs.node: required field is empty",
            id="no-node",
        ),
    ],
)
async def test_malformed_bind_body_gets_200_with_an_error_naming_the_problem(
    http: httpx.AsyncClient, body: bytes, error: str
) -> None:
    response = await http.post("/bind", content=body)

    assert response.status_code == 200
    assert response.json() == {"Error": error}


@pytest.mark.parametrize("path", ["/filter", "/bind"])
async def test_empty_body_is_400(http: httpx.AsyncClient, path: str) -> None:
    response = await http.post(path, content=b"")

    assert (response.status_code, response.text) == (400, "Please send a request body")


@pytest.mark.parametrize("path", ["/filter", "/bind"])
async def test_body_over_one_mib_is_refused_with_413(http: httpx.AsyncClient, path: str) -> None:
    response = await http.post(path, content=b" " * (EXTENDER_BODY_LIMIT + 1))

    assert response.status_code == 413
    assert response.json() == {"Error": "request body of 1048577 bytes exceeds the limit of 1048576 bytes"}


async def test_chunked_body_without_length_is_cut_off_at_the_limit(http: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(17):
            yield b" " * 65536  # 17 × 64 KiB > 1 MiB, and no Content-Length is sent

    response = await http.post("/filter", content=chunks())

    assert response.status_code == 413
    assert response.json() == {"Error": "request body exceeds the limit of 1048576 bytes"}


async def test_body_of_exactly_one_mib_is_read(http: httpx.AsyncClient) -> None:
    response = await http.post("/filter", content=b" " * EXTENDER_BODY_LIMIT)

    assert response.status_code == 200
    assert response.json()["Error"].startswith("ExtenderArgs: not valid JSON")


async def test_filter_and_bind_over_http_with_go_and_lowercase_field_names(
    http: httpx.AsyncClient, world: World
) -> None:
    await http.post("/filter", content=b"{")  # a bad request first: the server keeps serving
    go_style = {"Pod": pod_json(world, "p1"), "NodeNames": ["n1"], "Nodes": None}

    filtered = await http.post("/filter", json=go_style)
    bound = await http.post("/bind", json={"podname": "p1", "podnamespace": NS, "poduid": "uid-p1", "node": "n1"})

    assert filtered.status_code == 200
    assert filtered.json() == {"NodeNames": ["n1"]}
    assert bound.json() == {}  # Go reads the missing Error as "": success
    assert world.pod("p1").spec.node_name == "n1"
    assert world.pod("p1").metadata.annotations[keys.VGPU_NODE] == "n1"


async def test_filter_error_from_the_extender_is_answered_in_the_body(http: httpx.AsyncClient, world: World) -> None:
    world.readiness["leader"] = False

    response = await http.post("/filter", json={"pod": pod_json(world, "p1"), "nodenames": ["n1"]})

    assert response.status_code == 200
    assert response.json() == {
        "Error": "this hami replica is not the leader; kube-scheduler must call the leader (check the Service)"
    }


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/filter", b"{"),
        ("/bind", b"[]"),
        ("/filter", b""),
        ("/bind", b" " * (EXTENDER_BODY_LIMIT + 1)),
        ("/bind", b'{"podname": "p9", "podnamespace": "ns", "poduid": "", "node": "n1"}'),
        ("/filter", b'{"pod": {"metadata": {"name": "plain", "namespace": "ns", "uid": "u"}}, "nodenames": ["n1"]}'),
    ],
    ids=["filter-malformed", "bind-malformed", "empty", "too-large", "bind-refused", "filter-passthrough"],
)
async def test_the_lean_routes_answer_byte_for_byte_as_the_starlette_routes(
    world: World, path: str, body: bytes
) -> None:
    """``ExtenderRoutes`` serves /filter and /bind without Starlette; Starlette still has the same routes (its
    fallback), and both answer every request alike: status, content type and length, body."""
    app = build_app(world.extender)
    answers = []
    for served_by in (app, app.fallback):
        transport = httpx.ASGITransport(app=served_by)
        async with httpx.AsyncClient(transport=transport, base_url="http://hami") as client:
            response = await client.post(path, content=body)
        answers.append(
            (
                response.status_code,
                response.headers["content-type"],
                response.headers["content-length"],
                response.content,
            )
        )
    assert answers[0] == answers[1]


async def test_wrong_method_is_405(http: httpx.AsyncClient) -> None:
    assert (await http.get("/filter")).status_code == 405


async def test_healthz_is_always_200(http: httpx.AsyncClient, world: World) -> None:
    world.readiness["synced"] = False

    response = await http.get("/healthz")

    assert (response.status_code, response.text) == (200, "ok")


@pytest.mark.parametrize(
    ("synced", "leader", "status", "text"),
    [
        pytest.param(False, True, 503, "hami is starting: its node and pod caches are not synced yet", id="syncing"),
        # a synced follower is ready: it can take over at once, and the Service selects the leader by its label
        pytest.param(True, False, 200, "ok", id="synced-follower"),
        pytest.param(True, True, 200, "ok", id="synced-leader"),
    ],
)
async def test_readyz_says_why_it_is_not_ready(
    http: httpx.AsyncClient, world: World, synced: bool, leader: bool, status: int, text: str
) -> None:
    world.readiness.update(synced=synced, leader=leader)

    response = await http.get("/readyz")

    assert (response.status_code, response.text) == (status, text)
