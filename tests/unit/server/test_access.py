"""Who may call which listener: the Service listener refuses the extender's paths, the extender's bearer-token
gate, the metrics gate over a TokenReview/SubjectAccessReview API (httpx MockTransport), and start-up loading of
the TLS and token files."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import msgspec
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from hami.config import SchedulerSettings
from hami.errors import ConfigError
from hami.k8s.client import KubeClient
from hami.k8s.config import KubeConfig
from hami.k8s.reviews import Access, AccessReviewer, DecisionCache
from hami.server.access import BearerTokenGate, MetricsGate, TokenFile, load_transport
from hami.server.app import build_app, build_service_app
from hami.server.certs import generate, write_files
from tests.unit.server.support import NS, World, gpu_node, gpu_pod

# --- the Service listener -------------------------------------------------------------------------------


async def ok(_: Request) -> PlainTextResponse:
    return PlainTextResponse("webhook")


@pytest.fixture
async def service(world: World) -> AsyncIterator[httpx.AsyncClient]:
    world.add_node(gpu_node("n1"))
    app = build_service_app(world.extender, [Route("/webhook", ok, methods=["POST"])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://hami") as client:
        yield client


@pytest.mark.parametrize("path", ["/filter", "/bind"])
async def test_the_service_listener_refuses_the_extender_paths_and_touches_nothing(
    world: World, service: httpx.AsyncClient, path: str
) -> None:
    pod = world.add_pod(gpu_pod("web"))
    body = {"PodName": "web", "PodNamespace": NS, "PodUID": pod.metadata.uid, "Node": "n1"}
    if path == "/filter":
        body = {"Pod": msgspec.to_builtins(pod), "NodeNames": ["n1"]}

    response = await service.post(path, json=body)

    assert response.status_code == 404
    assert "--extender-bind" in response.text
    assert world.cluster.calls == []  # no patch, no lock, no binding
    assert world.pod("web").spec.node_name == ""
    assert world.usage() == {}


async def test_the_service_listener_serves_the_webhook_and_health(service: httpx.AsyncClient) -> None:
    assert (await service.post("/webhook")).text == "webhook"
    assert (await service.get("/healthz")).text == "ok"
    assert (await service.get("/readyz")).status_code == 200


# --- the extender's bearer token ------------------------------------------------------------------------


def token_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "token"
    path.write_text(text)
    return path


@pytest.fixture
async def gated(world: World, tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Path]]:
    path = token_file(tmp_path, "s3cret\n")
    app = BearerTokenGate(build_app(world.extender), TokenFile(path))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hami") as client:
        yield client, path


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-header"),
        pytest.param({"Authorization": "Bearer wrong"}, id="wrong-token"),
        pytest.param({"Authorization": "Basic s3cret"}, id="not-bearer"),
        pytest.param({"Authorization": "Bearer s3cre"}, id="prefix-of-the-token"),
    ],
)
async def test_extender_calls_without_the_token_get_401_and_touch_nothing(
    world: World, gated: tuple[httpx.AsyncClient, Path], headers: dict[str, str]
) -> None:
    client, _ = gated
    world.add_pod(gpu_pod("web"))
    response = await client.post("/bind", json={"PodName": "web", "PodNamespace": NS, "Node": "n1"}, headers=headers)

    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert world.cluster.calls == []


async def test_the_right_token_reaches_the_extender_and_health_needs_none(
    world: World, gated: tuple[httpx.AsyncClient, Path]
) -> None:
    client, _ = gated
    world.add_node(gpu_node("n1"))
    pod = world.add_pod(gpu_pod("web"))

    response = await client.post(
        "/filter",
        json={"Pod": msgspec.to_builtins(pod), "NodeNames": ["n1"]},
        headers={"Authorization": "Bearer s3cret"},
    )

    assert response.status_code == 200
    assert response.json()["NodeNames"] == ["n1"]
    assert (await client.get("/healthz")).status_code == 200


async def test_a_rotated_token_file_is_read_again(gated: tuple[httpx.AsyncClient, Path]) -> None:
    client, path = gated
    path.write_text("next-token\nsecond-one\n")
    os.utime(path, ns=(1, 1))  # a different identity even within one clock tick

    old = await client.post("/filter", content=b"{}", headers={"Authorization": "Bearer s3cret"})
    new = await client.post("/filter", content=b"{}", headers={"Authorization": "Bearer next-token"})
    second = await client.post("/filter", content=b"{}", headers={"Authorization": "Bearer second-one"})

    assert (old.status_code, new.status_code, second.status_code) == (401, 200, 200)


@pytest.mark.parametrize("replacement", ["", "\n  \n"], ids=["emptied", "blank-lines"])
def test_a_token_file_emptied_later_keeps_the_tokens_read_before(tmp_path: Path, replacement: str) -> None:
    path = token_file(tmp_path, "s3cret")
    tokens = TokenFile(path)
    path.write_text(replacement)
    assert tokens.matches("s3cret")
    path.unlink()
    assert tokens.matches("s3cret")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        pytest.param("", "the token file holds no token", id="empty"),
        pytest.param(" \n\n", "the token file holds no token", id="blank"),
        pytest.param(None, "cannot read the token file: No such file or directory", id="missing"),
    ],
)
def test_an_unusable_token_file_is_refused_at_start_up(tmp_path: Path, content: str | None, reason: str) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        TokenFile(path)
    assert caught.value.field == "--extender-token-file"
    assert caught.value.value == str(path)
    assert reason in str(caught.value)


# --- metrics: TokenReview + SubjectAccessReview -----------------------------------------------------------

USERS = {"reader-token": "system:serviceaccount:monitoring:prometheus", "other-token": "system:serviceaccount:a:b"}
ALLOWED = {"system:serviceaccount:monitoring:prometheus"}


class FakeReviews:
    """The two review APIs of a kube-apiserver: TokenReview knows ``USERS``, RBAC allows ``ALLOWED``."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, object]]] = []
        self.down = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            return httpx.Response(503, json={"kind": "Status", "message": "etcd is down"})
        body = json.loads(request.content)
        self.requests.append((request.url.path, body))
        spec = body["spec"]
        if request.url.path == "/apis/authentication.k8s.io/v1/tokenreviews":
            user = USERS.get(spec["token"])
            status = {"authenticated": True, "user": {"username": user, "groups": ["g"]}} if user else {}
            return httpx.Response(201, json={**body, "status": status})
        assert request.url.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        assert spec["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
        return httpx.Response(201, json={**body, "status": {"allowed": spec["user"] in ALLOWED}})


@pytest.fixture
async def metrics() -> AsyncIterator[tuple[httpx.AsyncClient, FakeReviews, AccessReviewer]]:
    api = FakeReviews()
    async with KubeClient(KubeConfig(server="https://api", token="hami"), transport=httpx.MockTransport(api)) as kube:
        reviewer = AccessReviewer(kube, "/metrics")

        async def scrape(_: Request) -> PlainTextResponse:
            return PlainTextResponse("hami_up 1\n")

        app = MetricsGate(Starlette(routes=[Route("/metrics", scrape)]), reviewer)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://hami") as client:
            yield client, api, reviewer


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param({}, 401, id="no-token"),
        pytest.param({"Authorization": "Bearer forged"}, 401, id="token-the-api-server-does-not-know"),
        pytest.param({"Authorization": "Bearer other-token"}, 403, id="user-without-get-on-metrics"),
        pytest.param({"Authorization": "Bearer reader-token"}, 200, id="user-allowed-by-rbac"),
    ],
)
async def test_metrics_need_an_accepted_token_of_an_allowed_user(
    metrics: tuple[httpx.AsyncClient, FakeReviews, AccessReviewer], headers: dict[str, str], status: int
) -> None:
    client, _, _ = metrics
    response = await client.get("/metrics", headers=headers)
    assert response.status_code == status
    assert ("hami_up 1" in response.text) is (status == 200)


