"""Kunlunxin XPUs: whole cards (vendor key ``kunlun``) and vXPU slices (``XPU``) — webhook-bind-plugin-vendors.md §7,
vendors-appendix.md.

**Whole XPUs** (``kunlunxin.com/xpu``): no registration — a node's cards come from ``status.capacity``, one per
unit, id ``<node>-kunlun-<i>``, 100 slots, 98304 MiB, 100 cores, NUMA 1 for the upper half of the cards. No
handshake, no node lock. A card is used by one container at a time. A container gets 1, 2, 4 or 8 cards, chosen on
the 8-card board's two wings (cards 0–3 and 4–7, each wing fully connected; cross links 0-4, 1-5, 2-6, 3-7): inside
one wing when a wing has enough idle cards (the wing whose idle count fits the request most tightly), else a
cross pair, or one of the six linked 4-sets 0-1-4-5, 2-3-6-7, 0-2-4-6, 1-3-5-7, 0-3-4-7, 1-2-5-6 (with six idle
cards, one that leaves a linked pair behind). The node score adds 3000/2000/1000/0 as the pod's cards make fewer,
as many or more "bubbles" (half-used wings) than the cards already in use. The pod gets only
``hami.io/kunlun-allocated`` and ``BAIDU_COM_DEVICE_IDX`` (the card indexes of the last container with cards).

**vXPU** (``kunlunxin.com/vxpu``, ``kunlunxin.com/vxpu-memory``): devices from ``hami.io/node-register-xpu`` (JSON),
handshake ``hami.io/node-handshake-xpu``, allocation ``hami.io/xpu-devices-to-allocate`` / ``-allocated``, HAMi's
``hami.io/mutex.lock``. Memory (MiB) is rounded up to a quarter, half or whole card (24576 / 49152 / 98304) by the
webhook and the parser; cores are memory × 100 / 98304; no memory means a whole card. A device holds slices of one
size only. The devices are chosen with the same two-wing selection; the ``mutex`` GPU policy takes idle devices only.

UUID filters for both: ``hami.io/use-xpu-uuid`` / ``hami.io/no-use-xpu-uuid`` and the older
``baidu.com/use-gpuuuid`` / ``baidu.com/nouse-gpuuuid``.

Deliberate differences from HAMi:

* a card's wing is decided by its index (HAMi uses its position in the score-sorted device list, so with busy cards
  in both wings it can hand out a set that is no linked group, vendors-appendix.md); only the groups above are
  ever returned; a node with more than 8 cards is treated as boards of 8 (index // 8), a group never spans boards;
* counts other than 1, 2, 4 or 8, negative or fractional values and vXPU memory above a whole card (``24Gi``
  counts MiB) are refused with a message at admission — HAMi admits them and leaves the pod pending
  (``NumaNotFit``) or silently rounds;
* Fit counts each device's own reason (``CardNotHealth``, ``CardUuidMismatch``, ``ExclusiveDeviceAllocateConflict``,
  ``CardInsufficientMemory``, ``ModeNotFit`` for a device holding slices of another size, …) and ``NumaNotFit`` only
  for idle devices that form no allowed group; HAMi reports a single ``NumaNotFit`` whatever the cause;
* the bubble score is computed from the node's whole XPUs only (HAMi returns 0 when any other vendor's device is on
  the node); both UUID key pairs apply together (HAMi reads the first one present).

vXPU does not use the partition hook (``Partitions``): its slices have no position on the device, the slice size
already shows in the device's usage (memory / slots), and the topology choice replaces the shared fit loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

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
    Selector,
    Unfit,
    parse_uuid_list,
    too_few_devices,
)
from hami.devices.common import SharedDeviceVendor
from hami.devices.configmodel import ConfigModel
from hami.devices.family import ChartValues, vendor_family
from hami.devices.resources import lookup_resource, mib_hint, whole_quantity
from hami.devices.table import DeviceTable
from hami.errors import QuantityError
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import MAX_DEVICES, DeviceInfo, decode_inventory_json
from hami.protocol.keys import NODE_LOCK, VendorKeys
from hami.protocol.objects import Container, Node, QuantityValue
from hami.protocol.reasons import Reason, Rejection

__all__ = [
    "CROSS_PAIRS",
    "DEVICE_IDX",
    "KUNLUN",
    "KUNLUN_FAMILY",
    "KUNLUN_KEYS",
    "LINKED_QUADS",
    "XPU",
    "XPU_KEYS",
    "KunlunConfig",
    "KunlunVendor",
    "VxpuAdmitter",
    "XpuVendor",
    "bubble_score",
    "bubbles",
    "choose_group",
    "round_vxpu_memory",
]


class KunlunConfig(ConfigModel):
    """``kunlun:`` — whole XPUs (``kunlun``) and vXPU slices (vendor key ``XPU``)."""

    resource_count_name: StrictStr = "kunlunxin.com/xpu"
    resource_v_count_name: StrictStr = "kunlunxin.com/vxpu"
    resource_v_memory_name: StrictStr = "kunlunxin.com/vxpu-memory"


KUNLUN: Final = "kunlun"
XPU: Final = "XPU"
DEVICE_IDX: Final = "BAIDU_COM_DEVICE_IDX"
KUNLUN_KEYS: Final = VendorKeys(
    KUNLUN,
    register="",
    handshake=None,
    to_allocate=None,
    allocated="hami.io/kunlun-allocated",
    extra=(DEVICE_IDX,),
    lock=None,
)
XPU_KEYS: Final = VendorKeys(
    XPU,
    register="hami.io/node-register-xpu",
    handshake="hami.io/node-handshake-xpu",
    to_allocate="hami.io/xpu-devices-to-allocate",
    allocated="hami.io/xpu-devices-allocated",
    lock=NODE_LOCK,
)
USE_UUID: Final = ("hami.io/use-xpu-uuid", "baidu.com/use-gpuuuid")
NOUSE_UUID: Final = ("hami.io/no-use-xpu-uuid", "baidu.com/nouse-gpuuuid")

CARD_MEMORY: Final = 98304
"""MiB of one XPU (P800): a whole card's memory, as HAMi's capacity inventory and vXPU rounding assume."""
SLICE_SIZES: Final = (24576, 49152, CARD_MEMORY)
"""vXPU memory sizes (MiB): a quarter, half and whole card."""
BOARD: Final = 8
WING: Final = 4
ALLOWED_COUNTS: Final = (1, 2, 4, 8)
CROSS_PAIRS: Final = ((0, 4), (1, 5), (2, 6), (3, 7))
LINKED_QUADS: Final = ((0, 1, 4, 5), (2, 3, 6, 7), (0, 2, 4, 6), (1, 3, 5, 7), (0, 3, 4, 7), (1, 2, 5, 6))
_TIGHTEST_WING: Final = {1: (1, 3, 2, 4), 2: (2, 3, 4), 4: (4,)}
"""For a request of n cards taken inside one wing: the wing's idle-card counts to look for, best first (an odd
count leaves whole pairs behind: a wing with 3 idle cards before one with 2)."""
_COUNT_REASON: Final = "Kunlun XPUs are allocated as 1, 2, 4 or 8 devices (the 8-card board's linked groups)"


# --- topology: pure functions over card positions 0..7 of one board --------------------------------------------


def _linked(a: int, b: int) -> bool:
    return a // WING == b // WING or abs(a - b) == WING


def _within_wing(idle: Sequence[int], nums: int) -> tuple[int, ...] | None:
    left = [p for p in idle if p < WING]
    right = [p for p in idle if p >= WING]
    if len(left) < nums and len(right) < nums:
        return None
    for wanted in _TIGHTEST_WING[nums]:
        for wing in (left, right):
            if len(wing) == wanted:
                return tuple(wing[:nums])
    return None


def _across_wings(idle: Sequence[int], nums: int) -> tuple[int, ...] | None:
    have = frozenset(idle)
    if nums == 2:
        return next((pair for pair in CROSS_PAIRS if have.issuperset(pair)), None)
    if nums != 4 or len(have) not in (4, 5, 6):
        return None
    matching = [quad for quad in LINKED_QUADS if have.issuperset(quad)]
    if len(have) == 6:
        # Prefer a set whose two leftover cards are still linked to each other (HAMi: the last match otherwise).
        for quad in matching:
            a, b = sorted(have.difference(quad))
            if _linked(a, b):
                return quad
        return matching[-1] if matching else None
    return matching[0] if matching else None


def choose_group(idle: Iterable[int], nums: int) -> tuple[int, ...] | None:
    """The card positions (0..7 on one board) to give a request for ``nums`` cards when ``idle`` can take it, or
    None when no allowed group is idle. HAMi's ``graghSelect`` with wings decided by position."""
    cards = sorted(set(idle))
    if nums == BOARD:
        return tuple(cards) if len(cards) == BOARD else None
    if nums not in _TIGHTEST_WING:
        return None
    return _within_wing(cards, nums) or _across_wings(cards, nums)


