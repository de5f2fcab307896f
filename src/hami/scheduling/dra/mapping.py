"""From DRA objects to hami's units: a slice's devices, and what one allocation result takes of a registered card.

Pure functions over ``hami.protocol.dra`` views and one driver's ``DraDriverConfig``; the ledger (``ledger.py``)
keeps the state. Units (``hami.config.dra``): memory is converted from the driver's unit to MiB and a claim's
consumption rounded **up**; cores are converted to the card's core units (``devcore``, 100 = one card at
deviceCoreScaling 1), rounded up too. Every rounding is towards counting more, never less. A shared device that
publishes no memory capacity has its shares charged the card's whole memory (reported); one that publishes no cores
capacity has them charged no cores, as a hami pod that asks for none.

**Unit check.** A device's memory capacity, converted, is compared with the memory of the card of the same UUID in
hami's registration. More than 8× apart either way is a unit mismatch, not oversubscription
(``deviceMemoryScaling`` stays far below that; bytes against MiB is 2²⁰, MiB against GiB 1024). A ``percent`` cores
capacity must be 100 for a whole card. On a mismatch the allocation is charged by **share** — the fraction of the
device's capacity it consumes, times the card's registered amount — which is right whatever the unit, and reported.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from hami.config.dra import MEMORY_UNITS_MIB, DraDriverConfig
from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol.dra import DeviceCapacity, DeviceRequestAllocationResult, ResourceSlice, local_name
from hami.protocol.inventory import DeviceInfo
from hami.protocol.quantity import parse_quantity

__all__ = [
    "BLOCKING_EFFECTS",
    "MISMATCH_FACTOR",
    "CapacityOf",
    "DeviceKey",
    "DraDevice",
    "ProblemKind",
    "Taken",
    "read_slice",
    "taken",
]

BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
"""Device-taint effects that keep new claims off a device (``None`` is informational)."""

MISMATCH_FACTOR: Final = 8
"""How far (×) a device's memory may be from its registered memory before the units are taken to disagree."""

DeviceKey = tuple[str, str, str]
"""A device's identity in DRA: (driver, pool, device name)."""


class ProblemKind(enum.StrEnum):
    """What can be wrong between DRA objects and hami's registrations (``DraProblem.kind``; metric label)."""

    UNKNOWN_UUID = "unknown-uuid"
    """The allocated device's UUID matches no card of the node's hami registration (or it has no UUID)."""
    UNKNOWN_DEVICE = "unknown-device"
    """The allocated device is in no ResourceSlice hami has (yet), or no longer published."""
    STALE_ALLOCATION = "stale-allocation"
    """The claim is allocated but reserved for no live pod."""
    UNIT_MISMATCH = "unit-mismatch"
    """A device's capacity disagrees with its registered card by more than a unit's worth."""
    MALFORMED = "malformed"
    """A field hami reads is missing or does not parse."""
    OVER_CAPACITY = "over-capacity"
    """A claim was allocated on a card whose capacity it and hami's pods together exceed."""
    INCONSISTENT_POOL = "inconsistent-pool"
    """Slices of one pool name different nodes: those not of the pool's node are not used (``pools``)."""


@dataclass(frozen=True, slots=True)
class CapacityOf:
    """One capacity of a device in the driver's unit: its whole ``value`` and what a claim that does not ask for it
    consumes (``default``: the request policy's default, else the whole value, as kube-scheduler does)."""

    value: Fraction
    default: Fraction


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One published device of a configured driver, as hami reads it."""

    key: DeviceKey
    slice: str
    node: str
    uuid: str | None
    shared: bool
    """``allowMultipleAllocations``: allocations carry a shareID and consume capacity."""
    memory: CapacityOf | None
    cores: CapacityOf | None
    taints: tuple[str, ...] = ()
    """Its ``NoSchedule``/``NoExecute`` device taints as ``key=value:effect``: kube-scheduler places no new claim on
    it (a driver taints a device that turned unhealthy); shown as unhealthy by ``hami top``, except
    ``hami.io/device-plugin-pods`` (:attr:`held_back`)."""

    @property
    def held_back(self) -> bool:
        """hami's DRA plugin holds it back from claims because pods of hami's device plugin use it
        (docs/dra-mode-switching.md): the card is well, only not offered to claims."""
        return any(t.partition(":")[0].partition("=")[0] == keys.DEVICE_PLUGIN_PODS_TAINT for t in self.taints)

    @property
    def unhealthy(self) -> bool:
        """A blocking taint other than :attr:`held_back`'s: the driver says the device is not well."""
        return any(t.partition(":")[0].partition("=")[0] != keys.DEVICE_PLUGIN_PODS_TAINT for t in self.taints)


