"""The AMD GPU vendor (``AMD``), as HAMi v2.10's ``pkg/device/amd`` schedules it (webhook-bind-plugin-vendors.md §7).

Inventory: ``hami.io/node-amd-register`` (JSON, §0.4), counted only while the node's capacity of ``amd.com/gpu`` is
above zero (HAMi's health rule for AMD: there is no handshake). Requests: ``amd.com/gpu`` (count, **limits only**),
``amd.com/gpumem`` (MiB per GPU, limits only; absent or 0 = the whole card's memory) and ``amd.com/gpucores`` (a
percentage 1..100 of a GPU, limits then requests; absent = 100). A device's ``devcore`` is its number of compute
units (CUs); the percentage becomes ``floor(devcore × pct / 100)`` CUs, at least 1 and at most ``devcore``, on
each device it is tried on — that is what the allocation records and the ledger charges. The allocation slot's type
is the registered product type (``AMD`` when the registration left it empty). Filters: ``amd.com/use-gputype`` /
``nouse-gputype`` (case-insensitive substrings of the product type, as HAMi's ``checkAMDType``: ``MI250`` selects
an ``AMD-MI250X``; NVIDIA's and Hygon's filters match whole words instead) and ``amd.com/use-gpu-uuid`` /
``nouse-gpu-uuid``. The
webhook only validates ``amd.com/gpucores`` (no defaults are written: the whole-card defaults apply at scheduling).

Where hami does better than the reference, each kept here:

* a registered product type holding ``,`` ``:`` or ``;`` quarantines the node's AMD devices (HAMi would write it
  into an allocation annotation that no longer decodes);
* cordoned devices (``hami.io/device-cordon``) and the namespace quota are honoured as for every vendor;
* counts and memory that are negative, fractional or beyond int32 are refused with the container, resource and
  value named, and so is memory written with a byte suffix (``16Gi``; it counts MiB).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pydantic import StrictStr

from hami.devices.admission import Admitter, ContainerEdit, PodContext
from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    ContainerRequest,
    FitContext,
    Fitted,
    NodeInventory,
    Placement,
    Selector,
    Unfit,
    too_few_devices,
)
from hami.devices.common import SharedDeviceVendor, policy_order
from hami.devices.configmodel import ConfigModel
from hami.devices.family import ChartValues, vendor_family
from hami.devices.resources import lookup_resource, mib_hint, whole_quantity
from hami.devices.scoring import device_scores
from hami.devices.table import DeviceTable
from hami.errors import InvalidInput, QuantityError
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import decode_inventory_json
from hami.protocol.objects import Container, Node, QuantityValue
from hami.protocol.quantity import quantity_as_int
from hami.protocol.reasons import Reason, Rejection

__all__ = ["AMD", "AMD_FAMILY", "AMD_KEYS", "AmdAdmitter", "AmdConfig", "AmdVendor", "compute_units"]


class AmdConfig(ConfigModel):
    """``amd:`` — AMD GPUs; ``gpucores`` is a percentage converted to compute units."""

    resource_count_name: StrictStr = "amd.com/gpu"
    resource_memory_name: StrictStr = "amd.com/gpumem"
    resource_core_name: StrictStr = "amd.com/gpucores"


AMD: Final = "AMD"
_INT32_MAX: Final = 2**31 - 1
AMD_KEYS: Final = keys.VendorKeys(
    AMD,
    register="hami.io/node-amd-register",
    handshake=None,
    to_allocate="hami.io/amd-devices-to-allocate",
    allocated="hami.io/amd-devices-allocated",
)
USE_TYPE: Final = "amd.com/use-gputype"
NOUSE_TYPE: Final = "amd.com/nouse-gputype"
USE_UUID: Final = "amd.com/use-gpu-uuid"
NOUSE_UUID: Final = "amd.com/nouse-gpu-uuid"
_CLOSEST: Final = 3
_SEPARATORS: Final = ",:;"


def compute_units(total: int, percent: int) -> int:
    """The CUs a ``percent`` (1..100) of a device with ``total`` CUs holds: ``floor(total × percent / 100)``,
    at least 1 and at most ``total`` (0 for a device that registered no CUs)."""
    if total <= 0:
        return 0
    return min(max(total * percent // 100, 1), total)


def _percent(field: str, value: QuantityValue) -> int:
    """An ``amd.com/gpucores`` value: a whole percentage between 1 and 100."""
    reason = "must be an integer percentage between 1 and 100"
    try:
        number = quantity_as_int(value, field)
    except QuantityError:
        raise QuantityError(field, value, reason) from None
    if not 1 <= number <= 100:
        raise QuantityError(field, value, reason)
    return number


class AmdAdmitter:
    """HAMi's AMD admission: validate the core percentage of a container with a count in its limits; the
    container uses AMD when its limits name the count, the memory or the core resource. Writes nothing."""

    runtime_class_name = ""

    def __init__(self, config: AmdConfig) -> None:
        self.config = config

    def admit(self, container: Container, field: str, edit: ContainerEdit, pod: PodContext) -> bool:
        limits = container.resources.limits
        count, memory, core = (
            self.config.resource_count_name,
            self.config.resource_memory_name,
            self.config.resource_core_name,
        )
        if count and count in limits and core and core in limits:
            _percent(f"{field}.limits[{core}]", limits[core])
        return any(name and name in limits for name in (count, memory, core))


class AmdVendor(SharedDeviceVendor):
    """HAMi's AMD backend, configured by the ``amd:`` section of device-config.yaml."""

    name = AMD
    keys = AMD_KEYS

    def __init__(self, config: AmdConfig) -> None:
        super().__init__(_AmdResources(config))
        self.config = config

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        limits = container.resources.limits
        count_name = self.config.resource_count_name
        if not count_name or count_name not in limits:
            return None  # HAMi reads the AMD count from limits only (vendors-appendix.md)
        too_large = "exceeds the int32 range HAMi's annotations can carry"
        nums = whole_quantity(f"{field}.limits[{count_name}]", limits[count_name], _INT32_MAX, too_large)
        if nums == 0:
            return None
        memreq = 0
        mem_name = self.config.resource_memory_name
        if mem_name and mem_name in limits:
            raw = limits[mem_name]
            where = f"{field}.limits[{mem_name}]"
            if mib_hint(raw):
                raise QuantityError(where, raw, f"has a byte suffix{mib_hint(raw)}")
            memreq = whole_quantity(where, raw, _INT32_MAX, too_large)
        percent = 100
        core_name = self.config.resource_core_name
        core = lookup_resource(container, core_name)
        if core is not None:
            percent = _percent(f"{field}.{core[0]}[{core_name}]", core[1])
        return ContainerRequest(
            vendor=AMD,
            nums=nums,
            memreq=memreq,
            mem_percentage=100 if memreq == 0 else MEM_PERCENTAGE_UNSET,
            coresreq=percent,
        )

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        raw = node.metadata.annotations.get(self.keys.register)
        if raw is None:
            return None
        devices = decode_inventory_json(raw, self.keys.register)
        for position, info in enumerate(devices):
            if any(sep in info.type for sep in _SEPARATORS):
                raise InvalidInput(
                    f"{self.keys.register} devices[{position}].type",
                    info.type,
                    f"device {info.id!r}: the product type is written into the pod's allocation annotation and "
                    "must not hold ',', ':' or ';'",
                )
        if not self._has_capacity(node):
            return NodeInventory(())  # HAMi: unhealthy while capacity amd.com/gpu is absent or zero
        return NodeInventory(tuple(devices))

    def _has_capacity(self, node: Node) -> bool:
        name = self.config.resource_count_name
        raw = node.status.capacity.get(name) if name else None
        if raw is None:
            return False
        try:
            return quantity_as_int(raw, f"status.capacity[{name}]") > 0
        except QuantityError:
            return False

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return Selector.from_annotations(
            annotations, (USE_UUID, NOUSE_UUID), (USE_TYPE, NOUSE_TYPE), type_substrings=True
        )

    def admitter(self) -> Admitter:
        return AmdAdmitter(self.config)

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        n = len(table.infos)
        if request.nums > n:
            return too_few_devices(n, request.nums)
        return _AmdFit(table, request, ctx, selector).run()


