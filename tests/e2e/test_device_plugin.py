"""End to end: ``hami device-plugin`` (a real process, fake NVML) against the real API server and a fake kubelet.

The plugin registers its node's GPUs; a pod is bound and annotated exactly as hami's scheduler leaves it after
Filter and Bind (node lock held); the fake kubelet calls Allocate over the plugin's unix socket and gets the
scheduler's GPU and limits; the pod ends with bind-phase ``success``, its allocation consumed and the node lock
gone; SIGTERM stops the plugin cleanly. On a MIG node (second test) the plugin reconciles the MIG instances at
start-up and creates a MIG pod's reserved instance at Allocate. The plugin runs as the chart's device-plugin
ServiceAccount with a token bound to a pod on its node (``tests/e2e/identities.py``), under the chart's
node-restriction policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from hami.deviceplugin import kubeletapi as api
from hami.protocol.nodelock import NodeLock, encode_node_lock
from tests.e2e.cluster import ControlPlane, KubeClient
from tests.e2e.identities import chart_identities

NODE = "hami-dp-e2e-1"
WAIT = 30.0
FIXTURE = """
devices:
  - {uuid: GPU-e2e-0, name: Tesla T4, memory_mib: 15360, numa: 0}
  - {uuid: GPU-e2e-1, name: Tesla T4, memory_mib: 15360, numa: 1}
"""
REGISTER = (
    '[{"id":"GPU-e2e-0","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4","mode":"hami-core",'
    '"health":true},{"id":"GPU-e2e-1","index":1,"count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4",'
    '"numa":1,"mode":"hami-core","health":true}]'
)


class FakeKubelet:
    def __init__(self) -> None:
        self.requests: asyncio.Queue[api.RegisterRequest] = asyncio.Queue()

    async def Register(self, request: api.RegisterRequest, context: Any) -> api.Empty:
        await self.requests.put(request)
        return api.Empty()


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


@pytest.fixture
def sockets() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hdpe2e", dir="/tmp"))  # unix socket paths must stay short
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def plugin_kubeconfig(control_plane: ControlPlane, make_node: Callable[..., dict[str, Any]]) -> Iterator[Path]:
    """The GPU node, and a kubeconfig for the chart's device-plugin ServiceAccount bound to a pod on it."""
    make_node(NODE, labels={"gpu": "on"}, extended={"nvidia.com/gpu": 20})
    with chart_identities(control_plane).device_plugin(NODE) as kubeconfig:
        yield kubeconfig


def stand_in_hami_core(hook: Path) -> Path:
    """A hook path whose vgpu/ holds a stand-in for HAMi-core's library (an ELF header is what the plugin checks)."""
    (hook / "vgpu").mkdir(parents=True)
    (hook / "vgpu" / "libvgpu.so.v2.10.0").write_bytes(b"\x7fELF" + bytes(60))
    return hook


async def until(check: Callable[[], Any], what: str) -> Any:
    async with asyncio.timeout(WAIT):
        while True:
            value = await asyncio.to_thread(check)
            if value:
                return value
            await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")  # pragma: no cover


