"""Enflame: whole GCUs (vendor key ``GCU``) and DRS vGCU profiles (vendor key ``Enflame``)
(webhook-bind-plugin-vendors.md §7; HAMi v2.10.0 ``pkg/device/enflame/gcu.go`` and ``device.go``).

**Whole GCUs** (``enflame.com/gcu``): the node's ``status.capacity`` gives the number of cards; each card is
``<node>-GCU-<i>`` with Count 1, memory 100 and cores 100 (placeholders: a card is never shared). A container
asking for n cards gets n idle cards (a card in use counts ``ExclusiveDeviceAllocateConflict``), recorded as
``<id>,GCU,100,100:`` in ``hami.io/enflame-gcu-devices-to-allocate`` and ``-allocated``. No handshake, no lock.

**DRS vGCU** (``enflame.com/drs-gcu``, ``enflame.com/gcu-memory``, ``enflame.com/gcu-core``): Enflame's device
plugin publishes the node annotation ``enflame.com/gcu-drs-capacity`` =
``{"devices":[{"index","minor","capacity"}],"profiles":{"<s>g.<m>gb":"<profile id>"}}``. Each device is
``<node>-enflame-drs-<index>`` with Count = its slice capacity, memory = the largest profile's GB × 1024 MiB and
100 cores. A container takes one profile on one device:

* *direct mode* — ``drs-gcu: s`` asks for the profile of exactly ``s`` slices;
* *spec mode* — ``gcu-memory`` (GB; a value above twice the largest profile's GB is read as MiB) and/or
  ``gcu-core`` (percent) ask for the smallest profile (by slices, then GB) with at least that memory and
  ``ceil(slices × 100 / max slices)`` ≥ that core share.

No profile of the node matches → ``ModeNotFit``. The profile's memory (MiB) and core share are charged to the
device and written as ``<id>,Enflame,<MiB>,<core>:`` in ``hami.io/enflame-vgpu-devices-allocated`` (the only
allocation annotation), with ``enflame.com/gcu-assigned="false"``, ``enflame.com/gcu-assigned-time`` (ns),
``enflame.com/gcu-assigned-index``/``-id`` (the device index), ``enflame.com/gcu-assigned-minor``,
``enflame.com/gcu-request-size`` (slices; all from the first container with a profile) and
``assigned-containers`` = ``{"<container>":{"allocated":false,"request":<slices>,"profileID":…,
"profileName":…}}``. The webhook mirrors each of the three resources between limits and requests and refuses
values ≤ 0 and cores outside (0, 100]. UUID filters ``enflame.com/use-gpuuuid``/``nouse-gpuuuid``.

Deliberate differences from HAMi:

* a malformed ``gcu-drs-capacity`` (a profile name that is not ``<s>g.<m>gb``, an index that is not a number, a
  capacity that is not a positive whole number) quarantines the node's DRS devices with a message naming the
  value; HAMi skips unreadable profiles and falls back to list positions for unreadable indexes;
* a request whose numbers are not whole, are negative or exceed int32 is refused at admission and at Filter
  (HAMi silently ignores the container's request);
* the webhook denies with the message instead of answering an error (vendors-appendix.md, "Errors");
* a slot is charged per container using a profile, also while the pod is being placed (HAMi charges a profile's
  slice count during Filter but one slot once rebuilt from annotations, §11 item 21); a device's slices are held
  to its capacity by the core shares, which add up to at most 100 only when the slices do.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Final

import msgspec
from pydantic import StrictStr

from hami.devices.admission import Admitter, ContainerEdit, PodContext, lookup
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
    Slice,
    Unfit,
    too_few_devices,
)
from hami.devices.common import SharedDeviceVendor, fit_shared, policy_order
from hami.devices.configmodel import ConfigModel, yaml_key
from hami.devices.family import ChartValues, vendor_family
from hami.devices.resources import lookup_resource, whole_quantity
from hami.devices.scoring import device_scores
from hami.devices.table import DeviceTable
from hami.errors import AnnotationError, InvalidInput, QuantityError
from hami.protocol import _gojson
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo
from hami.protocol.keys import VendorKeys
from hami.protocol.objects import Container, Node, QuantityValue
from hami.protocol.reasons import Reason

__all__ = [
    "ASSIGNED",
    "ASSIGNED_CONTAINERS",
    "ASSIGNED_ID",
    "ASSIGNED_INDEX",
    "ASSIGNED_MINOR",
    "ASSIGNED_TIME",
    "DRS_CAPACITY",
    "DRS_KEYS",
    "ENFLAME_FAMILY",
    "GCU_KEYS",
    "REQUEST_SIZE",
    "EnflameConfig",
    "EnflameDrsVendor",
    "EnflameGcuVendor",
    "Profile",
    "profiles_of",
]


class EnflameConfig(ConfigModel):
    """``enflame:`` — whole GCUs, DRS hard partitions, and the legacy shared-GCU names."""

    resource_name_gcu: Annotated[StrictStr, yaml_key("resourceNameGCU")] = "enflame.com/gcu"
    resource_name_drs_gcu: Annotated[StrictStr, yaml_key("resourceNameDRSGCU")] = "enflame.com/drs-gcu"
    resource_name_gcu_memory: Annotated[StrictStr, yaml_key("resourceNameGCUMemory")] = "enflame.com/gcu-memory"
    resource_name_gcu_core: Annotated[StrictStr, yaml_key("resourceNameGCUCore")] = "enflame.com/gcu-core"
    resource_name_vgcu: Annotated[StrictStr, yaml_key("resourceNameVGCU")] = ""
    resource_name_vgcu_percentage: Annotated[StrictStr, yaml_key("resourceNameVGCUPercentage")] = ""


GCU: Final = "GCU"
ENFLAME: Final = "Enflame"
DRS_CAPACITY: Final = "enflame.com/gcu-drs-capacity"
ASSIGNED: Final = "enflame.com/gcu-assigned"
ASSIGNED_TIME: Final = "enflame.com/gcu-assigned-time"
ASSIGNED_INDEX: Final = "enflame.com/gcu-assigned-index"
ASSIGNED_ID: Final = "enflame.com/gcu-assigned-id"
ASSIGNED_MINOR: Final = "enflame.com/gcu-assigned-minor"
REQUEST_SIZE: Final = "enflame.com/gcu-request-size"
ASSIGNED_CONTAINERS: Final = "assigned-containers"
USE_UUID: Final = "enflame.com/use-gpuuuid"
NOUSE_UUID: Final = "enflame.com/nouse-gpuuuid"

GCU_KEYS: Final = VendorKeys(
    GCU,
    register="",
    handshake=None,
    to_allocate="hami.io/enflame-gcu-devices-to-allocate",
    allocated="hami.io/enflame-gcu-devices-allocated",
    lock=None,
)
DRS_KEYS: Final = VendorKeys(
    ENFLAME,
    register=DRS_CAPACITY,
    handshake=None,
    to_allocate=None,
    allocated="hami.io/enflame-vgpu-devices-allocated",
    extra=(ASSIGNED, ASSIGNED_TIME, ASSIGNED_INDEX, ASSIGNED_ID, ASSIGNED_MINOR, REQUEST_SIZE, ASSIGNED_CONTAINERS),
    lock=None,
)

_INT32_MAX: Final = 2**31 - 1
_MAX_CARDS: Final = 1024
_MAX_PROFILES: Final = 64
_MAX_SLICES: Final = 1024
_MAX_PROFILE_GB: Final = 1 << 20
_PROFILE_NAME: Final = re.compile(r"\s*(\d{1,9})g\s*\.\s*(\d{1,9})gb\s*", re.IGNORECASE)
_DIRECT: Final = "slices"
_SPEC: Final = "spec"


# --- whole GCUs ------------------------------------------------------------------------------------------------


def _capacity_count(node: Node, name: str, limit: int) -> int | None:
    """The whole number ``status.capacity[name]`` of ``node``; None when absent or 0 (no devices: HAMi reports
    the node unhealthy for the vendor). Raises ``QuantityError`` naming the field for anything else."""
    raw = node.status.capacity.get(name) if name else None
    if raw is None:
        return None
    n = whole_quantity(f"status.capacity[{name}]", raw, limit, f"more than {limit} devices on one node")
    return n or None


def _count(container: Container, name: str, field: str, positive: bool) -> int | None:
    found = lookup_resource(container, name)
    if found is None:
        return None
    where = f"{field}.{found[0]}[{name}]"
    n = whole_quantity(where, found[1], _INT32_MAX, "exceeds the int32 range HAMi's annotations can carry")
    if positive and n == 0:
        raise QuantityError(where, found[1], "must be greater than 0")
    return n


class EnflameGcuVendor(SharedDeviceVendor):
    """HAMi's whole-GCU backend (``GCU``): exclusive cards counted from ``status.capacity``."""

    name = GCU
    keys = GCU_KEYS

    def __init__(self, config: EnflameConfig) -> None:
        self.config = config
        self.resources = ResourceNames(count=config.resource_name_gcu, memory=None, core=None)

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        n = _count(container, self.config.resource_name_gcu, field, positive=False)
        if not n:
            return None
        return ContainerRequest(vendor=GCU, nums=n, memreq=100, mem_percentage=100, coresreq=100)

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        cards = _capacity_count(node, self.config.resource_name_gcu, _MAX_CARDS)
        if cards is None:
            return None
        name = node.metadata.name
        return NodeInventory(
            tuple(DeviceInfo(f"{name}-{GCU}-{i}", i, 1, 100, 100, GCU, health=True) for i in range(cards))
        )

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return Selector()

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        """Idle cards only, in the policy's order (HAMi: the first of its checks a card fails is counted)."""
        n = len(table.infos)
        if request.nums > n:
            return too_few_devices(n, request.nums)
        counts: dict[Reason, int] = {}
        accepted: list[Placement] = []
        for i in policy_order(table, device_scores(table, request, ctx.weights), ctx):
            info = table.infos[i]
            reason = _gcu_problem(table, i, ctx)
            if reason is not None:
                counts[reason] = counts.get(reason, 0) + 1
                continue
            accepted.append(Placement(i, ContainerDevice(info.id, GCU, request.memreq, request.coresreq)))
            if len(accepted) == request.nums:
                return Fitted(tuple(accepted))
        if accepted:
            counts[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(accepted)
        return Unfit(counts, n)


def _gcu_problem(table: DeviceTable, i: int, ctx: FitContext) -> Reason | None:
    info = table.infos[i]
    if not info.health or table.broken[i] is not None:
        return Reason.CARD_NOT_HEALTH
    if info.id in ctx.cordoned:
        return Reason.CARD_CORDONED
    if table.used[i] > 0:
        return Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    return None


# --- DRS profiles ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Profile:
    """One DRS profile of a node: its name (``3g.20gb``), id, slices, memory in GB and core share in percent."""

    name: str
    id: str
    slices: int
    memory_gb: int
    core: int

    @property
    def memory_mib(self) -> int:
        return self.memory_gb * 1024


class _Capacity(msgspec.Struct, forbid_unknown_fields=False):
    devices: list[dict[str, object]] | None = None
    profiles: dict[str, str] | None = None


_CAPACITY_DECODER: Final = msgspec.json.Decoder(_Capacity)


def _decode_capacity(raw: str) -> _Capacity:
    if len(raw) > 1 << 20:
        raise AnnotationError(DRS_CAPACITY, raw[:64], "longer than 1 MiB")
    return _gojson.decode(raw, _CAPACITY_DECODER, DRS_CAPACITY)


def _parse_profiles(profiles: Mapping[str, str], raw: str) -> tuple[tuple[str, str, int, int], ...]:
    """(name, id, slices, GB) of every profile; a name that is not ``<s>g.<m>gb`` is an error."""
    if not profiles:
        raise AnnotationError(DRS_CAPACITY, raw, 'no DRS profiles (expected "profiles": {"<s>g.<m>gb": "<id>"})')
    if len(profiles) > _MAX_PROFILES:
        raise AnnotationError(DRS_CAPACITY, raw, f"more than {_MAX_PROFILES} DRS profiles")
    out = []
    for name, pid in sorted(profiles.items()):
        match = _PROFILE_NAME.fullmatch(name)
        if match is None:
            raise AnnotationError(
                DRS_CAPACITY, raw, f"profile name {name!r} is not <slices>g.<memory>gb (e.g. 3g.20gb)"
            )
        slices, gb = int(match.group(1)), int(match.group(2))
        if not 0 < slices <= _MAX_SLICES or not 0 < gb <= _MAX_PROFILE_GB:
            raise AnnotationError(DRS_CAPACITY, raw, f"profile {name!r} has no slices, no memory or implausibly many")
        out.append((name, pid, slices, gb))
    return tuple(out)


def profiles_of(node_info: Mapping[str, str]) -> tuple[Profile, ...]:
    """The node's profiles, smallest first (by slices, then GB), with their core shares (HAMi's order)."""
    text = node_info.get("profiles", "")
    if not text:
        return ()
    parsed = msgspec.json.decode(text, type=list[tuple[str, str, int, int]])
    max_slices = max(p[2] for p in parsed)
    out = [Profile(n, pid, s, gb, math.ceil(s * 100 / max_slices)) for n, pid, s, gb in parsed]
    out.sort(key=lambda p: (p.slices, p.memory_gb, p.name))
    return tuple(out)


def _device_spec(entry: Mapping[str, object], position: int, raw: str) -> tuple[int, str, int]:
    """(index, minor, capacity) of one entry of ``devices``."""
    where = f"devices[{position}]"
    index = _whole_text(entry.get("index"), f"{where}.index", raw, _MAX_CARDS - 1, allow_zero=True)
    capacity = _whole_text(entry.get("capacity"), f"{where}.capacity", raw, _MAX_SLICES, allow_zero=False)
    minor_raw = entry.get("minor", "")
    if not isinstance(minor_raw, str):
        raise AnnotationError(DRS_CAPACITY, raw, f"{where}.minor is not a string")
    minor = minor_raw.strip() or str(index)
    if not minor.isdigit() or len(minor) > 9:
        raise AnnotationError(DRS_CAPACITY, raw, f"{where}.minor {minor_raw!r} is not a device number")
    return index, minor, capacity


def _whole_text(value: object, where: str, raw: str, limit: int, *, allow_zero: bool) -> int:
    """A whole number given as a JSON string (HAMi's writer) or number (capacity); errors name ``where``."""
    if isinstance(value, bool) or value is None:
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    else:
        number = None
    if number is None or number < (0 if allow_zero else 1) or number > limit:
        expected = "a whole number" if allow_zero else "a positive whole number"
        raise AnnotationError(DRS_CAPACITY, raw, f"{where} {value!r} is not {expected} up to {limit}")
    return number


def _mirror(container: Container, edit: ContainerEdit, name: str, value: QuantityValue) -> None:
    """HAMi's webhook copies a DRS resource to whichever of limits and requests lacks it."""
    if name not in container.resources.limits and name not in edit.limits:
        edit.limits[name] = str(value)
    if name not in container.resources.requests and name not in edit.requests:
        edit.requests[name] = str(value)


@dataclass(frozen=True, slots=True)
class DrsAdmitter:
    """Validates a DRS request and mirrors it between limits and requests (HAMi's ``MutateAdmission``)."""

    count: str
    memory: str
    core: str
    runtime_class_name: str = ""

    def admit(self, container: Container, field: str, edit: ContainerEdit, pod: PodContext) -> bool:
        found = lookup(container, edit, self.count)
        if found is not None:
            _positive(found, self.count, field)
            _mirror(container, edit, self.count, found[1])
            return True
        memory, core = lookup(container, edit, self.memory), lookup(container, edit, self.core)
        if memory is None and core is None:
            return False
        if memory is not None:
            _positive(memory, self.memory, field)
            _mirror(container, edit, self.memory, memory[1])
        if core is not None:
            if _positive(core, self.core, field) > 100:
                where = f"{field}.{core[0]}[{self.core}]"
                raise QuantityError(where, core[1], f"{self.core} must be in range (0,100]")
            _mirror(container, edit, self.core, core[1])
        return True


def _positive(found: tuple[str, QuantityValue], name: str, field: str) -> int:
    where = f"{field}.{found[0]}[{name}]"
    n = whole_quantity(where, found[1], _INT32_MAX, "exceeds the int32 range HAMi's annotations can carry")
    if n <= 0:
        raise QuantityError(where, found[1], f"{name} must be greater than 0")
    return n


class EnflameDrsVendor(SharedDeviceVendor):
    """HAMi's DRS vGCU backend (``Enflame``): one profile per container, from the node's DRS capacity annotation."""

    name = ENFLAME
    keys = DRS_KEYS

    def __init__(self, config: EnflameConfig) -> None:
        self.config = config
        # HAMi: an empty DRS name falls back to the legacy vGCU name, then to the default.
        count = config.resource_name_drs_gcu or config.resource_name_vgcu or "enflame.com/drs-gcu"
        self.resources = ResourceNames(
            count=count,
            memory=config.resource_name_gcu_memory or "enflame.com/gcu-memory",
            core=config.resource_name_gcu_core or "enflame.com/gcu-core",
        )

    def admitter(self) -> Admitter:
        res = self.resources
        return DrsAdmitter(res.count, res.memory or "", res.core or "")

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        res = self.resources
        slices = _count(container, res.count, field, positive=False)
        if slices:
            return ContainerRequest(vendor=ENFLAME, nums=1, variant=f"{_DIRECT}:{slices}")
        memory = _count(container, res.memory or "", field, positive=False)
        core = _count(container, res.core or "", field, positive=False)
        if memory is None and core is None:
            return None
        if core is not None and core > 100:
            raise QuantityError(f"{field}[{res.core}]", core, f"{res.core} must be in range (0,100]")
        return ContainerRequest(vendor=ENFLAME, nums=1, variant=f"{_SPEC}:{memory or 0}:{core or 0}")

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        raw = node.metadata.annotations.get(DRS_CAPACITY)
        if raw is None:
            return None
        spec = _decode_capacity(raw)
        profiles = _parse_profiles(spec.profiles or {}, raw)
        entries = spec.devices or []
        if not entries:
            raise AnnotationError(DRS_CAPACITY, raw, f"no DRS devices on node {node.metadata.name}")
        if len(entries) > _MAX_CARDS:
            raise AnnotationError(DRS_CAPACITY, raw, f"more than {_MAX_CARDS} DRS devices")
        max_gb = max(gb for _, _, _, gb in profiles)
        name = node.metadata.name
        devices: list[DeviceInfo] = []
        info = {"profiles": msgspec.json.encode(profiles).decode()}
        for position, entry in enumerate(entries):
            index, minor, capacity = _device_spec(entry, position, raw)
            uuid = f"{name}-enflame-drs-{index}"
            devices.append(DeviceInfo(uuid, index, capacity, max_gb * 1024, 100, ENFLAME, health=True))
            info[f"minor/{uuid}"] = minor
        return NodeInventory(tuple(devices), node_info=info)

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return Selector.from_annotations(annotations, (USE_UUID, NOUSE_UUID))

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        profile = choose_profile(profiles_of(ctx.node_info), request.variant)
        n = len(table.infos)
        if profile is None:
            return Unfit({Reason.MODE_NOT_FIT: 1}, n)
        sized = ContainerRequest(ENFLAME, 1, profile.memory_mib, MEM_PERCENTAGE_UNSET, profile.core)
        outcome = fit_shared(table, sized, ctx, selector, ENFLAME)
        if isinstance(outcome, Unfit):
            return outcome
        return Fitted(tuple(self._with_profile(table, p, profile, ctx) for p in outcome.placements), outcome.score)

    @staticmethod
    def _with_profile(table: DeviceTable, placed: Placement, profile: Profile, ctx: FitContext) -> Placement:
        info = table.infos[placed.index]
        facts = (
            ("id", profile.id),
            ("index", str(info.index)),
            ("minor", ctx.node_info.get(f"minor/{info.id}", str(info.index))),
            ("slices", str(profile.slices)),
        )
        return Placement(placed.index, placed.device, Slice(profile.name, None, facts))

    def extra_annotations(self, ctx: AnnotationContext) -> dict[str, str]:
        return drs_annotations(ctx)


def choose_profile(profiles: Sequence[Profile], variant: str) -> Profile | None:
    """The profile a request asks for on a node with ``profiles`` (smallest first), None when none matches."""
    if not profiles:
        return None
    mode, _, rest = variant.partition(":")
    if mode == _DIRECT:
        wanted = int(rest)
        return next((p for p in profiles if p.slices == wanted), None)
    memory_text, _, core_text = rest.partition(":")
    memory_gb = _memory_gb(int(memory_text or 0), profiles[-1].memory_gb)
    core = int(core_text or 0)
    for p in profiles:
        if (memory_gb == 0 or p.memory_gb >= memory_gb) and (core == 0 or p.core >= core):
            return p
    return None


def _memory_gb(raw: int, largest_gb: int) -> int:
    """HAMi's guess: a memory request above twice the largest profile's GB is MiB (rounded up to GB)."""
    if raw > 2 * largest_gb:
        return -(-raw // 1024)
    return raw


class _Assigned(msgspec.Struct, omit_defaults=True, rename={"profile_id": "profileID", "profile_name": "profileName"}):
    """HAMi's ``assignedContainerInfo``: ``allocated`` and ``request`` always written, the profile only when set."""

    allocated: bool
    request: int
    profile_id: str = ""
    profile_name: str = ""


def drs_annotations(ctx: AnnotationContext) -> dict[str, str]:
    """HAMi's DRS pod annotations for a decision (``PatchAnnotations``), byte for byte."""
    out = {ASSIGNED: "false", ASSIGNED_TIME: str(ctx.now_ns)}
    slices = {(s.container, s.device): s.slice for s in ctx.slices}
    assigned: dict[str, _Assigned] = {}
    for ci, slot in enumerate(ctx.devices):
        if not slot:
            continue
        chosen = slices.get((ci, 0))
        if chosen is None:
            raise InvalidInput(f"containers[{ci}]", slot[0].uuid, "an Enflame DRS device was placed without a profile")
        size = int(chosen.fact("slices", "1"))
        name = ctx.containers[ci] if ci < len(ctx.containers) and ctx.containers[ci] else f"container-{ci}"
        assigned[name] = _Assigned(False, size, chosen.fact("id"), chosen.template)
        out.setdefault(ASSIGNED_INDEX, chosen.fact("index"))
        out.setdefault(ASSIGNED_ID, chosen.fact("index"))
        out.setdefault(ASSIGNED_MINOR, chosen.fact("minor"))
        out.setdefault(REQUEST_SIZE, str(size))
    if assigned:
        # Go's json.Marshal of map[string]assignedContainerInfo: keys sorted, struct field order kept.
        out[ASSIGNED_CONTAINERS] = _gojson.encode(assigned)
    return out


ENFLAME_FAMILY: Final = vendor_family(
    "enflame",
    EnflameConfig,
    EnflameGcuVendor,
    EnflameDrsVendor,
    chart=ChartValues(
        {
            "resourceNameGCU": None,
            "resourceNameDRSGCU": "enflameResourceNameDRSGCU",
            "resourceNameGCUMemory": "enflameResourceNameGCUMemory",
            "resourceNameGCUCore": "enflameResourceNameGCUCore",
        },
        ("resourceNameGCU", "resourceNameDRSGCU", "resourceNameGCUMemory", "resourceNameGCUCore"),
    ),
)
"""The registry entry: the ``enflame:`` section, whole GCUs and DRS partitions."""
