"""Gangs hold no share they cannot use (``hami.scheduling.gangs``): when a member fits nowhere the other members'
unbound allocations are dropped at once, unless the gang can still reach its minimum; a PodGroup that failed
releases them too; bound members and members being bound keep theirs."""

from __future__ import annotations

import msgspec
import pytest

from hami.protocol import keys
from hami.protocol.extender import BindingArgs
from hami.protocol.objects import Pod, SchedulingGroup
from tests.unit.server.support import NS, World, gpu_node, gpu_pod


def member(name: str, group: str = "g", *, label: bool = True) -> Pod:
    """A whole-card pod of gang ``group`` (by label, or by ``spec.schedulingGroup``)."""
    pod = gpu_pod(name, mem=24000, cores=100)
    if label:
        meta = msgspec.structs.replace(pod.metadata, labels={keys.POD_GROUP_LABEL: group})
        return msgspec.structs.replace(pod, metadata=meta)
    spec = msgspec.structs.replace(pod.spec, scheduling_group=SchedulingGroup(pod_group_name=group))
    return msgspec.structs.replace(pod, spec=spec)


async def place(world: World, pod: Pod) -> list[str] | None:
    stored = world.add_pod(pod)
    result = await world.filter(stored, ["n1"])
    world.deliver(NS, pod.metadata.name)
    return result.node_names


def allocated(world: World, name: str) -> bool:
    return keys.VGPU_NODE in world.pod(name).metadata.annotations


async def gang_waiting(world: World) -> dict[str, str]:
    await world.recorder.flush()
    return {e.involved.name: e.message for e in world.cluster.events if e.reason == "GangWaiting"}


@pytest.mark.parametrize("label", [True, False], ids=["label", "schedulingGroup"])
async def test_a_gang_that_cannot_fit_releases_its_members_and_a_single_pod_then_fits(
    world: World, label: bool
) -> None:
    world.add_node(gpu_node("n1"))  # two cards
    assert await place(world, member("a", label=label)) == ["n1"]
    assert await place(world, member("b", label=label)) == ["n1"]

    assert await place(world, member("c", label=label)) in (None, [])

    assert not allocated(world, "a")
    assert not allocated(world, "b")
    assert world.usage() == {}
    assert world.state.verify() == []
    waiting = await gang_waiting(world)
    assert waiting["c"].startswith("gang g: this member fits nowhere; released the unbound allocations of a, b")
    assert (
        waiting["a"]
        == "gang g: member c fits nowhere; this member's allocation was released: it waits until the whole gang fits"
    )
    assert world.metrics.registry.get_sample_value("hami_gang_releases_total", {"trigger": "member-unschedulable"}) == 2
    assert await place(world, gpu_pod("single", mem=24000, cores=100)) == ["n1"]


async def test_two_competing_gangs_never_block_each_other(world: World) -> None:
    world.add_node(gpu_node("n1"))
    assert await place(world, member("a1", "A")) == ["n1"]
    assert await place(world, member("b1", "B")) == ["n1"]

    assert await place(world, member("a2", "A")) in (None, [])  # A gives up: a1's card is free again
    assert await place(world, member("b2", "B")) == ["n1"]

    assert allocated(world, "b1")
    assert allocated(world, "b2")
    assert not allocated(world, "a1")


async def test_a_gang_that_still_reaches_its_minimum_keeps_its_members(world: World) -> None:
    world.add_node(gpu_node("n1"))
    world.extender.on_pod_group(NS, "g", min_count=2, failed=False)
    for name in ("a", "b"):
        assert await place(world, member(name)) == ["n1"]

    assert await place(world, member("c")) in (None, [])

    assert allocated(world, "a")
    assert allocated(world, "b")
    assert await gang_waiting(world) == {}


async def test_bound_members_and_members_being_bound_keep_their_allocations(world: World) -> None:
    world.add_node(gpu_node("n1", gpus=3))
    for name in ("a", "b"):
        assert await place(world, member(name)) == ["n1"]
    bound = world.cluster.pods[(NS, "a")]
    world.cluster.put_pod(msgspec.structs.replace(bound, spec=msgspec.structs.replace(bound.spec, node_name="n1")))
    world.deliver(NS, "a")
    world.extender.cycle.binding.add("uid-b")  # its /bind is running
    assert await place(world, member("c")) == ["n1"]

    assert await place(world, member("d")) in (None, [])

    assert allocated(world, "a")
    assert allocated(world, "b")
    assert not allocated(world, "c")


async def test_a_failed_podgroup_releases_its_unbound_members(world: World) -> None:
    world.add_node(gpu_node("n1"))
    world.extender.on_pod_group(NS, "g", min_count=3, failed=False)
    for name in ("a", "b"):
        assert await place(world, member(name, label=False)) == ["n1"]

    world.extender.on_pod_group(NS, "g", min_count=3, failed=True)
    await world.extender.settle_all()

    assert not allocated(world, "a")
    assert not allocated(world, "b")
    assert world.usage() == {}
    assert world.metrics.registry.get_sample_value("hami_gang_releases_total", {"trigger": "podgroup-failed"}) == 2
    world.extender.on_pod_group(NS, "g", min_count=3, failed=True)  # the same condition again: nothing more
    await world.extender.settle_all()
    assert world.metrics.registry.get_sample_value("hami_gang_releases_total", {"trigger": "podgroup-failed"}) == 2


async def test_a_pod_of_no_gang_releases_nothing(world: World) -> None:
    world.add_node(gpu_node("n1"))
    for name in ("a", "b"):
        assert await place(world, gpu_pod(name, mem=24000, cores=100)) == ["n1"]

    assert await place(world, gpu_pod("c", mem=24000, cores=100)) in (None, [])

    assert allocated(world, "a")
    assert allocated(world, "b")


async def test_a_member_the_watch_does_not_show_yet_is_read_from_the_api_and_released(world: World) -> None:
    world.add_node(gpu_node("n1"))
    for name in ("a", "b"):
        assert await place(world, member(name)) == ["n1"]
    world.watched.pop((NS, "a"))  # the pod watch lags behind the API

    assert await place(world, member("c")) in (None, [])

    assert not allocated(world, "a")
    assert not allocated(world, "b")


async def test_a_member_this_process_bound_is_kept_until_the_watch_shows_it(world: World) -> None:
    world.add_node(gpu_node("n1"))
    for name in ("a", "b"):
        assert await place(world, member(name)) == ["n1"]
    bound = await world.extender.bind(BindingArgs(podname="a", podnamespace=NS, poduid="uid-a", node="n1"))
    assert bound.error == ""
    world.watched[(NS, "a")] = msgspec.structs.replace(  # the watch still shows it unbound
        world.pod("a"), spec=msgspec.structs.replace(world.pod("a").spec, node_name="")
    )

    assert await place(world, member("c")) in (None, [])

    assert allocated(world, "a")
    assert not allocated(world, "b")
