"""AWS Neuron (``AWSNeuron``), from webhook-bind-plugin-vendors.md §7, vendors-appendix.md and HAMi v2.10.0
``pkg/device/awsneuron``: inventory from capacity with cores per device decided per node (malformed values
quarantined), request forms and the core split, contiguous device runs, every Fit reason, the annotations byte for
byte through the real decision cycle, and the webhook's validation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from hami.config import default_device_config
from hami.devices import registered_keys, vendors_from_config
from hami.devices.awsneuron import (
    ALLOC_TIME,
    ASSIGNED_IDS,
    NEURON_ALLOCATED,
    NEURON_KEYS,
    PREDICATE_NODE,
    RESOURCE_TYPE,
    AwsNeuronConfig,
    AwsNeuronVendor,
    contiguous_run,
)
from hami.devices.base import ContainerRequest, FitContext, Fitted, Selector, Unfit
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

DEV, CORE = "aws.amazon.com/neuron", "aws.amazon.com/neuroncore"
NEURON = "AWSNeuron"
NS = "default"


def node(name: str, devices: int | str | None, cores: int | str | None, instance: str = "trn1.32xlarge") -> Node:
    capacity: dict[str, str] = {}
    if devices is not None:
        capacity[DEV] = str(devices)
    if cores is not None:
        capacity[CORE] = str(cores)
    raw = {
        "metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": instance}},
        "status": {"capacity": capacity},
    }
    return msgspec.convert(raw, Node)


def ctr(limits: Mapping[str, Any] | None = None, requests: Mapping[str, Any] | None = None) -> Container:
    return msgspec.convert({"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}, Container)


@pytest.fixture
def neuron() -> AwsNeuronVendor:
    return AwsNeuronVendor(AwsNeuronConfig())


def world(*nodes: Node) -> ClusterState:
    state = ClusterState(vendors_from_config(default_device_config()))
    for n in nodes:
        state.upsert_node(n)
    return state


def test_registered_with_hamis_keys_and_no_lock_or_handshake() -> None:
    assert isinstance(vendors_from_config(default_device_config())[NEURON], AwsNeuronVendor)
    assert (NEURON_KEYS.to_allocate, NEURON_KEYS.allocated) == (None, "hami.io/aws-neuron-devices-allocated")
    assert NEURON_KEYS.lock is None
    assert NEURON_KEYS.handshake is None
    assert NEURON_KEYS in registered_keys()


# --- inventory ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("devices", "cores", "count", "mask"),
    [(4, 8, 2, 0b11), (4, 16, 4, 0b11), (2, 2, 1, 0b1), (16, 32, 2, 0b11)],
)
def test_inventory_cores_per_device_from_this_nodes_capacity(
    neuron: AwsNeuronVendor, devices: int, cores: int, count: int, mask: int
) -> None:
    inv = neuron.decode_inventory(node("n1", devices, cores, "inf1.6xlarge"))
    assert inv is not None
    assert [(d.id, d.index, d.count, d.devmem, d.devcore, d.type, d.health) for d in inv.devices] == [
        (f"n1-AWSNeuron-{i}", i, count, 0, mask, NEURON, True) for i in range(devices)
    ]
    assert inv.node_info == {"cores_per_device": str(cores // devices), "instance_type": "inf1.6xlarge"}


def test_two_node_geometries_side_by_side() -> None:
    """Deliberate difference: HAMi v2.10.0 would use the first node's cores per device for both."""
    state = world(node("inf1", 4, 16, "inf1.6xlarge"), node("trn1", 16, 32))
    assert state.nodes["inf1"].node_info[NEURON]["cores_per_device"] == "4"
    assert state.nodes["trn1"].node_info[NEURON]["cores_per_device"] == "2"


@pytest.mark.parametrize(
    ("devices", "cores", "reason"),
    [
        ("lots", 8, f"status.capacity[{DEV}]"),
        (4, 7, "not a multiple of the 4 Neuron devices"),
        (4, None, "no NeuronCores"),
        (4, 0, "no NeuronCores"),
        (-2, 4, "must not be negative"),
    ],
)
def test_malformed_capacity_quarantines_neuron_on_that_node(devices: int | str, cores: int | None, reason: str) -> None:
    state = world(node("n1", devices, cores))
    assert NEURON not in state.nodes["n1"].tables
    assert reason in state.nodes["n1"].problems[NEURON]


def test_no_devices_means_no_inventory(neuron: AwsNeuronVendor) -> None:
    assert neuron.decode_inventory(node("n1", None, 8)) is None
    assert neuron.decode_inventory(node("n1", 0, 0)) is None


