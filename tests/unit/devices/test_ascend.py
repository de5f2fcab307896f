"""Huawei Ascend: one vendor per chip config (webhook-bind-plugin-vendors.md §7 "Ascend details", vendors-appendix.md).

Table tests: inventory decoding (case-insensitive keys, NetworkID, the node's soft-split opt-in, malformed values
quarantining the node), units and template rounding, every fit reason, template and super-pod choices, NetworkID
grouping and score, annotations byte for byte, and the webhook's rewrites and denials through the real
admission decision.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from hami.config import default_device_config
from hami.devices import registered_keys, vendors_from_config
from hami.devices.admission import ContainerEdit, PodContext
from hami.devices.ascend import (
    NODE_OPT_IN,
    AscendVendor,
    ascend_keys,
    ascend_vendors,
    trim_memory,
)
from hami.devices.ascend.config import VnpuChipConfig, VnpusConfig, default_vnpu_chips
from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    AnnotationContext,
    Carved,
    ContainerRequest,
    FitContext,
    Fitted,
    Placement,
    Slice,
    SliceAt,
    Unfit,
)
from hami.devices.policy import parse_gpu_policy
from hami.errors import AnnotationError, ConfigError, QuantityError
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Container, Node, ObjectMeta, Pod, QuantityValue, ResourceQuota, ResourceQuotaSpec
from hami.protocol.reasons import Reason
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.decide import decide
from hami.scheduling.quota import QuotaBook
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from tests.unit.jsonpatch import apply_patch
from tests.unit.scheduling.builders import table

CHIPS = {chip.common_word: chip for chip in default_vnpu_chips()}
B3, C, P = "Ascend910B3", "Ascend910C", "Ascend310P"
B3_COUNT, B3_MEM, B3_CORE = "huawei.com/Ascend910B3", "huawei.com/Ascend910B3-memory", "huawei.com/Ascend910B3-core"
C_COUNT = "huawei.com/Ascend910C"
FIELD = "containers[0](c)"


def chip(word: str, **changes: Any) -> VnpuChipConfig:
    return CHIPS[word].model_copy(update=changes)


def vendor(word: str = B3, *, soft_default: bool = False, **changes: Any) -> AscendVendor:
    return AscendVendor(chip(word, **changes), soft_default, [c.resource_name for c in CHIPS.values()])


def npu(uuid: str, *, index: int = 0, count: int = 4, devmem: int = 65536, devcore: int = 20) -> DeviceInfo:
    return DeviceInfo(id=uuid, index=index, count=count, devmem=devmem, devcore=devcore, type=B3, health=True)


def npus(n: int, **kwargs: Any) -> tuple[DeviceInfo, ...]:
    return tuple(npu(f"npu-{i}", index=i, **kwargs) for i in range(n))


def ctr(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> Container:
    return msgspec.convert({"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}, Container)


def node(annotations: dict[str, str], name: str = "n1") -> Node:
    return msgspec.convert({"metadata": {"name": name, "annotations": annotations}}, Node)


def fit_ctx(policy: str = "spread", node_info: dict[str, str] | None = None) -> FitContext:
    return FitContext(parse_gpu_policy(policy, False), node_info=node_info or {})


def request(nums: int = 1, memreq: int = 0, cores: int = 0, word: str = B3) -> ContainerRequest:
    return ContainerRequest(word, nums, memreq, 100 if memreq == 0 else MEM_PERCENTAGE_UNSET, cores)


# --- identity: one vendor per chip -----------------------------------------------------------------------------


@pytest.mark.parametrize("word", sorted(CHIPS))
def test_every_chip_is_a_vendor_with_hamis_keys(word: str) -> None:
    v = vendors_from_config(default_device_config())[word]
    assert isinstance(v, AscendVendor)
    k = v.keys
    assert (k.register, k.handshake, k.to_allocate, k.allocated) == (
        f"hami.io/node-register-{word}",
        f"hami.io/node-handshake-{word}",
        f"hami.io/{word}-devices-to-allocate",
        f"hami.io/{word}-devices-allocated",
    )
    assert (k.extra, k.lock) == ((f"huawei.com/{word}", "predicate-time"), "hami.io/mutex.lock")
    assert (v.resources.count, v.resources.memory, v.resources.core) == (
        f"huawei.com/{word}",
        f"huawei.com/{word}-memory",
        f"huawei.com/{word}-core",
    )


def test_their_keys_are_registered_for_the_node_agent() -> None:
    registered = {k.vendor: k for k in registered_keys()}
    assert all(registered[word].allocated == f"hami.io/{word}-devices-allocated" for word in CHIPS)


def test_the_seven_chips_of_the_chart_are_registered() -> None:
    names = [n for n, v in vendors_from_config(default_device_config()).items() if isinstance(v, AscendVendor)]
    expected = ["Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4-1", "Ascend910B4", "Ascend310P", "Ascend910C"]
    assert names == expected


def test_a_repeated_common_word_is_a_config_error() -> None:
    twice = VnpusConfig(configs=(CHIPS[B3], CHIPS[B3]))
    with pytest.raises(ConfigError) as info:
        ascend_vendors(twice)
    assert info.value.field == "vnpus.configs[1].commonWord"


# --- units: template rounding --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "mib", "expected"),
    [
        pytest.param(B3, 1, (16384, "vir05_1c_16g"), id="910B3-smallest-template"),
        pytest.param(B3, 16384, (16384, "vir05_1c_16g"), id="910B3-exact-template"),
        pytest.param(B3, 16385, (32768, "vir10_3c_32g"), id="910B3-next-template"),
        pytest.param(B3, 32769, (65536, ""), id="910B3-above-templates-is-allocatable"),
        pytest.param(B3, 65536, (65536, ""), id="910B3-capacity"),
        pytest.param(B3, 65537, (0, ""), id="910B3-beyond-capacity-invalid"),
        pytest.param(P, 12289, (21527, ""), id="310P-allocatable-below-capacity"),
        pytest.param(P, 24576, (21527, ""), id="310P-capacity-gives-allocatable"),
        pytest.param(P, 24577, (0, ""), id="310P-beyond-capacity"),
        pytest.param("Ascend910A", 3000, (4369, "vir04"), id="910A-templates-sorted-by-memory"),
    ],
)
def test_trim_memory(word: str, mib: int, expected: tuple[int, str]) -> None:
    v = vendor(word)
    assert trim_memory(v.chip, v.templates, mib) == expected


@pytest.mark.parametrize(
    ("limits", "requests", "changes", "expected"),
    [
        pytest.param({B3_COUNT: 1}, {}, {}, request(1, 0), id="count-only-is-a-whole-card"),
        pytest.param({B3_COUNT: 1, B3_MEM: 3000}, {}, {}, request(1, 16384), id="memory-rounded-to-template"),
        pytest.param({B3_COUNT: 2, B3_MEM: 65536}, {}, {}, request(2, 65536), id="whole-cards"),
        pytest.param({B3_COUNT: 1, B3_MEM: 3000, B3_CORE: 30}, {}, {}, request(1, 3000, 30), id="core-keeps-memory"),
        pytest.param({}, {B3_COUNT: 1, B3_MEM: 20000}, {}, request(1, 32768), id="requests-fallback"),
        pytest.param({B3_COUNT: 1, B3_MEM: 8000}, {}, {"memory_factor": 2}, request(1, 16384), id="memory-factor"),
        pytest.param({B3_COUNT: 0}, {}, {}, None, id="zero-count-no-request"),
        pytest.param({B3_MEM: 3000}, {}, {}, None, id="no-count-no-request"),
    ],
)
def test_parse_request(
    limits: dict[str, Any], requests: dict[str, Any], changes: dict[str, Any], expected: ContainerRequest | None
) -> None:
    assert vendor(**changes).parse_request(ctr(limits, requests), FIELD) == expected


@pytest.mark.parametrize(
    ("limits", "resource", "reason"),
    [
        pytest.param({B3_COUNT: -1}, B3_COUNT, "must not be negative", id="negative-count"),
        pytest.param({B3_COUNT: "1.5"}, B3_COUNT, "must be a whole number", id="fractional-count"),
        pytest.param(
            {B3_COUNT: 1, B3_MEM: 70000},
            B3_MEM,
            "exceeds the chip's memoryCapacity of 65536 MiB",
            id="memory-beyond-capacity",
        ),
        pytest.param(
            {B3_COUNT: 1, B3_MEM: "16Gi"},
            B3_MEM,
            "exceeds the chip's memoryCapacity of 65536 MiB; it counts MiB: did you mean 16384?",
            id="bytes-instead-of-mib",
        ),
        pytest.param(
            {B3_COUNT: 1, B3_CORE: 101},
            B3_CORE,
            "cores are a percentage of one NPU and cannot exceed 100",
            id="cores-over-100",
        ),
    ],
)
def test_parse_request_refuses(limits: dict[str, Any], resource: str, reason: str) -> None:
    with pytest.raises(QuantityError) as info:
        vendor().parse_request(ctr(limits), FIELD)
    assert (info.value.field, info.value.reason) == (f"{FIELD}.limits[{resource}]", reason)


# --- inventory -----------------------------------------------------------------------------------------------

KEYS_B3 = ascend_keys(B3)
REGISTER = KEYS_B3.register


def test_decode_inventory_matches_keys_case_insensitively_and_keeps_network_ids() -> None:
    raw = json.dumps(
        [
            {"ID": "npu-0", "Index": 0, "Count": 4, "Devmem": 65536, "Devcore": 20, "Type": B3, "Health": True,
             "CustomInfo": {"NetworkID": 7}},
            {"id": "npu-1", "index": 1, "count": 4, "devmem": 65536, "devcore": 20, "type": B3, "health": True,
             "custominfo": {"NetworkID": "x"}},
            {"id": "npu-2", "index": 2, "count": 4, "devmem": 65536, "devcore": 20, "type": B3, "health": True},
        ]
    )  # fmt: skip
    inv = vendor().decode_inventory(node({REGISTER: raw}))
    assert inv is not None
    assert inv.devices == (npu("npu-0"), npu("npu-1", index=1), npu("npu-2", index=2))
    assert dict(inv.node_info) == {"NetworkID/npu-0": "7", "NetworkID/npu-1": "", NODE_OPT_IN: "false"}


def test_the_last_spelling_of_a_key_wins_as_in_go() -> None:
    inv = vendor().decode_inventory(node({REGISTER: '[{"id":"a","ID":"b","count":1,"health":true}]'}))
    assert inv is not None
    assert inv.devices[0].id == "b"


@pytest.mark.parametrize(
    ("global_default", "annotation", "expected"),
    [
        pytest.param(False, None, "false", id="global-off"),
        pytest.param(True, None, "true", id="global-on"),
        pytest.param(False, "true", "true", id="node-opts-in"),
        pytest.param(True, "false", "false", id="node-opts-out-over-global"),
        pytest.param(True, "yes", "false", id="only-true-opts-in"),
    ],
)
def test_node_soft_split_opt_in(global_default: bool, annotation: str | None, expected: str) -> None:
    annotations = {REGISTER: '[{"id":"npu-0","count":1,"health":true}]'}
    if annotation is not None:
        annotations[NODE_OPT_IN] = annotation
    inv = vendor(soft_default=global_default).decode_inventory(node(annotations))
    assert inv is not None
    assert inv.node_info[NODE_OPT_IN] == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        pytest.param("[{", "invalid JSON", id="truncated"),
        pytest.param('{"id":"a"}', "invalid JSON value", id="not-an-array"),
        pytest.param('["a"]', "each device must be an object", id="item-not-object"),
        pytest.param('[{"id":"a","custominfo":[1]}]', "custominfo must be an object", id="custominfo-not-object"),
        pytest.param('[{"id":"a","Count":"4"}]', "invalid JSON value", id="count-a-string"),
        pytest.param('[{"id":"a","devmem":4294967296}]', "2147483647", id="devmem-over-int32"),
        pytest.param("[]", "no device found on node", id="no-device"),
    ],
)
def test_a_malformed_registration_is_refused(raw: str, reason: str) -> None:
    with pytest.raises(AnnotationError) as info:
        vendor().decode_inventory(node({REGISTER: raw}))
    assert info.value.field == REGISTER
    assert reason in info.value.reason


def test_a_malformed_registration_quarantines_only_that_chip_on_the_node() -> None:
    state = ClusterState(vendors_from_config(default_device_config()))
    good = '[{"id":"c-0","index":0,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910C","health":true}]'
    ns = state.upsert_node(node({REGISTER: "[{broken", ascend_keys(C).register: good}))
    assert B3 in ns.problems
    assert REGISTER in ns.problems[B3]
    assert B3 not in ns.tables
    assert C in ns.tables
    assert state.upsert_node(node({}, name="n2")).problems == {}


def test_no_registration_means_no_inventory() -> None:
    assert vendor().decode_inventory(node({})) is None


# --- fit -----------------------------------------------------------------------------------------------------


def test_a_template_request_carves_a_slice() -> None:
    v = vendor()
    outcome = v.fit(table(*npus(2), vendor=B3), request(1, 16384), fit_ctx(), v.selector({}))
    assert isinstance(outcome, Fitted)
    (p,) = outcome.placements
    assert p.slice == Slice("vir05_1c_16g")
    assert p.device.usedmem == 16384
    assert p.device.usedcores == 0


def test_the_partition_hook_plans_one_template_per_card_and_container() -> None:
    hook = vendor().partitions
    assert hook is not None
    card = npu("npu-0")
    assert (hook.carves(card), hook.several_per_device((card,), vendor().selector({}))) == (True, False)
    assert hook.plan(card, (), [1]) == [Carved(Slice("vir05_1c_16g"), 16384, 0)]
    assert hook.plan(card, (), [16385]) == [Carved(Slice("vir10_3c_32g"), 32768, 0)]
    assert hook.plan(card, (), [32769]) is None  # above every template: a whole card, not a slice
    assert hook.plan(card, (), [1, 1]) is None  # one template per card and container
    assert hook.conflict(card, (None,), "ns/p") is None  # no positions to contradict
    assert hook.infeasible is Reason.CARD_INSUFFICIENT_MEMORY


def test_a_raw_size_is_charged_at_its_template_in_template_mode() -> None:
    v = vendor()
    outcome = v.fit(table(npu("npu-0"), vendor=B3), request(1, 20000), fit_ctx(), v.selector({}))
    assert isinstance(outcome, Fitted)
    assert outcome.placements[0].device == ContainerDevice("npu-0", B3, 32768, 0)
    assert outcome.placements[0].slice == Slice("vir10_3c_32g")


def test_a_whole_card_is_not_a_slice() -> None:
    v = vendor()
    outcome = v.fit(table(npu("npu-0"), vendor=B3), request(1, 65536), fit_ctx(), v.selector({}))
    assert outcome == Fitted((Placement(0, ContainerDevice("npu-0", B3, 65536, 0)),))


SOFT = {"huawei.com/vnpu-mode": "hami-core"}


def test_soft_split_needs_the_node_opt_in() -> None:
    v = vendor()
    t = table(*npus(3), vendor=B3)
    refused = v.fit(t, request(1, 3000, 30), fit_ctx(node_info={NODE_OPT_IN: "false"}), v.selector(SOFT))
    assert refused == Unfit({Reason.MODE_NOT_FIT: 1}, 3)
    assert v.fit(t, request(1, 3000, 30), fit_ctx(), v.selector(SOFT)) == refused


def test_soft_split_counts_cores_in_percent_of_a_card_and_keeps_memory_raw() -> None:
    v = vendor()
    t = table(npu("npu-0", devcore=20), vendor=B3, usage={0: (1, 1000, 40)})
    outcome = v.fit(t, request(1, 3000, 60), fit_ctx(node_info={NODE_OPT_IN: "true"}), v.selector(SOFT))
    assert outcome == Fitted((Placement(0, ContainerDevice("npu-0", B3, 3000, 60)),))
    over = v.fit(t, request(1, 3000, 61), fit_ctx(node_info={NODE_OPT_IN: "true"}), v.selector(SOFT))
    assert isinstance(over, Unfit)
    assert dict(over.counts) == {Reason.CARD_INSUFFICIENT_CORE: 1}


@pytest.mark.parametrize(
    ("devices", "usage", "req", "annotations", "counts"),
    [
        pytest.param(
            (npu("npu-0", devmem=32768),), {}, request(1, 65536), {}, {Reason.CARD_INSUFFICIENT_MEMORY: 1},
            id="insufficient-memory",
        ),
        pytest.param(
            (npu("npu-0", count=1),), {0: (1, 16384, 0)}, request(1, 16384), {},
            {Reason.CARD_TIME_SLICING_EXHAUSTED: 1}, id="time-slicing-exhausted",
        ),
        pytest.param(
            npus(2), {}, request(1, 16384), {"hami.io/use-Ascend910B3-uuid": "npu-9"},
            {Reason.CARD_UUID_MISMATCH: 2}, id="uuid-mismatch",
        ),
        pytest.param(
            npus(2), {}, request(1, 16384), {"hami.io/no-use-Ascend910B3-uuid": "npu-0,npu-1"},
            {Reason.CARD_UUID_MISMATCH: 2}, id="uuid-excluded",
        ),
        pytest.param(
            (DeviceInfo(id="npu-0", count=4, devmem=65536, devcore=20, health=False),), {}, request(1, 16384), {},
            {Reason.CARD_NOT_HEALTH: 1}, id="unhealthy",
        ),
        pytest.param(
            npus(2), {0: (1, 16384, 0)}, request(3, 65536), {}, {Reason.NODE_INSUFFICIENT_DEVICE: 2},
            id="fewer-cards-than-asked",
        ),
        pytest.param(
            npus(2), {0: (1, 16384, 0)}, request(2, 65536), {},
            {Reason.CARD_INSUFFICIENT_MEMORY: 1, Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1},
            id="allocated-cards-insufficient",
        ),
    ],
)  # fmt: skip
def test_fit_reasons(
    devices: tuple[DeviceInfo, ...],
    usage: dict[int, tuple[int, int, int]],
    req: ContainerRequest,
    annotations: dict[str, str],
    counts: dict[Reason, int],
) -> None:
    v = vendor()
    outcome = v.fit(table(*devices, vendor=B3, usage=usage), req, fit_ctx(), v.selector(annotations))
    assert isinstance(outcome, Unfit)
    assert dict(outcome.counts) == counts


def c_npu(i: int) -> DeviceInfo:
    return DeviceInfo(id=f"c-{i}", index=i, count=4, devmem=65536, devcore=20, type=C, health=True)


def test_910c_takes_both_npus_of_whole_cards() -> None:
    v = vendor(C)
    # NPU 1 is full, so card 0 (NPUs 0-1) is not whole; cards 1 and 2 are.
    t = table(*(c_npu(i) for i in range(6)), vendor=C, usage={1: (4, 0, 0)})
    outcome = v.fit(t, request(2, 65536, word=C), fit_ctx(), v.selector({}))
    assert isinstance(outcome, Fitted)
    assert sorted(t.infos[p.index].index // 2 for p in outcome.placements) in ([1, 1], [2, 2])
    four = v.fit(t, request(4, 65536, word=C), fit_ctx(), v.selector({}))
    assert isinstance(four, Fitted)
    assert sorted(p.device.uuid for p in four.placements) == ["c-2", "c-3", "c-4", "c-5"]


def test_910c_without_enough_whole_cards_fails() -> None:
    v = vendor(C)
    t = table(*(c_npu(i) for i in range(4)), vendor=C, usage={1: (4, 0, 0), 2: (4, 0, 0)})
    outcome = v.fit(t, request(2, 65536, word=C), fit_ctx(), v.selector({}))
    assert isinstance(outcome, Unfit)
    assert dict(outcome.counts) == {
        Reason.CARD_TIME_SLICING_EXHAUSTED: 2,
        Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 2,
    }


NETWORKS = {"NetworkID/npu-0": "1", "NetworkID/npu-1": "2", "NetworkID/npu-2": "2", "NetworkID/npu-3": "2"}


@pytest.mark.parametrize(
    ("nums", "chosen", "score"),
    [
        pytest.param(1, None, 10.0, id="one-card-scores-full"),
        pytest.param(2, {"npu-1", "npu-2", "npu-3"}, 10.0, id="two-from-the-largest-group"),
        pytest.param(3, {"npu-1", "npu-2", "npu-3"}, 10.0, id="the-whole-largest-group"),
        pytest.param(4, {"npu-0", "npu-1", "npu-2", "npu-3"}, 7.5, id="all-four-three-of-four-share"),
    ],
)
def test_network_id_grouping_and_score(nums: int, chosen: set[str] | None, score: float) -> None:
    v = vendor()
    outcome = v.fit(table(*npus(4), vendor=B3), request(nums, 65536), fit_ctx(node_info=NETWORKS), v.selector({}))
    assert isinstance(outcome, Fitted)
    uuids = {p.device.uuid for p in outcome.placements}
    assert len(uuids) == nums
    if chosen is not None:
        assert uuids <= chosen
    assert outcome.score == score


def test_no_network_score_when_a_device_has_no_network_id_or_the_chip_is_not_a_910() -> None:
    partial = {k: v for k, v in NETWORKS.items() if k != "NetworkID/npu-0"}
    v = vendor()
    outcome = v.fit(table(*npus(4), vendor=B3), request(4, 65536), fit_ctx(node_info=partial), v.selector({}))
    assert isinstance(outcome, Fitted)
    assert outcome.score == 0.0
    p = vendor(P)
    t = table(*npus(2, devmem=21527), vendor=P)
    on_310p = p.fit(t, request(2, 21527, word=P), fit_ctx(node_info=NETWORKS), p.selector({}))
    assert isinstance(on_310p, Fitted)
    assert on_310p.score == 0.0


# --- through the decision core --------------------------------------------------------------------------------


def test_soft_split_through_the_decision_goes_only_to_the_node_that_opted_in() -> None:
    """Node annotations → node_info → fit, and the pod's mode → selector option, through the real filter."""
    state = ClusterState(vendors_from_config(default_device_config()))
    registration = '[{"id":"%s","count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true}]'
    state.upsert_node(node({REGISTER: registration % "hard-0"}, name="hard"))
    state.upsert_node(node({REGISTER: registration % "soft-0", NODE_OPT_IN: "true"}, name="soft"))
    limits = {B3_COUNT: 1, B3_MEM: 3000, B3_CORE: 30}
    raw = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": SOFT},
           "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}  # fmt: skip
    request = prefilter(msgspec.convert(raw, Pod), state.vendors, SchedulingDefaults())
    decision = decide(state, request, ["hard", "soft"], now=1_700_000_000)
    assert decision.node == "soft"
    assert decision.rejected["hard"].summary == "1/1 ModeNotFit"
    assert decision.annotations[KEYS_B3.allocated] == "soft-0,Ascend910B3,3000,30:;"
    assert decision.annotations["huawei.com/Ascend910B3"] == '[{"UUID":"soft-0","memory":3000,"core":30}]'
    assert decision.annotations["predicate-time"] == "1700000000"


