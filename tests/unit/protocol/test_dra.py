"""DRA object views decode the captured v1.36.3 objects (fields hami reads, the rest ignored)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import msgspec
import pytest

from hami.protocol.dra import DeviceClass, NodeSelector, ResourceClaim, ResourceSlice, local_name

T = TypeVar("T")
FIXTURES = Path(__file__).parents[1] / "scheduling" / "fixtures" / "dra"


def decode(name: str, kind: type[T]) -> T:
    return msgspec.json.decode((FIXTURES / f"{name}.json").read_bytes(), type=kind)


def test_a_resource_slice_decodes_with_its_devices_attributes_and_capacities() -> None:
    sl = decode("resourceslice", ResourceSlice)
    spec = sl.spec
    assert (spec.driver, spec.pool.name, spec.pool.generation, spec.node_name) == (
        "gpu.nvidia.com",
        "dra-node-1",
        1,
        "dra-node-1",
    )
    gpu0, _, gpu2 = spec.devices
    assert gpu0.attributes["uuid"].text() == "GPU-11111111-1111-1111-1111-111111111111"
    assert gpu0.attributes["index"].text() == "0"
    assert (gpu0.capacity["memory"].value, gpu0.allow_multiple_allocations) == ("80Gi", True)
    policy = gpu0.capacity["cores"].request_policy
    assert policy is not None
    assert policy.default == "100"
    assert (gpu2.allow_multiple_allocations, gpu2.capacity["memory"].request_policy) == (None, None)


def test_a_shared_claim_decodes_its_share_consumed_capacity_and_pods() -> None:
    claim = decode("claim-shared-memory", ResourceClaim)
    assert claim.key == "dra-samples/claim-shared-memory"
    allocation = claim.status.allocation
    assert allocation is not None
    assert allocation.node_selector is not None
    (res,) = allocation.devices.results
    assert (res.driver, res.pool, res.device, res.request) == ("gpu.nvidia.com", "dra-node-1", "gpu-0", "gpu")
    assert res.share_id == "1b023f2a-7b9b-415a-b6ee-1913ea129e1c"
    assert res.consumed_capacity == {"cores": "100", "memory": "10Gi"}
    assert allocation.node_selector.node_name() == "dra-node-1"
    assert [(r.resource, r.name) for r in claim.status.reserved_for] == [
        ("pods", "pod-shared-memory"),
        ("pods", "pod-shared-memory-b"),
    ]


@pytest.mark.parametrize(
    ("name", "allocated"),
    [("claim-exclusive", True), ("claim-shared-memory-cleared", False), ("claim-two-devices", True)],
)
def test_claims_decode_allocated_or_not(name: str, allocated: bool) -> None:
    assert (decode(name, ResourceClaim).status.allocation is not None) is allocated


def test_an_exclusive_result_has_no_share_and_no_consumed_capacity() -> None:
    allocation = decode("claim-exclusive", ResourceClaim).status.allocation
    assert allocation is not None
    (res,) = allocation.devices.results
    assert (res.share_id, res.consumed_capacity) == (None, {})


def test_a_device_class_decodes_its_extended_resource_name() -> None:
    assert decode("deviceclass-extended-resource", DeviceClass).spec.extended_resource_name == "example.com/gpu"
    assert decode("deviceclass", DeviceClass).spec.extended_resource_name == ""


def test_local_names_drop_only_the_drivers_own_domain() -> None:
    assert local_name("gpu.nvidia.com/uuid", "gpu.nvidia.com") == "uuid"
    assert local_name("uuid", "gpu.nvidia.com") == "uuid"
    assert local_name("other.example.com/uuid", "gpu.nvidia.com") == "other.example.com/uuid"


def test_a_node_selector_names_one_node_or_none() -> None:
    two = msgspec.convert(
        {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]},
        type=NodeSelector,
    )
    assert two.node_name() == ""
    assert NodeSelector().node_name() == ""
