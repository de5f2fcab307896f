"""AWS Neuron (vendor key ``AWSNeuron``): Inferentia and Trainium devices and their NeuronCores
(webhook-bind-plugin-vendors.md §7, vendors-appendix.md; HAMi v2.10.0 ``pkg/device/awsneuron/device.go``).

Inventory from ``status.capacity``: ``aws.amazon.com/neuron`` devices and ``aws.amazon.com/neuroncore`` cores;
cores per device = cores / devices. Each device is ``<node>-AWSNeuron-<i>`` with Count = cores per device, no
memory, and ``devcore`` = the bitmask of its addressable cores (HAMi addresses at most two per device, so
``0b11``). The node's ``node.kubernetes.io/instance-type`` label is kept with the inventory.

Requests: ``aws.amazon.com/neuron: n`` asks for n whole devices (every addressable core); ``aws.amazon.com/
neuroncore: c`` asks for c cores — one device when c ≤ the addressable cores per device (k), else c / k whole
devices (c must be a multiple of k). One device: the first device in policy order with c free cores, taking its
lowest free cores. Several devices: a contiguous run of idle devices — any start on ``inf*`` instance types,
otherwise only runs of 1, 4, 8 or 16 devices starting at a multiple of the run length (``NumaNotFit`` when none).

Annotations: ``hami.io/aws-neuron-devices-allocated`` (``<id>,AWSNeuron,0,<core mask>:``), ``AWS_NEURON_IDS``
(device indexes for a container whose device count is in its limits, else core indexes ``cores per device ×
index + core``, over every container), ``NEURON_ALLOC_TIME`` (ns), ``NEURON_ALLOCATED="false"``,
``aws.amazon.com/predicate-node`` (the node) and, for core indexes, ``NEURON_RESOURCE_TYPE`` (the core resource
name). UUID filters ``aws.amazon.com/use-neuron-uuid``/``nouse-neuron-uuid``. No handshake, no lock.

Deliberate differences from HAMi:

* cores per device are decided **per node** from that node's own capacity (HAMi v2.10.0 remembers the value of
  the first node it sees, so a cluster mixing inf1 and inf2/trn nodes is scheduled with the wrong geometry);
  a node whose core capacity is missing or not a multiple of its device count is quarantined with a message;
* the device/core form of ``AWS_NEURON_IDS`` is decided by each container's own request (HAMi looks up
  ``spec.containers[slot]``, the wrong container when the pod has init containers);
* several-device requests also skip unhealthy, cordoned and UUID-excluded devices (HAMi checks only usage), and
  their ``NumaNotFit`` is counted out of the node's devices (HAMi: out of 1);
* counts and cores that are not whole, are ≤ 0 or exceed int32 are refused at admission with a message naming
  the container (HAMi answers an error); a core count that no node could split (more than two and odd) too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from pydantic import StrictStr

from hami.devices.admission import Admitter, ContainerEdit, PodContext, lookup
from hami.devices.base import (
    AnnotationContext,
    ContainerRequest,
    FitContext,
    Fitted,
    NodeInventory,
    Placement,
    ResourceNames,
    Selector,
    Slice,
    Unfit,
    too_few_devices,
)
from hami.devices.common import SharedDeviceVendor, policy_order
from hami.devices.configmodel import ConfigModel
from hami.devices.family import ChartValues, vendor_family
from hami.devices.resources import lookup_resource, whole_quantity
from hami.devices.scoring import device_scores
from hami.devices.table import DeviceTable
from hami.errors import QuantityError
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo
from hami.protocol.keys import VendorKeys
from hami.protocol.objects import Container, Node, QuantityValue
from hami.protocol.reasons import Reason, Rejection

__all__ = [
    "ALLOC_TIME",
    "ASSIGNED_IDS",
    "AWSNEURON_FAMILY",
    "NEURON_ALLOCATED",
    "NEURON_KEYS",
    "PREDICATE_NODE",
    "RESOURCE_TYPE",
    "AwsNeuronConfig",
    "AwsNeuronVendor",
    "contiguous_run",
]


class AwsNeuronConfig(ConfigModel):
    """``awsneuron:`` — Neuron devices and cores."""

    resource_count_name: StrictStr = "aws.amazon.com/neuron"
    resource_core_name: StrictStr = "aws.amazon.com/neuroncore"


NEURON: Final = "AWSNeuron"
ASSIGNED_IDS: Final = "AWS_NEURON_IDS"
ALLOC_TIME: Final = "NEURON_ALLOC_TIME"
NEURON_ALLOCATED: Final = "NEURON_ALLOCATED"
PREDICATE_NODE: Final = "aws.amazon.com/predicate-node"
RESOURCE_TYPE: Final = "NEURON_RESOURCE_TYPE"
USE_UUID: Final = "aws.amazon.com/use-neuron-uuid"
NOUSE_UUID: Final = "aws.amazon.com/nouse-neuron-uuid"
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
NEURON_KEYS: Final = VendorKeys(
    NEURON,
    register="",
    handshake=None,
    to_allocate=None,
    allocated="hami.io/aws-neuron-devices-allocated",
    extra=(ASSIGNED_IDS, ALLOC_TIME, NEURON_ALLOCATED, PREDICATE_NODE, RESOURCE_TYPE),
    lock=None,
)
MAX_ADDRESSABLE_CORES: Final = 2
"""HAMi v2.10.0 addresses at most two NeuronCores of a device (its core mask has two bits)."""

_INT32_MAX: Final = 2**31 - 1
_MAX_DEVICES: Final = 1024
_MAX_CORES_PER_DEVICE: Final = 64
_RUNS: Final = (1, 4, 8, 16)
_DEVICES: Final = "devices"  # the count is in the limits: AWS_NEURON_IDS lists device indexes
_DEVICES_BY_REQUEST: Final = "devices-requested"  # the count only in requests: whole devices, core indexes
_CORES: Final = "cores"


def _capacity(node: Node, name: str, limit: int) -> int | None:
    raw = node.status.capacity.get(name) if name else None
    if raw is None:
        return None
    return whole_quantity(f"status.capacity[{name}]", raw, limit, f"more than {limit} on one node")


def _read(container: Container, name: str, field: str) -> tuple[str, str, QuantityValue, int] | None:
    """(section, field path, raw value, whole number) of resource ``name``, limits first; None when absent."""
    found = lookup_resource(container, name)
    if found is None:
        return None
    where = f"{field}.{found[0]}[{name}]"
    n = whole_quantity(where, found[1], _INT32_MAX, "exceeds the int32 range HAMi's annotations can carry")
    return found[0], where, found[1], n


def _check_cores(where: str, raw: QuantityValue, cores: int) -> None:
    """A core count every node geometry can split: ≤ 2 (one device) or even (whole two-core devices)."""
    if cores <= 0:
        raise QuantityError(where, raw, "must be greater than 0")
    if cores > MAX_ADDRESSABLE_CORES and cores % MAX_ADDRESSABLE_CORES:
        raise QuantityError(
            where, raw, f"must be at most {MAX_ADDRESSABLE_CORES} (one device) or a multiple of {MAX_ADDRESSABLE_CORES}"
        )


@dataclass(frozen=True, slots=True)
class NeuronAdmitter:
    """Validates the device or core count (limits first, then requests); the container then uses Neuron."""

    count: str
    core: str
    runtime_class_name: str = ""

    def admit(self, container: Container, field: str, edit: ContainerEdit, pod: PodContext) -> bool:
        found = lookup(container, edit, self.count)
        if found is not None:
            where = f"{field}.{found[0]}[{self.count}]"
            n = whole_quantity(where, found[1], _INT32_MAX, "exceeds the int32 range HAMi's annotations can carry")
            if n <= 0:
                raise QuantityError(where, found[1], "must be greater than 0")
            return True
        core = lookup(container, edit, self.core)
        if core is None:
            return False
        where = f"{field}.{core[0]}[{self.core}]"
        cores = whole_quantity(where, core[1], _INT32_MAX, "exceeds the int32 range HAMi's annotations can carry")
        _check_cores(where, core[1], cores)
        return True


@dataclass(frozen=True, slots=True)
class _Geometry:
    """A node's Neuron geometry: cores per device, addressable cores per device, instance type."""

    cores_per_device: int
    addressable: int
    instance_type: str

    @classmethod
    def of(cls, info: Mapping[str, str]) -> _Geometry:
        per = int(info.get("cores_per_device", "0") or 0)
        return cls(per, min(per, MAX_ADDRESSABLE_CORES), info.get("instance_type", ""))

    def split(self, request: ContainerRequest) -> tuple[int, int] | None:
        """(devices, cores per device) for the request on this node; None when its cores cannot be split."""
        k = self.addressable
        mode, _, rest = request.variant.partition(":")
        if mode != _CORES:
            return request.nums, k
        cores = int(rest)
        if cores <= k:
            return 1, cores
        if cores % k:
            return None
        return cores // k, k


