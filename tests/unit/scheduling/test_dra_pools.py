"""A node's ResourceSlice pool is believed only from that node (issue 39): a slice another node publishes in it, at
any generation and in any order, changes nothing of the pool's accounting and is reported; a claim is charged only
on the node its allocation names."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.protocol.dra import NodeSelector, ResourceClaim, ResourceSlice
from hami.scheduling.dra import DraLedger, ProblemKind, held_by_card
from hami.scheduling.dra.pools import owner
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import NVIDIA
from tests.unit.scheduling.drafix import (
    A100_MIB,
    UUID,
    claim,
    exclusive_device,
    ledger,
    registered,
    result,
    shared_device,
    slice_,
    synthetic_claim,
    synthetic_slice,
)

A, B = "dra-node-1", "dra-node-2"
GPU0, GPU2 = UUID[(A, "gpu-0")], UUID[(A, "gpu-2")]
SMALL0, SMALL1 = UUID[(B, "gpu-0")], UUID[(B, "gpu-1")]


def usage(state: ClusterState, node: str, uuid: str) -> tuple[int, int, int]:
    table = state.nodes[node].tables[NVIDIA]
    used, mem, cores, _ = table.usage_of(table.index_of[uuid])
    return used, mem, cores


def forged(generation: int, uuid: str = SMALL0, name: str = "forged", node: str = B) -> ResourceSlice:
    """Node B's slice in node A's pool, naming A's device ``gpu-2`` (with one of B's cards, or A's)."""
    return synthetic_slice(name, node, [exclusive_device("gpu-2", uuid, "80Gi")], pool=A, generation=generation)


def on_node(c: ResourceClaim, node: str) -> ResourceClaim:
    """``c`` with kube-scheduler's allocation node selector naming ``node``."""
    assert c.status.allocation is not None
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    c.status.allocation.node_selector = msgspec.convert({"nodeSelectorTerms": [term]}, type=NodeSelector)
    return c


def charged(book: DraLedger) -> dict[tuple[str, str, str], tuple[int, int, int]]:
    return {k: (h.slots, h.mem, h.cores) for k, h in held_by_card(book.state).items()}


@pytest.mark.parametrize("generation", [0, 1, 2, 99])
@pytest.mark.parametrize("forged_first", [False, True])
@pytest.mark.parametrize("uuid", [SMALL0, GPU2], ids=["b-card", "a-card"])
def test_a_slice_of_another_node_in_a_nodes_pool_changes_nothing(
    generation: int, forged_first: bool, uuid: str
) -> None:
    book = ledger()
    slices = [slice_(), forged(generation, uuid)]
    for sl in reversed(slices) if forged_first else slices:
        book.slice_event(sl)
    book.claim_event(claim("claim-exclusive"))  # gpu-2 of pool dra-node-1, allocated on dra-node-1
    assert usage(book.state, A, GPU2) == (10, A100_MIB, 100)  # the whole card, as without the forged slice
    assert charged(book) == {(A, NVIDIA, GPU2): (10, A100_MIB, 100)}
    (problem,) = book.problems()
    assert (problem.kind, problem.object, problem.node) == (ProblemKind.INCONSISTENT_POOL, "ResourceSlice forged", B)
    assert f"published by node {B}, but the pool belongs to node {A}: not used" in problem.message
    assert book.state.verify() == []


def test_the_forged_slice_is_reported_when_it_arrives_and_forgotten_when_it_goes() -> None:
    book = ledger()
    book.slice_event(slice_())
    book.claim_event(claim("claim-exclusive"))
    (raised,) = book.slice_event(forged(5))
    assert raised.kind is ProblemKind.INCONSISTENT_POOL
    assert book.slice_event(forged(6)) == []  # the same problem: not raised again
    assert book.slice_event(forged(6), deleted=True) == []
    assert book.problems() == ()
    assert usage(book.state, A, GPU2) == (10, A100_MIB, 100)


def test_a_pool_published_only_by_another_node_does_not_take_the_nodes_claims() -> None:
    """Node A's slices are gone (its driver restarting); B publishes A's pool alone: A's claims stay on A where
    they were last published, and never move to B's card of the forged UUID."""
    book = ledger()
    book.slice_event(slice_())
    book.claim_event(claim("claim-exclusive"))
    book.slice_event(slice_(), deleted=True)
    book.slice_event(forged(7, SMALL0))
    assert usage(book.state, A, GPU2) == (10, A100_MIB, 100)
    assert usage(book.state, B, SMALL0) == (0, 0, 0)
    assert book.state.verify() == []