# --- annotations ---------------------------------------------------------------------------------------------


def test_allocation_annotations_byte_for_byte() -> None:
    v = vendor()
    devices = ((), (ContainerDevice("npu-0", B3, 16384, 0),), (ContainerDevice("npu-1", B3, 3000, 30),))
    assert v.encode(devices) == ";npu-0,Ascend910B3,16384,0:;npu-1,Ascend910B3,3000,30:;"
    ctx = AnnotationContext(
        node="n1",
        devices=devices,
        slices=(SliceAt(1, 0, "npu-0", Slice("vir05_1c_16g")),),
        containers=("init", "a", "b"),
        now_ns=1_700_000_000_999_999_999,
    )
    assert v.extra_annotations(ctx) == {
        "huawei.com/Ascend910B3": '[{"UUID":"npu-0","temp":"vir05_1c_16g","memory":16384},'
        '{"UUID":"npu-1","memory":3000,"core":30}]',
        "predicate-time": "1700000000",
    }


def test_no_devices_no_extra_annotations() -> None:
    ctx = AnnotationContext(node="n1", devices=((),), slices=(), containers=("a",), now_ns=1)
    assert vendor().extra_annotations(ctx) == {}


def test_the_uuid_in_the_runtime_annotation_is_escaped_as_go_does() -> None:
    ctx = AnnotationContext("n1", ((ContainerDevice("a<b", B3, 65536, 0),),), (), ("a",), 0)
    assert vendor().extra_annotations(ctx)["huawei.com/Ascend910B3"] == '[{"UUID":"a\\u003cb","memory":65536}]'