async def test_plugin_registers_and_serves_allocate(
    plugin_kubeconfig: Path,
    kube: KubeClient,
    namespace: str,
    sockets: Path,
    tmp_path: Path,
) -> None:
    fixture = tmp_path / "gpus.yaml"
    fixture.write_text(FIXTURE)
    hook = stand_in_hami_core(tmp_path / "hook")
    log = tmp_path / "plugin.log"
    async with fake_kubelet(sockets) as kubelet:
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "hami.deviceplugin",
                f"--node-name={NODE}",
                f"--fake-nvml={fixture}",
                f"--kubeconfig={plugin_kubeconfig}",
                f"--plugin-dir={sockets}",
                f"--hook-path={hook}",
                f"--node-config-file={tmp_path / 'absent.json'}",
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )
        try:
            request = await asyncio.wait_for(kubelet.requests.get(), WAIT)
            assert (request.version, request.resource_name) == ("v1beta1", "nvidia.com/gpu")

            def registered() -> bool:
                notes = kube.get(f"/api/v1/nodes/{NODE}")["metadata"].get("annotations", {})
                return bool(notes.get("hami.io/node-nvidia-register") == REGISTER)

            await until(registered, "the register annotation")

            # The pod as hami's scheduler leaves it: Filter's annotations, then Bind's lock, phase and binding.
            allocation = "GPU-e2e-1,NVIDIA,3000,30:;"
            now = datetime.now(UTC)
            kube.create_pod(
                namespace,
                "gpu-pod",
                limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30},
                node_name=NODE,
                annotations={
                    "hami.io/vgpu-node": NODE,
                    "hami.io/vgpu-time": str(int(now.timestamp())),
                    "hami.io/vgpu-devices-to-allocate": allocation,
                    "hami.io/vgpu-devices-allocated": allocation,
                    "hami.io/bind-time": str(int(now.timestamp())),
                    "hami.io/bind-phase": "allocating",
                },
            )
            kube.set_node_annotations(
                NODE,
                {"hami.io/mutex.lock": encode_node_lock(NodeLock(now.replace(microsecond=0), namespace, "gpu-pod"))},
            )

            async with grpc.aio.insecure_channel(f"unix://{sockets / 'hami-nvidia.sock'}") as channel:
                client = api.DevicePluginClient(channel)
                first = await anext(aiter(client.list_and_watch()))
                assert len(first.devices) == 20
                response = await client.allocate(
                    api.AllocateRequest(
                        container_requests=[api.ContainerAllocateRequest(devices_ids=[first.devices[0].id])]
                    )
                )
            (ctr,) = response.container_responses
            assert ctr.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-e2e-1"
            assert ctr.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
            assert ctr.envs["CUDA_DEVICE_SM_LIMIT"] == "30"
            pod = kube.get_pod(namespace, "gpu-pod")
            assert pod["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
            assert pod["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"] == ";"
            assert pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] == allocation
            notes = kube.get(f"/api/v1/nodes/{NODE}")["metadata"].get("annotations", {})
            assert "hami.io/mutex.lock" not in notes
            assert (hook / "vgpu" / "containers" / f"{pod['metadata']['uid']}_main").is_dir()
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(process.wait(), WAIT)
    output = log.read_text()
    assert code == 0, output
    assert "device plugin stopped" in output
    assert not (sockets / "hami-nvidia.sock").exists()


async def test_without_hami_core_the_node_gets_whole_gpus_and_a_warning_event(
    plugin_kubeconfig: Path, kube: KubeClient, sockets: Path, tmp_path: Path
) -> None:
    """No libvgpu.so under the hook path: the plugin registers each GPU with one share (no pod shares a card it
    cannot be isolated on) and records HAMiCoreMissing on its Node, under the chart's identity and policy."""
    fixture = tmp_path / "gpus.yaml"
    fixture.write_text(FIXTURE)
    log = tmp_path / "plugin.log"
    async with fake_kubelet(sockets) as kubelet:
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "hami.deviceplugin", f"--node-name={NODE}", f"--fake-nvml={fixture}",
                f"--kubeconfig={plugin_kubeconfig}", f"--plugin-dir={sockets}", f"--hook-path={tmp_path / 'hook'}",
                f"--node-config-file={tmp_path / 'absent.json'}", stdout=out, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
        try:
            await asyncio.wait_for(kubelet.requests.get(), WAIT)

            def registered() -> bool:
                notes = kube.get(f"/api/v1/nodes/{NODE}")["metadata"].get("annotations", {})
                return bool(notes.get("hami.io/node-nvidia-register") == REGISTER.replace('"count":10', '"count":1'))

            def warned() -> list[dict[str, Any]]:
                events = kube.get("/api/v1/events", fieldSelector=f"involvedObject.name={NODE}")["items"]
                return [e for e in events if e["reason"] == "HAMiCoreMissing"]

            await until(registered, "the register annotation with whole GPUs")
            (event,) = await until(warned, "the HAMiCoreMissing event")
            assert (event["type"], event["involvedObject"]["kind"]) == ("Warning", "Node")
            assert "GPUs are advertised whole (one pod per GPU instead of 10 shares)" in event["message"]
            async with grpc.aio.insecure_channel(f"unix://{sockets / 'hami-nvidia.sock'}") as channel:
                first = await anext(aiter(api.DevicePluginClient(channel).list_and_watch()))
                assert len(first.devices) == 2
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(process.wait(), WAIT)
    assert code == 0, log.read_text()
    assert "ERROR hami.deviceplugin: HAMi-core is not installed on this node" in log.read_text()


