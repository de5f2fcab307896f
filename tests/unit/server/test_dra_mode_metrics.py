"""The scheduler's metrics with HAMi's names for a node only a DRA driver serves (DRA mode, issue 38): its published
cards in the device gauges and each claim's share under its pod, while /filter still sees no card there."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from hami.protocol.objects import Node, NodeStatus, ObjectMeta
from hami.server.dra import DraCollector
from hami.server.scrape import state_text
from tests.unit.scheduling.drafix import result, shared_device, synthetic_claim, synthetic_slice
from tests.unit.server.support import NS, World, gpu_node, gpu_pod, make_world
from tests.unit.server.test_scrape import reference

NODE = "n1"
GPU0, GPU1 = f"GPU-{NODE}-0", f"GPU-{NODE}-1"
MIB = 1048576
DEVICE = {"node": NODE, "device_index": "0", "device_type": "gpu-0", "zone": "vGPU"}


def dra_only_world() -> World:
    """n1 has no hami registration; it publishes two 24000-MiB cards, and a claim holds 8000 MiB / 40 cores of
    the first for pod ``p``."""
    w = make_world()
    w.add_node(Node(metadata=ObjectMeta(name=NODE), status=NodeStatus()))
    devices = [shared_device(f"gpu-{i}", f"GPU-{NODE}-{i}", "24000Mi", cores=100, cores_default=0) for i in range(2)]
    w.extender.on_resource_slice(synthetic_slice("s1", NODE, devices))
    w.add_pod(gpu_pod("p", mem=None, cores=None))
    claim = synthetic_claim(
        "c", [result("gpu-0", NODE, "s1", memory="8000Mi", cores="40")], pods=[("p", "uid-p")], namespace=NS
    )
    w.extender.on_resource_claim(claim)
    return w


def sample(world: World, name: str, labels: dict[str, str]) -> float | None:
    return world.extender.metrics.registry.get_sample_value(name, labels)


def test_a_dra_only_nodes_cards_and_claims_are_in_hamis_gauges() -> None:
    world = dra_only_world()
    assert world.state.nodes[NODE].tables == {}  # /filter sees no card: no device-plugin pod goes there
    assert sample(world, "hami_gpu_memory_limit_bytes", {**DEVICE, "device_uuid": GPU0}) == 24000 * MIB
    used = {**DEVICE, "device_uuid": GPU0, "device_cores": "100"}
    assert sample(world, "hami_gpu_memory_allocated_bytes", used) == 8000 * MIB
    assert sample(world, "hami_gpu_core_allocated_ratio", {**DEVICE, "device_uuid": GPU0}) == 40
    pod = {"namespace": NS, "node": NODE, "pod": "p", "container_index": "0", "device_uuid": GPU0, "zone": "vGPU"}
    assert sample(world, "hami_vgpu_memory_allocated_bytes", pod) == 8000 * MIB
    assert sample(world, "hami_vgpu_core_allocated_ratio", pod) == 40
    served = world.extender.served.state
    assert "".join(state_text(world.state, served)) == reference(world.state, served)


def test_a_node_registering_with_hami_leaves_the_dra_only_view() -> None:
    world = dra_only_world()
    world.add_node(gpu_node(NODE, gpus=2, mem=24000))  # the device plugin (back) on the node: same UUIDs
    assert world.extender.served.state.nodes == {}
    assert world.usage() == {GPU0: (1, 8000, 40)}  # the scheduler's own ledger counts the claim now
    text = "".join(state_text(world.state, world.extender.served.state))
    assert (
        text.count(f'hami_gpu_memory_limit_bytes{{device_index="0",device_type="NVIDIA-A100",device_uuid="{GPU0}"') == 1
    )
    assert text.count(f'hami_vgpu_memory_allocated_bytes{{container_index="0",device_uuid="{GPU0}"') == 1


def test_a_deleted_slice_takes_its_cards_out_of_the_view() -> None:
    world = dra_only_world()
    world.extender.on_resource_slice(synthetic_slice("s1", NODE, []), deleted=True)
    assert world.extender.served.state.nodes == {}


def test_dra_mode_pods_are_marked_by_hamis_own_gauge() -> None:
    world = dra_only_world()
    world.add_node(gpu_node("n2", gpus=1, mem=24000))
    world.extender.on_resource_slice(synthetic_slice("s2", "n2", [shared_device("gpu-0", "GPU-n2-0", "24000Mi")]))
    claim = synthetic_claim("d", [result("gpu-0", "n2", "s2", memory="1Gi")], pods=[("q", "uid-q")], namespace=NS)
    world.extender.on_resource_claim(claim)
    registry = CollectorRegistry()
    ext = world.extender
    registry.register(
        DraCollector(
            lambda: ext.state, ext.dra_problems, ext.dra_warnings, lambda: True, served=lambda: ext.served.state
        )
    )
    marked = {
        (labels["namespace"], labels["pod"], labels["node"]): value
        for family in registry.collect()
        if family.name == "hami_dra_pod_claims"
        for labels, value in ((s.labels, s.value) for s in family.samples)
    }
    assert marked == {(NS, "p", NODE): 1, (NS, "q", "n2"): 1}  # a DRA-only node's pod and a registered card's
