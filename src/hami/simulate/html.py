"""``hami simulate --report FILE``: one self-contained HTML page with the simulation's plots.

The page needs nothing but itself: styles inline, plots drawn as inline SVG, no script, no font or image
fetched. Sections: the summary line; a heat map of every card (rows are nodes, cells are cards, each labelled with
its index on the node) for memory and one for cores; the pending pods' reasons as bars under their own captions —
cards failing each check, nodes rejecting for each reason, pods refused before placing — with each pod's per-node
text; the placements as a table and as bars (pods placed per node). Fragmentation joins when
its view exists (``report.fragmentation_document``), and DRA when the snapshot's claims hold capacity or DRA reports
problems: the cards claims hold part of (beside the device-plugin pods' part), then the problems and warnings.

Heat-map cells are coloured by bucket (``HEAT_COLOURS``, one colour per fifth of the card's capacity, a
separate colour for a card with no capacity) so that a screenshot can be checked pixel for pixel.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from html import escape
from typing import Final

from hami.protocol.reasons import Reason
from hami.scheduling.dra import DraLedger
from hami.scheduling.state import ClusterState
from hami.simulate.report import (
    core_unit,
    cores_text,
    dra_document,
    fragmentation_document,
    summary_line,
    utilization_document,
)
from hami.simulate.simulator import Outcome, container_devices

__all__ = ["BAR_COLOUR", "HEAT_COLOURS", "NODE_BAR_COLOUR", "PLACED_COLOUR", "render_defrag_html", "render_html"]

HEAT_COLOURS: Final = ("#e8f1fa", "#a6cbe8", "#5fa3d6", "#f2a04b", "#d7301f")
"""Fill of a heat-map cell: used/total in [0, .2), [.2, .4), [.4, .6), [.6, .8), [.8, 1]."""
EMPTY_COLOUR: Final = "#bdbdbd"
BAR_COLOUR: Final = "#7b3fa0"
"""Bars of the pending-reasons plot of cards (devices failing each check)."""
NODE_BAR_COLOUR: Final = "#b8860b"
"""Bars of the pending-reasons plot of nodes (nodes rejected as a whole) and of pods refused before placing."""
PLACED_COLOUR: Final = "#2e8b57"
"""Bars of the pods-per-node plot."""

_CELL = 56
_LABEL_W = 150
_ROW_H = 30
_HEAT_ROW_H = 40

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f4f4f4}h3{font-size:15px;margin:14px 0 2px}
.legend span{display:inline-block;width:14px;height:14px;margin:0 4px 0 12px;
vertical-align:middle}.muted{color:#666}code{font-size:13px}
"""


def _bucket(used: int, total: int) -> str:
    if total <= 0:
        return EMPTY_COLOUR
    share = min(max(used / total, 0.0), 1.0)
    return HEAT_COLOURS[min(int(share * len(HEAT_COLOURS)), len(HEAT_COLOURS) - 1)]


