"""The plugin against a fake kubelet: a real gRPC Registration server on a unix socket, and a real gRPC client
calling the plugin the way kubelet does. The cluster is the in-memory one."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from hami.deviceplugin import kubeletapi as api
from hami.deviceplugin.agent import PluginOptions, run_plugin
from hami.deviceplugin.fakenvml import FakeNvmlLib
from hami.deviceplugin.register import RegisterTiming
from hami.deviceplugin.response import HostFiles
from hami.deviceplugin.server import KubeletPaths, KubeletTiming
from hami.deviceplugin.settings import MigAllowEntry, NodeSettings
from hami.k8s.memory import MemoryCluster
from hami.protocol import keys
from hami.protocol.objects import Pod

from .builders import ALLOCATED, NODE, TO_ALLOCATE, bound_pod, node
from .conftest import fake_lib

WAIT = 10.0  # seconds any single expected event may take


class FakeKubelet:
    """kubelet's Registration service: records every Register call."""

    def __init__(self) -> None:
        self.requests: asyncio.Queue[api.RegisterRequest] = asyncio.Queue()

    async def Register(self, request: api.RegisterRequest, context: Any) -> api.Empty:
        await self.requests.put(request)
        return api.Empty()

    async def next_request(self) -> api.RegisterRequest:
        return await asyncio.wait_for(self.requests.get(), WAIT)


@contextlib.asynccontextmanager
async def fake_kubelet(directory: Path) -> AsyncIterator[FakeKubelet]:
    kubelet = FakeKubelet()
    server = grpc.aio.server()
    api.add_registration_servicer(kubelet, server)
    server.add_insecure_port(f"unix://{directory / api.KUBELET_SOCKET}")
    await server.start()
    try:
        yield kubelet
    finally:
        await server.stop(None)


@dataclass
class Plugin:
    paths: KubeletPaths
    cluster: MemoryCluster
    lib: FakeNvmlLib
    client: api.DevicePluginClient


@contextlib.asynccontextmanager
async def running_plugin(
    directory: Path,
    host_root: Path,
    cluster: MemoryCluster,
    settings: NodeSettings | None = None,
    fixture: str = "two-t4",
) -> AsyncIterator[Plugin]:
    lib = fake_lib(fixture)
    paths = KubeletPaths(directory=directory)

    async def pods_on_node(name: str) -> list[Pod]:
        return [pod for pod in cluster.pods.values() if pod.spec.node_name == name]

    options = PluginOptions(
        node_name=NODE,
        settings=settings or NodeSettings(),
        paths=paths,
        host=HostFiles(root=host_root),
        register_timing=RegisterTiming(interval=30.0, retry=0.05),
        kubelet_timing=KubeletTiming(poll=0.02, retry=0.05),
        numa=lib.numa_of,
        health_poll_ms=20,
    )
    task = asyncio.create_task(run_plugin(lib, cluster, pods_on_node, options))
    try:
        async with grpc.aio.insecure_channel(f"unix://{paths.plugin_socket}") as channel:
            yield Plugin(paths, cluster, lib, api.DevicePluginClient(channel))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def eventually(check: Any) -> None:
    async with asyncio.timeout(WAIT):
        while not check():
            await asyncio.sleep(0.01)


def allocate_request(*containers: list[str]) -> api.AllocateRequest:
    """kubelet's request: one entry per container, each the fake device IDs kubelet picked."""
    return api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devices_ids=c) for c in containers])


def annotations(cluster: MemoryCluster, name: str = "p") -> dict[str, str]:
    return cluster.pods[("default", name)].metadata.annotations


async def test_registers_with_kubelet_and_the_node(short_dir: Path, tmp_path: Path) -> None:
    cluster = MemoryCluster(nodes=[node()])
    async with fake_kubelet(short_dir) as kubelet, running_plugin(short_dir, tmp_path, cluster) as plugin:
        request = await kubelet.next_request()
        assert (request.version, request.endpoint, request.resource_name) == (
            "v1beta1",
            "hami-nvidia.sock",
            "nvidia.com/gpu",
        )
        assert not request.options.get_preferred_allocation_available
        options = await plugin.client.get_device_plugin_options()
        assert (options.pre_start_required, options.get_preferred_allocation_available) == (False, False)
        await eventually(lambda: keys.NVIDIA_REGISTER in cluster.nodes[NODE].metadata.annotations)
    assert not (short_dir / "hami-nvidia.sock").exists()  # removed on shutdown


