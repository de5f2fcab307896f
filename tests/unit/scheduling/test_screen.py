"""Screening from the capacity index (``hami.scheduling.screen``, ``DeviceTable.summary``) never changes a decision.

* per table: what a vendor's screen answers is what its ``fit`` does (True → ``Fitted`` with score 0, False →
  ``Unfit``), also on the empty table; and the ``Unfit`` it tells from the summary (``unfit``) is Fit's own — reasons,
  counts, closest misses — with card type and mode filters, NUMA binding, full, unhealthy and broken cards;
* per decision: ``decide`` with screening equals ``decide`` judging every node with Fit — chosen node, devices,
  scores, message, and every rejected node's reasons, counts, closest misses and ``unresolvable`` flag — over random
  clusters (unhealthy, cordoned, partly used, full, sliced devices, two card models and modes, two vendors) and
  random pods (type filters, NUMA binding), as pods are reserved; rejected nodes are not fitted;
* the summary follows the ledger: every charge drops it; an index that lies is caught (``decide`` judges again with
  Fit, and the ledger's self-check reports a summary that differs from its table).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hami.devices.base import MEM_PERCENTAGE_UNSET, ContainerRequest, FitContext, NodeInventory, Selector, Unfit
from hami.devices.common import SharedDeviceVendor
from hami.devices.policy import parse_gpu_policy
from hami.devices.screening import shared_screener
from hami.devices.table import DeviceTable
from hami.protocol import keys
from hami.protocol.inventory import DeviceInfo
from hami.protocol.reasons import Reason, Rejection
from hami.scheduling.decide import decide, filter_nodes, reserve
from hami.scheduling.filter import filter_node
from hami.scheduling.memo import Verdicts
from hami.scheduling.request import PodRequest
from hami.scheduling.screen import Screen, screened
from hami.scheduling.state import ClusterState
from hami.scheduling.usage import Kind
from tests.unit.scheduling.builders import DCU, NVIDIA, gpu, mig_gpu, pod_request, resource_quota, vendors
from tests.unit.scheduling.test_properties import scenarios as mixed_scenarios

PROPS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_700_000_000
POLICIES = ["binpack", "spread", "numa", "binpack,numa", "spread,numa", "mutex", "topology-aware"]
SELECTORS = [
    Selector(),
    Selector(use_types=(("t4",),)),
    Selector(use_types=(("a100",),)),
    Selector(nouse_types=(("t4",),)),
    Selector(use_types=(("nvidia",),), nouse_types=(("a100",),)),
    Selector(modes=frozenset({"hami-core"})),
    Selector(modes=frozenset({"mps"})),
    Selector(use_uuids=frozenset({"n0-NVIDIA-0"})),
]
FILTERS = [
    {},
    {keys.NVIDIA_USE_GPUTYPE: "T4"},
    {keys.NVIDIA_USE_GPUTYPE: "A100"},
    {keys.NVIDIA_NOUSE_GPUTYPE: "T4"},
    {keys.NVIDIA_VGPU_MODE: "hami-core"},
    {keys.NVIDIA_VGPU_MODE: "mps"},
    {keys.NVIDIA_USE_GPUTYPE: "T4", keys.NVIDIA_VGPU_MODE: "mps,hami-core"},
]


@st.composite
def cards(draw: st.DrawFn, node: int, vendor: str) -> tuple[DeviceInfo, ...]:
    out = []
    for i in range(draw(st.integers(1, 8))):
        uuid = f"n{node}-{vendor}-{i}"
        numa = draw(st.integers(0, 1))
        if vendor == NVIDIA and draw(st.integers(0, 14)) == 0:
            out.append(mig_gpu(uuid, index=i, numa=numa))
            continue
        out.append(
            gpu(
                uuid,
                index=i,
                count=draw(st.integers(1, 6)),
                devmem=draw(st.sampled_from([0, 1000, 8192, 8192, 16384])),
                devcore=draw(st.sampled_from([0, 100, 100, 200])),
                numa=numa,
                health=draw(st.integers(0, 7)) > 0,
                type="DCU-Z100" if vendor == DCU else draw(st.sampled_from(["NVIDIA-Tesla T4", "NVIDIA A100"])),
                mode=draw(st.sampled_from(["hami-core", "hami-core", "", "mps"])),
            )
        )
    return tuple(out)


@st.composite
def requests(draw: st.DrawFn, vendor: str) -> ContainerRequest:
    return ContainerRequest(
        vendor,
        nums=draw(st.integers(1, 4)),
        memreq=draw(st.one_of(st.just(0), st.sampled_from([500, 1000, 4096, 8192]), st.integers(1, 17000))),
        mem_percentage=draw(st.one_of(st.just(MEM_PERCENTAGE_UNSET), st.integers(1, 100))),
        coresreq=draw(st.one_of(st.just(0), st.sampled_from([10, 50, 100, 150]), st.integers(1, 120))),
    )


@st.composite
def worlds(draw: st.DrawFn) -> tuple[ClusterState, list[str]]:
    """A cluster with usage: nodes of NVIDIA GPUs (some sliced, some unhealthy), on some DCUs too, some cordons,
    usage charged through the ledger (``reserve``) by earlier pods."""
    s = ClusterState(vendors())
    names = []
    for k in range(draw(st.integers(1, 5))):
        inventories = {NVIDIA: NodeInventory(draw(cards(k, NVIDIA)))}
        if draw(st.integers(0, 2)) == 0:
            inventories[DCU] = NodeInventory(draw(cards(k, DCU)))
        ids = [d.id for inv in inventories.values() for d in inv.devices]
        cordoned = frozenset(draw(st.lists(st.sampled_from(ids), max_size=2))) if draw(st.integers(0, 3)) == 0 else ()
        s.set_node(f"node-{k}", inventories, cordoned=frozenset(cordoned))
        names.append(f"node-{k}")
    for p in range(draw(st.integers(0, 12))):
        vendor = draw(st.sampled_from([NVIDIA, NVIDIA, DCU]))
        request = pod_request(
            ContainerRequest(
                vendor, 1, draw(st.sampled_from([512, 1024, 3000])), coresreq=draw(st.sampled_from([0, 30]))
            ),
            uid=f"old-{p}",
            gpu_policy=draw(st.sampled_from(["binpack", "spread"])),
        )
        decision = decide(s, request, names, NOW, Verdicts(per_node=0, screening=False))
        if decision.node is not None:
            reserve(s, request, decision)
    if draw(st.integers(0, 4)) == 0:
        s.upsert_quota(resource_quota("ns", "q", {"limits.nvidia.com/gpumem": draw(st.integers(0, 20000))}))
    return s, names


@st.composite
def single_pods(draw: st.DrawFn, uid: str) -> PodRequest:
    """Pods the screen can answer for: one container with devices (maybe after an init container without any)."""
    container: dict[str, ContainerRequest] = {NVIDIA: draw(requests(NVIDIA))}
    if draw(st.integers(0, 3)) == 0:
        container = {DCU: draw(requests(DCU))} if draw(st.booleans()) else {**container, DCU: draw(requests(DCU))}
    annotations = draw(st.sampled_from(FILTERS)) if draw(st.booleans()) else {}
    init = draw(st.booleans())
    return pod_request(
        *([None] if init else []),
        container,
        kinds=(Kind.INIT, Kind.APP) if init else (Kind.APP,),
        gpu_policy=draw(st.sampled_from(POLICIES)),
        numa_bind=draw(st.booleans()),
        node_policy=draw(st.sampled_from(["binpack", "spread"])),
        weights=draw(st.sampled_from([(1, 1, 1), (0, 0, 1), (2, 1, 0)])),
        uid=uid,
        name=uid,
        namespace=draw(st.sampled_from(["ns", "other"])),
        annotations=annotations,
    )


def screen(
    owner: Any, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector, idle: bool = False
) -> bool | None:
    """The vendor's screen for this request on ``table`` (None also when it cannot screen the request at all)."""
    screener = owner.screener(request, ctx, selector)
    return None if screener is None else screener(table, idle)


