"""``hami.devices.kubelet``: a vendor's registered devices count only while kubelet's allocatable backs them."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.devices.base import Vendor
from hami.devices.kubelet import KubeletUnits, allocatable_shortfall, kubelet_units
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Node, NodeStatus, ObjectMeta, QuantityValue
from tests.unit.scheduling.builders import gpu, mig_gpu, vendors

VENDORS = vendors()
NVIDIA = VENDORS["NVIDIA"]
DCU = VENDORS["DCU"]  # a registration annotation; declares no units of its own
MLU = VENDORS["MLU"]  # devices from the node's capacity


def node(allocatable: Mapping[str, QuantityValue] | None) -> Node:
    status = NodeStatus(allocatable=dict(allocatable)) if allocatable is not None else NodeStatus()
    return Node(metadata=ObjectMeta(name="n1"), status=status)


TWO_SPLIT_10 = (gpu("GPU-0", count=10), gpu("GPU-1", index=1, count=10))


@pytest.mark.parametrize(
    ("vendor", "devices", "want"),
    [
        pytest.param(NVIDIA, TWO_SPLIT_10, 20, id="nvidia-count-fake-devices-per-card"),
        pytest.param(NVIDIA, (gpu("GPU-0"), gpu("GPU-1", health=False)), 10, id="nvidia-unhealthy-cards-need-none"),
        pytest.param(NVIDIA, (mig_gpu("GPU-0", count=7), gpu("GPU-1", count=4)), 5, id="nvidia-mig-card-needs-one"),
        pytest.param(NVIDIA, (gpu("GPU-0", health=False),), 0, id="nvidia-nothing-healthy-needs-nothing"),
        pytest.param(DCU, (gpu("d0", count=4), gpu("d1", count=4)), 2, id="registration-one-per-healthy-device"),
        pytest.param(MLU, (gpu("m0"), gpu("m1"), gpu("m2")), 1, id="capacity-vendor-needs-any"),
    ],
)
def test_the_units_kubelet_must_report(vendor: Vendor, devices: tuple[DeviceInfo, ...], want: int) -> None:
    assert kubelet_units(vendor, devices) == want


def test_only_nvidia_declares_its_units() -> None:
    assert isinstance(NVIDIA, KubeletUnits)
    assert not isinstance(DCU, KubeletUnits)


@pytest.mark.parametrize(
    ("allocatable", "want"),
    [
        pytest.param(None, None, id="node-without-status-is-not-judged"),
        pytest.param({"cpu": "4"}, None, id="resource-not-reported-is-not-judged"),
        pytest.param({"nvidia.com/gpu": "20"}, None, id="all-units-reported"),
        pytest.param({"nvidia.com/gpu": "24"}, None, id="more-than-registered"),
        pytest.param(
            {"nvidia.com/gpu": "0"},
            "kubelet reports nvidia.com/gpu allocatable 0 where the registration (hami.io/node-nvidia-register) of "
            "2 healthy device(s) needs 20: the device plugin is gone or restarting",
            id="plugin-gone",
        ),
        pytest.param(
            {"nvidia.com/gpu": 10},
            "kubelet reports nvidia.com/gpu allocatable 10 where the registration (hami.io/node-nvidia-register) of "
            "2 healthy device(s) needs 20: kubelet serves fewer devices",
            id="fewer-than-registered",
        ),
        pytest.param(
            {"nvidia.com/gpu": "1.5"},
            "kubelet's count cannot be read: status.allocatable[nvidia.com/gpu]: ",
            id="unreadable-fails-closed",
        ),
    ],
)
def test_the_shortfall_of_a_node(allocatable: Mapping[str, QuantityValue] | None, want: str | None) -> None:
    got = allocatable_shortfall(NVIDIA, node(allocatable), TWO_SPLIT_10)
    if want is None or got is None:
        assert got == want
    else:
        assert got.startswith(want)


def test_a_capacity_vendor_is_judged_only_when_kubelet_reports_none() -> None:
    cards = (gpu("m0"), gpu("m1"))
    assert allocatable_shortfall(MLU, node({"cambricon.com/vmlu": "1"}), cards) is None
    assert allocatable_shortfall(MLU, node({"cambricon.com/vmlu": "0"}), cards) == (
        "kubelet reports cambricon.com/vmlu allocatable 0 where the capacity of 2 healthy device(s) needs 1: "
        "the device plugin is gone or restarting"
    )


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # never fails for a slow machine
@given(
    counts=st.lists(st.tuples(st.integers(0, 16), st.booleans()), max_size=8),
    reported=st.integers(0, 200),
    vendor=st.sampled_from([NVIDIA, DCU, MLU]),
)
def test_a_node_is_unfit_exactly_when_kubelet_reports_fewer_units_than_the_healthy_devices_need(
    counts: list[tuple[int, bool]], reported: int, vendor: Vendor
) -> None:
    devices = tuple(gpu(f"d{i}", index=i, count=c, health=h) for i, (c, h) in enumerate(counts))
    healthy = [d for d in devices if d.health]
    if vendor is NVIDIA:
        need = sum(d.count for d in healthy)
    elif vendor is DCU:
        need = len(healthy)
    else:
        need = 1 if healthy else 0
    resource = vendor.resources.count
    short = allocatable_shortfall(vendor, node({resource: str(reported)}), devices)
    assert (short is not None) == (reported < need)
    if short is not None:
        assert f"{resource} allocatable {reported}" in short
    # the same node without the resource in its allocatable (no kubelet behind it) is never judged
    assert allocatable_shortfall(vendor, node({"cpu": "8"}), devices) is None
