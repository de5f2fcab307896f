"""Per-node, per-vendor device usage: the mutable numbers the ledger maintains and Fit reads.

A ``DeviceTable`` keeps the static inventory (``DeviceInfo`` records, shared, never copied) beside parallel
lists of usage numbers. ``scratch()`` copies only those lists (a handful of ints per device), so trying a pod
on a node never copies the node, the cluster or any pod (STYLE: no copies of the world).

Units: memory in MiB, cores in core units (100 = one card at deviceCoreScaling 1), slots in tasks.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from hami.protocol.inventory import DeviceInfo

__all__ = ["DeviceTable"]


class DeviceTable:
    """One vendor's devices on one node, with their current usage.

    Mutation contract: only the ledger (``charge``) changes a live table; Fit works on ``scratch()`` copies.
    ``broken[i]`` is a reason string when a device must not receive work although it reports healthy (for
    example a partitioned device whose slices disagree with its pods, spec §6.8 fail-closed); ``None`` otherwise.
    ``slices[i]`` are the positions of the slices taken on a partitioned device (``hami.devices.base.Slice``).
    """

    __slots__ = ("broken", "capacity", "index_of", "infos", "slices", "used", "usedcores", "usedmem", "vendor")

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
        return copy

    def empty(self) -> DeviceTable:
        """The same devices with no usage at all (used to tell 'never fits' from 'does not fit now')."""
        return DeviceTable(self.vendor, self.infos)

    def charge(
        self, i: int, slots: int, mem: int, cores: int, positions: Iterable[Hashable] = (), sign: int = 1
    ) -> None:
        """Add (``sign=1``) or remove (``sign=-1``) usage on device ``i``, with the slice positions it takes."""
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
        count, devcore, devmem = self.capacity
        return (sum(self.used), count, sum(self.usedcores), devcore, sum(self.usedmem), devmem)
