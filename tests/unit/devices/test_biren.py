"""The Biren vendor: count-only time slicing (webhook-bind-plugin-vendors.md §7): registration with devcore forced to
100, requests, each fit reason, the capital-B allocation annotations byte for byte, the handshake, admission."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from hami.config import default_device_config
from hami.devices import registered_keys, vendors_from_config
from hami.devices.admission import ContainerEdit, CountInLimits, PodContext
from hami.devices.base import MEM_PERCENTAGE_UNSET, ContainerRequest, Fitted, Placement, Unfit
from hami.devices.biren import BIREN, BIREN_KEYS, BirenVendor
from hami.devices.table import DeviceTable
from hami.errors import QuantityError
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Container, Node, Pod
from hami.protocol.reasons import Reason, Rejection
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.decide import decide
from hami.scheduling.records import record_from_pod
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import ctx

COUNT = "birentech.com/gpu"
REGISTER = "hami.io/node-biren-register"
BR = "Biren BR106"


@pytest.fixture
def biren() -> BirenVendor:
    v = vendors_from_config(default_device_config())[BIREN]
    assert isinstance(v, BirenVendor)
    return v


def dev(uuid: str, *, index: int = 0, count: int = 4, health: bool = True) -> DeviceInfo:
    return DeviceInfo(id=uuid, index=index, count=count, devmem=32768, devcore=100, type=BR, health=health)


def container(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> Container:
    return msgspec.convert({"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}, Container)


def biren_node(name: str, register: str) -> Node:
    return msgspec.convert({"metadata": {"name": name, "annotations": {REGISTER: register}}}, Node)


REGISTRATION = json.dumps(
    [
        {"id": "br-0", "count": 4, "devmem": 32768, "devcore": 0, "type": BR, "health": True},
        {"id": "br-1", "index": 1, "count": 4, "devmem": 32768, "devcore": 7, "type": BR, "numa": 1, "health": True},
    ]
)


def test_identity(biren: BirenVendor) -> None:
    assert (biren.name, biren.keys) == (BIREN, BIREN_KEYS)
    assert (biren.resources.count, biren.resources.memory, biren.resources.core) == (COUNT, None, None)
    assert (BIREN_KEYS.register, BIREN_KEYS.handshake, BIREN_KEYS.to_allocate, BIREN_KEYS.allocated) == (
        REGISTER,
        "hami.io/node-handshake-biren",
        "hami.io/Biren-devices-to-allocate",
        "hami.io/Biren-devices-allocated",
    )
    assert BIREN_KEYS.lock == keys.NODE_LOCK
    assert BIREN_KEYS in registered_keys()


@pytest.mark.parametrize(
    ("limits", "requests", "expected"),
    [
        pytest.param({COUNT: 1}, {}, ContainerRequest(BIREN, 1, 0, MEM_PERCENTAGE_UNSET, 0), id="limits"),
        pytest.param({}, {COUNT: 3}, ContainerRequest(BIREN, 3, 0, MEM_PERCENTAGE_UNSET, 0), id="requests-fallback"),
        pytest.param({COUNT: 2}, {COUNT: 5}, ContainerRequest(BIREN, 2, 0, MEM_PERCENTAGE_UNSET, 0), id="limits-win"),
        pytest.param({COUNT: 0}, {}, None, id="zero"),
        pytest.param({"nvidia.com/gpu": 1}, {}, None, id="absent"),
    ],
)
def test_parse_request(
    biren: BirenVendor, limits: dict[str, Any], requests: dict[str, Any], expected: ContainerRequest | None
) -> None:
    assert biren.parse_request(container(limits, requests), "containers[0](c)") == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [(-1, "must not be negative"), ("500m", "must be a whole number"), (2**31, "exceeds the int32 range")],
)
def test_parse_request_rejects(biren: BirenVendor, value: object, reason: str) -> None:
    with pytest.raises(QuantityError) as info:
        biren.parse_request(container({COUNT: value}), "containers[0](c)")
    assert info.value.field == f"containers[0](c).limits[{COUNT}]"
    assert info.value.reason.startswith(reason)


def test_decode_inventory_forces_devcore_to_100(biren: BirenVendor) -> None:
    assert biren.decode_inventory(Node()) is None
    inv = biren.decode_inventory(biren_node("n", REGISTRATION))
    assert inv is not None
    assert [(d.id, d.index, d.count, d.devmem, d.devcore, d.numa, d.health) for d in inv.devices] == [
        ("br-0", 0, 4, 32768, 100, 0, True),
        ("br-1", 1, 4, 32768, 100, 1, True),
    ]


@pytest.mark.parametrize("register", ["[{", '[{"id":"br-0","count":"four"}]', '[{"id":""}]'])
def test_a_malformed_registration_quarantines_biren_on_that_node_only(register: str) -> None:
    state = ClusterState(vendors_from_config(default_device_config()))
    state.upsert_node(biren_node("bad", register))
    state.upsert_node(biren_node("good", REGISTRATION))
    assert BIREN not in state.nodes["bad"].tables
    assert REGISTER in state.nodes["bad"].problems[BIREN]
    assert len(state.nodes["good"].tables[BIREN].infos) == 2


def table(*infos: DeviceInfo, used: dict[int, int] | None = None) -> DeviceTable:
    t = DeviceTable(BIREN, infos)
    for i, slots in (used or {}).items():
        t.charge(i, slots, 0, 0)
    return t


def request(nums: int = 1) -> ContainerRequest:
    return ContainerRequest(BIREN, nums, 0, MEM_PERCENTAGE_UNSET, 0)


def test_fit_takes_one_slot_and_no_memory_or_cores(biren: BirenVendor) -> None:
    t = table(dev("br-0"), dev("br-1", index=1), used={0: 3})
    outcome = biren.fit(t, request(2), ctx("binpack"), biren.selector({}))
    assert outcome == Fitted(
        (Placement(0, ContainerDevice("br-0", BIREN, 0, 0)), Placement(1, ContainerDevice("br-1", BIREN, 0, 0)))
    )


def test_time_slicing_shares_a_card_up_to_its_count(biren: BirenVendor) -> None:
    t = table(dev("br-0", count=2))
    for _ in range(2):
        outcome = biren.fit(t, request(), ctx(), biren.selector({}))
        assert isinstance(outcome, Fitted)
        t.charge(0, 1, 0, 0)
    assert biren.fit(t, request(), ctx(), biren.selector({})) == Unfit(
        {Reason.CARD_TIME_SLICING_EXHAUSTED: 1}, 1, (Rejection(Reason.CARD_TIME_SLICING_EXHAUSTED, "br-0", 1, 0),)
    )


@pytest.mark.parametrize(
    ("infos", "used", "nums", "annotations", "policy", "cordoned", "reasons"),
    [
        pytest.param([dev("a", health=False)], {}, 1, {}, "spread", (), {Reason.CARD_NOT_HEALTH: 1}, id="unhealthy"),
        pytest.param([dev("a")], {}, 1, {}, "spread", ("a",), {Reason.CARD_CORDONED: 1}, id="cordoned"),
        pytest.param(
            [dev("a")], {}, 1, {"birentech.com/use-gpuuuid": "b"}, "spread", (), {Reason.CARD_UUID_MISMATCH: 1},
            id="uuid-use",
        ),
        pytest.param(
            [dev("a")], {}, 1, {"birentech.com/nouse-gpuuuid": "a,b"}, "spread", (),
            {Reason.CARD_UUID_MISMATCH: 1}, id="uuid-nouse",
        ),
        pytest.param(
            [dev("a", count=1)], {0: 1}, 1, {}, "spread", (), {Reason.CARD_TIME_SLICING_EXHAUSTED: 1}, id="slots"
        ),
        pytest.param(
            [dev("a")], {0: 1}, 1, {}, "mutex", (), {Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: 1}, id="mutex"
        ),
        pytest.param([dev("a")], {}, 2, {}, "spread", (), {Reason.NODE_INSUFFICIENT_DEVICE: 1}, id="too-many"),
        pytest.param(
            [dev("a"), dev("b", index=1, count=1)], {1: 1}, 2, {}, "spread", (),
            {Reason.CARD_TIME_SLICING_EXHAUSTED: 1, Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1}, id="one-of-two",
        ),
        pytest.param(
            [dev("a")], {}, 1, {"birentech.com/use-biren": "other"}, "spread", (), {}, id="type-keys-are-not-read"
        ),
    ],
)  # fmt: skip
def test_each_fit_reason(
    biren: BirenVendor,
    infos: list[DeviceInfo],
    used: dict[int, int],
    nums: int,
    annotations: dict[str, str],
    policy: str,
    cordoned: tuple[str, ...],
    reasons: dict[Reason, int],
) -> None:
    outcome = biren.fit(
        table(*infos, used=used), request(nums), ctx(policy, cordoned=frozenset(cordoned)), biren.selector(annotations)
    )
    if not reasons:
        assert isinstance(outcome, Fitted)
        return
    assert isinstance(outcome, Unfit), outcome
    assert dict(outcome.counts) == reasons


def pod_raw(annotations: dict[str, str] | None = None, where: str = "limits") -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "annotations": annotations or {}},
        "spec": {
            "containers": [
                {"name": "a", "resources": {where: {COUNT: "1"}}},
                {"name": "b", "resources": {}},
                {"name": "c", "resources": {where: {COUNT: "2"}}},
            ]
        },
    }


def test_the_decision_writes_hamis_capital_b_annotations_and_the_ledger_reads_them() -> None:
    state = ClusterState(vendors_from_config(default_device_config()))
    state.upsert_node(biren_node("n", REGISTRATION))
    pod = msgspec.convert(pod_raw(), Pod)
    decision = decide(state, prefilter(pod, state.vendors, SchedulingDefaults()), ["n"], 1_700_000_000)
    # spread: between equally used cards the one on the higher NUMA node (br-1) first, then the emptier card.
    allocation = "br-1,Biren,0,0:;;br-0,Biren,0,0:br-1,Biren,0,0:;"
    assert decision.annotations == {
        keys.VGPU_NODE: "n",
        keys.VGPU_TIME: "1700000000",
        "hami.io/Biren-devices-to-allocate": allocation,
        "hami.io/Biren-devices-allocated": allocation,
    }
    placed = msgspec.convert(pod_raw(decision.annotations), Pod)
    placed.spec.scheduler_name = "hami-scheduler"  # the webhook's; records believe hami's scheduler's pods
    record = record_from_pod(placed, state.vendors)
    assert record is not None
    assert record.devices[BIREN] == decision.devices[BIREN]


def test_admission_reports_a_count_in_limits_only() -> None:
    admitter = vendors_from_config(default_device_config())[BIREN].admitter()
    assert admitter == CountInLimits(COUNT)
    edit = ContainerEdit()
    assert admitter.admit(container({COUNT: 1}), "c", edit, PodContext()) is True
    assert admitter.admit(container(requests={COUNT: 1}), "c", edit, PodContext()) is False
    assert not edit
    vendors = vendors_from_config(default_device_config())
    admission = Admission(vendors, admitters_for(vendors), SchedulingDefaults(), AdmissionSettings())
    verdict = admission.review(pod_raw(), "ns")
    assert verdict.allowed, verdict.message
    assert verdict.patch == ({"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"},)
    untouched = admission.review(pod_raw(where="requests"), "ns")
    assert untouched.allowed
    assert untouched.patch == ()
