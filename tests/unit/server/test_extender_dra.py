"""The extender with DRA claims beside device-plugin pods: /filter gives pods only what claims leave (issue 18)."""

from __future__ import annotations

import pytest

from hami.protocol import keys
from hami.protocol.allocation import decode_pod_devices
from hami.scheduling.dra import ProblemKind, WarningKind
from tests.unit.scheduling.drafix import device_class, result, shared_device, synthetic_claim, synthetic_slice
from tests.unit.server.support import NS, World, gpu_node, gpu_pod, make_world

NODE = "n1"
GPU0, GPU1 = f"GPU-{NODE}-0", f"GPU-{NODE}-1"


@pytest.fixture
def world() -> World:
    w = make_world()
    w.add_node(gpu_node(NODE, gpus=2, mem=24000))
    devices = [shared_device("gpu-0", GPU0, "24000Mi", cores=100, cores_default=0), shared_device("gpu-1", GPU1)]
    assert w.extender.on_resource_slice(synthetic_slice("s1", NODE, devices)) == []
    w.add_pod(gpu_pod("c-pod", mem=None, cores=None))  # the claims' consumer (synthetic_claim's default)
    return w


def devices_of(world: World, name: str) -> list[str]:
    value = world.pod(name).metadata.annotations[keys.NVIDIA_KEYS.allocated]
    return [d.uuid for c in decode_pod_devices(value) for d in c]


async def test_a_pod_gets_only_what_a_claim_leaves_on_a_gpu(world: World) -> None:
    claim = synthetic_claim("c", [result("gpu-0", NODE, "s1", memory="20000Mi", cores="30")], namespace=NS)
    assert world.extender.on_resource_claim(claim) == []
    assert world.usage() == {GPU0: (1, 20000, 30)}
    world.add_pod(gpu_pod("big", mem=8000, cores=60))
    result_ = await world.filter(world.pod("big"), [NODE])
    assert result_.node_names == [NODE]
    assert devices_of(world, "big") == [GPU1]  # GPU0 has 4000 MiB left
    world.add_pod(gpu_pod("small", mem=4000, cores=70))
    await world.filter(world.pod("small"), [NODE])
    assert devices_of(world, "small") == [GPU0]  # GPU1 has 40 cores left
    world.deliver(NS, "small")
    assert world.usage()[GPU0] == (2, 24000, 100)  # exactly full, never over
    world.add_pod(gpu_pod("more", mem=1000, cores=0))
    assert (await world.filter(world.pod("more"), [NODE])).node_names == [NODE]
    assert devices_of(world, "more") == [GPU1]
    world.extender.on_resource_claim(claim, deleted=True)
    assert world.usage()[GPU0] == (1, 4000, 70)
    assert world.state.verify() == []


async def test_an_exclusive_claim_takes_the_whole_gpu(world: World) -> None:
    world.extender.on_resource_claim(synthetic_claim("c", [result("gpu-1", NODE)], namespace=NS))
    assert world.usage() == {GPU1: (10, 24000, 100)}
    world.add_pod(gpu_pod("two", gpu=2, mem=1000, cores=0))
    answer = await world.filter(world.pod("two"), [NODE])
    assert answer.node_names in (None, [])
    assert NODE in (answer.failed_nodes or {})


def test_problems_are_returned_by_the_event_and_listed(world: World) -> None:
    claim = synthetic_claim("c", [result("gpu-9", NODE, "s1", memory="1Gi")], namespace=NS)
    (problem,) = world.extender.on_resource_claim(claim)
    assert problem.kind is ProblemKind.UNKNOWN_DEVICE
    assert world.extender.dra_problems() == (problem,)
    assert world.extender.on_resource_claim(claim) == []  # not newly raised
    world.extender.on_resource_claim(claim, deleted=True)
    assert world.extender.dra_problems() == ()


def test_the_pod_watch_tells_the_ledger_which_pods_live(world: World) -> None:
    pod = world.add_pod(gpu_pod("user", mem=None, cores=None))
    claim = synthetic_claim("c", [result("gpu-1", NODE, "s1", memory="1Gi")], pods=[("user", "uid-user")], namespace=NS)
    assert world.extender.on_resource_claim(claim) == []
    world.remove_pod("user")
    (problem,) = world.extender.dra_problems()
    assert (problem.kind, problem.node) == (ProblemKind.STALE_ALLOCATION, NODE)
    assert world.usage()[GPU1] == (1, 1024, 0)  # still counted
    assert pod.metadata.uid == "uid-user"


