"""Forged allocation annotations against the real extender, its pod watch and its API re-list (issue 39 item 1,
docs/trust.md): a pod of another scheduler naming another team's card charges nothing, so the card stays free for
the next pod, and the re-list agrees; a bound pod charges only the node it is bound to; a pod this process reserved
itself counts whatever its scheduler name; hami's scheduler's pods still count after a restart."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.protocol import keys
from hami.protocol.objects import Pod
from hami.server.audit import LedgerAudit
from tests.unit.server.support import NS, World, gpu_node, gpu_pod, make_world

ALLOCATED = "hami.io/vgpu-devices-allocated"


def forged(name: str, *, scheduler: str = "nobody", bound: str = "", names: str = "n1", mem: int = 24000) -> Pod:
    """A tenant's pod carrying annotations that fill card 0 of node ``names``."""
    pod = gpu_pod(name, mem=mem, cores=100)
    pod.spec.scheduler_name = scheduler
    pod.spec.node_name = bound
    pod.metadata.annotations = {
        keys.VGPU_NODE: names,
        keys.VGPU_TIME: "1700000000",
        keys.BIND_PHASE: "success",
        ALLOCATED: f"GPU-{names}-0,NVIDIA,{mem},100:;",
    }
    return pod


def audit_of(world: World) -> LedgerAudit:
    extender = world.extender
    return LedgerAudit(world.state, extender.vendors, world.cluster, world.metrics, lambda: extender.cycle.pending)


async def test_a_forged_pod_of_another_scheduler_blocks_no_card_and_the_relist_agrees(world: World) -> None:
    world.add_node(gpu_node("n1", gpus=1))
    world.add_pod(forged("squatter"))
    assert world.usage() == {}

    result = await world.filter(world.add_pod(gpu_pod("victim", mem=20000)), ["n1"])

    assert result.node_names == ["n1"], result.failed_nodes
    world.deliver(NS, "victim")
    assert world.usage() == {"GPU-n1-0": (1, 20000, 30)}
    audit = audit_of(world)
    assert await audit.run() == []
    assert await audit.run() == [], "the re-list believes what the watch believes: no drift, nothing repaired"
    assert world.usage() == {"GPU-n1-0": (1, 20000, 30)}


async def test_a_bound_pod_charges_the_node_it_is_bound_to_never_the_one_its_annotation_names(
    world: World,
) -> None:
    """A compromised node's plugin may write hami.io/ annotations of the pods bound to it: naming another node's
    card in them charges nothing there."""
    world.add_node(gpu_node("n1", gpus=1))
    world.add_node(gpu_node("n2", gpus=1))
    world.add_pod(forged("on-n2", scheduler="hami-scheduler", bound="n2", names="n1"))

    assert world.state.pods["uid-on-n2"].node == "n2"
    assert world.usage() == {}, "n1's card is not n2's: nothing charged on either"
    result = await world.filter(world.add_pod(gpu_pod("victim", mem=20000)), ["n1"])
    assert result.node_names == ["n1"], result.failed_nodes


async def test_a_pod_this_process_reserved_counts_whatever_its_scheduler_name(world: World) -> None:
    world.add_node(gpu_node("n1", gpus=1))
    mine = gpu_pod("second-profile", mem=20000)
    mine.spec.scheduler_name = "another-profile"
    world.add_pod(mine)
    assert (await world.filter(world.pod("second-profile"), ["n1"])).node_names == ["n1"]

    world.deliver(NS, "second-profile")  # the watch brings the annotations back: still charged

    assert world.usage() == {"GPU-n1-0": (1, 20000, 30)}
    audit = audit_of(world)
    assert await audit.run() == []
    assert await audit.run() == [], "the re-list does not call this process's own reservation leaked"
    assert world.usage() == {"GPU-n1-0": (1, 20000, 30)}
    refused = await world.filter(world.add_pod(gpu_pod("next", mem=8000)), ["n1"])
    assert refused.failed_nodes == {"n1": "1/1 CardInsufficientMemory"}


async def test_after_a_restart_hamis_pods_count_and_forged_ones_do_not(world: World) -> None:
    world.add_node(gpu_node("n1", gpus=2))
    assert (await world.filter(world.add_pod(gpu_pod("placed", mem=20000)), ["n1"])).node_names == ["n1"]
    world.add_pod(forged("squatter", names="n1"))
    placed_by_hami = forged("bound-by-hami", scheduler="hami-scheduler", bound="n1", mem=4000)
    placed_by_hami.metadata.annotations[ALLOCATED] = "GPU-n1-1,NVIDIA,4000,100:;"
    world.add_pod(placed_by_hami)

    fresh = make_world()  # a restarted scheduler: empty ledger, then the watches list everything
    for node in world.cluster.nodes.values():
        fresh.extender.on_node(node)
    for pod in world.cluster.pods.values():
        fresh.extender.on_pod(pod)

    assert set(fresh.state.pods) == {"uid-placed", "uid-bound-by-hami"}
    assert fresh.usage() == world.usage()


PodShape = tuple[str, str, str, int, int]  # scheduler name, bound node ("" unbound), annotated node, card, MiB

shapes = st.tuples(
    st.sampled_from(["hami-scheduler", "nobody", "default-scheduler"]),
    st.sampled_from(["", "n1", "n2"]),
    st.sampled_from(["n1", "n2"]),
    st.integers(0, 1),
    st.integers(1, 12).map(lambda n: n * 1000),
)


@settings(max_examples=60, deadline=None)
@given(pods=st.lists(shapes, max_size=8))
def test_the_ledger_and_the_relist_hold_exactly_what_hamis_scheduler_s_pods_hold(pods: list[PodShape]) -> None:
    """Any mix of pods with allocation annotations, of any scheduler, bound or not, naming any card: the ledger
    charges exactly the pods of hami's scheduler, each on its bound node (a card of another node charges nothing),
    and two re-lists find nothing to repair."""
    world = make_world()
    for node in ("n1", "n2"):
        world.add_node(gpu_node(node, gpus=2, mem=100000))
    expected: dict[str, tuple[int, int, int]] = {}
    for i, (scheduler, bound, names, card, mem) in enumerate(pods):
        pod = forged(f"p{i}", scheduler=scheduler, bound=bound, names=names, mem=mem)
        pod.metadata.annotations[ALLOCATED] = f"GPU-{names}-{card},NVIDIA,{mem},10:;"
        world.add_pod(pod)
        if scheduler == "hami-scheduler" and (bound or names) == names:
            slots, used, cores = expected.get(f"GPU-{names}-{card}", (0, 0, 0))
            expected[f"GPU-{names}-{card}"] = (slots + 1, used + mem, cores + 10)

    assert world.usage() == expected
    audit = audit_of(world)
    assert asyncio.run(audit.run()) == []
    assert asyncio.run(audit.run()) == []
    assert world.usage() == expected
