"""The Moore Threads vendor (``Mthreads``): HAMi's ``pkg/device/mthreads`` (webhook-bind-plugin-vendors.md §7,
vendors-appendix.md).

* Inventory: no registration annotation, no handshake, no node lock. The cards come from ``node.status.capacity``
  (``hami.devices.capacity``): ``ceil(sgpu-core / 16)`` cards of 100 slots and 16 core units each, memory
  ``sgpu-memory × 512 × 16 // sgpu-core`` MiB, ids ``<node>-mthreads-<i>``, always healthy.
* Admission (``MthreadsAdmitter``), for a container with ``mthreads.com/vgpu`` in limits or requests: a count of 0
  or less is refused (``mthreads.com/vgpu must be greater than 0``); a count above 1 asks for whole cards:
  ``sgpu-core`` is set to ``16 × count``, ``sgpu-memory`` to ``96 × count`` and the pod gets
  ``mthreads.com/request-gpu-num=<count>``; a count of 1 without ``sgpu-memory`` in limits is a whole card (core
  16 and memory 96, also over a core value the user gave, as HAMi does); a count of 1 with memory must ask for one
  of 2, 4, 8, 16, 32, 64 or 96 units (HAMi's message).
* Requests: memory counts 512 MiB units and, like cores, is the total over the container's cards: each card gets
  ``total // count`` (no memory: the whole card; no cores: 0).
* Fit: the shared loop, plus HAMi's rule that every container of a pod uses the same card (a card other than the
  one the earlier containers got counts ``CardNotFoundCustomFilterRule``). Filters ``mthreads.ai/use-gpuuuid`` /
  ``nouse-gpuuuid`` (``.ai``, not ``.com``, as in HAMi).
* Allocation: only ``hami.io/mthreads-vgpu-devices-allocated``, plus ``mthreads.com/gpu-index`` (the card indexes
  of the last container that has cards, comma-separated), ``mthreads.com/predicate-time`` (the decision time in
  Unix nanoseconds) and ``mthreads.com/predicate-node`` (the node, as ``hami.io/vgpu-node``).

Deliberate differences from HAMi: its webhook answers a bad count or memory with an error (HTTP 500); hami denies
the pod with the message. A fractional count (HAMi rounds it up) is refused. Where the webhook sets a limit and the
container also has a request for that resource, the request is set to the same value (the API server refuses an
extended resource whose request differs from its limit). At scheduling, values that are negative, beyond int32
once converted, or more than 16 core units per card are refused with the container, the resource and the value
(HAMi drops the request or clamps the cores); memory written in bytes (``16Gi``) is refused with the number of
units it probably meant. The memory quota ``limits.mthreads.com/sgpu-memory`` is read in 512 MiB units.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Final

from pydantic import Field, StrictStr

from hami.devices.admission import ContainerEdit, PodContext, lookup
from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    AnnotationContext,
    ContainerRequest,
    FitContext,
    Fitted,
    NodeInventory,
    Placement,
    ResourceNames,
    Selector,
    Unfit,
)
from hami.devices.capacity import CapacityLayout, synthesized_index, unit_memory
from hami.devices.common import SharedDeviceVendor, fit_shared
from hami.devices.configmodel import ConfigModel
from hami.devices.family import ChartValues, vendor_family
from hami.devices.resources import INT32_TOO_LARGE, read_int32, whole_quantity
from hami.devices.screening import Screener, shared_screener
from hami.devices.table import DeviceTable
from hami.errors import QuantityError
from hami.protocol import keys
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Container, Node, QuantityValue
from hami.protocol.quantity import INT32_MAX, quantity_as_int

__all__ = [
    "ALLOWED_MEMORY_UNITS",
    "CORES_PER_CARD",
    "GPU_INDEX",
    "MEMORY_UNITS_PER_CARD",
    "MTHREADS",
    "MTHREADS_FAMILY",
    "MTHREADS_KEYS",
    "MTHREADS_UNIT_MIB",
    "PREDICATE_NODE",
    "PREDICATE_TIME",
    "REQUEST_GPU_NUM",
    "MthreadsAdmitter",
    "MthreadsConfig",
    "MthreadsVendor",
]


class MthreadsConfig(ConfigModel):
    """``mthreads:`` — Moore Threads sGPU; memory counts 512 MiB units."""

    resource_count_name: StrictStr = "mthreads.com/vgpu"
    resource_memory_name: StrictStr = "mthreads.com/sgpu-memory"
    resource_core_name: StrictStr = "mthreads.com/sgpu-core"
    memory_per_card: tuple[Annotated[int, Field(strict=True, ge=1, le=INT32_MAX)], ...] = (96,)
    """Per-card memory capacities in 512 MiB units (the chart's ``memoryPerCard``)."""


MTHREADS: Final = "Mthreads"
MTHREADS_UNIT_MIB: Final = 512
"""MiB in one ``sgpu-memory`` unit, in requests and in the node's capacity."""
CORES_PER_CARD: Final = 16
MEMORY_UNITS_PER_CARD: Final = 96
"""What the webhook gives a whole card (an MTT S4000's 48 GiB)."""
ALLOWED_MEMORY_UNITS: Final = (2, 4, 8, 16, 32, 64, 96)
MTHREADS_SUFFIX: Final = "mthreads"
GPU_INDEX: Final = "mthreads.com/gpu-index"
PREDICATE_TIME: Final = "mthreads.com/predicate-time"
PREDICATE_NODE: Final = "mthreads.com/predicate-node"
REQUEST_GPU_NUM: Final = "mthreads.com/request-gpu-num"
USE_UUID: Final = "mthreads.ai/use-gpuuuid"
NOUSE_UUID: Final = "mthreads.ai/nouse-gpuuuid"
INVALID_MEMORY: Final = "sGPU memory request value is invalid, valid values are [2, 4, 8, 16, 32, 64, 96]"

MTHREADS_KEYS: Final = keys.VendorKeys(
    MTHREADS,
    register="",
    handshake=None,
    to_allocate=None,
    allocated="hami.io/mthreads-vgpu-devices-allocated",
    extra=(GPU_INDEX, PREDICATE_TIME, PREDICATE_NODE),
    lock=None,
)

_TOO_LARGE: Final = INT32_TOO_LARGE


@dataclass(frozen=True, slots=True)
class MthreadsAdmitter:
    """HAMi's Moore Threads ``MutateAdmission``, as an ``Admitter`` (see the module docstring)."""

    count: str
    memory: str
    cores: str
    runtime_class_name: str = ""

    def admit(self, container: Container, field: str, edit: ContainerEdit, pod: PodContext) -> bool:
        found = lookup(container, edit, self.count)
        if not self.count or found is None:
            return False
        section, raw = found
        where = f"{field}.{section}[{self.count}]"
        count = quantity_as_int(raw, where)
        if count <= 0:
            raise QuantityError(where, raw, f"{self.count} must be greater than 0")
        if count > INT32_MAX:
            raise QuantityError(where, raw, _TOO_LARGE)
        if count > 1:
            self._whole_cards(container, edit, count)
            edit.annotations[REQUEST_GPU_NUM] = str(count)
            return True
        memory = edit.limits.get(self.memory) or container.resources.limits.get(self.memory)
        if memory is None:
            self._whole_cards(container, edit, 1)
        elif _units(memory) not in ALLOWED_MEMORY_UNITS:
            raise QuantityError(f"{field}.limits[{self.memory}]", memory, INVALID_MEMORY)
        return True

    def _whole_cards(self, container: Container, edit: ContainerEdit, count: int) -> None:
        for name, value in ((self.cores, CORES_PER_CARD * count), (self.memory, MEMORY_UNITS_PER_CARD * count)):
            if not name:
                continue
            edit.limits[name] = str(value)
            if name in container.resources.requests:
                edit.requests[name] = str(value)


def _units(value: QuantityValue) -> int | None:
    """A memory limit as a whole number of units, None when it is not one."""
    try:
        return whole_quantity("", value, INT32_MAX, "")
    except QuantityError:
        return None


_read = read_int32


class MthreadsVendor(SharedDeviceVendor):
    """HAMi's Moore Threads backend, configured by the ``mthreads:`` section of device-config.yaml."""

    name = MTHREADS
    keys = MTHREADS_KEYS

    def __init__(self, config: MthreadsConfig) -> None:
        self.config = config
        self.resources = ResourceNames(
            count=config.resource_count_name,
            memory=config.resource_memory_name or None,
            core=config.resource_core_name or None,
            memory_factor=MTHREADS_UNIT_MIB,
        )
        self.layout = CapacityLayout(
            core_resource=config.resource_core_name,
            memory_resource=config.resource_memory_name,
            suffix=MTHREADS_SUFFIX,
            device_type=MTHREADS,
            cores_per_card=CORES_PER_CARD,
            unit_mib=MTHREADS_UNIT_MIB,
        )

    def admitter(self) -> MthreadsAdmitter:
        c = self.config
        return MthreadsAdmitter(c.resource_count_name, c.resource_memory_name, c.resource_core_name)

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        count = _read(container, self.config.resource_count_name, field)
        if count is None or count[0] == 0:
            return None
        nums = count[0]
        memreq = self._memory(container, field) // nums
        cores = _read(container, self.config.resource_core_name, field)
        per_card = 0 if cores is None else cores[0] // nums
        if cores is not None and per_card > CORES_PER_CARD:
            spread = f"{cores[0]} over {nums} card(s) is {per_card}"
            reason = f"a Moore Threads card has {CORES_PER_CARD} core units; {spread}"
            raise QuantityError(cores[2], cores[1], reason)
        return ContainerRequest(
            vendor=MTHREADS,
            nums=nums,
            memreq=memreq,
            mem_percentage=100 if memreq == 0 else MEM_PERCENTAGE_UNSET,
            coresreq=per_card,
        )

    def _memory(self, container: Container, field: str) -> int:
        """MiB over all the container's cards: 512 MiB units × 512; 0 when absent (whole cards)."""
        return unit_memory(container, field, self.config.resource_memory_name, MTHREADS_UNIT_MIB)

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        devices = self.layout.devices(node)
        return None if devices is None else NodeInventory(devices)

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return Selector.from_annotations(annotations, (USE_UUID, NOUSE_UUID))

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        return fit_shared(table, request, ctx, selector, self.name, self.partitions, self.order, _same_card(ctx))

    def screener(self, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Screener | None:
        """Without cards chosen for earlier containers, ``fit`` is the shared loop, which the capacity summary
        speaks for; with them, the same-card rule needs Fit."""
        if _uuids(ctx.chosen):
            return None
        return shared_screener(request, ctx, selector, self.partitions, self.ordered_by_policy)

    def extra_annotations(self, ctx: AnnotationContext) -> dict[str, str]:
        last = next((slot for slot in reversed(ctx.devices) if slot), None)
        if last is None:
            return {}
        indexes = (synthesized_index(ctx.node, MTHREADS_SUFFIX, d.uuid) for d in last)
        return {
            GPU_INDEX: ",".join(str(i) for i in indexes),
            PREDICATE_TIME: str(ctx.now_ns),
            PREDICATE_NODE: ctx.node,
        }


def _same_card(ctx: FitContext) -> Callable[[DeviceInfo], bool] | None:
    """HAMi's custom filter rule: a card is usable only if every card the earlier containers got is that card."""
    taken = _uuids(ctx.chosen)
    if not taken:
        return None
    return lambda info: taken == {info.id}


def _uuids(chosen: Sequence[Sequence[Placement]]) -> set[str]:
    return {p.device.uuid for placements in chosen for p in placements}


MTHREADS_FAMILY: Final = vendor_family(
    "mthreads",
    MthreadsConfig,
    MthreadsVendor,
    chart=ChartValues(
        {"resourceCountName": None, "resourceMemoryName": None, "resourceCoreName": None, "memoryPerCard": None},
        ("resourceCountName", "resourceMemoryName", "resourceCoreName"),
    ),
)
"""The registry entry: the ``mthreads:`` section, one vendor (``memoryPerCard`` rendered only when given)."""
