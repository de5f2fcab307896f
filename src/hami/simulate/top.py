"""``hami top``: per node and per card, what is used, what is free, who holds it and what is stranded.

``build_top`` turns a ``ClusterState`` (the scheduler's own ledger, built from a snapshot or a live listing)
into plain rows, filtered and sorted; ``render_top`` prints them for a person (colour only when asked: the
caller decides by whether standard output is a terminal) and ``top_json`` as one JSON document. Pure.

DRA (issue 18): a card's used slots, memory and cores count device-plugin pods and DRA claims together; ``dra`` is
the claims' part (``hami.scheduling.dra.held_by_card``), shown beside the pods. With the ledger given, its warnings
(DeviceClasses serving hami's resources, cores defaulting to the whole card) and problems are shown after the cards,
and so are the DRA devices published with a ``NoSchedule``/``NoExecute`` device taint (a driver's unhealthy GPU,
e.g. hami's own DRA plugin's): a registered card of the same UUID shows as ``unhealthy``, and every such device is
listed, also on a node without a hami registration.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, Final

from hami.devices.base import cores_shown
from hami.scheduling.dra import DraDevice, DraLedger, DraProblem, DraWarning, HeldCard, held_by_card
from hami.scheduling.fragmentation import (
    CardFragment,
    ModelFragment,
    card_fragments,
    fragmentation_index,
    model_fragments,
)
from hami.scheduling.state import ClusterState
from hami.simulate.gangview import GangView, gang_json, render_gang
from hami.simulate.wording import card_health, cores_text, counted

__all__ = [
    "SORT_KEYS",
    "CardHolder",
    "CardRow",
    "NodeRow",
    "TopFilter",
    "TopView",
    "build_top",
    "render_top",
    "top_json",
]

SORT_KEYS: Final = ("node", "free-memory", "used-memory", "stranded", "pods")


@dataclass(frozen=True, slots=True)
class TopFilter:
    """What to show: shell-style patterns for node and model (case-insensitive for the model), an exact vendor
    key (case-insensitive), and a namespace (only cards holding one of its pods, and only those pods)."""

    node: str = ""
    vendor: str = ""
    model: str = ""
    namespace: str = ""
    sort: str = "node"
    cpu_nodes: bool = False
    """Also show nodes without accelerators (no registration and no refused one): hidden by default."""


@dataclass(frozen=True, slots=True)
class CardHolder:
    """One pod's share of one card."""

    pod: str
    mem: int
    cores: int


@dataclass(frozen=True, slots=True)
class CardRow:
    node: str
    vendor: str
    index: int
    uuid: str
    model: str
    health: str  # "healthy", "unhealthy", "cordoned" or "blocked: <why>"
    slots: tuple[int, int]  # used, total
    memory: tuple[int, int]  # MiB used, total
    cores: tuple[int, int]  # used, total
    pods: tuple[CardHolder, ...]
    fragment: CardFragment
    dra: HeldCard | None = None
    """What DRA claims hold of the card (part of ``slots``/``memory``/``cores``); None when nothing."""


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    schedulable: bool
    """Whether hami can place pods there: not cordoned, and not a node whose only registrations were refused."""
    cards: tuple[CardRow, ...]
    problems: Mapping[str, str] = field(default_factory=dict)
    cordoned: bool = False
    """``spec.unschedulable``."""
    not_allocatable: Mapping[str, str] = field(default_factory=dict)
    """Vendor → why kubelet does not back its registered devices (``NodeState.unallocatable``): no pod is placed
    on them until it does."""


@dataclass(frozen=True, slots=True)
class TopView:
    nodes: tuple[NodeRow, ...]
    models: tuple[ModelFragment, ...]
    fragmentation_index: float
    dra_warnings: tuple[DraWarning, ...] = ()
    dra_problems: tuple[DraProblem, ...] = ()
    cpu_nodes_hidden: int = 0
    """Nodes without accelerators left out (``TopFilter.cpu_nodes`` off)."""
    dra_tainted: tuple[DraDevice, ...] = ()
    """DRA devices of the shown nodes published with a blocking device taint (unhealthy)."""
    gangs: tuple[GangView, ...] = ()
    """Gangs not yet bound whole: members holding devices unbound, waiting, and what the gang lacks."""


def _holders(state: ClusterState, namespace: str) -> dict[tuple[str, str], list[CardHolder]]:
    out: dict[tuple[str, str], list[CardHolder]] = {}
    for record in sorted(state.pods.values(), key=lambda r: r.key):
        if namespace and record.namespace != namespace:
            continue
        for ch in record.charges:
            cores = cores_shown(state.vendors.get(ch.vendor), ch.cores)
            out.setdefault((ch.vendor, ch.uuid), []).append(CardHolder(record.key, ch.mem, cores))
    return out


