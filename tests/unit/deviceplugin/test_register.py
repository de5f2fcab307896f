from __future__ import annotations

import asyncio
import functools

import pytest

from hami.deviceplugin.discovery import GpuSource, discover
from hami.deviceplugin.fakenvml import FakeNvmlLib
from hami.deviceplugin.register import RegisterTiming, Registrar
from hami.deviceplugin.settings import NodeSettings
from hami.deviceplugin.state import DeviceState
from hami.errors import ApiError
from hami.k8s.memory import MemoryCluster
from hami.protocol import keys

from .builders import NODE, node
from .conftest import fake_lib

T4_VALUE = (
    '[{"id":"GPU-0a1","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4","mode":"hami-core",'
    '"health":true},{"id":"GPU-0a2","index":1,"count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4",'
    '"numa":1,"mode":"hami-core","health":true}]'
)


class Stop(Exception):
    """Raised by the fake sleep to end a loop after the rounds a test wants."""


def registrar(
    cluster: MemoryCluster,
    lib: FakeNvmlLib,
    settings: NodeSettings | None = None,
    delays: list[float] | None = None,
    rounds: int = 100,
    state: DeviceState | None = None,
) -> Registrar:
    async def sleep(seconds: float) -> None:
        if delays is not None:
            delays.append(seconds)
            if len(delays) >= rounds:
                raise Stop
        await asyncio.sleep(0)

    source = GpuSource(lib, functools.partial(discover, numa=lib.numa_of))
    return Registrar(
        cluster, NODE, source, state or DeviceState(), settings or NodeSettings(), timing=RegisterTiming(), sleep=sleep
    )


def register_annotation(cluster: MemoryCluster) -> str | None:
    return cluster.nodes[NODE].metadata.annotations.get(keys.NVIDIA_REGISTER)


async def test_the_inventory_is_written_only_when_it_changed() -> None:
    cluster = MemoryCluster(nodes=[node()])
    plugin = registrar(cluster, fake_lib("two-t4"))
    assert await plugin.sync_once() is True
    assert register_annotation(cluster) == T4_VALUE
    assert await plugin.sync_once() is False
    assert cluster.calls.count("patch_node_annotations") == 1


async def test_an_annotation_removed_by_someone_else_is_restored() -> None:
    cluster = MemoryCluster(nodes=[node()])
    plugin = registrar(cluster, fake_lib("two-t4"))
    await plugin.sync_once()
    await cluster.patch_node_annotations(NODE, {keys.NVIDIA_REGISTER: None})
    assert await plugin.sync_once() is True
    assert register_annotation(cluster) == T4_VALUE


async def test_topology_scores_are_published_when_enabled() -> None:
    cluster = MemoryCluster(nodes=[node()])
    await registrar(cluster, fake_lib("two-t4"), NodeSettings(topology_score=True)).sync_once()
    assert cluster.nodes[NODE].metadata.annotations[keys.NVIDIA_SCORE] == (
        '[{"uuid":"GPU-0a1","score":{"GPU-0a2":10}},{"uuid":"GPU-0a2","score":{"GPU-0a1":10}}]'
    )


async def test_without_topology_scoring_no_score_annotation_is_written() -> None:
    cluster = MemoryCluster(nodes=[node()])
    await registrar(cluster, fake_lib("two-t4")).sync_once()
    assert keys.NVIDIA_SCORE not in cluster.nodes[NODE].metadata.annotations


async def test_nvml_errors_are_logged_and_retried_after_5s_then_30s(caplog: pytest.LogCaptureFixture) -> None:
    cluster = MemoryCluster(nodes=[node()])
    lib = fake_lib("two-t4")
    lib.fail_next("device_count", "UNKNOWN", "GPU_IS_LOST")
    delays: list[float] = []
    with pytest.raises(Stop):
        await registrar(cluster, lib, delays=delays, rounds=4).run()
    assert delays == [5.0, 5.0, 30.0, 30.0]
    assert "registration failed, retrying in 5s: cannot use NVML (NVML device_count: UNKNOWN" in caplog.text
    assert register_annotation(cluster) == T4_VALUE


async def test_api_errors_are_retried_after_5s() -> None:
    cluster = MemoryCluster(nodes=[node()])
    cluster.fail("patch_node_annotations", ApiError("connection refused"))
    delays: list[float] = []
    with pytest.raises(Stop):
        await registrar(cluster, fake_lib("two-t4"), delays=delays, rounds=2).run()
    assert delays == [5.0, 30.0]
    assert register_annotation(cluster) == T4_VALUE


async def test_a_health_change_is_registered_without_waiting_30s() -> None:
    cluster = MemoryCluster(nodes=[node()])
    state = DeviceState()
    forever = asyncio.Event()

    async def sleep(seconds: float) -> None:
        await forever.wait()

    lib = fake_lib("two-t4")
    source = GpuSource(lib, functools.partial(discover, numa=lib.numa_of))
    plugin = Registrar(cluster, NODE, source, state, NodeSettings(), sleep=sleep)
    task = asyncio.create_task(plugin.run())
    try:
        await asyncio.wait_for(state.discovered.wait(), 5)
        while register_annotation(cluster) != T4_VALUE:
            await asyncio.sleep(0.01)
        await state.set_health("GPU-0a2", healthy=False)
        async with asyncio.timeout(5):
            while '"health":true}]' in (register_annotation(cluster) or ""):
                await asyncio.sleep(0.01)
        assert (register_annotation(cluster) or "").endswith('"numa":1,"mode":"hami-core"}]')
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_asymmetric_links_raise_one_node_event_an_hour() -> None:
    cluster = MemoryCluster(nodes=[node()])
    now = [0.0]
    lib = fake_lib("dgx4")
    source = GpuSource(lib, functools.partial(discover, numa=lib.numa_of))
    settings = NodeSettings(topology_score=True)
    plugin = Registrar(cluster, NODE, source, DeviceState(), settings, clock=lambda: now[0])
    await plugin.sync_once()
    now[0] = 3599.0
    await plugin.sync_once()
    assert [(e.involved.kind, e.involved.name, e.type, e.reason) for e in cluster.events] == [
        ("Node", NODE, "Warning", "AsymmetricGPUP2PLink")
    ]
    assert cluster.events[0].message == (
        "GPUs GPU-b and GPU-d report different P2P links to each other (INTERNAL, 0 NVLink(s) vs INTERNAL, "
        "1 NVLink(s)); their topology score is 0"
    )
    now[0] = 3601.0
    await plugin.sync_once()
    assert len(cluster.events) == 2