MIG_NODE_CONFIG = json.dumps({"nodeconfig": [{"name": NODE, "operatingmode": "mig"}]})
MIG_DEVICE_CONFIG = """
nvidia:
  migProfileAllowlist:
    - models: ["A100-SXM4-40GB"]
      profiles: ["1g.5gb", "3g.20gb"]
"""
MIG_FIXTURE = """
devices:
  - uuid: GPU-e2e-mig
    name: NVIDIA A100-SXM4-40GB
    memory_mib: 40960
    mig: true
    profiles:
      - {id: 19, name: 1g.5gb, memory_mib: 4864, slices: 1, instances: 7,
         placements: [[0, 1], [1, 1], [2, 1], [3, 1], [4, 1], [5, 1], [6, 1]]}
      - {id: 9, name: 3g.20gb, memory_mib: 19968, slices: 3, instances: 2, placements: [[0, 4], [4, 4]]}
    instances:   # left by the plugin's previous run
      - {gi: 1, profile: 9, placement: [0, 4], ci: 0, uuid: MIG-e2e-held}
      - {gi: 3, profile: 19, placement: [5, 1], ci: 0, uuid: MIG-e2e-stale}
"""


def mig_reservation(start: int, size: int, profile: str, **runtime: object) -> str:
    entry = {
        "containerIndex": 0,
        "deviceIndex": 0,
        "gpuUUID": "GPU-e2e-mig",
        "profile": profile,
        "placement": {"start": start, "size": size},
        **runtime,
    }
    return json.dumps([entry], separators=(",", ":"))


