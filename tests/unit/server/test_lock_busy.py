"""/filter passes over a node where a bind in progress holds its node lock (as the node watch shows it) or is about
to take it (a /bind of this process, not yet shown by the watch), over the real cycle, extender, lock housekeeping
and node locker on an in-memory cluster: the answer, the event and the metric say so. With no lock held and no bind
in progress the decisions are HAMi's."""

from __future__ import annotations

import asyncio

from hami.devices.cambricon import DSMLU_LOCK
from hami.errors import ApiError
from hami.protocol import keys
from hami.protocol.extender import BindingArgs, BindingResult, FilterResult
from hami.protocol.nodelock import NodeLock, encode_node_lock
from hami.protocol.objects import Node
from hami.server.busy import BIND_MARK_SECONDS, BusyNodes
from hami.server.nodelocks import LockHousekeeping
from tests.unit.server.support import NOW_DT, NS, GatedCluster, World, gpu_node, gpu_pod, make_world

HELD = "a bind in progress there holds or is about to take the node lock"
NODES = ["n1", "n2", "n3"]
NOT_CHOSEN = "fits, but hami chose {} under the binpack node policy"
PASSED = (
    "fits, ranks before {} under the binpack node policy, but a bind in progress on it holds or is about to take its "
    "node lock"
)


def watched_locks(world: World, *lock_keys: str) -> LockHousekeeping:
    """Lock housekeeping as the runtime wires it: its view of the locks (fed by node events) is the extender's."""
    housekeeping = LockHousekeeping(list(lock_keys or (keys.NODE_LOCK,)))
    world.extender.busy.held = housekeeping.locks
    return housekeeping


def busy_keys(busy: BusyNodes) -> dict[str, set[str]]:
    """Node → the lock keys held or being taken there, as /filter reads them."""
    return {node: set(taken) for node, taken in busy.items()}


def watch_shows(world: World, housekeeping: LockHousekeeping, node: Node) -> None:
    """A node event, handled as the runtime's node watch handler does: the lock housekeeping, then the extender."""
    housekeeping.node_seen(node)
    world.extender.on_node(node)


async def bind(world: World, pod: str, node: str) -> BindingResult:
    return await world.extender.bind(BindingArgs(pod, NS, f"uid-{pod}", node))


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
    watch_shows(world, housekeeping, world.cluster.nodes["n1"])  # p0's lock (no device plugin here)
    assert housekeeping.locks["n1"].keys() == {keys.NODE_LOCK}

    result = await world.filter(world.add_pod(gpu_pod("p1")), ["n1", "n2", "n3"])

    assert result == FilterResult(
        node_names=["n2"],
        failed_nodes={
            "n1": PASSED.format("n2"),
            "n3": "fits, but hami chose n2 under the binpack node policy",
        },
    )
    messages = [m for _, reason, m in await world.events() if reason == "FilteringSucceed"]
    assert messages[-1] == (
        f"find fit node(n2), 0 nodes not fit, 3 nodes fit(n1:2.62,n3:0.00,n2:0.00); passed over n1: {HELD}"
    )
    assert skips(world) == 1

    watch_shows(world, housekeeping, gpu_node("n1"))  # the device plugin released it: HAMi's order, the fullest first
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


# --- a /bind of this process in progress, before the node watch shows its lock ----------------------------------


async def test_a_node_with_a_bind_in_progress_is_passed_over_before_the_watch_shows_its_lock() -> None:
    backing = GatedCluster()
    world = make_world(backing=backing)
    housekeeping = watched_locks(world)
    for name in NODES:
        world.add_node(gpu_node(name))
    first = await world.filter(world.add_pod(gpu_pod("p0")), NODES, settle=False)  # its commit waits for the gate
    assert first.node_names == ["n1"]
    binding = asyncio.create_task(bind(world, "p0", "n1"))
    await asyncio.sleep(0)  # the bind has started: it waits for p0's allocation commit, no lock taken yet
    assert keys.NODE_LOCK not in world.cluster.nodes["n1"].metadata.annotations
    assert (housekeeping.locks, busy_keys(world.extender.busy)) == ({}, {"n1": {keys.NODE_LOCK}})

    result = await world.filter(world.add_pod(gpu_pod("p1")), NODES, settle=False)

    assert result == FilterResult(
        node_names=["n2"], failed_nodes={"n1": PASSED.format("n2"), "n3": NOT_CHOSEN.format("n2")}
    )
    assert skips(world) == 1

    backing.gate.set()
    assert (await binding).error == ""
    await world.extender.settle_all()
    assert keys.NODE_LOCK in world.cluster.nodes["n1"].metadata.annotations  # taken; the watch does not show it yet

    again = await world.filter(world.add_pod(gpu_pod("p2")), NODES)  # n1 and n2 tie (one pod each): n1 by name

    assert again == FilterResult(
        node_names=["n2"], failed_nodes={"n1": PASSED.format("n2"), "n3": NOT_CHOSEN.format("n2")}
    )
    assert skips(world) == 2

    watch_shows(world, housekeeping, world.cluster.nodes["n1"])  # p0's lock: the watch's to count from now on
    assert (world.extender.busy.binding, busy_keys(world.extender.busy)) == ({}, {"n1": {keys.NODE_LOCK}})
    watch_shows(world, housekeeping, gpu_node("n1"))  # released by the device plugin
    assert busy_keys(world.extender.busy) == {}