def _popcount(value: int) -> int:
    return bin(value).count("1")


def _lowest_free(mask: int, used: int, cores: int) -> int:
    """The lowest ``cores`` bits of ``mask`` not in ``used`` (HAMi: 1 or 3 on an idle device, else the other)."""
    out, bit = 0, 1
    while cores and bit <= mask:
        if mask & bit and not used & bit:
            out |= bit
            cores -= 1
        bit <<= 1
    return out


def contiguous_run(free: Sequence[bool], count: int, instance_type: str) -> tuple[int, ...]:
    """The first run of ``count`` free devices (by index): any start on ``inf*`` instance types, else runs of 1, 4,
    8 or 16 aligned to their length; ``()`` when there is none."""
    if "inf" in instance_type or "Inf" in instance_type:
        starts: Sequence[int] = range(len(free))
    elif count in _RUNS:
        starts = range(0, len(free), count)
    else:
        return ()
    for start in starts:
        run = range(start, start + count)
        if run.stop <= len(free) and all(free[i] for i in run):
            return tuple(run)
    return ()


class AwsNeuronVendor(SharedDeviceVendor):
    """HAMi's AWS Neuron backend, configured by the ``awsneuron:`` section of device-config.yaml."""

    name = NEURON
    keys = NEURON_KEYS

    def __init__(self, config: AwsNeuronConfig) -> None:
        self.config = config
        # No core resource for quota: the ledger holds core *masks* for Neuron, which do not add up as counts.
        self.resources = ResourceNames(count=config.resource_count_name, memory=None, core=None)

    def core_count(self, value: int) -> int:
        """A core mask (a device's addressable cores, a usage, a charge) as the number of cores it holds: reports
        and metrics show ``1/2 cores``, not the mask's ``1/3`` (``CoreCount``)."""
        return _popcount(value)

    def admitter(self) -> Admitter:
        return NeuronAdmitter(self.config.resource_count_name, self.config.resource_core_name)

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        count = _read(container, self.config.resource_count_name, field)
        if count is not None:
            section, where, raw, n = count
            if n <= 0:
                raise QuantityError(where, raw, "must be greater than 0")
            variant = _DEVICES if section == "limits" else _DEVICES_BY_REQUEST
            return ContainerRequest(NEURON, n, coresreq=MAX_ADDRESSABLE_CORES, variant=variant)
        core = _read(container, self.config.resource_core_name, field)
        if core is None:
            return None
        _, where, raw, cores = core
        _check_cores(where, raw, cores)
        nums = 1 if cores <= MAX_ADDRESSABLE_CORES else cores // MAX_ADDRESSABLE_CORES
        return ContainerRequest(NEURON, nums, coresreq=min(cores, MAX_ADDRESSABLE_CORES), variant=f"{_CORES}:{cores}")

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        count_name, core_name = self.config.resource_count_name, self.config.resource_core_name
        devices = _capacity(node, count_name, _MAX_DEVICES)
        if not devices:
            return None
        cores = _capacity(node, core_name, _MAX_DEVICES * _MAX_CORES_PER_DEVICE)
        field = f"status.capacity[{core_name}]"
        if cores is None or cores == 0:
            raise QuantityError(field, cores, f"{devices} Neuron devices but no NeuronCores: cores per device unknown")
        if cores % devices:
            raise QuantityError(field, cores, f"not a multiple of the {devices} Neuron devices ({count_name})")
        per = cores // devices
        mask = (1 << min(per, MAX_ADDRESSABLE_CORES)) - 1
        name = node.metadata.name
        infos = tuple(DeviceInfo(f"{name}-{NEURON}-{i}", i, per, 0, mask, NEURON, health=True) for i in range(devices))
        info = {"cores_per_device": str(per), "instance_type": node.metadata.labels.get(INSTANCE_TYPE_LABEL, "")}
        return NodeInventory(infos, node_info=info)

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return Selector.from_annotations(annotations, (USE_UUID, NOUSE_UUID))

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        geometry = _Geometry.of(ctx.node_info)
        n = len(table.infos)
        split = geometry.split(request) if geometry.addressable else None
        if split is None:
            return Unfit({Reason.MODE_NOT_FIT: n}, n)
        nums, cores = split
        if nums > n:
            return too_few_devices(n, nums)
        mark = self._marker(request, geometry)
        if nums > 1:
            return self._several(table, nums, ctx, selector, geometry, mark)
        return self._one(table, request, cores, ctx, selector, mark)

    @staticmethod
    def _marker(request: ContainerRequest, geometry: _Geometry) -> Slice:
        """What the annotations need per placement: the form of AWS_NEURON_IDS and the node's cores per device."""
        form = _DEVICES if request.variant == _DEVICES else _CORES
        return Slice(form, None, (("cores_per_device", str(geometry.cores_per_device)),))

    @staticmethod
    def _usable(table: DeviceTable, i: int, ctx: FitContext, selector: Selector) -> Reason | None:
        info = table.infos[i]
        if not info.health or table.broken[i] is not None:
            return Reason.CARD_NOT_HEALTH
        if info.id in ctx.cordoned:
            return Reason.CARD_CORDONED
        if not selector.uuid_ok(info.id):
            return Reason.CARD_UUID_MISMATCH
        return None

    def _several(
        self, table: DeviceTable, nums: int, ctx: FitContext, selector: Selector, geometry: _Geometry, mark: Slice
    ) -> Fitted | Unfit:
        free = [self._usable(table, i, ctx, selector) is None and table.used[i] == 0 for i in range(len(table.infos))]
        by_index = sorted(range(len(table.infos)), key=lambda i: table.infos[i].index)
        run = contiguous_run([free[i] for i in by_index], nums, geometry.instance_type)
        if not run:
            return Unfit({Reason.NUMA_NOT_FIT: 1}, len(table.infos))
        placements = []
        for position in run:
            i = by_index[position]
            info = table.infos[i]
            placements.append(Placement(i, ContainerDevice(info.id, NEURON, info.devmem, info.devcore), mark))
        return Fitted(tuple(placements))

    def _one(
        self,
        table: DeviceTable,
        request: ContainerRequest,
        cores: int,
        ctx: FitContext,
        selector: Selector,
        mark: Slice,
    ) -> Fitted | Unfit:
        counts: dict[Reason, int] = {}
        misses: list[Rejection] = []
        for i in policy_order(table, device_scores(table, request, ctx.weights), ctx):
            info = table.infos[i]
            reason = self._usable(table, i, ctx, selector)
            if reason is None and info.count <= table.used[i]:
                reason = Reason.CARD_TIME_SLICING_EXHAUSTED
            used = table.usedcores[i] & info.devcore
            free = _popcount(info.devcore) - _popcount(used)
            if reason is None and free < cores:
                reason = Reason.CARD_INSUFFICIENT_CORE
                misses.append(Rejection(reason, info.id, cores, free))
            if reason is not None:
                counts[reason] = counts.get(reason, 0) + 1
                continue
            device = ContainerDevice(info.id, NEURON, 0, _lowest_free(info.devcore, used, cores))
            return Fitted((Placement(i, device, mark),))
        misses.sort(key=lambda r: r.available, reverse=True)
        return Unfit(counts, len(table.infos), tuple(misses[:3]))

    def extra_annotations(self, ctx: AnnotationContext) -> dict[str, str]:
        return neuron_annotations(ctx, self.config.resource_core_name)


