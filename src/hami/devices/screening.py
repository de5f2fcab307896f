"""Screening: telling from a table's capacity summary (``DeviceTable.summary``) what a vendor's ``fit`` would answer,
without trying its devices (issue 19 item 4). Part of the vendor contract: a vendor that can screen implements
``Screening``; the shared fit loop's screen is ``shared_screener``. The scheduling core uses screens through
``hami.scheduling.screen``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import groupby
from typing import NamedTuple, Protocol, runtime_checkable

from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    ContainerRequest,
    FitContext,
    Partitions,
    Selector,
    Unfit,
    too_few_devices,
)
from hami.devices.policy import GpuPolicy
from hami.devices.scoring import CLOSEST, device_score
from hami.devices.table import Capacity, DeviceTable, MemoryMiss, OpenCard
from hami.protocol.inventory import DeviceInfo
from hami.protocol.reasons import Reason, Rejection

__all__ = ["Screener", "Screening", "Shortcut", "shared_screener"]


class Shortcut(NamedTuple):
    """A screen's commonest "fits" in two comparisons, for the per-candidate loop (``decide.filter_nodes``): a
    request for one card with memory and no type filter fits a table whose summary (``summary(carves)``) has no
    carved device, has a card with ``memreq`` free (``Capacity.max_mem``) and whose first card takes ``cores``
    (``first_cores``) — the screen answers True there without its other checks. Anything else is left to the screen
    itself. A property test checks it against the screen and Fit (``tests/unit/scheduling/test_screen.py``)."""

    carves: Callable[[DeviceInfo], bool] | None
    memreq: int
    cores: int


class Screener(Protocol):
    """What Fit would answer for one container request, told from a table's capacity summary (``DeviceTable.summary``)
    instead of trying its devices."""

    def __call__(self, table: DeviceTable, idle: bool) -> bool | None:
        """On ``table`` (on ``table.empty()`` when ``idle``): True (a ``Fitted`` with score 0), False (an ``Unfit``),
        None (cannot tell)."""

    def unfit(self, table: DeviceTable) -> Unfit | None:
        """For a table it screens as not fitting: the very ``Unfit`` Fit returns there (reasons, counts, closest
        misses); None when the summary cannot say it."""

    def shortcut(self) -> Shortcut | None:
        """The request's numbers when its commonest fit can be told with two comparisons (``Shortcut``), or None."""


def shared_screener(
    req: ContainerRequest, ctx: FitContext, selector: Selector, partitions: Partitions | None, ordered: bool = True
) -> Screener | None:
    """A screen of ``fit_shared`` for one container request, from the tables' capacity summaries; None when the
    summaries cannot tell (a namespace quota, cordoned devices, UUID filters, ``topology-aware`` or ``mutex``). It
    answers None for a table with devices carved into slices. ``ordered`` says the vendor tries devices in
    ``policy_order`` (the closest misses of an ``Unfit`` depend on the order; without it ``unfit`` answers None).

    It mirrors the loop's checks for a device that passed health, type and slots (``Capacity.cards`` holds the cards
    that passed health and slots; the card type filters select whole models, ``Capacity.models``): memory, cores, a
    whole card, compute units; with NUMA binding the devices must be on one NUMA node (the policy orders devices by
    NUMA node first, so the loop's groups are the NUMA nodes). The equivalence with Fit is a property test
    (``tests/unit/scheduling/test_screen.py``).
    """
    policy = ctx.policy
    if ctx.quota is not None or ctx.cordoned or policy.topology or policy.mutex:
        return None
    if selector.use_uuids or selector.nouse_uuids:
        return None
    return _SharedScreen(req, ctx, selector, partitions, ordered)


