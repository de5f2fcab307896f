"""Huawei Ascend NPUs: one vendor per chip of ``vnpus.configs`` (webhook-bind-plugin-vendors.md §7 "Ascend details").

Each chip config (910A, 910B2, 910B3, 910B4-1, 910B4, 310P, 910C) is its own vendor whose key is the chip's
``commonWord`` (``Ascend910B3``):

* **inventory** — ``hami.io/node-register-<CW>``, HAMi's JSON array (keys matched case-insensitively, as Go
  does: the Ascend plugin and HAMi's own tests write ``"ID"``, ``"Count"``), with ``custominfo.NetworkID`` per
  device; the node's ``hami-vnpu-core`` annotation ("true" opts the node into soft split, anything else opts it
  out) overrides the global ``vnpus.hamiVnpuCore``. Both travel in ``NodeInventory.node_info``;
* **handshake** ``hami.io/node-handshake-<CW>``; **allocation** ``hami.io/<CW>-devices-to-allocate`` /
  ``-allocated``; **extra annotations** ``huawei.com/<CW>`` (JSON ``[{"UUID","temp","memory","core"}]``, zero
  fields left out, ``temp`` = the vNPU template, absent for a whole card or a soft split) and ``predicate-time``
  (Unix seconds); the node lock is HAMi's ``hami.io/mutex.lock``;
* **requests** — ``huawei.com/<CW>`` count, ``-memory`` MiB (× ``memoryFactor`` above 1) rounded up to the first
  template with at least that much memory, else to ``memoryAllocatable`` when within ``memoryCapacity``; no
  memory is a whole card. When ``-core`` is given the memory is kept as written (soft split);
* **split modes** — pod annotation ``huawei.com/vnpu-mode: hami-core`` asks for HAMi-core's soft split: memory
  as written, ``-core`` a percentage of a card (each card counts 100), and only on nodes that opted in (else
  ``ModeNotFit``). Otherwise the card is carved into templates: the template is the partition hook's slice;
* **910C super pods** (``superPod: true``) — the webhook turns a request for 1 into 2 and refuses other odd
  counts; several NPUs are only given as whole physical cards (NPU index // 2), both NPUs of each;
* **NetworkID** — on 910 chips whose every device registers a ``NetworkID``, a multi-device request takes the
  largest same-network groups first, and each container adds ``10 × (largest same-network share)`` to the node
  score.

Deliberate differences from HAMi (v2.10):

* a chip's devices are exactly those of its registration (HAMi matches device types by substring, so a 910B4
  pod could land on a 910B4-1 card);
* 910C pairs are enforced whenever several NPUs are asked for (HAMi only when NetworkIDs are registered and
  more NPUs are free than asked for) and too few whole cards fail the node (HAMi then hands out fewer NPUs than
  asked for); likewise NetworkID grouping never returns fewer devices than asked for;
* memory beyond ``memoryCapacity``, cores above 100, negative or fractional values are refused with the
  resource and the value named (HAMi silently turns the first into a whole card and clamps cores);
* ``ASCEND_VISIBLE_DEVICES=""`` is not written into a container that asks for another Ascend chip (HAMi does,
  once per other chip with ``overwriteEnv``, hiding the devices the device plugin gives it);
* the webhook refuses with the message instead of answering an error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Final

import msgspec

from hami.devices.admission import Admitter, ContainerEdit, PodContext, lookup
from hami.devices.ascend.config import VnpuChipConfig, VnpusConfig
from hami.devices.ascend.wire import RuntimeInfo, decode_register, encode_runtime_info
from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    AnnotationContext,
    Carved,
    ContainerRequest,
    FitContext,
    Fitted,
    NodeInventory,
    Placement,
    ResourceNames,
    Selector,
    Slice,
    Unfit,
)
from hami.devices.common import Gather, SharedDeviceVendor, fit_shared
from hami.devices.resources import lookup_resource, mib_hint, whole_quantity
from hami.devices.table import DeviceTable
from hami.errors import AnnotationError, ConfigError, InvalidInput, QuantityError
from hami.protocol import keys
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Container, Node, QuantityValue
from hami.protocol.reasons import Reason

__all__ = [
    "ASCEND_VISIBLE_DEVICES",
    "HAMI_CORE",
    "NODE_OPT_IN",
    "PREDICATE_TIME",
    "VNPU_MODE",
    "AscendAdmitter",
    "AscendTemplates",
    "AscendVendor",
    "ascend_keys",
    "ascend_vendors",
]

VNPU_MODE: Final = "huawei.com/vnpu-mode"
"""Pod annotation: ``hami-core`` asks for HAMi-core's soft split; anything else (or none) for templates."""
HAMI_CORE: Final = "hami-core"
NODE_OPT_IN: Final = "hami-vnpu-core"
"""Node annotation: ``"true"`` lets soft-split pods on the node (any other value keeps them off)."""
PREDICATE_TIME: Final = "predicate-time"
ASCEND_VISIBLE_DEVICES: Final = "ASCEND_VISIBLE_DEVICES"
NETWORK_PREFIX: Final = "NetworkID/"
"""``node_info`` key prefix: ``NetworkID/<device id>`` → the integer network id ("" when not a number)."""
NETWORK_WEIGHT: Final = 10
_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1
_NPUS_PER_CARD: Final = 2


