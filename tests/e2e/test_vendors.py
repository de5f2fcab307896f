"""One pod per vendor family, and a pod mixing families, bound through the real kube-scheduler and hami.

Each family's case is in ``tests/e2e/vendors.py`` (``FAMILY_CASES``): a fake node as its device plugin registers
it, one container's limits, and the allocation annotations HAMi would write, byte for byte. A family added there
is tested here without a change, alone and in a pod beside NVIDIA.
"""

from __future__ import annotations

import msgspec
import pytest

from hami.devices.hygon import HYGON_KEYS
from hami.protocol import keys
from hami.protocol.objects import Node
from tests.e2e.cluster import wait_until
from tests.e2e.vendors import FAMILY_CASES, VendorStackFactory


@pytest.mark.parametrize("family", sorted(FAMILY_CASES))
def test_one_pod_of_the_family_is_bound_with_its_annotations(vendor_stack: VendorStackFactory, family: str) -> None:
    case = FAMILY_CASES[family]
    s = vendor_stack(case.family)
    node = s.node("n1", case)
    s.pod("p1", [case.limits], case.pod_annotations)
    pod = s.bound("p1")

    assert pod["spec"]["nodeName"] == node
    annotations = pod["metadata"]["annotations"]
    for key, value in case.expected(node).items():
        assert annotations.get(key) == value, key
    assert list(s.allocations(pod)) == [case.vendor]
    assert annotations[keys.VGPU_NODE] == node
    for key, per_second in case.times.items():  # the decision time, as hami.io/vgpu-time in seconds
        assert annotations[key].isdigit(), key
        assert int(annotations[key]) // per_second == int(annotations[keys.VGPU_TIME]), key
    vendor_keys = s.vendors[case.vendor].keys
    if vendor_keys.lock is None:  # the family's plugin releases no lock: hami took none
        assert s.plugin is not None
        assert not set(s.plugin.lock_keys) & set(s.node_annotations(node))
    else:  # the device-plugin stand-in saw the pod on its node and released the vendor's lock
        wait_until(lambda: s.lock_released(node, "p1"), description=f"the node lock of {node} released for p1")
        assert s.kube.get_pod(s.namespace, "p1")["metadata"]["annotations"][keys.BIND_PHASE] == "success"
    handshake = vendor_keys.handshake
    if handshake is not None:  # hami answers the family's device plugin on the node
        wait_until(lambda: handshake in s.node_annotations(node), description=f"{handshake} on {node}")


MIXES = [("nvidia", family) for family in sorted(FAMILY_CASES) if family != "nvidia"]
"""NVIDIA with each other family that has a case: a new family's mixed pod is tested without a change here."""


@pytest.mark.parametrize(("first", "second"), MIXES, ids=[f"{a}+{b}" for a, b in MIXES])
def test_a_pod_mixing_families_gets_each_familys_devices_on_one_node(
    vendor_stack: VendorStackFactory, first: str, second: str
) -> None:
    """One container of each family and one asking for both (only the latter for a ``one_container`` family): one
    node holding both families, each vendor's allocation in its own annotations, devices of that node only; a node
    with only the first family is not chosen."""
    a, b = FAMILY_CASES[first], FAMILY_CASES[second]
    s = vendor_stack(a.family, b.family)
    s.node("first-only", a)
    both = s.node("both", a, b)
    containers = (
        [a.limits, {**a.limits, **b.limits}] if b.one_container else [a.limits, b.limits, {**a.limits, **b.limits}]
    )
    s.pod("mixed", containers)
    pod = s.bound("mixed")

    assert pod["spec"]["nodeName"] == both
    allocations = s.allocations(pod)
    assert sorted(allocations) == sorted([a.vendor, b.vendor])
    # one slot per container; each vendor's devices only where asked for
    assert [len(c) for c in allocations[a.vendor]] == [int(set(a.limits) <= set(c)) for c in containers]
    assert [len(c) for c in allocations[b.vendor]] == [int(set(b.limits) <= set(c)) for c in containers]
    node = msgspec.convert(s.kube.get(f"/api/v1/nodes/{both}"), Node)
    for vendor, devices in allocations.items():
        inventory = s.vendors[vendor].decode_inventory(node)
        assert inventory is not None
        assert {d.uuid for c in devices for d in c} <= {info.id for info in inventory.devices}
    wait_until(lambda: s.lock_released(both, "mixed"), description=f"the node lock of {both} released")


def test_a_family_switched_off_is_left_alone(vendor_stack: VendorStackFactory) -> None:
    """``--disable-devices=hygon`` (the chart's ``devices.hygon.enabled: false``): hami neither reads the node's DCU
    registration (no handshake stamped) nor allocates DCUs; NVIDIA on the same node is scheduled as usual."""
    nvidia, hygon = FAMILY_CASES["nvidia"], FAMILY_CASES["hygon"]
    s = vendor_stack("nvidia", flags=("--disable-devices=hygon",))
    node = s.node("n1", nvidia, hygon)
    s.pod("gpu", [nvidia.limits])
    s.pod("dcu", [hygon.limits])
    assert sorted(s.allocations(s.bound("gpu"))) == ["NVIDIA"]
    dcu = s.bound("dcu")  # kube-scheduler binds it (hami passes it through): not hami's devices any more
    assert s.allocations(dcu) == {}
    assert keys.VGPU_NODE not in (dcu["metadata"].get("annotations") or {})

    def handshakes() -> dict[str, str] | None:
        annotations = s.kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}
        return annotations if keys.NVIDIA_KEYS.handshake in annotations else None

    annotations = wait_until(handshakes, description=f"hami's NVIDIA handshake on {node}")
    assert HYGON_KEYS.handshake not in annotations