# --- requests -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "requests", "expected"),
    [
        ({DEV: 2}, {}, ContainerRequest(NEURON, 2, coresreq=2, variant="devices")),
        ({}, {DEV: 1}, ContainerRequest(NEURON, 1, coresreq=2, variant="devices-requested")),
        ({DEV: 1, CORE: 1}, {}, ContainerRequest(NEURON, 1, coresreq=2, variant="devices")),  # the count wins
        ({CORE: 1}, {}, ContainerRequest(NEURON, 1, coresreq=1, variant="cores:1")),
        ({}, {CORE: 2}, ContainerRequest(NEURON, 1, coresreq=2, variant="cores:2")),
        ({CORE: 6}, {}, ContainerRequest(NEURON, 3, coresreq=2, variant="cores:6")),
        ({}, {}, None),
    ],
)
def test_request(
    neuron: AwsNeuronVendor, limits: dict[str, int], requests: dict[str, int], expected: ContainerRequest | None
) -> None:
    assert neuron.parse_request(ctr(limits, requests), "containers[0](c)") == expected


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        ({DEV: 0}, "must be greater than 0"),
        ({CORE: 0}, "must be greater than 0"),
        ({CORE: 3}, "must be at most 2 (one device) or a multiple of 2"),
        ({CORE: "1.5"}, CORE),
        ({DEV: 2**31}, "int32"),
    ],
)
def test_request_refused(neuron: AwsNeuronVendor, limits: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidInput) as err:
        neuron.parse_request(ctr(limits), "containers[0](c)")
    assert reason in str(err.value)
    assert "containers[0](c)" in str(err.value)


# --- contiguous device runs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "count", "instance", "expected"),
    [
        ("1111", 2, "inf2.24xlarge", (0, 1)),
        ("0111", 2, "inf2.24xlarge", (1, 2)),  # inf*: any start
        ("1011", 2, "Inf1.6xlarge", (2, 3)),
        ("1101", 3, "inf2.24xlarge", ()),
        ("1111", 2, "trn1.32xlarge", ()),  # other types: only runs of 1, 4, 8 or 16
        ("01111111", 4, "trn1.32xlarge", (4, 5, 6, 7)),  # aligned to the run length
        ("11110000", 4, "trn1.32xlarge", (0, 1, 2, 3)),
        ("01111110", 4, "trn1.32xlarge", ()),
        ("0111", 1, "trn1.32xlarge", (1,)),
        ("1111", 8, "trn1.32xlarge", ()),  # longer than the node
        ("1" * 16, 16, "", tuple(range(16))),
    ],
)
def test_contiguous_run(free: str, count: int, instance: str, expected: tuple[int, ...]) -> None:
    assert contiguous_run([c == "1" for c in free], count, instance) == expected


# --- fit ----------------------------------------------------------------------------------------------------


def neuron_table(
    neuron: AwsNeuronVendor, devices: int, cores: int, instance: str = "trn1.32xlarge"
) -> tuple[DeviceTable, dict[str, str]]:
    inv = neuron.decode_inventory(node("n1", devices, cores, instance))
    assert inv is not None
    return DeviceTable(NEURON, inv.devices), dict(inv.node_info)


def fit_ctx(info: Mapping[str, str], cordoned: frozenset[str] = frozenset()) -> FitContext:
    return FitContext(policy=parse_gpu_policy("spread", False), node_info=dict(info), cordoned=cordoned)


@pytest.mark.parametrize(
    ("used_mask", "creq", "mask"),
    [
        (0, ContainerRequest(NEURON, 1, coresreq=1, variant="cores:1"), 0b01),
        (0, ContainerRequest(NEURON, 1, coresreq=2, variant="cores:2"), 0b11),
        (0, ContainerRequest(NEURON, 1, coresreq=2, variant="devices"), 0b11),
        (0b01, ContainerRequest(NEURON, 1, coresreq=1, variant="cores:1"), 0b10),
        (0b10, ContainerRequest(NEURON, 1, coresreq=1, variant="cores:1"), 0b01),
    ],
)
def test_one_device_takes_the_lowest_free_cores(
    neuron: AwsNeuronVendor, used_mask: int, creq: ContainerRequest, mask: int
) -> None:
    table, info = neuron_table(neuron, 1, 2)
    if used_mask:
        table.charge(0, 1, 0, used_mask)
    out = neuron.fit(table, creq, fit_ctx(info), Selector())
    assert isinstance(out, Fitted)
    (p,) = out.placements
    assert (p.device.uuid, p.device.type, p.device.usedmem, p.device.usedcores) == ("n1-AWSNeuron-0", NEURON, 0, mask)