async def test_list_and_watch_reports_health_changes(short_dir: Path, tmp_path: Path) -> None:
    cluster = MemoryCluster(nodes=[node()])
    settings = NodeSettings(split_count=3, enable_numa_topology=True)
    async with fake_kubelet(short_dir) as kubelet, running_plugin(short_dir, tmp_path, cluster, settings) as plugin:
        await kubelet.next_request()
        stream = aiter(plugin.client.list_and_watch())
        first = await asyncio.wait_for(anext(stream), WAIT)
        assert [(d.id, d.health, [n.id for n in d.topology.nodes]) for d in first.devices] == [
            ("GPU-0a1-0", "Healthy", [0]),
            ("GPU-0a1-1", "Healthy", [0]),
            ("GPU-0a1-2", "Healthy", [0]),
            ("GPU-0a2-0", "Healthy", [1]),
            ("GPU-0a2-1", "Healthy", [1]),
            ("GPU-0a2-2", "Healthy", [1]),
        ]
        plugin.lib.inject_xid("GPU-0a2", 13)  # an application error: no change
        plugin.lib.inject_xid("GPU-0a2", 79)  # fell off the bus
        second = await asyncio.wait_for(anext(stream), WAIT)
        assert [(d.id, d.health) for d in second.devices][2:4] == [("GPU-0a1-2", "Healthy"), ("GPU-0a2-0", "Unhealthy")]
        assert {d.health for d in second.devices[3:]} == {"Unhealthy"}
        register = lambda: cluster.nodes[NODE].metadata.annotations.get(keys.NVIDIA_REGISTER, "")  # noqa: E731
        await eventually(lambda: register().endswith('"numa":1,"mode":"hami-core"}]'))


async def test_allocate_one_container(short_dir: Path, tmp_path: Path) -> None:
    pod = bound_pod("p", "GPU-0a2,NVIDIA,4000,25:;")
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[pod])
    async with fake_kubelet(short_dir) as kubelet, running_plugin(short_dir, tmp_path, cluster) as plugin:
        await kubelet.next_request()
        response = await plugin.client.allocate(allocate_request(["GPU-0a1-4"]))
    (ctr,) = response.container_responses
    assert dict(ctr.envs) == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-0a2",  # the scheduler's choice, not kubelet's fake device
        "CUDA_DEVICE_MEMORY_LIMIT_0": "4000m",
        "CUDA_DEVICE_SM_LIMIT": "25",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": ctr.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"],
    }
    assert ctr.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"].startswith("/usr/local/vgpu/")
    assert [m.container_path for m in ctr.mounts] == [
        "/usr/local/vgpu/libvgpu.so",
        "/usr/local/vgpu",
        "/tmp/vgpulock",
        "/etc/ld.so.preload",
    ]
    assert annotations(cluster)[keys.BIND_PHASE] == "success"
    assert annotations(cluster)[TO_ALLOCATE] == ";"
    assert keys.NODE_LOCK not in cluster.nodes[NODE].metadata.annotations


async def test_allocate_several_containers(short_dir: Path, tmp_path: Path) -> None:
    value = "GPU-0a1,NVIDIA,1000,10:GPU-0a2,NVIDIA,1000,10:;;GPU-0a2,NVIDIA,2000,20:;"
    pod = bound_pod("p", value, containers=("a", "b", "c"))
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[pod])
    async with fake_kubelet(short_dir) as kubelet, running_plugin(short_dir, tmp_path, cluster) as plugin:
        await kubelet.next_request()
        first = await plugin.client.allocate(
            api.AllocateRequest(
                container_requests=[api.ContainerAllocateRequest(devices_ids=["GPU-0a1-0", "GPU-0a1-1"])]
            )
        )
        assert annotations(cluster)[TO_ALLOCATE] == ";;GPU-0a2,NVIDIA,2000,20:;"
        assert annotations(cluster)[keys.BIND_PHASE] == "allocating"
        second = await plugin.client.allocate(allocate_request(["GPU-0a2-9"]))
    assert first.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-0a1,GPU-0a2"
    assert second.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-0a2"
    assert second.container_responses[0].mounts[1].host_path == "/usr/local/vgpu/containers/uid-p_c"
    assert annotations(cluster)[TO_ALLOCATE] == ";;;"
    assert annotations(cluster)[keys.BIND_PHASE] == "success"
    assert keys.NODE_LOCK not in cluster.nodes[NODE].metadata.annotations


