"""/metrics: HAMi's metric names and labels (so its Grafana dashboards work) plus hami's own (spec webhook §5)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hami.protocol import keys
from hami.protocol.extender import BindingArgs
from hami.server.app import build_metrics_app
from tests.unit.server.support import NS, World, garbage_node, gpu_node, gpu_pod

Samples = dict[str, list[tuple[dict[str, str], float]]]
MIB = 1048576


@pytest.fixture
async def scrape(world: World) -> AsyncIterator[Callable[[], Awaitable[Samples]]]:
    transport = httpx.ASGITransport(app=build_metrics_app(world.metrics))
    async with httpx.AsyncClient(transport=transport, base_url="http://hami-metrics") as client:

        async def get() -> Samples:
            response = await client.get("/metrics")
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/plain")
            out: Samples = {}
            for family in text_string_to_metric_families(response.text):
                for sample in family.samples:
                    out.setdefault(sample.name, []).append((sample.labels, sample.value))
            return out

        yield get


async def test_device_and_pod_gauges_use_hami_names_labels_and_zone(
    world: World, scrape: Callable[[], Awaitable[Samples]]
) -> None:
    world.add_node(gpu_node("n1", gpus=1, mem=24000))
    await world.filter(world.add_pod(gpu_pod("p1", mem=3000, cores=30)), ["n1"])

    samples = await scrape()

    device = {"node": "n1", "device_uuid": "GPU-n1-0", "device_index": "0", "device_type": "NVIDIA-A100"}
    zone = {"zone": "vGPU"}
    assert samples["hami_gpu_memory_limit_bytes"] == [(device | zone, 24000 * MIB)]
    assert samples["hami_gpu_core_limit_ratio"] == [(device | zone, 100)]
    assert samples["hami_gpu_memory_allocated_bytes"] == [(device | {"device_cores": "100"} | zone, 3000 * MIB)]
    assert samples["hami_gpu_shared_count"] == [(device | zone, 1)]
    assert samples["hami_gpu_core_allocated_ratio"] == [(device | zone, 30)]
    assert samples["hami_node_gpu_overview"] == [
        (device | {"device_cores": "100", "device_memory_limit": str(24000 * MIB)} | zone, 3000 * MIB)
    ]
    assert samples["hami_node_gpu_memory_allocated_ratio"] == [(device | zone, 0.125)]
    pod = {"namespace": NS, "node": "n1", "pod": "p1", "container_index": "0", "device_uuid": "GPU-n1-0"}
    assert samples["hami_vgpu_memory_allocated_bytes"] == [(pod | zone, 3000 * MIB)]
    assert samples["hami_vgpu_core_allocated_ratio"] == [(pod | zone, 30)]
    assert samples["hami_build_info"][0][1] == 1


async def test_quarantined_nodes_and_undecodable_pods_are_gauges(
    world: World, scrape: Callable[[], Awaitable[Samples]]
) -> None:
    world.add_node(gpu_node("n1"))
    world.add_node(garbage_node("bad"))
    world.add_node(garbage_node("worse"))
    odd = {keys.VGPU_NODE: "n1", keys.NVIDIA_KEYS.allocated: "not,an,allocation"}
    world.add_pod(gpu_pod("odd", annotations=odd))

    samples = await scrape()

    assert samples["hami_quarantined_nodes"] == [({"vendor": "NVIDIA"}, 2)]
    assert samples["hami_pods_undecodable"] == [({}, 1)]
    assert samples["hami_ledger_drift"] == [({}, 0)]


async def test_requests_and_results_are_counted(world: World, scrape: Callable[[], Awaitable[Samples]]) -> None:
    world.add_node(gpu_node("n1", gpus=1))
    await world.filter(world.add_pod(gpu_pod("p1")), ["n1"])
    await world.filter(world.add_pod(gpu_pod("huge", mem=90000)), ["n1"])
    world.deliver(NS, "p1")
    await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    samples = await scrape()

    assert sorted(samples["hami_filter_decisions_total"], key=str) == [
        ({"result": "scheduled"}, 1),
        ({"result": "unschedulable"}, 1),
    ]
    assert samples["hami_bind_results_total"] == [({"result": "bound"}, 1)]
    counts = {s[0]["endpoint"]: s[1] for s in samples["hami_request_duration_seconds_count"]}
    assert counts == {"filter": 2, "bind": 1}
    stages = {s[0]["stage"]: s[1] for s in samples["hami_stage_duration_seconds_count"]}
    assert stages == {"decide": 2, "commit": 1}


async def test_fragmentation_gauges(world: World, scrape: Callable[[], Awaitable[Samples]]) -> None:
    world.add_node(gpu_node("n1", gpus=2, mem=24000))
    await world.filter(world.add_pod(gpu_pod("p1", mem=10000, cores=40)), ["n1"])

    samples = await scrape()

    # binpack/spread aside, one card holds p1: 14000 MiB and 60 cores free there; one more 10000/40 pod fits
    by_card = {labels["device_uuid"]: value for labels, value in samples["hami_gpu_stranded_memory_bytes"]}
    used = next(uuid for uuid, value in by_card.items() if value)
    assert by_card[used] == 4000 * MIB
    assert sorted(by_card.values()) == [0, 4000 * MIB]
    cores = {labels["device_uuid"]: value for labels, value in samples["hami_gpu_stranded_cores_ratio"]}
    assert cores[used] == 20
    largest = {labels["device_uuid"]: value for labels, value in samples["hami_gpu_largest_slice_memory_bytes"]}
    assert sorted(largest.values()) == [14000 * MIB, 24000 * MIB]
    model = {"vendor": "NVIDIA", "device_type": "NVIDIA-A100"}
    assert samples["hami_model_stranded_memory_bytes"] == [(model, 4000 * MIB)]
    assert samples["hami_model_free_cards"] == [(model, 1)]
    assert samples["hami_fragmentation_index"] == [({}, 4000 / 38000)]


async def test_core_gauges_are_percent_of_the_device_s_cores_as_hami_exports_them(
    world: World, scrape: Callable[[], Awaitable[Samples]]
) -> None:
    """A device counting cores in units of its own (AMD's compute units: 304 on an MI300X) is exported as the
    share of them, ceil(used / total × 100), with a limit of 100, as HAMi's scheduler does."""
    world.add_node(gpu_node("n1", gpus=1, mem=24000, cores=304))
    await world.filter(world.add_pod(gpu_pod("p1", mem=3000, cores=30)), ["n1"])

    samples = await scrape()

    assert [value for _, value in samples["hami_gpu_core_limit_ratio"]] == [100]
    assert [value for _, value in samples["hami_gpu_core_allocated_ratio"]] == [10]  # ceil(30 / 304 × 100)
    assert [value for _, value in samples["hami_vgpu_core_allocated_ratio"]] == [10]
    assert samples["hami_gpu_memory_allocated_bytes"][0][0]["device_cores"] == "304"  # the raw count stays a label


def test_core_percent() -> None:
    from hami.server.metrics import core_percent

    assert core_percent(100, 30) == (100, 30)
    assert core_percent(304, 152) == (100, 50)
    assert core_percent(304, 1) == (100, 1)
    assert core_percent(0, 0) == (0, 0)