def _capacity(cap: DeviceCapacity, where: str) -> CapacityOf:
    if cap.value is None:
        raise InvalidInput(f"{where}.value", None, "is required")
    value = parse_quantity(cap.value, f"{where}.value")
    default = cap.request_policy.default if cap.request_policy is not None else None
    if default is None:
        return CapacityOf(value, value)
    return CapacityOf(value, parse_quantity(default, f"{where}.requestPolicy.default"))


def _named(capacity: dict[str, DeviceCapacity], name: str, driver: str) -> tuple[str, DeviceCapacity] | None:
    if not name:
        return None
    wanted = local_name(name, driver)
    for key, cap in capacity.items():
        if local_name(key, driver) == wanted:
            return key, cap
    return None


def read_slice(sl: ResourceSlice, cfg: DraDriverConfig) -> tuple[list[DraDevice], list[str]]:
    """The devices of one slice of a configured driver, and what is malformed about it (messages naming the field
    and the value). A device that cannot be read is left out and reported; the others are kept."""
    spec, name = sl.spec, sl.metadata.name
    problems: list[str] = []
    if not spec.pool.name:
        return [], [f"spec.pool.name is empty: the slice's devices cannot be named (slice {name})"]
    devices: list[DraDevice] = []
    seen: set[str] = set()
    for i, dev in enumerate(spec.devices):
        where = f"spec.devices[{i}]"
        node = dev.node_name or spec.node_name
        if not dev.name or dev.name in seen:
            problems.append(f"{where}.name: {'empty' if not dev.name else 'given twice'} ({dev.name!r})")
            continue
        seen.add(dev.name)
        if not node:
            problems.append(f"{where} ({dev.name}): bound to no single node (no nodeName): not a node's card")
            continue
        wanted = local_name(cfg.uuid_attribute, spec.driver)
        attribute = next((a for k, a in dev.attributes.items() if local_name(k, spec.driver) == wanted), None)
        try:
            memory = _named(dev.capacity, cfg.memory_capacity, spec.driver)
            cores = _named(dev.capacity, cfg.cores_capacity, spec.driver)
            mem = _capacity(memory[1], f"{where}.capacity[{memory[0]}]") if memory else None
            core = _capacity(cores[1], f"{where}.capacity[{cores[0]}]") if cores else None
        except InvalidInput as err:
            problems.append(f"{err} (device {dev.name})")
            continue
        uuid = attribute.text() if attribute is not None else None
        key = (spec.driver, spec.pool.name, dev.name)
        taints = tuple(t.text() for t in dev.taints if t.effect in BLOCKING_EFFECTS)
        shared = bool(dev.allow_multiple_allocations)
        devices.append(DraDevice(key, name, node, uuid or None, shared, mem, core, taints))
    return devices, problems


@dataclass(frozen=True, slots=True)
class Taken:
    """What one shared allocation result takes of a registered card: MiB and core units, with what went wrong
    (``problems``: (kind, message); the amounts are then the conservative ones the message states)."""

    mem: int
    cores: int
    problems: tuple[tuple[ProblemKind, str], ...] = ()


