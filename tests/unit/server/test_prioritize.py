"""The prioritize verb over HTTP (issue 38): ``ExtenderArgs`` in (node names: nodeCacheCapable), a
``HostPriorityList`` out with the Go field names (``Host``, ``Score``; k8s.io/kube-scheduler/extender/v1 has no JSON
tags), hami's node policy for DRA-mode pods, 0 for every other pod, nothing written."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest

from hami.protocol import keys
from hami.server.app import build_app, build_service_app
from tests.unit.scheduling.drafix import result, shared_device, synthetic_claim, synthetic_slice
from tests.unit.server.support import NS, World, gpu_node, gpu_pod, plain_pod


def dra_pod(requests: str | None, policy: str | None = None) -> dict[str, Any]:
    """A pod as the DRA-mode webhook leaves it: no vendor resources, labelled, its HAMi request kept."""
    pod = plain_pod("dra")
    pod.metadata.labels = {keys.DRA_LABEL: "true"}
    if requests is not None:
        pod.metadata.annotations[keys.DRA_REQUESTS] = requests
    if policy is not None:
        pod.metadata.annotations[keys.NODE_SCHEDULER_POLICY] = policy
    return msgspec.to_builtins(pod)  # type: ignore[no-any-return]


REQUESTS = json.dumps(
    {"dra-main-bcdfg": {"container": "main", "section": "containers", "resources": {"nvidia.com/gpu": "1"}}}
)


@pytest.fixture
async def http(world: World) -> AsyncIterator[httpx.AsyncClient]:
    """Node ``reg`` registers two cards with hami (one half used by an extender pod); ``dra-a`` and ``dra-b`` are
    served by DRA alone, ``dra-b`` with a claim holding most of a card."""
    world.add_node(gpu_node("reg", gpus=2, mem=16384))
    world.add_pod(gpu_pod("ext", mem=8192, cores=50, annotations={}))
    await world.filter(world.pod("ext"), ["reg"])
    for node in ("dra-a", "dra-b"):
        devices = [shared_device(f"gpu-{i}", f"GPU-{node}-{i}", "16Gi", cores=100, cores_default=0) for i in (0, 1)]
        world.extender.on_resource_slice(synthetic_slice(f"s-{node}", node, devices))
    taken = [result("gpu-0", "dra-b", "s1", memory="14Gi", cores="90")]
    world.extender.on_resource_claim(synthetic_claim("c", taken, namespace=NS))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=build_app(world.extender)), base_url="http://hami"
    ) as c:
        yield c


async def prioritize(http: httpx.AsyncClient, pod: dict[str, Any], *nodes: str) -> list[dict[str, Any]]:
    response = await http.post("/prioritize", json={"Pod": pod, "Nodes": None, "NodeNames": list(nodes)})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    answer: list[dict[str, Any]] = response.json()
    return answer


async def test_binpack_orders_the_candidates_fullest_first(world: World, http: httpx.AsyncClient) -> None:
    calls = list(world.cluster.calls)
    answer = await prioritize(http, dra_pod(REQUESTS), "dra-a", "dra-b", "reg")
    assert answer == [{"Host": "dra-a", "Score": 1}, {"Host": "dra-b", "Score": 10}, {"Host": "reg", "Score": 5}]
    assert world.cluster.calls == calls  # nothing read from or written to the API


async def test_spread_orders_them_emptiest_first(http: httpx.AsyncClient) -> None:
    answer = await prioritize(http, dra_pod(REQUESTS, policy="spread"), "dra-a", "dra-b", "reg")
    assert {h["Host"]: h["Score"] for h in answer} == {"dra-a": 10, "dra-b": 1, "reg": 6}


async def test_a_demand_that_fits_nowhere_by_the_ledger_scores_the_node_zero(http: httpx.AsyncClient) -> None:
    big = json.dumps({"c": {"container": "main", "resources": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "9000"}}})
    answer = await prioritize(http, dra_pod(big), "dra-a", "dra-b", "reg")
    assert {h["Host"]: h["Score"] for h in answer} == {"dra-a": 10, "dra-b": 0, "reg": 0}


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(lambda: dra_pod("{not json"), id="bad-annotation"),
        pytest.param(lambda: msgspec.to_builtins(gpu_pod("ext-mode")), id="extender-mode-pod"),
        pytest.param(lambda: msgspec.to_builtins(plain_pod("cpu")), id="no-devices"),
    ],
)
async def test_every_node_scores_zero_for_pods_hami_does_not_order(http: httpx.AsyncClient, pod: Any) -> None:
    answer = await prioritize(http, pod(), "dra-a", "dra-b")
    assert answer == [{"Host": "dra-a", "Score": 0}, {"Host": "dra-b", "Score": 0}]


async def test_a_bad_annotation_is_logged(http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture) -> None:
    await prioritize(http, dra_pod("{not json"), "dra-a")
    assert any(keys.DRA_REQUESTS in r.getMessage() and "every node scores 0" in r.getMessage() for r in caplog.records)


async def test_while_the_caches_sync_every_node_scores_zero(world: World, http: httpx.AsyncClient) -> None:
    world.extender.readiness.synced = lambda: False
    answer = await prioritize(http, dra_pod(REQUESTS), "dra-a", "dra-b")
    assert [h["Score"] for h in answer] == [0, 0]


@pytest.mark.parametrize(
    ("body", "status"),
    [(b"", 400), (b"[1]", 400), (b'{"NodeNames": ["a"]}', 400), (b'{"Pod": 3, "NodeNames": []}', 400)],
)
async def test_a_body_that_is_no_extender_args_is_refused(http: httpx.AsyncClient, body: bytes, status: int) -> None:
    response = await http.post("/prioritize", content=body)
    assert response.status_code == status


async def test_the_service_listener_does_not_serve_it(world: World) -> None:
    app = build_service_app(world.extender, [])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hami") as c:
        response = await c.post("/prioritize", json={"Pod": dra_pod(REQUESTS), "NodeNames": ["dra-a"]})
    assert response.status_code == 404
