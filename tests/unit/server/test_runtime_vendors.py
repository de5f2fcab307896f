"""The runtime's watch handlers with a vendor shaped like the new families (``tests/toyvendor.py``): devices from
the node's capacity, a handshake or none, and a node lock of its own that is watched, released and woken on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection
from typing import Final

import pytest

import hami.server.runtime as runtime_module
from hami.config import DeviceConfig
from hami.devices import vendors_from_config
from hami.devices.base import Vendor
from hami.k8s.tasks import Supervisor
from hami.protocol import keys
from hami.protocol.nodelock import NodeLock, encode_node_lock
from hami.protocol.objects import Node, ObjectMeta, Pod
from tests.toyvendor import ALLOCATED, COUNT, LOCK, TOY, TOY_KEYS, ToyVendor
from tests.unit.server.support import NOW_DT, NS, gpu_pod, make_world
from tests.unit.server.test_runtime import Wired, make_runtime

HANDSHAKE: Final = "toy.example/handshake"


class ShakingToy(ToyVendor):
    """The toy vendor with a handshake annotation (devices still from the capacity)."""

    keys = keys.VendorKeys(TOY, "", HANDSHAKE, None, ALLOCATED, extra=TOY_KEYS.extra, lock=LOCK)


def with_toy(vendor: Vendor) -> object:
    def build(config: DeviceConfig, enabled: Collection[str] | None = None) -> dict[str, Vendor]:
        return {**vendors_from_config(config, enabled), TOY: vendor}

    return build


@pytest.fixture
async def toy_wired(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Wired]:
    monkeypatch.setattr(runtime_module, "vendors_from_config", with_toy(ShakingToy()))
    runtime = make_runtime()
    world = make_world(vendors=runtime.vendors)
    world.extender.state = runtime.state
    async with Supervisor() as supervisor:
        yield Wired(runtime, world, supervisor)


def toy_node(name: str, tpus: int | None, annotations: dict[str, str] | None = None) -> Node:
    node = Node(metadata=ObjectMeta(name=name, annotations=dict(annotations or {})))
    if tpus is not None:
        node.status.capacity[COUNT] = str(tpus)
    return node


@pytest.mark.parametrize(("tpus", "stamped"), [(2, True), (None, False)])
async def test_a_capacity_registered_vendor_is_handshaken_only_where_it_has_devices(
    toy_wired: Wired, tpus: int | None, stamped: bool
) -> None:
    toy_wired.node_event(toy_wired.world.cluster.put_node(toy_node("t1", tpus)))
    await toy_wired.settle()
    value = toy_wired.world.cluster.nodes["t1"].metadata.annotations.get(HANDSHAKE, "")
    assert value.startswith("Requesting_") is stamped
    assert keys.NVIDIA_HANDSHAKE not in toy_wired.world.cluster.nodes["t1"].metadata.annotations


async def test_a_vendor_without_a_handshake_is_never_stamped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_module, "vendors_from_config", with_toy(ToyVendor()))
    runtime = make_runtime()
    world = make_world(vendors=runtime.vendors)
    world.extender.state = runtime.state
    async with Supervisor() as supervisor:
        wired = Wired(runtime, world, supervisor)
        wired.node_event(world.cluster.put_node(toy_node("t1", 2)))
        await wired.settle()
    assert TOY in runtime.state.nodes["t1"].tables
    assert "patch_node_annotations" not in world.cluster.calls


def finished_holder(wired: Wired) -> Pod:
    pod = gpu_pod("holder", phase="Succeeded")
    pod.spec.node_name = "t1"
    return wired.world.cluster.put_pod(pod)


async def test_the_vendors_lock_of_a_finished_holder_is_released_and_hamis_of_another_pod_kept(
    toy_wired: Wired,
) -> None:
    mine = encode_node_lock(NodeLock(NOW_DT, NS, "holder"))
    other = encode_node_lock(NodeLock(NOW_DT, NS, "other"))
    locked = toy_node("t1", 2, {LOCK: mine, keys.NODE_LOCK: other, HANDSHAKE: "Requesting_x"})
    toy_wired.node_event(toy_wired.world.cluster.put_node(locked))
    assert toy_wired.runtime.housekeeping.locks == {"t1": {keys.NODE_LOCK: other, LOCK: mine}}

    toy_wired.pod_event(finished_holder(toy_wired))
    await toy_wired.settle()

    annotations = toy_wired.world.cluster.nodes["t1"].metadata.annotations
    assert LOCK not in annotations
    assert annotations[keys.NODE_LOCK] == other


async def test_a_holder_in_bind_phase_success_frees_hamis_lock_but_not_the_vendors(toy_wired: Wired) -> None:
    """The bind phase tells when HAMi's device plugins are done; a vendor's own plugin releases its lock itself."""
    mine = encode_node_lock(NodeLock(NOW_DT, NS, "holder"))
    locked = toy_node("t1", 2, {LOCK: mine, keys.NODE_LOCK: mine, HANDSHAKE: "Requesting_x"})
    toy_wired.node_event(toy_wired.world.cluster.put_node(locked))
    pod = gpu_pod("holder", phase="Pending")
    pod.spec.node_name = "t1"
    pod.metadata.annotations[keys.BIND_PHASE] = "success"

    toy_wired.pod_event(toy_wired.world.cluster.put_pod(pod))
    await toy_wired.settle()

    annotations = toy_wired.world.cluster.nodes["t1"].metadata.annotations
    assert keys.NODE_LOCK not in annotations
    assert annotations[LOCK] == mine


async def test_a_release_of_the_vendors_lock_wakes_only_its_waiters(toy_wired: Wired) -> None:
    held = encode_node_lock(NodeLock(NOW_DT, NS, "holder"))
    node = toy_node("t1", 2, {LOCK: held, keys.NODE_LOCK: held, HANDSHAKE: "Requesting_x"})
    toy_wired.node_event(toy_wired.world.cluster.put_node(node))
    waits = toy_wired.runtime.housekeeping.lock_waits
    toy_waiter = asyncio.create_task(waits.wait("t1", f"{NS}/holder", 30, LOCK))
    hami_waiter = asyncio.create_task(waits.wait("t1", f"{NS}/holder", 30))
    await asyncio.sleep(0)
    assert (waits.waiting("t1", LOCK), waits.waiting("t1")) == (1, 1)

    node.metadata.annotations.pop(LOCK)
    toy_wired.node_event(toy_wired.world.cluster.put_node(node))  # the TOY device plugin released its lock
    await asyncio.sleep(0)

    assert toy_waiter.done()
    assert toy_waiter.result() is True
    assert not hami_waiter.done()
    assert toy_wired.runtime.housekeeping.locks == {"t1": {keys.NODE_LOCK: held}}
    hami_waiter.cancel()
    waits.gone("t1")