async def test_a_scrape_is_reviewed_once_then_served_from_the_cache(
    metrics: tuple[httpx.AsyncClient, FakeReviews, AccessReviewer],
) -> None:
    client, api, _ = metrics
    for _ in range(5):
        assert (await client.get("/metrics", headers={"Authorization": "Bearer reader-token"})).status_code == 200
    assert [path.rsplit("/", 1)[1] for path, _ in api.requests] == ["tokenreviews", "subjectaccessreviews"]
    user = api.requests[1][1]["spec"]
    assert (user["user"], user["groups"]) == ("system:serviceaccount:monitoring:prometheus", ["g"])  # type: ignore[index]


async def test_an_api_failure_answers_503_and_is_not_cached(
    metrics: tuple[httpx.AsyncClient, FakeReviews, AccessReviewer],
) -> None:
    client, api, _ = metrics
    api.down = True
    assert (await client.get("/metrics", headers={"Authorization": "Bearer reader-token"})).status_code == 503
    api.down = False
    assert (await client.get("/metrics", headers={"Authorization": "Bearer reader-token"})).status_code == 200


def test_decisions_expire_and_the_cache_stays_bounded() -> None:
    now = [0.0]
    cache = DecisionCache(ttl=10.0, capacity=2, clock=lambda: now[0])
    cache.put("a", Access.ALLOWED)
    cache.put("b", Access.FORBIDDEN)
    assert cache.get("a") is Access.ALLOWED  # a is now the most recently used
    cache.put("c", Access.UNAUTHENTICATED)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (Access.ALLOWED, None, Access.UNAUTHENTICATED)
    assert len(cache) == 2
    now[0] = 10.0
    assert cache.get("a") is None
    assert cache.get("c") is None


