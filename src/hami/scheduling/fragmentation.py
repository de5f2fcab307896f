"""Fragmentation: free device capacity that the pods actually seen could not use.

A card's free capacity is what its ledger leaves: slots, MiB and core units. Whether that capacity is *usable*
depends on the shapes pods ask for (per-device MiB and cores): 10 GiB free on a card whose only free slot is
taken is no use to anyone, and 6 GiB free is no use to a cluster whose pods all want 8 GiB. Following the
workload-aware definition of GPU fragmentation (free resources the observed task shapes cannot use), a card's
**stranded** memory is its free memory minus the most any single seen shape could take from it (as many copies
as fit in its free slots, memory and cores), and likewise for cores. A wholly free card strands nothing (any
pod, up to a whole card, can use it); a card that cannot receive work (unhealthy, cordoned or on a cordoned
node, blocked, no free slot) strands all of its free capacity.

``shapes_of`` collects the shapes from the ledger's charges (per vendor); ``card_fragments`` judges every card,
``model_fragments`` sums per vendor and model, and ``fragmentation_index`` is the cluster's stranded share of
free memory (0: every free MiB is usable by some seen shape; 1: none is). With no shape seen nothing is counted
as stranded: without demand there is no waste to speak of. Pure: reads the state, changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hami.devices.table import DeviceTable
from hami.scheduling.state import ClusterState, NodeState, PodRecord

__all__ = [
    "MAX_SHAPES",
    "CardFragment",
    "ModelFragment",
    "Shape",
    "card_fragments",
    "card_usable",
    "count_shapes",
    "fragmentation_index",
    "model_fragments",
    "shapes_of",
    "top_shapes",
]

MAX_SHAPES = 64
"""At most this many distinct shapes per vendor are judged (the most frequent), so a scrape stays O(cards)."""


@dataclass(frozen=True, slots=True, order=True)
class Shape:
    """What one pod holds on one device: MiB and core units (percent of a card)."""

    mem: int
    cores: int


@dataclass(frozen=True, slots=True)
class CardFragment:
    """One card's free capacity, what of it is stranded, and the largest slice one pod could still get.

    ``largest_mem``/``largest_cores`` are the free memory and cores of a card that can take one more task
    (a free slot, healthy, not cordoned or blocked), else 0.
    """

    node: str
    vendor: str
    uuid: str
    model: str
    free_slots: int
    free_mem: int
    free_cores: int
    stranded_mem: int
    stranded_cores: int
    largest_mem: int
    largest_cores: int
    whole_free: bool


@dataclass(frozen=True, slots=True)
class ModelFragment:
    """Per vendor and card model: card count, free and stranded totals, the largest slice on any one card."""

    vendor: str
    model: str
    cards: int
    whole_free_cards: int
    free_mem: int
    free_cores: int
    stranded_mem: int
    stranded_cores: int
    largest_mem: int
    largest_cores: int


def shapes_of(state: ClusterState) -> dict[str, tuple[Shape, ...]]:
    """Per vendor, the distinct (MiB, cores) a pod holds on one device, most frequent first (ties: smaller)."""
    counts: dict[str, dict[Shape, int]] = {}
    count_shapes(state.pods.values(), counts)
    return top_shapes(counts)


def count_shapes(records: Iterable[PodRecord], counts: dict[str, dict[Shape, int]]) -> None:
    """Add the shapes the ``records`` hold to ``counts`` (vendor → shape → pods): ``shapes_of`` in parts."""
    for record in records:
        for charge in record.charges:
            per = counts.setdefault(charge.vendor, {})
            shape = Shape(charge.mem, charge.cores)
            per[shape] = per.get(shape, 0) + 1


def top_shapes(counts: Mapping[str, Mapping[Shape, int]]) -> dict[str, tuple[Shape, ...]]:
    """The most frequent shapes per vendor from ``count_shapes`` (``MAX_SHAPES`` at most; ties: smaller first)."""
    return {
        vendor: tuple(s for s, _ in sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_SHAPES])
        for vendor, per in counts.items()
    }


def _copies(shape: Shape, slots: int, mem: int, cores: int) -> int:
    """How many pods of ``shape`` fit in the given free capacity."""
    n = slots
    if shape.mem > 0:
        n = min(n, mem // shape.mem)
    if shape.cores > 0:
        n = min(n, cores // shape.cores)
    return max(n, 0)


def card_usable(node: NodeState, table: DeviceTable, i: int) -> bool:
    """Whether the scheduler may place work on card ``i`` of ``table``: healthy, not blocked, and cordoned neither
    itself (``hami.io/device-cordon``) nor through its node (``spec.unschedulable``, ``kubectl cordon``). ``hami
    top``'s stranded capacity and ``hami simulate --defrag``'s free cards both count by it."""
    info = table.infos[i]
    return info.health and table.broken[i] is None and info.id not in node.cordoned and not node.unschedulable


def card_fragments(
    state: ClusterState, shapes: Mapping[str, Iterable[Shape]] | None = None, names: Iterable[str] | None = None
) -> list[CardFragment]:
    """Every card of every node (sorted by node, vendor, index), judged against ``shapes`` (default: the
    ledger's own, ``shapes_of(state)``); only the nodes ``names`` (in that order) when given."""
    seen = shapes_of(state) if shapes is None else {v: tuple(s) for v, s in shapes.items()}
    out: list[CardFragment] = []
    for name in sorted(state.nodes) if names is None else names:
        node = state.nodes.get(name)
        if node is None:
            continue
        for vendor in sorted(node.tables):
            table = node.tables[vendor]
            vendor_shapes = seen.get(vendor, ())
            for i, info in enumerate(table.infos):
                slots = max(info.count - table.used[i], 0)
                mem = max(info.devmem - table.usedmem[i], 0)
                cores = max(info.devcore - table.usedcores[i], 0)
                usable = card_usable(node, table, i)
                open_ = usable and slots > 0
                whole_free = usable and table.used[i] == 0 and table.usedmem[i] == 0
                if not open_:
                    stranded_mem, stranded_cores = mem, cores
                elif whole_free or not vendor_shapes:
                    stranded_mem = stranded_cores = 0
                else:
                    best_mem = best_cores = 0
                    for shape in vendor_shapes:
                        k = _copies(shape, slots, mem, cores)
                        best_mem = max(best_mem, k * shape.mem)
                        best_cores = max(best_cores, k * shape.cores)
                    stranded_mem, stranded_cores = mem - best_mem, cores - best_cores
                out.append(
                    CardFragment(
                        node=name,
                        vendor=vendor,
                        uuid=info.id,
                        model=info.type,
                        free_slots=slots,
                        free_mem=mem,
                        free_cores=cores,
                        stranded_mem=stranded_mem,
                        stranded_cores=stranded_cores,
                        largest_mem=mem if open_ else 0,
                        largest_cores=cores if open_ else 0,
                        whole_free=whole_free,
                    )
                )
    return out


def model_fragments(cards: Iterable[CardFragment]) -> list[ModelFragment]:
    """``card_fragments`` summed per (vendor, model), sorted by both."""
    acc: dict[tuple[str, str], list[int]] = {}
    for c in cards:
        a = acc.setdefault((c.vendor, c.model), [0] * 8)
        a[0] += 1
        a[1] += int(c.whole_free)
        a[2] += c.free_mem
        a[3] += c.free_cores
        a[4] += c.stranded_mem
        a[5] += c.stranded_cores
        a[6] = max(a[6], c.largest_mem)
        a[7] = max(a[7], c.largest_cores)
    return [ModelFragment(v, m, *acc[(v, m)]) for v, m in sorted(acc)]


def fragmentation_index(cards: Iterable[CardFragment]) -> float:
    """Stranded share of the cluster's free device memory, 0..1 (0 when nothing is free)."""
    free = stranded = 0
    for c in cards:
        free += c.free_mem
        stranded += c.stranded_mem
    return stranded / free if free else 0.0
