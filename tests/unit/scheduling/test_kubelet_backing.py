"""A node whose kubelet does not back its registration (device plugin gone or restarting) is not fit until it does:
``ClusterState.upsert_node`` records it (``NodeState.unallocatable``), ``filter_node`` turns the node down with
``NodeDevicesNotAllocatable``, and the node's usage stays charged throughout."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo, encode_inventory_json
from hami.protocol.objects import Node, NodeStatus, ObjectMeta, QuantityValue
from hami.protocol.reasons import Reason
from hami.scheduling.decide import decide
from hami.scheduling.filter import NodeFit, NodeRejection, filter_node
from hami.scheduling.state import ClusterState, PodRecord
from hami.scheduling.usage import Kind, effective_charges
from tests.unit.scheduling.builders import NVIDIA, gpus, pod_request, req, vendors

GONE = (
    "kubelet reports nvidia.com/gpu allocatable 0 where the registration (hami.io/node-nvidia-register) of "
    "2 healthy device(s) needs 20: the device plugin is gone or restarting"
)


def gpu_node(name: str, allocatable: Mapping[str, QuantityValue] | None, devices: tuple[DeviceInfo, ...] = ()) -> Node:
    """A node registering two 8192 MiB cards of split count 10, with that ``status.allocatable`` (None: no status)."""
    registered = devices or gpus(2, prefix=f"GPU-{name}-")
    status = NodeStatus(allocatable=dict(allocatable)) if allocatable is not None else NodeStatus()
    meta = ObjectMeta(name=name, annotations={keys.NVIDIA_REGISTER: encode_inventory_json(registered)})
    return Node(metadata=meta, status=status)


def running_pod(node: str, uuid: str, mem: int) -> PodRecord:
    devices = {NVIDIA: ((ContainerDevice(uuid, NVIDIA, mem, 0),),)}
    return PodRecord("uid-run", "default", "run", node, devices, effective_charges(devices, (Kind.APP,)))


def test_allocatable_zero_turns_the_node_down_and_keeps_its_usage() -> None:
    s = ClusterState(vendors())
    s.upsert_node(gpu_node("n1", {"nvidia.com/gpu": "20", "cpu": "8"}))
    s.apply(running_pod("n1", "GPU-n1-0", 4000), add=True)

    node = s.upsert_node(gpu_node("n1", {"nvidia.com/gpu": "0", "cpu": "8"}))

    assert node.unallocatable == {NVIDIA: GONE}
    assert node.tables[NVIDIA].usage_of(0)[:3] == (1, 4000, 0)  # the running pod stays charged
    assert s.verify() == []
    verdict = filter_node(s, node, pod_request(req(memreq=1000)))
    assert verdict == NodeRejection(
        "n1", {}, 0, unresolvable=True, detail=f"NodeDevicesNotAllocatable: NVIDIA devices: {GONE}"
    )
    assert isinstance(verdict, NodeRejection)
    assert verdict.node_reason is Reason.NODE_DEVICES_NOT_ALLOCATABLE
    assert verdict.summary.startswith("NodeDevicesNotAllocatable: NVIDIA devices: kubelet reports")


def test_the_node_is_fit_again_as_soon_as_kubelet_reports_the_devices() -> None:
    s = ClusterState(vendors())
    s.upsert_node(gpu_node("n1", {"nvidia.com/gpu": "0"}))
    node = s.upsert_node(gpu_node("n1", {"nvidia.com/gpu": "20"}))
    assert node.unallocatable == {}
    assert isinstance(filter_node(s, node, pod_request(req(memreq=1000))), NodeFit)


def test_a_node_without_status_or_without_the_resource_is_judged_by_its_registration_alone() -> None:
    s = ClusterState(vendors())
    for name, allocatable in (("bare", None), ("cpu-only", {"cpu": "8", "pods": "110"})):
        node = s.upsert_node(gpu_node(name, allocatable))
        assert node.unallocatable == {}
        assert isinstance(filter_node(s, node, pod_request(req(memreq=1000))), NodeFit)


def test_decide_places_the_pod_on_the_node_kubelet_backs() -> None:
    s = ClusterState(vendors())
    s.upsert_node(gpu_node("restarting", {"nvidia.com/gpu": "0"}))
    s.upsert_node(gpu_node("backed", {"nvidia.com/gpu": "20"}, gpus(1, prefix="GPU-backed-")))
    decision = decide(s, pod_request(req(memreq=1000)), ["restarting", "backed"], now=0)
    assert decision.node == "backed"  # binpack would rank it first either way; the verdict is what counts here
    assert decision.rejected["restarting"].node_reason is Reason.NODE_DEVICES_NOT_ALLOCATABLE
    alone = decide(s, pod_request(req(memreq=1000)), ["restarting"], now=0)
    assert alone.node is None
    assert alone.rejected["restarting"].unresolvable


def test_preemptions_copy_of_a_node_keeps_the_verdict() -> None:
    s = ClusterState(vendors())
    s.upsert_node(gpu_node("n1", {"nvidia.com/gpu": "0"}))
    s.apply(running_pod("n1", "GPU-n1-0", 4000), add=True)
    copy = s.what_if("n1", {"uid-run"})
    verdict = filter_node(copy, copy.nodes["n1"], pod_request(req(memreq=1000)))
    assert isinstance(verdict, NodeRejection)
    assert verdict.node_reason is Reason.NODE_DEVICES_NOT_ALLOCATABLE


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # never fails for a slow machine
@given(st.lists(st.integers(0, 30), min_size=1, max_size=12))
def test_the_node_fits_exactly_while_kubelet_reports_every_registered_unit(reports: list[int]) -> None:
    """Whatever sequence of allocatable counts kubelet reports, the node fits exactly when the last one covers the
    20 units two cards of split count 10 need, and the ledger stays exact."""
    s = ClusterState(vendors())
    s.upsert_node(gpu_node("n1", {"nvidia.com/gpu": "20"}))
    s.apply(running_pod("n1", "GPU-n1-1", 2000), add=True)
    for reported in reports:
        node = s.upsert_node(gpu_node("n1", {"nvidia.com/gpu": str(reported)}))
        fits = isinstance(filter_node(s, node, pod_request(req(memreq=1000))), NodeFit)
        assert fits == (reported >= 20)
        assert (NVIDIA in node.unallocatable) == (reported < 20)
    assert s.verify() == []