async def test_mig_pod_gets_its_instance_and_restart_reconciliation_keeps_held_ones(
    plugin_kubeconfig: Path,
    kube: KubeClient,
    namespace: str,
    sockets: Path,
    tmp_path: Path,
) -> None:
    """A plugin (re)starting on a MIG node keeps the instance a running pod holds and destroys the one nobody
    holds; then a MIG pod's Allocate creates its reserved instance and hands over its MIG device by CDI name."""
    fixture = tmp_path / "gpus.yaml"
    fixture.write_text(MIG_FIXTURE)
    (tmp_path / "config.json").write_text(MIG_NODE_CONFIG)
    (tmp_path / "device-config.yaml").write_text(MIG_DEVICE_CONFIG)
    cdi_dir = tmp_path / "cdi"
    spec_file = cdi_dir / "hami-nvidia-gpu.json"
    now = datetime.now(UTC)
    slot = "GPU-e2e-mig,NVIDIA,19968,43:;"
    kube.create_pod(
        namespace,
        "holder",
        limits={"nvidia.com/gpu": 1},
        node_name=NODE,
        annotations={
            "hami.io/vgpu-node": NODE,
            "hami.io/vgpu-devices-allocated": slot,
            "hami.io/vgpu-devices-to-allocate": ";",
            "hami.io/bind-phase": "success",
            "hami.io/vgpu-mig-allocations": mig_reservation(
                0, 4, "3g.20gb", migUUID="MIG-e2e-held", gpuInstanceID=1, computeInstanceID=0
            ),
        },
    )
    kube.patch(f"/api/v1/namespaces/{namespace}/pods/holder/status", {"status": {"phase": "Running"}})
    log = tmp_path / "plugin.log"
    async with fake_kubelet(sockets) as kubelet:
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "hami.deviceplugin",
                f"--node-name={NODE}",
                f"--fake-nvml={fixture}",
                f"--kubeconfig={plugin_kubeconfig}",
                f"--plugin-dir={sockets}",
                f"--hook-path={tmp_path / 'hook'}",
                f"--node-config-file={tmp_path / 'config.json'}",
                f"--device-config-file={tmp_path / 'device-config.yaml'}",
                "--device-list-strategy=cdi-cri,envvar",
                f"--cdi-spec-dir={cdi_dir}",
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )
        try:
            await asyncio.wait_for(kubelet.requests.get(), WAIT)

            def spec_devices() -> list[str]:
                try:
                    return [d["name"] for d in json.loads(spec_file.read_text())["devices"]]
                except (OSError, ValueError):
                    return []

            # Start-up reconciliation: the stale instance is gone, the held one stays (the spec lists what exists).
            await until(lambda: spec_devices() == ["GPU-e2e-mig", "MIG-e2e-held"], "the reconciled CDI spec")

            def registered() -> bool:
                notes = kube.get(f"/api/v1/nodes/{NODE}")["metadata"].get("annotations", {})
                return '"mode":"mig","migProfiles":[{"name":"1g.5gb"' in notes.get("hami.io/node-nvidia-register", "")

            await until(registered, "the MIG register annotation")

            kube.create_pod(
                namespace,
                "mig-pod",
                limits={"nvidia.com/gpu": 1},
                node_name=NODE,
                annotations={
                    "hami.io/vgpu-node": NODE,
                    "hami.io/vgpu-time": str(int(now.timestamp())),
                    "hami.io/vgpu-devices-to-allocate": "GPU-e2e-mig,NVIDIA,4864,15:;",
                    "hami.io/vgpu-devices-allocated": "GPU-e2e-mig,NVIDIA,4864,15:;",
                    "hami.io/vgpu-mig-allocations": mig_reservation(6, 1, "1g.5gb"),
                    "hami.io/bind-time": str(int(now.timestamp())),
                    "hami.io/bind-phase": "allocating",
                },
            )
            kube.set_node_annotations(
                NODE,
                {"hami.io/mutex.lock": encode_node_lock(NodeLock(now.replace(microsecond=0), namespace, "mig-pod"))},
            )
            async with grpc.aio.insecure_channel(f"unix://{sockets / 'hami-nvidia.sock'}") as channel:
                client = api.DevicePluginClient(channel)
                first = await anext(aiter(client.list_and_watch()))
                assert len(first.devices) == 7  # the largest instance count of an allowed profile
                response = await client.allocate(
                    api.AllocateRequest(
                        container_requests=[api.ContainerAllocateRequest(devices_ids=[first.devices[0].id])]
                    )
                )
            (ctr,) = response.container_responses
            mig_uuid = ctr.envs["NVIDIA_VISIBLE_DEVICES"]
            assert mig_uuid.startswith("MIG-")
            assert mig_uuid not in {"MIG-e2e-held", "MIG-e2e-stale"}
            assert [d.name for d in ctr.cdi_devices] == [f"k8s.device-plugin.nvidia.com/gpu={mig_uuid}"]
            assert "CUDA_DEVICE_MEMORY_LIMIT_0" not in ctr.envs  # the MIG instance is the limit
            pod = kube.get_pod(namespace, "mig-pod")
            notes = pod["metadata"]["annotations"]
            assert notes["hami.io/bind-phase"] == "success"
            assert notes["hami.io/vgpu-devices-to-allocate"] == ";"
            (entry,) = json.loads(notes["hami.io/vgpu-mig-allocations"])
            assert entry["migUUID"] == mig_uuid
            assert entry["placement"] == {"start": 6, "size": 1}
            assert {"gpuInstanceID", "computeInstanceID"} <= set(entry)
            assert sorted(spec_devices()) == sorted(["GPU-e2e-mig", "MIG-e2e-held", mig_uuid])
            assert "hami.io/mutex.lock" not in kube.get(f"/api/v1/nodes/{NODE}")["metadata"].get("annotations", {})
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(process.wait(), WAIT)
    output = log.read_text()
    assert code == 0, output
    assert "destroyed MIG instance nobody holds: GPU-e2e-mig/GI 3 (MIG-e2e-stale)" in output