def full(s: ClusterState, req: PodRequest, names: list[str]) -> Any:
    return decide(s, req, [*names, "ghost"], NOW, Verdicts(per_node=0, screening=False))


# --- per table ---------------------------------------------------------------------------------------------------


def used_table(data: st.DataObject, vendor: str) -> DeviceTable:
    """A table of random cards with random usage charged (some cards full), maybe one broken card."""
    table = DeviceTable(vendor, data.draw(cards(0, vendor)))
    for i in range(len(table)):
        n = data.draw(st.integers(0, table.infos[i].count))
        table.charge(i, n, data.draw(st.integers(0, 9000)) * min(n, 1), data.draw(st.integers(0, 120)) * min(n, 1))
    if data.draw(st.integers(0, 5)) == 0:
        table.mark_broken(data.draw(st.integers(0, len(table) - 1)), "slices disagree")
    return table


@PROPS
@given(st.data())
def test_a_screen_answers_what_fit_answers(data: st.DataObject) -> None:
    """True → Fit fits with score 0; False → Fit does not, and ``unfit`` is exactly Fit's ``Unfit`` (None only for
    a vendor that orders devices its own way or a table with carved devices); on a table that fits, ``unfit`` never
    claims otherwise."""
    vs = vendors()
    vendor = data.draw(st.sampled_from([NVIDIA, DCU]))
    owner = vs[vendor]
    assert isinstance(owner, SharedDeviceVendor)
    table = used_table(data, vendor)
    policy = parse_gpu_policy(data.draw(st.sampled_from(POLICIES)), data.draw(st.booleans()))
    for _ in range(2):  # a second request on the same summary reads what the first one derived (Capacity.derived)
        request = data.draw(requests(vendor))
        weights = data.draw(st.sampled_from([(1, 1, 1), (0, 0, 1), (2, 1, 0), (1, 3, 2)]))
        selector = data.draw(st.sampled_from(SELECTORS)) if vendor == NVIDIA else Selector()
        check_screen(owner, table, request, FitContext(policy=policy, weights=weights), selector)


