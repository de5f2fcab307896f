"""Enflame whole GCUs (``GCU``) and DRS vGCU profiles (``Enflame``), from webhook-bind-plugin-vendors.md §7 and
HAMi v2.10.0 ``pkg/device/enflame``: inventory (capacity and the DRS capacity annotation, malformed values
quarantined), profile choice (direct and spec mode, MiB guess), every Fit reason, the annotations byte for byte
through the real decision cycle, and the webhook's mirroring and denials."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from hami.config import default_device_config
from hami.devices import registered_keys, vendors_from_config
from hami.devices.base import ContainerRequest, FitContext, Fitted, NodeInventory, Selector, Unfit
from hami.devices.enflame import (
    ASSIGNED,
    ASSIGNED_CONTAINERS,
    ASSIGNED_ID,
    ASSIGNED_INDEX,
    ASSIGNED_MINOR,
    ASSIGNED_TIME,
    DRS_CAPACITY,
    DRS_KEYS,
    GCU_KEYS,
    REQUEST_SIZE,
    EnflameConfig,
    EnflameDrsVendor,
    EnflameGcuVendor,
    choose_profile,
    profiles_of,
)
from hami.devices.policy import parse_gpu_policy
from hami.devices.table import DeviceTable
from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol.objects import Container, Node
from hami.protocol.reasons import Reason
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.decide import decide, reserve
from hami.scheduling.records import record_from_pod
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import container, pod

GCU_RES, DRS, MEM, CORE = "enflame.com/gcu", "enflame.com/drs-gcu", "enflame.com/gcu-memory", "enflame.com/gcu-core"
PROFILES = {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}
NS = "default"
NO_DEVICES: list[dict[str, Any]] = []


def capacity(devices: list[dict[str, Any]] | None = None, profiles: Mapping[str, str] | None = None) -> str:
    spec = {
        "devices": devices if devices is not None else [{"index": "0", "minor": "0", "capacity": 6}],
        "profiles": dict(PROFILES if profiles is None else profiles),
    }
    return json.dumps(spec)


def node(name: str, *, gcus: int | str | None = None, drs: str | None = None) -> Node:
    raw: dict[str, Any] = {"metadata": {"name": name, "annotations": {}}, "status": {"capacity": {}}}
    if gcus is not None:
        raw["status"]["capacity"][GCU_RES] = str(gcus)
    if drs is not None:
        raw["metadata"]["annotations"][DRS_CAPACITY] = drs
    return msgspec.convert(raw, Node)


def ctr(limits: Mapping[str, Any] | None = None, requests: Mapping[str, Any] | None = None) -> Container:
    return msgspec.convert({"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}, Container)


@pytest.fixture
def gcu() -> EnflameGcuVendor:
    return EnflameGcuVendor(EnflameConfig())


@pytest.fixture
def drs() -> EnflameDrsVendor:
    return EnflameDrsVendor(EnflameConfig())


def world(*nodes: Node) -> ClusterState:
    state = ClusterState(vendors_from_config(default_device_config()))
    for n in nodes:
        state.upsert_node(n)
    return state


# --- identity and registry ----------------------------------------------------------------------------------


def test_both_are_registered_with_hamis_keys_and_no_lock_or_handshake() -> None:
    vendors = vendors_from_config(default_device_config())
    assert isinstance(vendors["GCU"], EnflameGcuVendor)
    assert isinstance(vendors["Enflame"], EnflameDrsVendor)
    assert (GCU_KEYS.to_allocate, GCU_KEYS.allocated) == (
        "hami.io/enflame-gcu-devices-to-allocate",
        "hami.io/enflame-gcu-devices-allocated",
    )
    assert (DRS_KEYS.to_allocate, DRS_KEYS.allocated) == (None, "hami.io/enflame-vgpu-devices-allocated")
    for k in (GCU_KEYS, DRS_KEYS):
        assert k.lock is None
        assert k.handshake is None
        assert k in registered_keys()
    assert vendors["Enflame"].resources.memory == MEM
    assert vendors["Enflame"].resources.core == CORE


def test_drs_name_falls_back_to_the_legacy_vgcu_name() -> None:
    config = EnflameConfig.model_validate({"resourceNameDRSGCU": "", "resourceNameVGCU": "enflame.com/vgcu"})
    assert EnflameDrsVendor(config).resources.count == "enflame.com/vgcu"


# --- whole GCUs ---------------------------------------------------------------------------------------------


def test_gcu_inventory_from_capacity(gcu: EnflameGcuVendor) -> None:
    inv = gcu.decode_inventory(node("n1", gcus=3))
    assert inv is not None
    assert [(d.id, d.index, d.count, d.devmem, d.devcore, d.type, d.health) for d in inv.devices] == [
        (f"n1-GCU-{i}", i, 1, 100, 100, "GCU", True) for i in range(3)
    ]
    assert gcu.decode_inventory(node("n1", gcus=0)) is None  # HAMi: unhealthy, no devices
    assert gcu.decode_inventory(node("n1")) is None


@pytest.mark.parametrize("bad", ["lots", "-1", "1.5", "5000"])
def test_a_malformed_gcu_capacity_quarantines_that_vendor_only(bad: str) -> None:
    n = node("n1", gcus=bad, drs=capacity())
    state = world(n)
    assert "GCU" not in state.nodes["n1"].tables
    assert f"status.capacity[{GCU_RES}]" in state.nodes["n1"].problems["GCU"]
    assert "Enflame" in state.nodes["n1"].tables


@pytest.mark.parametrize(
    ("limits", "requests", "nums"),
    [({GCU_RES: 2}, {}, 2), ({}, {GCU_RES: 1}, 1), ({GCU_RES: 0}, {}, None), ({}, {}, None)],
)
def test_gcu_request(gcu: EnflameGcuVendor, limits: dict[str, int], requests: dict[str, int], nums: int | None) -> None:
    got = gcu.parse_request(ctr(limits, requests), "containers[0](c)")
    if nums is None:
        assert got is None
    else:
        assert got == ContainerRequest("GCU", nums, 100, 100, 100)


def gcu_table(n: int, used: tuple[int, ...] = ()) -> DeviceTable:
    inv = EnflameGcuVendor(EnflameConfig()).decode_inventory(node("n1", gcus=n))
    assert inv is not None
    t = DeviceTable("GCU", inv.devices)
    for i in used:
        t.charge(i, 1, 100, 100)
    return t


def fit_ctx(
    node_info: Mapping[str, str] | None = None, policy: str = "spread", cordoned: frozenset[str] = frozenset()
) -> FitContext:
    return FitContext(policy=parse_gpu_policy(policy, False), node_info=dict(node_info or {}), cordoned=cordoned)


def test_gcu_fit_takes_idle_cards_only(gcu: EnflameGcuVendor) -> None:
    out = gcu.fit(gcu_table(3, used=(1,)), ContainerRequest("GCU", 2, 100, 100, 100), fit_ctx(), Selector())
    assert isinstance(out, Fitted)
    assert sorted(p.device.uuid for p in out.placements) == ["n1-GCU-0", "n1-GCU-2"]
    assert {(p.device.type, p.device.usedmem, p.device.usedcores) for p in out.placements} == {("GCU", 100, 100)}


@pytest.mark.parametrize(
    ("n", "used", "nums", "cordoned", "counts"),
    [
        (2, (0, 1), 1, (), {Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: 2}),
        (
            3,
            (0, 1),
            2,
            (),
            {Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: 2, Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1},
        ),
        (2, (), 3, (), {Reason.NODE_INSUFFICIENT_DEVICE: 2}),
        (2, (1,), 1, ("n1-GCU-0",), {Reason.CARD_CORDONED: 1, Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: 1}),
    ],
)
def test_gcu_fit_reasons(
    gcu: EnflameGcuVendor,
    n: int,
    used: tuple[int, ...],
    nums: int,
    cordoned: tuple[str, ...],
    counts: dict[Reason, int],
) -> None:
    out = gcu.fit(
        gcu_table(n, used),
        ContainerRequest("GCU", nums, 100, 100, 100),
        fit_ctx(cordoned=frozenset(cordoned)),
        Selector(),
    )
    assert isinstance(out, Unfit)
    assert dict(out.counts) == counts
    assert out.total == n


def test_gcu_pod_gets_both_allocation_annotations_and_the_card_is_then_taken() -> None:
    state = world(node("n1", gcus=2))
    p = pod([container({GCU_RES: 1}, name="a")], uid="u1")
    decision = decide(state, prefilter(p, state.vendors, SchedulingDefaults()), ["n1"], 7)
    value = decision.annotations["hami.io/enflame-gcu-devices-allocated"]
    assert value in ("n1-GCU-0,GCU,100,100:;", "n1-GCU-1,GCU,100,100:;")
    assert decision.annotations["hami.io/enflame-gcu-devices-to-allocate"] == value
    assert set(decision.annotations) == {
        keys.VGPU_NODE,
        keys.VGPU_TIME,
        "hami.io/enflame-gcu-devices-allocated",
        "hami.io/enflame-gcu-devices-to-allocate",
    }


# --- DRS inventory --------------------------------------------------------------------------------------------


def test_drs_inventory_from_the_capacity_annotation(drs: EnflameDrsVendor) -> None:
    devices: list[dict[str, Any]] = [
        {"index": "0", "minor": "4", "capacity": 6},
        {"index": "1", "minor": "", "capacity": "6"},
    ]
    inv = drs.decode_inventory(node("n1", drs=capacity(devices)))
    assert isinstance(inv, NodeInventory)
    assert [(d.id, d.index, d.count, d.devmem, d.devcore, d.type) for d in inv.devices] == [
        ("n1-enflame-drs-0", 0, 6, 40960, 100, "Enflame"),
        ("n1-enflame-drs-1", 1, 6, 40960, 100, "Enflame"),
    ]
    assert inv.node_info["minor/n1-enflame-drs-0"] == "4"
    assert inv.node_info["minor/n1-enflame-drs-1"] == "1"  # a blank minor is the index (HAMi)
    assert [(p.name, p.id, p.slices, p.memory_gb, p.core) for p in profiles_of(inv.node_info)] == [
        ("1g.6gb", "0", 1, 6, 17),
        ("3g.20gb", "1", 3, 20, 50),
        ("6g.40gb", "2", 6, 40, 100),
    ]
    assert drs.decode_inventory(node("n1")) is None


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("{not json", "invalid JSON"),
        (capacity(profiles={}), "no DRS profiles"),
        (capacity(profiles={"big": "0"}), "profile name 'big' is not <slices>g.<memory>gb"),
        (capacity(profiles={"0g.6gb": "0"}), "profile '0g.6gb' has no slices"),
        (capacity(devices=NO_DEVICES), "no DRS devices on node n1"),
        (capacity(devices=[{"index": "x", "capacity": 6}]), "devices[0].index 'x' is not a whole number"),
        (capacity(devices=[{"index": "0", "capacity": 0}]), "devices[0].capacity 0 is not a positive whole number"),
        (capacity(devices=[{"index": "0", "capacity": "six"}]), "devices[0].capacity 'six'"),
        (
            capacity(devices=[{"index": "0", "minor": "a,b", "capacity": 6}]),
            "devices[0].minor 'a,b' is not a device number",
        ),
        (capacity(devices=[{"index": "0", "capacity": 6}, {"index": "0", "capacity": 6}]), "n1-enflame-drs-0"),
    ],
)
def test_a_malformed_drs_capacity_quarantines_the_node_for_drs(raw: str, reason: str) -> None:
    state = world(node("n1", gcus=1, drs=raw))
    problem = state.nodes["n1"].problems["Enflame"]
    assert DRS_CAPACITY in problem or "status.capacity" in problem
    assert reason in problem
    assert "Enflame" not in state.nodes["n1"].tables
    assert "GCU" in state.nodes["n1"].tables  # the node's whole GCUs keep working


# --- DRS requests and profiles ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "requests", "variant"),
    [
        ({DRS: 3}, {}, "slices:3"),
        ({}, {DRS: 1}, "slices:1"),
        ({MEM: 20}, {}, "spec:20:0"),
        ({CORE: 50}, {}, "spec:0:50"),
        ({}, {MEM: 8000, CORE: 30}, "spec:8000:30"),
        ({DRS: 0, MEM: 5}, {}, "spec:5:0"),  # HAMi: a zero slice count falls through to the spec
        ({}, {}, None),
    ],
)
def test_drs_request(
    drs: EnflameDrsVendor, limits: dict[str, int], requests: dict[str, int], variant: str | None
) -> None:
    got = drs.parse_request(ctr(limits, requests), "containers[0](c)")
    if variant is None:
        assert got is None
    else:
        assert got == ContainerRequest("Enflame", 1, variant=variant)


@pytest.mark.parametrize(
    ("limits", "reason"),
    [({DRS: -1}, "must not be negative"), ({MEM: "1.5"}, "gcu-memory"), ({CORE: 101}, "must be in range (0,100]")],
)
def test_drs_request_refused(drs: EnflameDrsVendor, limits: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidInput) as err:
        drs.parse_request(ctr(limits), "containers[0](c)")
    assert reason in str(err.value)


PROFILE_SET = profiles_of(
    {"profiles": json.dumps([["1g.6gb", "0", 1, 6], ["3g.20gb", "1", 3, 20], ["6g.40gb", "2", 6, 40]])}
)


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("slices:1", "1g.6gb"),
        ("slices:3", "3g.20gb"),
        ("slices:6", "6g.40gb"),
        ("slices:2", None),  # direct mode needs an exact slice count
        ("spec:6:0", "1g.6gb"),
        ("spec:7:0", "3g.20gb"),  # the smallest profile with enough memory
        ("spec:0:17", "1g.6gb"),
        ("spec:0:18", "3g.20gb"),  # core share ceil(1 × 100 / 6) = 17
        ("spec:20:51", "6g.40gb"),  # both must hold
        ("spec:80:0", None),  # 80 = 2 × 40: still read as GB, and no profile has 80 GB
        ("spec:81:0", "1g.6gb"),  # above twice the largest GB: MiB, rounded up to 1 GB
        ("spec:20480:0", "3g.20gb"),
        ("spec:20481:0", "6g.40gb"),
        ("spec:41:0", None),
        ("spec:0:0", "1g.6gb"),
    ],
)
def test_choose_profile(variant: str, expected: str | None) -> None:
    chosen = choose_profile(PROFILE_SET, variant)
    assert (chosen.name if chosen else None) == expected


def drs_table(drs: EnflameDrsVendor, devices: list[dict[str, Any]] | None = None) -> tuple[DeviceTable, dict[str, str]]:
    inv = drs.decode_inventory(node("n1", drs=capacity(devices)))
    assert inv is not None
    return DeviceTable("Enflame", inv.devices), dict(inv.node_info)


def test_drs_fit_charges_the_profile(drs: EnflameDrsVendor) -> None:
    table, info = drs_table(drs)
    out = drs.fit(table, ContainerRequest("Enflame", 1, variant="slices:3"), fit_ctx(info), Selector())
    assert isinstance(out, Fitted)
    (p,) = out.placements
    assert (p.device.uuid, p.device.type, p.device.usedmem, p.device.usedcores) == (
        "n1-enflame-drs-0",
        "Enflame",
        20480,
        50,
    )
    assert p.slice is not None
    assert p.slice.template == "3g.20gb"
    assert (p.slice.fact("id"), p.slice.fact("index"), p.slice.fact("minor"), p.slice.fact("slices")) == (
        "1",
        "0",
        "0",
        "3",
    )


def _charged(drs: EnflameDrsVendor, used: list[tuple[int, int]]) -> tuple[DeviceTable, dict[str, str]]:
    table, info = drs_table(drs)
    for mem, core in used:
        table.charge(0, 1, mem, core)
    return table, info


@pytest.mark.parametrize(
    ("used", "variant", "policy", "annotations", "reason"),
    [
        ([], "slices:4", "spread", {}, Reason.MODE_NOT_FIT),
        ([(20480, 50), (20480, 50)], "slices:1", "spread", {}, Reason.CARD_INSUFFICIENT_MEMORY),
        ([(30720, 50)], "slices:3", "spread", {}, Reason.CARD_INSUFFICIENT_MEMORY),
        ([(6144, 17)] * 5, "slices:1", "spread", {}, Reason.CARD_INSUFFICIENT_CORE),
        ([(1, 1)] * 6, "slices:1", "spread", {}, Reason.CARD_TIME_SLICING_EXHAUSTED),
        ([(6144, 17)], "slices:1", "mutex", {}, Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT),
        ([], "slices:1", "spread", {"enflame.com/use-gpuuuid": "other"}, Reason.CARD_UUID_MISMATCH),
        ([], "slices:1", "spread", {"enflame.com/nouse-gpuuuid": "n1-enflame-drs-0"}, Reason.CARD_UUID_MISMATCH),
    ],
)
def test_drs_fit_reasons(
    drs: EnflameDrsVendor,
    used: list[tuple[int, int]],
    variant: str,
    policy: str,
    annotations: dict[str, str],
    reason: Reason,
) -> None:
    table, info = _charged(drs, used)
    out = drs.fit(
        table, ContainerRequest("Enflame", 1, variant=variant), fit_ctx(info, policy), drs.selector(annotations)
    )
    assert isinstance(out, Unfit)
    assert dict(out.counts) == {reason: 1}
    assert out.total == 1


def test_drs_without_profiles_on_the_node_is_mode_not_fit(drs: EnflameDrsVendor) -> None:
    table, _ = drs_table(drs)
    out = drs.fit(table, ContainerRequest("Enflame", 1, variant="slices:1"), fit_ctx({}), Selector())
    assert isinstance(out, Unfit)
    assert dict(out.counts) == {Reason.MODE_NOT_FIT: 1}


# --- DRS annotations through the decision cycle ----------------------------------------------------------------


def test_drs_annotations_byte_for_byte() -> None:
    devices = [{"index": "0", "minor": "0", "capacity": 6}, {"index": "1", "minor": "5", "capacity": 6}]
    state = world(node("n1", drs=capacity(devices)))
    p = pod(
        [
            container({GCU_RES: 0}, name="sidecar"),
            container({DRS: 3}, name="pod-gcu-example1"),
            container({MEM: 6}, name="b"),
        ],
        init=[container(name="init")],
        annotations={"enflame.com/use-gpuuuid": "n1-enflame-drs-1"},
    )
    decision = decide(state, prefilter(p, state.vendors, SchedulingDefaults()), ["n1"], 7, now_ns=7_000_000_123)
    assert decision.annotations == {
        keys.VGPU_NODE: "n1",
        keys.VGPU_TIME: "7",
        "hami.io/enflame-vgpu-devices-allocated": ";;n1-enflame-drs-1,Enflame,20480,50:;"
        "n1-enflame-drs-1,Enflame,6144,17:;",
        ASSIGNED: "false",
        ASSIGNED_TIME: "7000000123",
        ASSIGNED_INDEX: "1",
        ASSIGNED_ID: "1",
        ASSIGNED_MINOR: "5",
        REQUEST_SIZE: "3",
        ASSIGNED_CONTAINERS: (
            '{"b":{"allocated":false,"request":1,"profileID":"0","profileName":"1g.6gb"},'
            '"pod-gcu-example1":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}}'
        ),
    }
    # The ledger reads the allocation back from the pod (a restart): the same devices and charges.
    placed = pod(
        [
            container({GCU_RES: 0}, name="sidecar"),
            container({DRS: 3}, name="pod-gcu-example1"),
            container({MEM: 6}, name="b"),
        ],
        init=[container(name="init")],
        annotations=decision.annotations,
    )
    record = record_from_pod(placed, state.vendors)
    assert record is not None
    assert record.problem is None
    assert record.devices["Enflame"] == decision.devices["Enflame"]


def test_drs_slices_run_out_through_the_ledger() -> None:
    state = world(node("n1", drs=capacity()))
    placed = 0
    for i in range(4):
        p = pod([container({DRS: 3}, name="c")], uid=f"u{i}", name=f"p{i}")
        request = prefilter(p, state.vendors, SchedulingDefaults())
        decision = decide(state, request, ["n1"], 7)
        if decision.node is None:
            break
        reserve(state, request, decision)
        placed += 1
    assert placed == 2  # two 3-slice profiles fill a 6-slice device


# --- webhook ------------------------------------------------------------------------------------------------


def admission() -> Admission:
    vendors = vendors_from_config(default_device_config())
    return Admission(vendors, admitters_for(vendors), SchedulingDefaults(), AdmissionSettings())


def raw_pod(resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": NS},
        "spec": {"containers": [{"name": "main", "resources": resources}]},
    }


@pytest.mark.parametrize(
    ("resources", "ops"),
    [
        (
            {"limits": {DRS: "3"}},
            [{"op": "add", "path": "/spec/containers/0/resources/requests", "value": {DRS: "3"}}],
        ),
        (
            {"requests": {DRS: "2"}},
            [{"op": "add", "path": "/spec/containers/0/resources/limits", "value": {DRS: "2"}}],
        ),
        (
            {"limits": {MEM: "20"}, "requests": {CORE: "50"}},
            [
                {"op": "add", "path": "/spec/containers/0/resources/limits/enflame.com~1gcu-core", "value": "50"},
                {"op": "add", "path": "/spec/containers/0/resources/requests/enflame.com~1gcu-memory", "value": "20"},
            ],
        ),
        ({"limits": {DRS: "3"}, "requests": {DRS: "3"}}, []),
    ],
)
def test_webhook_mirrors_limits_and_requests(resources: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    verdict = admission().review(raw_pod(resources), NS)
    assert verdict.allowed, verdict.message
    resource_ops = [o for o in verdict.patch if "/resources" in o["path"]]
    assert sorted(resource_ops, key=lambda o: o["path"]) == sorted(ops, key=lambda o: o["path"])
    assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in verdict.patch


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"limits": {DRS: "0"}}, "enflame.com/drs-gcu must be greater than 0"),
        ({"limits": {MEM: "0"}}, "enflame.com/gcu-memory must be greater than 0"),
        ({"limits": {CORE: "0"}}, "enflame.com/gcu-core must be greater than 0"),
        ({"requests": {CORE: "101"}}, "enflame.com/gcu-core must be in range (0,100]"),
    ],
)
def test_webhook_denials(resources: dict[str, Any], message: str) -> None:
    verdict = admission().review(raw_pod(resources), NS)
    assert not verdict.allowed
    assert message in verdict.message
    assert "containers[0](main)" in verdict.message


def test_whole_gcu_webhook_only_reports_found_from_limits() -> None:
    assert admission().review(raw_pod({"limits": {GCU_RES: "1"}}), NS).patch == (
        {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"},
    )
    assert admission().review(raw_pod({"requests": {GCU_RES: "1"}}), NS).patch == ()