def ascend_keys(common_word: str) -> keys.VendorKeys:
    """The annotation keys of one chip (HAMi's ``InitDevices``)."""
    return keys.VendorKeys(
        common_word,
        register=f"hami.io/node-register-{common_word}",
        handshake=f"hami.io/node-handshake-{common_word}",
        to_allocate=f"hami.io/{common_word}-devices-to-allocate",
        allocated=f"hami.io/{common_word}-devices-allocated",
        extra=(f"huawei.com/{common_word}", PREDICATE_TIME),
    )


def ascend_vendors(config: VnpusConfig) -> list[AscendVendor]:
    """One vendor per chip config, in config order; a repeated ``commonWord`` is a configuration error."""
    seen: dict[str, int] = {}
    out: list[AscendVendor] = []
    counts = frozenset(chip.resource_name for chip in config.configs if chip.resource_name)
    for i, chip in enumerate(config.configs):
        first = seen.setdefault(chip.common_word, i)
        if first != i:
            raise ConfigError(
                f"vnpus.configs[{i}].commonWord",
                chip.common_word,
                f"repeats vnpus.configs[{first}]: the common word names the chip's annotations, so it must be unique",
            )
        out.append(AscendVendor(chip, config.hami_vnpu_core, counts))
    return out


# --- templates -----------------------------------------------------------------------------------------------


def _sorted_templates(chip: VnpuChipConfig) -> tuple[tuple[str, int], ...]:
    """(name, MiB) of every template, smallest memory first (HAMi sorts them at start-up)."""
    return tuple(sorted(((t.name, t.memory) for t in chip.templates), key=lambda t: t[1]))


def trim_memory(chip: VnpuChipConfig, templates: Sequence[tuple[str, int]], mib: int) -> tuple[int, str]:
    """HAMi's ``trimMemory``: the first template with at least ``mib`` MiB (its memory and name), else the chip's
    ``memoryAllocatable`` (no name) when ``mib`` is within ``memoryCapacity``, else ``(0, "")``."""
    for name, memory in templates:
        if mib <= memory:
            return memory, name
    if mib <= chip.memory_capacity:
        return chip.memory_allocatable, ""
    return 0, ""


class AscendTemplates:
    """The partition hook of one chip: a card handed out as vNPU templates. A slice is a template (no position:
    the device plugin carves the card, the scheduler only counts memory), one per card and container."""

    __slots__ = ("templates",)

    def __init__(self, templates: Sequence[tuple[str, int]]) -> None:
        self.templates = tuple(templates)

    @property
    def infeasible(self) -> Reason:
        return Reason.CARD_INSUFFICIENT_MEMORY

    def carves(self, info: DeviceInfo) -> bool:
        return True

    def several_per_device(self, infos: Sequence[DeviceInfo], selector: Selector) -> bool:
        return False

    def plan(self, info: DeviceInfo, occupied: Sequence[Hashable], amounts: Sequence[int]) -> list[Carved] | None:
        if len(amounts) != 1:
            return None  # one template per card and container
        for name, memory in self.templates:
            if amounts[0] <= memory:
                return [Carved(Slice(name), memory, 0)]
        return None

    def conflict(self, info: DeviceInfo, held: Sequence[Hashable], owner: str) -> str | None:
        return None  # templates have no position the scheduler could contradict


# --- inventory -----------------------------------------------------------------------------------------------