@pytest.mark.parametrize(
    ("charges", "creq", "annotations", "cordoned", "counts"),
    [
        (
            [(1, 0b11)],
            ContainerRequest(NEURON, 1, coresreq=1, variant="cores:1"),
            {},
            (),
            {Reason.CARD_INSUFFICIENT_CORE: 1},
        ),
        (
            [(1, 0b01)],
            ContainerRequest(NEURON, 1, coresreq=2, variant="devices"),
            {},
            (),
            {Reason.CARD_INSUFFICIENT_CORE: 1},
        ),
        (
            [(2, 0)],
            ContainerRequest(NEURON, 1, coresreq=1, variant="cores:1"),
            {},
            (),
            {Reason.CARD_TIME_SLICING_EXHAUSTED: 1},
        ),
        (
            [],
            ContainerRequest(NEURON, 1, coresreq=1, variant="cores:1"),
            {"aws.amazon.com/use-neuron-uuid": "n9-AWSNeuron-0"},
            (),
            {Reason.CARD_UUID_MISMATCH: 1},
        ),
        (
            [],
            ContainerRequest(NEURON, 1, coresreq=1, variant="cores:1"),
            {},
            ("n1-AWSNeuron-0",),
            {Reason.CARD_CORDONED: 1},
        ),
        ([], ContainerRequest(NEURON, 2, coresreq=2, variant="devices"), {}, (), {Reason.NODE_INSUFFICIENT_DEVICE: 1}),
    ],
)
def test_one_device_reasons(
    neuron: AwsNeuronVendor,
    charges: list[tuple[int, int]],
    creq: ContainerRequest,
    annotations: dict[str, str],
    cordoned: tuple[str, ...],
    counts: dict[Reason, int],
) -> None:
    table, info = neuron_table(neuron, 1, 2)
    for slots, mask in charges:
        table.charge(0, slots, 0, mask)
    out = neuron.fit(table, creq, fit_ctx(info, frozenset(cordoned)), neuron.selector(annotations))
    assert isinstance(out, Unfit)
    assert dict(out.counts) == counts


def test_several_devices_take_an_aligned_idle_run(neuron: AwsNeuronVendor) -> None:
    table, info = neuron_table(neuron, 8, 16)
    table.charge(1, 1, 0, 0b01)
    out = neuron.fit(table, ContainerRequest(NEURON, 4, coresreq=2, variant="cores:8"), fit_ctx(info), Selector())
    assert isinstance(out, Fitted)
    assert [(p.device.uuid, p.device.usedcores) for p in out.placements] == [
        (f"n1-AWSNeuron-{i}", 0b11) for i in range(4, 8)
    ]
    table.charge(5, 1, 0, 0b01)
    out = neuron.fit(table, ContainerRequest(NEURON, 4, coresreq=2, variant="devices"), fit_ctx(info), Selector())
    assert isinstance(out, Unfit)
    assert dict(out.counts) == {Reason.NUMA_NOT_FIT: 1}
    assert out.total == 8


def test_a_cordoned_device_breaks_a_run(neuron: AwsNeuronVendor) -> None:
    table, info = neuron_table(neuron, 4, 8, "inf2.24xlarge")
    out = neuron.fit(
        table,
        ContainerRequest(NEURON, 3, coresreq=2, variant="devices"),
        fit_ctx(info, frozenset({"n1-AWSNeuron-1"})),
        Selector(),
    )
    assert isinstance(out, Unfit)
    out = neuron.fit(
        table,
        ContainerRequest(NEURON, 2, coresreq=2, variant="devices"),
        fit_ctx(info, frozenset({"n1-AWSNeuron-1"})),
        Selector(),
    )
    assert isinstance(out, Fitted)
    assert [p.device.uuid for p in out.placements] == ["n1-AWSNeuron-2", "n1-AWSNeuron-3"]


def test_a_core_count_this_node_cannot_split_is_mode_not_fit(neuron: AwsNeuronVendor) -> None:
    table, info = neuron_table(neuron, 4, 4, "inf1.xlarge")  # one core per device
    out = neuron.fit(table, ContainerRequest(NEURON, 1, coresreq=2, variant="cores:2"), fit_ctx(info), Selector())
    assert isinstance(out, Fitted)  # two one-core devices
    assert len(out.placements) == 2
    info_two = {**info, "cores_per_device": "2"}
    out = neuron.fit(table, ContainerRequest(NEURON, 1, coresreq=2, variant="cores:3"), fit_ctx(info_two), Selector())
    assert isinstance(out, Unfit)
    assert set(out.counts) == {Reason.MODE_NOT_FIT}


