"""hami dra-plugin's shell: kubelet's two gRPC services over real unix sockets, the ResourceSlice publisher
against a scripted API server, health with recovery, and the PCIe root from sysfs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import msgspec
import pytest

from hami.deviceplugin.discovery import GpuInfo, GpuSource, discover
from hami.deviceplugin.dra import draapi as api
from hami.deviceplugin.dra.guard import HELD_BACK_TAINT
from hami.deviceplugin.dra.inventory import HealthBook, pcie_root, read_inventory
from hami.deviceplugin.dra.plugin import (
    DevicePluginGuard,
    DraPaths,
    DraService,
    InventoryState,
    RegistrationService,
    SlicePublisher,
    publish_loop,
    serve_sockets,
)
from hami.deviceplugin.dra.slices import TAINT_KEY
from hami.deviceplugin.dra.state import ClaimStore, StoreOptions
from hami.deviceplugin.response import HostFiles
from hami.k8s.client import ClientSettings, KubeClient
from hami.k8s.config import KubeConfig
from hami.protocol.dra import ResourceClaim
from hami.protocol.objects import Node, ObjectMeta
from tests.unit.deviceplugin.conftest import fake_lib
from tests.unit.k8s.fakeapi import FakeApi, Reply, Stream, event_line, serve

DRIVER = "hami-core-gpu.project-hami.io"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
OUR_SLICE = f"{SLICES}/node-1-{DRIVER}"


def inventory_of(unhealthy: frozenset[str] = frozenset()) -> Any:
    lib = fake_lib("two-t4")
    lib.init()
    gpus = discover(lib, numa=lib.numa_of)
    return read_inventory(lib, gpus, lost={}, unhealthy=unhealthy, root_of=lambda _: "")


def claim_json(uid: str = "uid-1", device: str = "hami-gpu-0") -> ResourceClaim:
    result = {"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": device, "shareID": "s-1",
              "consumedCapacity": {"memory": "3000Mi", "cores": "30"}}  # fmt: skip
    body = {"metadata": {"namespace": "ns", "name": "c1", "uid": uid},
            "status": {"allocation": {"devices": {"results": [result]}}}}  # fmt: skip
    return msgspec.convert(body, type=ResourceClaim)


@pytest.fixture
async def plugin(short_dir: Path, tmp_path: Path) -> AsyncIterator[tuple[DraPaths, ClaimStore, list[str]]]:
    paths = DraPaths(plugin_dir=short_dir / "p", registry_dir=short_dir / "r")
    store = ClaimStore(StoreOptions(plugin_dir=paths.plugin_dir, cdi_dir=tmp_path / "cdi",
                                    host=HostFiles(libvgpu_version="", root=tmp_path / "host")))  # fmt: skip
    state = InventoryState()
    state.set(inventory_of())
    asked: list[str] = []
    claims = {"c1": claim_json()}

    async def read_claim(namespace: str, name: str) -> ResourceClaim:
        asked.append(f"{namespace}/{name}")
        return claims[name]

    service = DraService(store, state, read_claim, pool="node-1")
    async with serve_sockets(service, RegistrationService(paths), paths):
        yield paths, store, asked
    assert not paths.dra_socket.exists()
    assert not paths.registration_socket.exists()


async def test_registration_names_the_driver_the_dra_socket_and_v1(plugin: tuple[DraPaths, Any, Any]) -> None:
    paths = plugin[0]
    assert paths.registration_socket.name == f"{DRIVER}-reg.sock"
    async with grpc.aio.insecure_channel(f"unix://{paths.registration_socket}") as channel:
        client = api.RegistrationClient(channel)
        info = await client.get_info()
        await client.notify(True)
    assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER, str(paths.dra_socket))
    assert list(info.supported_versions) == ["v1.DRAPlugin"]


async def test_prepare_and_unprepare_through_kubelets_api(plugin: tuple[DraPaths, ClaimStore, list[str]]) -> None:
    paths, store, asked = plugin
    async with grpc.aio.insecure_channel(f"unix://{paths.dra_socket}") as channel:
        client = api.DRAPluginClient(channel)
        refs = [api.Claim(namespace="ns", name="c1", uid="uid-1"), api.Claim(namespace="ns", name="c1", uid="old")]
        answer = await client.prepare(refs)
        ok, stale = answer.claims["uid-1"], answer.claims["old"]
        assert ok.error == ""
        (device,) = ok.devices
        assert (list(device.request_names), device.pool_name, device.device_name, device.share_id) == (
            ["gpu"],
            "node-1",
            "hami-gpu-0",
            "s-1",
        )
        assert list(device.cdi_device_ids) == [f"k8s.{DRIVER}/claim=uid-1-hami-gpu-0"]
        assert "metadata.uid" in stale.error
        assert "old" in stale.error
        assert asked == ["ns/c1", "ns/c1"]  # the plugin reads the claim itself
        assert store.prepared() == {"uid-1": "PrepareCompleted"}

        again = await client.prepare([api.Claim(namespace="ns", name="c1", uid="uid-1")])
        assert again.claims["uid-1"] == ok
        gone = await client.unprepare([api.Claim(namespace="ns", name="c1", uid="uid-1"), api.Claim(uid="never")])
        assert gone.claims["uid-1"].error == ""
        assert gone.claims["never"].error == ""
        assert store.prepared() == {}


# --- the publisher --------------------------------------------------------------------------------------------


@pytest.fixture
async def kube() -> AsyncIterator[tuple[FakeApi, KubeClient]]:
    fake = FakeApi()
    fake.memory.put_node(Node(metadata=ObjectMeta(name="node-1", uid="node-uid")))
    async with serve(fake.app) as url:
        settings = ClientSettings(request_timeout=5, retry_jitter=0.0, max_retries=0)
        async with KubeClient(KubeConfig(server=url, token="t"), settings) as client:
            yield fake, client


def slice_list(*items: dict[str, Any]) -> Reply:
    return Reply(body={"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1", "metadata": {},
                       "items": list(items)})  # fmt: skip


async def test_publisher_creates_then_patches_with_resource_version_and_removes_other_slices(
    kube: tuple[FakeApi, KubeClient],
) -> None:
    fake, client = kube
    publisher = SlicePublisher(client, "node-1")
    leftover: dict[str, Any] = {"metadata": {"name": "node-1-hami-core-gpu.project-hami.io-x7k2"},
                "spec": {"pool": {"name": "node-1", "generation": 4}}}  # fmt: skip
    fake.script("GET", SLICES, slice_list(leftover))
    fake.script("POST", SLICES, Reply(201, {}))
    fake.script("DELETE", f"{SLICES}/{leftover['metadata']['name']}", Reply(200, {}))
    assert await publisher.publish(inventory_of()) is True
    (created,) = fake.calls("POST", SLICES)
    body = json.loads(created.body)
    assert body["spec"]["pool"] == {"name": "node-1", "generation": 5, "resourceSliceCount": 1}  # above the leftover
    assert body["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
    assert [d["name"] for d in body["spec"]["devices"]] == ["hami-gpu-0", "hami-gpu-1"]
    assert fake.calls("GET", SLICES)[0].query["fieldSelector"] == f"spec.nodeName=node-1,spec.driver={DRIVER}"
    assert len(fake.calls("DELETE")) == 1

    stored = {**body, "metadata": {**body["metadata"], "resourceVersion": "42"}}
    fake.script("GET", SLICES, slice_list(stored))
    fake.script("GET", OUR_SLICE, Reply(200, stored))
    assert await publisher.publish(inventory_of()) is False  # nothing changed: nothing written
    assert fake.calls("PATCH") == []

    fake.script("GET", SLICES, slice_list(stored))
    fake.script("GET", OUR_SLICE, Reply(200, stored))
    fake.script("PATCH", OUR_SLICE, Reply(200, stored))
    assert await publisher.publish(inventory_of(frozenset({"GPU-0a2"}))) is True
    (patch,) = fake.calls("PATCH", OUR_SLICE)
    sent = json.loads(patch.body)
    assert sent["metadata"] == {"resourceVersion": "42"}
    assert sent["spec"]["pool"]["generation"] == 6
    assert sent["spec"]["devices"][1]["taints"] == [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}]


async def test_publish_loop_taints_a_gpu_discovery_loses_and_lifts_it_when_back(
    kube: tuple[FakeApi, KubeClient],
) -> None:
    _fake, client = kube
    lib = fake_lib("two-t4")
    source = GpuSource(lib, discover)
    published: list[list[str]] = []

    class Recorder(SlicePublisher):
        async def publish(self, inventory: Any, held_back: frozenset[str] = frozenset()) -> bool:
            published.append(sorted(d.name + ("!" if not d.healthy else "") for d in inventory.devices))
            return True

    state = InventoryState()
    task = asyncio.create_task(publish_loop(source, Recorder(client, "node-1"), state, HealthBook(),
                                            rediscover_s=3600, root_of=lambda _: ""))  # fmt: skip
    try:
        await asyncio.wait_for(state.ready.wait(), 5)
        lib.gpus[1].errors["uuid"] = "GPU_IS_LOST"
        state.changed.set()
        while len(published) < 2:
            await asyncio.sleep(0.01)
        del lib.gpus[1].errors["uuid"]
        state.changed.set()
        while len(published) < 3:
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert published == [["hami-gpu-0", "hami-gpu-1"], ["hami-gpu-0", "hami-gpu-1!"], ["hami-gpu-0", "hami-gpu-1"]]


def test_health_book_recovers_after_the_quiet_period_only_while_nvml_answers() -> None:
    book = HealthBook(recover_after_s=300)
    book.critical_xid("GPU-a", now=1000)
    assert book.unhealthy(1100, answering={"GPU-a"}) == {"GPU-a"}
    assert book.unhealthy(1400, answering=set()) == {"GPU-a"}  # not answering: stays tainted
    book.critical_xid("GPU-a", now=1400)
    assert book.unhealthy(1650, answering={"GPU-a"}) == {"GPU-a"}  # a new XID restarts the period
    assert book.unhealthy(1700, answering={"GPU-a"}) == frozenset()


def test_pcie_root_is_resolved_as_kubernetes_does_and_empty_when_unknown(tmp_path: Path) -> None:
    device = tmp_path / "devices" / "pci0000:3a" / "0000:3a:00.0" / "0000:3b:00.0"
    device.mkdir(parents=True)
    links = tmp_path / "bus" / "pci" / "devices"
    links.mkdir(parents=True)
    (links / "0000:3b:00.0").symlink_to("../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0")
    assert pcie_root("00000000:3B:00.0", tmp_path) == "pci0000:3a"
    assert pcie_root("00000000:AF:00.0", tmp_path) == ""  # no such device
    (links / "0000:af:00.0").symlink_to("/elsewhere/0000:af:00.0")
    assert pcie_root("00000000:AF:00.0", tmp_path) == ""  # not under /sys/devices/pci*


def test_gpu_info_fixture_has_minors() -> None:
    lib = fake_lib("two-t4")
    lib.init()
    assert [g.minor for g in discover(lib)] == [0, 1]
    assert isinstance(discover(lib)[0], GpuInfo)


def extender_pod(name: str, uuid: str, rv: str, node: str = "node-1") -> dict[str, Any]:
    """A pod hami placed on node-1's card ``uuid``; ``node=""``: chosen by /filter, not bound yet."""
    annotations = {"hami.io/vgpu-node": "node-1", "hami.io/vgpu-devices-allocated": f"{uuid},NVIDIA,3000,30:;"}
    meta = {"namespace": "ns", "name": name, "uid": f"uid-{name}", "resourceVersion": rv, "annotations": annotations,
            "labels": {"hami.io/vgpu-node": "node-1"}}  # fmt: skip
    spec = {"nodeName": node, "schedulerName": "hami-scheduler"}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


