"""The Cambricon MLU vendor (webhook-bind-plugin-vendors.md §7, HAMi v2.10 ``pkg/device/cambricon``): inventory from
the node's capacity, requests in 256 MiB units, the shared fit with quota, the allocation and dsMLU annotations
byte for byte, its own node lock."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from hami.devices import registered_keys
from hami.devices.admission import ContainerEdit, CountInLimits, PodContext
from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    AnnotationContext,
    ContainerRequest,
    Fitted,
    NodeInventory,
    Unfit,
)
from hami.devices.cambricon import (
    CAMBRICON_KEYS,
    DSMLU_ASSIGNED,
    DSMLU_PROFILE,
    MLU,
    CambriconVendor,
)
from hami.devices.table import DeviceTable
from hami.errors import InvalidInput, QuantityError
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice, PodDevices
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Container, Node
from hami.protocol.reasons import Reason
from hami.scheduling.decide import decide, reserve
from hami.scheduling.records import record_from_pod
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import container, ctx, pod, req, resource_quota, vendors

COUNT, MEM, CORES = "cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"
TO_ALLOCATE, ALLOCATED = "hami.io/cambricon-mlu-devices-to-allocate", "hami.io/cambricon-mlu-devices-allocated"
FIELD = "containers[0](c)"


@pytest.fixture
def mlu() -> CambriconVendor:
    v = vendors()[MLU]
    assert isinstance(v, CambriconVendor)
    return v


def _capacity(name: str, vcore: Any, vmemory: Any = None) -> Node:
    cap: dict[str, Any] = {CORES: vcore}
    if vmemory is not None:
        cap[MEM] = vmemory
    return msgspec.convert({"metadata": {"name": name}, "status": {"capacity": cap}}, Node)


def _container(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> Container:
    return msgspec.convert({"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}, Container)


def _card(node: str, i: int, devmem: int) -> DeviceInfo:
    return DeviceInfo(f"{node}-cambricon-mlu-{i}", i, 100, devmem, 100, MLU, 0, health=True)


# --- inventory: derived from status.capacity ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vcore", "vmemory", "cards"),
    [
        # Two MLU370s of 24 GiB: 200 core units, 2 × 96 memory units of 256 MiB.
        pytest.param(200, 192, [24576, 24576], id="two-cards"),
        pytest.param("100", "96", [24576], id="quantities-as-text"),
        # Core units that are not a multiple of 100 still round up to a card; memory is spread per 100 units.
        pytest.param(150, 96, [16384, 16384], id="partial-card-rounds-up"),
        pytest.param(100, None, [0], id="no-memory-capacity"),
    ],
)
def test_inventory_from_capacity(mlu: CambriconVendor, vcore: Any, vmemory: Any, cards: list[int]) -> None:
    inventory = mlu.decode_inventory(_capacity("mlu-1", vcore, vmemory))
    assert inventory == NodeInventory(tuple(_card("mlu-1", i, m) for i, m in enumerate(cards)))


@pytest.mark.parametrize("vcore", [None, 0, "0"])
def test_a_node_without_mlu_capacity_has_no_inventory(mlu: CambriconVendor, vcore: Any) -> None:
    node = Node() if vcore is None else _capacity("n", vcore, 96)
    assert mlu.decode_inventory(node) is None


@pytest.mark.parametrize(
    ("vcore", "vmemory", "field", "reason"),
    [
        pytest.param("lots", 96, f"status.capacity[{CORES}]", "", id="not-a-quantity"),
        pytest.param(-100, 96, f"status.capacity[{CORES}]", "must not be negative", id="negative-cores"),
        pytest.param("1.5", 96, f"status.capacity[{CORES}]", "must be a whole number", id="fractional"),
        pytest.param(100, -1, f"status.capacity[{MEM}]", "must not be negative", id="negative-memory"),
        pytest.param(
            10**9, 96, f"status.capacity[{CORES}]", "cards of 100 core units: hami accepts at most 1024", id="too-many"
        ),
        pytest.param(100, 2**24, f"status.capacity[{MEM}]", "beyond the int32 range", id="memory-wraps-int32"),
    ],
)
def test_malformed_capacity_is_refused_with_the_resource(
    mlu: CambriconVendor, vcore: Any, vmemory: Any, field: str, reason: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        mlu.decode_inventory(_capacity("n", vcore, vmemory))
    assert info.value.field == field
    assert reason in info.value.reason


def test_malformed_capacity_quarantines_only_the_mlus_of_that_node() -> None:
    s = ClusterState(vendors())
    s.upsert_node(_capacity("bad", -100, 96))
    s.upsert_node(_capacity("good", 100, 96))
    assert MLU not in s.nodes["bad"].tables
    assert f"status.capacity[{CORES}]" in s.nodes["bad"].problems[MLU]
    assert [i.id for i in s.nodes["good"].tables[MLU].infos] == ["good-cambricon-mlu-0"]


# --- requests ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "requests", "expected"),
    [
        pytest.param({COUNT: 1}, {}, ContainerRequest(MLU, 1, 0, 100, 100), id="count-only-is-a-whole-card"),
        pytest.param(
            {COUNT: 2, MEM: 8},
            {},
            ContainerRequest(MLU, 2, 2048, MEM_PERCENTAGE_UNSET, 100),
            id="memory-in-256MiB-units-cores-default-100",
        ),
        pytest.param({COUNT: 1, CORES: 30}, {}, ContainerRequest(MLU, 1, 0, 100, 30), id="cores-given"),
        pytest.param({COUNT: 1, CORES: 0}, {}, ContainerRequest(MLU, 1, 0, 100, 0), id="zero-cores-kept"),
        pytest.param({}, {COUNT: 1, MEM: 4}, ContainerRequest(MLU, 1, 1024, 101, 100), id="requests-fallback"),
        pytest.param({COUNT: 1, MEM: 2}, {MEM: 90}, ContainerRequest(MLU, 1, 512, 101, 100), id="limits-win"),
        pytest.param({COUNT: 0, MEM: 4}, {}, None, id="zero-count-no-request"),
        pytest.param({MEM: 4}, {}, None, id="no-count-no-request"),
    ],
)
def test_parse_request(
    mlu: CambriconVendor, limits: dict[str, Any], requests: dict[str, Any], expected: ContainerRequest | None
) -> None:
    assert mlu.parse_request(_container(limits, requests), FIELD) == expected


@pytest.mark.parametrize(
    ("limits", "field", "reason"),
    [
        pytest.param({COUNT: -1}, f"f.limits[{COUNT}]", "must not be negative", id="negative-count"),
        pytest.param(
            {COUNT: 2**31}, f"f.limits[{COUNT}]", "exceeds the int32 range HAMi's annotations can carry", id="count"
        ),
        pytest.param({COUNT: 1, MEM: "1.5"}, f"f.limits[{MEM}]", "must be a whole number", id="fractional-memory"),
        pytest.param(
            {COUNT: 1, MEM: 2**23},
            f"f.limits[{MEM}]",
            "× 256 MiB units exceeds the int32 range HAMi's annotations can carry",
            id="memory-units-overflow",
        ),
        pytest.param(
            {COUNT: 1, MEM: "16Gi"},
            f"f.limits[{MEM}]",
            "exceeds the int32 range HAMi's annotations can carry; it counts 256 MiB units: did you mean 64?",
            id="bytes-instead-of-units",
        ),
        pytest.param(
            {COUNT: 1, CORES: 101},
            f"f.limits[{CORES}]",
            "cores are a percentage of one MLU and cannot exceed 100",
            id="cores-over-100-refused-not-clamped",
        ),
    ],
)
def test_parse_request_rejects(mlu: CambriconVendor, limits: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(QuantityError) as info:
        mlu.parse_request(_container(limits), "f")
    assert (info.value.field, info.value.reason) == (field, reason)


# --- identity, keys, selector, admission -----------------------------------------------------------------------------


def test_keys_and_resources(mlu: CambriconVendor) -> None:
    k = mlu.keys
    assert (mlu.name, k) == (MLU, CAMBRICON_KEYS)
    assert (k.register, k.handshake, k.to_allocate, k.allocated) == ("", None, TO_ALLOCATE, ALLOCATED)
    assert k.extra == ("CAMBRICON_DSMLU_ASSIGNED", "CAMBRICON_DSMLU_PROFILE")
    assert (k.lock, k.lock_expiry_s) == ("cambricon.com/dsmlu.lock", 120)
    r = mlu.resources
    # The quota book multiplies a memory limit by this factor: quota limits count 256 MiB units, like requests.
    assert (r.count, r.memory, r.core, r.memory_factor) == (COUNT, MEM, CORES, 256)
    assert CAMBRICON_KEYS in registered_keys()


def test_selector_reads_the_uuid_keys_only(mlu: CambriconVendor) -> None:
    sel = mlu.selector(
        {
            "cambricon.com/use-gpuuuid": "n-cambricon-mlu-0,n-cambricon-mlu-2",
            "cambricon.com/nouse-gpuuuid": "n-cambricon-mlu-2",
            "cambricon.com/use-mlutype": "MLU290",  # defined by HAMi but never read
        }
    )
    assert [sel.uuid_ok(f"n-cambricon-mlu-{i}") for i in range(3)] == [True, False, False]
    assert sel.type_ok(_card("n", 0, 1)) is True


def test_admission_is_hamis_default(mlu: CambriconVendor) -> None:
    admitter = mlu.admitter()
    assert admitter == CountInLimits(COUNT)
    podctx = PodContext(name="p", namespace="ns", annotations={})
    edit = ContainerEdit()
    assert admitter.admit(_container({COUNT: 1}), FIELD, edit, podctx) is True
    assert admitter.admit(_container(requests={COUNT: 1}), FIELD, edit, podctx) is False
    assert not edit


# --- fit ------------------------------------------------------------------------------------------------------------


def _table(*usage: tuple[int, int, int]) -> DeviceTable:
    infos = (_card("n", 0, 24576), _card("n", 1, 24576))
    t = DeviceTable(MLU, infos)
    for i, (slots, mem, cores) in enumerate(usage):
        t.charge(i, slots, mem, cores)
    return t


def test_fit_takes_a_card_and_records_mlu(mlu: CambriconVendor) -> None:
    outcome = mlu.fit(_table(), req(memreq=2048, cores=50, vendor=MLU), ctx("binpack"), mlu.selector({}))
    assert isinstance(outcome, Fitted)
    assert [p.device for p in outcome.placements] == [ContainerDevice("n-cambricon-mlu-0", MLU, 2048, 50)]


def test_fit_count_only_takes_a_whole_idle_card(mlu: CambriconVendor) -> None:
    request = mlu.parse_request(_container({COUNT: 1}), FIELD)
    assert request is not None
    outcome = mlu.fit(_table((1, 1024, 10)), request, ctx(), mlu.selector({}))
    assert isinstance(outcome, Fitted)
    assert [p.device for p in outcome.placements] == [ContainerDevice("n-cambricon-mlu-1", MLU, 24576, 100)]


@pytest.mark.parametrize(
    ("request_", "usage", "counts"),
    [
        pytest.param(
            req(memreq=20480, cores=10, vendor=MLU),
            [(1, 8192, 10), (1, 8192, 10)],
            {Reason.CARD_INSUFFICIENT_MEMORY: 2},
            id="memory",
        ),
        pytest.param(
            req(memreq=256, cores=60, vendor=MLU),
            [(1, 256, 50), (1, 256, 50)],
            {Reason.CARD_INSUFFICIENT_CORE: 2},
            id="cores",
        ),
        pytest.param(
            req(nums=2, memreq=256, cores=60, vendor=MLU),
            [(1, 256, 50)],
            {Reason.CARD_INSUFFICIENT_CORE: 1, Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1},
            id="one-of-two",
        ),
        pytest.param(
            req(memreq=256, cores=100, vendor=MLU),
            [(1, 256, 0), (1, 256, 0)],
            {Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: 2},
            id="whole-card-needs-an-idle-card",
        ),
        pytest.param(
            req(memreq=256, cores=0, vendor=MLU),
            [(2, 256, 100), (2, 256, 100)],
            {Reason.CARD_COMPUTE_UNITS_EXHAUSTED: 2},
            id="compute-exhausted",
        ),
        pytest.param(
            req(memreq=256, cores=1, vendor=MLU),
            [(100, 256, 1), (100, 256, 1)],
            {Reason.CARD_TIME_SLICING_EXHAUSTED: 2},
            id="slots",
        ),
    ],
)
def test_fit_reasons(
    mlu: CambriconVendor, request_: ContainerRequest, usage: list[tuple[int, int, int]], counts: dict[Reason, int]
) -> None:
    outcome = mlu.fit(_table(*usage), request_, ctx(), mlu.selector({}))
    assert isinstance(outcome, Unfit)
    assert dict(outcome.counts) == counts


def test_fit_is_quota_aware(mlu: CambriconVendor) -> None:
    seen: list[tuple[int, int, str]] = []

    def quota(accepted: Any, mem: int, cores: int, uuid: str) -> bool:
        seen.append((mem, cores, uuid))
        return uuid.endswith("-1")

    outcome = mlu.fit(_table(), req(memreq=1024, cores=20, vendor=MLU), ctx(quota=quota), mlu.selector({}))
    assert isinstance(outcome, Fitted)
    assert [p.device.uuid for p in outcome.placements] == ["n-cambricon-mlu-1"]
    assert (1024, 20, "n-cambricon-mlu-0") in seen
    refused = mlu.fit(_table(), req(memreq=1024, cores=20, vendor=MLU), ctx(quota=lambda *_: False), mlu.selector({}))
    assert isinstance(refused, Unfit)
    assert dict(refused.counts) == {Reason.RESOURCE_QUOTA_NOT_FIT: 2}


def test_fit_uuid_filter(mlu: CambriconVendor) -> None:
    sel = mlu.selector({"cambricon.com/nouse-gpuuuid": "n-cambricon-mlu-0"})
    outcome = mlu.fit(_table(), req(memreq=256, cores=1, vendor=MLU), ctx("binpack"), sel)
    assert isinstance(outcome, Fitted)
    assert outcome.placements[0].device.uuid == "n-cambricon-mlu-1"


# --- annotations: byte for byte as HAMi's PatchAnnotations ------------------------------------------------------------


def _actx(devices: PodDevices, node: str = "n") -> AnnotationContext:
    return AnnotationContext(node=node, devices=devices, slices=(), containers=("a", "b")[: len(devices)], now_ns=7)


def test_allocation_and_profile_match_hamis_test(mlu: CambriconVendor) -> None:
    # HAMi's Test_PatchAnnotations "exist device": index 0, 1 core unit, 256000 MiB → profile 0_1_1000.
    devices: PodDevices = ((ContainerDevice("n-cambricon-mlu-0", MLU, 256000, 1),),)
    assert mlu.encode(devices) == "n-cambricon-mlu-0,MLU,256000,1:;"
    assert mlu.extra_annotations(_actx(devices)) == {DSMLU_ASSIGNED: "false", DSMLU_PROFILE: "0_1_1000"}


def test_profile_comes_from_the_first_container_with_an_mlu(mlu: CambriconVendor) -> None:
    devices: PodDevices = (
        (),
        (ContainerDevice("n-cambricon-mlu-3", MLU, 1000, 25), ContainerDevice("n-cambricon-mlu-1", MLU, 1000, 25)),
    )
    assert mlu.encode(devices) == ";n-cambricon-mlu-3,MLU,1000,25:n-cambricon-mlu-1,MLU,1000,25:;"
    # 1000 MiB is 3 whole units of 256 MiB (Go's integer division).
    assert mlu.extra_annotations(_actx(devices)) == {DSMLU_ASSIGNED: "false", DSMLU_PROFILE: "3_25_3"}
    assert mlu.extra_annotations(_actx(((), ()))) == {}


def test_decode_reads_back_what_it_wrote(mlu: CambriconVendor) -> None:
    devices: PodDevices = ((), (ContainerDevice("n-cambricon-mlu-0", MLU, 2048, 30),))
    assert mlu.decode(mlu.encode(devices), TO_ALLOCATE) == devices


# --- a whole decision through the ledger --------------------------------------------------------------------------


def test_a_pod_is_placed_annotated_charged_and_read_back() -> None:
    s = ClusterState(vendors())
    s.upsert_node(_capacity("mlu-1", 200, 192))
    s.nodes["mlu-1"].tables[MLU].charge(0, 1, 1024, 10)  # spread (the default) then prefers the idle card 1
    p = pod([container({COUNT: 1, MEM: 8, CORES: 30})], uid="u-1")
    request = prefilter(p, s.vendors, SchedulingDefaults())
    decision = decide(s, request, ["mlu-1"], 1_700_000_000)
    value = "mlu-1-cambricon-mlu-1,MLU,2048,30:;"
    assert decision.annotations == {
        keys.VGPU_NODE: "mlu-1",
        keys.VGPU_TIME: "1700000000",
        TO_ALLOCATE: value,
        ALLOCATED: value,
        DSMLU_ASSIGNED: "false",
        DSMLU_PROFILE: "1_30_8",
    }
    record = reserve(s, request, decision)
    assert record is not None
    assert s.nodes["mlu-1"].tables[MLU].usage_of(1) == (1, 2048, 30, ())
    assert s.nodes["mlu-1"].tables[MLU].usage_of(0) == (1, 1024, 10, ())
    placed = pod([container({COUNT: 1, MEM: 8, CORES: 30})], uid="u-1", annotations=decision.annotations)
    again = record_from_pod(placed, s.vendors)
    assert again is not None
    assert again.charges == record.charges


@pytest.mark.parametrize(("units", "fits"), [(16, True), (17, False)])
def test_the_memory_quota_counts_256_MiB_units(units: int, fits: bool) -> None:
    s = ClusterState(vendors())
    s.upsert_node(_capacity("mlu-1", 100, 96))
    s.quotas.upsert(resource_quota("default", "mlu", {f"limits.{MEM}": 16}))  # 16 units: 4096 MiB
    request = prefilter(pod([container({COUNT: 1, MEM: units})]), s.vendors, SchedulingDefaults())
    decision = decide(s, request, ["mlu-1"], 1_700_000_000)
    assert (decision.node == "mlu-1") is fits
    if not fits:
        assert dict(decision.rejected["mlu-1"].counts) == {Reason.RESOURCE_QUOTA_NOT_FIT: 1}
