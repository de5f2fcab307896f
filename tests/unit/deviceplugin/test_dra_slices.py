"""The DRA ResourceSlice: HAMi's k8s-dra-driver's shapes (dra.md §1), in a stable order, without its crashes."""

from __future__ import annotations

import json
import random

import msgspec
import pytest

from hami.deviceplugin.discovery import GpuInfo
from hami.deviceplugin.dra.slices import (
    DRIVER,
    PCIE_ROOT,
    TAINT_KEY,
    NodeFacts,
    resource_slice,
    semver,
    slice_devices,
)
from hami.deviceplugin.nvml import GpuDetails
from hami.protocol.dra import ResourceSlice

T4 = GpuInfo(uuid="GPU-aaa", index=0, name="Tesla T4", memory_mib=15360, bus_id="00000000:3B:00.0", minor=2)
A10 = GpuInfo(uuid="GPU-bbb", index=1, name="NVIDIA A10", memory_mib=23028, bus_id="00000000:5E:00.0", minor=0)
DETAILS = {"GPU-aaa": GpuDetails(brand="Tesla", architecture="Turing", compute_capability="7.5")}
NODE = NodeFacts(driver_version="580.65.06", cuda_version=(12, 8))


def build(gpus: list[GpuInfo], **kwargs: object) -> dict[str, object]:
    devices = slice_devices(gpus, details=DETAILS, pcie_roots={"GPU-aaa": "pci0000:3a"}, **kwargs)  # type: ignore[arg-type]
    return resource_slice("node-1", "uid-1", devices, NODE)


def test_one_pool_per_node_named_after_it_owned_by_the_node() -> None:
    obj = build([T4])
    spec = obj["spec"]
    assert spec["driver"] == "hami-core-gpu.project-hami.io" == DRIVER
    assert spec["nodeName"] == "node-1"
    assert spec["pool"] == {"name": "node-1", "generation": 1, "resourceSliceCount": 1}
    assert obj["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "node-1",
        "uid": "uid-1",
        "controller": True,
    }
    assert obj["apiVersion"] == "resource.k8s.io/v1"


def test_device_shape_matches_hamis_driver() -> None:
    (device,) = build([T4])["spec"]["devices"]
    assert device["name"] == "hami-gpu-2"  # the minor number, not the index
    assert device["allowMultipleAllocations"] is True
    assert device["attributes"] == {
        "type": {"string": "hami-gpu"},
        "uuid": {"string": "GPU-aaa"},
        "minor": {"int": 2},
        "productName": {"string": "Tesla T4"},
        "brand": {"string": "Tesla"},
        "architecture": {"string": "Turing"},
        "pcieBusID": {"string": "00000000:3B:00.0"},
        "cudaComputeCapability": {"version": "7.5.0"},
        "driverVersion": {"version": "580.65.6"},
        "cudaDriverVersion": {"version": "12.8.0"},
        PCIE_ROOT: {"string": "pci0000:3a"},
    }
    assert "index" not in device["attributes"]
    total = "15Gi"  # 15360 MiB, as the API server spells it
    assert device["capacity"] == {
        "cores": {
            "value": "100",
            "requestPolicy": {"default": "100", "validRange": {"min": "0", "max": "100", "step": "1"}},
        },
        "memory": {
            "value": total,
            "requestPolicy": {"default": total, "validRange": {"min": "1Mi", "max": total, "step": "1Mi"}},
        },
    }
    assert "taints" not in device


def test_devices_are_sorted_by_minor_whatever_the_discovery_order() -> None:
    gpus = [T4, A10, GpuInfo(uuid="GPU-c", index=2, name="x", memory_mib=1000, minor=1)]
    first = build(gpus)
    for _ in range(5):
        random.shuffle(gpus)
        assert build(gpus) == first
    assert [d["name"] for d in first["spec"]["devices"]] == ["hami-gpu-0", "hami-gpu-1", "hami-gpu-2"]


def test_unknown_pcie_root_and_details_are_left_out_not_a_crash() -> None:
    (device,) = build([A10])["spec"]["devices"]  # no details, no PCIe root known
    assert PCIE_ROOT not in device["attributes"]
    for name in ("brand", "architecture", "cudaComputeCapability"):
        assert name not in device["attributes"]
    assert device["attributes"]["driverVersion"] == {"version": "580.65.6"}


def test_unhealthy_gpu_stays_listed_with_a_noschedule_taint() -> None:
    devices = build([T4, A10], unhealthy=frozenset({"GPU-aaa"}))["spec"]["devices"]
    by_name = {d["name"]: d for d in devices}
    assert by_name["hami-gpu-2"]["taints"] == [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    assert "taints" not in by_name["hami-gpu-0"]


@pytest.mark.parametrize(
    "gpu",
    [
        GpuInfo(uuid="GPU-m", index=0, name="A100", memory_mib=40960, minor=0, mig_enabled=True),
        GpuInfo(uuid="GPU-n", index=0, name="T4", memory_mib=None, minor=0),
        GpuInfo(uuid="GPU-o", index=0, name="T4", memory_mib=100, minor=None),
    ],
    ids=["mig-enabled", "memory-unknown", "minor-unknown"],
)
def test_gpus_that_cannot_be_offered_are_left_out(gpu: GpuInfo) -> None:
    assert build([gpu, A10])["spec"]["devices"][0]["name"] == "hami-gpu-0"
    assert len(build([gpu, A10])["spec"]["devices"]) == 1


def test_the_slice_decodes_as_the_ledger_reads_slices() -> None:
    obj = msgspec.json.decode(json.dumps(build([T4])), type=ResourceSlice)
    (device,) = obj.spec.devices
    assert device.attributes["uuid"].text() == "GPU-aaa"
    assert device.capacity["memory"].value == "15Gi"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("580.65.06", "580.65.6"), ("8.0", "8.0.0"), ("12", "12.0.0"), ("535.104.05-open", "535.104.5"), ("x", None)],
)
def test_semver(text: str, expected: str | None) -> None:
    assert semver(text) == expected
