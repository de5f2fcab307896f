"""``POST /webhook/dra`` over HTTP (DRA mode): the transport rules and metrics of ``/webhook``, the decision's
verdict with a fresh random suffix per review, and a clear refusal while ``--dra-mode`` is off."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette

from hami.protocol.podpatch import PatchOp
from hami.scheduling.state import ClusterState
from hami.server.metrics import Metrics
from hami.server.webhook import (
    CLAIM_SUFFIX_ALPHABET,
    DRA_MODE_OFF,
    WEBHOOK_BODY_LIMIT,
    claim_suffix,
    dra_webhook_route,
)
from tests.unit.server.test_webhook import fixture


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str = ""
    patch: tuple[PatchOp, ...] = ()


class Decision:
    """Records what it was asked; allows with one patch op naming the suffix, or refuses pods named ``no``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def review(self, raw_pod: Mapping[str, Any], namespace: str, suffix: Callable[[], str]) -> Verdict:
        drawn = suffix()
        self.seen.append((namespace, drawn))
        if raw_pod["metadata"].get("name") == "no":
            return Verdict(False, "containers[0] (main): nvidia.com/vgpu-mode mig is not available in DRA mode")
        return Verdict(True, patch=({"op": "add", "path": "/metadata/labels", "value": {"claim": drawn}},))


def app(decision: Decision | None, metrics: Metrics | None = None) -> httpx.AsyncClient:
    served = Starlette(routes=[dra_webhook_route(decision, metrics)])
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url="https://hami.test")


async def post(client: httpx.AsyncClient, body: bytes | dict[str, Any], **headers: str) -> dict[str, Any]:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = await client.post(
        "/webhook/dra", content=content, headers={"Content-Type": "application/json", **headers}
    )
    assert response.status_code == 200
    answer: dict[str, Any] = response.json()["response"]
    return answer


def review(name: str = "web") -> dict[str, Any]:
    body = fixture("review-v1-gpu-pod.json")
    body["request"]["object"]["metadata"]["name"] = name
    return body


async def test_the_verdict_is_the_decisions_with_a_fresh_suffix_per_review() -> None:
    decision = Decision()
    async with app(decision) as client:
        first = await post(client, review())
        await post(client, review())
    assert first["allowed"] is True
    assert first["uid"] == review()["request"]["uid"]
    [op] = json.loads(base64.b64decode(first["patch"]))
    suffix = op["value"]["claim"]
    assert len(suffix) == 5
    assert set(suffix) <= set(CLAIM_SUFFIX_ALPHABET)
    namespace = review()["request"]["namespace"]
    assert [ns for ns, _ in decision.seen] == [namespace, namespace]
    assert decision.seen[0][1] == suffix


async def test_a_refusal_is_403_with_the_decisions_message() -> None:
    async with app(Decision()) as client:
        answer = await post(client, review("no"))
    assert answer["allowed"] is False
    assert answer["status"] == {
        "code": 403,
        "reason": "Forbidden",
        "message": "containers[0] (main): nvidia.com/vgpu-mode mig is not available in DRA mode",
    }


async def test_with_dra_mode_off_every_pod_is_refused_saying_so() -> None:
    async with app(None) as client:
        answer = await post(client, review())
    assert answer["allowed"] is False
    assert answer["status"] == {"code": 403, "reason": "Forbidden", "message": DRA_MODE_OFF}
    assert "--dra-mode" in DRA_MODE_OFF


async def test_the_transport_rules_of_webhook_hold() -> None:
    decision = Decision()
    async with app(decision) as client:
        too_big = await post(client, b"x" * (WEBHOOK_BODY_LIMIT + 1))
        empty = await post(client, b"")
        text = await post(client, review(), **{"Content-Type": "text/plain"})
        unreadable = await post(client, b"{not json")
        assert (await client.get("/webhook/dra")).status_code == 405
    assert too_big["status"]["code"] == 413
    assert empty["status"] == {"code": 400, "message": "request body is empty"}
    assert text["status"] == {"code": 400, "message": "contentType=text/plain, expected application/json"}
    assert unreadable["status"]["code"] == 400
    assert decision.seen == []


async def test_a_bug_in_the_decision_is_500_and_the_server_keeps_serving() -> None:
    class Broken(Decision):
        def review(self, raw_pod: Mapping[str, Any], namespace: str, suffix: Callable[[], str]) -> Verdict:
            raise RuntimeError("boom")

    async with app(Broken()) as client:
        answer = await post(client, review())
        again = await post(client, b"")
    assert answer["status"] == {"code": 500, "message": "internal error: RuntimeError: boom"}
    assert again["status"]["code"] == 400


async def test_the_latency_is_recorded_under_its_own_endpoint() -> None:
    state = ClusterState({})
    metrics = Metrics(lambda: state)
    async with app(Decision(), metrics) as client:
        await post(client, review())
    count = metrics.registry.get_sample_value("hami_request_duration_seconds_count", {"endpoint": "webhook-dra"})
    assert count == 1


def test_suffixes_are_drawn_from_the_alphabet() -> None:
    drawn = {claim_suffix() for _ in range(200)}
    assert len(drawn) > 190
    assert all(len(s) == 5 and set(s) <= set(CLAIM_SUFFIX_ALPHABET) for s in drawn)
