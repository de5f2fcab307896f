"""Both modes on one node during a switch (docs/dra-mode-switching.md): the node registers its cards for hami's
device plugin and publishes them through hami's DRA plugin, in the plugin's own slice (bytes, percent, the guard's
taint). A claim allocated first is counted by /filter before any extender pod lands on its card; a card the DRA
plugin holds back from claims stays the device plugin's."""

from __future__ import annotations

import msgspec
from prometheus_client import CollectorRegistry

from hami.deviceplugin.discovery import GpuInfo
from hami.deviceplugin.dra.slices import DRIVER, NodeFacts, resource_slice, slice_devices
from hami.protocol import keys
from hami.protocol.allocation import decode_pod_devices
from hami.protocol.dra import ResourceSlice
from hami.server.dra import DraCollector
from tests.unit.scheduling.drafix import result, synthetic_claim
from tests.unit.server.support import NS, World, gpu_node, gpu_pod, make_world

NODE = "n1"
GPU0, GPU1 = f"GPU-{NODE}-0", f"GPU-{NODE}-1"


def plugins_slice(held_back: frozenset[str]) -> ResourceSlice:
    """The slice ``hami dra-plugin`` publishes for the node's two 24000 MiB cards, ``held_back`` tainted."""
    gpus = [GpuInfo(uuid=f"GPU-{NODE}-{i}", index=i, name="NVIDIA-A100", memory_mib=24000, minor=i) for i in (0, 1)]
    devices = slice_devices(gpus, details={}, pcie_roots={})
    body = resource_slice(NODE, "node-uid", devices, NodeFacts("580.65.06"), held_back=held_back)
    return msgspec.convert(body, type=ResourceSlice)


def switching_world(held_back: frozenset[str]) -> World:
    w = make_world()
    w.add_node(gpu_node(NODE, gpus=2, mem=24000))
    assert w.extender.on_resource_slice(plugins_slice(held_back)) == []
    w.add_pod(gpu_pod("c-pod", mem=None, cores=None))  # the claims' consumer (synthetic_claim's default)
    return w


def card_of(world: World, name: str) -> str:
    ((device,),) = decode_pod_devices(world.pod(name).metadata.annotations[keys.NVIDIA_KEYS.allocated])
    return device.uuid


async def test_a_claim_first_then_extender_pods_on_the_same_card_never_overcommit() -> None:
    world = switching_world(frozenset())
    claim = synthetic_claim("c", [result("hami-gpu-0", NODE, "s-1", driver=DRIVER, memory="20000Mi", cores="30")],
                            namespace=NS)  # fmt: skip
    assert world.extender.on_resource_claim(claim) == []
    assert world.usage() == {GPU0: (1, 20000, 30)}
    world.add_pod(gpu_pod("big", mem=8000, cores=60))
    assert (await world.filter(world.pod("big"), [NODE])).node_names == [NODE]
    assert card_of(world, "big") == GPU1  # card 0 has 4000 MiB left
    world.add_pod(gpu_pod("fits", mem=4000, cores=70))
    assert (await world.filter(world.pod("fits"), [NODE])).node_names == [NODE]
    assert card_of(world, "fits") == GPU0  # card 1 has 40 cores left; card 0 exactly what the claim left
    world.deliver(NS, "fits")
    assert world.usage()[GPU0] == (2, 24000, 100)
    world.add_pod(gpu_pod("none-left", mem=17000, cores=10))  # card 0 full, card 1 has 16000 MiB left
    answer = await world.filter(world.pod("none-left"), [NODE])
    assert answer.node_names in (None, [])
    assert world.state.verify() == []


async def test_a_card_held_back_from_claims_stays_the_device_plugins_and_counts_a_claim_placed_before() -> None:
    """The guard's taint stops kube-scheduler, not hami: the held-back card takes extender pods, and a claim that
    was allocated on it before the taint (the plugin had not seen the pod yet) is still counted."""
    world = switching_world(frozenset({GPU1}))
    early = synthetic_claim("early", [result("hami-gpu-1", NODE, "s-1", driver=DRIVER, memory="10000Mi",
                                             cores="50")], pods=[("c-pod", "uid-c-pod")], namespace=NS)  # fmt: skip
    assert world.extender.on_resource_claim(early) == []
    world.add_pod(gpu_pod("p", mem=14000, cores=50, annotations={keys.NVIDIA_USE_GPUUUID: GPU1}))
    assert (await world.filter(world.pod("p"), [NODE])).node_names == [NODE]
    assert card_of(world, "p") == GPU1
    world.deliver(NS, "p")
    assert world.usage()[GPU1] == (2, 24000, 100)
    world.add_pod(gpu_pod("q", mem=1000, cores=10, annotations={keys.NVIDIA_USE_GPUUUID: GPU1}))
    assert (await world.filter(world.pod("q"), [NODE])).node_names in (None, [])
    assert world.state.verify() == []


def test_the_gauge_counts_the_cards_held_back_per_node() -> None:
    world = switching_world(frozenset({GPU1}))
    extender = world.extender
    registry = CollectorRegistry()
    registry.register(DraCollector(lambda: world.state, extender.dra_problems, extender.dra_warnings,
                                   lambda: True, extender.dra.tainted))  # fmt: skip
    assert registry.get_sample_value("hami_dra_cards_held_back", {"node": NODE}) == 1
    assert extender.on_resource_slice(plugins_slice(frozenset())) == []  # the pods are gone: republished
    assert registry.get_sample_value("hami_dra_cards_held_back", {"node": NODE}) is None