def _health(state: ClusterState, node: str, vendor: str, i: int, tainted: Set[tuple[str, str, str]]) -> str:
    """The card's health; a DRA device of its UUID published with a blocking taint makes it unhealthy."""
    n = state.nodes[node]
    table = n.tables[vendor]
    info = table.infos[i]
    healthy = info.health and (node, vendor, info.id) not in tainted
    return card_health(healthy, table.broken[i], info.id in n.cordoned)


def _sort_key(sort: str) -> Any:
    if sort == "free-memory":
        return lambda c: (-c.fragment.free_mem, c.node, c.index)
    if sort == "used-memory":
        return lambda c: (-c.memory[0], c.node, c.index)
    if sort == "stranded":
        return lambda c: (-c.fragment.stranded_mem, c.node, c.index)
    if sort == "pods":
        return lambda c: (-len(c.pods), c.node, c.index)
    return lambda c: (c.node, c.vendor, c.index)


def build_top(state: ClusterState, flt: TopFilter = TopFilter(), dra: DraLedger | None = None) -> TopView:
    """The rows ``hami top`` shows. Fragmentation is judged over the whole cluster (filters only hide rows); with
    ``dra``, its warnings and problems join the view."""
    if flt.sort not in SORT_KEYS:
        raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)}")
    fragments = {(c.node, c.vendor, c.uuid): c for c in card_fragments(state)}
    tainted = dra.tainted() if dra is not None else ()
    marked = {(d.node, vendor, d.uuid) for vendor, d in tainted if d.uuid and d.unhealthy}
    cards = sorted(_card_rows(state, flt, fragments, marked), key=_sort_key(flt.sort))
    order: list[str] = []
    per_node: dict[str, list[CardRow]] = {}
    for card in cards:
        if card.node not in per_node:
            order.append(card.node)
        per_node.setdefault(card.node, []).append(card)
    hidden = 0
    if not (flt.vendor or flt.model or flt.namespace):  # nodes without any card: refused, or CPU-only
        for name in sorted(state.nodes):
            if name in per_node or (flt.node and not fnmatch.fnmatchcase(name, flt.node)):
                continue
            if not state.nodes[name].problems and not flt.cpu_nodes:
                hidden += 1
                continue
            order.append(name)
            per_node[name] = []
    if flt.sort == "node":
        order.sort()
    nodes = tuple(_node_row(state, n, per_node[n]) for n in order)
    everything = list(fragments.values())
    warnings, problems = (dra.warnings(), dra.problems()) if dra is not None else ((), ())
    models = tuple(model_fragments(everything))
    shown = tuple(d for vendor, d in tainted if _shows(flt, d.node, vendor))
    return TopView(nodes, models, fragmentation_index(everything), warnings, problems, hidden, shown)


def _shows(flt: TopFilter, node: str, vendor: str) -> bool:
    """Whether the node and vendor filters let a DRA device through (model and namespace filters do not apply)."""
    if flt.node and not fnmatch.fnmatchcase(node, flt.node):
        return False
    return not flt.vendor or vendor.casefold() == flt.vendor.casefold()


def _node_row(state: ClusterState, name: str, cards: Sequence[CardRow]) -> NodeRow:
    node = state.nodes[name]
    refused_only = bool(node.problems) and not cards
    held_back = bool(node.tables) and all(v in node.unallocatable for v in node.tables)
    schedulable = not node.unschedulable and not refused_only and not held_back
    return NodeRow(name, schedulable, tuple(cards), dict(node.problems), node.unschedulable, dict(node.unallocatable))