# --- admission -----------------------------------------------------------------------------------------------


def admission(**changes: Any) -> Admission:
    configs = tuple(c.model_copy(update=changes) for c in default_vnpu_chips())
    vendors: dict[str, Any] = {v.name: v for v in ascend_vendors(VnpusConfig(configs=configs))}
    return Admission(
        vendors=vendors,
        admitters=admitters_for(vendors),
        defaults=SchedulingDefaults(),
        settings=AdmissionSettings("hami-scheduler", True),
    )


def raw_pod(*containers: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "team"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": list(containers)}}


def spec(
    name: str = "c", limits: dict[str, str] | None = None, requests: dict[str, str] | None = None
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "image": "busybox", "resources": resources}


def admitted(pod: dict[str, Any], **changes: Any) -> dict[str, Any]:
    verdict = admission(**changes).review(pod, "team")
    assert verdict.allowed, verdict.message
    patched: dict[str, Any] = apply_patch(pod, list(verdict.patch))
    return patched


def resources(patched: dict[str, Any], i: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = patched["spec"]["containers"][i]["resources"]
    return out


@pytest.mark.parametrize(
    ("limits", "memory"),
    [
        pytest.param({B3_COUNT: "1"}, "65536", id="no-memory-is-allocatable"),
        pytest.param({B3_COUNT: "1", B3_MEM: "3000"}, "16384", id="rounded-up-to-a-template"),
        pytest.param({B3_COUNT: "1", B3_MEM: "40000"}, "65536", id="above-templates-is-allocatable"),
        pytest.param({B3_COUNT: "2", B3_MEM: "65536"}, "65536", id="several-whole-cards"),
    ],
)
def test_webhook_rewrites_memory_limits_and_requests(limits: dict[str, str], memory: str) -> None:
    patched = admitted(raw_pod(spec(limits=limits)))
    assert resources(patched)["limits"][B3_MEM] == memory
    assert resources(patched)["requests"][B3_MEM] == memory
    assert patched["spec"]["schedulerName"] == "hami-scheduler"


def test_webhook_keeps_soft_split_memory_raw() -> None:
    pod = raw_pod(spec(limits={B3_COUNT: "1", B3_MEM: "3000", B3_CORE: "30"}), annotations=SOFT)
    patched = admitted(pod)
    assert resources(patched)["limits"] == {B3_COUNT: "1", B3_MEM: "3000", B3_CORE: "30"}
    assert resources(patched)["requests"] == {B3_MEM: "3000"}


@pytest.mark.parametrize(
    ("limits", "requests", "expected_limits", "expected_requests"),
    [
        pytest.param({C_COUNT: "1"}, None, "2", None, id="one-becomes-two"),
        pytest.param({C_COUNT: "1"}, {C_COUNT: "1"}, "2", "2", id="requests-too"),
        pytest.param({C_COUNT: "4"}, None, "4", None, id="even-unchanged"),
    ],
)
def test_webhook_910c_pairs(
    limits: dict[str, str], requests: dict[str, str] | None, expected_limits: str, expected_requests: str | None
) -> None:
    got = resources(admitted(raw_pod(spec(limits=limits, requests=requests))))
    assert got["limits"][C_COUNT] == expected_limits
    assert got.get("requests", {}).get(C_COUNT) == expected_requests


@pytest.mark.parametrize(
    ("limits", "annotations", "message"),
    [
        pytest.param(
            {C_COUNT: "3"}, None,
            f"{FIELD}.limits[{C_COUNT}]: Ascend910C device request must be 1 or 2*n, got 3",
            id="910c-odd-count",
        ),
        pytest.param(
            {B3_COUNT: "2", B3_MEM: "16384"}, None,
            f"{FIELD}.limits[{B3_COUNT}]: vNPU not supported for multiple devices: a request for several NPUs takes "
            f"whole cards ({B3_MEM} 65536 or none) (got 2)",
            id="template-on-several-devices",
        ),
        pytest.param(
            {B3_COUNT: "1", B3_MEM: "70000"}, None,
            f"{FIELD}.limits[{B3_MEM}]: {B3_MEM} 70000 is invalid: more than the chip's memoryCapacity of 65536 MiB",
            id="memory-beyond-capacity",
        ),
        pytest.param(
            {B3_COUNT: "1", B3_CORE: "20"}, None,
            f"{FIELD}.limits[{B3_CORE}]: {B3_CORE} is only supported in hami-core (soft split) mode: annotate the pod "
            f"huawei.com/vnpu-mode: hami-core, or leave {B3_CORE} out (a template fixes the cores) (got '20')",
            id="core-in-template-mode",
        ),
    ],
)  # fmt: skip
def test_webhook_denials(limits: dict[str, str], annotations: dict[str, str] | None, message: str) -> None:
    verdict = admission().review(raw_pod(spec(limits=limits), annotations=annotations), "team")
    assert (verdict.allowed, verdict.message) == (False, message)


def test_webhook_core_zero_is_allowed_in_template_mode() -> None:
    assert admission().review(raw_pod(spec(limits={B3_COUNT: "1", B3_CORE: "0"})), "team").allowed


def test_webhook_runtime_class_and_env_overwrite() -> None:
    pod = raw_pod(spec("npu", limits={B3_COUNT: "1"}), spec("cpu", limits={"cpu": "1"}))
    patched = admitted(pod, runtime_class_name="ascend", overwrite_env=True)
    assert patched["spec"]["runtimeClassName"] == "ascend"
    npu_env = patched["spec"]["containers"][0].get("env", [])
    cpu_env = patched["spec"]["containers"][1].get("env", [])
    assert npu_env == []  # it asks for an Ascend chip: the device plugin sets its devices
    assert cpu_env == [{"name": "ASCEND_VISIBLE_DEVICES", "value": ""}]


def test_webhook_leaves_a_pod_without_ascend_alone_unless_overwrite_env() -> None:
    pod = raw_pod(spec("cpu", limits={"cpu": "1"}))
    verdict = admission().review(pod, "team")
    assert (verdict.allowed, verdict.patch) == (True, ())


def test_admitter_sees_the_pod_mode_through_the_pod_context() -> None:
    admitter = vendor().admitter()
    container = ctr({B3_COUNT: 1, B3_MEM: 3000, B3_CORE: 30})
    soft, hard = ContainerEdit(), ContainerEdit()
    assert admitter.admit(container, FIELD, soft, PodContext(annotations=SOFT)) is True
    assert soft.limits == {B3_MEM: "3000"}
    assert soft.requests == {B3_MEM: "3000"}
    with pytest.raises(Exception, match="only supported in hami-core"):
        admitter.admit(container, FIELD, hard, PodContext())


def test_quota_keys_are_the_memory_and_core_limits() -> None:
    v = vendor()
    assert (v.resources.memory, v.resources.core, v.resources.memory_factor) == (B3_MEM, B3_CORE, 1)


@pytest.mark.parametrize(
    ("memory", "allowed"),
    [
        pytest.param("3000", True, id="3000-MiB-is-a-16384-template-within-20000"),
        pytest.param("17000", False, id="17000-MiB-is-a-32768-template-over-20000"),
        pytest.param(None, False, id="a-whole-card-over-20000"),
    ],
)
def test_the_quota_counts_the_template_not_the_request(memory: str | None, allowed: bool) -> None:
    configs = default_vnpu_chips()
    vendors: dict[str, Any] = {v.name: v for v in ascend_vendors(VnpusConfig(configs=configs))}
    book = QuotaBook([B3_MEM, B3_CORE])
    hard: dict[str, QuantityValue] = {f"limits.{B3_MEM}": "20000"}
    book.upsert(ResourceQuota(metadata=ObjectMeta(name="q", namespace="team"), spec=ResourceQuotaSpec(hard=hard)))
    check = Admission(
        vendors=vendors,
        admitters=admitters_for(vendors),
        defaults=SchedulingDefaults(),
        settings=AdmissionSettings("hami-scheduler", True),
        quotas=book,
        quota_factors={B3_MEM: 1},
    )
    limits = {B3_COUNT: "1"} | ({B3_MEM: memory} if memory else {})
    verdict = check.review(raw_pod(spec(limits=limits)), "team")
    assert verdict.allowed is allowed
    assert verdict.message.startswith("" if allowed else "exceeding resource quota")
    small = check.review(raw_pod(spec(limits={"huawei.com/Ascend310P": "1"})), "team")
    assert small.allowed  # another chip's memory is another quota key
