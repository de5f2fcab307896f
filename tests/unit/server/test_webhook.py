"""``POST /webhook`` over HTTP: AdmissionReview v1 and v1beta1, transport rules, malformed reviews."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.protocol.admission import MAX_CONTAINERS
from hami.scheduling.admission import Admission, AdmissionSettings
from hami.scheduling.request import SchedulingDefaults
from hami.scheduling.state import ClusterState
from hami.server.app import build_app
from hami.server.extender import Extender
from hami.server.metrics import Metrics
from hami.server.webhook import WEBHOOK_BODY_LIMIT, admission_for, webhook_route
from tests.unit.jsonpatch import apply_patch

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return loaded


def make_extender() -> Extender:
    vendors = vendors_from_config(default_device_config())
    state = ClusterState(vendors)
    return Extender(
        state=state,
        vendors=vendors,
        defaults=SchedulingDefaults(),
        cluster=None,  # type: ignore[arg-type]  # the webhook never calls the cluster
        metrics=Metrics(lambda: state),
    )


@pytest.fixture
def extender() -> Extender:
    return make_extender()


@pytest.fixture
def admission(extender: Extender) -> Admission:
    return admission_for(extender, AdmissionSettings("hami-scheduler"))


@pytest.fixture
def client(extender: Extender, admission: Admission) -> httpx.AsyncClient:
    app = build_app(extender, extra_routes=[webhook_route(admission, extender.metrics)])
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://hami.test")


async def post(client: httpx.AsyncClient, body: bytes | dict[str, Any], **headers: str) -> dict[str, Any]:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = await client.post("/webhook", content=content, headers={"Content-Type": "application/json", **headers})
    assert response.status_code == 200  # always: the verdict is in the body
    assert response.headers["content-type"] == "application/json"
    answer: dict[str, Any] = response.json()
    return answer


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


async def test_v1_review_of_a_gpu_pod_is_patched_and_echoed(client: httpx.AsyncClient) -> None:
    review = fixture("review-v1-gpu-pod.json")
    answer = await post(client, review)
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is True
    assert response["status"] == {"code": 200}
    ops = decoded_patch(response)
    assert ops == [{"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"}]
    patched = apply_patch(review["request"]["object"], ops)
    original = review["request"]["object"]
    assert patched["spec"].pop("schedulerName") == "hami-scheduler"
    original["spec"].pop("schedulerName")
    assert patched == original  # nothing else changed: managedFields, volumes, status all untouched


async def test_v1beta1_review_is_answered_in_v1beta1(client: httpx.AsyncClient) -> None:
    review = fixture("review-v1beta1-gpu-pod.json")
    answer = await post(client, review)
    assert answer["apiVersion"] == "admission.k8s.io/v1beta1"
    response = answer["response"]
    assert response["uid"] == "5d2f9a4e-1111-2222-3333-444455556666"
    assert response["allowed"] is True
    ops = decoded_patch(response)
    assert ops == [
        {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores", "value": "100"},
        {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"},
    ]
    patched = apply_patch(review["request"]["object"], ops)
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "2",
        "nvidia.com/gpucores": "100",
    }


async def test_a_review_without_apiversion_is_answered_in_v1(client: httpx.AsyncClient) -> None:
    review = fixture("review-v1-gpu-pod.json")
    del review["apiVersion"], review["kind"]
    answer = await post(client, review)
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["response"]["allowed"] is True


async def test_a_pod_without_devices_gets_no_patch(client: httpx.AsyncClient) -> None:
    review = fixture("review-v1-gpu-pod.json")
    review["request"]["object"]["spec"]["containers"] = [{"name": "web", "image": "nginx"}]
    response = (await post(client, review))["response"]
    assert response == {"uid": review["request"]["uid"], "allowed": True, "status": {"code": 200}}


@pytest.mark.parametrize("devices", [True, False], ids=["gpu-pod", "no-devices"])
async def test_a_pod_carrying_dra_requests_is_refused(client: httpx.AsyncClient, devices: bool) -> None:
    review = fixture("review-v1-gpu-pod.json")
    pod = review["request"]["object"]
    if not devices:
        pod["spec"]["containers"] = [{"name": "web", "image": "nginx"}]
    pod["spec"]["schedulerName"] = "hami-scheduler"
    pod["metadata"].setdefault("labels", {})["hami.io/dra"] = "true"
    pod["metadata"].setdefault("annotations", {})["hami.io/dra-requests"] = json.dumps(
        {"x-main-b2c4d": {"container": "main", "section": "containers", "resources": {"nvidia.com/gpu": "8"}}}
    )
    response = (await post(client, review))["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"].startswith(
        "metadata.annotations[hami.io/dra-requests]: is written by hami's DRA-mode webhook only"
    )


async def test_a_denial_is_403_forbidden_with_the_message(client: httpx.AsyncClient) -> None:
    review = fixture("review-v1-gpu-pod.json")
    review["request"]["object"]["spec"]["nodeName"] = "node-a"
    response = (await post(client, review))["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["reason"] == "Forbidden"
    assert response["status"]["message"].startswith(
        "pod has node assigned: spec.nodeName is 'node-a' but containers[0](train)"
    )
    assert "patch" not in response


async def test_an_invalid_quantity_is_denied_naming_container_and_resource(client: httpx.AsyncClient) -> None:
    review = fixture("review-v1-gpu-pod.json")
    review["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "200"
    status = (await post(client, review))["response"]["status"]
    assert status["code"] == 403
    assert status["message"] == (
        "containers[0](train).limits[nvidia.com/gpumem-percentage]: must be an integer between 0 and 100 (got '200')"
    )


async def test_another_schedulers_pod_is_allowed_with_a_message(client: httpx.AsyncClient) -> None:
    review = fixture("review-v1-gpu-pod.json")
    review["request"]["object"]["spec"]["schedulerName"] = "volcano"
    response = (await post(client, review))["response"]
    assert response["allowed"] is True
    assert response["status"] == {"code": 200, "message": "pod already has different scheduler assigned"}


async def test_quota_from_the_extenders_state_is_applied(client: httpx.AsyncClient, extender: Extender) -> None:
    from hami.protocol.objects import ObjectMeta, ResourceQuota, ResourceQuotaSpec

    extender.on_quota(
        ResourceQuota(
            metadata=ObjectMeta(name="gpu", namespace="ml"),
            spec=ResourceQuotaSpec(hard={"limits.nvidia.com/gpumem": "1000"}),
        )
    )
    status = (await post(client, fixture("review-v1-gpu-pod.json")))["response"]["status"]
    assert status["code"] == 403
    assert status["message"].startswith("exceeding resource quota: namespace ml has 0 of nvidia.com/gpumem in use")


async def test_operations_other_than_create_pass_unchanged(client: httpx.AsyncClient) -> None:
    review = fixture("review-v1-gpu-pod.json")
    review["request"]["operation"] = "UPDATE"
    response = (await post(client, review))["response"]
    assert response == {"uid": review["request"]["uid"], "allowed": True, "status": {"code": 200}}


# --- transport and malformed reviews: allowed false, a status code and a message, never a crash --------


async def test_an_empty_body_is_400(client: httpx.AsyncClient) -> None:
    response = (await post(client, b""))["response"]
    assert response == {"uid": "", "allowed": False, "status": {"code": 400, "message": "request body is empty"}}


@pytest.mark.parametrize(
    "content_type",
    [pytest.param("text/plain", id="text/plain is refused"), pytest.param("application/yaml", id="yaml is refused")],
)
async def test_a_wrong_content_type_is_400(client: httpx.AsyncClient, content_type: str) -> None:
    body = json.dumps(fixture("review-v1-gpu-pod.json")).encode()
    response = (await post(client, body, **{"Content-Type": content_type}))["response"]
    assert response["status"] == {"code": 400, "message": f"contentType={content_type}, expected application/json"}
    assert response["allowed"] is False


async def test_a_charset_parameter_is_accepted(client: httpx.AsyncClient) -> None:
    body = json.dumps(fixture("review-v1-gpu-pod.json")).encode()
    response = (await post(client, body, **{"Content-Type": "application/json; charset=utf-8"}))["response"]
    assert response["allowed"] is True


async def test_a_body_over_7_mib_is_413(client: httpx.AsyncClient) -> None:
    body = b"{" + b" " * WEBHOOK_BODY_LIMIT + b"}"
    response = (await post(client, body))["response"]
    assert response["status"] == {"code": 413, "message": "request entity is too large; limit is 7340032 bytes"}


async def test_a_body_just_under_the_limit_is_read(client: httpx.AsyncClient) -> None:
    review = fixture("review-v1-gpu-pod.json")
    text = json.dumps(review)
    body = (text[:-1] + " " * (WEBHOOK_BODY_LIMIT - len(text)) + "}").encode()
    assert len(body) == WEBHOOK_BODY_LIMIT
    assert (await post(client, body))["response"]["allowed"] is True


MALFORMED = [
    pytest.param(b"{not json", "body: not valid JSON", id="not JSON"),
    pytest.param(b"[1, 2]", "body: an AdmissionReview must be a JSON object", id="a JSON array"),
    pytest.param(b'{"request":"\xff"}', "body: contains bytes that are not UTF-8", id="bad UTF-8"),
    pytest.param(b'{"request":' + b"[" * 50_000 + b"]" * 50_000 + b"}", "body: is nested too deeply", id="nested"),
    pytest.param(
        {"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": {}},
        "apiVersion: expected admission.k8s.io/v1 or admission.k8s.io/v1beta1 (got 'admission.k8s.io/v2')",
        id="an unknown apiVersion",
    ),
    pytest.param({"kind": "Pod"}, "kind: expected AdmissionReview (got 'Pod')", id="not an AdmissionReview"),
    pytest.param({"kind": "AdmissionReview"}, "request: the AdmissionReview has no request", id="no request"),
    pytest.param({"request": {"object": {}}}, "request.uid: the request has no uid", id="a request without uid"),
    pytest.param(
        {"request": {"uid": "u1"}},
        "request.object: there is no content to decode",
        id="a request without object",
    ),
    pytest.param(
        {"request": {"uid": "u1", "object": {}}},
        "request.object: there is no content to decode (got {})",
        id="an empty object",
    ),
    pytest.param(
        {"request": {"uid": "u1", "object": "pod"}},
        "request.object: the object must be a JSON object (got 'pod')",
        id="an object that is a string",
    ),
    pytest.param(
        {"request": {"uid": "u1", "kind": {"kind": "Service"}, "object": {"spec": {}}}},
        "request.kind: hami admits pods only (got 'Service')",
        id="not a pod kind",
    ),
]


@pytest.mark.parametrize(("body", "message"), MALFORMED)
async def test_a_malformed_review_is_400_with_a_message(
    client: httpx.AsyncClient, body: bytes | dict[str, Any], message: str
) -> None:
    response = (await post(client, body))["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    assert response["status"]["message"].startswith(message)


async def test_a_pod_that_does_not_decode_is_400_and_echoes_uid(client: httpx.AsyncClient) -> None:
    body = {
        "apiVersion": "admission.k8s.io/v1beta1",
        "request": {"uid": "u2", "object": {"spec": {"containers": [{"name": 5}]}}},
    }
    answer = await post(client, body)
    assert answer["apiVersion"] == "admission.k8s.io/v1beta1"
    assert answer["response"]["uid"] == "u2"
    assert answer["response"]["status"]["code"] == 400
    assert answer["response"]["status"]["message"].startswith("request.object: not a pod: ")


async def test_a_bug_in_the_decision_is_500_and_the_server_keeps_serving(client: httpx.AsyncClient) -> None:
    class Broken(Admission):
        def review(self, raw: Any, namespace: str = "") -> Any:
            raise RuntimeError("boom")

    base = make_extender()
    broken = Broken(base.vendors, {}, base.defaults, AdmissionSettings())
    app = Starlette(routes=[webhook_route(broken)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://x") as c:
        response = (await post(c, fixture("review-v1-gpu-pod.json")))["response"]
        assert response["status"] == {"code": 500, "message": "internal error: RuntimeError: boom"}
        response = (await post(c, b""))["response"]
        assert response["status"]["code"] == 400


async def test_get_is_not_allowed(client: httpx.AsyncClient) -> None:
    assert (await client.get("/webhook")).status_code == 405


async def test_the_latency_of_webhook_calls_is_recorded(client: httpx.AsyncClient, extender: Extender) -> None:
    await post(client, fixture("review-v1-gpu-pod.json"))
    count = extender.metrics.registry.get_sample_value("hami_request_duration_seconds_count", {"endpoint": "webhook"})
    assert count == 1


async def test_a_pod_with_too_many_containers_is_refused_before_any_work(client: httpx.AsyncClient) -> None:
    containers = [{"name": f"c{i}", "image": "x"} for i in range(MAX_CONTAINERS + 1)]
    body = {"request": {"uid": "u3", "object": {"metadata": {"name": "p"}, "spec": {"containers": containers}}}}
    response = (await post(client, body))["response"]
    assert response["allowed"] is False
    assert response["status"] == {
        "code": 400,
        "message": "request.object.spec.containers: a pod hami admits has at most 1000 containers "
        "(app, init and ephemeral) (got 1001)",
    }


async def test_a_pod_with_the_most_containers_allowed_is_admitted(client: httpx.AsyncClient) -> None:
    containers = [{"name": f"c{i}", "image": "x"} for i in range(MAX_CONTAINERS)]
    body = {"request": {"uid": "u4", "object": {"metadata": {"name": "p"}, "spec": {"containers": containers}}}}
    assert (await post(client, body))["response"]["allowed"] is True
