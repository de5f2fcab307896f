"""/filter with whole Node objects (``ExtenderArgs.Nodes``): Cluster Autoscaler's side-effect-free simulation on
template nodes, over the extender and over HTTP in kube-scheduler's Go field names (k8s.io/kube-scheduler
extender/v1: ``Nodes`` is a NodeList, ``{"items": [Node, …]}``, in the request and in the answer)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from hami.config.profiles import DeviceProfiles
from hami.errors import ConfigError
from hami.protocol import keys
from hami.protocol.extender import FilterArgs, FilterResult
from hami.protocol.objects import Node
from hami.server.app import build_app
from hami.simulate.scaleup import load_device_profiles
from tests.unit.server.support import NS, World, garbage_node, gpu_node, gpu_pod

GROUP = "node.kubernetes.io/instance-type"


def raw(node: Node) -> dict[str, Any]:
    return msgspec.to_builtins(node)  # type: ignore[no-any-return]


async def fill(world: World) -> None:
    world.add_node(gpu_node("n1"))
    for name in ("a", "b"):
        pod = world.add_pod(gpu_pod(name, mem=24000, cores=100))
        assert (await world.filter(pod, ["n1"])).node_names == ["n1"]
        world.deliver(NS, name)


def sample(world: World, name: str, result: str) -> float | None:
    return world.metrics.registry.get_sample_value(name, {"result": result})


async def simulate(world: World, pod_name: str, *nodes: Node) -> FilterResult:
    pod = world.pod(pod_name)
    return await world.extender.filter(FilterArgs(pod, nodes=list(nodes), raw_nodes=[raw(n) for n in nodes]))


async def test_a_template_node_is_answered_and_nothing_is_written(world: World) -> None:
    await fill(world)
    world.add_pod(gpu_pod("p", mem=24000, cores=100))
    assert (await world.filter(world.pod("p"), ["n1"])).node_names in (None, [])  # live: both cards taken
    await world.clear_events()
    pod_before, usage_before, records = world.pod("p"), world.usage(), dict(world.state.pods)
    live_decisions = sample(world, "hami_filter_decisions_total", "unschedulable")
    template = gpu_node("template-node-for-gpu-pool-1234")

    result = await simulate(world, "p", template, garbage_node("broken"))

    assert result.node_names == ["template-node-for-gpu-pool-1234"]
    assert result.nodes == {"items": [raw(template)]}
    assert result.failed_nodes is not None
    assert result.failed_nodes["broken"].startswith("node unregistered: registration refused:")
    await world.extender.settle_all()
    assert world.pod("p") == pod_before  # no annotation, no write at all (same resourceVersion)
    assert world.usage() == usage_before
    assert world.state.pods == records
    assert "template-node-for-gpu-pool-1234" not in world.state.nodes
    assert await world.events() == []
    assert sample(world, "hami_filter_decisions_total", "unschedulable") == live_decisions
    assert sample(world, "hami_filter_simulations_total", "fits") == 1
    assert world.state.verify() == []


async def test_a_simulation_judges_a_known_node_at_zero_usage_and_keeps_its_ledger(world: World) -> None:
    await fill(world)
    world.add_pod(gpu_pod("p", mem=24000, cores=100))
    before = world.usage()

    result = await simulate(world, "p", gpu_node("n1"))

    assert result.node_names == ["n1"]  # a new node like n1 would take it
    assert world.usage() == before
    assert keys.VGPU_NODE not in world.pod("p").metadata.annotations


async def test_unregistered_templates_and_shortfalls_are_failed_nodes(world: World) -> None:
    world.add_pod(gpu_pod("p", mem=12000))
    bare = Node(metadata=msgspec.convert({"name": "bare"}, type=type(gpu_node("x").metadata)))

    result = await simulate(world, "p", bare, gpu_node("small", mem=8000))

    assert result == FilterResult(
        failed_nodes={"bare": "node unregistered for NVIDIA", "small": "2/2 CardInsufficientMemory"}
    )
    assert sample(world, "hami_filter_simulations_total", "unschedulable") == 1


async def test_a_cold_zero_template_takes_its_groups_profile(world: World) -> None:
    register = gpu_node("x").metadata.annotations[keys.NVIDIA_REGISTER]
    world.extender.profiles = DeviceProfiles.parse({"a100x2": f"{keys.NVIDIA_REGISTER}: '{register}'"})
    world.add_pod(gpu_pod("p"))
    cold = msgspec.convert({"metadata": {"name": "t", "labels": {GROUP: "a100x2"}}}, type=Node)

    result = await simulate(world, "p", cold)

    assert result.node_names == ["t"]
    assert result.nodes == {"items": [raw(cold)]}  # echoed as given, the profile not added


async def test_a_follower_answers_a_simulation_but_not_before_its_caches_synced(world: World) -> None:
    world.add_pod(gpu_pod("p"))
    world.readiness["leader"] = False
    assert (await simulate(world, "p", gpu_node("t"))).node_names == ["t"]

    world.readiness["synced"] = False
    answer = await simulate(world, "p", gpu_node("t"))

    assert answer == FilterResult(error="hami is starting: its node and pod caches are not synced yet")


async def test_a_pod_without_devices_passes_every_node(world: World) -> None:
    world.add_pod(gpu_pod("plain", gpu=0, mem=None, cores=None))

    result = await simulate(world, "plain", gpu_node("t1"), gpu_node("t2"))

    assert result.node_names == ["t1", "t2"]
    assert sample(world, "hami_filter_simulations_total", "passthrough") == 1


@pytest.fixture
async def http(world: World) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(world.extender))
    async with httpx.AsyncClient(transport=transport, base_url="http://hami") as client:
        yield client


async def test_the_nodes_form_over_http_in_go_field_names(http: httpx.AsyncClient, world: World) -> None:
    pod = raw(world.add_pod(gpu_pod("p")))  # type: ignore[arg-type]
    template = raw(gpu_node("template-a"))
    body = {"Pod": pod, "Nodes": {"metadata": {}, "items": [template, raw(gpu_node("t-small", mem=1000))]}}

    answer = await http.post("/filter", json={**body, "NodeNames": None})

    assert answer.status_code == 200
    assert answer.json() == {
        "Nodes": {"items": [template]},
        "NodeNames": ["template-a"],
        "FailedNodes": {"t-small": "2/2 CardInsufficientMemory"},
    }
    assert keys.VGPU_NODE not in world.pod("p").metadata.annotations


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"NodeNames": ["n1"]}, "ExtenderArgs: both given; send one (Nodes asks for a simulation)"),
        ({"Nodes": {"items": [{"metadata": {}}]}}, "ExtenderArgs.Nodes.items[0].metadata.name: a node without a name"),
    ],
)
async def test_a_bad_nodes_form_is_refused_naming_the_field(
    http: httpx.AsyncClient, world: World, extra: dict[str, Any], error: str
) -> None:
    pod = raw(world.add_pod(gpu_pod("p")))  # type: ignore[arg-type]
    body = {"Pod": pod, "Nodes": {"items": [raw(gpu_node("t"))]}} | extra

    answer = await http.post("/filter", json=body)

    assert answer.json()["Error"].startswith(error)
    assert world.pod("p").metadata.annotations == {}


def test_profiles_load_from_a_mounted_configmap(tmp_path: Path) -> None:
    (tmp_path / "..data").mkdir()  # the kubelet's links: skipped
    (tmp_path / "p4d.24xlarge").write_text(f"{keys.NVIDIA_REGISTER}: '[]'\n")

    loaded = load_device_profiles(str(tmp_path), GROUP)

    assert loaded == DeviceProfiles({"p4d.24xlarge": {keys.NVIDIA_REGISTER: "[]"}}, GROUP)
    assert load_device_profiles(None, GROUP) is None
    with pytest.raises(ConfigError, match="--device-profiles"):
        load_device_profiles(str(tmp_path / "missing"), GROUP)
