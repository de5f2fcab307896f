"""MetaX (webhook-bind-plugin-vendors.md §7, vendors-appendix.md): whole cards from the node's capacity with the
topology node score and one card per pod, and sGPU slices with QoS policy, app class, MetaLink zones and the
``metax-tech.com/gpu-devices-allocated`` annotation — each asserted against a hand-worked table."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.devices.admission import CountInLimits
from hami.devices.base import ContainerRequest, Fitted
from hami.devices.metax import GPU, SGPU, MetaxGpuVendor, MetaxSgpuVendor
from hami.devices.metax.topology import link_score, prefer_link_zones
from hami.devices.metax.wire import ShareTag
from hami.errors import InvalidInput, QuantityError
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Container, Node, Pod, ResourceQuota
from hami.protocol.reasons import Reason
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.decide import Decision, decide, reserve
from hami.scheduling.records import record_from_pod
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import ctx

GPU_COUNT = "metax-tech.com/gpu"
SGPU_COUNT, VCORE, VMEM = "metax-tech.com/sgpu", "metax-tech.com/vcore", "metax-tech.com/vmemory"
QOS, APP, TOPO = "metax-tech.com/sgpu-qos-policy", "metax-tech.com/sgpu-app-class", "metax-tech.com/sgpu-topology-aware"
LOSSES, SCORES = "metax-tech.com/gpu.topology.losses", "metax-tech.com/gpu.topology.scores"
REGISTER = "metax-tech.com/node-gpu-devices"
FIELD = "containers[0](c)"
NOW = 1700000000
NOW_NS = 1700000000123456789


def _vendors() -> dict[str, Any]:
    return vendors_from_config(default_device_config())


@pytest.fixture
def card() -> MetaxGpuVendor:
    v = _vendors()[GPU]
    assert isinstance(v, MetaxGpuVendor)
    return v


@pytest.fixture
def sgpu() -> MetaxSgpuVendor:
    v = _vendors()[SGPU]
    assert isinstance(v, MetaxSgpuVendor)
    return v


def _container(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> Container:
    return msgspec.convert({"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}, Container)


def _node(name: str, capacity: dict[str, Any] | None = None, annotations: dict[str, str] | None = None) -> Node:
    raw = {"metadata": {"name": name, "annotations": annotations or {}}, "status": {"capacity": capacity or {}}}
    return msgspec.convert(raw, Node)


def _sdev(uuid: str, *, zone: int = 0, qos: str = "", healthy: bool = True, count: int = 4) -> dict[str, Any]:
    d: dict[str, Any] = {"uuid": uuid, "bdf": "0000:01:00.0", "model": "C500", "totalDevCount": count}
    d |= {"totalCompute": 100, "totalVRam": 65536, "numa": 0}
    if healthy:
        d["healthy"] = True
    if qos:
        d["qosPolicy"] = qos
    if zone:
        d["linkZone"] = zone
    return d


def _sgpu_node(name: str, *devices: dict[str, Any]) -> Node:
    return _node(name, annotations={REGISTER: json.dumps(list(devices))})


def _pod(containers: Sequence[Mapping[str, Any]], annotations: Mapping[str, str] | None = None, uid: str = "u1") -> Pod:
    specs = [{"name": f"c{i}", "resources": {"limits": dict(limits)}} for i, limits in enumerate(containers)]
    raw: dict[str, Any] = {
        "metadata": {"name": f"p-{uid}", "namespace": "team", "uid": uid, "annotations": dict(annotations or {})},
        "spec": {"containers": specs, "schedulerName": "hami-scheduler"},
    }
    return msgspec.convert(raw, Pod)


def _decide(state: ClusterState, pod: Pod, nodes: Sequence[str], node_policy: str = "binpack") -> Decision:
    req = prefilter(pod, state.vendors, SchedulingDefaults(node_policy=node_policy))
    return decide(state, req, nodes, now=NOW, now_ns=NOW_NS)


def _place(state: ClusterState, pod: Pod, nodes: Sequence[str]) -> Decision:
    """Decide and reserve, then replace the reservation by the record read back from the annotated pod (as the
    pod watch does): the two must agree."""
    req = prefilter(pod, state.vendors, SchedulingDefaults())
    decision = decide(state, req, nodes, now=NOW, now_ns=NOW_NS)
    reserved = reserve(state, req, decision)
    assert reserved is not None
    placed = msgspec.structs.replace(
        pod,
        metadata=msgspec.structs.replace(
            pod.metadata, annotations={**pod.metadata.annotations, **decision.annotations}
        ),
    )
    observed = record_from_pod(placed, state.vendors)
    assert observed is not None
    assert (observed.charges, observed.slices) == (reserved.charges, reserved.slices)
    return decision


# === whole cards (Metax-GPU) =====================================================================================


def test_card_keys_have_no_registration_handshake_or_lock(card: MetaxGpuVendor) -> None:
    k = card.keys
    assert (k.register, k.handshake, k.lock) == ("", None, None)
    assert (k.to_allocate, k.allocated) == (
        "hami.io/metax-gpu-devices-to-allocate",
        "hami.io/metax-gpu-devices-allocated",
    )
    assert isinstance(card.admitter(), CountInLimits)


def test_cards_are_derived_from_the_capacity(card: MetaxGpuVendor) -> None:
    assert card.decode_inventory(_node("n")) is None
    inv = card.decode_inventory(_node("n", {GPU_COUNT: "2"}, {LOSSES: '{"1":10,"2":40}'}))
    assert inv is not None
    assert inv.devices == tuple(
        DeviceInfo(id=f"n-metax-{i}", index=i, count=1, devmem=65536, devcore=100, type=GPU, health=True)
        for i in range(2)
    )
    assert dict(inv.node_info) == {LOSSES: '{"1":10,"2":40}'}
    empty = card.decode_inventory(_node("n", {GPU_COUNT: 0}))
    assert empty is not None
    assert empty.devices == ()


@pytest.mark.parametrize(
    ("capacity", "annotations", "problem"),
    [
        pytest.param({GPU_COUNT: "1.5"}, {}, "status.capacity[metax-tech.com/gpu]: must be a whole number", id="frac"),
        pytest.param({GPU_COUNT: "-1"}, {}, "a MetaX card count must be between 0 and 1024", id="negative"),
        pytest.param({GPU_COUNT: "2"}, {LOSSES: "[1,2]"}, f"{LOSSES}: invalid JSON value", id="losses-not-a-map"),
        pytest.param({GPU_COUNT: "2"}, {SCORES: '{"x":1}'}, f"{SCORES}: invalid JSON", id="scores-bad-key"),
    ],
)
def test_a_malformed_capacity_or_topology_quarantines_the_cards(
    capacity: dict[str, Any], annotations: dict[str, str], problem: str
) -> None:
    state = ClusterState(_vendors())
    node = state.upsert_node(_node("n", capacity, annotations))
    assert GPU not in node.tables
    assert problem in node.problems[GPU]


@pytest.mark.parametrize(
    ("limits", "requests", "expected"),
    [
        pytest.param({GPU_COUNT: 2}, {}, ContainerRequest(GPU, 2, 0, 100, 100), id="limits"),
        pytest.param({}, {GPU_COUNT: 1}, ContainerRequest(GPU, 1, 0, 100, 100), id="requests-fallback"),
        pytest.param({GPU_COUNT: 0}, {}, None, id="zero"),
    ],
)
def test_card_requests_are_whole_cards(
    card: MetaxGpuVendor, limits: dict[str, Any], requests: dict[str, Any], expected: ContainerRequest | None
) -> None:
    assert card.parse_request(_container(limits, requests), FIELD) == expected


def test_a_pod_gets_whole_cards_and_hamis_annotations() -> None:
    state = ClusterState(_vendors())
    state.upsert_node(_node("n1", {GPU_COUNT: "4"}))
    decision = _place(state, _pod([{GPU_COUNT: 2}]), ["n1"])
    # Spread among idle cards: lowest index first.
    value = "n1-metax-0,Metax-GPU,65536,100:n1-metax-1,Metax-GPU,65536,100:;"
    assert dict(decision.annotations) == {
        "hami.io/vgpu-node": "n1",
        "hami.io/vgpu-time": str(NOW),
        "hami.io/metax-gpu-devices-to-allocate": value,
        "hami.io/metax-gpu-devices-allocated": value,
    }
    taken = _decide(state, _pod([{GPU_COUNT: 3}], uid="u2"), ["n1"])
    assert taken.node is None
    assert dict(taken.rejected["n1"].counts) == {
        Reason.CARD_TIME_SLICING_EXHAUSTED: 2,
        Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 2,
    }


def test_a_pod_s_containers_spread_over_cards_of_their_own() -> None:
    # As HAMi now does (Test_Fit_MultiContainerPodSpreadsOverCards): v2.10 refused the second container every
    # other card (CardNotFoundCustomFilterRule) while its first card, one slot, was taken, so such a pod never fit.
    state = ClusterState(_vendors())
    state.upsert_node(_node("n1", {GPU_COUNT: "3"}))
    decision = _decide(state, _pod([{GPU_COUNT: 1}, {GPU_COUNT: 1}]), ["n1"])
    assert decision.node == "n1"
    per_container = decision.annotations["hami.io/metax-gpu-devices-allocated"].rstrip(";").split(";")
    cards = [entry.split(",")[0] for entry in per_container]
    assert len(cards) == 2
    assert len(set(cards)) == 2, cards


def test_a_second_container_with_no_idle_card_left_is_refused() -> None:
    state = ClusterState(_vendors())
    state.upsert_node(_node("n1", {GPU_COUNT: "1"}))
    decision = _decide(state, _pod([{GPU_COUNT: 1}, {GPU_COUNT: 1}]), ["n1"])
    assert decision.node is None
    assert dict(decision.rejected["n1"].counts) == {Reason.CARD_TIME_SLICING_EXHAUSTED: 1}


def test_an_init_container_and_an_app_container_share_their_card() -> None:
    state = ClusterState(_vendors())
    state.upsert_node(_node("n1", {GPU_COUNT: "2"}))
    raw = {
        "metadata": {"name": "p", "namespace": "team", "uid": "u1"},
        "spec": {
            "initContainers": [{"name": "i", "resources": {"limits": {GPU_COUNT: 1}}}],
            "containers": [{"name": "a", "resources": {"limits": {GPU_COUNT: 1}}}],
        },
    }
    decision = _decide(state, msgspec.convert(raw, Pod), ["n1"])
    card = "n1-metax-0,Metax-GPU,65536,100:"
    assert decision.annotations["hami.io/metax-gpu-devices-allocated"] == f"{card};{card};"


@pytest.mark.parametrize(
    ("policy", "annotations", "chosen"),
    [
        # binpack: 2000 − loss[2] is higher on n2 (loss 5) than on n1 (loss 50).
        pytest.param("binpack", {"n1": {LOSSES: '{"2":50}'}, "n2": {LOSSES: '{"2":5}'}}, "n2", id="binpack-low-loss"),
        # spread ranks the lowest node score first: 2000 − score[2] is lower on n1 (score 900).
        pytest.param("spread", {"n1": {SCORES: '{"2":900}'}, "n2": {SCORES: '{"2":100}'}}, "n1", id="spread-high"),
        # binpack reads only the losses: a missing count reads 0 (2000), beating n2's 2000 − 30.
        pytest.param("binpack", {"n1": {LOSSES: '{"1":70}'}, "n2": {LOSSES: '{"2":30}'}}, "n1", id="missing-count"),
    ],
)
def test_the_topology_annotations_score_the_node(
    policy: str, annotations: dict[str, dict[str, str]], chosen: str
) -> None:
    state = ClusterState(_vendors())
    for name in ("n1", "n2"):
        state.upsert_node(_node(name, {GPU_COUNT: "4"}, annotations[name]))
    decision = _decide(state, _pod([{GPU_COUNT: 2}]), ["n1", "n2"], node_policy=policy)
    assert decision.node == chosen


# === shared slices (Metax-SGPU) ==================================================================================


def test_sgpu_keys(sgpu: MetaxSgpuVendor) -> None:
    k = sgpu.keys
    assert (k.register, k.handshake, k.lock) == (REGISTER, None, "hami.io/mutex.lock")
    assert (k.to_allocate, k.allocated) == (
        "hami.io/metax-sgpu-devices-to-allocate",
        "hami.io/metax-sgpu-devices-allocated",
    )
    assert k.extra == ("metax-tech.com/gpu-devices-allocated", "metax-tech.com/predicate-time")
    r = sgpu.resources
    assert (r.count, r.memory, r.core, r.memory_factor) == (SGPU_COUNT, VMEM, VCORE, 1024)


def test_sgpu_inventory_decodes_the_device_plugins_list(sgpu: MetaxSgpuVendor) -> None:
    node = _sgpu_node("n", _sdev("sg-0", zone=1, qos="fixed-share"), _sdev("sg-1", healthy=False) | {"numa": 1})
    inv = sgpu.decode_inventory(node)
    assert inv is not None
    assert inv.devices == (
        DeviceInfo(id="sg-0", index=0, count=4, devmem=65536, devcore=100, type=SGPU, health=True),
        DeviceInfo(id="sg-1", index=1, count=4, devmem=65536, devcore=100, type=SGPU, numa=1, health=False),
    )
    assert dict(inv.node_info) == {"qosPolicy/sg-0": "fixed-share", "linkZone/sg-0": "1"}
    empty = sgpu.decode_inventory(_node("n", annotations={REGISTER: "[]"}))
    assert empty is not None
    assert empty.devices == ()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        pytest.param('[{"uuid": "a"', f"{REGISTER}: invalid JSON", id="truncated"),
        pytest.param('[{"uuid": "a", "totalVRam": "64G"}]', f"{REGISTER}: invalid JSON value", id="wrong-type"),
        pytest.param('[{"uuid": "a", "totalVRam": 4294967296}]', f"{REGISTER}: invalid JSON value", id="over-int32"),
        pytest.param('[{"totalDevCount": 4}]', "blank id", id="no-uuid"),
        pytest.param('[{"uuid": "a"}, {"uuid": "a"}]', "device id repeated", id="repeated-uuid"),
    ],
)
def test_a_malformed_sgpu_list_quarantines_the_node(value: str, problem: str) -> None:
    state = ClusterState(_vendors())
    node = state.upsert_node(_node("n", annotations={REGISTER: value}))
    assert SGPU not in node.tables
    assert problem in node.problems[SGPU]


@pytest.mark.parametrize(
    ("limits", "requests", "expected"),
    [
        pytest.param({SGPU_COUNT: 1}, {}, ContainerRequest(SGPU, 1, 0, 100, 100), id="defaults-whole-card"),
        pytest.param({SGPU_COUNT: 1, VMEM: 4, VCORE: 30}, {}, ContainerRequest(SGPU, 1, 4096, 101, 30), id="gib"),
        pytest.param({SGPU_COUNT: 1, VMEM: "4Gi"}, {}, ContainerRequest(SGPU, 1, 4096, 101, 100), id="bytes-gi"),
        pytest.param({SGPU_COUNT: 2, VMEM: "512Mi"}, {}, ContainerRequest(SGPU, 2, 512, 101, 100), id="bytes-mi"),
        pytest.param({SGPU_COUNT: 1, VMEM: "1500M"}, {}, ContainerRequest(SGPU, 1, 1430, 101, 100), id="floor-mib"),
        pytest.param({SGPU_COUNT: 1, VCORE: 0}, {}, ContainerRequest(SGPU, 1, 0, 100, 0), id="zero-cores"),
        pytest.param({}, {SGPU_COUNT: 1}, None, id="requests-not-read"),
        pytest.param({SGPU_COUNT: 1}, {VMEM: 8, VCORE: 10}, ContainerRequest(SGPU, 1, 0, 100, 100), id="limits-only"),
    ],
)
def test_sgpu_requests(
    sgpu: MetaxSgpuVendor, limits: dict[str, Any], requests: dict[str, Any], expected: ContainerRequest | None
) -> None:
    assert sgpu.parse_request(_container(limits, requests), FIELD) == expected


@pytest.mark.parametrize(
    ("limits", "field", "reason"),
    [
        pytest.param({SGPU_COUNT: -1}, f"f.limits[{SGPU_COUNT}]", "must not be negative", id="negative"),
        pytest.param(
            {SGPU_COUNT: 1, VCORE: 101},
            f"f.limits[{VCORE}]",
            "cores are a percentage of one card and cannot exceed 100",
            id="cores",
        ),
        pytest.param(
            {SGPU_COUNT: 1, VMEM: "100Ki"},
            f"f.limits[{VMEM}]",
            "is less than 1 MiB (a bare number counts GiB)",
            id="under-a-mib",
        ),
        pytest.param(
            {SGPU_COUNT: 1, VMEM: 2**21},
            f"f.limits[{VMEM}]",
            "is 2147483648 MiB, which exceeds the int32 range HAMi's annotations can carry",
            id="gib-over-int32",
        ),
        pytest.param({SGPU_COUNT: 1, VMEM: "1.5"}, f"f.limits[{VMEM}]", "must be a whole number", id="fraction"),
    ],
)
def test_sgpu_requests_refused(sgpu: MetaxSgpuVendor, limits: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(QuantityError) as info:
        sgpu.parse_request(_container(limits), "f")
    assert (info.value.field, info.value.reason) == (field, reason)


# --- webhook ---------------------------------------------------------------------------------------------------


def _review(annotations: dict[str, str] | None, *limits: dict[str, str]) -> Any:
    vendors = _vendors()
    admission = Admission(
        vendors=vendors,
        admitters=admitters_for(vendors),
        defaults=SchedulingDefaults(),
        settings=AdmissionSettings("hami-scheduler", True),
    )
    metadata: dict[str, Any] = {"name": "p", "namespace": "team"}
    if annotations is not None:
        metadata["annotations"] = annotations
    containers = [{"name": f"c{i}", "resources": {"limits": lim}} for i, lim in enumerate(limits)]
    return admission.review(
        {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": containers}}
    )


def test_the_webhook_sets_the_default_qos_policy_once() -> None:
    verdict = _review(None, {SGPU_COUNT: "1"}, {SGPU_COUNT: "1"})
    assert verdict.allowed
    assert list(verdict.patch) == [
        {"op": "add", "path": "/metadata/annotations", "value": {QOS: "best-effort"}},
        {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"},
    ]


@pytest.mark.parametrize(
    ("annotations", "limits", "patched"),
    [
        pytest.param({QOS: "fixed-share"}, {SGPU_COUNT: "2"}, False, id="qos-given"),
        pytest.param({APP: "online"}, {SGPU_COUNT: "1"}, False, id="online-needs-no-qos"),
        pytest.param({APP: "offline"}, {SGPU_COUNT: "1"}, True, id="offline-gets-the-default"),
    ],
)
def test_the_webhook_allows(annotations: dict[str, str], limits: dict[str, str], patched: bool) -> None:
    verdict = _review(annotations, limits)
    assert verdict.allowed
    ops = [op for op in verdict.patch if op["path"].startswith("/metadata/annotations")]
    assert ops == (
        [{"op": "add", "path": "/metadata/annotations/metax-tech.com~1sgpu-qos-policy", "value": "best-effort"}]
        if patched
        else []
    )


@pytest.mark.parametrize(
    ("annotations", "limits", "message"),
    [
        pytest.param(
            {QOS: "gold"},
            {SGPU_COUNT: "1"},
            f"{QOS}: must be set one of [best-effort, fixed-share, burst-share]",
            id="qos",
        ),
        pytest.param({APP: "batch"}, {SGPU_COUNT: "1"}, f"{APP}: must be set one of [online, offline]", id="class"),
        pytest.param(
            {APP: "online"},
            {SGPU_COUNT: "2"},
            f"containers[0](c0).limits[{SGPU_COUNT}]: app-class pod must request single device ({APP})",
            id="class-one-device",
        ),
    ],
)
def test_the_webhook_denies(annotations: dict[str, str], limits: dict[str, str], message: str) -> None:
    verdict = _review(annotations, limits)
    assert not verdict.allowed
    assert verdict.message.startswith(message)


# --- fit ---------------------------------------------------------------------------------------------------------


def _holding(state: ClusterState, node: str, uid: str, limits: dict[str, Any], annotations: dict[str, str]) -> str:
    """Place a pod on ``node``; returns its allocation."""
    decision = _place(state, _pod([limits], annotations, uid=uid), [node])
    assert decision.node == node
    return decision.annotations["hami.io/metax-sgpu-devices-allocated"]


@pytest.mark.parametrize(
    ("first", "second", "reason"),
    [
        # A plain pod and a classed (online/offline) pod never share a device.
        pytest.param({QOS: "best-effort"}, {APP: "online"}, Reason.CARD_APP_CLASS_MISMATCH, id="plain-then-online"),
        pytest.param(
            {APP: "offline", QOS: "best-effort"},
            {QOS: "best-effort"},
            Reason.CARD_APP_CLASS_MISMATCH,
            id="offline-then-plain",
        ),
        # An offline pod does not join a device running an online one.
        pytest.param(
            {APP: "online"},
            {APP: "offline", QOS: "best-effort"},
            Reason.CARD_APP_CLASS_MISMATCH,
            id="online-then-offline",
        ),
        pytest.param({QOS: "fixed-share"}, {QOS: "burst-share"}, Reason.CARD_QOS_POLICY_MISMATCH, id="qos-differs"),
    ],
)
def test_one_device_one_kind_of_pod(first: dict[str, str], second: dict[str, str], reason: Reason) -> None:
    state = ClusterState(_vendors())
    state.upsert_node(_sgpu_node("n1", _sdev("sg-0")))
    _holding(state, "n1", "u1", {SGPU_COUNT: 1, VCORE: 20, VMEM: 4}, first)
    decision = _decide(state, _pod([{SGPU_COUNT: 1, VCORE: 20, VMEM: 4}], second, uid="u2"), ["n1"])
    assert decision.node is None
    assert dict(decision.rejected["n1"].counts) == {reason: 1}


def test_compatible_pods_share_a_device() -> None:
    state = ClusterState(_vendors())
    state.upsert_node(_sgpu_node("n1", _sdev("sg-0")))
    _holding(state, "n1", "u1", {SGPU_COUNT: 1, VCORE: 20, VMEM: 4}, {APP: "offline", QOS: "fixed-share"})
    # Online joins offline (it preempts it); an online share takes memory but no cores.
    allocated = _holding(state, "n1", "u2", {SGPU_COUNT: 1, VCORE: 20, VMEM: 4}, {APP: "online"})
    assert allocated == "sg-0,Metax-SGPU,4096,0:;"
    assert state.nodes["n1"].tables[SGPU].slices[0] == (ShareTag("fixed-share", "offline"), ShareTag("", "online"))


@pytest.mark.parametrize(
    ("reported", "qos", "fits"),
    [
        pytest.param("fixed-share", "fixed-share", True, id="same"),
        pytest.param("fixed-share", "burst-share", False, id="differs"),
        pytest.param("", "burst-share", True, id="none-reported"),
    ],
)
def test_a_device_in_use_without_known_shares_keeps_the_reported_policy(
    sgpu: MetaxSgpuVendor, reported: str, qos: str, fits: bool
) -> None:
    # Usage hami cannot attribute to a share (charged from an old annotation) falls back to the device plugin's
    # qosPolicy, as HAMi's does when its cache is empty.
    state = ClusterState(_vendors())
    node = state.upsert_node(_sgpu_node("n1", _sdev("sg-0", qos=reported)))
    node.tables[SGPU].charge(0, 1, 1024, 10)
    decision = _decide(state, _pod([{SGPU_COUNT: 1, VCORE: 20, VMEM: 4}], {QOS: qos}), ["n1"])
    assert (decision.node == "n1") is fits


@pytest.mark.parametrize(
    ("devices", "limits", "annotations", "counts"),
    [
        pytest.param(
            [_sdev("a", healthy=False), _sdev("b")],
            {SGPU_COUNT: 2},
            {},
            {Reason.CARD_UNHEALTHY: 1, Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1},
            id="unhealthy",
        ),
        pytest.param(
            [_sdev("a"), _sdev("b")],
            {SGPU_COUNT: 1},
            {"metax-tech.com/use-gpuuuid": "c"},
            {Reason.CARD_UUID_MISMATCH: 2},
            id="uuid",
        ),
        pytest.param(
            [_sdev("a"), _sdev("b")],
            {SGPU_COUNT: 1},
            {"metax-tech.com/nouse-gpuuuid": "a,b"},
            {Reason.CARD_UUID_MISMATCH: 2},
            id="nouse-uuid",
        ),
        pytest.param(
            [_sdev("a") | {"totalVRam": 2048}],
            {SGPU_COUNT: 1, VMEM: 4},
            {},
            {Reason.CARD_INSUFFICIENT_MEMORY: 1},
            id="memory",
        ),
        # HAMi's sGPU Fit has no device-count check: fewer candidates than asked for.
        pytest.param(
            [_sdev("a"), _sdev("b")], {SGPU_COUNT: 3}, {}, {Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 2}, id="count"
        ),
    ],
)
def test_sgpu_fit_reasons(
    devices: list[dict[str, Any]], limits: dict[str, Any], annotations: dict[str, str], counts: dict[Reason, int]
) -> None:
    state = ClusterState(_vendors())
    state.upsert_node(_sgpu_node("n1", *devices))
    decision = _decide(state, _pod([limits], {QOS: "best-effort", **annotations}), ["n1"])
    assert decision.node is None
    assert dict(decision.rejected["n1"].counts) == counts


def test_sgpu_slots_cores_and_exclusive_use() -> None:
    state = ClusterState(_vendors())
    state.upsert_node(_sgpu_node("n1", _sdev("a", count=1), _sdev("b"), _sdev("c")))
    _holding(state, "n1", "u1", {SGPU_COUNT: 1, VCORE: 50, VMEM: 1}, {QOS: "best-effort"})  # spread: a
    _holding(state, "n1", "u2", {SGPU_COUNT: 1, VCORE: 90, VMEM: 1}, {QOS: "best-effort"})  # b
    _holding(state, "n1", "u3", {SGPU_COUNT: 1, VCORE: 10, VMEM: 1}, {QOS: "best-effort"})  # c
    decision = _decide(state, _pod([{SGPU_COUNT: 1, VCORE: 95, VMEM: 1}], {QOS: "best-effort"}, uid="u4"), ["n1"])
    assert dict(decision.rejected["n1"].counts) == {
        Reason.CARD_TIME_SLICING_EXHAUSTED: 1,
        Reason.CARD_INSUFFICIENT_CORE: 2,
    }
    whole = _decide(state, _pod([{SGPU_COUNT: 1}], {QOS: "best-effort"}, uid="u5"), ["n1"])
    assert dict(whole.rejected["n1"].counts) == {
        Reason.CARD_TIME_SLICING_EXHAUSTED: 1,
        Reason.CARD_INSUFFICIENT_MEMORY: 2,
    }


def test_the_allocation_json_and_predicate_time_byte_for_byte() -> None:
    state = ClusterState(_vendors())
    state.upsert_node(_sgpu_node("n1", _sdev("sg<0>&"), _sdev("sg-1")))
    pod = _pod([{SGPU_COUNT: 1, VCORE: 50, VMEM: 4}, {}, {SGPU_COUNT: 2, VCORE: 0, VMEM: "1Gi"}], {QOS: "best-effort"})
    decision = _place(state, pod, ["n1"])
    a = decision.annotations
    # Spread: the third container tries the idle sg-1 before the shared one.
    assert a["hami.io/metax-sgpu-devices-allocated"] == (
        "sg<0>&,Metax-SGPU,4096,50:;;sg-1,Metax-SGPU,1024,0:sg<0>&,Metax-SGPU,1024,0:;"
    )
    assert a["hami.io/metax-sgpu-devices-to-allocate"] == a["hami.io/metax-sgpu-devices-allocated"]
    # Go's encoding/json: HTML characters escaped, zero numbers omitted, one array per container.
    assert a["metax-tech.com/gpu-devices-allocated"] == (
        '[[{"uuid":"sg\\u003c0\\u003e\\u0026","compute":50,"vRam":4096}],[],'
        '[{"uuid":"sg-1","vRam":1024},{"uuid":"sg\\u003c0\\u003e\\u0026","vRam":1024}]]'
    )
    assert a["metax-tech.com/predicate-time"] == str(NOW_NS)


# --- MetaLink ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zones", "n", "chosen"),
    [
        pytest.param([1, 2, 2, 0], 2, [1, 2], id="one-zone-holds-all"),
        pytest.param([2, 2, 2, 1, 1], 2, [3, 4], id="smallest-zone-that-holds-all"),
        pytest.param([1, 2, 2, 0], 3, [0, 1, 2], id="across-zones-smallest-first"),
        pytest.param([0, 1, 0, 0], 3, [1, 0, 2], id="then-unlinked-cards"),
        pytest.param([3, 3, 1, 1], 2, [2, 3], id="equal-sizes-in-zone-order"),
    ],
)
def test_whole_card_requests_prefer_one_metalink_zone(zones: list[int], n: int, chosen: list[int]) -> None:
    assert prefer_link_zones(list(range(len(zones))), n, zones) == chosen


def test_link_score_rewards_linked_choices_and_counts_broken_links() -> None:
    zones = {0: 1, 1: 1, 2: 1, 3: 2, 4: 2}
    # Take 0,1 (one link, 10): the links 0-2 and 1-2 are broken (loss 20): 10×10 − 20.
    assert link_score(range(5), [0, 1], zones.__getitem__) == 80
    # Take 3,4 (one link): nothing broken.
    assert link_score(range(5), [3, 4], zones.__getitem__) == 100
    # Take 0,3: no link; breaks 0-1, 0-2 and 3-4.
    assert link_score(range(5), [0, 3], zones.__getitem__) == -30


def test_a_whole_card_pod_takes_a_metalink_pair_and_topology_scores_the_node() -> None:
    state = ClusterState(_vendors())
    zones = [1, 2, 2, 0]
    state.upsert_node(_sgpu_node("n1", *(_sdev(f"sg-{i}", zone=z) for i, z in enumerate(zones))))
    pod = _pod([{SGPU_COUNT: 2}], {QOS: "best-effort", TOPO: "true"})
    req = prefilter(pod, state.vendors, SchedulingDefaults())
    decision = decide(state, req, ["n1"], now=NOW)
    assert decision.annotations["hami.io/metax-sgpu-devices-allocated"] == (
        "sg-1,Metax-SGPU,65536,100:sg-2,Metax-SGPU,65536,100:;"
    )
    # One link taken (10 × 10), none broken: +10000 × 100 on top of the usage score (binpack).
    usage = state.nodes["n1"].score()
    assert decision.scores["n1"] == pytest.approx(usage + 10000 * 100)
    plain = decide(
        state,
        prefilter(_pod([{SGPU_COUNT: 2}], {QOS: "best-effort"}), state.vendors, SchedulingDefaults()),
        ["n1"],
        now=NOW,
    )
    assert plain.scores["n1"] == pytest.approx(usage)


def test_online_pods_prefer_devices_with_fewer_online_shares() -> None:
    state = ClusterState(_vendors())
    state.upsert_node(_sgpu_node("n1", _sdev("a"), _sdev("b"), _sdev("c")))
    node = state.nodes["n1"]
    t = node.tables[SGPU]
    # a: one online share; b: only offline shares; c: two online shares.
    t.charge(0, 1, 1024, 0, [ShareTag("", "online")])
    t.charge(1, 2, 2048, 20, [ShareTag("best-effort", "offline"), ShareTag("best-effort", "offline")])
    t.charge(2, 2, 2048, 0, [ShareTag("", "online"), ShareTag("", "online")])
    pod = _pod([{SGPU_COUNT: 1, VMEM: 1}], {APP: "online"})
    decision = _decide(state, pod, ["n1"])
    assert decision.annotations["hami.io/metax-sgpu-devices-allocated"] == "a,Metax-SGPU,1024,0:;"
    # Online score: 10000 × (−20 × 1 online on a).
    assert decision.scores["n1"] == pytest.approx(node.score() + 10000 * -20)


def test_the_sgpu_selector_carries_the_pod_options(sgpu: MetaxSgpuVendor) -> None:
    sel = sgpu.selector({QOS: "burst-share", APP: "offline", TOPO: "false", "other": "x"})
    assert sel.options == ((APP, "offline"), (QOS, "burst-share"), (TOPO, "false"))
    assert sgpu.selector({}).options == ()


def test_decode_slices_refuses_a_malformed_allocation(sgpu: MetaxSgpuVendor) -> None:
    with pytest.raises(InvalidInput):
        sgpu.decode_slices({"hami.io/metax-sgpu-devices-allocated": "sg-0,Metax-SGPU:;"})
    assert sgpu.decode_slices({}) == ()


def test_fit_is_pure(sgpu: MetaxSgpuVendor) -> None:
    state = ClusterState(_vendors())
    node = state.upsert_node(_sgpu_node("n1", _sdev("a")))
    before = node.tables[SGPU].usage_of(0)
    req = prefilter(_pod([{SGPU_COUNT: 1, VCORE: 10}], {QOS: "best-effort"}), state.vendors, SchedulingDefaults())
    outcome = sgpu.fit(node.tables[SGPU], req.containers[0][SGPU], ctx(), req.selectors[SGPU])
    assert isinstance(outcome, Fitted)
    assert node.tables[SGPU].usage_of(0) == before


def test_a_vmemory_quota_counts_gib() -> None:
    state = ClusterState(_vendors())
    state.upsert_node(_sgpu_node("n1", _sdev("sg-0")))
    quota = {"metadata": {"namespace": "team", "name": "q"}, "spec": {"hard": {f"limits.{VMEM}": "8"}}}
    state.quotas.upsert(msgspec.convert(quota, ResourceQuota))
    _place(state, _pod([{SGPU_COUNT: 1, VMEM: 6, VCORE: 10}], {QOS: "best-effort"}), ["n1"])
    refused = _decide(state, _pod([{SGPU_COUNT: 1, VMEM: 3, VCORE: 10}], {QOS: "best-effort"}, uid="u2"), ["n1"])
    assert dict(refused.rejected["n1"].counts) == {Reason.RESOURCE_QUOTA_NOT_FIT: 1}
    fits = _decide(state, _pod([{SGPU_COUNT: 1, VMEM: 2, VCORE: 10}], {QOS: "best-effort"}, uid="u3"), ["n1"])
    assert fits.node == "n1"


# --- invariants over random pod sequences ---------------------------------------------------------------------------

_SHARE = st.fixed_dictionaries(
    {
        "count": st.integers(1, 2),
        "cores": st.sampled_from([0, 10, 30, 60, 100]),
        "gib": st.integers(0, 40),
        "qos": st.sampled_from(["best-effort", "fixed-share", "burst-share"]),
        "app": st.sampled_from(["", "", "online", "offline"]),
    }
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_SHARE, min_size=1, max_size=12))
def test_sgpu_shares_never_exceed_a_card_or_mix_policies_or_classes(shares: list[dict[str, Any]]) -> None:
    state = ClusterState(_vendors())
    state.upsert_node(_sgpu_node("n1", _sdev("a", zone=1), _sdev("b", zone=1), _sdev("c", count=2)))
    placed = 0
    for k, share in enumerate(shares):
        limits: dict[str, Any] = {SGPU_COUNT: 1 if share["app"] else share["count"], VCORE: share["cores"]}
        if share["gib"]:
            limits[VMEM] = share["gib"]
        annotations = {QOS: share["qos"]} | ({APP: share["app"]} if share["app"] else {})
        pod = _pod([limits], annotations, uid=f"u{k}")
        req = prefilter(pod, state.vendors, SchedulingDefaults())
        if decide(state, req, ["n1"], now=NOW, now_ns=NOW_NS).node is not None:
            _place(state, pod, ["n1"])  # also checks the record read back from the annotations
            placed += 1
    table = state.nodes["n1"].tables[SGPU]
    for i, info in enumerate(table.infos):
        assert table.used[i] <= info.count
        assert table.usedmem[i] <= info.devmem
        assert table.usedcores[i] <= info.devcore
        tags = [t for t in table.slices[i] if isinstance(t, ShareTag)]
        assert len({t.qos for t in tags if t.qos}) <= 1, tags
        assert len({t.app_class == "" for t in tags}) <= 1, tags  # classed and plain pods never share a card
    assert placed >= 1  # the first pod always fits the empty node
    assert sum(table.used) >= placed
    assert state.verify() == []
