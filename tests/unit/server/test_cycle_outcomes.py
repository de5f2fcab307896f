"""The cycle's outcomes as data (``hami.scheduling.cycle.Cycle``), over the real port on an in-memory cluster.

The extender tests check what the edge makes of them (answers, events, metrics); these check the data itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hami.errors import ApiError, TooManyRequests
from hami.k8s.lockwaits import NodeLockWaits
from hami.protocol import keys
from hami.protocol.nodelock import NodeLock, decode_node_lock, encode_node_lock
from hami.protocol.reasons import Reason
from hami.scheduling.outcomes import ApiFailure, Bound, Cleanup, Cleared, Filtered
from hami.scheduling.ports import Unobserved
from tests.unit.server.support import NOW_DT, NS, World, gpu_node, gpu_pod


class Heard(Unobserved):
    """An observer that hears what the test listens to."""

    def __init__(
        self,
        cleanup: Callable[[Cleanup], None] = lambda cleanup: None,
        lock_wait: Callable[[float, bool], None] = lambda seconds, timed_out: None,
    ) -> None:
        self.cleanup, self.lock_wait = cleanup, lock_wait

    def cleanup_retried(self, cleanup: Cleanup) -> None:
        self.cleanup(cleanup)

    def lock_waited(self, seconds: float, timed_out: bool) -> None:
        self.lock_wait(seconds, timed_out)


def two_nodes(world: World) -> None:
    world.add_node(gpu_node("n1"))
    world.add_node(gpu_node("small", mem=2000))


async def test_a_scheduled_outcome_has_the_node_the_devices_and_every_rejection_with_numbers(world: World) -> None:
    two_nodes(world)
    pod = world.add_pod(gpu_pod("p1", mem=3000, cores=30))

    outcome = await world.extender.cycle.filter(pod, ["n1", "small"])
    await world.extender.settle_all()

    assert (outcome.result, outcome.error, outcome.api_errors) == (Filtered.SCHEDULED, "", ())
    decision = outcome.decision
    assert decision is not None
    assert decision.node == "n1"
    assert [d.uuid for d in decision.devices["NVIDIA"][0]] == ["GPU-n1-0"]
    rejection = decision.rejected["small"]
    assert (rejection.counts, rejection.total, rejection.unresolvable) == (
        {Reason.CARD_INSUFFICIENT_MEMORY: 2},
        2,
        True,
    )
    assert world.pod("p1").metadata.annotations["hami.io/vgpu-node"] == "n1"


async def test_an_unschedulable_outcome_writes_nothing(world: World) -> None:
    two_nodes(world)
    pod = world.add_pod(gpu_pod("p1", mem=30000))

    outcome = await world.extender.cycle.filter(pod, ["n1", "small"])

    assert outcome.result is Filtered.UNSCHEDULABLE
    assert outcome.decision is not None
    assert outcome.decision.node is None
    assert set(outcome.decision.rejected) == {"n1", "small"}
    assert world.cluster.calls == []
    assert world.state.pods == {}


async def test_a_failed_commit_is_an_outcome_with_the_failed_call(world: World) -> None:
    world.extender.cycle.settings.background_commit = False
    two_nodes(world)
    pod = world.add_pod(gpu_pod("p1"))
    world.cluster.fail("patch_pod_metadata", ApiError("etcdserver: request timed out", 500))

    outcome = await world.extender.cycle.filter(pod, ["n1"])

    assert outcome.result is Filtered.COMMIT_FAILED
    assert outcome.api_errors == (ApiFailure("patch_pod"),)
    assert "request timed out" in outcome.error
    assert world.state.pods == {}  # unreserved


async def test_bind_outcomes(world: World) -> None:
    two_nodes(world)
    pod = world.add_pod(gpu_pod("p1"))
    await world.extender.cycle.filter(pod, ["n1"])

    wrong = await world.extender.cycle.bind(NS, "p1", "uid-other", "n1")
    bound = await world.extender.cycle.bind(NS, "p1", "uid-p1", "n1")

    assert (wrong.result, wrong.api_errors) == (Bound.REFUSED, ())
    assert wrong.message == f"binding {NS}/p1 to n1 refused: the request is for UID uid-other, but the pod of that " + (
        "name is UID uid-p1 (deleted and re-created, or a stale or forged request)"
    )
    assert (bound.result, bound.node, bound.message) == (
        Bound.BOUND,
        "n1",
        f"Successfully binding node [n1] to {NS}/p1",
    )
    assert world.pod("p1").spec.node_name == "n1"


THROTTLED = TooManyRequests("too many requests, please try again later", 429, retry_after=1.0)


async def test_a_failed_clean_up_is_retried_with_a_doubling_pause_and_each_retry_is_an_outcome(world: World) -> None:
    cycle = world.extender.cycle
    two_nodes(world)
    await world.filter(world.add_pod(gpu_pod("p1")), ["n1"])
    world.deliver(NS, "p1")
    reported: list[Cleanup] = []
    pauses: list[float] = []

    async def pause(seconds: float) -> None:  # the injected sleep: no clock in the test either
        pauses.append(seconds)
        await asyncio.sleep(0)

    cycle.observer, cycle.clocks.sleep, cycle.settings.cleanup_backoff = (
        Heard(cleanup=reported.append),
        pause,
        (1.0, 3.0),
    )
    world.cluster.fail("bind", THROTTLED)
    world.cluster.fail("patch_pod_metadata", THROTTLED, times=3)  # the bind's clean-up, then two retries

    outcome = await cycle.bind(NS, "p1", "uid-p1", "n1")

    assert outcome.result is Bound.FAILED
    assert [f.operation for f in outcome.api_errors] == ["patch_pod"]
    assert outcome.api_errors[0].log.endswith("; retrying")
    assert set(world.state.pods) == {"uid-p1"}  # kept while the annotations are on the pod
    await asyncio.wait_for(cycle.cleanups["uid-p1"], 5)
    assert [c.result for c in reported] == [Cleared.RETRYING, Cleared.RETRYING, Cleared.LANDED]
    assert "too many requests" in reported[0].error
    assert pauses == [1.0, 2.0, 3.0]
    assert keys.VGPU_NODE not in world.pod("p1").metadata.annotations
    assert world.state.pods == {}
    assert cycle.cleanups == {}


async def test_a_podgroup_members_lock_wait_counts_its_pauses(world: World) -> None:
    # The injected stopwatch stands still: the wait still ends, after timeout / interval pauses.
    cycle = world.extender.cycle
    two_nodes(world)
    world.add_pod(gpu_pod("holder"))
    node = world.cluster.nodes["n1"]
    node.metadata.annotations[keys.NODE_LOCK] = encode_node_lock(NodeLock(NOW_DT, NS, "holder"))
    world.add_node(node)
    member = gpu_pod("p1")
    member.metadata.labels[keys.POD_GROUP_LABEL] = "gang"
    await world.filter(world.add_pod(member), ["n1"])
    world.deliver(NS, "p1")
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    cycle.clocks.sleep, cycle.clocks.stopwatch = pause, lambda: 0.0
    cycle.settings.lock_retry_timeout, cycle.settings.lock_retry_interval = 1.0, 0.25

    outcome = await cycle.bind(NS, "p1", "uid-p1", "n1")

    assert outcome.result is Bound.FAILED
    assert "timed out after 1s waiting for node n1 to be unlocked" in outcome.message
    assert pauses == [0.25, 0.25, 0.25, 0.25]


# --- waiting for a node lock hand-over from another hami bind ----------------------------------------------


async def two_binds_on_one_node(world: World) -> None:
    """p1 bound to n1 by the cycle (its device plugin has not released the lock yet); p2 reserved on n1."""
    world.add_node(gpu_node("n1"))
    for name in ("p1", "p2"):
        await world.filter(world.add_pod(gpu_pod(name)), ["n1"])
        world.deliver(NS, name)
    assert (await world.extender.cycle.bind(NS, "p1", "uid-p1", "n1")).result is Bound.BOUND
    world.deliver(NS, "p1")


def release(world: World, waits: NodeLockWaits, node: str) -> None:
    """The device plugin releases the lock; the node watch delivers the node."""
    stored = world.cluster.nodes[node]
    stored.metadata.annotations.pop(keys.NODE_LOCK, None)
    world.add_node(stored)
    waits.seen(node, None)


async def test_a_bind_behind_another_hami_bind_waits_for_the_hand_over_and_is_woken_by_the_watch(world: World) -> None:
    cycle = world.extender.cycle
    await two_binds_on_one_node(world)
    waits, waited = NodeLockWaits(), []
    waits.seen("n1", world.cluster.nodes["n1"].metadata.annotations[keys.NODE_LOCK])
    cycle.lock_waits, cycle.settings.bind_lock_wait = waits, 20.0
    cycle.observer = Heard(lock_wait=lambda seconds, timed_out: waited.append(timed_out))
    calls_before = len(world.cluster.calls)

    bind = asyncio.create_task(cycle.bind(NS, "p2", "uid-p2", "n1"))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not bind.done()  # waiting, not failed
    assert waits.waiting("n1") == 1
    waiting_calls = len(world.cluster.calls)
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(world.cluster.calls) == waiting_calls  # the wait reads nothing from the API
    release(world, waits, "n1")
    outcome = await asyncio.wait_for(bind, 5)

    assert (outcome.result, outcome.message) == (Bound.BOUND, f"Successfully binding node [n1] to {NS}/p2")
    assert world.pod("p2").spec.node_name == "n1"
    assert waited == [False]
    assert world.cluster.calls[calls_before:].count("bind") == 1
    assert waits.waiting("n1") == 0


async def test_a_lock_wait_is_bounded_and_a_timeout_is_reported(world: World) -> None:
    cycle = world.extender.cycle
    await two_binds_on_one_node(world)
    now = [0.0]

    class Never:  # the holder's device plugin never releases: each wait runs out (on a clock of its own)
        async def wait(self, node: str, holder: str, timeout: float, key: str = keys.NODE_LOCK) -> bool:
            assert (node, holder) == ("n1", f"{NS}/p1")
            now[0] += timeout
            return False

        def tried(self, node: str, locked: bool, key: str = keys.NODE_LOCK) -> None:
            raise AssertionError("no turn was given")

    waited: list[tuple[float, bool]] = []
    cycle.lock_waits, cycle.settings.bind_lock_wait, cycle.clocks.stopwatch = Never(), 3.0, lambda: now[0]
    cycle.observer = Heard(lock_wait=lambda seconds, timed_out: waited.append((seconds, timed_out)))

    outcome = await cycle.bind(NS, "p2", "uid-p2", "n1")

    assert outcome.result is Bound.FAILED
    assert "timed out after 3s waiting for node n1 to be unlocked" in outcome.message
    assert f"locked by {NS}/p1" in outcome.message
    assert waited == [(3.0, True)]
    assert decode_node_lock(world.cluster.nodes["n1"].metadata.annotations[keys.NODE_LOCK]).name == "p1"
    assert keys.VGPU_NODE not in world.pod("p2").metadata.annotations  # the failed bind released p2's allocation


async def test_the_edge_counts_lock_waits_and_their_timeouts(world: World) -> None:
    extender = world.extender
    extender.lock_waited(0.5, False)
    extender.lock_waited(20.0, True)
    assert world.metrics.lock_wait_timeouts._value.get() == 1
    samples = {s.name: s.value for m in world.metrics.registry.collect() for s in m.samples}
    assert samples["hami_bind_lock_wait_seconds_count"] == 2
    assert samples["hami_bind_lock_wait_seconds_sum"] == 20.5
    assert samples["hami_bind_lock_wait_timeouts_total"] == 1


async def test_a_lock_held_by_a_pod_hami_did_not_place_is_not_waited_for(world: World) -> None:
    cycle = world.extender.cycle
    world.add_node(gpu_node("n1"))
    world.add_pod(gpu_pod("foreign"))  # a live pod, never placed by this hami: not a hand-over
    node = world.cluster.nodes["n1"]
    node.metadata.annotations[keys.NODE_LOCK] = encode_node_lock(NodeLock(NOW_DT, NS, "foreign"))
    world.add_node(node)
    await world.filter(world.add_pod(gpu_pod("p2")), ["n1"])
    world.deliver(NS, "p2")

    class Unused:
        async def wait(self, node: str, holder: str, timeout: float, key: str = keys.NODE_LOCK) -> bool:
            raise AssertionError("a foreign holder is not waited for")

        def tried(self, node: str, locked: bool, key: str = keys.NODE_LOCK) -> None:
            raise AssertionError("no turn was given")

    waited: list[bool] = []
    cycle.lock_waits, cycle.settings.bind_lock_wait = Unused(), 20.0
    cycle.observer = Heard(lock_wait=lambda seconds, timed_out: waited.append(timed_out))

    outcome = await cycle.bind(NS, "p2", "uid-p2", "n1")

    assert outcome.result is Bound.FAILED
    assert outcome.message.endswith(
        f"locked by {NS}/foreign since {NOW_DT.isoformat()} (expires after 300s): node lock contention"
    )
    assert waited == []