def check_screen(
    owner: Any, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector
) -> None:
    for answer, fitted in (
        (screen(owner, table, request, ctx, selector), owner.fit(table, request, ctx, selector)),
        (screen(owner, table, request, ctx, selector, True), owner.fit(table.empty(), request, ctx, selector)),
    ):
        if answer is True:
            assert not isinstance(fitted, Unfit)
            assert fitted.score == 0
        elif answer is False:
            assert isinstance(fitted, Unfit)
    screener = owner.screener(request, ctx, selector)
    if screener is None:
        assert ctx.policy.topology or ctx.policy.mutex or selector.use_uuids
        return
    fitted = owner.fit(table, request, ctx, selector)
    check_shortcut(screener, table, fitted)
    told = screener.unfit(table)
    event("fits" if not isinstance(fitted, Unfit) else "told by the index" if told is not None else "not told")
    if not isinstance(fitted, Unfit):
        assert told is None
    elif screener(table, False) is False:
        carves = owner.partitions.carves if owner.partitions is not None else None
        assert told == fitted or (told is None and table.summary(carves).carved)


def check_shortcut(screener: Any, table: DeviceTable, fitted: Any) -> None:
    """Where a screen's ``Shortcut`` says "fits", the screen says so too and Fit fits with score 0."""
    shortcut = screener.shortcut()
    if shortcut is None:
        return
    cap = table.summary(shortcut.carves)
    if shortcut.memreq <= cap.max_mem and shortcut.cores <= cap.first_cores and not cap.carved:
        event("the shortcut fits")
        assert screener(table, False) is True
        assert not isinstance(fitted, Unfit)
        assert fitted.score == 0


def test_the_shortcut_covers_one_card_with_memory() -> None:
    """The shortcut is offered exactly for one card with memory and no type filter (the screen handles the rest)."""
    owner = vendors()[NVIDIA]
    assert isinstance(owner, SharedDeviceVendor)
    ctx = FitContext(policy=parse_gpu_policy("binpack", True))
    one = owner.screener(ContainerRequest(NVIDIA, 1, 4096, coresreq=150), ctx, Selector())
    assert one is not None
    assert one.shortcut()[1:] == (4096, 100)
    for request, selector in (
        (ContainerRequest(NVIDIA, 2, 4096), Selector()),
        (ContainerRequest(NVIDIA, 1, 0, mem_percentage=50), Selector()),
        (ContainerRequest(NVIDIA, 1, 4096), Selector(use_types=(("t4",),))),
    ):
        other = owner.screener(request, ctx, selector)
        assert other is not None
        assert other.shortcut() is None


