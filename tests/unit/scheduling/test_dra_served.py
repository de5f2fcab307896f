"""The view of nodes only a DRA driver serves (``hami.scheduling.dra.served.ServedView``, DRA mode): the watches'
events in any order give the same view, the scheduler's own state never gains a card from it, and a node with a
hami registration of the vendor is never in it (so a claim is never counted twice) (hypothesis)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.config.dra import DraConfig, DraDriverConfig
from hami.devices.base import NodeInventory
from hami.protocol.dra import ResourceClaim
from hami.scheduling.dra.served import DRA_SHARES, ServedView
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import NVIDIA, gpu, vendors
from tests.unit.scheduling.drafix import DRIVER, result, shared_device, synthetic_claim, synthetic_slice

NODES = ("a", "b")


def uuid(node: str, i: int) -> str:
    return f"GPU-{node}-{i}"


Event = Callable[[ServedView], None]


def events(registered: frozenset[str]) -> list[tuple[str, Event]]:
    """Per node: its slice (two 16Gi cards) and a claim of 2Gi on its card 1; the registrations of ``registered``
    nodes (same UUIDs) come as node events once the main state has them."""
    out: list[tuple[str, Event]] = []
    for node in NODES:
        devices = [shared_device(f"gpu-{i}", uuid(node, i), "16Gi", cores=100, cores_default=0) for i in range(2)]
        sl = synthetic_slice(f"s-{node}", node, devices)
        claim = synthetic_claim(f"c-{node}", [result("gpu-1", node, f"s-{node}", memory="2Gi", cores="10")])
        out.append((f"slice {node}", lambda v, sl=sl: v.slice_event(sl)))
        out.append((f"claim {node}", lambda v, c=claim: v.claim_event(c)))
        out.append((f"node {node}", lambda v, n=node: v.node_event(n)))
    return out


def main_state(registered: frozenset[str]) -> ClusterState:
    state = ClusterState(vendors())
    for node in NODES:
        cards = (gpu(uuid(node, 0), index=0), gpu(uuid(node, 1), index=1)) if node in registered else ()
        state.set_node(node, {NVIDIA: NodeInventory(cards)} if cards else {})
    return state


def seen(view: ServedView) -> dict[str, list[tuple[str, int, int, int]]]:
    """Per node in the view: each card's UUID, slots, used MiB and used cores."""
    return {
        name: [
            (info.id, info.count, t.usedmem[i], t.usedcores[i])
            for t in node.tables.values()
            for i, info in enumerate(t.infos)
        ]
        for name, node in sorted(view.state.nodes.items())
    }


@settings(max_examples=60, deadline=None)
@given(order=st.permutations(range(6)), registered=st.sets(st.sampled_from(NODES)).map(frozenset))
def test_any_order_of_events_gives_the_same_view(order: list[int], registered: frozenset[str]) -> None:
    main = main_state(registered)
    view = ServedView(main, DraConfig(drivers=(DraDriverConfig(driver=DRIVER),)))
    steps = events(registered)
    for k in order:
        steps[k][1](view)
    expected = {
        node: [(uuid(node, 0), DRA_SHARES, 0, 0), (uuid(node, 1), DRA_SHARES, 2048, 10)]
        for node in NODES
        if node not in registered
    }
    assert seen(view) == expected
    assert all(node.tables.get(NVIDIA) is None or node.tables[NVIDIA].used == [0, 0] for node in main.nodes.values())
    assert view.state.verify() == []


def test_a_registration_arriving_takes_the_node_out_and_leaving_brings_it_back() -> None:
    main = main_state(frozenset())
    view = ServedView(main, DraConfig(drivers=(DraDriverConfig(driver=DRIVER),)))
    for _, step in events(frozenset()):
        step(view)
    assert set(view.state.nodes) == {"a", "b"}
    main.set_node("a", {NVIDIA: NodeInventory((gpu(uuid("a", 0), index=0), gpu(uuid("a", 1), index=1)))})
    view.node_event("a")
    assert set(view.state.nodes) == {"b"}
    main.set_node("a", {})
    view.node_event("a")
    assert seen(view)["a"] == [(uuid("a", 0), DRA_SHARES, 0, 0), (uuid("a", 1), DRA_SHARES, 2048, 10)]


class _TakesEveryClaim(ServedView):
    """The view as it was first built: its ledger takes every claim (the reference the lean view must equal)."""

    def claim_event(self, claim: ResourceClaim, deleted: bool = False) -> None:
        self.ledger.claim_event(claim, deleted)


def _claim(node: str, state: str) -> tuple[ResourceClaim, bool]:
    """Node ``node``'s claim on its card 1: allocated, deallocated (no allocation) or deleted."""
    claim = synthetic_claim(f"c-{node}", [result("gpu-1", node, f"s-{node}", memory="2Gi", cores="10")])
    if state == "deallocated":
        claim = msgspec.structs.replace(claim, status=msgspec.structs.replace(claim.status, allocation=None))
    return claim, state == "deleted"


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["slice", "unslice", "claim", "register", "unregister"]),
        st.sampled_from(NODES),
        st.sampled_from(["allocated", "deallocated", "deleted"]),
    ),
    max_size=14,
)


@settings(max_examples=80, deadline=None)
@given(_OPS)
def test_claims_waiting_aside_give_the_view_every_claim_would(ops: list[tuple[str, str, str]]) -> None:
    """Whatever the order of slices, claims (allocated, deallocated, deleted) and registrations coming and going,
    the view whose ledger takes only the claims that can count in it shows what a ledger taking every claim shows."""
    main = main_state(frozenset())
    config = DraConfig(drivers=(DraDriverConfig(driver=DRIVER),))
    lean, full = ServedView(main, config), _TakesEveryClaim(main, config)
    for op, node, state in ops:
        cards = (gpu(uuid(node, 0), index=0), gpu(uuid(node, 1), index=1))
        devices = [shared_device(f"gpu-{i}", uuid(node, i), "16Gi", cores=100, cores_default=0) for i in range(2)]
        for view in (lean, full):
            if op in ("slice", "unslice"):
                view.slice_event(synthetic_slice(f"s-{node}", node, devices), deleted=op == "unslice")
            elif op == "claim":
                view.claim_event(*_claim(node, state))
        if op in ("register", "unregister"):
            main.set_node(node, {NVIDIA: NodeInventory(cards)} if op == "register" else {})
            for view in (lean, full):
                view.node_event(node)
        assert seen(lean) == seen(full)
        assert sorted(r.key for r in lean.ledger.records()) == sorted(r.key for r in full.ledger.records())
        assert lean.state.verify() == []


def test_a_claim_on_a_registered_card_is_left_to_the_schedulers_ledger() -> None:
    """The view's ledger does not take a claim of a registered node (the scheduler's ledger charges it): no second
    derivation per claim event. Once the registration goes, the claim counts in the view."""
    main = main_state(frozenset({"a"}))
    view = ServedView(main, DraConfig(drivers=(DraDriverConfig(driver=DRIVER),)))
    for _, step in events(frozenset({"a"})):
        step(view)
    assert [c.metadata.name for c in view.ledger.claims()] == ["c-b"]
    main.set_node("a", {})
    view.node_event("a")
    assert sorted(c.metadata.name for c in view.ledger.claims()) == ["c-a", "c-b"]
    assert seen(view)["a"] == [(uuid("a", 0), DRA_SHARES, 0, 0), (uuid("a", 1), DRA_SHARES, 2048, 10)]