def bubbles(positions: Iterable[int]) -> int:
    """HAMi's "bubble" count of a set of card positions: per wing, 0 for a full wing, 2 for a single card, else 1
    (an empty wing counts 1); an empty set counts 1."""
    cards = set(positions)
    if not cards:
        return 1
    left = sum(1 for p in cards if p % BOARD < WING)

    def value(n: int) -> int:
        return 0 if n == WING else 2 if n == 1 else 1

    return value(left) + value(len(cards) - left)


def bubble_score(previous: Iterable[int], current: Iterable[int]) -> int:
    """HAMi's ``ScoreNode`` for whole XPUs: the cards in use before the pod (``previous``) against the pod's own
    cards (``current``): 3000 when the pod has one bubble fewer, 2000 as many, 1000 one more, 0 two more (1000 for
    any other change)."""
    change = bubbles(current) - bubbles(previous)
    return {-1: 3000, 0: 2000, 1: 1000, 2: 0}.get(change, 1000)


def _choose_on_boards(table: DeviceTable, idle: Sequence[int], nums: int) -> tuple[int, ...] | None:
    """Table indexes of the group chosen on the first board (index // 8) that has one; cards are placed on a board
    by their index (a repeated index keeps the first device)."""
    boards: dict[int, dict[int, int]] = {}
    for i in idle:
        index = table.infos[i].index
        boards.setdefault(index // BOARD, {}).setdefault(index % BOARD, i)
    for board in sorted(boards):
        by_position = boards[board]
        group = choose_group(by_position, nums)
        if group is not None:
            return tuple(by_position[p] for p in group)
    return None


# --- request parsing ----------------------------------------------------------------------------------------------


def _count(container: Container, name: str, field: str) -> int | None:
    found = lookup_resource(container, name)
    if found is None:
        return None
    section, raw = found
    where = f"{field}.{section}[{name}]"
    nums = whole_quantity(where, raw, 2**31 - 1, "exceeds the int32 range HAMi's annotations can carry")
    if nums and nums not in ALLOWED_COUNTS:
        raise QuantityError(where, raw, _COUNT_REASON)
    return nums or None


def round_vxpu_memory(where: str, raw: QuantityValue) -> int:
    """vXPU memory (MiB) rounded up to the next slice size; ``QuantityError`` for a value no slice can hold."""
    mem = whole_quantity(where, raw, 2**63 - 1, "too large")
    if mem > CARD_MEMORY:
        raise QuantityError(where, raw, f"exceeds one XPU's {CARD_MEMORY} MiB{mib_hint(raw)}")
    return next(size for size in SLICE_SIZES if mem <= size)


def _uuid_selector(annotations: Mapping[str, str]) -> Selector:
    use: frozenset[str] = frozenset().union(*(parse_uuid_list(annotations.get(k)) for k in USE_UUID))
    nouse: frozenset[str] = frozenset().union(*(parse_uuid_list(annotations.get(k)) for k in NOUSE_UUID))
    return Selector(use_uuids=use, nouse_uuids=nouse)


@dataclass(frozen=True, slots=True)
class _Names:
    resource_count_name: str
    resource_memory_name: str = ""
    resource_core_name: str = ""
    memory_factor: int = 1


# --- fit --------------------------------------------------------------------------------------------------------


class _Screen:
    """The devices of one table that can take one container, and the reasons of the others."""

    def __init__(self, table: DeviceTable) -> None:
        self.table = table
        self.counts: dict[Reason, int] = {}
        self.misses: list[Rejection] = []
        self.idle: list[int] = []

    def miss(self, i: int, reason: Reason, requested: int = 0, available: int = 0) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if requested or available:
            self.misses.append(Rejection(reason, self.table.infos[i].id, requested, available))

    def device_problem(self, i: int, ctx: FitContext, selector: Selector) -> Reason | None:
        info = self.table.infos[i]
        if not info.health or self.table.broken[i] is not None:
            return Reason.CARD_NOT_HEALTH
        if info.id in ctx.cordoned:
            return Reason.CARD_CORDONED
        if not selector.uuid_ok(info.id):
            return Reason.CARD_UUID_MISMATCH
        return None

    def unfit(self, nums: int) -> Unfit:
        """No group: idle devices count ``NumaNotFit`` when there were enough of them, else that they fell short."""
        if self.idle:
            reason = Reason.NUMA_NOT_FIT if len(self.idle) >= nums else Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST
            self.counts[reason] = self.counts.get(reason, 0) + len(self.idle)
        self.misses.sort(key=lambda r: r.available, reverse=True)
        return Unfit(self.counts, len(self.table.infos), tuple(self.misses[:3]))


def _too_few(table: DeviceTable, nums: int) -> Unfit | None:
    n = len(table.infos)
    if nums <= n:
        return None
    return too_few_devices(n, nums)


class KunlunVendor(SharedDeviceVendor):
    """Whole Kunlunxin XPUs (``kunlun``), configured by the ``kunlun:`` section (``resourceCountName``)."""

    name = KUNLUN
    keys = KUNLUN_KEYS

    def __init__(self, config: KunlunConfig) -> None:
        super().__init__(_Names(config.resource_count_name))
        self.config = config

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        nums = _count(container, self.config.resource_count_name, field)
        if nums is None:
            return None
        return ContainerRequest(vendor=self.name, nums=nums, memreq=0, mem_percentage=100, coresreq=0)

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        name = self.config.resource_count_name
        raw = node.status.capacity.get(name) if name else None
        if raw is None:
            return None
        cards = whole_quantity(f"status.capacity[{name}]", raw, MAX_DEVICES, f"more than {MAX_DEVICES} devices")
        if cards == 0:
            return None
        node_name = node.metadata.name
        devices = tuple(
            DeviceInfo(
                id=f"{node_name}-kunlun-{i}",
                index=i,
                count=100,
                devmem=CARD_MEMORY,
                devcore=100,
                type=KUNLUN,
                numa=1 if i >= cards // 2 else 0,
                health=True,
            )
            for i in range(cards)
        )
        return NodeInventory(devices)

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return _uuid_selector(annotations)

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        too_few = _too_few(table, request.nums)
        if too_few is not None:
            return too_few
        screen = _Screen(table)
        for i in range(len(table.infos)):
            reason = screen.device_problem(i, ctx, selector)
            if reason is None and table.used[i] > 0:
                reason = Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            if reason is not None:
                screen.miss(i, reason)
            else:
                screen.idle.append(i)
        group = _choose_on_boards(table, screen.idle, request.nums)
        if group is None:
            return screen.unfit(request.nums)
        placements = tuple(
            Placement(i, ContainerDevice(table.infos[i].id, KUNLUN, table.infos[i].devmem, table.infos[i].devcore))
            for i in group
        )
        return Fitted(placements, _score_contribution(table, ctx, group))

    def extra_annotations(self, ctx: AnnotationContext) -> dict[str, str]:
        """``BAIDU_COM_DEVICE_IDX``: the card indexes of the last container that got cards (as HAMi writes it)."""
        last = next((slot for slot in reversed(ctx.devices) if slot), ())
        if not last:
            return {}
        return {DEVICE_IDX: ",".join(d.uuid.rsplit("-", 1)[-1] for d in last)}


def _score_contribution(table: DeviceTable, ctx: FitContext, group: Sequence[int]) -> float:
    """This container's share of the pod's bubble score: the score of all the pod's cards so far minus that of the
    earlier containers' cards, so the node score gets the bubble score of the whole pod (HAMi scores the pod's
    whole allocation once). Cards in use before the pod are those used in the table but not by the pod."""
    earlier = {p.index for placed in ctx.chosen for p in placed}
    previous = [table.infos[i].index for i in range(len(table.infos)) if table.used[i] > 0 and i not in earlier]
    before = [table.infos[i].index for i in sorted(earlier)]
    now = before + [table.infos[i].index for i in group]
    total = bubble_score(previous, now)
    return float(total - bubble_score(previous, before) if before else total)


# --- vXPU -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VxpuAdmitter:
    """The vXPU webhook: a container with ``vxpu`` in its limits uses the vendor; its memory in limits (or, only
    there, in requests) is set to the rounded size in both limits and requests, so the pod shows what it holds."""

    count: str
    memory: str
    runtime_class_name: str = ""

    def admit(self, container: Container, field: str, edit: ContainerEdit, pod: PodContext) -> bool:
        if not self.count or (self.count not in container.resources.limits and self.count not in edit.limits):
            return False
        found = lookup(container, edit, self.memory)
        if found is None:
            return True
        section, raw = found
        text = str(round_vxpu_memory(f"{field}.{section}[{self.memory}]", raw))
        if section == "limits" and str(raw) != text:
            edit.limits[self.memory] = text
        if str(container.resources.requests.get(self.memory, "")) != text:
            edit.requests[self.memory] = text
        return True


class XpuVendor(SharedDeviceVendor):
    """Kunlunxin vXPU slices (``XPU``), configured by the ``kunlun:`` section (``resourceVCountName``,
    ``resourceVMemoryName``)."""

    name = XPU
    keys = XPU_KEYS

    def __init__(self, config: KunlunConfig) -> None:
        super().__init__(_Names(config.resource_v_count_name, config.resource_v_memory_name))
        self.config = config

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        nums = _count(container, self.config.resource_v_count_name, field)
        if nums is None:
            return None
        name = self.config.resource_v_memory_name
        found = lookup_resource(container, name)
        if found is None:
            return ContainerRequest(self.name, nums, memreq=CARD_MEMORY, mem_percentage=100, coresreq=100)
        mem = round_vxpu_memory(f"{field}.{found[0]}[{name}]", found[1])
        return ContainerRequest(self.name, nums, mem, MEM_PERCENTAGE_UNSET, mem * 100 // CARD_MEMORY)

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        raw = node.metadata.annotations.get(self.keys.register)
        if raw is None:
            return None
        devices = decode_inventory_json(raw, self.keys.register)
        return NodeInventory(tuple(devices)) if devices else None

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return _uuid_selector(annotations)

    def admitter(self) -> Admitter:
        return VxpuAdmitter(self.config.resource_v_count_name, self.config.resource_v_memory_name)

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        too_few = _too_few(table, request.nums)
        if too_few is not None:
            return too_few
        screen = _Screen(table)
        for i in range(len(table.infos)):
            problem = _vxpu_problem(screen, i, request, ctx, selector)
            if problem is not None:
                screen.miss(i, *problem)
            else:
                screen.idle.append(i)
        group = _choose_on_boards(table, screen.idle, request.nums)
        if group is None:
            return screen.unfit(request.nums)
        mem, cores = request.memreq, request.coresreq
        placements = tuple(Placement(i, ContainerDevice(table.infos[i].id, XPU, mem, cores)) for i in group)
        quota = ctx.quota
        for k, placed in enumerate(placements):
            if quota is not None and not quota(placements[:k], mem, cores, placed.device.uuid):
                return Unfit({Reason.RESOURCE_QUOTA_NOT_FIT: len(placements)}, len(table.infos))
        return Fitted(placements)


def _vxpu_problem(
    screen: _Screen, i: int, request: ContainerRequest, ctx: FitContext, selector: Selector
) -> tuple[Reason, int, int] | None:
    """Why device ``i`` cannot take one slice of ``request``: HAMi's checks, then memory, then the slice size."""
    reason = screen.device_problem(i, ctx, selector)
    if reason is not None:
        return reason, 0, 0
    info, used = screen.table.infos[i], screen.table.used[i]
    if info.count <= used:
        return Reason.CARD_TIME_SLICING_EXHAUSTED, 1, info.count - used
    if ctx.policy.mutex and used > 0:
        return Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, 0, 0
    return _room_problem(screen.table, i, request)


def _room_problem(table: DeviceTable, i: int, request: ContainerRequest) -> tuple[Reason, int, int] | None:
    """Memory, one slice size per device, cores."""
    info, used, usedmem, mem = table.infos[i], table.used[i], table.usedmem[i], request.memreq
    if info.devmem - usedmem < mem:
        return Reason.CARD_INSUFFICIENT_MEMORY, mem, info.devmem - usedmem
    if used > 0 and usedmem != used * mem:
        return Reason.MODE_NOT_FIT, mem, usedmem // used
    free_cores = info.devcore - table.usedcores[i]
    if free_cores < request.coresreq:
        return Reason.CARD_INSUFFICIENT_CORE, request.coresreq, free_cores
    return None


KUNLUN_FAMILY: Final = vendor_family(
    "kunlun",
    KunlunConfig,
    KunlunVendor,
    XpuVendor,
    chart=ChartValues(
        {
            "resourceCountName": "kunlunResourceName",
            "resourceVCountName": "kunlunResourceVCountName",
            "resourceVMemoryName": "kunlunResourceVMemoryName",
        },
        ("resourceCountName", "resourceVCountName", "resourceVMemoryName"),
    ),
)
"""The registry entry: the ``kunlun:`` section, whole XPUs and vXPU slices."""
