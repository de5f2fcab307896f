"""DRA holdings beside device-plugin pods, over random clusters, claims and operations (hypothesis).

A random cluster registers GPUs with hami and publishes them in ResourceSlices (shared or exclusive devices). Claims
are allocated as kube-scheduler would: within what DRA itself has left of each device (and, since kube-scheduler
knows nothing of hami's slot count, the cluster is drawn with at least as many slots as shares). Then device-plugin
pods are placed through ``decide``/``reserve`` and removed, interleaved with claims deleted or deallocated, slices
republished and node registrations refreshed. After every step:

* no device holds more slots, memory or cores than it has wherever DRA alone stays within it (hami never
  hands a pod what a claim holds; DRA alone may overshoot a card by rounding: each share is rounded up to MiB);
* the incremental ledger equals a full recount (``verify() == []``);
* what the ledger charges for DRA equals a model computed from the live claims alone (one slot per share, the
  consumed MiB rounded up, the whole card for an exclusive allocation);
* the claims' namespace quota usage is what the live claims hold, each counted once (issue 38): a share its
  consumed MiB rounded up and its cores, an exclusive device the whole device as it publishes it; a claim
  deallocated or deleted gives its quota back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.devices.base import NodeInventory
from hami.protocol.dra import ResourceClaim, ResourceSlice
from hami.protocol.inventory import DeviceInfo
from hami.scheduling.decide import decide, reserve, unreserve
from hami.scheduling.dra import DraLedger, held_by_card
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import NVIDIA, gpu, pod_request, req, vendors
from tests.unit.scheduling.drafix import (
    ledger,
    result,
    shared_device,
    synthetic_claim,
    synthetic_slice,
)

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_700_000_000


@dataclass(frozen=True)
class Card:
    node: str
    device: str  # the DRA device name
    info: DeviceInfo
    shared: bool
    cores_default: int | None  # None: the device publishes no cores capacity


@dataclass
class Held:
    """What one live claim holds (the model): per card, the shares' MiB and cores, or the whole card."""

    uid: str
    card: Card
    shares: list[tuple[int, int]] = field(default_factory=list)  # (bytes, cores) per share
    whole: bool = False


@st.composite
def cluster(draw: st.DrawFn) -> list[Card]:
    out: list[Card] = []
    for n in range(draw(st.integers(1, 3))):
        for i in range(draw(st.integers(1, 3))):
            info = gpu(
                f"GPU-n{n}-{i}",
                index=i,
                count=draw(st.integers(1, 6)),
                devmem=draw(st.sampled_from([4096, 16384, 81920])),
                devcore=100,
            )
            defaults = st.one_of(st.none(), st.sampled_from([0, 10, 100]))
            out.append(Card(f"node-{n}", f"gpu-{i}", info, draw(st.booleans()), draw(defaults)))
    return out


def slice_of(node: str, cards: list[Card]) -> Any:
    devices = []
    for c in cards:
        if c.shared:
            extra = {} if c.cores_default is None else {"cores": 100, "cores_default": c.cores_default}
            devices.append(shared_device(c.device, c.info.id, f"{c.info.devmem}Mi", **extra))
        else:
            devices.append({"name": c.device, "attributes": {"uuid": {"string": c.info.id}}, "capacity": {}})
    return synthetic_slice(f"slice-{node}", node, devices)


@st.composite
def scenario(draw: st.DrawFn) -> tuple[list[Card], list[tuple[int, int, int]], list[tuple[str, int]]]:
    cards = draw(cluster())
    # claims: (card index, share bytes in MiB-ish units, cores) — fitted to DRA's own remaining capacity later
    claims = draw(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 40000), st.integers(0, 60)), max_size=8))
    ops = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["place", "place", "place", "unplace", "drop-claim", "clear", "republish", "refresh"]),
                st.integers(0, 50),
            ),
            max_size=14,
        )
    )
    return cards, claims, ops


