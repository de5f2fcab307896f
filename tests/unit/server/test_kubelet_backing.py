"""The extender and the node watch when kubelet stops backing a node's registration (device plugin gone or
restarting): /filter names ``NodeDevicesNotAllocatable`` and places nothing there, a /bind already on its way fails
and releases, and the node is fit again (and kube-scheduler nudged) as soon as kubelet reports the devices."""

from __future__ import annotations

import logging

import pytest

from hami.protocol import keys
from hami.protocol.extender import BindingArgs
from hami.protocol.objects import Node, QuantityValue
from hami.server.metrics import Metrics
from hami.server.nodes import NodeHandling
from tests.unit.server.support import NS, World, gpu_node, gpu_pod

REASON = (
    "NodeDevicesNotAllocatable: NVIDIA devices: kubelet reports nvidia.com/gpu allocatable 0 where the registration "
    "(hami.io/node-nvidia-register) of 2 healthy device(s) needs 20: the device plugin is gone or restarting"
)


def reporting(name: str, gpus: QuantityValue) -> Node:
    """``gpu_node(name)`` (two cards of split count 10) whose kubelet reports ``gpus`` units of nvidia.com/gpu."""
    node = gpu_node(name)
    node.status.capacity = {"cpu": "8", "nvidia.com/gpu": 20}
    node.status.allocatable = {"cpu": "8", "nvidia.com/gpu": gpus}
    return node


async def test_filter_turns_the_node_down_while_kubelet_reports_no_devices_and_takes_it_back_after(
    world: World,
) -> None:
    world.add_node(reporting("n1", 20))
    world.add_node(reporting("n1", 0))  # the device plugin went away: kubelet marks its devices unhealthy
    freed: list[str] = []
    world.extender.freed = freed.append

    pod = world.add_pod(gpu_pod("p1"))
    result = await world.filter(pod, ["n1"])

    assert result.node_names is None
    assert result.failed_and_unresolvable_nodes == {"n1": REASON}
    assert world.pod("p1").metadata.annotations == {}  # nothing reserved or written
    assert world.state.pods == {}
    assert freed == []

    world.add_node(reporting("n1", 20))  # the plugin is back

    assert freed == ["n1"]  # kube-scheduler is nudged to retry the pods turned down meanwhile
    assert (await world.filter(pod, ["n1"])).node_names == ["n1"]


async def test_a_bind_into_the_window_fails_and_releases_the_allocation(world: World) -> None:
    world.add_node(reporting("n1", 20))
    pod = world.add_pod(gpu_pod("p1"))
    assert (await world.filter(pod, ["n1"])).node_names == ["n1"]
    world.deliver(NS, "p1")
    world.add_node(reporting("n1", 0))  # gone between /filter and /bind

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert result.error == f"binding {NS}/p1 to n1 failed: {REASON}"
    stored = world.pod("p1")
    assert stored.spec.node_name == ""
    assert keys.VGPU_NODE not in stored.metadata.annotations
    assert keys.NODE_LOCK not in world.cluster.nodes["n1"].metadata.annotations
    assert world.state.pods == {}


async def test_a_node_without_the_resource_in_its_allocatable_is_scheduled_from_its_registration(
    world: World,
) -> None:
    node = gpu_node("n1")
    node.status.allocatable = {"cpu": "8"}  # a node whose kubelet never heard of nvidia.com/gpu (a test fixture)
    world.add_node(node)
    pod = world.add_pod(gpu_pod("p1"))
    assert (await world.filter(pod, ["n1"])).node_names == ["n1"]


def test_the_node_watch_logs_each_change_once(world: World, caplog: pytest.LogCaptureFixture) -> None:
    handling = NodeHandling(world.extender.vendors, world.state, Metrics(lambda: world.state), lambda: True)
    caplog.set_level(logging.INFO, logger="hami.scheduler")
    for gpus in (20, 0, 0, 20):
        node = world.add_node(reporting("n1", gpus))
        handling.node_seen(node)

    lines = [r.getMessage() for r in caplog.records if "n1" in r.getMessage()]
    assert lines == [
        f"node n1: no pod is placed on its NVIDIA devices: {REASON.split('NVIDIA devices: ')[1]}",
        "node n1: kubelet reports its NVIDIA devices again",
    ]
    assert handling.held_back == {}
