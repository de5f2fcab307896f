"""Fuzzing the HTTP bodies of ``/filter``, ``/bind`` and ``/webhook`` end to end (hypothesis, through the ASGI
app): every body gets HTTP 200 with a well-formed answer — an ``ExtenderFilterResult`` or ``BindingResult``
(with ``Error`` when the body is unreadable) or an AdmissionReview (denied with code 400) — never a 500 or a
plain-text error, and the process keeps serving (``/healthz`` after each). Bodies are bounded in size."""

from __future__ import annotations

import asyncio

import httpx
import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.scheduling.admission import AdmissionSettings
from hami.server.app import build_app
from hami.server.webhook import admission_for, webhook_route
from tests.unit.protocol.test_fuzz import bodies
from tests.unit.server.support import gpu_node, make_world

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def app() -> object:
    world = make_world()
    world.add_node(gpu_node("n1"))
    admission = admission_for(world.extender, AdmissionSettings("hami-scheduler"))
    return build_app(world.extender, extra_routes=[webhook_route(admission, world.extender.metrics)])


APP = app()


async def post(path: str, body: bytes) -> tuple[int, str, bytes, int]:
    transport = httpx.ASGITransport(app=APP)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://hami") as client:
        response = await client.post(path, content=body, headers={"content-type": "application/json"})
        health = await client.get("/healthz")
    return response.status_code, response.headers.get("content-type", ""), response.content, health.status_code


@FUZZ
@given(path=st.sampled_from(["/filter", "/bind"]), body=bodies())
def test_extender_bodies_always_get_a_well_formed_result(path: str, body: bytes) -> None:
    status, content_type, content, health = asyncio.run(post(path, body))
    assert health == 200
    if not body:
        assert status == 400  # "Please send a request body", as HAMi answers
        return
    assert (status, content_type) == (200, "application/json")
    answer = msgspec.json.decode(content)
    assert isinstance(answer, dict)
    assert set(answer) <= {"Error", "NodeNames", "Nodes", "FailedNodes", "FailedAndUnresolvableNodes"}
    assert "internal error" not in answer.get("Error", "")


@FUZZ
@given(body=bodies())
def test_webhook_bodies_always_get_an_admission_review(body: bytes) -> None:
    status, content_type, content, health = asyncio.run(post("/webhook", body))
    assert (status, content_type, health) == (200, "application/json", 200)
    review = msgspec.json.decode(content)
    assert review["kind"] == "AdmissionReview"
    response = review["response"]
    if response["allowed"] is not True:
        assert response["status"]["code"] in (400, 403), response["status"]
