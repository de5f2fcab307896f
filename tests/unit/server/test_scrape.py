"""/metrics written in slices (``hami.server.scrape``): byte for byte what ``generate_latest`` writes for the cluster
gauges, and the event loop gets its turns while a large cluster is scraped."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, generate_latest

from hami.devices.base import ContainerRequest, NodeInventory
from hami.scheduling.decide import decide, reserve
from hami.scheduling.state import ClusterState
from hami.server.metrics import Metrics, _StateCollector
from hami.server.scrape import scrape, state_text
from tests.unit.scheduling.builders import DCU, NVIDIA, gpu, pod_request, resource_quota, vendors


def cluster(nodes: int, gpus: int, pods: int) -> ClusterState:
    """Nodes of NVIDIA GPUs (two models, one unhealthy card, odd characters in a type) and DCUs, pods placed on
    them, a quarantined node, a namespace quota."""
    s = ClusterState(vendors())
    for n in range(nodes):
        cards = tuple(
            gpu(
                f"GPU-{n}-{i}",
                index=i,
                devmem=8192 if i % 3 else 40960,
                type='NVIDIA "A100"\\x' if i == 1 else "NVIDIA-T4",
                health=not (n == 0 and i == 0),
            )
            for i in range(gpus)
        )
        inventories = {NVIDIA: NodeInventory(cards)}
        if n % 2:
            inventories[DCU] = NodeInventory((gpu(f"DCU-{n}", type="DCU-Z100", devmem=16384),))
        s.set_node(f"node-{n}", inventories, problems={NVIDIA: "bad"} if n == 1 else None)
    s.upsert_quota(resource_quota("ns-1", "q", {"limits.nvidia.com/gpumem": 100000}))
    names = list(s.nodes)
    for p in range(pods):
        vendor = DCU if p % 5 == 0 else NVIDIA
        req = pod_request(
            ContainerRequest(vendor, 1, 512 * (1 + p % 4), coresreq=10 * (p % 3)),
            uid=f"u{p}",
            name=f"pod-{p}",
            namespace=f"ns-{p % 3}",
        )
        decision = decide(s, req, names, 1_700_000_000)
        if decision.node is not None:
            reserve(s, req, decision)
    return s


def reference(s: ClusterState, served: ClusterState | None = None) -> str:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_StateCollector(lambda: s, lambda: served))
    return generate_latest(registry).decode()


def test_the_sliced_text_is_what_generate_latest_writes() -> None:
    s = cluster(6, 4, 40)
    text = "".join(state_text(s))
    assert "hami_vgpu_memory_allocated_bytes{" in text
    assert 'device_type="NVIDIA \\"A100\\"\\\\x"' in text
    assert text == reference(s)


def test_an_empty_cluster_writes_every_family_header() -> None:
    s = ClusterState(vendors())
    assert "".join(state_text(s)) == reference(s)


async def test_a_scrape_gives_the_event_loop_turns_and_serves_everything() -> None:
    s = cluster(200, 8, 600)
    metrics = Metrics(lambda: s)
    metrics.binds.labels("ok").inc()
    turns = 0

    async def ticker() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    body = (await scrape(metrics, s, slice_s=0.0)).decode()
    task.cancel()
    assert turns > 20  # slices: the loop ran other work many times during one scrape
    assert body.startswith("# HELP hami_build_info")
    assert 'hami_bind_results_total{result="ok"} 1.0' in body
    assert body.endswith(reference(s))