class World:
    def __init__(self, cards: list[Card]) -> None:
        self.cards = cards
        self.state = ClusterState(vendors())
        self.nodes = sorted({c.node for c in cards})
        for node in self.nodes:
            self.state.set_node(node, {NVIDIA: NodeInventory(tuple(c.info for c in cards if c.node == node))})
        self.book: DraLedger = ledger(self.state)
        for node in self.nodes:
            self.book.slice_event(slice_of(node, self.on(node)))
        self.held: dict[str, Held] = {}
        self.claims: dict[str, ResourceClaim] = {}
        self.placed: list[str] = []

    def on(self, node: str) -> list[Card]:
        return [c for c in self.cards if c.node == node]

    # --- DRA, as kube-scheduler would allocate: within what DRA itself left ---------------------------------------
    def allocate(self, k: int, pick: int, mib: int, cores: int) -> None:
        card = self.cards[pick % len(self.cards)]
        mine = [h for h in self.held.values() if h.card == card]
        uid = f"claim-{k}"
        if not card.shared:
            if mine:
                return
            self.held[uid] = Held(uid, card, whole=True)
            results = [result(card.device, card.node)]
        else:
            left_mem = card.info.devmem * 2**20 - sum(b for h in mine for b, _ in h.shares)
            want_cores = cores if card.cores_default is None or cores else card.cores_default
            if card.cores_default is None:
                want_cores = 0
            left_cores = 100 - sum(c for h in mine for _, c in h.shares)
            amount = min(mib * 2**20 - 12345, left_mem)  # not a whole MiB: rounding up is exercised
            if amount <= 0 or want_cores > left_cores or len(mine) >= card.info.count:
                return  # (kube-scheduler knows no slot count: the cluster is drawn with enough slots for DRA)
            self.held[uid] = Held(uid, card, shares=[(amount, want_cores)])
            consumed = {"memory": str(amount)}
            if card.cores_default is not None:
                consumed["cores"] = str(want_cores)
            results = [result(card.device, card.node, f"share-{k}", **consumed)]
        claim = synthetic_claim(uid, results, pods=[])  # reserved for nobody: stale, and still counted
        self.claims[uid] = claim
        self.book.claim_event(claim)

    def expected(self) -> dict[tuple[str, str, str], tuple[int, int, int]]:
        out: dict[tuple[str, str, str], tuple[int, int, int]] = {}
        for h in self.held.values():
            info = h.card.info
            key = (h.card.node, NVIDIA, info.id)
            slots, mem, cores = out.get(key, (0, 0, 0))
            if h.whole:
                add = (info.count, info.devmem, info.devcore)
            else:
                add = (len(h.shares), sum(math.ceil(b / 2**20) for b, _ in h.shares), sum(c for _, c in h.shares))
            out[key] = (slots + add[0], mem + add[1], cores + add[2])
        return out

    def expected_quota(self) -> dict[str, int]:
        """What the live claims count against namespace ``ns`` (the model; zero amounts left out)."""
        mem = cores = 0
        for h in self.held.values():
            if h.whole:
                cores += 100  # an exclusive device publishing no memory capacity: its cores only
            else:
                mem += sum(math.ceil(b / 2**20) for b, _ in h.shares)
                cores += sum(c for _, c in h.shares)
        return {k: v for k, v in (("nvidia.com/gpumem", mem), ("nvidia.com/gpucores", cores)) if v}

    # --- operations ---------------------------------------------------------------------------------------------
    def run(self, op: str, arg: int, k: int) -> None:
        if op == "place":
            request = pod_request(req(1, memreq=1000 * (arg % 9 + 1), cores=(arg * 7) % 60), uid=f"p{k}", name=f"p{k}")
            decision = decide(self.state, request, self.nodes, NOW)
            if decision.node is not None:
                reserve(self.state, request, decision)
                self.placed.append(request.uid)
        elif op == "unplace" and self.placed:
            unreserve(self.state, self.placed.pop(arg % len(self.placed)))
        elif op in ("drop-claim", "clear") and self.held:
            uid = sorted(self.held)[arg % len(self.held)]
            del self.held[uid]
            claim = self.claims.pop(uid)
            if op == "clear":
                claim.status.allocation = None
            self.book.claim_event(claim, deleted=op == "drop-claim")
        elif op == "republish":
            node = self.nodes[arg % len(self.nodes)]
            self.book.slice_event(slice_of(node, self.on(node)), deleted=True)
            self.book.slice_event(slice_of(node, self.on(node)))
        elif op == "refresh":
            node = self.nodes[arg % len(self.nodes)]
            self.state.set_node(node, {NVIDIA: NodeInventory(tuple(c.info for c in self.on(node)))})
            self.book.node_event(node)


def over_capacity(state: ClusterState) -> list[str]:
    """Devices and dimensions over capacity although DRA's holdings alone fit there."""
    held = held_by_card(state)
    out = []
    for node in state.nodes.values():
        for table in node.tables.values():
            for i, info in enumerate(table.infos):
                h = held.get((node.name, table.vendor, info.id))
                dra = (h.slots, h.mem, h.cores) if h is not None else (0, 0, 0)
                used = table.usage_of(i)[:3]
                for name, u, d, cap in zip(
                    ("slots", "MiB", "cores"), used, dra, (info.count, info.devmem, 100), strict=True
                ):
                    if d <= cap < u:
                        out.append(f"{node.name}/{info.id}: {name} {u}/{cap} (DRA holds {d})")
    return out


