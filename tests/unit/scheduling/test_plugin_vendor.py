"""The vendor plug-in interface carries a vendor the core has never heard of.

``ACME`` below is a made-up accelerator shaped like the families still to come (webhook-bind-plugin-vendors.md §7):
its devices are derived from the node's capacity with synthesized ids (like Cambricon or Moore Threads), it has no
handshake and no node lock, it hands devices out in fixed templates without positions (like Ascend vNPU), writes
an extra pod annotation, and adds a topology-like score for the node. It is built from the interface alone
(``hami.devices.base``, ``hami.devices.common``) and runs through the unchanged ledger, cycle and records.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Final

import msgspec
import pytest

from hami.devices.admission import Admitter, CountInLimits
from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    AnnotationContext,
    Carved,
    ContainerRequest,
    FitContext,
    Fitted,
    NodeInventory,
    ResourceNames,
    Selector,
    Slice,
    Unfit,
    Vendor,
)
from hami.devices.common import fit_shared, policy_order
from hami.devices.resources import lookup_resource, whole_quantity
from hami.devices.table import DeviceTable
from hami.protocol import keys
from hami.protocol.allocation import PodDevices, decode_pod_devices, encode_pod_devices
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Container, Node
from hami.protocol.reasons import Reason
from hami.scheduling.admission import admitters_for
from hami.scheduling.decide import decide, reserve
from hami.scheduling.records import record_from_pod
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import container, pod

ACME: Final = "ACME"
COUNT: Final = "acme.example/npu"
MEMORY: Final = "acme.example/npu-memory"
ALLOCATED: Final = "acme.example/npu-allocated"
TEMPLATES: Final = "acme.example/npu-templates"
FAST_BONUS: Final = 50.0
TEMPLATE_SIZES: Final = (("vir04", 4096, 25), ("vir08", 8192, 50), ("whole", 16384, 100))


class Templates:
    """A partition hook without positions: the request is rounded up to the smallest template."""

    infeasible = Reason.CARD_INSUFFICIENT_MEMORY

    def carves(self, info: DeviceInfo) -> bool:
        return True

    def several_per_device(self, infos: Sequence[DeviceInfo], selector: Selector) -> bool:
        return False

    def plan(self, info: DeviceInfo, occupied: Sequence[Hashable], amounts: Sequence[int]) -> list[Carved] | None:
        out = []
        for amount in amounts:
            found = next(((n, m, c) for n, m, c in TEMPLATE_SIZES if m >= amount), None)
            if found is None:
                return None
            out.append(Carved(Slice(found[0]), found[1], found[2]))
        return out

    def conflict(self, info: DeviceInfo, held: Sequence[Hashable], owner: str) -> str | None:
        return None


class AcmeVendor:
    name = ACME
    keys = keys.VendorKeys(ACME, "", None, None, ALLOCATED, extra=(TEMPLATES,), lock=None)
    resources = ResourceNames(COUNT, MEMORY, None)
    partitions = Templates()

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        count = lookup_resource(container, COUNT)
        if count is None:
            return None
        nums = whole_quantity(f"{field}.{count[0]}[{COUNT}]", count[1], 64, "too many")
        memory = lookup_resource(container, MEMORY)
        mem = whole_quantity(f"{field}.{memory[0]}[{MEMORY}]", memory[1], 1 << 20, "too much") if memory else 0
        return ContainerRequest(ACME, nums, mem, MEM_PERCENTAGE_UNSET if mem else 100, 0)

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        raw = node.status.capacity.get(COUNT)
        if raw is None:
            return None
        n = whole_quantity(f"status.capacity[{COUNT}]", raw, 64, "too many")
        kind = node.metadata.labels.get("acme.example/model", "slow")
        devices = (DeviceInfo(f"{node.metadata.name}-acme-{i}", i, 1, 16384, 100, kind, health=True) for i in range(n))
        return NodeInventory(tuple(devices))

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return Selector()

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        outcome = fit_shared(table, request, ctx, selector, ACME, self.partitions, policy_order)
        if isinstance(outcome, Fitted) and all(table.infos[p.index].type == "fast" for p in outcome.placements):
            return Fitted(outcome.placements, FAST_BONUS)
        return outcome

    def encode(self, devices: PodDevices) -> str:
        return encode_pod_devices(devices)

    def decode(self, value: str, field: str) -> PodDevices:
        return decode_pod_devices(value, field)

    def admitter(self) -> Admitter:
        return CountInLimits(COUNT)

    def numa_bind(self, annotations: Mapping[str, str]) -> bool:
        return False

    def extra_annotations(self, ctx: AnnotationContext) -> dict[str, str]:
        return {TEMPLATES: ";".join(f"{s.container}:{s.uuid}:{s.slice.template}" for s in ctx.slices)}

    def decode_slices(self, annotations: Mapping[str, str]) -> tuple[tuple[str, Hashable], ...]:
        return ()


def _node(name: str, npus: int, model: str) -> Node:
    raw = {"metadata": {"name": name, "labels": {"acme.example/model": model}}, "status": {"capacity": {COUNT: npus}}}
    return msgspec.convert(raw, Node)


@pytest.fixture
def cluster() -> ClusterState:
    vendor: Vendor = AcmeVendor()
    s = ClusterState({ACME: vendor})
    s.upsert_node(_node("node-a", 2, "slow"))
    s.upsert_node(_node("node-b", 2, "fast"))
    return s


def test_capacity_derived_inventory_with_synthesized_ids(cluster: ClusterState) -> None:
    table = cluster.nodes["node-b"].tables[ACME]
    assert [(i.id, i.devmem, i.type) for i in table.infos] == [
        ("node-b-acme-0", 16384, "fast"),
        ("node-b-acme-1", 16384, "fast"),
    ]


def test_a_pod_is_placed_charged_annotated_and_read_back(cluster: ClusterState) -> None:
    p = pod([container({COUNT: 1, MEMORY: 5000})], uid="u-1")
    request = prefilter(p, cluster.vendors, SchedulingDefaults())
    decision = decide(cluster, request, ["node-a", "node-b"], 100)
    # Equal usage scores; the vendor's contribution (its "fast" topology) picks node-b over the name order.
    assert decision.node == "node-b"
    assert decision.scores["node-b"] == decision.scores["node-a"] + FAST_BONUS
    # 5000 MiB is rounded up to the vir08 template, which is what is charged and annotated.
    assert decision.annotations == {
        keys.VGPU_NODE: "node-b",
        keys.VGPU_TIME: "100",
        ALLOCATED: "node-b-acme-0,ACME,8192,50:;",
        TEMPLATES: "0:node-b-acme-0:vir08",
    }
    record = reserve(cluster, request, decision)
    assert record is not None
    assert cluster.nodes["node-b"].tables[ACME].usage_of(0) == (1, 8192, 50, ())
    placed = pod([container({COUNT: 1, MEMORY: 5000})], uid="u-1", annotations=decision.annotations)
    again = record_from_pod(placed, cluster.vendors)
    assert again is not None
    assert again.charges == record.charges
    assert cluster.verify() == []


def test_the_vendors_infeasible_reason_is_counted(cluster: ClusterState) -> None:
    request = prefilter(pod([container({COUNT: 1, MEMORY: 20000})]), cluster.vendors, SchedulingDefaults())
    decision = decide(cluster, request, ["node-a"], 100)
    assert decision.node is None
    assert decision.rejected["node-a"].counts == {Reason.CARD_INSUFFICIENT_MEMORY: 2}


def test_admission_uses_the_vendors_admitter(cluster: ClusterState) -> None:
    admitter = admitters_for(cluster.vendors)[ACME]
    assert admitter == CountInLimits(COUNT)