def _consumed(result: DeviceRequestAllocationResult, name: str, cap: CapacityOf, where: str) -> Fraction:
    """What the result consumes of one capacity: ``consumedCapacity`` if it names it, else the default. An amount
    below zero or above the device's whole capacity cannot come from kube-scheduler (it allocates within the
    capacity): refused, so a forged status neither charges an absurd amount nor overflows a gauge."""
    for key, raw in result.consumed_capacity.items():
        if local_name(key, result.driver) == local_name(name, result.driver):
            field = f"{where}.consumedCapacity[{key}]"
            amount = parse_quantity(raw, field)
            if amount < 0:
                raise InvalidInput(field, raw, "must not be negative")
            if amount > cap.value:
                raise InvalidInput(field, raw, f"is more than the device's whole {key} capacity ({cap.value})")
            return amount
    return cap.default


def _share(amount: Fraction, whole: Fraction, card: int) -> int:
    return card if whole <= 0 else math.ceil(amount * card / whole)


def _memory(
    result: DeviceRequestAllocationResult, dev: DraDevice, cfg: DraDriverConfig, info: DeviceInfo, where: str
) -> tuple[int, list[tuple[ProblemKind, str]]]:
    cap = dev.memory
    if cap is None:  # memory is the hard limit on a card: what hami cannot measure, it must not give away
        message = (
            f"shared device {dev.key[2]} publishes no {cfg.memory_capacity!r} capacity (dra.drivers[{cfg.driver}]."
            f"memoryCapacity), so the memory this share uses is unknown: charged as the card's whole memory"
        )
        return info.devmem, [(ProblemKind.MALFORMED, message)]
    amount = _consumed(result, cfg.memory_capacity, cap, where)
    num, den = MEMORY_UNITS_MIB[cfg.memory_unit]
    whole_mib = cap.value * num / den
    if info.devmem > 0 and not info.devmem / MISMATCH_FACTOR <= whole_mib <= info.devmem * MISMATCH_FACTOR:
        message = (
            f"device {dev.key[2]} publishes {cfg.memory_capacity}={cap.value} ({float(whole_mib):g} MiB read as "
            f"{cfg.memory_unit}) but card {info.id} is registered with {info.devmem} MiB: check dra.drivers"
            f"[{cfg.driver}].memoryUnit; charged by share of the device ({amount}/{cap.value} of the card)"
        )
        return _share(amount, cap.value, info.devmem), [(ProblemKind.UNIT_MISMATCH, message)]
    return math.ceil(amount * num / den), []


def _cores(
    result: DeviceRequestAllocationResult, dev: DraDevice, cfg: DraDriverConfig, info: DeviceInfo, where: str
) -> tuple[int, list[tuple[ProblemKind, str]]]:
    cap = dev.cores
    if cap is None:
        return 0, []
    amount = _consumed(result, cfg.cores_capacity, cap, where)
    if cfg.cores_unit == "share":
        return _share(amount, cap.value, info.devcore), []
    if cap.value != 100:
        message = (
            f"device {dev.key[2]} publishes {cfg.cores_capacity}={cap.value}, but coresUnit percent means 100 is "
            f"one card: check dra.drivers[{cfg.driver}].coresUnit (share?); charged by share of the device"
        )
        return _share(amount, cap.value, info.devcore), [(ProblemKind.UNIT_MISMATCH, message)]
    return math.ceil(amount * info.devcore / 100), []


def taken(
    result: DeviceRequestAllocationResult, dev: DraDevice, cfg: DraDriverConfig, info: DeviceInfo, where: str
) -> Taken:
    """What a shared allocation result takes of ``info``, the card of the device's UUID. A consumed amount that
    does not parse is reported as malformed and charged as the whole card (it cannot be less)."""
    try:
        mem, mem_problems = _memory(result, dev, cfg, info, where)
        cores, core_problems = _cores(result, dev, cfg, info, where)
    except InvalidInput as err:
        return Taken(info.devmem, info.devcore, ((ProblemKind.MALFORMED, f"{err}: charged as the whole card"),))
    return Taken(mem, cores, tuple(mem_problems + core_problems))