def test_the_screen_answers_the_common_cases() -> None:
    """It is not a screen that always says "unknown": plain requests on plain cards are answered."""
    owner = vendors()[NVIDIA]
    assert isinstance(owner, SharedDeviceVendor)
    table = DeviceTable(NVIDIA, tuple(gpu(f"G{i}", index=i, numa=i % 2) for i in range(4)))
    table.charge(0, 1, 8000, 50)
    ctx = FitContext(policy=parse_gpu_policy("spread", False))
    assert screen(owner, table, ContainerRequest(NVIDIA, 3, 4096, coresreq=50), ctx, Selector()) is True
    assert screen(owner, table, ContainerRequest(NVIDIA, 4, 4096, coresreq=50), ctx, Selector()) is False
    assert screen(owner, table, ContainerRequest(NVIDIA, 1, 9000), ctx, Selector()) is False
    assert screen(owner, table, ContainerRequest(NVIDIA, 4, 8192, coresreq=100), ctx, Selector(), True) is True
    numa = FitContext(policy=parse_gpu_policy("spread", True))
    assert screen(owner, table, ContainerRequest(NVIDIA, 2, 1024), numa, Selector()) is True
    assert screen(owner, table, ContainerRequest(NVIDIA, 2, 4096), numa, Selector()) is True  # G1, G3 on NUMA 1
    assert screen(owner, table, ContainerRequest(NVIDIA, 3, 1024), numa, Selector()) is False  # 2 per NUMA node
    assert screen(owner, table, ContainerRequest(NVIDIA, 1, 1024), ctx, Selector(use_types=(("t4",),))) is True
    assert screen(owner, table, ContainerRequest(NVIDIA, 1, 1024), ctx, Selector(nouse_types=(("t4",),))) is False
    by_uuid = Selector(use_uuids=frozenset({"G1"}))
    assert screen(owner, table, ContainerRequest(NVIDIA, 1, 1024), ctx, by_uuid) is None


def test_the_index_tells_fits_reasons() -> None:
    """Rejections told from the summary, checked by hand: memory and a full card, the closest misses in the order
    Fit tries the cards when their free memory ties, a card model the pod refuses, NUMA groups."""
    owner = vendors()[NVIDIA]
    assert isinstance(owner, SharedDeviceVendor)
    table = DeviceTable(
        NVIDIA,
        (
            gpu("G0", index=0, numa=0, count=2),
            gpu("G1", index=1, numa=1),
            gpu("G2", index=2, numa=0, type="NVIDIA A100"),
            gpu("G3", index=3, numa=1, health=False),
        ),
    )
    table.charge(0, 2, 4000, 20)  # G0 full
    table.charge(1, 1, 4000, 20)
    table.charge(2, 1, 4000, 60)  # G1, G2 4,192 MiB free
    spread = FitContext(policy=parse_gpu_policy("spread", False))
    request = ContainerRequest(NVIDIA, 1, 6000)
    screener = shared_screener(request, spread, Selector(), owner.partitions)
    assert screener is not None
    assert screener(table, False) is False
    told = screener.unfit(table)
    assert told == owner.fit(table, request, spread, Selector())
    assert told == Unfit(
        {Reason.CARD_NOT_HEALTH: 1, Reason.CARD_TIME_SLICING_EXHAUSTED: 1, Reason.CARD_INSUFFICIENT_MEMORY: 2},
        4,
        (  # tied at 4,192 MiB: spread tries G1 (20 cores used) before G2 (60), as Fit does
            Rejection(Reason.CARD_INSUFFICIENT_MEMORY, "G1", 6000, 4192),
            Rejection(Reason.CARD_INSUFFICIENT_MEMORY, "G2", 6000, 4192),
            Rejection(Reason.CARD_TIME_SLICING_EXHAUSTED, "G0", 1, 0),
        ),
    )
    t4_only = Selector(use_types=(("t4",),))
    t4 = shared_screener(ContainerRequest(NVIDIA, 2, 1000), spread, t4_only, owner.partitions)
    assert t4 is not None
    assert t4(table, False) is False
    assert t4.unfit(table) == owner.fit(table, ContainerRequest(NVIDIA, 2, 1000), spread, t4_only)
    assert t4.unfit(table) == Unfit(
        {
            Reason.CARD_NOT_HEALTH: 1,
            Reason.CARD_TIME_SLICING_EXHAUSTED: 1,
            Reason.CARD_TYPE_MISMATCH: 1,
            Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1,
        },
        4,
        (Rejection(Reason.CARD_TIME_SLICING_EXHAUSTED, "G0", 1, 0),),
    )
    numa = FitContext(policy=parse_gpu_policy("binpack", True))
    pair = ContainerRequest(NVIDIA, 2, 1000)
    both = shared_screener(pair, numa, Selector(), owner.partitions)
    assert both is not None
    assert both(table, False) is False
    fitted = owner.fit(table, pair, numa, Selector())
    assert both.unfit(table) == fitted
    assert isinstance(fitted, Unfit)
    assert (fitted.counts[Reason.NUMA_NOT_FIT], fitted.counts[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST]) == (1, 1)


