"""The cycle's outcomes as data (``hami.scheduling.cycle.Cycle``), over the real port on an in-memory cluster.

The extender tests check what the edge makes of them (answers, events, metrics); these check the data itself.
"""

from __future__ import annotations

from hami.errors import ApiError
from hami.protocol.reasons import Reason
from hami.scheduling.cycle import ApiFailure, Bound, Filtered
from tests.unit.server.support import NS, World, gpu_node, gpu_pod


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