@PROPS
@given(scenario())
def test_pods_never_get_what_claims_hold_and_the_ledger_matches_the_claims(case: Any) -> None:
    cards, claims, ops = case
    world = World(cards)
    for k, (pick, mib, cores) in enumerate(claims):
        world.allocate(k, pick, mib, cores)
    for k, (op, arg) in enumerate(ops):
        world.run(op, arg, k)
        state = world.state
        assert over_capacity(state) == [], (op, arg)
        assert state.verify() == [], (op, arg)
        held = {key: (h.slots, h.mem, h.cores) for key, h in held_by_card(state).items()}
        assert held == world.expected(), (op, arg)
        assert state.quotas.used.get("ns", {}) == world.expected_quota(), (op, arg)
    for uid in list(world.placed):
        unreserve(world.state, uid)
    assert set(world.state.quotas.used) <= {"ns"}  # the pods gave theirs back; the claims hold theirs
    for uid in list(world.held):
        world.book.claim_event(world.claims.pop(uid), deleted=True)
        del world.held[uid]
    assert world.state.quotas.used == {}


# --- hostile input: any decodable slice or claim, in any order, never breaks the ledger -------------------------

QUANTITIES = st.one_of(
    st.sampled_from(["0", "1", "100", "80Gi", "1500000", "-1Gi", "lots", "", "1e400", "0.5", "500m", "1Ei"]),
    st.integers(-5, 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
)
NAMES = st.sampled_from(["gpu-0", "gpu-1", "", "gpu-0"])


@st.composite
def hostile_slice(draw: st.DrawFn) -> Any:
    devices = []
    for _ in range(draw(st.integers(0, 3))):
        capacity = {
            key: {
                "value": draw(QUANTITIES),
                **({"requestPolicy": {"default": draw(QUANTITIES)}} if draw(st.booleans()) else {}),
            }
            for key in draw(st.lists(st.sampled_from(["memory", "cores", "gpu.nvidia.com/memory", "x"]), max_size=3))
        }
        uuid = draw(st.sampled_from(["GPU-n0-0", "GPU-n0-1", "GPU-zz", ""]))
        attributes = {"uuid": {"string": uuid}} if draw(st.booleans()) else {"uuid": {"int": 3}}
        devices.append(
            {
                "name": draw(NAMES),
                "attributes": attributes,
                "capacity": capacity,
                "allowMultipleAllocations": draw(st.sampled_from([True, False, None])),
            }
        )
    spec = {
        "driver": draw(st.sampled_from(["gpu.nvidia.com", "other.example.com"])),
        "pool": {"name": draw(st.sampled_from(["node-0", "p", ""])), "generation": draw(st.integers(-1, 3))},
        "nodeName": draw(st.sampled_from(["node-0", "node-9", ""])),
        "devices": devices,
    }
    return msgspec.convert(
        {"metadata": {"name": draw(st.sampled_from(["s1", "s2"]))}, "spec": spec}, type=ResourceSlice
    )


@st.composite
def hostile_claim(draw: st.DrawFn) -> Any:
    results = []
    for _ in range(draw(st.integers(0, 3))):
        res = result(draw(NAMES), draw(st.sampled_from(["node-0", "p", ""])), draw(st.sampled_from([None, "a", "b"])))
        res["consumedCapacity"] = {
            k: draw(QUANTITIES) for k in draw(st.lists(st.sampled_from(["memory", "cores", "y"]), max_size=2))
        }
        res["adminAccess"] = draw(st.sampled_from([None, True, False]))
        results.append(res)
    pods = draw(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["u1", "u2"])), max_size=2))
    claim = synthetic_claim(draw(st.sampled_from(["c1", "c2"])), results, pods=pods)
    if draw(st.booleans()):
        claim.status.allocation = None
    return claim


EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("slice"), hostile_slice(), st.booleans()),
        st.tuples(st.just("claim"), hostile_claim(), st.booleans()),
        st.tuples(st.just("pod"), st.sampled_from(["u1", "u2"]), st.booleans()),
        st.tuples(st.just("node"), st.just("node-0"), st.booleans()),
    ),
    max_size=12,
)


@PROPS
@given(EVENTS, st.booleans())
def test_any_decodable_input_in_any_order_keeps_the_ledger_whole(events: list[Any], settled: bool) -> None:
    state = ClusterState(vendors())
    state.set_node("node-0", {NVIDIA: NodeInventory((gpu("GPU-n0-0", index=0), gpu("GPU-n0-1", index=1)))})
    book = ledger(state)
    book.settled = lambda: settled
    for kind, obj, flag in events:
        if kind == "slice":
            book.slice_event(obj, deleted=flag)
        elif kind == "claim":
            book.claim_event(obj, deleted=flag)
        elif kind == "pod":
            book.pod_event("ns", "a", obj, deleted=flag)
        elif flag:
            state.set_node("node-0", {NVIDIA: NodeInventory((gpu("GPU-n0-1", index=0),))})
            book.node_event("node-0")
        assert state.verify() == []
        assert {r.uid for r in book.records()} == set(state.held)
    book.settled = lambda: True
    book.recheck()
    for claim in list(book._claims.values()):
        book.claim_event(claim, deleted=True)
    assert state.held == {}
    assert all(p.object.startswith("ResourceSlice") for p in book.problems())