def _heat_map(rows: list[dict[str, object]], metric: str, unit: str) -> str:
    """One SVG: a row per node, a cell per card, filled by the metric's used/total bucket. Each cell is labelled
    with the card's index on its node (``#0``) above its share; its tooltip names the card (UUID, model)."""
    by_node: dict[str, list[dict[str, object]]] = {}
    for row in rows:
        by_node.setdefault(str(row["node"]), []).append(row)
    width = _LABEL_W + _CELL * max((len(v) for v in by_node.values()), default=1) + 10
    height = _HEAT_ROW_H * max(len(by_node), 1) + 10
    parts = [f'<svg class="plot heat" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">']
    for r, (node, cards) in enumerate(by_node.items()):
        y = 5 + r * _HEAT_ROW_H
        parts.append(f'<text x="4" y="{y + 24}" font-size="13">{escape(node)}</text>')
        for c, card in enumerate(cards):
            values = card[metric]
            assert isinstance(values, dict)
            used, total = int(values["used"]), int(values["total"])
            x = _LABEL_W + c * _CELL
            share = f"{round(100 * used / total)}%" if total > 0 else "-"
            name = metric.removesuffix("MiB")
            tip = f"{card['uuid']} ({card['model']}): {name} {used}/{total} {unit}".strip()
            held = card.get("dra")
            if isinstance(held, dict):
                tip += f", of which DRA claims hold {held[metric]}"
            middle = x + (_CELL - 4) / 2
            parts.append(
                f'<rect x="{x}" y="{y}" width="{_CELL - 4}" height="{_HEAT_ROW_H - 4}" fill="{_bucket(used, total)}">'
                f"<title>{escape(tip)}</title></rect>"
                f'<text class="card" x="{middle}" y="{y + 14}" font-size="11" text-anchor="middle">'
                f"#{escape(str(card['index']))}</text>"
                f'<text x="{middle}" y="{y + 29}" font-size="11" text-anchor="middle">{share}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _bars(items: Sequence[tuple[str, int]], colour: str) -> str:
    """Horizontal bars, one per ``(label, value)``, longest value full width."""
    top = max((v for _, v in items), default=1) or 1
    height = _ROW_H * max(len(items), 1) + 10
    parts = [
        f'<svg class="plot bars" width="{_LABEL_W * 2 + 420}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for i, (label, value) in enumerate(items):
        y = 5 + i * _ROW_H
        length = max(2, round(400 * value / top))
        parts.append(
            f'<text x="4" y="{y + 18}" font-size="13">{escape(label)}</text>'
            f'<rect x="{_LABEL_W * 2}" y="{y}" width="{length}" height="{_ROW_H - 8}" fill="{colour}"/>'
            f'<text x="{_LABEL_W * 2 + length + 6}" y="{y + 17}" font-size="12">{value}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_HEAT_CAPTION: Final = (
    '<p class="muted caption">A row per node, a cell per card: #index on the node, then the share used (hover a cell '
    "for the card's UUID and model).</p>"
)


def _legend() -> str:
    spans = [f'<span style="background:{c}"></span>{20 * i}–{20 * (i + 1)}%' for i, c in enumerate(HEAT_COLOURS)]
    legend = '<p class="legend">' + "".join(spans) + f'<span style="background:{EMPTY_COLOUR}"></span>no capacity</p>'
    return legend + _HEAT_CAPTION


_NODE_LEVEL: Final = frozenset(
    {Reason.NODE_UNREGISTERED.value, Reason.NODE_QUARANTINED.value, Reason.NODE_DEVICES_NOT_ALLOCATABLE.value}
)
"""Reason codes a node gives as a whole (no card was looked at)."""


def _pending_counts(waiting: Sequence[Outcome]) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """Cards failing each check, nodes rejecting for each reason, and pods refused before any node was judged."""
    cards: Counter[str] = Counter()
    nodes: Counter[str] = Counter()
    pods: Counter[str] = Counter()
    for o in waiting:
        for codes in o.reasons.values():
            cards.update({code: n for code, n in codes.items() if code not in _NODE_LEVEL})
            nodes.update(codes.keys())
        if o.status == "invalid":
            pods["InvalidRequest"] += 1
        elif o.status == "denied":
            pods["AdmissionDenied"] += 1
    return cards, nodes, pods


def _ranked(counter: Counter[str]) -> list[tuple[str, int]]:
    return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))


def _pending_section(outcomes: Sequence[Outcome]) -> str:
    waiting = [o for o in outcomes if o.status in ("pending", "invalid", "denied")]
    if not waiting:
        return "<h2>Pods not placed</h2><p>Every pod that asks for devices was placed.</p>"
    cards, nodes, pods = _pending_counts(waiting)
    rows: list[list[str]] = []
    for o in waiting:
        rejected = sorted(o.rejected.items())
        rows.append([o.pod, o.message, ""])
        rows += [["", node, rejection.summary] for node, rejection in rejected]
    parts = ["<h2>Pods not placed (pending, invalid, denied at admission): why</h2>"]
    if cards:
        parts.append(
            '<h3>Cards</h3><p class="muted caption">Cards (devices) failing each check, summed over the pending '
            "pods and the nodes that judged them.</p>" + _bars(_ranked(cards), BAR_COLOUR)
        )
    if nodes:
        parts.append(
            '<h3>Nodes</h3><p class="muted caption">Nodes rejecting a pending pod, by the reasons they gave (a node '
            "counts once per pod for each reason; NodeUnregistered and NodeQuarantined are nodes without a usable "
            "registration, NodeDevicesNotAllocatable nodes whose kubelet does not report the registered devices)."
            "</p>" + _bars(_ranked(nodes), NODE_BAR_COLOUR)
        )
    if pods:
        parts.append(
            '<h3>Pods</h3><p class="muted caption">Pods refused before any node was judged: an invalid request, or '
            "denied by the admission webhook.</p>" + _bars(_ranked(pods), NODE_BAR_COLOUR)
        )
    return "".join(parts) + _table(["POD", "NODE / MESSAGE", "REASONS"], rows)


def _devices_text(o: Outcome, state: ClusterState) -> str:
    node = o.node or ""
    per_container = [
        ", ".join(f"{d.uuid} ({d.usedmem} MiB, {cores_text(d.usedcores, core_unit(state, node, d.uuid))})" for d in c)
        for c in container_devices(o.decision)
    ]
    return " | ".join(text for text in per_container if text) or o.message


def _placements_section(outcomes: Sequence[Outcome], state: ClusterState) -> str:
    per_node = Counter(o.node for o in outcomes if o.node is not None)
    rows = [[o.pod, o.node or "-", _devices_text(o, state) if o.node else o.status] for o in outcomes]
    bars = _bars(sorted(per_node.items()), PLACED_COLOUR) if per_node else "<p>No pod was placed.</p>"
    return (
        '<h2>Placements</h2><p class="muted">Pods placed per node.</p>'
        + bars
        + _table(["POD", "NODE", "DEVICES"], rows)
    )