def test_a_claim_seen_before_its_pods_waits_for_the_pod_watch(world: World) -> None:
    world.readiness["synced"] = False
    claim = synthetic_claim("c", [result("gpu-1", NODE, "s1")], pods=[("later", "uid-later")], namespace=NS)
    assert world.extender.on_resource_claim(claim) == []
    assert world.extender.dra_problems() == ()
    world.readiness["synced"] = True
    assert [p.kind for p in world.extender.dra_problems()] == [ProblemKind.STALE_ALLOCATION]
    world.add_pod(gpu_pod("later", mem=None, cores=None))
    assert world.extender.dra_problems() == ()


def test_a_node_registering_later_gets_its_claims_counted() -> None:
    world = make_world()
    world.add_pod(gpu_pod("c-pod", mem=None, cores=None))
    world.extender.on_resource_slice(synthetic_slice("s1", NODE, [shared_device("gpu-0", GPU0)]))
    claim = synthetic_claim("c", [result("gpu-0", NODE, "s1", memory="2Gi")], namespace=NS)
    assert world.extender.on_resource_claim(claim) == []  # no hami registration there: not hami's to count
    world.add_node(gpu_node(NODE, gpus=1, mem=24000))
    assert world.usage() == {GPU0: (1, 2048, 0)}
    assert world.extender.dra_problems() == ()
    world.extender.on_node(world.cluster.nodes[NODE], deleted=True)
    assert world.extender.dra_problems() == ()
    world.add_node(gpu_node("n2", gpus=1))  # registers GPU-n2-0 only
    world.extender.on_resource_slice(synthetic_slice("s2", "n2", [shared_device("gpu-0", "GPU-elsewhere")]))
    (problem,) = world.extender.on_resource_claim(
        synthetic_claim("d", [result("gpu-0", "n2", "s1", memory="1Gi")], pods=[("c-pod", "uid-c-pod")], namespace=NS)
    )
    assert (problem.kind, problem.node) == (ProblemKind.UNKNOWN_UUID, "n2")


def test_device_class_traps_show_as_warnings(world: World) -> None:
    trap = device_class("deviceclass-extended-resource")
    trap.spec.extended_resource_name = "nvidia.com/gpu"
    assert world.extender.on_device_class(trap) == []
    assert [w.kind for w in world.extender.dra_warnings()] == [WarningKind.EXTENDED_RESOURCE]


def test_start_up_races_are_not_reported_until_every_watch_has_listed() -> None:
    world = make_world()
    world.readiness["synced"] = False
    claim = synthetic_claim("c", [result("gpu-0", NODE, "s1", memory="2Gi")], namespace=NS)
    assert world.extender.on_resource_claim(claim) == []  # listed before its slice and node
    world.add_node(gpu_node(NODE, gpus=1, mem=24000))
    world.add_pod(gpu_pod("c-pod", mem=None, cores=None))
    assert world.extender.on_resource_slice(synthetic_slice("s1", NODE, [shared_device("gpu-0", GPU0)])) == []
    world.readiness["synced"] = True
    assert world.extender.dra_problems() == ()
    assert world.usage() == {GPU0: (1, 2048, 0)}


async def test_a_claim_allocated_over_a_hami_pod_is_reported_until_the_pod_leaves(world: World) -> None:
    world.add_pod(gpu_pod("early", mem=20000, cores=50))
    await world.filter(world.pod("early"), [NODE])
    world.deliver(NS, "early")
    (uuid,) = devices_of(world, "early")
    device = "gpu-0" if uuid == GPU0 else "gpu-1"
    (problem,) = world.extender.on_resource_claim(
        synthetic_claim("c", [result(device, NODE, "s1", memory="10000Mi", cores="10")], namespace=NS)
    )
    assert problem.kind is ProblemKind.OVER_CAPACITY
    assert f"card {uuid} on {NODE} is over capacity (MiB 30000/24000)" in problem.message
    world.remove_pod("early")
    assert world.extender.dra_problems() == ()
    assert world.usage() == {uuid: (1, 10000, 10)}