@pytest.mark.parametrize(
    ("to_allocate", "message"),
    [
        pytest.param(None, "device request not found", id="missing"),
        pytest.param("GPU-0a1,NVIDIA;", "pod annotation format error", id="corrupted"),
    ],
)
async def test_allocate_with_a_broken_annotation(
    short_dir: Path, tmp_path: Path, to_allocate: str | None, message: str
) -> None:
    pod = bound_pod("p", to_allocate, annotations={ALLOCATED: "GPU-0a1,NVIDIA,1000,10:;"})
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[pod])
    async with fake_kubelet(short_dir) as kubelet, running_plugin(short_dir, tmp_path, cluster) as plugin:
        await kubelet.next_request()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await plugin.client.allocate(allocate_request(["GPU-0a1-0"]))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert message in (info.value.details() or "")
    assert "default/p" in (info.value.details() or "")
    assert annotations(cluster)[keys.BIND_PHASE] == "failed"
    assert keys.NODE_LOCK not in cluster.nodes[NODE].metadata.annotations


async def test_re_registers_when_kubelet_restarts(short_dir: Path, tmp_path: Path) -> None:
    cluster = MemoryCluster(nodes=[node()])
    async with running_plugin(short_dir, tmp_path, cluster) as plugin:
        async with fake_kubelet(short_dir) as kubelet:
            await kubelet.next_request()
        # kubelet restarts: it removes every plugin socket and creates its own anew
        (short_dir / api.KUBELET_SOCKET).unlink(missing_ok=True)
        plugin.paths.plugin_socket.unlink(missing_ok=True)
        async with fake_kubelet(short_dir) as kubelet:
            request = await kubelet.next_request()
            assert request.endpoint == "hami-nvidia.sock"
            await eventually(plugin.paths.plugin_socket.exists)
            options = await plugin.client.get_device_plugin_options()
            assert not options.pre_start_required


async def test_allocate_a_mig_pod_with_cdi(short_dir: Path, tmp_path: Path) -> None:
    """A MIG node with the cdi-cri strategy: Allocate creates the instance, the CDI spec gains its MIG device,
    and kubelet gets the CDI name."""
    mig = '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-0","profile":"1g.5gb","placement":{"start":6,"size":1}}]'
    pod = bound_pod("p", "GPU-0,NVIDIA,4864,15:;", annotations={keys.NVIDIA_MIG_ALLOCATIONS: mig})
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[pod])
    cdi_dir = tmp_path / "cdi"
    settings = NodeSettings(
        operating_mode="mig",
        mig_allowlist=(MigAllowEntry(models=("A100",), profiles=("1g.5gb",)),),
        device_list_strategy=("cdi-cri",),
        cdi_spec_dir=str(cdi_dir),
    )
    spec_file = cdi_dir / "hami-nvidia-gpu.json"
    async with (
        fake_kubelet(short_dir) as kubelet,
        running_plugin(short_dir, tmp_path, cluster, settings, fixture="a100-mig") as plugin,
    ):
        await kubelet.next_request()
        await eventually(spec_file.exists)
        response = await plugin.client.allocate(allocate_request(["GPU-0-0"]))
        (instance,) = plugin.lib.mig_instances(0)
        names = [d["name"] for d in json.loads(spec_file.read_text())["devices"]]
    (ctr,) = response.container_responses
    assert [d.name for d in ctr.cdi_devices] == [f"k8s.device-plugin.nvidia.com/gpu={instance.mig_uuid}"]
    assert dict(ctr.envs) == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert names == ["GPU-0", instance.mig_uuid]
    assert annotations(cluster)[keys.BIND_PHASE] == "success"
    assert f'"migUUID":"{instance.mig_uuid}"' in annotations(cluster)[keys.NVIDIA_MIG_ALLOCATIONS]


async def test_a_socket_it_cannot_listen_on_is_a_clear_error_and_retried(
    short_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # kubelet's socket fits in a unix socket path here, the plugin's longer name does not
    deep = short_dir / ("d" * (92 - len(str(short_dir)) - 1))
    deep.mkdir()
    socket = deep / "hami-nvidia.sock"
    expected = (
        f"kubelet registration failed, retrying in 0.05s: cannot listen on {socket}: "
        "a unix socket path may be at most 107 bytes"
    )
    async with fake_kubelet(deep), running_plugin(deep, tmp_path, MemoryCluster(nodes=[node()])):
        await eventually(lambda: [r.getMessage() for r in caplog.records].count(expected) >= 2)
    assert "Traceback" not in caplog.text