def neuron_annotations(ctx: AnnotationContext, core_name: str) -> dict[str, str]:
    """HAMi's Neuron pod annotations for a decision (``PatchAnnotations``), byte for byte."""
    marks = {(s.container, s.device): s.slice for s in ctx.slices}
    ids: list[str] = []
    out: dict[str, str] = {}
    for ci, slot in enumerate(ctx.devices):
        for di, device in enumerate(slot):
            mark = marks.get((ci, di))
            index = _index_of(device.uuid)
            if mark is not None and mark.template == _DEVICES:
                ids.append(str(index))
                continue
            per = int(mark.fact("cores_per_device", "0")) if mark is not None else 0
            for bit in (0, 1):
                if device.usedcores & (1 << bit):
                    ids.append(str(per * index + bit))
                    out[RESOURCE_TYPE] = core_name
        if slot and ids:
            out[ASSIGNED_IDS] = ",".join(ids)
            out[ALLOC_TIME] = str(ctx.now_ns)
            out[NEURON_ALLOCATED] = "false"
            out[PREDICATE_NODE] = ctx.node
    return out


def _index_of(uuid: str) -> int:
    """The device index in ``<node>-AWSNeuron-<i>``."""
    tail = uuid.rpartition("-")[2]
    return int(tail) if tail.isdigit() else 0


AWSNEURON_FAMILY: Final = vendor_family(
    "awsneuron",
    AwsNeuronConfig,
    AwsNeuronVendor,
    chart=ChartValues({"resourceCountName": None, "resourceCoreName": None}, ("resourceCountName", "resourceCoreName")),
)
"""The registry entry: the ``awsneuron:`` section, one vendor."""