def test_every_charge_drops_the_summary() -> None:
    table = DeviceTable(NVIDIA, (gpu("G0"), gpu("G1", index=1)))
    before = table.summary()
    assert (len(before.cards), before.max_mem, before.idle) == (2, 8192, 2)
    table.charge(0, 1, 8000, 100)
    after = table.summary()
    assert after is not before
    assert (after.max_mem, after.idle, after.totals) == (8192, 1, (1, 20, 100, 200, 8000, 16384))
    table.charge(0, 1, 8000, 100, sign=-1)
    table.mark_broken(1, "x")
    assert table.summary().cards == ((8192, 100, 0, 8192, 100, 0, 0),)
    assert (table.summary().unhealthy, table.summary().full) == (1, ())


# --- per decision ------------------------------------------------------------------------------------------------


@contextmanager
def audits_never_fail() -> Iterator[None]:
    """Every audit of a rejection told from the index must pass: the decisions below equal Fit's without the audit's
    fallback to Fit hiding a wrong rejection."""
    audit = Screen.audit

    def strict(self: Screen) -> bool:
        assert audit(self), "a rejection told from the index differs from Fit's"
        return True

    with patch.object(Screen, "audit", strict):
        yield


@PROPS
@given(worlds(), st.lists(st.data(), min_size=1, max_size=1))
def test_screened_decisions_equal_full_decisions(world: tuple[ClusterState, list[str]], data: list[Any]) -> None:
    s, names = world
    for k in range(4):
        req = data[0].draw(single_pods(f"pod-{k}"))
        with audits_never_fail():
            screened_decision = decide(s, req, [*names, "ghost"], NOW)
        assert screened_decision == full(s, req, names)
        if screened_decision.node is not None:
            reserve(s, req, screened_decision)
    assert s.verify() == []


@PROPS
@given(worlds(), st.lists(st.data(), min_size=1, max_size=1))
def test_many_shapes_through_one_memo_equal_full_decisions(
    world: tuple[ClusterState, list[str]], data: list[Any]
) -> None:
    """Pods of many request shapes (and vendors) in turn through one memo that keeps two shapes per node (it starts a
    node's entry over when full), each asked twice — the second time reserved, so usage changes under the memo and
    the numbers its entries keep for the screen's shortcut must follow: every decision equals Fit's."""
    s, names = world
    memo = Verdicts(per_node=2)
    pods = [data[0].draw(single_pods(f"pod-{k}")) for k in range(5)]
    for k, req in enumerate([*pods, *pods]):
        with audits_never_fail():
            decision = decide(s, req, [*names, "ghost"], NOW, memo)
        assert decision == full(s, req, names)
        assert all(len(entry.verdicts) <= 2 for entry in memo.nodes.values())
        if k >= len(pods) and decision.node is not None:
            reserve(s, req, decision)
    assert s.verify() == []


@PROPS
@given(mixed_scenarios())
def test_screened_decisions_equal_full_decisions_for_any_pod(scenario: Any) -> None:
    """The general pods of the ledger properties (init containers, sidecars, quotas, two vendors) too."""
    nodes, _, ops = scenario
    s = ClusterState(vendors())
    for name, inventories in nodes.items():
        s.set_node(name, inventories)
    for op, arg in ops:
        if op == "place":
            with audits_never_fail():
                decision = decide(s, arg, [*nodes, "ghost"], NOW, Verdicts())
            assert decision == full(s, arg, list(nodes))
            if decision.node is not None:
                reserve(s, arg, decision)


