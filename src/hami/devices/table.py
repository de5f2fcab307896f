"""Per-node, per-vendor device usage: the mutable numbers the ledger maintains and Fit reads.

A ``DeviceTable`` keeps the static inventory (``DeviceInfo`` records, shared, never copied) beside parallel
lists of usage numbers. ``scratch()`` copies only those lists (a handful of ints per device), so trying a pod
on a node never copies the node, the cluster or any pod (STYLE: no copies of the world).

Units: memory in MiB, cores in core units (100 = one card at deviceCoreScaling 1), slots in tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import NamedTuple

from hami.protocol.inventory import DeviceInfo

__all__ = ["Capacity", "DeviceTable", "FullCard", "MemoryMiss", "OpenCard"]

OpenCard = tuple[int, int, int, int, int, int, int]
"""One card that can take another task: (free MiB, free core units, tasks on it, devmem, devcore, NUMA node, index)."""

FullCard = tuple[int, int, int]
"""A healthy card without a free slot: (free slots, 0 or less; NUMA node; index)."""

MemoryMiss = tuple[int, bool, int]
"""A closest miss when no open card has the memory: (available amount, an open card (free MiB) or a full one (free
slots), index)."""


class _Static(NamedTuple):
    """What a table's summaries share, per inventory: the carved devices; (index, count, devmem, devcore, NUMA) of
    the healthy uncarved ones; the unhealthy ones; one ``DeviceInfo`` per model (type and mode) and each device's
    model."""

    carved: int
    devices: tuple[tuple[int, int, int, int, int], ...]
    unhealthy: int
    models: tuple[DeviceInfo, ...]
    model_of: tuple[int, ...]


class Capacity(NamedTuple):
    """A table's usage summarised for screening requests without running Fit (issue 19 item 4).

    ``cards`` are the devices that can take another task — healthy, not ``broken``, not carved into slices, with a
    free slot — largest free memory first (ties: more free cores first); ``carved`` counts the devices the vendor
    carves into slices (their fit depends on the slice layout: a screen answers "unknown" for them). ``max_mem`` and
    ``max_cores`` are the largest free amounts on any open card (0 when none), ``idle`` the open cards with no task.
    ``totals`` are ``DeviceTable.totals()``. What Fit's reasons need besides: ``unhealthy`` counts the devices that
    are not healthy or ``broken``, ``full`` are the healthy uncarved cards without a free slot, and ``models`` holds
    one ``DeviceInfo`` per model (type and mode: what a pod's type filters read) with ``model_of[i]`` device ``i``'s.
    Built from the table in one pass, at most once per change: the table drops it in ``charge``, the ledger's single
    mutation path; ``derived`` is filled by the screens that read it. (A named tuple: it is built often and must be
    cheap.)
    """

    devices: int
    cards: tuple[OpenCard, ...]
    carved: int
    max_mem: int
    max_cores: int
    idle: int
    totals: tuple[int, int, int, int, int, int]
    unhealthy: int
    full: tuple[FullCard, ...]
    models: tuple[DeviceInfo, ...]
    model_of: tuple[int, ...]
    first_cores: int
    """The most core units a one-card request may ask for and still be taken by the first card (the one with the most
    free memory) when that card has its memory: Fit's core, whole-card and compute-unit checks; -1 when none."""
    derived: dict[tuple[str, bool], tuple[MemoryMiss, ...] | None]
    """What screens derived from this summary for any request, kept with it (never part of its equality): per GPU
    policy (raw text, NUMA binding), the closest misses when every open card lacks memory (``MemoryMiss``; None
    when their order depends on the request)."""


class DeviceTable:
    """One vendor's devices on one node, with their current usage.

    Mutation contract: only the ledger (``charge``) changes a live table; Fit works on ``scratch()`` copies.
    ``broken[i]`` is a reason string when a device must not receive work although it reports healthy (for
    example a partitioned device whose slices disagree with its pods, spec §6.8 fail-closed); ``None`` otherwise.
    ``slices[i]`` are the positions of the slices taken on a partitioned device (``hami.devices.base.Slice``).
    """

    __slots__ = (
        "_idle",
        "_static",
        "_summary",
        "broken",
        "capacity",
        "index_of",
        "infos",
        "slices",
        "used",
        "usedcores",
        "usedmem",
        "vendor",
    )

    def __init__(self, vendor: str, infos: Sequence[DeviceInfo]) -> None:
        self.vendor = vendor
        self.infos: tuple[DeviceInfo, ...] = tuple(infos)
        self.index_of: dict[str, int] = {info.id: i for i, info in enumerate(self.infos)}
        self.capacity: tuple[int, int, int] = (
            sum(info.count for info in self.infos),
            sum(info.devcore for info in self.infos),
            sum(info.devmem for info in self.infos),
        )
        """(Σcount, Σdevcore, Σdevmem): static, computed once."""
        n = len(self.infos)
        self.used: list[int] = [0] * n
        self.usedmem: list[int] = [0] * n
        self.usedcores: list[int] = [0] * n
        self.slices: list[tuple[Hashable, ...]] = [()] * n
        self.broken: list[str | None] = [None] * n
        self._summary: Capacity | None = None
        self._idle: Capacity | None = None  # the summary of ``empty()``: static, shared by every copy
        self._static: _Static | None = None  # see _summarize

    def __len__(self) -> int:
        return len(self.infos)

    def scratch(self) -> DeviceTable:
        """A copy whose usage can be changed freely; the inventory is shared."""
        copy = DeviceTable.__new__(DeviceTable)
        copy.vendor = self.vendor
        copy.infos = self.infos
        copy.index_of = self.index_of
        copy.capacity = self.capacity
        copy.used = self.used.copy()
        copy.usedmem = self.usedmem.copy()
        copy.usedcores = self.usedcores.copy()
        copy.slices = self.slices.copy()
        copy.broken = self.broken.copy()
        copy._summary = self._summary
        copy._idle = self._idle
        copy._static = self._static
        return copy

    def empty(self) -> DeviceTable:
        """The same devices with no usage at all (used to tell 'never fits' from 'does not fit now')."""
        table = DeviceTable(self.vendor, self.infos)
        table._summary = table._idle = self._idle
        table._static = self._static
        return table

    def charge(
        self, i: int, slots: int, mem: int, cores: int, positions: Iterable[Hashable] = (), sign: int = 1
    ) -> None:
        """Add (``sign=1``) or remove (``sign=-1``) usage on device ``i``, with the slice positions it takes."""
        self._summary = None
        self.used[i] += sign * slots
        self.usedmem[i] += sign * mem
        self.usedcores[i] += sign * cores
        positions = tuple(positions)
        if positions:
            if sign > 0:
                self.slices[i] = self.slices[i] + positions
            else:
                remaining = list(self.slices[i])
                for p in positions:
                    if p in remaining:
                        remaining.remove(p)
                self.slices[i] = tuple(remaining)

    def usage_of(self, i: int) -> tuple[int, int, int, tuple[Hashable, ...]]:
        return self.used[i], self.usedmem[i], self.usedcores[i], self.slices[i]

    def totals(self) -> tuple[int, int, int, int, int, int]:
        """(Σused, Σcount, Σusedcores, Σdevcore, Σusedmem, Σdevmem) for the node score (spec §5.2)."""
        summary = self._summary
        if summary is not None:
            return summary.totals
        count, devcore, devmem = self.capacity
        return (sum(self.used), count, sum(self.usedcores), devcore, sum(self.usedmem), devmem)

    def mark_broken(self, i: int, reason: str | None) -> None:
        """Take device ``i`` out of service (a reason) or back into it (None)."""
        self.broken[i] = reason
        self._summary = None

    def summary(self, carves: Callable[[DeviceInfo], bool] | None = None) -> Capacity:
        """The usage summary (``Capacity``), built at most once per change. ``carves`` is the owning vendor's
        partition test (``Partitions.carves``; always the same for one table, as a table belongs to one vendor)."""
        summary = self._summary
        if summary is None:
            summary = self._summary = self._summarize(carves)
        return summary

    def idle_summary(self, carves: Callable[[DeviceInfo], bool] | None = None) -> Capacity:
        """The summary of ``empty()`` (no usage, nothing broken), built once per inventory."""
        idle = self._idle
        if idle is None:
            idle = self._idle = self.empty().summary(carves)
        return idle

    def stale_summary(self, carves: Callable[[DeviceInfo], bool] | None = None) -> bool:
        """Whether the kept summary differs from one built afresh from the table: the ledger's self-check
        (``ClusterState.verify``) catches a capacity index that usage changed behind ``charge``. (The idle summary
        depends on the inventory alone, which never changes.)"""
        return self._summary is not None and self._summary[:-1] != self._summarize(carves)[:-1]

    def _summarize(self, carves: Callable[[DeviceInfo], bool] | None) -> Capacity:
        static = self._static
        if static is None:
            static = self._static = _inventory(self.infos, carves)
        broken, used, usedmem, usedcores = self.broken, self.used, self.usedmem, self.usedcores
        cards = [
            (devmem - usedmem[i], devcore - usedcores[i], used[i], devmem, devcore, numa, i)
            for i, count, devmem, devcore, numa in static.devices
            if used[i] < count and broken[i] is None
        ]
        cards.sort(reverse=True)
        full: tuple[FullCard, ...] = ()
        if len(cards) < len(static.devices):
            full = tuple(
                (count - used[i], numa, i)
                for i, count, _, _, numa in static.devices
                if used[i] >= count and broken[i] is None
            )
        unhealthy = static.unhealthy
        if broken.count(None) < len(broken):
            unhealthy = sum(1 for info, b in zip(self.infos, broken, strict=True) if not info.health or b is not None)
        total, devcore, devmem = self.capacity
        return _new_capacity(  # tuple.__new__: a named tuple's own __new__ is a Python function, slower
            Capacity,
            (
                len(self.infos),
                tuple(cards),
                static.carved,
                cards[0][0] if cards else 0,
                max([c[1] for c in cards], default=0),
                [c[2] for c in cards].count(0),
                (sum(used), total, sum(usedcores), devcore, sum(usedmem), devmem),
                unhealthy,
                full,
                static.models,
                static.model_of,
                _first_cores(cards[0]) if cards else -1,
                {},
            ),
        )


_new_capacity = tuple.__new__


def _first_cores(card: OpenCard) -> int:
    """``Capacity.first_cores`` of an open card: up to its free cores; below a whole card (100) once it has a task;
    nothing once its cores are used up (a request for no cores is then refused as well)."""
    free_cores, used, devcore = card[1], card[2], card[4]
    if devcore != 0 and free_cores <= 0:
        return -1
    return min(free_cores, 99) if used > 0 else free_cores


def _inventory(infos: Sequence[DeviceInfo], carves: Callable[[DeviceInfo], bool] | None) -> _Static:
    carved = [carves is not None and carves(info) for info in infos]
    models: dict[tuple[str, str], int] = {}
    representatives: list[DeviceInfo] = []
    model_of: list[int] = []
    for info in infos:
        key = (info.type, info.mode)
        m = models.get(key)
        if m is None:
            m = models[key] = len(representatives)
            representatives.append(info)
        model_of.append(m)
    return _Static(
        sum(carved),
        tuple(
            (i, info.count, info.devmem, info.devcore, info.numa)
            for i, info in enumerate(infos)
            if info.health and not carved[i]
        ),
        sum(1 for info in infos if not info.health),
        tuple(representatives),
        tuple(model_of),
    )