# --- start-up: the TLS files ----------------------------------------------------------------------------


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    write_files(generate(["localhost"], ["127.0.0.1"], now=datetime.now(UTC)), tmp_path)
    return tmp_path


def settings(**values: object) -> SchedulerSettings:
    return SchedulerSettings(**values)  # type: ignore[arg-type]


def test_the_extender_gets_its_own_context_with_a_client_ca(tls_dir: Path) -> None:
    transport = load_transport(
        settings(
            cert_file=str(tls_dir / "tls.crt"),
            key_file=str(tls_dir / "tls.key"),
            extender_client_ca_file=str(tls_dir / "ca.crt"),
            metrics_secure=True,
        )
    )
    assert transport.service_tls is transport.metrics_tls is not None
    assert transport.extender_tls is not None
    assert transport.extender_tls is not transport.service_tls
    assert transport.extender_tls.client_ca_file == tls_dir / "ca.crt"
    assert len(transport.reloaders()) == 2


def test_without_certificates_every_listener_is_plain_http() -> None:
    transport = load_transport(settings())
    assert (transport.service_tls, transport.extender_tls, transport.metrics_tls) == (None, None, None)
    assert transport.reloaders() == []


@pytest.mark.parametrize(
    ("broken", "flag"),
    [
        pytest.param("tls.crt", "--cert_file", id="certificate-not-pem"),
        pytest.param("tls.key", "--cert_file", id="key-not-pem"),
        pytest.param("ca.crt", "--extender-client-ca-file", id="client-ca-not-pem"),
    ],
)
def test_unloadable_tls_files_are_refused_at_start_up(tls_dir: Path, broken: str, flag: str) -> None:
    (tls_dir / broken).write_text("not a PEM file\n")
    with pytest.raises(ConfigError) as caught:
        load_transport(
            settings(
                cert_file=str(tls_dir / "tls.crt"),
                key_file=str(tls_dir / "tls.key"),
                extender_client_ca_file=str(tls_dir / "ca.crt"),
            )
        )
    assert caught.value.field == flag
    assert str(tls_dir / broken) in str(caught.value)