async def test_publish_loop_holds_back_the_cards_device_plugin_pods_hold_and_offers_them_when_they_go(
    kube: tuple[FakeApi, KubeClient],
) -> None:
    """Nothing is published before the first lists of the node's pods (bound: field selector spec.nodeName; chosen
    by hami, not bound yet: label hami.io/vgpu-node); the cards both pods hold are published held back; when the
    watches say the bound pod is gone, its card is published without the taint."""
    fake, client = kube
    pods = "/api/v1/pods"
    listed = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"},
              "items": [extender_pod("a", "GPU-0a2", "9"), extender_pod("b", "GPU-0a1", "8", node="")]}  # fmt: skip
    fake.script("GET", pods, Reply(200, listed), Reply(200, listed))  # one list per watch (the fake filters none)
    fake.script("WATCH", pods, Stream(end="close"), Stream(end="close"))  # empty: resumed after a short backoff
    published: list[tuple[str, ...]] = []

    class Recorder(SlicePublisher):
        async def publish(self, inventory: Any, held_back: frozenset[str] = frozenset()) -> bool:
            published.append(tuple(sorted(held_back)))
            return True

    state = InventoryState()
    guard = DevicePluginGuard(client, "node-1", frozenset({"hami-scheduler"}), state.changed)
    loop = publish_loop(GpuSource(fake_lib("two-t4"), discover), Recorder(client, "node-1"), state, HealthBook(),
                        rediscover_s=3600, root_of=lambda _: "", guard=guard)  # fmt: skip
    loop_task = asyncio.create_task(loop)
    await asyncio.sleep(0.2)
    assert published == []  # the pods are not listed yet: no card is offered before the plugin knows
    watch_task = asyncio.create_task(guard.run())
    try:
        while not published:
            await asyncio.sleep(0.01)
        gone = Stream([event_line("DELETED", extender_pod("a", "GPU-0a2", "11")) + b"\n"], end="hang")
        fake.script("WATCH", pods, gone, gone)
        while len(published) < 2:
            await asyncio.sleep(0.01)
    finally:
        loop_task.cancel()
        watch_task.cancel()
    assert published[:2] == [("GPU-0a1", "GPU-0a2"), ("GPU-0a1",)]
    selectors = {(c.query.get("fieldSelector"), c.query.get("labelSelector")) for c in fake.calls("GET", pods)}
    assert selectors == {("spec.nodeName=node-1", None), (None, "hami.io/vgpu-node=node-1")}


