"""The Moore Threads vendor (webhook-bind-plugin-vendors.md §7, vendors-appendix.md, HAMi v2.10
``pkg/device/mthreads``): inventory from the node's capacity, the webhook's defaults, rewrites and denials,
requests in 512 MiB units split over the cards, every container on one card, the allocation and its annotations
byte for byte, no lock."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from hami.devices import registered_keys
from hami.devices.admission import ContainerEdit, PodContext
from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    AnnotationContext,
    ContainerRequest,
    Fitted,
    NodeInventory,
    Placement,
    Unfit,
)
from hami.devices.mthreads import (
    GPU_INDEX,
    INVALID_MEMORY,
    MTHREADS,
    MTHREADS_KEYS,
    PREDICATE_NODE,
    PREDICATE_TIME,
    REQUEST_GPU_NUM,
    MthreadsAdmitter,
    MthreadsVendor,
)
from hami.devices.table import DeviceTable
from hami.errors import InvalidInput, QuantityError
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice, PodDevices
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Container, Node
from hami.protocol.reasons import Reason
from hami.scheduling.admission import Admission, AdmissionSettings, Verdict, admitters_for
from hami.scheduling.decide import decide, reserve
from hami.scheduling.records import record_from_pod
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from tests.unit.jsonpatch import apply_patch
from tests.unit.scheduling.builders import container, ctx, pod, req, resource_quota, vendors

COUNT, MEM, CORES = "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"
ALLOCATED = "hami.io/mthreads-vgpu-devices-allocated"
FIELD = "containers[0](c)"
POD = PodContext(name="p", namespace="ns", annotations={})


@pytest.fixture
def mt() -> MthreadsVendor:
    v = vendors()[MTHREADS]
    assert isinstance(v, MthreadsVendor)
    return v


def _capacity(name: str, cores: Any, memory: Any = None) -> Node:
    cap: dict[str, Any] = {CORES: cores}
    if memory is not None:
        cap[MEM] = memory
    return msgspec.convert({"metadata": {"name": name}, "status": {"capacity": cap}}, Node)


def _container(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> Container:
    return msgspec.convert({"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}, Container)


def _card(node: str, i: int, devmem: int = 49152) -> DeviceInfo:
    return DeviceInfo(f"{node}-mthreads-{i}", i, 100, devmem, 16, MTHREADS, 0, health=True)


# --- inventory ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cores", "memory", "cards"),
    [
        # Two MTT S4000 (48 GiB): 2 × 16 core units, 2 × 96 memory units of 512 MiB.
        pytest.param(32, 192, [49152, 49152], id="two-s4000"),
        pytest.param("16", "96", [49152], id="quantities-as-text"),
        pytest.param(24, 96, [32768, 32768], id="partial-card-rounds-up"),
        pytest.param(16, None, [0], id="no-memory-capacity"),
    ],
)
def test_inventory_from_capacity(mt: MthreadsVendor, cores: Any, memory: Any, cards: list[int]) -> None:
    inventory = mt.decode_inventory(_capacity("mt-1", cores, memory))
    assert inventory == NodeInventory(tuple(_card("mt-1", i, m) for i, m in enumerate(cards)))


@pytest.mark.parametrize(
    ("cores", "memory", "field", "reason"),
    [
        pytest.param("x", 96, f"status.capacity[{CORES}]", "", id="not-a-quantity"),
        pytest.param(-16, 96, f"status.capacity[{CORES}]", "must not be negative", id="negative"),
        pytest.param(16, "1.5", f"status.capacity[{MEM}]", "must be a whole number", id="fractional-memory"),
        pytest.param(16 * 1025, 96, f"status.capacity[{CORES}]", "1025 cards of 16 core units", id="too-many"),
        pytest.param(16, 2**22, f"status.capacity[{MEM}]", "beyond the int32 range", id="memory-wraps-int32"),
    ],
)
def test_malformed_capacity_is_refused(mt: MthreadsVendor, cores: Any, memory: Any, field: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as info:
        mt.decode_inventory(_capacity("n", cores, memory))
    assert info.value.field == field
    assert reason in info.value.reason


def test_no_capacity_no_inventory_and_bad_capacity_quarantines(mt: MthreadsVendor) -> None:
    assert mt.decode_inventory(Node()) is None
    assert mt.decode_inventory(_capacity("n", 0, 96)) is None
    s = ClusterState(vendors())
    s.upsert_node(_capacity("bad", "1e100", 96))
    assert MTHREADS not in s.nodes["bad"].tables
    assert f"status.capacity[{CORES}]" in s.nodes["bad"].problems[MTHREADS]


# --- admission: HAMi's MutateAdmission ----------------------------------------------------------------------------


def _admit(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> tuple[bool, ContainerEdit]:
    edit = ContainerEdit()
    found = MthreadsAdmitter(COUNT, MEM, CORES).admit(_container(limits, requests), FIELD, edit, POD)
    return found, edit


@pytest.mark.parametrize(
    ("limits", "requests", "edit"),
    [
        pytest.param({COUNT: 1}, {}, ContainerEdit(limits={CORES: "16", MEM: "96"}), id="one-card-is-a-whole-card"),
        # The appendix: with count 1 and no memory, cores are set to 16 over the user's value (HAMi :115-118).
        pytest.param({COUNT: 1, CORES: 8}, {}, ContainerEdit(limits={CORES: "16", MEM: "96"}), id="cores-overridden"),
        pytest.param({COUNT: 1, MEM: 8}, {}, ContainerEdit(), id="allowed-memory-kept"),
        pytest.param({COUNT: 1, MEM: 96, CORES: 4}, {}, ContainerEdit(), id="memory-and-cores-kept"),
        pytest.param(
            {COUNT: 3, MEM: 8, CORES: 2},
            {},
            ContainerEdit(limits={CORES: "48", MEM: "288"}, annotations={REQUEST_GPU_NUM: "3"}),
            id="several-cards-are-whole-cards",
        ),
        # The count is read from requests too (HAMi :95-98).
        pytest.param({}, {COUNT: 1}, ContainerEdit(limits={CORES: "16", MEM: "96"}), id="count-in-requests"),
        # hami: a request the webhook overrides is set with its limit (the API server wants them equal).
        pytest.param(
            {COUNT: 2},
            {COUNT: 2, MEM: 4},
            ContainerEdit(limits={CORES: "32", MEM: "192"}, requests={MEM: "192"}, annotations={REQUEST_GPU_NUM: "2"}),
            id="requests-follow-the-limits",
        ),
    ],
)
def test_admission_defaults_and_rewrites(limits: dict[str, Any], requests: dict[str, Any], edit: ContainerEdit) -> None:
    assert _admit(limits, requests) == (True, edit)


def test_admission_leaves_other_containers_alone() -> None:
    assert _admit({"nvidia.com/gpu": 1}) == (False, ContainerEdit())


@pytest.mark.parametrize(
    ("limits", "field", "reason"),
    [
        pytest.param({COUNT: 0}, f"{FIELD}.limits[{COUNT}]", "mthreads.com/vgpu must be greater than 0", id="zero"),
        pytest.param({COUNT: -2}, f"{FIELD}.limits[{COUNT}]", "mthreads.com/vgpu must be greater than 0", id="neg"),
        pytest.param({COUNT: "1.5"}, f"{FIELD}.limits[{COUNT}]", "must be a whole number", id="fractional"),
        pytest.param({COUNT: 1, MEM: 10}, f"{FIELD}.limits[{MEM}]", INVALID_MEMORY, id="memory-not-allowed"),
        pytest.param({COUNT: 1, MEM: "48Gi"}, f"{FIELD}.limits[{MEM}]", INVALID_MEMORY, id="memory-in-bytes"),
    ],
)
def test_admission_denials(limits: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(QuantityError) as info:
        _admit(limits)
    assert (info.value.field, info.value.reason) == (field, reason)
    assert INVALID_MEMORY == "sGPU memory request value is invalid, valid values are [2, 4, 8, 16, 32, 64, 96]"


def test_the_vendor_uses_its_admitter(mt: MthreadsVendor) -> None:
    assert mt.admitter() == MthreadsAdmitter(COUNT, MEM, CORES)


# --- requests ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        # What the webhook leaves: whole cards of 96 units and 16 cores, split evenly over the cards.
        pytest.param({COUNT: 2, MEM: 192, CORES: 32}, ContainerRequest(MTHREADS, 2, 49152, 101, 16), id="two-cards"),
        pytest.param({COUNT: 1, MEM: 8, CORES: 4}, ContainerRequest(MTHREADS, 1, 4096, 101, 4), id="slice"),
        pytest.param({COUNT: 1}, ContainerRequest(MTHREADS, 1, 0, 100, 0), id="no-webhook-whole-memory-no-cores"),
        pytest.param({COUNT: 3, MEM: 8}, ContainerRequest(MTHREADS, 3, 1365, 101, 0), id="go-integer-division"),
        pytest.param({COUNT: 0}, None, id="zero-count"),
        pytest.param({MEM: 8}, None, id="no-count"),
    ],
)
def test_parse_request(mt: MthreadsVendor, limits: dict[str, Any], expected: ContainerRequest | None) -> None:
    assert mt.parse_request(_container(limits), FIELD) == expected
    assert MEM_PERCENTAGE_UNSET == 101


@pytest.mark.parametrize(
    ("limits", "field", "reason"),
    [
        pytest.param({COUNT: -1}, f"f.limits[{COUNT}]", "must not be negative", id="negative-count"),
        pytest.param(
            {COUNT: 2, CORES: 40},
            f"f.limits[{CORES}]",
            "a Moore Threads card has 16 core units; 40 over 2 card(s) is 20",
            id="cores-over-a-card",
        ),
        pytest.param(
            {COUNT: 1, MEM: "16Gi"},
            f"f.limits[{MEM}]",
            "exceeds the int32 range HAMi's annotations can carry; it counts 512 MiB units: did you mean 32?",
            id="bytes-instead-of-units",
        ),
        pytest.param(
            {COUNT: 1, MEM: 2**22},
            f"f.limits[{MEM}]",
            "× 512 MiB units exceeds the int32 range HAMi's annotations can carry",
            id="units-overflow",
        ),
    ],
)
def test_parse_request_rejects(mt: MthreadsVendor, limits: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(QuantityError) as info:
        mt.parse_request(_container(limits), "f")
    assert (info.value.field, info.value.reason) == (field, reason)


# --- keys, selector ------------------------------------------------------------------------------------------------


def test_keys_and_resources(mt: MthreadsVendor) -> None:
    k = mt.keys
    assert (mt.name, k) == (MTHREADS, MTHREADS_KEYS)
    assert (k.register, k.handshake, k.to_allocate, k.allocated, k.lock) == ("", None, None, ALLOCATED, None)
    assert k.extra == ("mthreads.com/gpu-index", "mthreads.com/predicate-time", "mthreads.com/predicate-node")
    r = mt.resources
    assert (r.count, r.memory, r.core, r.memory_factor) == (COUNT, MEM, CORES, 512)
    assert MTHREADS_KEYS in registered_keys()


def test_selector_uses_the_ai_domain(mt: MthreadsVendor) -> None:
    sel = mt.selector({"mthreads.ai/use-gpuuuid": "n-mthreads-1", "mthreads.com/nouse-gpuuuid": "n-mthreads-1"})
    assert (sel.uuid_ok("n-mthreads-0"), sel.uuid_ok("n-mthreads-1")) == (False, True)
    assert mt.selector({"mthreads.ai/nouse-gpuuuid": "n-mthreads-1"}).uuid_ok("n-mthreads-1") is False


# --- fit: every container of a pod on the same card -----------------------------------------------------------------


def _table(*usage: tuple[int, int, int]) -> DeviceTable:
    t = DeviceTable(MTHREADS, (_card("n", 0), _card("n", 1)))
    for i, (slots, mem, cores) in enumerate(usage):
        t.charge(i, slots, mem, cores)
    return t


def _chosen(uuid: str, index: int) -> tuple[tuple[Placement, ...], ...]:
    return ((Placement(index, ContainerDevice(uuid, MTHREADS, 4096, 4)),),)


def test_first_container_takes_any_card(mt: MthreadsVendor) -> None:
    outcome = mt.fit(_table(), req(memreq=4096, cores=4, vendor=MTHREADS), ctx("binpack"), mt.selector({}))
    assert isinstance(outcome, Fitted)
    assert [p.device for p in outcome.placements] == [ContainerDevice("n-mthreads-0", MTHREADS, 4096, 4)]


def test_later_containers_follow_the_first_card(mt: MthreadsVendor) -> None:
    c = ctx("binpack")
    c.chosen = _chosen("n-mthreads-1", 1)
    outcome = mt.fit(_table(), req(memreq=4096, cores=4, vendor=MTHREADS), c, mt.selector({}))
    assert isinstance(outcome, Fitted)
    assert [p.device.uuid for p in outcome.placements] == ["n-mthreads-1"]


def test_another_card_counts_the_custom_filter_rule(mt: MthreadsVendor) -> None:
    c = ctx()
    c.chosen = _chosen("n-mthreads-1", 1)
    # Card 1 (the pod's card) is out of memory; card 0 would fit but is another card.
    outcome = mt.fit(_table((0, 0, 0), (1, 49152, 4)), req(memreq=4096, cores=4, vendor=MTHREADS), c, mt.selector({}))
    assert isinstance(outcome, Unfit)
    assert dict(outcome.counts) == {Reason.CARD_INSUFFICIENT_MEMORY: 1, Reason.CARD_NOT_FOUND_CUSTOM_FILTER_RULE: 1}


def test_a_second_container_cannot_follow_a_two_card_container(mt: MthreadsVendor) -> None:
    c = ctx()
    c.chosen = (
        (
            Placement(0, ContainerDevice("n-mthreads-0", MTHREADS, 4096, 4)),
            Placement(1, ContainerDevice("n-mthreads-1", MTHREADS, 4096, 4)),
        ),
    )
    outcome = mt.fit(_table(), req(memreq=4096, cores=4, vendor=MTHREADS), c, mt.selector({}))
    assert isinstance(outcome, Unfit)
    assert dict(outcome.counts) == {Reason.CARD_NOT_FOUND_CUSTOM_FILTER_RULE: 2}


# --- annotations -------------------------------------------------------------------------------------------------


def test_allocation_and_extra_annotations(mt: MthreadsVendor) -> None:
    devices: PodDevices = (
        (ContainerDevice("n-mthreads-1", MTHREADS, 4096, 4),),
        (),
        (ContainerDevice("n-mthreads-1", MTHREADS, 8192, 8), ContainerDevice("n-mthreads-0", MTHREADS, 8192, 8)),
        (),
    )
    assert mt.encode(devices) == (
        "n-mthreads-1,Mthreads,4096,4:;;n-mthreads-1,Mthreads,8192,8:n-mthreads-0,Mthreads,8192,8:;;"
    )
    assert mt.decode(mt.encode(devices), ALLOCATED) == devices
    actx = AnnotationContext(node="n", devices=devices, slices=(), containers=("a", "b", "c", "d"), now_ns=12345)
    # gpu-index comes from the last container that has cards (HAMi :159-172).
    assert mt.extra_annotations(actx) == {GPU_INDEX: "1,0", PREDICATE_TIME: "12345", PREDICATE_NODE: "n"}
    empty = AnnotationContext(node="n", devices=((),), slices=(), containers=("a",), now_ns=1)
    assert mt.extra_annotations(empty) == {}


def test_a_two_container_pod_shares_one_card_through_the_ledger() -> None:
    s = ClusterState(vendors())
    s.upsert_node(_capacity("mt-1", 32, 192))
    s.nodes["mt-1"].tables[MTHREADS].charge(0, 1, 45056, 12)  # card 0 has room for one slice: 4096 MiB, 4 cores
    spec = [container({COUNT: 1, MEM: 8, CORES: 4}, name="a"), container({COUNT: 1, MEM: 8, CORES: 4}, name="b")]
    p = pod(spec, uid="u-1")
    request = prefilter(p, s.vendors, SchedulingDefaults())
    decision = decide(s, request, ["mt-1"], 1_700_000_000)
    # spread (the default) puts container a on the idle card 1, and b follows it although card 0 has room for b.
    assert decision.node == "mt-1"
    value = "mt-1-mthreads-1,Mthreads,4096,4:;mt-1-mthreads-1,Mthreads,4096,4:;"
    assert decision.annotations[ALLOCATED] == value
    assert decision.annotations[GPU_INDEX] == "1"
    assert decision.annotations[PREDICATE_NODE] == "mt-1" == decision.annotations[keys.VGPU_NODE]
    assert int(decision.annotations[PREDICATE_TIME]) // 10**9 == int(decision.annotations[keys.VGPU_TIME])
    assert "hami.io/mthreads-vgpu-devices-to-allocate" not in decision.annotations
    record = reserve(s, request, decision)
    assert record is not None
    placed = pod(spec, uid="u-1", annotations=decision.annotations)
    again = record_from_pod(placed, s.vendors)
    assert again is not None
    assert again.charges == record.charges
    assert s.nodes["mt-1"].tables[MTHREADS].usage_of(1) == (2, 8192, 8, ())


def test_the_same_card_rule_is_greedy_per_container_as_in_hami() -> None:
    s = ClusterState(vendors())
    s.upsert_node(_capacity("mt-1", 32, 192))
    s.nodes["mt-1"].tables[MTHREADS].charge(0, 1, 45056, 12)
    spec = [container({COUNT: 1, MEM: 8, CORES: 4}, name="a"), container({COUNT: 1, MEM: 8, CORES: 4}, name="b")]
    annotations = {keys.GPU_SCHEDULER_POLICY: "binpack"}
    request = prefilter(pod(spec, annotations=annotations), s.vendors, SchedulingDefaults())
    decision = decide(s, request, ["mt-1"], 1_700_000_000)
    # binpack puts a on the busy card 0, filling it; b may only use card 0 and finds no room there.
    assert decision.node is None
    counts = dict(decision.rejected["mt-1"].counts)
    assert counts == {Reason.CARD_INSUFFICIENT_MEMORY: 1, Reason.CARD_NOT_FOUND_CUSTOM_FILTER_RULE: 1}


# --- through the webhook -------------------------------------------------------------------------------------------


def _review(limits: dict[str, Any], requests: dict[str, Any] | None = None) -> tuple[Verdict, dict[str, Any]]:
    vs = vendors()
    admission = Admission(vs, admitters_for(vs), SchedulingDefaults(), AdmissionSettings())
    resources: dict[str, Any] = {"limits": limits}
    if requests is not None:
        resources["requests"] = requests
    spec = {"containers": [{"name": "c", "resources": resources}]}
    raw = {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}
    verdict = admission.review(raw, "ns")
    return verdict, apply_patch(raw, list(verdict.patch))


def test_webhook_rewrites_a_multi_card_pod() -> None:
    verdict, patched = _review({COUNT: "2", MEM: "8"}, {COUNT: "2", MEM: "8"})
    assert verdict.allowed
    assert patched["spec"]["schedulerName"] == "hami-scheduler"
    assert patched["metadata"]["annotations"] == {REQUEST_GPU_NUM: "2"}
    resources = patched["spec"]["containers"][0]["resources"]
    assert resources == {
        "limits": {COUNT: "2", MEM: "192", CORES: "32"},
        "requests": {COUNT: "2", MEM: "192"},
    }


def test_webhook_denies_with_hamis_messages() -> None:
    verdict, _ = _review({COUNT: "0"})
    assert (verdict.allowed, verdict.message) == (
        False,
        "containers[0](c).limits[mthreads.com/vgpu]: mthreads.com/vgpu must be greater than 0 (got '0')",
    )
    verdict, _ = _review({COUNT: "1", MEM: "3"})
    assert not verdict.allowed
    assert verdict.message.startswith(f"containers[0](c).limits[{MEM}]: {INVALID_MEMORY}")


@pytest.mark.parametrize(("units", "fits"), [(8, True), (16, False)])
def test_the_memory_quota_counts_512_MiB_units(units: int, fits: bool) -> None:
    s = ClusterState(vendors())
    s.upsert_node(_capacity("mt-1", 16, 96))
    s.quotas.upsert(resource_quota("default", "mt", {f"limits.{MEM}": 8}))  # 8 units: 4096 MiB
    request = prefilter(pod([container({COUNT: 1, MEM: units})]), s.vendors, SchedulingDefaults())
    decision = decide(s, request, ["mt-1"], 1_700_000_000)
    assert (decision.node == "mt-1") is fits
    if not fits:
        assert dict(decision.rejected["mt-1"].counts) == {Reason.RESOURCE_QUOTA_NOT_FIT: 1}


def test_the_capacity_screen_speaks_for_the_first_container_only(mt: MthreadsVendor) -> None:
    request, sel = req(memreq=4096, cores=4, vendor=MTHREADS), mt.selector({})
    screen = mt.screener(request, ctx(), sel)
    assert screen is not None
    # It answers as fit does: room on an idle card, none when both cards are full.
    assert screen(_table(), False) is True
    assert isinstance(mt.fit(_table(), request, ctx(), sel), Fitted)
    full = _table((1, 49152, 4), (1, 49152, 4))
    assert screen(full, False) is not True
    assert isinstance(mt.fit(full, request, ctx(), sel), Unfit)
    later = ctx()
    later.chosen = _chosen("n-mthreads-1", 1)
    assert mt.screener(request, later, sel) is None
