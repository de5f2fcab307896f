"""The cycle's outcomes as data (``hami.scheduling.cycle.Cycle``), over the real port on an in-memory cluster.

The extender tests check what the edge makes of them (answers, events, metrics); these check the data itself.
"""

from __future__ import annotations

import asyncio

from hami.errors import ApiError, TooManyRequests
from hami.protocol import keys
from hami.protocol.nodelock import NodeLock, encode_node_lock
from hami.protocol.reasons import Reason
from hami.scheduling.cycle import ApiFailure, Bound, Cleanup, Cleared, Filtered
from tests.unit.server.support import NOW_DT, NS, World, gpu_node, gpu_pod


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
    world.extender.cycle.background_commit = False
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

    cycle.report_cleanup, cycle.sleep, cycle.cleanup_backoff = reported.append, pause, (1.0, 3.0)
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

    cycle.sleep, cycle.stopwatch = pause, lambda: 0.0
    cycle.lock_retry_timeout, cycle.lock_retry_interval = 1.0, 0.25

    outcome = await cycle.bind(NS, "p1", "uid-p1", "n1")

    assert outcome.result is Bound.FAILED
    assert "timed out after 1s waiting for node n1 to be unlocked" in outcome.message
    assert pauses == [0.25, 0.25, 0.25, 0.25]
