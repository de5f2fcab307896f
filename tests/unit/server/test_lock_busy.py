"""/filter passes over a node whose node lock a bind in progress holds (as the node watch shows it), over the real
cycle, lock housekeeping and node locker on an in-memory cluster: the answer, the event and the metric say so."""

from __future__ import annotations

from hami.devices.cambricon import DSMLU_LOCK
from hami.protocol import keys
from hami.protocol.extender import BindingArgs, FilterResult
from hami.protocol.nodelock import NodeLock, encode_node_lock
from hami.server.nodelocks import LockHousekeeping
from tests.unit.server.support import NOW_DT, NS, World, gpu_node, gpu_pod

HELD = "node lock held by a bind in progress"


def watched_locks(world: World, *lock_keys: str) -> LockHousekeeping:
    """Lock housekeeping as the runtime wires it: its view of the locks (fed by node events) is the cycle's."""
    housekeeping = LockHousekeeping(list(lock_keys or (keys.NODE_LOCK,)))
    world.extender.cycle.node_locks = housekeeping.locks
    return housekeeping


def skips(world: World) -> float:
    samples = {s.name: s.value for m in world.metrics.registry.collect() for s in m.samples}
    return samples["hami_lock_busy_skips_total"]


async def test_a_pod_filtered_while_the_fullest_node_is_locked_goes_to_the_best_free_node(world: World) -> None:
    housekeeping = watched_locks(world)
    for name in ("n1", "n2", "n3"):
        world.add_node(gpu_node(name))
    first = await world.filter(world.add_pod(gpu_pod("p0")), ["n1", "n2", "n3"])
    assert first.node_names == ["n1"]  # the tie of three empty nodes goes to the name
    assert (await world.extender.bind(BindingArgs("p0", NS, "uid-p0", "n1"))).error == ""
    housekeeping.node_seen(world.cluster.nodes["n1"])  # the node watch shows p0's lock (no device plugin here)
    assert housekeeping.locks["n1"].keys() == {keys.NODE_LOCK}

    result = await world.filter(world.add_pod(gpu_pod("p1")), ["n1", "n2", "n3"])

    assert result == FilterResult(
        node_names=["n2"],
        failed_nodes={
            "n1": "fits, ranks before n2 under the binpack node policy, but a bind in progress holds its node lock",
            "n3": "fits, but hami chose n2 under the binpack node policy",
        },
    )
    messages = [m for _, reason, m in await world.events() if reason == "FilteringSucceed"]
    assert messages[-1] == (
        f"find fit node(n2), 0 nodes not fit, 3 nodes fit(n1:2.62,n3:0.00,n2:0.00); passed over n1: {HELD}"
    )
    assert skips(world) == 1

    housekeeping.node_seen(gpu_node("n1"))  # the device plugin released it: HAMi's order again, the fullest first
    again = await world.filter(world.add_pod(gpu_pod("p2")), ["n1", "n2", "n3"])

    assert again.node_names == ["n1"]
    assert skips(world) == 1
    assert HELD not in [m for _, reason, m in await world.events() if reason == "FilteringSucceed"][-1]


async def test_only_a_lock_the_pods_bind_would_take_makes_a_node_busy(world: World) -> None:
    housekeeping = watched_locks(world, keys.NODE_LOCK, DSMLU_LOCK)
    lock = encode_node_lock(NodeLock(NOW_DT, NS, "mlu-holder"))
    for name in ("n1", "n2"):
        world.add_node(gpu_node(name, annotations={DSMLU_LOCK: lock} if name == "n1" else None))
        housekeeping.node_seen(world.cluster.nodes[name])
    assert housekeeping.locks == {"n1": {DSMLU_LOCK: lock}}

    result = await world.filter(world.add_pod(gpu_pod("p1")), ["n1", "n2"])  # an NVIDIA pod: hami.io/mutex.lock

    assert result.node_names == ["n1"]
    assert skips(world) == 0


async def test_with_every_fitting_node_locked_the_choice_is_hamis(world: World) -> None:
    housekeeping = watched_locks(world)
    lock = encode_node_lock(NodeLock(NOW_DT, NS, "holder"))
    for name in ("n1", "n2"):
        world.add_node(gpu_node(name, annotations={keys.NODE_LOCK: lock}))
        housekeeping.node_seen(world.cluster.nodes[name])

    result = await world.filter(world.add_pod(gpu_pod("p1")), ["n1", "n2"])

    assert result == FilterResult(
        node_names=["n1"], failed_nodes={"n2": "fits, but hami chose n1 under the binpack node policy"}
    )
    assert skips(world) == 0