def test_only_the_chosen_node_is_fitted() -> None:
    s = ClusterState(vendors())
    for k in range(3):
        s.set_node(f"node-{k}", {NVIDIA: NodeInventory((gpu(f"n{k}-G0"),))})
    s.nodes["node-1"].tables[NVIDIA].charge(0, 1, 100, 0)  # binpack prefers the busiest node
    req = pod_request(ContainerRequest(NVIDIA, 1, 1024, coresreq=10))
    fits, rejected = filter_nodes(s, req, ["node-0", "node-1", "node-2"])
    assert (rejected, [screened(f) for f in fits]) == ({}, [True, True, True])
    decision = decide(s, req, ["node-0", "node-1", "node-2"], NOW)
    assert (decision.node, decision.devices[NVIDIA][0][0].uuid) == ("node-1", "n1-G0")
    assert decision.devices == full(s, req, ["node-0", "node-1", "node-2"]).devices


def test_cordoned_and_carved_nodes_are_fitted_not_shortcut() -> None:
    """The shortcut's numbers (kept with the memo entry) never pass a node with cordoned devices or devices carved
    into slices, whose fit the summary cannot tell: such nodes are judged by Fit even when a card has the room, also
    for the second shape through the same memo; a node's numbers follow a charge."""
    s = ClusterState(vendors())
    s.set_node("plain", {NVIDIA: NodeInventory((gpu("P0"),))})
    s.set_node("cordoned", {NVIDIA: NodeInventory((gpu("C0"), gpu("C1", index=1)))}, cordoned=frozenset({"C1"}))
    s.set_node("carved", {NVIDIA: NodeInventory((gpu("M0"), mig_gpu("M1", index=1)))})
    names = ["carved", "cordoned", "plain"]
    memo = Verdicts()
    for mem in (1024, 2048):
        req = pod_request(ContainerRequest(NVIDIA, 1, mem, coresreq=10))
        fits, rejected = filter_nodes(s, req, names, memo)
        assert rejected == {}
        assert {f.node: screened(f) for f in fits} == {"carved": False, "cordoned": False, "plain": True}
    big = pod_request(ContainerRequest(NVIDIA, 1, 8000), uid="big", name="big")
    reserve(s, big, decide(s, big, ["plain"], NOW, memo))
    fits, rejected = filter_nodes(s, req, names, memo)
    assert ([f.node for f in fits], list(rejected)) == (["carved", "cordoned"], ["plain"])


def test_a_screen_that_lies_is_caught(monkeypatch: Any) -> None:
    s = ClusterState(vendors())
    s.set_node("small", {NVIDIA: NodeInventory((gpu("S0", devmem=1000),))})
    s.set_node("big", {NVIDIA: NodeInventory((gpu("B0", devmem=1000),))})
    s.nodes["big"].tables[NVIDIA].charge(0, 1, 100, 0)  # binpack prefers the busier node
    req = pod_request(ContainerRequest(NVIDIA, 1, 5000))
    expected = full(s, req, ["small", "big"])
    monkeypatch.setattr(SharedDeviceVendor, "screener", lambda *_: _Lying())
    assert decide(s, req, ["small", "big", "ghost"], NOW) == expected
    assert expected.node is None


class _Lying:
    """A screen that says every table fits."""

    def __call__(self, table: DeviceTable, idle: bool) -> bool:
        return True

    def unfit(self, table: DeviceTable) -> None:
        return None

    def shortcut(self) -> None:
        return None


def test_a_shortcut_that_lies_is_caught(monkeypatch: Any) -> None:
    """A ``Shortcut`` with numbers laxer than the request's (it claims 1 MiB) says both nodes fit: the chosen one is
    fitted for real, does not fit, and the decision is judged again with Fit."""
    s = ClusterState(vendors())
    s.set_node("small", {NVIDIA: NodeInventory((gpu("S0", devmem=1000),))})
    s.set_node("big", {NVIDIA: NodeInventory((gpu("B0", devmem=1000),))})
    req = pod_request(ContainerRequest(NVIDIA, 1, 5000))
    expected = full(s, req, ["small", "big"])
    real = Screen.shortcut

    def lax(self: Screen) -> Any:
        vendor, carves, _, cores = real(self)
        return vendor, carves, 1, cores

    monkeypatch.setattr(Screen, "shortcut", lax)
    fits, _ = filter_nodes(s, req, ["small", "big"])
    assert [f.node for f in fits] == ["small", "big"]  # told by the lying shortcut: the screen says neither fits
    assert decide(s, req, ["small", "big", "ghost"], NOW) == expected
    assert expected.node is None