def _card_rows(
    state: ClusterState,
    flt: TopFilter,
    fragments: Mapping[tuple[str, str, str], Any],
    tainted: Set[tuple[str, str, str]],
) -> Iterator[CardRow]:
    """Every card the filter lets through, in node, vendor and registration order; ``tainted``: (node, vendor,
    uuid) of the cards a DRA driver published with a blocking taint."""
    holders = _holders(state, flt.namespace)
    held = held_by_card(state)
    for name in sorted(state.nodes):
        if flt.node and not fnmatch.fnmatchcase(name, flt.node):
            continue
        node = state.nodes[name]
        for vendor in sorted(node.tables):
            if flt.vendor and vendor.casefold() != flt.vendor.casefold():
                continue
            table = node.tables[vendor]
            counter = state.vendors.get(vendor)  # how its core values count (AWS Neuron keeps a bitmask)
            for i, info in enumerate(table.infos):
                if flt.model and not fnmatch.fnmatch(info.type.casefold(), flt.model.casefold()):
                    continue
                pods = tuple(holders.get((vendor, info.id), ()))
                if flt.namespace and not pods:
                    continue
                yield CardRow(
                    node=name,
                    vendor=vendor,
                    index=info.index,
                    uuid=info.id,
                    model=info.type,
                    health=_health(state, name, vendor, i, tainted),
                    slots=(table.used[i], info.count),
                    memory=(table.usedmem[i], info.devmem),
                    cores=(cores_shown(counter, table.usedcores[i]), cores_shown(counter, info.devcore)),
                    pods=pods,
                    fragment=fragments[(name, vendor, info.id)],
                    dra=held.get((name, vendor, info.id)),
                )


# --- text -----------------------------------------------------------------------------------------------

_RESET: Final = "\033[0m"
_BOLD: Final = "\033[1m"
_RED: Final = "\033[31m"
_YELLOW: Final = "\033[33m"
_GREEN: Final = "\033[32m"
_DIM: Final = "\033[2m"


def _bar(used: int, total: int, width: int = 10) -> str:
    if total <= 0:
        return " " * width
    filled = min(width, round(width * used / total))
    return "#" * filled + "." * (width - filled)


def _pct(used: int, total: int) -> int:
    return round(100 * used / total) if total > 0 else 0


def _pods_cell(pods: Sequence[CardHolder], devcore: int = 100) -> str:
    """Each pod's share: cores as a percentage where a card has 100 core units, else as ``<n>/<total> cores``
    (AMD counts compute units)."""
    unit = "%" if devcore in (0, 100) else f"/{devcore} cores"
    return ", ".join(f"{p.pod} ({p.mem} MiB, {cores_text(p.cores, unit)})" for p in pods) or "-"


def _holders_cell(card: CardRow) -> str:
    """The pods on a card, then what DRA claims hold of it (``DRA 1 claim (10240 MiB, 100%)``)."""
    pods = _pods_cell(card.pods, card.cores[1])
    held = card.dra
    if held is None:
        return pods
    unit = "%" if card.cores[1] in (0, 100) else f"/{card.cores[1]} cores"
    claims = f"DRA {held.claims} claim{'s' if held.claims != 1 else ''} ({held.mem} MiB, {held.cores}{unit})"
    return claims if pods == "-" else f"{pods}; {claims}"


def _paint(text: str, code: str, colour: bool) -> str:
    return f"{code}{text}{_RESET}" if colour and code else text


def _usage_colour(used: int, total: int) -> str:
    pct = _pct(used, total)
    return _RED if pct >= 90 else _YELLOW if pct >= 60 else _GREEN


