"""Busy nodes (a bind in progress holds or is about to take their node lock) rank after the free ones; HAMi's order
otherwise.

``decide(..., busy=...)`` and ``rank``: under ``binpack`` a burst would queue behind the fullest node's lock, one
pod per hand-over, so a locked node is passed over for the best free one. With no busy node, or every fitting
node busy, the decision is exactly HAMi's.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.scheduling.decide import LISTED, decide, rank, reserve, select
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import NVIDIA, gpus, pod_request, req, state
from tests.unit.scheduling.test_properties import PROPS, build, run, scenarios

NOW = 1_700_000_000
NODES = ["node-c", "node-b", "node-a"]
HELD = "a bind in progress there holds or is about to take the node lock"


def cluster(*more: str) -> ClusterState:
    """Three nodes of one 8 GiB card; node-b is half used: binpack ranks b, a, c; spread a, c, b. ``more``: nodes
    whose card is full."""
    s = state({"node-a": gpus(1), "node-b": gpus(1), "node-c": gpus(1), **{n: gpus(1) for n in more}})
    s.nodes["node-b"].tables[NVIDIA].charge(0, 5, 4096, 50)
    for name in more:
        s.nodes[name].tables[NVIDIA].charge(0, 10, 8192, 100)
    return s


@pytest.mark.parametrize(
    ("policy", "busy", "chosen", "scores", "passed"),
    [
        pytest.param("binpack", {"node-b"}, "node-a", ["node-a", "node-c", "node-b"], ("node-b",), id="binpack"),
        pytest.param("spread", {"node-a"}, "node-c", ["node-c", "node-b", "node-a"], ("node-a",), id="spread"),
        pytest.param(
            "binpack", {"node-b", "node-a"}, "node-c", ["node-c", "node-b", "node-a"], ("node-b", "node-a"), id="two"
        ),
    ],
)
def test_a_busy_node_ranks_after_every_free_fitting_node(
    policy: str, busy: set[str], chosen: str, scores: list[str], passed: tuple[str, ...]
) -> None:
    decision = decide(cluster(), pod_request(req(memreq=100), node_policy=policy), NODES, NOW, busy=busy)

    assert (decision.node, list(decision.scores), decision.passed_over) == (chosen, scores, passed)
    assert decision.annotations["hami.io/vgpu-node"] == chosen
    assert [d.uuid for d in decision.devices[NVIDIA][0]] == ["GPU-0"]
    listed = ",".join(f"{n}:{decision.scores[n]:.2f}" for n in reversed(scores))
    assert decision.message == (
        f"find fit node({chosen}), 0 nodes not fit, 3 nodes fit({listed}); passed over {','.join(passed)}: {HELD}"
    )


def test_the_binpack_order_is_kept_among_the_free_nodes_and_among_the_busy_ones() -> None:
    s = state({f"node-{i}": gpus(1) for i in range(5)})
    for i in range(5):
        s.nodes[f"node-{i}"].tables[NVIDIA].charge(0, 1, 1000 * i, 0)  # node-4 the fullest, node-0 the emptiest
    decision = decide(s, pod_request(req(memreq=100)), list(s.nodes), NOW, busy={"node-4", "node-2"})

    assert decision.node == "node-3"
    assert list(decision.scores) == ["node-3", "node-1", "node-0", "node-4", "node-2"]
    assert decision.passed_over == ("node-4",)  # node-2 ranks after the chosen node anyway: not passed over


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_with_every_fitting_node_busy_the_decision_is_hamis(policy: str) -> None:
    request = pod_request(req(memreq=100), node_policy=policy)
    hamis = decide(cluster(), request, NODES, NOW)

    assert decide(cluster(), request, NODES, NOW, busy=set(NODES)) == hamis
    assert hamis.passed_over == ()
    assert HELD not in hamis.message


@pytest.mark.parametrize(
    "busy",
    [
        pytest.param(set(), id="none"),
        pytest.param({"node-c"}, id="ranked-after-the-choice"),
        pytest.param({"node-x"}, id="not-a-candidate"),
        pytest.param({"node-full"}, id="does-not-fit"),
    ],
)
def test_a_busy_node_that_would_not_be_chosen_changes_nothing(busy: set[str]) -> None:
    s = cluster("node-full")
    request = pod_request(req(memreq=100))
    candidates = [*NODES, "node-full"]

    assert decide(s, request, candidates, NOW, busy=busy) == decide(s, request, candidates, NOW)


def test_a_burst_goes_over_the_free_nodes_in_binpack_order_while_the_fullest_is_busy() -> None:
    """Each pod's bind locks its node (the lock is held until its device plugin has allocated): the next pods go to
    the next best free node, then back to the fullest once its lock is free."""
    s = state({f"node-{i}": gpus(1, devmem=16000) for i in range(3)})
    s.nodes["node-1"].tables[NVIDIA].charge(0, 1, 8000, 0)  # the fullest
    locked: set[str] = set()
    placed = []
    for k in range(3):
        request = pod_request(req(memreq=1000), uid=f"uid-{k}", name=f"p{k}")
        decision = decide(s, request, list(s.nodes), NOW, busy=locked)
        reserve(s, request, decision)
        assert decision.node is not None
        locked.add(decision.node)
        placed.append(decision.node)
    locked.discard("node-1")  # its device plugin released the lock
    last = decide(s, pod_request(req(memreq=1000), uid="uid-3", name="p3"), list(s.nodes), NOW, busy=locked)

    assert placed == ["node-1", "node-0", "node-2"]  # HAMi: node-1 three times, each bind waiting for the last
    assert last.node == "node-1"


def test_the_message_names_the_best_listed_busy_nodes_passed_over() -> None:
    s = state({f"node-{i:02}": gpus(1) for i in range(LISTED + 3)})
    for name, node in s.nodes.items():
        node.tables[NVIDIA].charge(0, 1, 100 * (int(name[-2:]) + 1), 0)  # node-12 the fullest
    busy = {f"node-{i:02}" for i in range(1, LISTED + 3)}
    decision = decide(s, pod_request(req(memreq=100)), list(s.nodes), NOW, busy=busy)

    assert decision.node == "node-00"
    assert len(decision.passed_over) == LISTED + 2
    named = ",".join(f"node-{i:02}" for i in range(LISTED + 2, 2, -1))
    assert decision.message.endswith(f"; passed over {named},… 2 more: {HELD}")


def test_rank() -> None:
    assert rank(["c", "a", "b"], ()) == (["c", "a", "b"], ())
    assert rank(["c", "a", "b"], {"c"}) == (["a", "b", "c"], ("c",))
    assert rank(["c", "a", "b"], {"c", "b"}) == (["a", "c", "b"], ("c",))
    assert rank(["c", "a", "b"], {"a"}) == (["c", "b", "a"], ())
    assert rank(["c", "a", "b"], {"a", "b", "c"}) == (["c", "a", "b"], ())
    assert rank([], {"a"}) == ([], ())


# --- properties ------------------------------------------------------------------------------------------------


@PROPS
@given(scenarios(), st.randoms(use_true_random=False))
def test_busy_nodes_only_reorder_the_fitting_nodes(scenario: Any, rnd: random.Random) -> None:
    """Whatever is busy: the same nodes fit and are rejected; the chosen node is HAMi's best free fitting node
    (HAMi's choice when none is free); no busy node means HAMi's decision exactly."""
    nodes, quotas, ops = scenario
    world = build(nodes, quotas)
    for op, arg in ops:
        if op == "place":
            candidates = [*world.inventories, "ghost-node"]
            hamis = decide(world.state, arg, candidates, NOW)
            assert decide(world.state, arg, candidates, NOW, busy=()) == hamis
            busy = {n for n in candidates if rnd.random() < 0.5}
            decision = decide(world.state, arg, candidates, NOW, busy=busy)
            assert decision.rejected == hamis.rejected
            assert dict(decision.scores) == dict(hamis.scores)
            order = select(hamis.scores, arg.node_policy)
            free = [n for n in order if n not in busy]
            assert decision.node == (free[0] if free else hamis.node)
            if decision.node is not None:
                assert decision.node in hamis.scores  # always a fitting node
                assert list(decision.scores) == free + [n for n in order if n in busy]
                assert decision.passed_over == (tuple(order[: order.index(free[0])]) if free else ())
        run(world, op, arg)