def _fragmentation_section(doc: object | None) -> str:
    """The per-model fragmentation table (the JSON's ``fragmentation`` field; see ``hami top``)."""
    if not isinstance(doc, dict):
        return ""
    rows = [
        [
            m["vendor"],
            m["model"],
            str(m["cards"]),
            str(m["wholeFreeCards"]),
            str(m["freeMemoryMiB"]),
            str(m["strandedMemoryMiB"]),
            str(m["strandedCores"]),
            f"{m['largestSlice']['memoryMiB']} MiB, {m['largestSlice']['cores']}%",
        ]
        for m in doc.get("models", [])
    ]
    header = ["VENDOR", "MODEL", "CARDS", "FREE CARDS", "FREE MiB", "STRANDED MiB", "STRANDED CORES", "LARGEST SLICE"]
    return (
        f'<h2>Fragmentation</h2><p class="muted">Cluster index {escape(str(doc.get("index")))}: the share of free '
        "device memory that no pod shape seen can use.</p>" + _table(header, rows)
    )


def _dra_section(rows: list[dict[str, object]], dra: DraLedger | None) -> str:
    """Cards DRA claims hold part of, with the device-plugin pods' part beside; then DRA problems and warnings."""
    doc = dra_document(dra)
    if doc is None:
        return ""
    cards = []
    for row in rows:
        held, memory, cores = row.get("dra"), row["memoryMiB"], row["cores"]
        if not isinstance(held, dict) or not isinstance(memory, dict) or not isinstance(cores, dict):
            continue
        cards.append(
            [
                str(row["node"]),
                str(row["uuid"]),
                str(held["claims"]),
                f"{held['memoryMiB']} MiB, {held['cores']} cores",
                f"{memory['used'] - held['memoryMiB']} MiB, {cores['used'] - _cores_of(held)} cores",
                f"{memory['total'] - memory['used']} MiB",
            ]
        )
    notes = [[str(p["kind"]), str(p["object"]), str(p["message"])] for p in _dicts(doc["problems"])]
    notes += [[f"warning: {w['kind']}", str(w["object"]), str(w["message"])] for w in _dicts(doc["warnings"])]
    header = ["NODE", "DEVICE", "CLAIMS", "DRA-HELD", "DEVICE-PLUGIN PODS", "FREE"]
    return (
        '<h2>DRA claims beside device-plugin pods</h2><p class="muted">Capacity held by ResourceClaims of the '
        "configured DRA drivers, charged to the card of the same UUID (read-only towards DRA).</p>"
        + _table(header, cards)
        + (_table(["PROBLEM", "OBJECT", "MESSAGE"], notes) if notes else "")
    )


def _cores_of(held: dict[str, object]) -> int:
    value = held["cores"]
    return value if isinstance(value, int) else 0


def _dicts(value: object) -> list[dict[str, object]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def render_html(title: str, state: ClusterState, outcomes: Sequence[Outcome], dra: DraLedger | None = None) -> str:
    """The whole page as text (UTF-8 when written)."""
    rows = utilization_document(state)
    summary = summary_line(title, state, outcomes)
    sections = [
        f"<h1>{escape(title)}</h1><p>{escape(summary)}</p>",
        "<h2>Memory used per card</h2>" + _legend() + _heat_map(rows, "memoryMiB", "MiB"),
        "<h2>Cores used per card</h2>" + _HEAT_CAPTION + _heat_map(rows, "cores", "%"),
        _pending_section(outcomes),
        _placements_section(outcomes, state),
    ]
    sections.append(_fragmentation_section(fragmentation_document(state)))
    sections.append(_dra_section(rows, dra))
    return _page(title, sections)


def _page(title: str, sections: Sequence[str]) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>" + "".join(sections) + "</body></html>\n"
    )


def render_defrag_html(
    title: str,
    headline: str,
    before: list[dict[str, object]],
    after: list[dict[str, object]],
    moves: Sequence[Sequence[str]],
    note: str,
) -> str:
    """``hami simulate --defrag --report``: the plan's headline, the memory heat maps before and after the moves
    (``utilization_document`` rows), the moves with the command that carries each out, and how to carry them out."""
    table = _table(["#", "POD", "FROM", "TO", "COMMAND"], moves) if moves else "<p>No move is planned.</p>"
    sections = [
        f"<h1>{escape(title)}</h1><p>{escape(headline)}</p>",
        "<h2>Memory used per card, before</h2>" + _legend() + _heat_map(before, "memoryMiB", "MiB"),
        "<h2>Memory used per card, after the moves</h2>" + _HEAT_CAPTION + _heat_map(after, "memoryMiB", "MiB"),
        f"<h2>Moves</h2>{table}" + (f'<p class="muted">{escape(note)}</p>' if moves else ""),
    ]
    return _page(title, sections)