def _table(header: Sequence[str], rows: Sequence[Sequence[tuple[str, str]]], colour: bool) -> list[str]:
    """Columns padded on the plain text; colour codes wrap each cell after padding."""
    widths = [len(h) for h in header]
    for row in rows:
        for i, (text, _) in enumerate(row):
            widths[i] = max(widths[i], len(text))
    lines = [_paint("  ".join(h.ljust(widths[i]) for i, h in enumerate(header)).rstrip(), _BOLD, colour)]
    for row in rows:
        cells = [
            _paint(text.ljust(widths[i]) if i < len(row) - 1 else text, code, colour)
            for i, (text, code) in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def _node_state(node: NodeRow) -> str:
    if node.cordoned:
        return "cordoned (unschedulable)"
    if node.problems and not node.cards:
        return "not schedulable by hami"
    if node.cards and not node.schedulable:
        return "devices not allocatable (kubelet)"
    return "schedulable" if node.cards else "no accelerator registered"


def _node_head(node: NodeRow) -> str:
    """A node's header line: its name, cards and state, then each refused registration and each vendor whose
    devices kubelet does not back."""
    head = f"{node.name}  {counted(len(node.cards), 'card')}, {_node_state(node)}"
    for vendor, problem in sorted(node.problems.items()):
        head += f"; {vendor} registration refused: {problem}"
    for vendor, short in sorted(node.not_allocatable.items()):
        head += f"; {vendor} devices not allocatable: {short}"
    return head


def render_top(view: TopView, colour: bool = False, wide: bool = False) -> str:
    """Per node a header line, then one line per card; then per model the fragmentation summary. ``wide``
    (``-o wide``) adds each card's vendor, free memory and largest slice left."""
    hidden = _hidden_line(view)
    if not view.nodes:
        return "no node with accelerators matches (or the cluster has none)" + (f"; {hidden}" if hidden else "")
    lines: list[str] = []
    for node in view.nodes:
        lines += _node_lines(node, colour, wide)
    if view.models:
        lines += _model_lines(view, colour)
    lines += _dra_lines(view, colour) + _gang_lines(view, colour)
    if hidden:
        lines += ["", _paint(hidden, _DIM, colour)]
    return "\n".join(lines).rstrip()


def _gang_lines(view: TopView, colour: bool) -> list[str]:
    """The gangs not yet bound whole: each member's state and what the gang lacks."""
    if not view.gangs:
        return []
    return ["", _paint("Gangs waiting:", _BOLD, colour), *(line for g in view.gangs for line in render_gang(g))]


_CARD_HEADER: Final = ("  #", "DEVICE", "MODEL", "SLOTS", "MEMORY MiB", "CORES", "STRANDED MiB", "HEALTH", "PODS")
_MODEL_HEADER: Final = (
    "VENDOR",
    "MODEL",
    "CARDS",
    "FREE CARDS",
    "FREE MiB",
    "STRANDED MiB",
    "STRANDED CORES",
    "LARGEST SLICE",
)


def _node_lines(node: NodeRow, colour: bool, wide: bool) -> list[str]:
    """A node's header line, its cards' table and a blank line."""
    head = _node_head(node)
    lines = [_paint(head, _BOLD, colour) if node.schedulable else _paint(head, _YELLOW, colour)]
    rows = [_card_cells(c, wide) for c in node.cards]
    if rows:
        header = list(_CARD_HEADER)
        if wide:
            header[7:7] = _WIDE_HEADER[1:]
            header.insert(2, _WIDE_HEADER[0])
        lines += _table(header, rows, colour)
    return [*lines, ""]


def _card_cells(c: CardRow, wide: bool) -> list[tuple[str, str]]:
    """One card's cells (text, colour code), in ``_CARD_HEADER``'s order (``wide``: with ``_WIDE_HEADER``'s)."""
    stranded = c.fragment.stranded_mem
    cells = [
        (f"  {c.index}", ""),
        (c.uuid, ""),
        (c.model, ""),
        (f"{c.slots[0]}/{c.slots[1]}", _usage_colour(*c.slots)),
        (f"{c.memory[0]}/{c.memory[1]} {_bar(*c.memory)} {_pct(*c.memory)}%", _usage_colour(*c.memory)),
        (f"{c.cores[0]}/{c.cores[1]}", _usage_colour(*c.cores)),
        (str(stranded) if stranded else "-", _YELLOW if stranded else ""),
        (c.health, "" if c.health == "healthy" else _RED),
        (_holders_cell(c), _DIM if not c.pods and c.dra is None else ""),
    ]
    if wide:
        extra = _wide_cells(c)
        cells[7:7] = extra[1:]  # after STRANDED MiB
        cells.insert(2, extra[0])
    return cells


def _model_lines(view: TopView, colour: bool) -> list[str]:
    """The fragmentation summary: the cluster index, then one row per vendor and model."""
    rows = [
        [
            (m.vendor, ""),
            (m.model, ""),
            (str(m.cards), ""),
            (str(m.whole_free_cards), ""),
            (str(m.free_mem), ""),
            (str(m.stranded_mem), _YELLOW if m.stranded_mem else ""),
            (str(m.stranded_cores), _YELLOW if m.stranded_cores else ""),
            (f"{m.largest_mem} MiB, {m.largest_cores}%", ""),
        ]
        for m in view.models
    ]
    title = _paint(f"Fragmentation (cluster index {view.fragmentation_index:.2f})", _BOLD, colour)
    return [title, *_table(_MODEL_HEADER, rows, colour)]


def _hidden_line(view: TopView) -> str:
    n = view.cpu_nodes_hidden
    if not n:
        return ""
    return f"{n} node{'s' if n != 1 else ''} without accelerators not shown (--cpu-nodes shows them)"


_WIDE_HEADER: Final = ["VENDOR", "FREE MiB", "LARGEST SLICE"]


def _wide_cells(c: CardRow) -> list[tuple[str, str]]:
    """``-o wide``'s extra cells: the vendor, the free memory and the largest slice still placeable."""
    f = c.fragment
    return [(c.vendor, ""), (str(f.free_mem), ""), (f"{f.largest_mem} MiB, {f.largest_cores} cores", "")]


def _dra_lines(view: TopView, colour: bool) -> list[str]:
    """DRA devices tainted unhealthy, warnings (what each trap will do) and problems (what is, or is not,
    counted)."""
    if not (view.dra_warnings or view.dra_problems or view.dra_tainted):
        return []
    lines = ["", _paint("DRA", _BOLD, colour)]
    for d in view.dra_tainted:
        uuid = f" ({d.uuid})" if d.uuid else ""
        what, why = ("unhealthy", "") if d.unhealthy else ("held back", " (device-plugin pods use it)")
        text = f"{what} {'/'.join(d.key)}{uuid} on {d.node}: tainted {', '.join(d.taints)}{why}"
        lines.append(_paint(text, _RED if d.unhealthy else _YELLOW, colour))
    lines += [_paint(f"warning {w.kind} {w.object}: {w.message}", _YELLOW, colour) for w in view.dra_warnings]
    for p in view.dra_problems:
        where = f" on {p.node}" if p.node else ""
        lines.append(_paint(f"problem {p.kind} {p.object}{where}: {p.message}", _RED, colour))
    return lines


def _card_json(c: CardRow) -> dict[str, Any]:
    """One card of :func:`top_json`."""
    f = c.fragment
    return {
        "vendor": c.vendor,
        "index": c.index,
        "uuid": c.uuid,
        "model": c.model,
        "health": c.health,
        "slots": {"used": c.slots[0], "total": c.slots[1]},
        "memoryMiB": {"used": c.memory[0], "total": c.memory[1]},
        "cores": {"used": c.cores[0], "total": c.cores[1]},
        "pods": [{"pod": p.pod, "memoryMiB": p.mem, "cores": p.cores} for p in c.pods],
        "dra": None
        if c.dra is None
        else {"claims": c.dra.claims, "slots": c.dra.slots, "memoryMiB": c.dra.mem, "cores": c.dra.cores},
        "strandedMemoryMiB": f.stranded_mem,
        "strandedCores": f.stranded_cores,
        "largestSlice": {"memoryMiB": f.largest_mem, "cores": f.largest_cores},
    }


def top_json(view: TopView) -> dict[str, Any]:
    """The view as one JSON-able document (field names are stable; memory in MiB, cores in percent)."""
    return {
        "nodes": [
            {
                "node": n.name,
                "schedulable": n.schedulable,
                "cordoned": n.cordoned,
                "problems": dict(n.problems),
                "notAllocatable": dict(n.not_allocatable),
                "cards": [_card_json(c) for c in n.cards],
            }
            for n in view.nodes
        ],
        "cpuNodesHidden": view.cpu_nodes_hidden,
        "fragmentation": {
            "index": round(view.fragmentation_index, 4),
            "models": [
                {
                    "vendor": m.vendor,
                    "model": m.model,
                    "cards": m.cards,
                    "wholeFreeCards": m.whole_free_cards,
                    "freeMemoryMiB": m.free_mem,
                    "freeCores": m.free_cores,
                    "strandedMemoryMiB": m.stranded_mem,
                    "strandedCores": m.stranded_cores,
                    "largestSlice": {"memoryMiB": m.largest_mem, "cores": m.largest_cores},
                }
                for m in view.models
            ],
        },
        "dra": {
            "tainted": [
                {
                    "node": d.node,
                    "driver": d.key[0],
                    "pool": d.key[1],
                    "device": d.key[2],
                    "uuid": d.uuid,
                    "taints": list(d.taints),
                    "heldBack": d.held_back,
                }
                for d in view.dra_tainted
            ],
            "warnings": [{"kind": w.kind.value, "object": w.object, "message": w.message} for w in view.dra_warnings],
            "problems": [
                {"kind": p.kind.value, "object": p.object, "node": p.node, "message": p.message}
                for p in view.dra_problems
            ],
        },
        "gangs": [gang_json(g) for g in view.gangs],
    }


def fragmentation_json(state: ClusterState) -> dict[str, Any]:
    """The cluster's fragmentation as JSON (the ``"fragmentation"`` field of ``hami simulate -o json`` and of
    ``hami top -o json``): the index, per model totals, and per card the stranded memory/cores and largest slice."""
    view = build_top(state)
    doc = top_json(view)["fragmentation"]
    doc["cards"] = [
        {
            "node": c.node,
            "uuid": c.uuid,
            "model": c.model,
            "strandedMemoryMiB": c.fragment.stranded_mem,
            "strandedCores": c.fragment.stranded_cores,
            "largestSlice": {"memoryMiB": c.fragment.largest_mem, "cores": c.fragment.largest_cores},
        }
        for n in view.nodes
        for c in n.cards
    ]
    return doc  # type: ignore[no-any-return]