# --- annotations through the decision cycle -----------------------------------------------------------------


def _decide(state: ClusterState, p: Any, now_ns: int = 9_000_000_042) -> Any:
    request = prefilter(p, state.vendors, SchedulingDefaults())
    decision = decide(state, request, sorted(state.nodes), 9, now_ns=now_ns)
    return request, decision


def test_device_request_annotations_byte_for_byte() -> None:
    state = world(node("n1", 4, 8, "inf2.24xlarge"))
    _, decision = _decide(state, pod([container({DEV: 2}, name="a")]))
    assert decision.annotations == {
        keys.VGPU_NODE: "n1",
        keys.VGPU_TIME: "9",
        "hami.io/aws-neuron-devices-allocated": "n1-AWSNeuron-0,AWSNeuron,0,3:n1-AWSNeuron-1,AWSNeuron,0,3:;",
        ASSIGNED_IDS: "0,1",
        ALLOC_TIME: "9000000042",
        NEURON_ALLOCATED: "false",
        PREDICATE_NODE: "n1",
    }


def test_core_request_annotations_list_core_indexes_and_the_resource_type() -> None:
    state = world(node("n1", 1, 4, "inf1.xlarge"))  # four cores per device: indexes are 4 × device + core
    request, first = _decide(state, pod([container({CORE: 1}, name="a")], uid="u1"))
    assert first.annotations["hami.io/aws-neuron-devices-allocated"] == "n1-AWSNeuron-0,AWSNeuron,0,1:;"
    assert first.annotations[ASSIGNED_IDS] == "0"
    assert first.annotations[RESOURCE_TYPE] == CORE
    reserve(state, request, first)
    _, second = _decide(state, pod([container({CORE: 1}, name="a")], uid="u2", name="p2"))
    assert second.annotations["hami.io/aws-neuron-devices-allocated"] == "n1-AWSNeuron-0,AWSNeuron,0,2:;"
    assert second.annotations[ASSIGNED_IDS] == "1"


def test_ids_accumulate_over_containers_each_in_its_own_form() -> None:
    state = world(node("n1", 2, 4, "inf2.xlarge"))
    init = [container({CORE: 1}, name="warm")]
    _, decision = _decide(state, pod([container({DEV: 1}, name="main")], init=init))
    devices = decision.devices[NEURON]
    warm, main = devices[0][0], devices[1][0]
    warm_index, main_index = int(warm.uuid[-1]), int(main.uuid[-1])
    assert decision.annotations[ASSIGNED_IDS] == f"{2 * warm_index},{main_index}"
    assert decision.annotations[RESOURCE_TYPE] == CORE
    placed = pod([container({DEV: 1}, name="main")], init=init, annotations=decision.annotations)
    record = record_from_pod(placed, state.vendors)
    assert record is not None
    assert record.problem is None
    assert record.devices[NEURON] == devices


def test_a_requests_only_device_count_gets_core_indexes() -> None:
    """vendors-appendix.md: AWS_NEURON_IDS holds core indexes whenever the count is not in limits."""
    state = world(node("n1", 1, 2, "trn1.2xlarge"))
    raw = {"name": "a", "resources": {"requests": {DEV: "1"}}}
    _, decision = _decide(state, pod([raw]))
    assert decision.annotations[ASSIGNED_IDS] == "0,1"
    assert decision.annotations[RESOURCE_TYPE] == CORE


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
    "resources", [{"limits": {DEV: "1"}}, {"requests": {DEV: "2"}}, {"limits": {CORE: "1"}}, {"requests": {CORE: "4"}}]
)
def test_webhook_accepts_and_routes_to_hami(resources: dict[str, Any]) -> None:
    verdict = admission().review(raw_pod(resources), NS)
    assert verdict.allowed, verdict.message
    assert verdict.patch == ({"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"},)


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"limits": {DEV: "0"}}, "must be greater than 0"),
        ({"requests": {CORE: "0"}}, "must be greater than 0"),
        ({"limits": {CORE: "5"}}, "must be at most 2 (one device) or a multiple of 2"),
    ],
)
def test_webhook_denials(resources: dict[str, Any], message: str) -> None:
    verdict = admission().review(raw_pod(resources), NS)
    assert not verdict.allowed
    assert message in verdict.message
    assert "containers[0](main)" in verdict.message