def half_rejecting() -> tuple[ClusterState, list[str], PodRequest]:
    """Eight nodes of four cards; the odd ones have too little free memory for the pod."""
    s = ClusterState(vendors())
    names = [f"node-{k}" for k in range(8)]
    for k, name in enumerate(names):
        s.set_node(name, {NVIDIA: NodeInventory(tuple(gpu(f"n{k}-G{i}", index=i, numa=i % 2) for i in range(4)))})
        for i in range(4):
            s.nodes[name].tables[NVIDIA].charge(i, 1, 1000 + 4000 * (k % 2), 10)
    return s, names, pod_request(ContainerRequest(NVIDIA, 1, 6000, coresreq=10), gpu_policy="spread")


def test_rejected_nodes_are_not_fitted(monkeypatch: Any) -> None:
    """A node the index rejects gets its reasons from the index: Fit runs for the chosen node and for the one
    rejection the decision audits, not once per rejected node."""
    s, names, req = half_rejecting()
    expected = full(s, req, names)
    assert len(expected.rejected) == 5  # four odd nodes and the ghost
    fitted: list[str] = []
    real = filter_node

    def counting(state: ClusterState, node: Any, request: PodRequest, empty: bool = False) -> Any:
        fitted.append(node.name)
        return real(state, node, request, empty)

    monkeypatch.setattr("hami.scheduling.screen.filter_node", counting)
    assert decide(s, req, [*names, "ghost"], NOW) == expected
    assert len(fitted) == 2  # realize (the chosen node) and the audit (one rejected node)
    assert fitted[0] in {"node-1", "node-3", "node-5", "node-7"}


class LyingScreen:
    """A real screen whose ``unfit`` lies: every device is said to be of another type."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def __call__(self, table: DeviceTable, idle: bool) -> bool | None:
        return self.real(table, idle)  # type: ignore[no-any-return]

    def unfit(self, table: DeviceTable) -> Unfit:
        return Unfit({Reason.CARD_TYPE_MISMATCH: len(table)}, len(table))

    def shortcut(self) -> Any:
        return self.real.shortcut()


def test_an_index_that_lies_about_reasons_is_caught(monkeypatch: Any) -> None:
    s, names, req = half_rejecting()
    expected = full(s, req, names)
    real = SharedDeviceVendor.screener
    monkeypatch.setattr(SharedDeviceVendor, "screener", lambda *args: LyingScreen(real(*args)))
    memo = Verdicts()
    assert decide(s, req, [*names, "ghost"], NOW, memo) == expected
    assert decide(s, req, [*names, "ghost"], NOW, memo) == expected  # no lie was kept in the memo


def test_a_summary_that_differs_from_its_table_is_caught() -> None:
    """Usage changed behind ``charge`` (the ledger's single mutation path) leaves a stale summary: ``decide`` still
    decides as Fit does, and the ledger's self-check names the table."""
    s, names, req = half_rejecting()
    table = s.nodes["node-1"].tables[NVIDIA]
    assert table.summary().max_mem == 8192 - 5000  # kept from here on
    for i in range(4):
        table.usedmem[i] -= 5000  # not through charge: the summary still says 3,192 MiB free
    expected = full(s, req, names)
    assert "node-1" not in expected.rejected
    assert decide(s, req, ["node-1", "node-2", "ghost"], NOW) == full(s, req, ["node-1", "node-2"])
    assert any("node-1/NVIDIA" in line and "capacity index" in line for line in s.verify())
    assert all("capacity index" not in line for line in ClusterState.verify(half_rejecting()[0]))


def test_a_vendor_with_its_own_fit_is_never_screened() -> None:
    class OwnFit(SharedDeviceVendor):
        name = "OWN"

        def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Any:
            return super().fit(table, request, ctx, selector)

    owner = vendors()[NVIDIA]
    own = OwnFit.__new__(OwnFit)
    own.partitions = None
    table = DeviceTable("OWN", (gpu("G0"),))
    ctx = FitContext(policy=parse_gpu_policy("spread", False))
    request = ContainerRequest("OWN", 1, 1)
    assert screen(owner, table, request, ctx, Selector()) is True
    assert screen(own, table, request, ctx, Selector()) is None