async def test_publisher_taints_held_back_cards_and_keeps_the_servers_taint_times(
    kube: tuple[FakeApi, KubeClient],
) -> None:
    fake, client = kube
    publisher = SlicePublisher(client, "node-1")
    fake.script("GET", SLICES, slice_list())
    fake.script("POST", SLICES, Reply(201, {}))
    assert await publisher.publish(inventory_of(), frozenset({"GPU-0a1"})) is True
    body = json.loads(fake.calls("POST", SLICES)[0].body)
    held = {"key": HELD_BACK_TAINT, "value": "true", "effect": "NoSchedule"}
    assert [d.get("taints") for d in body["spec"]["devices"]] == [[held], None]

    stamped = json.loads(json.dumps(body))
    stamped["metadata"]["resourceVersion"] = "42"
    stamped["spec"]["devices"][0]["taints"][0]["timeAdded"] = "2026-11-29T08:00:00Z"  # the API server stamps it
    fake.script("GET", SLICES, slice_list(stamped))
    fake.script("GET", OUR_SLICE, Reply(200, stamped))
    assert await publisher.publish(inventory_of(), frozenset({"GPU-0a1"})) is False  # unchanged: not written again
    fake.script("GET", SLICES, slice_list(stamped))
    fake.script("GET", OUR_SLICE, Reply(200, stamped))
    fake.script("PATCH", OUR_SLICE, Reply(200, stamped))
    assert await publisher.publish(inventory_of(), frozenset({"GPU-0a1", "GPU-0a2"})) is True
    sent = json.loads(fake.calls("PATCH", OUR_SLICE)[0].body)["spec"]["devices"]
    assert sent[0]["taints"] == [{**held, "timeAdded": "2026-11-29T08:00:00Z"}]  # the first card's time is kept
    assert sent[1]["taints"] == [held]


async def test_a_node_name_no_label_can_hold_is_guarded_by_its_bound_pods_alone(
    kube: tuple[FakeApi, KubeClient],
) -> None:
    fake, client = kube
    node = "n" * 70  # a valid node name, too long for a label value
    listed = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"}, "items": []}
    fake.script("GET", "/api/v1/pods", Reply(200, listed))
    guard = DevicePluginGuard(client, node, frozenset({"hami-scheduler"}), asyncio.Event())
    task = asyncio.create_task(guard.run())
    try:
        await asyncio.wait_for(guard.synced.wait(), 5)
    finally:
        task.cancel()
    ((call),) = fake.calls("GET", "/api/v1/pods")
    assert (call.query.get("fieldSelector"), call.query.get("labelSelector")) == (f"spec.nodeName={node}", None)
