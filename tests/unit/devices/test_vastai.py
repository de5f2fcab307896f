"""The Vastai vendor (webhook-bind-plugin-vendors.md §7, vendors-appendix.md): registration with custominfo
(DeviceStrategy, AIC), die mode preferring the dies of one AIC card, mutex over whole AIC cards, the AIC node score,
the lowest index between equal cards, each fit reason, annotations byte for byte, admission."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from hami.config import default_device_config
from hami.devices import registered_keys, vendors_from_config
from hami.devices.admission import CountInLimits
from hami.devices.base import MEM_PERCENTAGE_UNSET, ContainerRequest, FitContext, Fitted, Unfit
from hami.devices.table import DeviceTable
from hami.devices.vastai import VASTAI, VASTAI_KEYS, VastaiVendor, aic_score
from hami.errors import QuantityError
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice
from hami.protocol.objects import Container, Node, Pod
from hami.protocol.reasons import Reason
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.decide import decide
from hami.scheduling.records import record_from_pod
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import ctx

COUNT = "vastaitech.com/va"
REGISTER = "hami.io/node-va-register"


@pytest.fixture
def va() -> VastaiVendor:
    v = vendors_from_config(default_device_config())[VASTAI]
    assert isinstance(v, VastaiVendor)
    return v


def die(i: int, aic: str | None, *, strategy: str | None = "die", count: int = 1, **kw: Any) -> dict[str, Any]:
    """One registered device as the Vastai plugin writes it; ``aic`` None leaves AIC out."""
    custom: dict[str, Any] = {}
    if strategy is not None:
        custom["DeviceStrategy"] = strategy
    if aic is not None:
        custom["AIC"] = aic
    d: dict[str, Any] = {"id": f"va-{i}", "index": i, "count": count, "devmem": 16384, "devcore": 0, "type": "VA1"}
    d.update(kw)
    d["health"] = kw.get("health", True)
    if custom:
        d["custominfo"] = custom
    return d


def va_node(name: str, devices: list[dict[str, Any]] | str) -> Node:
    register = devices if isinstance(devices, str) else json.dumps(devices)
    return msgspec.convert({"metadata": {"name": name, "annotations": {REGISTER: register}}}, Node)


def loaded(
    va: VastaiVendor, devices: list[dict[str, Any]], used: dict[int, int] | None = None
) -> tuple[DeviceTable, dict[str, str]]:
    inv = va.decode_inventory(va_node("n", devices))
    assert inv is not None
    t = DeviceTable(VASTAI, inv.devices)
    for i, slots in (used or {}).items():
        t.charge(i, slots, 0, 0)
    return t, dict(inv.node_info)


def with_info(c: FitContext, info: dict[str, str]) -> FitContext:
    c.node_info = info
    return c


def request(nums: int = 1) -> ContainerRequest:
    return ContainerRequest(VASTAI, nums, 0, MEM_PERCENTAGE_UNSET, 0)


def chosen(outcome: Fitted | Unfit) -> list[str]:
    assert isinstance(outcome, Fitted), outcome
    return [p.device.uuid for p in outcome.placements]


# --- identity, requests, inventory -------------------------------------------------------------------------------


def test_identity(va: VastaiVendor) -> None:
    assert (va.name, va.keys) == (VASTAI, VASTAI_KEYS)
    assert (va.resources.count, va.resources.memory, va.resources.core) == (COUNT, None, None)
    assert (VASTAI_KEYS.register, VASTAI_KEYS.handshake, VASTAI_KEYS.to_allocate, VASTAI_KEYS.allocated) == (
        REGISTER,
        "hami.io/node-handshake-va",
        "hami.io/Vastai-devices-to-allocate",
        "hami.io/Vastai-devices-allocated",
    )
    assert VASTAI_KEYS.lock == keys.NODE_LOCK
    assert VASTAI_KEYS in registered_keys()


@pytest.mark.parametrize(
    ("limits", "requests", "nums"),
    [({COUNT: 2}, {}, 2), ({}, {COUNT: 3}, 3), ({COUNT: 1}, {COUNT: 4}, 1), ({COUNT: 0}, {}, None), ({}, {}, None)],
)
def test_parse_request(va: VastaiVendor, limits: dict[str, Any], requests: dict[str, Any], nums: int | None) -> None:
    c = msgspec.convert({"name": "c", "resources": {"limits": limits, "requests": requests}}, Container)
    assert va.parse_request(c, "f") == (None if nums is None else request(nums))


def test_parse_request_rejects_a_negative_count(va: VastaiVendor) -> None:
    c = msgspec.convert({"name": "c", "resources": {"requests": {COUNT: "-2"}}}, Container)
    with pytest.raises(QuantityError) as info:
        va.parse_request(c, "containers[0](c)")
    assert (info.value.field, info.value.reason) == (f"containers[0](c).requests[{COUNT}]", "must not be negative")


def test_decode_inventory_forces_devcore_and_keeps_the_aic_cards(va: VastaiVendor) -> None:
    assert va.decode_inventory(Node()) is None
    devices = [die(0, "aic-0"), die(1, "aic-0"), die(2, "aic-1"), die(3, None), die(4, 7)]
    inv = va.decode_inventory(va_node("n", devices))
    assert inv is not None
    assert [(d.id, d.devcore, d.devmem, d.health) for d in inv.devices] == [
        (f"va-{i}", 100, 16384, True) for i in range(5)
    ]
    # A die without an AIC text (absent, or a number) names no card.
    assert inv.node_info == {"strategy": "die", "aic/va-0": "aic-0", "aic/va-1": "aic-0", "aic/va-2": "aic-1"}


def test_a_card_strategy_node_has_no_aic_cards_for_the_score(va: VastaiVendor) -> None:
    inv = va.decode_inventory(va_node("n", [die(0, "aic-0", strategy="card"), die(1, "aic-1", strategy=None)]))
    assert inv is not None
    # HAMi's ScoreNode counts a device whose strategy is absent or "die" and that names an AIC.
    assert inv.node_info == {"strategy": "card", "aic/va-1": "aic-1"}


@pytest.mark.parametrize(
    ("register", "problem"),
    [
        pytest.param("[{", REGISTER, id="malformed-json"),
        pytest.param('[{"id":"va-0","custominfo":"die"}]', "custominfo does not decode", id="custominfo-not-an-object"),
        pytest.param('[{"id":"va 0","count":1,"health":true}]', "id holds a character", id="bad-id"),
    ],
)
def test_a_malformed_registration_quarantines_vastai_on_that_node_only(register: str, problem: str) -> None:
    state = ClusterState(vendors_from_config(default_device_config()))
    state.upsert_node(va_node("bad", register))
    state.upsert_node(va_node("good", [die(0, "aic-0")]))
    assert VASTAI not in state.nodes["bad"].tables
    assert problem in state.nodes["bad"].problems[VASTAI]
    assert state.nodes["good"].node_info[VASTAI]["aic/va-0"] == "aic-0"


# --- die mode ---------------------------------------------------------------------------------------------------

# Two AIC cards of three dies each and one of two dies: va-0..2 on A, va-3..5 on B, va-6..7 on C.
CARDS = [die(i, aic) for i, aic in enumerate("AAABBBCC")]


@pytest.mark.parametrize(
    ("used", "nums", "policy", "expected"),
    [
        pytest.param({}, 1, "spread", ["va-0"], id="one-die-first-in-policy-order"),
        pytest.param({}, 2, "spread", ["va-0", "va-1"], id="two-dies-of-one-card-lowest-index-between-equals"),
        pytest.param({}, 3, "spread", ["va-0", "va-1", "va-2"], id="three-fill-card-A"),
        pytest.param({}, 4, "spread", ["va-0", "va-1", "va-2", "va-3"], id="four-spill-to-the-next-card"),
        pytest.param({0: 1, 1: 1}, 2, "spread", ["va-3", "va-4"], id="the-card-with-most-free-dies-not-va-2"),
        pytest.param({0: 1, 3: 1}, 2, "spread", ["va-1", "va-2"], id="equal-cards-the-lowest-index"),
        pytest.param({0: 1}, 3, "spread", ["va-3", "va-4", "va-5"], id="a-whole-free-card-over-a-broken-one"),
        pytest.param({0: 1}, 2, "mutex", ["va-3", "va-4"], id="mutex-skips-every-die-of-a-busy-card"),
    ],
)
def test_die_mode_prefers_the_dies_of_one_aic_card(
    va: VastaiVendor, used: dict[int, int], nums: int, policy: str, expected: list[str]
) -> None:
    t, info = loaded(va, CARDS, used)
    assert chosen(va.fit(t, request(nums), with_info(ctx(policy), info), va.selector({}))) == expected


def test_die_mode_score_is_the_share_of_the_best_represented_card(va: VastaiVendor) -> None:
    t, info = loaded(va, CARDS, {0: 1, 1: 1, 3: 1, 4: 1})  # one free die on A, one on B, two on C
    outcome = va.fit(t, request(3), with_info(ctx(), info), va.selector({}))
    assert isinstance(outcome, Fitted)
    assert [p.device.uuid for p in outcome.placements] == ["va-6", "va-7", "va-2"]
    assert outcome.score == pytest.approx(2 / 3)
    whole = va.fit(t, request(2), with_info(ctx(), info), va.selector({}))
    assert isinstance(whole, Fitted)
    assert whole.score == 1.0


@pytest.mark.parametrize(
    ("devices", "names", "score"),
    [
        pytest.param(CARDS, ["va-0", "va-1"], 1.0, id="one-card"),
        pytest.param(CARDS, ["va-0", "va-3"], 0.5, id="two-cards"),
        pytest.param(CARDS, ["va-0", "va-1", "va-3", "va-6"], 0.5, id="two-of-four"),
        pytest.param([die(0, "A"), die(1, None)], ["va-0", "va-1"], 0.0, id="a-die-without-a-card-scores-0"),
        pytest.param([die(0, "A", strategy="card")], ["va-0"], 0.0, id="not-a-die-scores-0"),
        pytest.param(CARDS, [], 0.0, id="none"),
    ],
)
def test_aic_score(va: VastaiVendor, devices: list[dict[str, Any]], names: list[str], score: float) -> None:
    _, info = loaded(va, devices)
    assert aic_score([ContainerDevice(n, VASTAI, 0, 0) for n in names], info) == pytest.approx(score)


def test_a_die_without_a_card_is_a_card_of_its_own(va: VastaiVendor) -> None:
    t, info = loaded(va, [die(0, None), die(1, "A"), die(2, "A"), die(3, None)])
    assert chosen(va.fit(t, request(3), with_info(ctx(), info), va.selector({}))) == ["va-1", "va-2", "va-0"]


def test_card_mode_takes_devices_in_policy_order_and_mutex_looks_at_the_device_only(va: VastaiVendor) -> None:
    devices = [die(i, aic, strategy="card", count=2) for i, aic in enumerate("AABB")]
    t, info = loaded(va, devices, {0: 1})
    assert chosen(va.fit(t, request(2), with_info(ctx("binpack"), info), va.selector({}))) == ["va-0", "va-1"]
    assert chosen(va.fit(t, request(2), with_info(ctx("mutex"), info), va.selector({}))) == ["va-1", "va-2"]


# --- reasons -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("devices", "used", "nums", "annotations", "policy", "cordoned", "reasons"),
    [
        pytest.param([die(0, "A", health=False)], {}, 1, {}, "spread", (), {Reason.CARD_NOT_HEALTH: 1}, id="unhealthy"),
        pytest.param([die(0, "A")], {}, 1, {}, "spread", ("va-0",), {Reason.CARD_CORDONED: 1}, id="cordoned"),
        pytest.param(
            [die(0, "A")], {}, 1, {"vastaitech.com/use-gpuuuid": "va-9"}, "spread", (),
            {Reason.CARD_UUID_MISMATCH: 1}, id="uuid-use",
        ),
        pytest.param(
            [die(0, "A")], {}, 1, {"vastaitech.com/nouse-gpuuuid": "va-0"}, "spread", (),
            {Reason.CARD_UUID_MISMATCH: 1}, id="uuid-nouse",
        ),
        pytest.param([die(0, "A")], {0: 1}, 1, {}, "spread", (), {Reason.CARD_TIME_SLICING_EXHAUSTED: 1}, id="slots"),
        pytest.param(
            [die(0, "A", count=2)], {0: 1}, 1, {}, "mutex", (), {Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: 1},
            id="mutex-busy-die",
        ),
        pytest.param(
            [die(0, "A", count=2), die(1, "A")], {0: 1}, 1, {}, "mutex", (),
            {Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: 2}, id="mutex-idle-die-on-a-busy-card",
        ),
        pytest.param([die(0, "A")], {}, 2, {}, "spread", (), {Reason.NODE_INSUFFICIENT_DEVICE: 1}, id="too-many"),
        pytest.param(
            [die(0, "A"), die(1, "A"), die(2, "B")], {2: 1}, 3, {}, "spread", (),
            {Reason.CARD_TIME_SLICING_EXHAUSTED: 1, Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 2},
            id="die-mode-too-few-candidates",
        ),
        pytest.param(
            [die(0, "A", strategy="card"), die(1, "A", strategy="card", health=False)], {}, 2, {}, "spread", (),
            {Reason.CARD_NOT_HEALTH: 1, Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1}, id="card-mode-one-of-two",
        ),
    ],
)  # fmt: skip
def test_each_fit_reason(
    va: VastaiVendor,
    devices: list[dict[str, Any]],
    used: dict[int, int],
    nums: int,
    annotations: dict[str, str],
    policy: str,
    cordoned: tuple[str, ...],
    reasons: dict[Reason, int],
) -> None:
    t, info = loaded(va, devices, used)
    c = with_info(ctx(policy, cordoned=frozenset(cordoned)), info)
    outcome = va.fit(t, request(nums), c, va.selector(annotations))
    assert isinstance(outcome, Unfit), outcome
    assert dict(outcome.counts) == reasons


# --- the whole decision ------------------------------------------------------------------------------------------


def pod_raw(nums: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {COUNT: str(nums)}}}]},
    }


def test_the_aic_score_picks_the_node_where_the_dies_share_a_card() -> None:
    state = ClusterState(vendors_from_config(default_device_config()))
    state.upsert_node(va_node("split", [die(0, "A"), die(1, "B")]))
    state.upsert_node(va_node("whole", [die(0, "A"), die(1, "A")]))
    pod = msgspec.convert(pod_raw(2), Pod)
    decision = decide(state, prefilter(pod, state.vendors, SchedulingDefaults()), ["split", "whole"], 1_700_000_000)
    assert decision.node == "whole"
    assert decision.scores["whole"] == pytest.approx(decision.scores["split"] + 0.5)
    allocation = "va-0,Vastai,0,0:va-1,Vastai,0,0:;"
    assert decision.annotations == {
        keys.VGPU_NODE: "whole",
        keys.VGPU_TIME: "1700000000",
        "hami.io/Vastai-devices-to-allocate": allocation,
        "hami.io/Vastai-devices-allocated": allocation,
    }
    placed = msgspec.convert(pod_raw(2, decision.annotations), Pod)
    placed.spec.scheduler_name = "hami-scheduler"  # the webhook's; records believe hami's scheduler's pods
    record = record_from_pod(placed, state.vendors)
    assert record is not None
    assert record.devices[VASTAI] == ((ContainerDevice("va-0", VASTAI, 0, 0), ContainerDevice("va-1", VASTAI, 0, 0)),)


def test_admission_reports_a_count_in_limits_and_writes_nothing_else() -> None:
    vendors = vendors_from_config(default_device_config())
    assert vendors[VASTAI].admitter() == CountInLimits(COUNT)
    admission = Admission(vendors, admitters_for(vendors), SchedulingDefaults(), AdmissionSettings())
    verdict = admission.review(pod_raw(1), "ns")
    assert verdict.allowed, verdict.message
    assert verdict.patch == ({"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"},)