def decode_ascend_inventory(raw: str, field: str) -> tuple[list[DeviceInfo], dict[str, str]]:
    """Devices of a ``hami.io/node-register-<CW>`` value (``decode_register``) and their ``NetworkID`` as
    ``node_info`` entries: a ``NetworkID`` that is not a number is kept as present but unusable (HAMi ignores it
    for grouping). No device at all is an error, as in HAMi. Raises ``AnnotationError``."""
    decoded = decode_register(raw, field)
    if not decoded:
        raise AnnotationError(field, raw, "no device found on node")
    networks = {
        NETWORK_PREFIX + device.id: _network_id(custom["NetworkID"])
        for device, custom in decoded
        if custom is not None and "NetworkID" in custom
    }
    return [device for device, _ in decoded], networks


def _network_id(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return ""
    return str(int(value))  # Go reads a float64 and truncates it to int


# --- requests ------------------------------------------------------------------------------------------------


def _read(
    container: Container, name: str, field: str, maximum: int = _INT32_MAX
) -> tuple[int | None, QuantityValue | None, str]:
    found = lookup_resource(container, name)
    if found is None:
        return None, None, ""
    section, raw = found
    where = f"{field}.{section}[{name}]"
    too_large = "exceeds the int32 range HAMi's annotations can carry"
    return whole_quantity(where, raw, maximum, too_large), raw, where


class AscendVendor(SharedDeviceVendor):
    """One Ascend chip config of ``vnpus.configs``, as HAMi's ``ascend.Devices``."""

    def __init__(self, chip: VnpuChipConfig, hami_vnpu_core: bool = False, ascend_counts: Iterable[str] = ()) -> None:
        self.chip = chip
        self.name = chip.common_word
        self.keys = ascend_keys(chip.common_word)
        self.hami_vnpu_core = hami_vnpu_core
        self.resources = ResourceNames(
            count=chip.resource_name,
            memory=chip.resource_memory_name or None,
            core=chip.resource_core_name or None,
            memory_factor=max(chip.memory_factor, 1),
        )
        self.templates = _sorted_templates(chip)
        self.hook = AscendTemplates(self.templates)
        self.partitions = self.hook
        self.ascend_counts = frozenset(ascend_counts) | {chip.resource_name}
        self.use_uuid = f"hami.io/use-{chip.common_word}-uuid"
        self.nouse_uuid = f"hami.io/no-use-{chip.common_word}-uuid"
        self.networked = chip.common_word.startswith("Ascend910")

    # --- requests and inventory ---

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        chip = self.chip
        count, _, _ = _read(container, chip.resource_name, field)
        if not count:
            return None
        mem, raw_mem, mem_field = _read(container, chip.resource_memory_name, field, _INT64_MAX)
        cores, raw_cores, cores_field = _read(container, chip.resource_core_name, field)
        if cores is not None and cores > 100:
            raise QuantityError(cores_field, raw_cores, "cores are a percentage of one NPU and cannot exceed 100")
        memreq = 0
        if mem is not None:
            memreq = mem * chip.memory_factor if chip.memory_factor > 1 else mem
            if cores is None:  # templates; with -core the memory is kept as written (soft split)
                memreq, _ = trim_memory(chip, self.templates, memreq)
                if memreq == 0:
                    hint = mib_hint(raw_mem) if raw_mem is not None else ""
                    raise QuantityError(
                        mem_field, raw_mem, f"exceeds the chip's memoryCapacity of {chip.memory_capacity} MiB{hint}"
                    )
            elif memreq > _INT32_MAX:
                raise QuantityError(mem_field, raw_mem, f"× memoryFactor {chip.memory_factor} exceeds the int32 range")
        return ContainerRequest(
            vendor=self.name,
            nums=count,
            memreq=memreq,
            mem_percentage=100 if memreq == 0 else MEM_PERCENTAGE_UNSET,
            coresreq=cores or 0,
        )

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        annotations = node.metadata.annotations
        raw = annotations.get(self.keys.register)
        if raw is None:
            return None
        devices, info = decode_ascend_inventory(raw, self.keys.register)
        opt_in = annotations.get(NODE_OPT_IN)
        info[NODE_OPT_IN] = "true" if (self.hami_vnpu_core if opt_in is None else opt_in == "true") else "false"
        return NodeInventory(tuple(devices), node_info=info)

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        mode = annotations.get(VNPU_MODE, "")
        return Selector.from_annotations(
            annotations, (self.use_uuid, self.nouse_uuid), options=((VNPU_MODE, mode),) if mode else ()
        )

    # --- fit ---

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        soft = selector.option(VNPU_MODE) == HAMI_CORE
        if soft and ctx.node_info.get(NODE_OPT_IN) != "true":
            return Unfit({Reason.MODE_NOT_FIT: 1}, len(table.infos))
        if ctx.policy.numa_bind:  # Ascend cards are never grouped by NUMA node (HAMi's checkType)
            ctx = dataclasses.replace(ctx, policy=dataclasses.replace(ctx.policy, numa_bind=False))
        hook = None
        if soft:
            table = _percent_cores(table)
        elif request.memreq > 0:
            size, name = trim_memory(self.chip, self.templates, request.memreq)
            if name:  # a template: the card is carved (the slice holds the template's memory)
                request = dataclasses.replace(request, memreq=size)
                hook = self.hook
        outcome = fit_shared(
            table, request, ctx, selector, self.name, hook, self.order, gather=self._gather(table, ctx, request)
        )
        if isinstance(outcome, Fitted) and self.networked:
            return Fitted(outcome.placements, _network_score(outcome.placements, ctx.node_info))
        return outcome

    def _gather(self, table: DeviceTable, ctx: FitContext, request: ContainerRequest) -> Gather | None:
        if request.nums <= 1:
            return None
        if self.chip.super_pod:
            return lambda found, nums: _whole_cards(table, found, nums)
        if self.networked and table.infos and all(NETWORK_PREFIX + i.id in ctx.node_info for i in table.infos):
            return lambda found, nums: _by_network(found, nums, ctx.node_info)
        return None

    # --- annotations and admission ---

    def extra_annotations(self, ctx: AnnotationContext) -> dict[str, str]:
        temps = {(s.container, s.device): s.slice.template for s in ctx.slices}
        infos = [
            RuntimeInfo(uuid=dev.uuid, temp=temps.get((ci, di), ""), memory=dev.usedmem, core=dev.usedcores)
            for ci, container in enumerate(ctx.devices)
            for di, dev in enumerate(container)
        ]
        if not infos:
            return {}
        return {f"huawei.com/{self.name}": encode_runtime_info(infos), PREDICATE_TIME: str(ctx.now_ns // 1_000_000_000)}

    def admitter(self) -> Admitter:
        return AscendAdmitter(self.chip, self.templates, self.ascend_counts)


def _percent_cores(table: DeviceTable) -> DeviceTable:
    """The table as a soft-split pod sees it: every card has 100 cores (HAMi-core counts percent of a card)."""
    view = table.scratch()
    view.infos = tuple(
        info if info.devcore == 100 else msgspec.structs.replace(info, devcore=100) for info in table.infos
    )
    return view


def _whole_cards(table: DeviceTable, found: Sequence[Placement], nums: int) -> tuple[Placement, ...] | None:
    """910C: both NPUs of whole physical cards (index // 2), cards in the order their first NPU was found."""
    cards: dict[int, list[Placement]] = {}
    for p in found:
        cards.setdefault(table.infos[p.index].index // _NPUS_PER_CARD, []).append(p)
    picked: list[Placement] = []
    for npus in cards.values():
        if len(npus) == _NPUS_PER_CARD and len(picked) < nums:
            picked.extend(npus)
    return tuple(picked) if len(picked) == nums else None


def _by_network(found: Sequence[Placement], nums: int, info: Mapping[str, str]) -> tuple[Placement, ...] | None:
    """HAMi's ``computeBestCombination``: the largest same-NetworkID groups first (ties: the group found first)."""
    if len(found) == nums:
        return tuple(found)
    groups: dict[str, list[Placement]] = {}
    for p in found:
        network = info.get(NETWORK_PREFIX + p.device.uuid, "")
        if network:
            groups.setdefault(network, []).append(p)
    picked: list[Placement] = []
    for group in sorted(groups.values(), key=len, reverse=True):
        picked.extend(group[: nums - len(picked)])
    return tuple(picked) if len(picked) == nums else None


def _network_score(placements: Sequence[Placement], info: Mapping[str, str]) -> float:
    """HAMi's ``ScoreNode`` share of one container: 10 × (devices in the largest NetworkID group / devices)."""
    counts: dict[str, int] = {}
    for p in placements:
        network = info.get(NETWORK_PREFIX + p.device.uuid)
        if network is None:
            return 0.0
        if network:
            counts[network] = counts.get(network, 0) + 1
    total = sum(counts.values())
    return NETWORK_WEIGHT * max(counts.values()) / total if total else 0.0


# --- admission -----------------------------------------------------------------------------------------------


class AscendAdmitter:
    """HAMi's Ascend ``MutateAdmission`` for one chip, as an ``Admitter``:

    1. no count in limits → with ``overwriteEnv``, env ``ASCEND_VISIBLE_DEVICES=""`` (unless the container asks
       for another Ascend chip) and not found;
    2. super pod: a count of 1 becomes 2 (limits, and requests when there); another odd count is refused;
    3. template mode (no ``huawei.com/vnpu-mode: hami-core``): a ``-core`` above 0 is refused;
    4. ``-memory`` from limits: soft split keeps it, templates round it up (``trim_memory``; beyond
       ``memoryCapacity`` refused); none → ``memoryAllocatable``;
    5. several NPUs with less than ``memoryAllocatable`` → refused (a vNPU is one card's slice);
    6. limits and requests of ``-memory`` set to that value; ``runtimeClassName`` when the pod has none.
    """

    __slots__ = ("chip", "others", "templates")

    def __init__(
        self, chip: VnpuChipConfig, templates: Sequence[tuple[str, int]], ascend_counts: Iterable[str]
    ) -> None:
        self.chip = chip
        self.templates = tuple(templates)
        self.others = frozenset(ascend_counts)

    @property
    def runtime_class_name(self) -> str:
        return self.chip.runtime_class_name

    def admit(self, container: Container, field: str, edit: ContainerEdit, pod: PodContext) -> bool:
        chip = self.chip
        limits = container.resources.limits
        if not chip.resource_name or chip.resource_name not in limits:
            if chip.overwrite_env and not any(name in limits for name in self.others):
                edit.env[ASCEND_VISIBLE_DEVICES] = ""
            return False
        where = f"{field}.limits[{chip.resource_name}]"
        count = whole_quantity(where, limits[chip.resource_name], _INT32_MAX, "exceeds the int32 range")
        if chip.super_pod:
            self._pairs(container, count, where, edit)
        soft = pod.annotations.get(VNPU_MODE) == HAMI_CORE
        if not soft:
            self._no_cores(container, field, edit)
        memory = self._memory(container, field, soft)
        if count > 1 and memory != chip.memory_allocatable:
            raise InvalidInput(
                where,
                count,
                "vNPU not supported for multiple devices: a request for several NPUs takes whole cards "
                f"({chip.resource_memory_name} {chip.memory_allocatable} or none)",
            )
        if chip.resource_memory_name:
            edit.limits[chip.resource_memory_name] = str(memory)
            edit.requests[chip.resource_memory_name] = str(memory)
        return True

    def _pairs(self, container: Container, count: int, where: str, edit: ContainerEdit) -> None:
        name = self.chip.resource_name
        if count == 1:  # the smallest unit is one physical card: both of its NPUs
            edit.limits[name] = "2"
            if name in container.resources.requests:
                edit.requests[name] = "2"
        elif count % 2:
            # the message names the value (HAMi's text), so the error carries none to repeat
            raise InvalidInput(where, None, f"{self.chip.common_word} device request must be 1 or 2*n, got {count}")

    def _no_cores(self, container: Container, field: str, edit: ContainerEdit) -> None:
        name = self.chip.resource_core_name
        found = lookup(container, edit, name)
        if found is None:
            return
        where = f"{field}.{found[0]}[{name}]"
        if whole_quantity(where, found[1], _INT32_MAX, "exceeds the int32 range") > 0:
            raise InvalidInput(
                where,
                found[1],
                f"{name} is only supported in hami-core (soft split) mode: annotate the pod "
                f"{VNPU_MODE}: {HAMI_CORE}, or leave {name} out (a template fixes the cores)",
            )

    def _memory(self, container: Container, field: str, soft: bool) -> int:
        chip = self.chip
        raw = container.resources.limits.get(chip.resource_memory_name) if chip.resource_memory_name else None
        if raw is None:
            return chip.memory_allocatable
        where = f"{field}.limits[{chip.resource_memory_name}]"
        value = whole_quantity(where, raw, _INT64_MAX, "exceeds the int64 range")
        if soft:
            return value
        trimmed, _ = trim_memory(chip, self.templates, value)
        if trimmed <= 0:
            raise InvalidInput(
                where,
                None,
                f"{chip.resource_memory_name} {value} is invalid: more than the chip's memoryCapacity of "
                f"{chip.memory_capacity} MiB{mib_hint(raw)}",
            )
        return trimmed
