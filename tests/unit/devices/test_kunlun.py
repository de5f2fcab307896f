"""Kunlunxin whole XPUs (``kunlun``) and vXPU slices (``XPU``): tables from webhook-bind-plugin-vendors.md §7 and
vendors-appendix.md, with the cases of HAMi v2.10's ``pkg/device/kunlun`` tests (``graghSelect``, ``ScoreNode``,
``FitVXPU``) as expectations; decisions, annotations and admission go through the real core."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import pytest

from hami.devices import registered_keys
from hami.devices.admission import ContainerEdit, PodContext
from hami.devices.base import MEM_PERCENTAGE_UNSET, ContainerRequest, Fitted, Selector, Unfit
from hami.devices.kunlun import (
    DEVICE_IDX,
    KUNLUN,
    KUNLUN_KEYS,
    XPU,
    XPU_KEYS,
    KunlunVendor,
    XpuVendor,
    bubble_score,
    bubbles,
    choose_group,
)
from hami.devices.table import DeviceTable
from hami.errors import AnnotationError, InvalidInput, QuantityError
from hami.protocol import keys
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Container, Node, Pod
from hami.protocol.reasons import Reason
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.decide import decide, reserve
from hami.scheduling.records import record_from_pod
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import ctx, vendors

XPU_COUNT, VXPU, VXPU_MEM = "kunlunxin.com/xpu", "kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory"
NS = "team"


@pytest.fixture
def kunlun() -> KunlunVendor:
    v = vendors()[KUNLUN]
    assert isinstance(v, KunlunVendor)
    return v


@pytest.fixture
def xpu() -> XpuVendor:
    v = vendors()[XPU]
    assert isinstance(v, XpuVendor)
    return v


def _container(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> Container:
    return msgspec.convert({"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}, Container)


def _node(name: str, capacity: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None) -> Node:
    raw = {"metadata": {"name": name, "annotations": dict(annotations or {})}, "status": {"capacity": capacity or {}}}
    return msgspec.convert(raw, Node)


def _xpu_register(n: int, *, count: int = 4, prefix: str = "xpu-") -> str:
    devices = [
        {"id": f"{prefix}{i}", "index": i, "count": count, "devmem": 98304, "devcore": 100, "type": "P800-OAM"}
        | ({"numa": 1} if i >= n // 2 else {})
        | {"health": True}
        for i in range(n)
    ]
    return msgspec.json.encode(devices).decode()


def _pod(resources: Sequence[Mapping[str, str]], annotations: Mapping[str, str] | None = None) -> Pod:
    containers = [{"name": f"c{k}", "resources": {"limits": dict(r)}} for k, r in enumerate(resources)]
    raw = {
        "metadata": {"name": "p", "namespace": NS, "uid": "u-1", "annotations": dict(annotations or {})},
        "spec": {"containers": containers},
    }
    return msgspec.convert(raw, Pod)


def _state(*nodes: Node) -> ClusterState:
    state = ClusterState(vendors())
    for node in nodes:
        state.upsert_node(node)
    return state


# --- keys ---------------------------------------------------------------------------------------------------------


def test_keys_are_hamis_and_registered() -> None:
    assert (KUNLUN_KEYS.register, KUNLUN_KEYS.handshake, KUNLUN_KEYS.to_allocate, KUNLUN_KEYS.lock) == (
        "",
        None,
        None,
        None,
    )
    assert (KUNLUN_KEYS.allocated, KUNLUN_KEYS.extra) == ("hami.io/kunlun-allocated", ("BAIDU_COM_DEVICE_IDX",))
    assert (XPU_KEYS.register, XPU_KEYS.handshake, XPU_KEYS.to_allocate, XPU_KEYS.allocated, XPU_KEYS.lock) == (
        "hami.io/node-register-xpu",
        "hami.io/node-handshake-xpu",
        "hami.io/xpu-devices-to-allocate",
        "hami.io/xpu-devices-allocated",
        "hami.io/mutex.lock",
    )
    assert KUNLUN_KEYS in registered_keys()
    assert XPU_KEYS in registered_keys()


# --- inventory ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cards", "numa"),
    [
        pytest.param("8", [0, 0, 0, 0, 1, 1, 1, 1], id="eight-cards-two-numa-halves"),
        pytest.param("3", [0, 1, 1], id="odd-count-upper-half-from-cards-div-2"),
        pytest.param("1", [1], id="one-card-is-numa-1"),
    ],
)
def test_whole_xpus_come_from_the_capacity(kunlun: KunlunVendor, cards: str, numa: list[int]) -> None:
    inv = kunlun.decode_inventory(_node("n1", {XPU_COUNT: cards}))
    assert inv is not None
    assert [d.id for d in inv.devices] == [f"n1-kunlun-{i}" for i in range(len(numa))]
    assert [d.numa for d in inv.devices] == numa
    assert {(d.index, d.count, d.devmem, d.devcore, d.type, d.health) for d in inv.devices[:1]} == {
        (0, 100, 98304, 100, "kunlun", True)
    }


@pytest.mark.parametrize("capacity", [None, "0"])
def test_no_whole_xpus_without_capacity(kunlun: KunlunVendor, capacity: str | None) -> None:
    assert kunlun.decode_inventory(_node("n1", {XPU_COUNT: capacity} if capacity else {})) is None


@pytest.mark.parametrize(
    ("capacity", "words"),
    [("lots", "lots"), ("-1", "negative"), ("1.5", "1.5"), ("2000", "more than 1024 devices")],
)
def test_a_malformed_capacity_quarantines_kunlun_on_that_node_only(capacity: str, words: str) -> None:
    state = _state(_node("bad", {XPU_COUNT: capacity, VXPU: "4"}, {XPU_KEYS.register: _xpu_register(2)}))
    node = state.nodes["bad"]
    assert KUNLUN not in node.tables
    assert f"status.capacity[{XPU_COUNT}]" in node.problems[KUNLUN]
    assert words in node.problems[KUNLUN]
    assert [d.id for d in node.tables[XPU].infos] == ["xpu-0", "xpu-1"]  # the other vendor keeps serving


def test_vxpu_devices_come_from_the_json_registration(xpu: XpuVendor) -> None:
    inv = xpu.decode_inventory(_node("n1", annotations={XPU_KEYS.register: _xpu_register(8)}))
    assert inv is not None
    assert [(d.id, d.index, d.count, d.devmem, d.numa, d.health) for d in inv.devices[3:5]] == [
        ("xpu-3", 3, 4, 98304, 0, True),
        ("xpu-4", 4, 4, 98304, 1, True),
    ]
    assert xpu.decode_inventory(_node("n1")) is None
    assert xpu.decode_inventory(_node("n1", annotations={XPU_KEYS.register: "[]"})) is None


@pytest.mark.parametrize("value", ["[{", '{"id": "x"}', '[{"id": "x", "count": "four"}]'])
def test_a_malformed_vxpu_registration_is_refused_and_quarantined(xpu: XpuVendor, value: str) -> None:
    with pytest.raises(AnnotationError):
        xpu.decode_inventory(_node("n1", annotations={XPU_KEYS.register: value}))
    state = _state(_node("n1", {XPU_COUNT: "8"}, {XPU_KEYS.register: value}))
    assert XPU not in state.nodes["n1"].tables
    assert XPU_KEYS.register in state.nodes["n1"].problems[XPU]
    assert len(state.nodes["n1"].tables[KUNLUN].infos) == 8


# --- requests -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "requests", "expected"),
    [
        pytest.param({XPU_COUNT: 1}, {}, ContainerRequest(KUNLUN, 1, 0, 100, 0), id="one-card"),
        pytest.param({XPU_COUNT: 8}, {}, ContainerRequest(KUNLUN, 8, 0, 100, 0), id="whole-board"),
        pytest.param({}, {XPU_COUNT: 2}, ContainerRequest(KUNLUN, 2, 0, 100, 0), id="requests-fallback"),
        pytest.param({XPU_COUNT: 0}, {}, None, id="zero-no-request"),
        pytest.param({VXPU: 1}, {}, None, id="vxpu-is-the-other-vendor"),
    ],
)
def test_whole_xpu_requests(
    kunlun: KunlunVendor, limits: dict[str, Any], requests: dict[str, Any], expected: ContainerRequest | None
) -> None:
    assert kunlun.parse_request(_container(limits, requests), "containers[0](c)") == expected


@pytest.mark.parametrize(
    ("limits", "requests", "expected"),
    [
        pytest.param({VXPU: 1}, {}, ContainerRequest(XPU, 1, 98304, 100, 100), id="no-memory-is-a-whole-card"),
        pytest.param({VXPU: 1, VXPU_MEM: 1}, {}, ContainerRequest(XPU, 1, 24576, 101, 25), id="1-to-quarter"),
        pytest.param({VXPU: 2, VXPU_MEM: 0}, {}, ContainerRequest(XPU, 2, 24576, 101, 25), id="0-to-quarter"),
        pytest.param({VXPU: 1, VXPU_MEM: 24576}, {}, ContainerRequest(XPU, 1, 24576, 101, 25), id="quarter"),
        pytest.param({VXPU: 1, VXPU_MEM: 24577}, {}, ContainerRequest(XPU, 1, 49152, 101, 50), id="to-half"),
        pytest.param({VXPU: 4, VXPU_MEM: 49152}, {}, ContainerRequest(XPU, 4, 49152, 101, 50), id="half"),
        pytest.param({VXPU: 1, VXPU_MEM: 49153}, {}, ContainerRequest(XPU, 1, 98304, 101, 100), id="to-whole"),
        pytest.param({VXPU: 1, VXPU_MEM: 98304}, {}, ContainerRequest(XPU, 1, 98304, 101, 100), id="whole"),
        pytest.param({VXPU: 1}, {VXPU_MEM: 30000}, ContainerRequest(XPU, 1, 49152, 101, 50), id="memory-requests"),
        pytest.param({VXPU: 1, VXPU_MEM: 100}, {VXPU_MEM: 60000}, ContainerRequest(XPU, 1, 24576, 101, 25), id="lim"),
    ],
)
def test_vxpu_memory_is_rounded_up_and_cores_follow(
    xpu: XpuVendor, limits: dict[str, Any], requests: dict[str, Any], expected: ContainerRequest
) -> None:
    got = xpu.parse_request(_container(limits, requests), "containers[0](c)")
    assert got == expected
    assert got.mem_percentage == (100 if VXPU_MEM not in limits | requests else MEM_PERCENTAGE_UNSET)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (
            {XPU_COUNT: 3},
            "containers[0](c).limits[kunlunxin.com/xpu]: Kunlun XPUs are allocated as 1, 2, 4 or 8 devices "
            "(the 8-card board's linked groups) (got 3)",
        ),
        ({XPU_COUNT: 16}, "1, 2, 4 or 8 devices"),
        ({XPU_COUNT: -1}, "must not be negative"),
        ({VXPU: 6, VXPU_MEM: 24576}, "containers[0](c).limits[kunlunxin.com/vxpu]: Kunlun XPUs are allocated as 1"),
        ({VXPU: 1, VXPU_MEM: 98305}, "limits[kunlunxin.com/vxpu-memory]: exceeds one XPU's 98304 MiB (got 98305)"),
        ({VXPU: 1, VXPU_MEM: "24Gi"}, "exceeds one XPU's 98304 MiB; it counts MiB: did you mean 24576? (got '24Gi')"),
        ({VXPU: 1, VXPU_MEM: "1.5"}, "limits[kunlunxin.com/vxpu-memory]"),
        ({VXPU: 1, VXPU_MEM: -5}, "must not be negative"),
    ],
)
def test_refused_requests_name_the_container_resource_and_value(
    kunlun: KunlunVendor, xpu: XpuVendor, limits: dict[str, Any], message: str
) -> None:
    vendor = kunlun if XPU_COUNT in limits else xpu
    with pytest.raises(QuantityError) as err:
        vendor.parse_request(_container(limits), "containers[0](c)")
    assert message in str(err.value)


def test_both_uuid_key_pairs_select_devices(kunlun: KunlunVendor, xpu: XpuVendor) -> None:
    annotations = {
        "hami.io/use-xpu-uuid": "a,b",
        "baidu.com/use-gpuuuid": "c",
        "hami.io/no-use-xpu-uuid": "b",
        "baidu.com/nouse-gpuuuid": "",
    }
    for vendor in (kunlun, xpu):
        selector = vendor.selector(annotations)
        assert [u for u in "abcd" if selector.uuid_ok(u)] == ["a", "c"]
        assert vendor.selector({"baidu.com/nouse-gpuuuid": "d"}).uuid_ok("d") is False
        assert vendor.selector({}) == Selector()


# --- topology: graghSelect's cases with wings by index ----------------------------------------------------------


@pytest.mark.parametrize(
    ("idle", "nums", "group"),
    [
        pytest.param(range(8), 8, (0, 1, 2, 3, 4, 5, 6, 7), id="full-board"),
        pytest.param([0, 1, 2, 3, 4, 6, 7], 8, None, id="full-board-one-busy"),
        pytest.param([0, 1, 2, 3, 4, 6, 7], 2, (4, 6), id="two-in-the-tighter-wing"),
        pytest.param([0, 1, 2, 3, 4, 6, 7], 1, (4,), id="one-from-the-wing-with-three"),
        pytest.param([0, 1, 2, 3, 4, 5], 1, (4,), id="one-from-the-wing-with-two"),
        pytest.param([0, 1, 2, 3, 5], 1, (5,), id="one-from-the-wing-with-one"),
        pytest.param(range(8), 1, (0,), id="one-left-wing-first"),
        pytest.param(range(8), 4, (0, 1, 2, 3), id="four-a-whole-wing"),
        pytest.param([3, 7], 2, (3, 7), id="cross-pair"),
        pytest.param([0, 5], 2, None, id="unlinked-pair"),
        pytest.param([0, 1, 4, 5, 6], 4, (0, 1, 4, 5), id="four-of-five-first-linked-set"),
        pytest.param([2, 3, 4, 6, 7], 4, (2, 3, 6, 7), id="four-of-five-second-linked-set"),
        pytest.param([0, 1, 2, 4, 5, 7], 4, (0, 1, 4, 5), id="six-leftover-unlinked-last-match"),
        pytest.param([0, 1, 3, 4, 5, 7], 4, (0, 1, 4, 5), id="six-leftover-cross-linked"),
        pytest.param([0, 2, 3, 4, 6, 7], 4, (2, 3, 6, 7), id="six-leftover-0-4-linked"),
        pytest.param([0, 1, 2, 4, 5, 6], 4, (0, 1, 4, 5), id="six-leftover-2-6-linked"),
        pytest.param([0, 3, 4, 7], 4, (0, 3, 4, 7), id="outer-cross-set"),
        pytest.param([1, 2, 5, 6], 4, (1, 2, 5, 6), id="inner-cross-set"),
        pytest.param([0, 1, 2, 5], 4, None, id="four-idle-no-linked-set"),
        pytest.param(range(8), 3, None, id="three-is-no-group"),
        pytest.param([], 1, None, id="nothing-idle"),
    ],
)
def test_the_allowed_groups(idle: Sequence[int], nums: int, group: tuple[int, ...] | None) -> None:
    assert choose_group(idle, nums) == group


def test_every_group_returned_is_allowed() -> None:
    wings = [frozenset(range(4)), frozenset(range(4, 8))]
    allowed = {
        1: {frozenset({i}) for i in range(8)},
        2: {frozenset({a, b}) for a in range(8) for b in range(a + 1, 8) if a // 4 == b // 4 or b - a == 4},
        4: {*wings, *(frozenset(q) for q in ((0, 1, 4, 5), (2, 3, 6, 7), (0, 2, 4, 6), (1, 3, 5, 7)))}
        | {frozenset((0, 3, 4, 7)), frozenset((1, 2, 5, 6))},
        8: {frozenset(range(8))},
    }
    for mask in range(256):
        idle = [i for i in range(8) if mask >> i & 1]
        for nums, groups in allowed.items():
            got = choose_group(idle, nums)
            if got is not None:
                assert frozenset(got) in groups, (idle, nums, got)
                assert set(got) <= set(idle), (idle, nums, got)
            elif nums in (1, 2):  # a request for 1 or 2 fails only when no wing and no cross pair is idle
                assert not any(g <= set(idle) for g in groups), (idle, nums)


# --- the bubble score ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("previous", "current", "score"),
    [
        pytest.param([0, 1, 2, 3], range(8), 3000, id="hami-scenario-1"),
        pytest.param([], [0], 0, id="hami-scenario-2"),
        pytest.param([], [0, 1, 2, 3], 2000, id="whole-wing-on-an-empty-board"),
        pytest.param([0, 1, 2], [3], 1000, id="a-single-card-one-bubble-more"),
        pytest.param([0, 4], [1, 2, 3, 5], 3000, id="one-bubble-fewer"),
        pytest.param([0, 4], [1, 2, 3, 5, 6, 7], 1000, id="two-fewer-counts-1000"),
        pytest.param([0], range(8), 1000, id="minus-three-counts-1000"),
    ],
)
def test_bubble_score(previous: Sequence[int], current: Sequence[int], score: int) -> None:
    assert bubble_score(previous, current) == score


def test_bubbles() -> None:
    assert [bubbles(s) for s in ([], [0], [0, 1], [0, 1, 2, 3], range(8), [0, 4], [8])] == [1, 3, 2, 1, 0, 4, 3]


# --- fit reasons -----------------------------------------------------------------------------------------------


def _infos(n: int) -> list[DeviceInfo]:
    return [
        DeviceInfo(f"n-kunlun-{i}", i, 100, 98304, 100, "kunlun", 1 if i >= n // 2 else 0, health=True)
        for i in range(n)
    ]


def _table(vendor: str, infos: Sequence[DeviceInfo], usage: Mapping[int, tuple[int, int, int]]) -> DeviceTable:
    t = DeviceTable(vendor, infos)
    for i, (slots, mem, cores) in usage.items():
        t.charge(i, slots, mem, cores)
    return t


WHOLE = (1, 98304, 100)


ALL_BUT_0_5 = frozenset(f"n-kunlun-{i}" for i in (1, 2, 3, 4, 6, 7))


@pytest.mark.parametrize(
    ("nums", "busy", "selector", "counts"),
    [
        pytest.param(
            2, [1, 2, 3, 4, 6, 7], Selector(), {"ExclusiveDeviceAllocateConflict": 6, "NumaNotFit": 2}, id="0-5"
        ),
        pytest.param(2, [], Selector(nouse_uuids=ALL_BUT_0_5), {"CardUuidMismatch": 6, "NumaNotFit": 2}, id="nouse"),
        pytest.param(
            2, [0, 1, 2, 3, 4, 5, 6], Selector(), {"ExclusiveDeviceAllocateConflict": 7, "AllocatedCards…": 1}, id="one"
        ),
        pytest.param(1, [], Selector(use_uuids=frozenset({"x"})), {"CardUuidMismatch": 8}, id="use-uuid"),
        pytest.param(8, [5], Selector(), {"ExclusiveDeviceAllocateConflict": 1, "AllocatedCards…": 7}, id="board"),
        pytest.param(4, [0, 3, 5, 6], Selector(), {"ExclusiveDeviceAllocateConflict": 4, "NumaNotFit": 4}, id="4"),
    ],
)
def test_whole_xpu_fit_reasons(
    kunlun: KunlunVendor, nums: int, busy: list[int], selector: Selector, counts: dict[str, int]
) -> None:
    table = _table(KUNLUN, _infos(8), dict.fromkeys(busy, WHOLE))
    got = kunlun.fit(table, ContainerRequest(KUNLUN, nums, 0, 100, 0), ctx(), selector)
    assert isinstance(got, Unfit)
    assert got.total == 8
    expected = {k.replace("AllocatedCards…", "AllocatedCardsInsufficientRequest"): v for k, v in counts.items()}
    assert {r.value: n for r, n in got.counts.items()} == expected


def test_whole_xpu_fit_keeps_to_the_linked_groups(kunlun: KunlunVendor) -> None:
    # Cards 1-6 idle (0 and 7 excluded): no wing has four, 1-2-5-6 is the linked set (HAMi: the last match).
    selector = Selector(nouse_uuids=frozenset({"n-kunlun-0", "n-kunlun-7"}))
    got = kunlun.fit(_table(KUNLUN, _infos(8), {}), ContainerRequest(KUNLUN, 4, 0, 100, 0), ctx(), selector)
    assert isinstance(got, Fitted)
    assert [p.device.uuid for p in got.placements] == ["n-kunlun-1", "n-kunlun-2", "n-kunlun-5", "n-kunlun-6"]


def test_whole_xpu_unhealthy_cordoned_and_too_few(kunlun: KunlunVendor) -> None:
    infos = _infos(4)
    infos[0] = DeviceInfo("n-kunlun-0", 0, 100, 98304, 100, "kunlun", health=False)
    table = _table(KUNLUN, infos, {})
    got = kunlun.fit(table, ContainerRequest(KUNLUN, 4, 0, 100, 0), ctx(cordoned=frozenset({"n-kunlun-1"})), Selector())
    assert isinstance(got, Unfit)
    assert got.counts == {
        Reason.CARD_NOT_HEALTH: 1,
        Reason.CARD_CORDONED: 1,
        Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 2,
    }
    eight = kunlun.fit(table, ContainerRequest(KUNLUN, 8, 0, 100, 0), ctx(), Selector())
    assert isinstance(eight, Unfit)
    assert eight.counts == {Reason.NODE_INSUFFICIENT_DEVICE: 4}


def test_whole_xpu_fit_takes_whole_cards_and_scores_the_bubbles(kunlun: KunlunVendor) -> None:
    table = _table(KUNLUN, _infos(8), dict.fromkeys([0, 1, 2], WHOLE))
    got = kunlun.fit(table, ContainerRequest(KUNLUN, 1, 0, 100, 0), ctx("binpack"), Selector())
    assert isinstance(got, Fitted)
    assert [(p.index, p.device.uuid, p.device.type, p.device.usedmem, p.device.usedcores) for p in got.placements] == [
        (3, "n-kunlun-3", "kunlun", 98304, 100)
    ]
    assert got.score == 1000


def _xpu_infos(n: int = 8, count: int = 4, devcore: int = 100) -> list[DeviceInfo]:
    return [DeviceInfo(f"xpu-{i}", i, count, 98304, devcore, "P800", health=True) for i in range(n)]


Q = (1, 24576, 25)
H = (1, 49152, 50)


@pytest.mark.parametrize(
    ("usage", "request_", "policy", "group"),
    [
        # HAMi's Test_graphSelectVXPU cases
        pytest.param({1: Q, 3: (2, 49152, 50), 5: H}, (4, 24576), "spread", [0, 1, 2, 3], id="matching-sizes"),
        pytest.param({1: (2, 49152, 50), 3: H, 5: Q}, (4, 24576), "spread", [4, 5, 6, 7], id="mixed-sizes"),
        pytest.param({0: Q, 1: Q, 2: H, 5: Q}, (1, 24576), "spread", [0], id="one-slice"),
        pytest.param({1: (2, 49152, 50), 2: Q, 3: H, 6: Q}, (2, 24576), "spread", [0, 1], id="two-slices"),
        pytest.param({}, (8, 24576), "spread", list(range(8)), id="full-board"),
        pytest.param(dict.fromkeys(range(8), Q), (1, 24576), "spread", [0], id="shares-a-used-device"),
    ],
)
def test_vxpu_fit_picks_hamis_groups(
    xpu: XpuVendor,
    usage: dict[int, tuple[int, int, int]],
    request_: tuple[int, int],
    policy: str,
    group: list[int],
) -> None:
    nums, mem = request_
    got = xpu.fit(
        _table(XPU, _xpu_infos(), usage),
        ContainerRequest(XPU, nums, mem, 101, mem * 100 // 98304),
        ctx(policy),
        Selector(),
    )
    assert isinstance(got, Fitted)
    assert [p.index for p in got.placements] == group
    assert {(p.device.type, p.device.usedmem, p.device.usedcores) for p in got.placements} == {
        (XPU, mem, mem * 100 // 98304)
    }
    assert got.score == 0


@pytest.mark.parametrize(
    ("usage", "nums", "mem", "policy", "infos", "reasons"),
    [
        pytest.param(
            dict.fromkeys(range(8), Q), 1, 24576, "mutex", None, {"ExclusiveDeviceAllocateConflict": 8}, id="mutex"
        ),
        pytest.param(dict.fromkeys(range(8), H), 1, 24576, "spread", None, {"ModeNotFit": 8}, id="one-size-per-device"),
        pytest.param(dict.fromkeys(range(8), H), 1, 98304, "spread", None, {"CardInsufficientMemory": 8}, id="memory"),
        pytest.param(
            dict.fromkeys(range(8), Q), 1, 24576, "spread", _xpu_infos(count=1), {"CardTimeSlicingExhausted": 8}
        ),
        pytest.param({}, 1, 98304, "spread", _xpu_infos(devcore=50), {"CardInsufficientCore": 8}, id="cores"),
        pytest.param(
            dict.fromkeys((1, 2, 3, 4, 6, 7), Q),
            2,
            98304,
            "spread",
            None,
            {"CardInsufficientMemory": 6, "NumaNotFit": 2},
        ),
        pytest.param(
            dict.fromkeys(range(1, 8), Q), 2, 98304, "spread", None, {"CardInsufficientMemory": 7, "AllocatedCards…": 1}
        ),
    ],
)
def test_vxpu_fit_reasons(
    xpu: XpuVendor,
    usage: dict[int, tuple[int, int, int]],
    nums: int,
    mem: int,
    policy: str,
    infos: list[DeviceInfo] | None,
    reasons: dict[str, int],
) -> None:
    table = _table(XPU, infos or _xpu_infos(), usage)
    got = xpu.fit(table, ContainerRequest(XPU, nums, mem, 101, mem * 100 // 98304), ctx(policy), Selector())
    assert isinstance(got, Unfit)
    expected = {k.replace("AllocatedCards…", "AllocatedCardsInsufficientRequest"): v for k, v in reasons.items()}
    assert {r.value: n for r, n in got.counts.items()} == expected


def test_vxpu_fit_honours_the_namespace_quota(xpu: XpuVendor) -> None:
    seen: list[tuple[int, int, str]] = []

    def quota(accepted: Sequence[Any], mem: int, cores: int, uuid: str) -> bool:
        seen.append((len(accepted), mem, uuid))
        return len(accepted) < 1

    got = xpu.fit(_table(XPU, _xpu_infos(), {}), ContainerRequest(XPU, 2, 24576, 101, 25), ctx(quota=quota), Selector())
    assert isinstance(got, Unfit)
    assert got.counts == {Reason.RESOURCE_QUOTA_NOT_FIT: 2}
    assert seen == [(0, 24576, "xpu-0"), (1, 24576, "xpu-1")]


# --- decisions through the core: annotations byte for byte, scores ----------------------------------------------


def test_whole_xpu_annotations_are_hamis() -> None:
    state = _state(_node("n", {XPU_COUNT: "8"}))
    pod = _pod([{XPU_COUNT: "2"}, {XPU_COUNT: "1"}, {}])
    request = prefilter(pod, state.vendors, SchedulingDefaults())
    decision = decide(state, request, ["n"], 1_700_000_000)
    assert decision.node == "n", decision.message
    assert decision.annotations == {
        keys.VGPU_NODE: "n",
        keys.VGPU_TIME: "1700000000",
        "hami.io/kunlun-allocated": "n-kunlun-0,kunlun,98304,100:n-kunlun-1,kunlun,98304,100:;"
        "n-kunlun-2,kunlun,98304,100:;;",
        DEVICE_IDX: "2",
    }
    placed = _pod([{XPU_COUNT: "2"}, {XPU_COUNT: "1"}, {}], decision.annotations)
    placed.spec.scheduler_name = "hami-scheduler"  # the webhook's; records believe hami's scheduler's pods
    record = record_from_pod(placed, state.vendors)
    assert record is not None
    assert record.problem is None
    assert record.devices[KUNLUN] == decision.devices[KUNLUN]


def test_device_idx_comes_from_the_last_container_with_cards() -> None:
    state = _state(_node("n", {XPU_COUNT: "8"}))
    request = prefilter(_pod([{XPU_COUNT: "4"}, {}, {XPU_COUNT: "2"}, {}]), state.vendors, SchedulingDefaults())
    decision = decide(state, request, ["n"], 1)
    assert decision.annotations[DEVICE_IDX] == "4,5"
    assert decision.annotations["hami.io/kunlun-allocated"].count(";") == 4


def test_vxpu_annotations_are_hamis() -> None:
    state = _state(_node("n", annotations={XPU_KEYS.register: _xpu_register(8)}))
    request = prefilter(_pod([{VXPU: "2", VXPU_MEM: "20000"}]), state.vendors, SchedulingDefaults())
    decision = decide(state, request, ["n"], 7)
    value = "xpu-0,XPU,24576,25:xpu-1,XPU,24576,25:;"
    assert decision.annotations == {
        keys.VGPU_NODE: "n",
        keys.VGPU_TIME: "7",
        "hami.io/xpu-devices-to-allocate": value,
        "hami.io/xpu-devices-allocated": value,
    }


def test_the_bubble_score_joins_the_node_score_for_the_whole_pod() -> None:
    state = _state(_node("a", {XPU_COUNT: "8"}), _node("b", {XPU_COUNT: "8"}))
    busy = prefilter(_pod([{XPU_COUNT: "2"}, {XPU_COUNT: "1"}]), state.vendors, SchedulingDefaults())
    assert reserve(state, busy, decide(state, busy, ["a"], 1)) is not None  # a: cards 0, 1, 2 in use
    one = prefilter(_pod([{XPU_COUNT: "1"}]), state.vendors, SchedulingDefaults())
    decision = decide(state, one, ["a", "b"], 2)
    bonus = {n: decision.scores[n] - state.nodes[n].score() for n in ("a", "b")}
    assert bonus == {"a": 1000, "b": 0}  # card 3 fills wing a's hole; card 0 of b opens a new half wing
    two_halves = prefilter(_pod([{XPU_COUNT: "4"}, {XPU_COUNT: "4"}]), state.vendors, SchedulingDefaults())
    whole = decide(state, two_halves, ["b"], 3)
    assert whole.scores["b"] - state.nodes["b"].score() == 3000  # the pod's 8 cards as one allocation


# --- admission ----------------------------------------------------------------------------------------------------


def _admission() -> Admission:
    vs = vendors()
    return Admission(vs, admitters_for(vs), SchedulingDefaults(), AdmissionSettings())


def _raw(limits: Mapping[str, Any], requests: Mapping[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": dict(limits)}
    if requests is not None:
        resources["requests"] = dict(requests)
    return {"metadata": {"name": "p", "namespace": NS}, "spec": {"containers": [{"name": "c", "resources": resources}]}}


SCHED = {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}
LIM = "/spec/containers/0/resources/limits/kunlunxin.com~1vxpu-memory"
REQ = "/spec/containers/0/resources/requests"


@pytest.mark.parametrize(
    ("limits", "requests", "patch"),
    [
        pytest.param({XPU_COUNT: 2}, None, [SCHED], id="whole-xpu-only-found"),
        pytest.param({VXPU: 1}, None, [SCHED], id="vxpu-without-memory"),
        pytest.param(
            {VXPU: 1, VXPU_MEM: "20000"},
            None,
            [
                {"op": "replace", "path": LIM, "value": "24576"},
                {"op": "add", "path": REQ, "value": {VXPU_MEM: "24576"}},
                SCHED,
            ],
            id="rounded-in-limits-and-requests",
        ),
        pytest.param(
            {VXPU: 1, VXPU_MEM: "49152"},
            {VXPU_MEM: "49152"},
            [SCHED],
            id="already-a-slice-size",
        ),
        pytest.param(
            {VXPU: 1, VXPU_MEM: "60000"},
            {VXPU_MEM: "1"},
            [
                {"op": "replace", "path": LIM, "value": "98304"},
                {"op": "replace", "path": f"{REQ}/kunlunxin.com~1vxpu-memory", "value": "98304"},
                SCHED,
            ],
            id="requests-replaced",
        ),
        pytest.param(
            {VXPU: 1},
            {VXPU_MEM: "100"},
            [{"op": "replace", "path": f"{REQ}/kunlunxin.com~1vxpu-memory", "value": "24576"}, SCHED],
            id="memory-only-in-requests",
        ),
    ],
)
def test_webhook_rewrites(limits: dict[str, Any], requests: dict[str, Any] | None, patch: list[dict[str, Any]]) -> None:
    verdict = _admission().review(_raw(limits, requests), NS)
    assert verdict.allowed, verdict.message
    assert list(verdict.patch) == patch


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({XPU_COUNT: 3}, "containers[0](c).limits[kunlunxin.com/xpu]: Kunlun XPUs are allocated as 1, 2, 4 or 8"),
        (
            {VXPU: 1, VXPU_MEM: "24Gi"},
            "containers[0](c).limits[kunlunxin.com/vxpu-memory]: exceeds one XPU's 98304 MiB",
        ),
        ({VXPU: 6, VXPU_MEM: "24576"}, "containers[0](c).limits[kunlunxin.com/vxpu]: Kunlun XPUs are allocated as"),
    ],
)
def test_webhook_denials(limits: dict[str, Any], message: str) -> None:
    verdict = _admission().review(_raw(limits), NS)
    assert not verdict.allowed
    assert verdict.message.startswith(message), verdict.message


def test_the_vxpu_admitter_reports_only_its_containers(xpu: XpuVendor) -> None:
    admitter = xpu.admitter()
    edit = ContainerEdit()
    assert admitter.admit(_container({XPU_COUNT: 1}), "c", edit, PodContext()) is False
    assert admitter.admit(_container({}, {VXPU: 1, VXPU_MEM: 5}), "c", edit, PodContext()) is False  # HAMi: limits only
    assert not edit
    with pytest.raises(InvalidInput):
        admitter.admit(_container({VXPU: 1, VXPU_MEM: "lots"}), "c", edit, PodContext())
