"""The DRA plugin's guard: cards that pods of hami's device plugin hold are published with the
``hami.io/device-plugin-pods`` taint, so kube-scheduler allocates no claim on them (docs/dra-mode-switching.md)."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from hami.deviceplugin.discovery import GpuInfo
from hami.deviceplugin.dra.guard import HELD_BACK_TAINT, Holders, device_plugin_holders
from hami.deviceplugin.dra.slices import TAINT_KEY, NodeFacts, resource_slice, slice_devices
from hami.protocol.objects import Pod

NODE = "node-1"
SCHEDULERS = frozenset({"hami-scheduler"})
ALLOCATED = "hami.io/vgpu-devices-allocated"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"


def pod(name: str, allocated: str | None = None, *, node: str = NODE, scheduler: str = "hami-scheduler",
        phase: str = "Running", chosen: str | None = NODE, to_allocate: str | None = None) -> Pod:  # fmt: skip
    annotations = {k: v for k, v in ((ALLOCATED, allocated), (TO_ALLOCATE, to_allocate)) if v is not None}
    if chosen is not None:
        annotations["hami.io/vgpu-node"] = chosen
    body: dict[str, Any] = {
        "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}", "annotations": annotations},
        "spec": {"nodeName": node, "schedulerName": scheduler},
        "status": {"phase": phase},
    }
    return msgspec.convert(body, type=Pod)


def share(uuid: str, mem: int = 3000, cores: int = 30) -> str:
    return f"{uuid},NVIDIA,{mem},{cores}:"


def test_each_card_a_running_device_plugin_pod_holds_is_held_back_with_its_pods() -> None:
    pods = [
        pod("a", share("GPU-0") + ";"),
        pod("b", share("GPU-0") + share("GPU-2") + ";"),
        pod("init", ";" + share("GPU-2")),  # an init container's share counts as well
    ]
    holders = device_plugin_holders(pods, NODE, SCHEDULERS)
    assert holders.cards == {"GPU-0": ("ns/a", "ns/b"), "GPU-2": ("ns/b", "ns/init")}
    assert holders.held_back(["GPU-0", "GPU-1", "GPU-2"]) == {"GPU-0", "GPU-2"}
    assert holders.why("GPU-0") == "used by ns/a, ns/b"


def test_only_pods_the_ledger_believes_hold_cards_back() -> None:
    pods = [
        pod("finished", share("GPU-0"), phase="Succeeded"),
        pod("other-scheduler", share("GPU-1"), scheduler="default-scheduler"),  # forged annotations charge nothing
        pod("not-placed", share("GPU-2"), chosen=None),  # no hami.io/vgpu-node: hami did not place it
        pod("elsewhere", share("GPU-3"), node="node-2"),  # bound to another node (a stale cache entry)
        pod("dra-mode", None),  # a DRA-mode pod: its claim is in the slice's accounts already
    ]
    holders = device_plugin_holders(pods, NODE, SCHEDULERS)
    assert holders == Holders()
    assert holders.held_back(["GPU-0", "GPU-1", "GPU-2", "GPU-3"]) == frozenset()


def test_the_to_allocate_annotation_stands_in_for_an_undecodable_allocated_one() -> None:
    holders = device_plugin_holders([pod("a", "GPU-0,NVIDIA,x,30:;", to_allocate=share("GPU-1"))], NODE, SCHEDULERS)
    assert holders.cards == {"GPU-1": ("ns/a",)}


def test_a_pod_whose_allocation_cannot_be_read_holds_back_every_card() -> None:
    holders = device_plugin_holders([pod("a", share("GPU-0")), pod("bad", "GPU-1,NVIDIA,lots,30:;")], NODE, SCHEDULERS)
    assert holders.unreadable == ("ns/bad",)
    assert holders.held_back(["GPU-0", "GPU-1", "GPU-5"]) == {"GPU-0", "GPU-1", "GPU-5"}
    assert "ns/bad cannot be read" in holders.why("GPU-5")


def test_a_legacy_mig_uuid_holds_its_card() -> None:
    assert device_plugin_holders([pod("m", share("GPU-7[1-2]"))], NODE, SCHEDULERS).cards == {"GPU-7": ("ns/m",)}


@given(st.lists(st.tuples(st.sampled_from(["GPU-0", "GPU-1", "GPU-2", "GPU-3"]), st.booleans()), max_size=8))
def test_held_back_is_exactly_the_cards_of_the_believed_pods(shares: list[tuple[str, bool]]) -> None:
    pods = [
        pod(f"p{i}", share(uuid), scheduler="hami-scheduler" if ours else "default-scheduler")
        for i, (uuid, ours) in enumerate(shares)
    ]
    held = device_plugin_holders(pods, NODE, SCHEDULERS).held_back(["GPU-0", "GPU-1", "GPU-2", "GPU-3"])
    assert held == {uuid for uuid, ours in shares if ours}


def gpu(minor: int) -> GpuInfo:
    return GpuInfo(uuid=f"GPU-{minor}", index=minor, name="Tesla T4", memory_mib=15360, minor=minor)


def test_the_slice_keeps_its_devices_and_order_and_taints_only_the_held_back_cards() -> None:
    devices = slice_devices([gpu(1), gpu(0)], details={}, pcie_roots={}, unhealthy={"GPU-1"})
    plain = resource_slice(NODE, "uid", devices, NodeFacts("580.65.06"))
    held = resource_slice(NODE, "uid", devices, NodeFacts("580.65.06"), held_back=frozenset({"GPU-1", "GPU-9"}))
    assert [d["name"] for d in held["spec"]["devices"]] == ["hami-gpu-0", "hami-gpu-1"]
    assert "taints" not in held["spec"]["devices"][0]
    assert held["spec"]["devices"][1]["taints"] == [
        {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"},
        {"key": HELD_BACK_TAINT, "value": "true", "effect": "NoSchedule"},
    ]
    for field in ("attributes", "capacity", "allowMultipleAllocations"):
        assert [d[field] for d in held["spec"]["devices"]] == [d[field] for d in plain["spec"]["devices"]]
    assert held["spec"]["pool"] == plain["spec"]["pool"]


def test_a_pod_hami_chose_this_node_for_holds_its_card_before_it_is_bound() -> None:
    pods = [pod("chosen", share("GPU-0"), node=""), pod("chosen-elsewhere", share("GPU-1"), node="", chosen="node-2")]
    assert device_plugin_holders(pods, NODE, SCHEDULERS).cards == {"GPU-0": ("ns/chosen",)}