async def test_a_node_is_free_again_once_the_bind_in_progress_there_fails() -> None:
    backing = GatedCluster()
    world = make_world(backing=backing)
    for name in ("n1", "n2"):
        world.add_node(gpu_node(name))
    assert (await world.filter(world.add_pod(gpu_pod("p0")), ["n1", "n2"], settle=False)).node_names == ["n1"]
    world.cluster.fail("bind", ApiError("etcdserver: request timed out", 500))
    binding = asyncio.create_task(bind(world, "p0", "n1"))
    await asyncio.sleep(0)
    assert busy_keys(world.extender.busy) == {"n1": {keys.NODE_LOCK}}
    backing.gate.set()

    assert (await binding).error == f"binding {NS}/p0 to n1 failed: etcdserver: request timed out"
    assert keys.NODE_LOCK not in world.cluster.nodes["n1"].metadata.annotations  # taken, and released again
    assert (world.extender.busy.binding, busy_keys(world.extender.busy)) == ({}, {})

    result = await world.filter(world.add_pod(gpu_pod("p1")), ["n1", "n2"])  # two empty nodes: n1 by name

    assert result == FilterResult(node_names=["n1"], failed_nodes={"n2": NOT_CHOSEN.format("n1")})
    assert skips(world) == 0


async def test_a_lock_taken_that_the_watch_never_shows_stops_counting_after_the_expiry(world: World) -> None:
    now = [1000.0]
    world.extender.busy.clock = lambda: now[0]
    for name in ("n1", "n2"):
        world.add_node(gpu_node(name))
    assert (await world.filter(world.add_pod(gpu_pod("p0")), ["n1", "n2"])).node_names == ["n1"]
    assert (await bind(world, "p0", "n1")).error == ""  # p0's lock is taken; no node event is delivered
    now[0] += BIND_MARK_SECONDS - 0.5

    held = await world.filter(world.add_pod(gpu_pod("p1")), ["n1", "n2"])

    assert held == FilterResult(node_names=["n2"], failed_nodes={"n1": PASSED.format("n2")})
    now[0] += 0.5

    lapsed = await world.filter(world.add_pod(gpu_pod("p2")), ["n1", "n2"])  # one pod each: n1 by name

    assert lapsed == FilterResult(node_names=["n1"], failed_nodes={"n2": NOT_CHOSEN.format("n1")})
    assert (world.extender.busy.binding, skips(world)) == ({}, 1)


async def test_without_a_bind_in_progress_repeated_filters_decide_as_hami(world: World) -> None:
    # A harness that calls /filter again and again without binding: nothing marks a node at /filter time.
    for name in NODES:
        world.add_node(gpu_node(name))
    pods = [world.add_pod(gpu_pod(f"p{i}")) for i in range(3)]

    results = [await world.filter(pod, NODES) for pod in pods + pods]

    expected = FilterResult(node_names=["n1"], failed_nodes={n: NOT_CHOSEN.format("n1") for n in ("n2", "n3")})
    assert results == [expected] * 6  # binpack: every pod on the fullest node, the same again when filtered again
    assert (busy_keys(world.extender.busy), skips(world)) == ({}, 0)
    assert all(HELD not in m for _, reason, m in await world.events() if reason == "FilteringSucceed")


async def test_only_the_locks_its_pods_bind_takes_count_for_a_bind_in_progress(world: World) -> None:
    for name in ("n1", "n2"):
        world.add_node(gpu_node(name))
    world.extender.busy.bind_started("n1", NS, "mlu", {DSMLU_LOCK})  # a Cambricon pod's bind takes its own lock

    first = await world.filter(world.add_pod(gpu_pod("p1")), ["n1", "n2"])  # an NVIDIA pod: hami.io/mutex.lock

    assert first.node_names == ["n1"]
    world.extender.busy.bind_started("n1", NS, "gpu", {keys.NODE_LOCK})

    second = await world.filter(world.add_pod(gpu_pod("p2")), ["n1", "n2"])

    assert second == FilterResult(node_names=["n2"], failed_nodes={"n1": PASSED.format("n2")})