class _SharedScreen:
    """``shared_screener``'s screen: per request, the numbers Fit compares and which card models the pod accepts."""

    __slots__ = ("carves", "cores", "ctx", "memreq", "models", "nums", "ordered", "pct", "req", "selector", "typed")

    def __init__(
        self, req: ContainerRequest, ctx: FitContext, selector: Selector, partitions: Partitions | None, ordered: bool
    ) -> None:
        self.req, self.ctx, self.selector, self.ordered = req, ctx, selector, ordered
        self.carves = partitions.carves if partitions is not None else None
        self.nums, self.memreq, self.pct = req.nums, req.memreq, req.mem_percentage
        self.cores = min(req.coresreq, 100)
        self.typed = bool(selector.use_types or selector.nouse_types or selector.modes is not None)
        self.models: dict[tuple[str, str], bool] = {}  # (type, mode) -> the selector accepts it

    def shortcut(self) -> Shortcut | None:
        # __call__'s one-card shortcut: first_cores >= cores implies a first card (first_cores is -1 without
        # one), its cores within max_cores, and an idle first card when cores >= 100 (first_cores is at most 99
        # once a card has a task); max_mem is the first card's free memory.
        if self.nums == 1 and self.memreq > 0 and not self.typed:
            return Shortcut(self.carves, self.memreq, self.cores)
        return None

    def _allowed(self, cap: Capacity) -> tuple[bool, ...] | None:
        """Per model of the table, whether the pod's type filters accept it; None when they accept every model."""
        if not self.typed:
            return None
        ok = []
        for info in cap.models:
            key = (info.type, info.mode)
            accepted = self.models.get(key)
            if accepted is None:
                accepted = self.models[key] = self.selector.type_ok(info)
            ok.append(accepted)
        return None if all(ok) else tuple(ok)

    def _cards(self, cap: Capacity) -> Sequence[OpenCard]:
        allowed = self._allowed(cap)
        if allowed is None:
            return cap.cards
        model_of = cap.model_of
        return [c for c in cap.cards if allowed[model_of[c[6]]]]

    def __call__(self, table: DeviceTable, idle: bool) -> bool | None:
        cap = table.idle_summary(self.carves) if idle else table.summary(self.carves)
        if cap.carved:
            return None
        nums, memreq, cores = self.nums, self.memreq, self.cores
        cards = self._cards(cap) if self.typed else cap.cards
        if cards is cap.cards:
            if nums > len(cards) or memreq > cap.max_mem or cores > cap.max_cores:
                return False
            if cores >= 100 and cap.idle < nums:
                return False
            if nums == 1 and memreq > 0 and cores <= cap.first_cores:  # the card with the most free memory will do
                return True
        elif nums > len(cards):
            return False
        return _enough_cards(cards, nums, memreq, self.pct, cores, self.ctx.policy.numa_bind)

    def unfit(self, table: DeviceTable) -> Unfit | None:
        cap = table.summary(self.carves)
        if cap.carved or not self.ordered:
            return None
        n = cap.devices
        if self.nums > n:
            return too_few_devices(n, self.nums)
        if self.memreq > 0 and self.memreq > cap.max_mem and self._allowed(cap) is None:  # no card has the memory
            told = self._memory_unfit(table, cap)
            if told is not None:
                return told
        tally = self._tally(cap)
        if not tally.close(self.ctx.policy, self.nums):
            return None  # enough cards after all: the summary disagrees with its own screen, let Fit judge
        return Unfit(tally.counts, n, self._closest(table, tally.misses))

    def _memory_unfit(self, table: DeviceTable, cap: Capacity) -> Unfit | None:
        """Fit's ``Unfit`` when every open card lacks the memory: the counts are the summary's, and the closest
        misses, which depend only on the cards' usage and the GPU policy's order, are kept with the summary
        (``Capacity.derived``); None when their order depends on the request."""
        policy = self.ctx.policy
        key = (policy.raw, policy.numa_bind)
        derived = cap.derived
        if key not in derived:
            derived[key] = _memory_misses(table, cap, policy)
        misses = derived[key]
        if misses is None:
            return None
        counts: dict[Reason, int] = {}
        if cap.unhealthy:
            counts[Reason.CARD_NOT_HEALTH] = cap.unhealthy
        if cap.full:
            counts[Reason.CARD_TIME_SLICING_EXHAUSTED] = len(cap.full)
        if cap.cards:
            counts[Reason.CARD_INSUFFICIENT_MEMORY] = len(cap.cards)
        infos, memreq = table.infos, self.memreq
        return Unfit(
            counts,
            cap.devices,
            tuple(
                Rejection(Reason.CARD_INSUFFICIENT_MEMORY, infos[i].id, memreq, available)
                if card
                else Rejection(Reason.CARD_TIME_SLICING_EXHAUSTED, infos[i].id, 1, available)
                for available, card, i in misses
            ),
        )

    def _tally(self, cap: Capacity) -> _Tally:
        """Every device's reason, as Fit's checks (``_SharedFit``) give it to a device that is unhealthy, of a model
        the pod refuses, without a free slot, or an open card: ``cap`` holds each of those."""
        tally = _Tally(self.ctx.policy.numa_bind)
        allowed, model_of = self._allowed(cap), cap.model_of
        if cap.unhealthy:
            tally.counts[Reason.CARD_NOT_HEALTH] = cap.unhealthy
        for slots, numa, i in cap.full:
            if allowed is not None and not allowed[model_of[i]]:
                tally.miss(Reason.CARD_TYPE_MISMATCH)
                continue
            tally.numas.append(numa)
            tally.miss(Reason.CARD_TIME_SLICING_EXHAUSTED, i, 1, slots)
        memreq, pct, cores = self.memreq, self.pct, self.cores
        for free_mem, free_cores, used, devmem, devcore, numa, i in cap.cards:
            if allowed is not None and not allowed[model_of[i]]:
                tally.miss(Reason.CARD_TYPE_MISMATCH)
                continue
            tally.numas.append(numa)
            mem = memreq if memreq > 0 else (devmem * pct // 100 if pct != MEM_PERCENTAGE_UNSET else 0)
            if free_mem < mem:
                tally.miss(Reason.CARD_INSUFFICIENT_MEMORY, i, mem, free_mem)
            elif free_cores < cores:
                tally.miss(Reason.CARD_INSUFFICIENT_CORE, i, cores, free_cores)
            elif cores >= 100 and used > 0:
                tally.miss(Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, i, cores, free_cores)
            elif cores == 0 and devcore != 0 and free_cores <= 0:
                tally.miss(Reason.CARD_COMPUTE_UNITS_EXHAUSTED)
            else:
                tally.accept(numa)
        return tally

    def _closest(self, table: DeviceTable, misses: list[tuple[int, int, Reason, int]]) -> tuple[Rejection, ...]:
        """Fit's closest misses: largest available amount first, ties in the order Fit tried the devices (only the
        tied devices among the first three are put in that order: ``GpuPolicy.key``)."""
        if len(misses) > 1:
            misses.sort(key=_available, reverse=True)
            cut = misses[min(len(misses), CLOSEST) - 1][0]
            head = [m for m in misses if m[0] >= cut]
            if len(head) > CLOSEST or len({m[0] for m in head}) < len(head):
                infos, used, usedcores, usedmem = table.infos, table.used, table.usedcores, table.usedmem
                req, weights = self.req, self.ctx.weights

                def score(i: int) -> float:
                    return device_score(infos[i], used[i], usedcores[i], usedmem[i], req, weights)

                tried = self.ctx.policy.key(score, [info.numa for info in infos], used)
                head.sort(key=lambda m: (-m[0], tried(m[3])))
            misses = head
        infos = table.infos
        return tuple(
            Rejection(reason, infos[i].id, requested, available) for available, requested, reason, i in misses[:CLOSEST]
        )


def _memory_misses(table: DeviceTable, cap: Capacity, policy: GpuPolicy) -> tuple[MemoryMiss, ...] | None:
    """The closest misses of a table none of whose open cards has the memory: every open card (free MiB) and every
    full card (free slots), largest first, ties in Fit's order; None when tied cards differ in usage (their order
    then depends on the request's device scores)."""
    misses: list[MemoryMiss] = [(c[0], True, c[6]) for c in cap.cards]
    misses += [(f[0], False, f[2]) for f in cap.full]
    if len(misses) > 1:
        cut = sorted(m[0] for m in misses)[-min(len(misses), CLOSEST)]
        head = [m for m in misses if m[0] >= cut]
        head.sort(key=_available, reverse=True)
        if len(head) > CLOSEST or len({m[0] for m in head}) < len(head):
            if any(not _same_usage(table, [m[2] for m in tied]) for _, tied in groupby(head, key=_available)):
                return None
            # Tied cards have equal usage, hence equal device scores: the policy's order without them decides.
            tried = policy.key(_unscored, [info.numa for info in table.infos], table.used)
            head.sort(key=lambda m: (-m[0], tried(m[2])))
        misses = head
    return tuple(misses[:CLOSEST])


def _same_usage(table: DeviceTable, indexes: Sequence[int]) -> bool:
    """Whether the devices have the same slots, memory and cores, and the same usage of each (equal device scores)."""
    infos, used, usedcores, usedmem = table.infos, table.used, table.usedcores, table.usedmem
    return (
        len({(infos[i].count, infos[i].devmem, infos[i].devcore, used[i], usedcores[i], usedmem[i]) for i in indexes})
        < 2
    )


def _unscored(i: int) -> float:
    return 0.0


def _available(miss: tuple[int, object, object, int] | MemoryMiss) -> int:
    return miss[0]


class _Tally:
    """An ``Unfit`` being counted from a summary: devices per reason, the misses with numbers (available, requested,
    reason, index), and the cards that passed every check per NUMA group (one group without NUMA binding)."""

    __slots__ = ("accepted", "counts", "misses", "numa_bind", "numas")

    def __init__(self, numa_bind: bool) -> None:
        self.numa_bind = numa_bind
        self.counts: dict[Reason, int] = {}
        self.misses: list[tuple[int, int, Reason, int]] = []
        self.accepted: dict[int, int] = {}
        self.numas: list[int] = []  # the NUMA node of every card that passed health and type: Fit's NUMA boundaries

    def miss(self, reason: Reason, i: int = -1, requested: int = 0, available: int = 0) -> None:
        counts = self.counts
        counts[reason] = counts.get(reason, 0) + 1
        if requested or available:
            self.misses.append((available, requested, reason, i))

    def accept(self, numa: int) -> None:
        group = numa if self.numa_bind else 0
        self.accepted[group] = self.accepted.get(group, 0) + 1

    def close(self, policy: GpuPolicy, nums: int) -> bool:
        """Count the accepted cards as Fit does after its last device (with NUMA binding: those of every NUMA node
        but the last one tried are ``NumaNotFit``, the last one's ``AllocatedCardsInsufficientRequest``); False if
        some group has ``nums`` cards (Fit would fit)."""
        accepted, counts = self.accepted, self.counts
        if not accepted:
            return True
        if max(accepted.values()) >= nums:
            return False
        last = policy.numa_last(self.numas) if self.numa_bind else 0
        partial = accepted.get(last, 0)
        others = sum(accepted.values()) - partial
        if others:
            counts[Reason.NUMA_NOT_FIT] = others
        if partial:
            counts[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = partial
        return True


def _takes(card: OpenCard, cores: int) -> bool:
    """Whether an open card with room for the memory passes Fit's core checks (cores, a whole card, compute units)."""
    free_cores = card[1]
    return free_cores >= cores and (cores < 100 or card[2] == 0) and (cores != 0 or card[4] == 0 or free_cores > 0)


def _enough_cards(cards: Sequence[OpenCard], nums: int, memreq: int, pct: int, cores: int, numa_bind: bool) -> bool:
    """Whether ``nums`` of the open cards (on one NUMA node with ``numa_bind``) pass Fit's memory and core checks."""
    found: dict[int, int] = {}
    for card in cards:
        free_mem, devmem = card[0], card[3]
        mem = memreq if memreq > 0 else (devmem * pct // 100 if pct != MEM_PERCENTAGE_UNSET else 0)
        if free_mem < mem:
            if memreq > 0:
                break  # cards come largest free memory first: none further has room
            continue
        if not _takes(card, cores):
            continue
        group = card[5] if numa_bind else 0
        n = found[group] = found.get(group, 0) + 1
        if n == nums:
            return True
    return False


@runtime_checkable
class Screening(Protocol):
    """A vendor that can tell from a table's capacity summary what its ``fit`` would answer.

    ``screener`` is asked once per decision and returns None when it cannot screen this request at all; its
    ``screen(table, idle)`` answers True only if ``fit`` would return a ``Fitted`` whose ``score`` is 0 (on
    ``table.empty()`` when ``idle``), False only if it would return ``Unfit``, and None whenever it cannot tell; its
    ``unfit(table)`` returns, for a table it screened False, the very ``Unfit`` that ``fit`` would return (reasons,
    counts, closest misses), or None when the summary cannot say.
    """

    def screener(self, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Screener | None:
        """A screen for this container request, or None."""