def test_a_claim_allocated_on_one_node_is_never_charged_to_another_nodes_card() -> None:
    book = ledger()
    book.slice_event(slice_())
    (problem,) = book.claim_event(on_node(synthetic_claim("c", [result("gpu-2", A)]), B))
    assert (problem.kind, problem.node) == (ProblemKind.UNKNOWN_DEVICE, B)
    assert f"no ResourceSlice of node {B} hami uses" in problem.message
    assert book.state.held == {}


def test_a_pool_several_nodes_publish_and_none_names_counts_each_nodes_slices_for_its_own_claims() -> None:
    book = ledger()
    book.slice_event(synthetic_slice("s-a", A, [shared_device("gpu-0", GPU0, "80Gi")], pool="shared", generation=1))
    book.slice_event(synthetic_slice("s-b", B, [shared_device("gpu-0", SMALL0)], pool="shared", generation=9))
    book.claim_event(on_node(synthetic_claim("ca", [result("gpu-0", "shared", "s", memory="1Gi")]), A))
    book.claim_event(on_node(synthetic_claim("cb", [result("gpu-0", "shared", "s", memory="2Gi")]), B))
    assert charged(book) == {(A, NVIDIA, GPU0): (1, 1024, 0), (B, NVIDIA, SMALL0): (1, 2048, 0)}
    pools = [p for p in book.problems() if p.object.startswith("ResourceSlice")]
    assert [(p.kind, p.node) for p in pools] == [(ProblemKind.INCONSISTENT_POOL, A), (ProblemKind.INCONSISTENT_POOL, B)]
    assert "named after none of them" in pools[0].message
    (problem,) = book.claim_event(synthetic_claim("cx", [result("gpu-0", "shared", "s", memory="1Gi")]))
    assert problem.kind is ProblemKind.INCONSISTENT_POOL  # no node named: whose device it is cannot be told
    assert f"published by nodes {A}, {B}" in problem.message
    assert len(book.state.held) == 2


@pytest.mark.parametrize(
    ("pool", "nodes", "expected"),
    [
        ("n1", ["n1"], "n1"),
        ("p", ["n1"], "n1"),
        ("n1", ["n1", "n2"], "n1"),
        ("p", ["n1", "n2"], None),
        ("p", [], None),
    ],
)
def test_the_pools_node_is_the_one_it_is_named_after_else_the_only_one(
    pool: str, nodes: list[str], expected: str | None
) -> None:
    assert owner(("d", pool), nodes) == expected


# --- property: whatever node B publishes in node A's pool, in any order, A's accounting is what A alone makes ------

HONEST = st.lists(
    st.tuples(st.sampled_from(["a1", "a2"]), st.integers(0, 4), st.sampled_from(["gpu-0", "gpu-2"]), st.booleans()),
    max_size=4,
)
FORGED = st.lists(
    st.tuples(
        st.sampled_from(["b1", "b2"]),
        st.integers(-1, 100),
        st.sampled_from(["gpu-0", "gpu-2", "gpu-9"]),
        st.sampled_from([SMALL0, SMALL1, GPU0, GPU2]),
        st.booleans(),
    ),
    max_size=5,
)


def honest_slice(name: str, generation: int, device: str) -> ResourceSlice:
    return synthetic_slice(
        name, A, [exclusive_device(device, UUID[(A, device)], "80Gi")], pool=A, generation=generation
    )


def replay(events: list[tuple[str, Any]], with_forged: bool) -> DraLedger:
    book = ledger(registered())
    for kind, event in events:
        if kind == "claim":
            book.claim_event(event)
        elif kind == "honest" or with_forged:
            sl, deleted = event
            book.slice_event(sl, deleted=deleted)
    return book


@settings(max_examples=80, deadline=None)
@given(HONEST, FORGED, st.permutations(range(11)))
def test_a_forged_slice_never_changes_the_pools_accounting(
    honest: list[Any], forgeries: list[Any], order: list[int]
) -> None:
    """Claims as kube-scheduler allocates them (naming their node); honest and forged slices in any order."""
    events: list[tuple[str, Any]] = [("honest", (honest_slice(n, g, d), deleted)) for n, g, d, deleted in honest]
    events += [
        ("forged", (synthetic_slice(n, B, [exclusive_device(d, u, "80Gi")], pool=A, generation=g), deleted))
        for n, g, d, u, deleted in forgeries
    ]
    for device in ("gpu-0", "gpu-2"):
        events.append(("claim", on_node(synthetic_claim(f"c-{device}", [result(device, A)]), A)))
    events = [events[i] for i in order if i < len(events)]
    alone, attacked = replay(events, with_forged=False), replay(events, with_forged=True)
    assert charged(attacked) == charged(alone)
    assert attacked.state.verify() == []
    assert all(key[0] != B for key in charged(attacked))