class _AmdResources:
    """The ``amd:`` section as the shared resource names read it (AMD has no memory factor)."""

    memory_factor = 1

    def __init__(self, config: AmdConfig) -> None:
        self.resource_count_name = config.resource_count_name
        self.resource_memory_name = config.resource_memory_name
        self.resource_core_name = config.resource_core_name


Problem = tuple[Reason, int, int]


class _AmdFit:
    """One run of HAMi's AMD fit over one table: devices in the pod's GPU-policy order, each checked in HAMi's
    order (health, cordon, type, uuid, time slices, mutex, quota, memory, compute units)."""

    __slots__ = ("accepted", "counts", "ctx", "misses", "req", "selector", "table")

    def __init__(self, table: DeviceTable, req: ContainerRequest, ctx: FitContext, selector: Selector) -> None:
        self.table, self.req, self.ctx, self.selector = table, req, ctx, selector
        self.counts: dict[Reason, int] = {}
        self.misses: list[Rejection] = []
        self.accepted: list[Placement] = []

    def run(self) -> Fitted | Unfit:
        table = self.table
        for i in policy_order(table, device_scores(table, self.req, self.ctx.weights), self.ctx):
            info = table.infos[i]
            memreq = self.req.memory_on(info.devmem)
            cus = compute_units(info.devcore, self.req.coresreq)
            problem = self._device_problem(i) or self._share_problem(i) or self._room_problem(i, memreq, cus)
            if problem is not None:
                self._miss(info.id, *problem)
                continue
            device = ContainerDevice(info.id, info.type or AMD, memreq, cus)
            self.accepted.append(Placement(i, device))
            if len(self.accepted) == self.req.nums:
                return Fitted(tuple(self.accepted))
        if self.accepted:
            self.counts[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(self.accepted)
        self.misses.sort(key=lambda r: r.available, reverse=True)
        return Unfit(self.counts, len(table.infos), tuple(self.misses[:_CLOSEST]))

    def _miss(self, uuid: str, reason: Reason, requested: int, available: int) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if requested or available:
            self.misses.append(Rejection(reason, uuid, requested, available))

    def _device_problem(self, i: int) -> Problem | None:
        info, table, ctx = self.table.infos[i], self.table, self.ctx
        if not info.health or table.broken[i] is not None:
            return (Reason.CARD_NOT_HEALTH, 0, 0)
        if info.id in ctx.cordoned:
            return (Reason.CARD_CORDONED, 0, 0)
        if not self.selector.type_ok(info):
            return (Reason.CARD_TYPE_MISMATCH, 0, 0)
        return None

    def _share_problem(self, i: int) -> Problem | None:
        info, table, ctx = self.table.infos[i], self.table, self.ctx
        if not self.selector.uuid_ok(info.id):
            return (Reason.CARD_UUID_MISMATCH, 0, 0)
        used = table.used[i]
        if info.count <= used:
            return (Reason.CARD_TIME_SLICING_EXHAUSTED, 1, info.count - used)
        if ctx.policy.mutex and used > 0:
            return (Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, 0, 0)
        return None

    def _room_problem(self, i: int, memreq: int, cus: int) -> Problem | None:
        info, table, quota = self.table.infos[i], self.table, self.ctx.quota
        if quota is not None and not quota(self.accepted, memreq, cus, info.id):
            return (Reason.RESOURCE_QUOTA_NOT_FIT, memreq, 0)
        free_mem = info.devmem - table.usedmem[i]
        if free_mem < memreq:
            return (Reason.CARD_INSUFFICIENT_MEMORY, memreq, free_mem)
        free_cus = info.devcore - table.usedcores[i]
        if info.devcore <= 0 or free_cus < cus:
            return (Reason.CARD_INSUFFICIENT_CORE, cus, max(free_cus, 0))
        return None


AMD_FAMILY: Final = vendor_family(
    "amd",
    AmdConfig,
    AmdVendor,
    chart=ChartValues(
        {"resourceCountName": None, "resourceCoreName": None, "resourceMemoryName": None},
        ("resourceCountName", "resourceMemoryName", "resourceCoreName"),
    ),
)
"""The registry entry: the ``amd:`` section, one vendor."""
