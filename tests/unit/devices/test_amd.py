"""The AMD vendor: registration and capacity health, requests, the percentage → compute-unit conversion, each fit
reason, the allocation annotations, admission (webhook-bind-plugin-vendors.md §7, vendors-appendix.md)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from hami.config import default_device_config
from hami.devices import registered_keys, vendors_from_config
from hami.devices.admission import ContainerEdit, PodContext
from hami.devices.amd import AMD, AMD_KEYS, AmdAdmitter, AmdConfig, AmdVendor, compute_units
from hami.devices.base import MEM_PERCENTAGE_UNSET, ContainerRequest, Fitted, Placement, Unfit
from hami.devices.table import DeviceTable
from hami.errors import InvalidInput, QuantityError
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Container, Node, Pod
from hami.protocol.reasons import Reason
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.decide import decide
from hami.scheduling.records import record_from_pod
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from hami.simulate.html import render_html
from hami.simulate.loading import load_pods, load_snapshot
from hami.simulate.report import render_placements
from hami.simulate.simulator import Simulator
from hami.simulate.top import TopFilter, build_top, render_top
from tests.unit.scheduling.builders import ctx

COUNT, MEM, CORES = "amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores"
MI300X = "AMD Instinct MI300X"
MI210 = "AMD Instinct MI210"
REGISTER = "hami.io/node-amd-register"


@pytest.fixture
def amd() -> AmdVendor:
    v = vendors_from_config(default_device_config())[AMD]
    assert isinstance(v, AmdVendor)
    return v


def card(
    uuid: str, *, index: int = 0, devmem: int = 196608, cus: int = 304, type: str = MI300X, **kw: Any
) -> DeviceInfo:
    return DeviceInfo(id=uuid, index=index, count=kw.pop("count", 10), devmem=devmem, devcore=cus, type=type, **kw)


def healthy(uuid: str, **kw: Any) -> DeviceInfo:
    return card(uuid, health=True, **kw)


def container(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> Container:
    return msgspec.convert({"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}, Container)


def amd_node(name: str, devices: list[dict[str, Any]] | str, capacity: str | None = "8") -> Node:
    register = devices if isinstance(devices, str) else json.dumps(devices)
    raw: dict[str, Any] = {"metadata": {"name": name, "annotations": {REGISTER: register}}}
    if capacity is not None:
        raw["status"] = {"capacity": {COUNT: capacity}}
    return msgspec.convert(raw, Node)


TWO_CARDS = [
    {"id": "amd-0", "count": 10, "devmem": 196608, "devcore": 304, "type": MI300X, "health": True},
    {"id": "amd-1", "index": 1, "count": 10, "devmem": 65536, "devcore": 104, "type": MI210, "numa": 1, "health": True},
]


# --- requests ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "requests", "expected"),
    [
        pytest.param({COUNT: 1}, {}, ContainerRequest(AMD, 1, 0, 100, 100), id="count-only-is-a-whole-card"),
        pytest.param(
            {COUNT: 2, MEM: 8192},
            {},
            ContainerRequest(AMD, 2, 8192, MEM_PERCENTAGE_UNSET, 100),
            id="memory-given-all-cus-by-default",
        ),
        pytest.param({COUNT: 1, CORES: 25}, {}, ContainerRequest(AMD, 1, 0, 100, 25), id="cores-in-limits"),
        pytest.param({COUNT: 1}, {CORES: 40}, ContainerRequest(AMD, 1, 0, 100, 40), id="cores-fall-back-to-requests"),
        pytest.param({COUNT: 1, CORES: 30}, {CORES: 60}, ContainerRequest(AMD, 1, 0, 100, 30), id="limits-win"),
        pytest.param({COUNT: 1, MEM: 0}, {}, ContainerRequest(AMD, 1, 0, 100, 100), id="zero-memory-is-whole-card"),
        pytest.param({COUNT: 1}, {MEM: 4096}, ContainerRequest(AMD, 1, 0, 100, 100), id="memory-read-from-limits-only"),
        pytest.param({}, {COUNT: 1}, None, id="count-read-from-limits-only"),
        pytest.param({COUNT: 0, MEM: 500}, {}, None, id="zero-count-no-request"),
        pytest.param({MEM: 500, CORES: 10}, {}, None, id="no-count-no-request"),
    ],
)
def test_parse_request(
    amd: AmdVendor, limits: dict[str, Any], requests: dict[str, Any], expected: ContainerRequest | None
) -> None:
    assert amd.parse_request(container(limits, requests), "containers[0](c)") == expected


@pytest.mark.parametrize(
    ("limits", "requests", "field", "reason"),
    [
        pytest.param({COUNT: -1}, {}, f"f.limits[{COUNT}]", "must not be negative", id="negative-count"),
        pytest.param({COUNT: "1500m"}, {}, f"f.limits[{COUNT}]", "must be a whole number", id="fractional-count"),
        pytest.param(
            {COUNT: 2**31}, {}, f"f.limits[{COUNT}]", "exceeds the int32 range HAMi's annotations can carry", id="huge"
        ),
        pytest.param({COUNT: 1, MEM: -5}, {}, f"f.limits[{MEM}]", "must not be negative", id="negative-memory"),
        pytest.param(
            {COUNT: 1, MEM: "16Gi"},
            {},
            f"f.limits[{MEM}]",
            "has a byte suffix; it counts MiB: did you mean 16384?",
            id="memory-in-bytes",
        ),
        pytest.param(
            {COUNT: 1, CORES: 0},
            {},
            f"f.limits[{CORES}]",
            "must be an integer percentage between 1 and 100",
            id="zero-cores",
        ),
        pytest.param(
            {COUNT: 1, CORES: 101},
            {},
            f"f.limits[{CORES}]",
            "must be an integer percentage between 1 and 100",
            id="cores-over-100",
        ),
        pytest.param(
            {COUNT: 1},
            {CORES: "50m"},
            f"f.requests[{CORES}]",
            "must be an integer percentage between 1 and 100",
            id="fractional-cores-in-requests",
        ),
    ],
)
def test_parse_request_rejects(
    amd: AmdVendor, limits: dict[str, Any], requests: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(QuantityError) as info:
        amd.parse_request(container(limits, requests), "f")
    assert (info.value.field, info.value.reason) == (field, reason)


@pytest.mark.parametrize(
    ("total", "percent", "cus"),
    [
        pytest.param(304, 100, 304, id="whole-mi300x"),
        pytest.param(304, 50, 152, id="half"),
        pytest.param(304, 33, 100, id="floor-100.32"),
        pytest.param(104, 1, 1, id="floor-1.04"),
        pytest.param(60, 1, 1, id="floor-0.6-clamped-up-to-1"),
        pytest.param(110, 99, 108, id="floor-108.9"),
        pytest.param(0, 50, 0, id="no-cus-registered"),
    ],
)
def test_compute_units(total: int, percent: int, cus: int) -> None:
    assert compute_units(total, percent) == cus


def test_identity(amd: AmdVendor) -> None:
    assert (amd.name, amd.keys) == (AMD, AMD_KEYS)
    assert (amd.resources.count, amd.resources.memory, amd.resources.core) == (COUNT, MEM, CORES)
    assert (AMD_KEYS.register, AMD_KEYS.handshake, AMD_KEYS.to_allocate, AMD_KEYS.allocated, AMD_KEYS.lock) == (
        REGISTER,
        None,
        "hami.io/amd-devices-to-allocate",
        "hami.io/amd-devices-allocated",
        "hami.io/mutex.lock",
    )
    assert AMD_KEYS in registered_keys()


# --- inventory ---------------------------------------------------------------------------------------------------


def test_decode_inventory_reads_the_registration(amd: AmdVendor) -> None:
    inv = amd.decode_inventory(amd_node("n", TWO_CARDS))
    assert inv is not None
    assert inv.devices == (
        healthy("amd-0"),
        healthy("amd-1", index=1, devmem=65536, cus=104, type=MI210, numa=1),
    )


@pytest.mark.parametrize(
    "capacity",
    [pytest.param("0", id="zero"), pytest.param(None, id="absent"), pytest.param("lots", id="unreadable")],
)
def test_without_capacity_the_node_has_no_amd_devices(amd: AmdVendor, capacity: str | None) -> None:
    # HAMi's CheckHealth for AMD: healthy iff capacity amd.com/gpu > 0 (no handshake).
    inv = amd.decode_inventory(amd_node("n", TWO_CARDS, capacity=capacity))
    assert inv is not None
    assert inv.devices == ()


def test_no_registration_is_no_inventory(amd: AmdVendor) -> None:
    assert amd.decode_inventory(Node()) is None


@pytest.mark.parametrize(
    ("register", "problem"),
    [
        pytest.param("[{", "hami.io/node-amd-register", id="malformed-json"),
        pytest.param('{"id":"x"}', "hami.io/node-amd-register", id="not-an-array"),
        pytest.param(
            json.dumps([{"id": "amd-0", "count": 1, "devmem": 1, "devcore": 1, "type": "MI300X,rev2", "health": True}]),
            "hami.io/node-amd-register devices[0].type: device 'amd-0': the product type is written into the pod's",
            id="type-with-separator",
        ),
        pytest.param(
            json.dumps([{"id": "amd-0", "count": 1, "health": True}, {"id": "amd-0", "count": 1, "health": True}]),
            "device id repeated",
            id="repeated-id",
        ),
    ],
)
def test_a_malformed_registration_quarantines_amd_on_that_node_only(register: str, problem: str) -> None:
    state = ClusterState(vendors_from_config(default_device_config()))
    bad = amd_node("bad", register)
    state.upsert_node(bad)
    state.upsert_node(amd_node("good", TWO_CARDS))
    assert AMD not in state.nodes["bad"].tables
    assert problem in state.nodes["bad"].problems[AMD]
    assert [i.id for i in state.nodes["good"].tables[AMD].infos] == ["amd-0", "amd-1"]


# --- fit ---------------------------------------------------------------------------------------------------------


def table(*infos: DeviceInfo, usage: dict[int, tuple[int, int, int]] | None = None) -> DeviceTable:
    t = DeviceTable(AMD, infos)
    for i, (slots, mem, cus) in (usage or {}).items():
        t.charge(i, slots, mem, cus)
    return t


def request(nums: int = 1, mem: int = 0, pct: int = 100) -> ContainerRequest:
    return ContainerRequest(AMD, nums, mem, 100 if mem == 0 else MEM_PERCENTAGE_UNSET, pct)


@pytest.mark.parametrize(
    ("info", "req", "device"),
    [
        pytest.param(healthy("a"), request(), ContainerDevice("a", MI300X, 196608, 304), id="whole-card-default"),
        pytest.param(healthy("a"), request(mem=8192, pct=50), ContainerDevice("a", MI300X, 8192, 152), id="half"),
        pytest.param(healthy("a", cus=60), request(mem=1, pct=1), ContainerDevice("a", MI300X, 1, 1), id="at-least-1"),
        pytest.param(
            healthy("a", type=""), request(mem=10), ContainerDevice("a", AMD, 10, 304), id="empty-type-is-AMD"
        ),
    ],
)
def test_fit_records_the_product_type_and_compute_units(
    amd: AmdVendor, info: DeviceInfo, req: ContainerRequest, device: ContainerDevice
) -> None:
    assert amd.fit(table(info), req, ctx(), amd.selector({})) == Fitted((Placement(0, device),))


def unfit(outcome: Fitted | Unfit) -> dict[Reason, int]:
    assert isinstance(outcome, Unfit), outcome
    return dict(outcome.counts)


@pytest.mark.parametrize(
    ("infos", "usage", "req", "annotations", "policy", "reasons"),
    [
        pytest.param([card("a")], {}, request(), {}, "spread", {Reason.CARD_NOT_HEALTH: 1}, id="unhealthy"),
        pytest.param(
            [healthy("a")], {}, request(), {"amd.com/use-gputype": "MI210"}, "spread", {Reason.CARD_TYPE_MISMATCH: 1},
            id="type-use",
        ),
        pytest.param(
            [healthy("a")], {}, request(), {"amd.com/nouse-gputype": "MI300X"}, "spread",
            {Reason.CARD_TYPE_MISMATCH: 1}, id="type-nouse",
        ),
        pytest.param(
            [healthy("a")], {}, request(), {"amd.com/use-gpu-uuid": "b"}, "spread", {Reason.CARD_UUID_MISMATCH: 1},
            id="uuid-use",
        ),
        pytest.param(
            [healthy("a")], {}, request(), {"amd.com/nouse-gpu-uuid": "a"}, "spread", {Reason.CARD_UUID_MISMATCH: 1},
            id="uuid-nouse",
        ),
        pytest.param(
            [healthy("a", count=2)], {0: (2, 0, 0)}, request(mem=1, pct=1), {}, "spread",
            {Reason.CARD_TIME_SLICING_EXHAUSTED: 1}, id="slots",
        ),
        pytest.param(
            [healthy("a")], {0: (1, 1, 1)}, request(mem=1, pct=1), {}, "mutex",
            {Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: 1}, id="mutex",
        ),
        pytest.param(
            [healthy("a")], {0: (1, 1, 1)}, request(), {}, "spread", {Reason.CARD_INSUFFICIENT_MEMORY: 1},
            id="whole-card-memory-taken",
        ),
        pytest.param(
            [healthy("a")], {0: (1, 1, 200)}, request(mem=1, pct=50), {}, "spread",
            {Reason.CARD_INSUFFICIENT_CORE: 1}, id="152-cus-of-104-free",
        ),
        pytest.param(
            [healthy("a", cus=0)], {}, request(mem=1, pct=10), {}, "spread", {Reason.CARD_INSUFFICIENT_CORE: 1},
            id="no-cus-registered",
        ),
        pytest.param(
            [healthy("a")], {}, request(nums=2), {}, "spread", {Reason.NODE_INSUFFICIENT_DEVICE: 1},
            id="more-than-the-node-has",
        ),
        pytest.param(
            [healthy("a"), card("b", index=1)], {}, request(nums=2), {}, "spread",
            {Reason.CARD_NOT_HEALTH: 1, Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1}, id="one-of-two",
        ),
    ],
)  # fmt: skip
def test_each_fit_reason(
    amd: AmdVendor,
    infos: list[DeviceInfo],
    usage: dict[int, tuple[int, int, int]],
    req: ContainerRequest,
    annotations: dict[str, str],
    policy: str,
    reasons: dict[Reason, int],
) -> None:
    assert unfit(amd.fit(table(*infos, usage=usage), req, ctx(policy), amd.selector(annotations))) == reasons


def test_cordoned_and_quota_reasons(amd: AmdVendor) -> None:
    t = table(healthy("a"), healthy("b", index=1))
    assert unfit(amd.fit(t, request(), ctx(cordoned=frozenset({"a", "b"})), amd.selector({}))) == {
        Reason.CARD_CORDONED: 2
    }
    seen: list[tuple[int, int, str]] = []

    def quota(accepted: object, mem: int, cus: int, uuid: str) -> bool:
        seen.append((mem, cus, uuid))
        return False

    assert unfit(amd.fit(t, request(mem=100, pct=50), ctx(quota=quota), amd.selector({}))) == {
        Reason.RESOURCE_QUOTA_NOT_FIT: 2
    }
    assert sorted(seen) == [(100, 152, "a"), (100, 152, "b")]  # judged with the CUs the ledger would charge


def test_the_percentage_is_converted_on_each_card_it_is_tried_on(amd: AmdVendor) -> None:
    t = table(healthy("big"), healthy("small", index=1, devmem=65536, cus=104, type=MI210))
    outcome = amd.fit(t, request(nums=2, mem=1024, pct=25), ctx("binpack"), amd.selector({}))
    assert isinstance(outcome, Fitted)
    # binpack tries the fuller card first: 1024 of 65536 MiB is a larger share than 1024 of 196608.
    assert [p.device for p in outcome.placements] == [
        ContainerDevice("small", MI210, 1024, 26),
        ContainerDevice("big", MI300X, 1024, 76),
    ]


@pytest.mark.parametrize(
    ("annotations", "card_type", "fits"),
    [
        # HAMi's TestCheckAMDType, case for case: case-insensitive substrings, blank members match nothing
        ({}, "MI300X", True),
        ({"amd.com/use-gputype": "MI300"}, "MI300X", True),
        ({"amd.com/use-gputype": "MI250"}, "MI300X", False),
        ({"amd.com/nouse-gputype": "MI300"}, "MI300X", False),
        ({"amd.com/nouse-gputype": "MI250"}, "MI300X", True),
        ({"amd.com/nouse-gputype": ""}, "MI300X", True),
        ({"amd.com/use-gputype": ""}, "MI300X", True),
        ({"amd.com/nouse-gputype": "   "}, "MI300X", True),
        ({"amd.com/use-gputype": "   "}, "MI300X", True),
        ({"amd.com/nouse-gputype": "MI250,"}, "MI300X", True),
        ({"amd.com/nouse-gputype": ",MI250"}, "MI300X", True),
        ({"amd.com/nouse-gputype": " MI250 , "}, "MI250X", False),
        ({"amd.com/nouse-gputype": ", "}, "MI300X", True),
        ({"amd.com/use-gputype": "MI300,"}, "MI250X", False),
        ({"amd.com/use-gputype": ", "}, "MI300X", False),
        # the case the issue names: a model's name selects its X variant, in any case
        ({"amd.com/use-gputype": "MI250"}, "AMD-MI250X", True),
        ({"amd.com/use-gputype": "mi300x"}, "AMD Instinct MI300", False),
    ],
)
def test_type_filters_match_substrings_as_hami_does(
    amd: AmdVendor, annotations: dict[str, str], card_type: str, fits: bool
) -> None:
    assert amd.selector(annotations).type_ok(healthy("a", type=card_type)) is fits


def test_a_use_gputype_naming_the_model_places_the_pod_on_its_x_variant(amd: AmdVendor) -> None:
    sel = amd.selector({"amd.com/use-gputype": "MI250"})
    outcome = amd.fit(table(healthy("a", type="AMD-MI250X")), request(), ctx(), sel)
    assert isinstance(outcome, Fitted), outcome
    assert outcome.placements[0].device.type == "AMD-MI250X"


# --- the whole decision: annotations byte for byte ---------------------------------------------------------------


def pod_raw(limits: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "annotations": annotations or {}},
        "spec": {
            "initContainers": [{"name": "init", "resources": {}}],
            "containers": [{"name": "main", "resources": {"limits": limits}}, {"name": "side", "resources": {}}],
        },
    }


def test_the_decision_writes_hamis_annotations_and_the_ledger_reads_them_back() -> None:
    state = ClusterState(vendors_from_config(default_device_config()))
    state.upsert_node(amd_node("n", TWO_CARDS))
    pod = msgspec.convert(pod_raw({COUNT: "1", MEM: "4096", CORES: "50"}, {"amd.com/use-gputype": "MI210"}), Pod)
    request_ = prefilter(pod, state.vendors, SchedulingDefaults())
    decision = decide(state, request_, ["n"], 1_700_000_000)
    allocation = f";amd-1,{MI210},4096,52:;;"
    assert decision.annotations == {
        keys.VGPU_NODE: "n",
        keys.VGPU_TIME: "1700000000",
        "hami.io/amd-devices-to-allocate": allocation,
        "hami.io/amd-devices-allocated": allocation,
    }
    placed = msgspec.convert(pod_raw({COUNT: "1"}, decision.annotations), Pod)
    placed.spec.scheduler_name = "hami-scheduler"  # the webhook's; records believe hami's scheduler's pods
    record = record_from_pod(placed, state.vendors)
    assert record is not None
    assert record.devices[AMD] == ((), (ContainerDevice("amd-1", MI210, 4096, 52),), ())


# --- admission ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "requests", "found"),
    [
        pytest.param({COUNT: 1}, {}, True, id="count"),
        pytest.param({COUNT: 1, CORES: 100}, {}, True, id="count-and-cores"),
        pytest.param({MEM: 1024}, {}, True, id="memory-only"),
        pytest.param({CORES: 10}, {}, True, id="cores-only"),
        pytest.param({}, {COUNT: 1}, False, id="count-in-requests"),
        pytest.param({"nvidia.com/gpu": 1}, {}, False, id="another-vendor"),
    ],
)
def test_admission_only_reports_and_writes_nothing(
    limits: dict[str, Any], requests: dict[str, Any], found: bool
) -> None:
    edit = ContainerEdit()
    assert AmdAdmitter(AmdConfig()).admit(container(limits, requests), "containers[0](c)", edit, PodContext()) is found
    assert not edit


@pytest.mark.parametrize("cores", [0, 101, "50m", "x"])
def test_admission_validates_the_core_percentage(cores: object) -> None:
    with pytest.raises(InvalidInput) as info:
        AmdAdmitter(AmdConfig()).admit(
            container({COUNT: 1, CORES: cores}), "containers[0](c)", ContainerEdit(), PodContext()
        )
    assert info.value.field == f"containers[0](c).limits[{CORES}]"
    assert info.value.reason == "must be an integer percentage between 1 and 100"


def test_admission_without_a_count_does_not_validate_cores() -> None:
    # HAMi validates gpucores only next to a count in limits; such a pod asks for no AMD device at all.
    assert AmdAdmitter(AmdConfig()).admit(container({CORES: 500}), "c", ContainerEdit(), PodContext()) is True


def test_the_webhook_denies_a_bad_percentage_and_passes_a_good_pod_unchanged() -> None:
    vendors = vendors_from_config(default_device_config())
    admission = Admission(vendors, admitters_for(vendors), SchedulingDefaults(), AdmissionSettings())
    denied = admission.review(pod_raw({COUNT: "1", CORES: "150"}), "ns")
    assert not denied.allowed
    assert denied.message is not None
    assert "amd.com/gpucores" in denied.message
    assert "must be an integer percentage between 1 and 100" in denied.message
    allowed = admission.review(pod_raw({COUNT: "1", CORES: "50"}), "ns")
    assert allowed.allowed, allowed.message
    assert allowed.patch == ({"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"},)


# --- hami top and the simulator's placements count compute units, not percent --------------------------------------


def test_top_and_placements_show_compute_units_of_the_card() -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "annotations": {REGISTER: json.dumps(TWO_CARDS)}},
    }
    node["status"] = {"capacity": {COUNT: "2"}}
    pod = pod_raw({COUNT: "1", MEM: "1024", CORES: "50"}, {"amd.com/use-gputype": "MI300X"})
    pod.update({"apiVersion": "v1", "kind": "Pod"})
    sim = Simulator(default_device_config(), SchedulingDefaults())
    sim.add_snapshot(load_snapshot([("cluster", json.dumps(node))]))
    outcome = sim.place(load_pods([("pods", json.dumps(pod))])[0], 1_700_000_000)
    assert outcome.node == "n"
    assert render_placements([outcome], sim.state)[1].endswith("amd-0 (1024 MiB, 152/304 cores)")
    text = render_top(build_top(sim.state, TopFilter(vendor="amd")))
    assert "152/304" in text
    assert "ns/p (1024 MiB, 152/304 cores)" in text


def test_the_html_report_shows_compute_units_too() -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "annotations": {REGISTER: json.dumps(TWO_CARDS)}},
    }
    node["status"] = {"capacity": {COUNT: "2"}}
    pod = pod_raw({COUNT: "1", MEM: "1024", CORES: "25"}, {"amd.com/use-gputype": "MI210"})
    pod.update({"apiVersion": "v1", "kind": "Pod"})
    sim = Simulator(default_device_config(), SchedulingDefaults())
    sim.add_snapshot(load_snapshot([("cluster", json.dumps(node))]))
    outcome = sim.place(load_pods([("pods", json.dumps(pod))])[0], 1_700_000_000)
    assert "amd-1 (1024 MiB, 26/104 cores)" in render_html("t", sim.state, [outcome])
