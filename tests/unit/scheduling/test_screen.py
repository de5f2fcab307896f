"""Screening from the capacity index (``hami.scheduling.screen``, ``DeviceTable.summary``) never changes a decision.

* per table: what a vendor's ``screen`` answers is what its ``fit`` does (True → ``Fitted`` with score 0, False →
  ``Unfit``), also on the empty table (``screen_idle``);
* per decision: ``decide`` with screening equals ``decide`` judging every node with Fit — chosen node, devices,
  scores, message, and every rejected node's reasons, counts, closest misses and ``unresolvable`` flag — over random
  clusters (unhealthy, cordoned, partly used, sliced devices, two vendors) and random pods, as pods are reserved;
* the summary follows the ledger: every charge drops it; a screen that lies is caught (``decide`` judges again).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.devices.base import MEM_PERCENTAGE_UNSET, ContainerRequest, FitContext, NodeInventory, Selector, Unfit
from hami.devices.common import SharedDeviceVendor
from hami.devices.policy import parse_gpu_policy
from hami.devices.table import DeviceTable
from hami.protocol.inventory import DeviceInfo
from hami.scheduling.cycle import Verdicts, decide, filter_nodes, reserve
from hami.scheduling.request import PodRequest
from hami.scheduling.screen import screened
from hami.scheduling.state import ClusterState
from hami.scheduling.usage import Kind
from tests.unit.scheduling.builders import DCU, NVIDIA, gpu, mig_gpu, pod_request, resource_quota, vendors
from tests.unit.scheduling.test_properties import scenarios as mixed_scenarios

PROPS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_700_000_000
POLICIES = ["binpack", "spread", "numa", "binpack,numa", "spread,numa", "mutex", "topology-aware"]


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
    annotations = {"nvidia.com/use-gputype": "T4"} if draw(st.integers(0, 5)) == 0 else {}
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


@PROPS
@given(st.data())
def test_a_screen_answers_what_fit_answers(data: st.DataObject) -> None:
    vs = vendors()
    vendor = data.draw(st.sampled_from([NVIDIA, DCU]))
    owner = vs[vendor]
    assert isinstance(owner, SharedDeviceVendor)
    table = DeviceTable(vendor, data.draw(cards(0, vendor)))
    for i in range(len(table)):
        n = data.draw(st.integers(0, table.infos[i].count))
        table.charge(i, n, data.draw(st.integers(0, 9000)) * min(n, 1), data.draw(st.integers(0, 120)) * min(n, 1))
    if data.draw(st.integers(0, 5)) == 0:
        table.mark_broken(0, "slices disagree")
    request = data.draw(requests(vendor))
    ctx = FitContext(policy=parse_gpu_policy(data.draw(st.sampled_from(POLICIES)), data.draw(st.booleans())))
    for answer, fitted in (
        (screen(owner, table, request, ctx, Selector()), owner.fit(table, request, ctx, Selector())),
        (screen(owner, table, request, ctx, Selector(), True), owner.fit(table.empty(), request, ctx, Selector())),
    ):
        if answer is True:
            assert not isinstance(fitted, Unfit)
            assert fitted.score == 0
        elif answer is False:
            assert isinstance(fitted, Unfit)


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
    filtered = Selector(use_types=(("t4",),))
    assert screen(owner, table, ContainerRequest(NVIDIA, 1, 1024), ctx, filtered) is None


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
    assert table.summary().cards == ((8192, 100, 0, 8192, 100, 0),)


# --- per decision ------------------------------------------------------------------------------------------------


@PROPS
@given(worlds(), st.lists(st.data(), min_size=1, max_size=1))
def test_screened_decisions_equal_full_decisions(world: tuple[ClusterState, list[str]], data: list[Any]) -> None:
    s, names = world
    for k in range(4):
        req = data[0].draw(single_pods(f"pod-{k}"))
        screened_decision = decide(s, req, [*names, "ghost"], NOW)
        assert screened_decision == full(s, req, names)
        if screened_decision.node is not None:
            reserve(s, req, screened_decision)
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


def test_a_screen_that_lies_is_caught(monkeypatch: Any) -> None:
    s = ClusterState(vendors())
    s.set_node("small", {NVIDIA: NodeInventory((gpu("S0", devmem=1000),))})
    s.set_node("big", {NVIDIA: NodeInventory((gpu("B0", devmem=1000),))})
    s.nodes["big"].tables[NVIDIA].charge(0, 1, 100, 0)  # binpack prefers the busier node
    req = pod_request(ContainerRequest(NVIDIA, 1, 5000))
    expected = full(s, req, ["small", "big"])
    monkeypatch.setattr(SharedDeviceVendor, "screener", lambda *_: lambda *_: True)
    assert decide(s, req, ["small", "big", "ghost"], NOW) == expected
    assert expected.node is None


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
