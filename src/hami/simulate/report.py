"""What ``hami simulate`` prints: the stable JSON document, and tables for people.

The JSON document (``--output json``) is described field by field in docs/cli.md ("The JSON document of
hami simulate"); ``document`` builds it. Tables: ``render_summary`` (header, placements, utilization, pending).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import Final

from hami.devices.base import SliceLabels, cores_shown
from hami.devices.table import DeviceTable
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo
from hami.scheduling.dra import DraLedger, HeldCard, held_by_card
from hami.scheduling.dra.served import DRA_SHARES
from hami.scheduling.state import ClusterState
from hami.scheduling.usage import Kind
from hami.simulate.simulator import Outcome, container_devices
from hami.simulate.top import fragmentation_json
from hami.simulate.wording import UNLIMITED, card_health, cores_text, counted

__all__ = [
    "UNLIMITED",
    "card_health",
    "core_unit",
    "cores_text",
    "decisions_document",
    "document",
    "dra_document",
    "fragmentation_document",
    "render_json",
    "render_pending",
    "render_placements",
    "render_summary",
    "render_utilization",
    "slice_labels",
    "summary_line",
    "utilization_document",
]


def _device_json(d: ContainerDevice) -> dict[str, object]:
    """One device of an allocation, in the vocabulary of ``hami top`` and ``hami explain`` (``vendor`` is the
    vendor key as on the wire; ``cores`` 0 is no core limit)."""
    return {"uuid": d.uuid, "vendor": d.type, "memoryMiB": d.usedmem, "cores": d.usedcores}


def decisions_document(outcomes: Iterable[Outcome]) -> dict[str, object]:
    """The JSON document as Python objects (field order as documented, maps sorted)."""
    decisions = []
    for o in outcomes:
        d = o.decision
        annotations = dict(sorted(d.annotations.items())) if d is not None and d.node is not None else {}
        decisions.append(
            {
                "pod": o.pod,
                "status": o.status,
                "node": o.node,
                "devices": [[_device_json(d) for d in c] for c in container_devices(o.decision)],
                "annotations": annotations,
                "reasons": {node: dict(sorted(codes.items())) for node, codes in sorted(o.reasons.items())},
                "message": o.message,
                "admission": list(o.admission) if o.admission is not None else None,
                "warnings": list(o.warnings),
            }
        )
    return {"decisions": decisions}


def fragmentation_document(state: ClusterState) -> object | None:
    """The fragmentation view (``hami.simulate.top.fragmentation_json``: the cluster index, per-model totals, per-card
    stranded memory/cores and largest slice), the document's ``"fragmentation"`` field after ``"utilization"``."""
    return fragmentation_json(state)


def _slice_kind(state: ClusterState, vendor: str) -> str:
    """What the vendor calls a slice (``MIG``), ``slice`` when its partition hook does not say."""
    hook = state.vendors[vendor].partitions if vendor in state.vendors else None
    return hook.slice_kind if isinstance(hook, SliceLabels) else "slice"


def slice_labels(state: ClusterState, vendor: str, info: DeviceInfo, positions: Sequence[Hashable]) -> list[str] | None:
    """The slices held on a device that the vendor hands out in fixed slices, as people read them (through the
    vendor's ``SliceLabels``); None for a device that is not carved, or whose vendor neither labels its slices nor
    records their positions (the ledger then knows only the memory and cores they hold)."""
    hook = state.vendors[vendor].partitions if vendor in state.vendors else None
    if hook is None or not hook.carves(info):
        return None
    if isinstance(hook, SliceLabels):
        return hook.slice_labels(info, positions)
    return [str(p) for p in positions if p is not None] or None


def _held_json(held: HeldCard | None) -> dict[str, int] | None:
    if held is None:
        return None
    return {"claims": held.claims, "slots": held.slots, "memoryMiB": held.mem, "cores": held.cores}


def utilization_document(state: ClusterState) -> list[dict[str, object]]:
    """One entry per device of every node (nodes by name, vendors sorted, devices in registration order). ``used``
    counts device-plugin pods and DRA claims together; ``dra`` is the claims' part (None when they hold nothing)."""
    rows: list[dict[str, object]] = []
    held = held_by_card(state)
    for name, node in sorted(state.nodes.items()):
        for vendor in sorted(node.tables):
            table = node.tables[vendor]
            for i, info in enumerate(table.infos):
                slices = slice_labels(state, vendor, info, table.slices[i])
                rows.append(
                    {
                        "node": name,
                        "uuid": info.id,
                        "index": info.index,
                        "vendor": vendor,
                        "model": info.type,
                        "slots": {"used": table.used[i], "total": info.count},
                        "memoryMiB": {"used": table.usedmem[i], "total": info.devmem},
                        "cores": {
                            "used": cores_shown(state.vendors.get(vendor), table.usedcores[i]),
                            "total": cores_shown(state.vendors.get(vendor), info.devcore),
                        },
                        "health": card_health(info.health, table.broken[i], info.id in node.cordoned),
                        "cordoned": info.id in node.cordoned,
                        "unschedulable": node.unschedulable,
                        "mig": slices if _slice_kind(state, vendor) == "MIG" else None,
                        "blocked": table.broken[i],
                        "slices": slices,
                        "dra": _held_json(held.get((name, vendor, info.id))),
                    }
                )
    return rows


def dra_document(dra: DraLedger | None) -> dict[str, object] | None:
    """The DRA problems and warnings (the document's ``"dra"`` field), None when the snapshot held no DRA object
    that mattered (no claim charged, no problem, no warning)."""
    if dra is None or not (dra.records() or dra.problems() or dra.warnings()):
        return None
    return {
        "claims": len({(r.namespace, r.name) for r in dra.records()}),
        "problems": [
            {"kind": p.kind.value, "object": p.object, "node": p.node, "message": p.message} for p in dra.problems()
        ],
        "warnings": [{"kind": w.kind.value, "object": w.object, "message": w.message} for w in dra.warnings()],
    }


def _counts(state: ClusterState, outcomes: Sequence[Outcome]) -> dict[str, int]:
    statuses = [o.status for o in outcomes]
    return {
        "nodes": len(state.nodes),
        "devices": sum(len(t) for n in state.nodes.values() for t in n.tables.values()),
        "pods": len(outcomes),
        "placed": statuses.count("placed"),
        "pending": statuses.count("pending"),
        "invalid": statuses.count("invalid"),
        "denied": statuses.count("denied"),
        "noDevices": statuses.count("no-devices"),
    }


def document(state: ClusterState, outcomes: Sequence[Outcome], dra: DraLedger | None = None) -> dict[str, object]:
    """The whole JSON document: ``summary``, ``decisions``, ``utilization`` (and ``fragmentation`` via the hook),
    then ``dra`` when the snapshot's DRA objects charged or reported anything."""
    doc: dict[str, object] = {"summary": _counts(state, outcomes), **decisions_document(outcomes)}
    doc["utilization"] = utilization_document(state)
    fragmentation = fragmentation_document(state)
    if fragmentation is not None:
        doc["fragmentation"] = fragmentation
    held = dra_document(dra)
    if held is not None:
        doc["dra"] = held
    return doc


def render_json(state: ClusterState, outcomes: Sequence[Outcome], dra: DraLedger | None = None) -> str:
    return json.dumps(document(state, outcomes, dra), indent=2, ensure_ascii=False)


def summary_line(title: str, state: ClusterState, outcomes: Sequence[Outcome]) -> str:
    """``<title>: 6 nodes, 20 devices; 14 pods in order: 13 placed, 1 pending`` (invalid pods counted apart)."""
    c = _counts(state, outcomes)
    parts = [f"{c['placed']} placed", f"{c['pending']} pending"]
    if c["invalid"]:
        parts.append(f"{c['invalid']} invalid")
    if c["denied"]:
        parts.append(f"{c['denied']} denied at admission")
    if c["noDevices"]:
        parts.append(f"{c['noDevices']} asking for no device")
    sizes = f"{counted(c['nodes'], 'node')}, {counted(c['devices'], 'device')}; {counted(c['pods'], 'pod')} in order"
    return f"{title}: {sizes}: {', '.join(parts)}"


def render_summary(title: str, state: ClusterState, outcomes: Sequence[Outcome], dra: DraLedger | None = None) -> str:
    """The header, the placements, every device's utilization after them (with DRA claims' part), a line on DRA
    claims when there are any, then why pending pods did not fit."""
    lines = [
        summary_line(title, state, outcomes),
        "",
        "Placements",
        *render_placements(outcomes, state),
        "",
        "Per-device utilization after placement",
        *(render_utilization(state) if any(n.tables for n in state.nodes.values()) else ["no node registers a device"]),
    ]
    doc = dra_document(dra)
    if doc is not None:
        problems, warnings = doc["problems"], doc["warnings"]
        assert isinstance(problems, list)
        assert isinstance(warnings, list)
        claims = doc["claims"]
        assert isinstance(claims, int)
        lines += [
            "",
            f"DRA: {counted(claims, 'claim')} charged beside device-plugin pods (their part: DRA-HELD); "
            f"{counted(len(problems), 'problem')}, {counted(len(warnings), 'warning')} (printed as warnings)",
        ]
    for status, heading in NOT_PLACED_HEADINGS:
        section = render_pending(outcomes, (status,))
        if section:
            lines += ["", heading, *section]
    return "\n".join(lines)


NOT_PLACED_HEADINGS: Final = (
    ("pending", "Pending pods and why each node was rejected"),
    ("invalid", "Invalid pods (their request cannot be read)"),
    ("denied", "Denied at admission (the webhook refuses them; the cluster would not create them)"),
)
"""The sections of ``render_summary`` for pods not placed, one per status, in this order."""


# --- tables -------------------------------------------------------------------------------------------
def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = []
    for row in (headers, *rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return lines


def _mem_of(devices: Sequence[Sequence[ContainerDevice]], container: int, device: int) -> int:
    if container < len(devices) and device < len(devices[container]):
        return devices[container][device].usedmem
    return 0


def _slice_texts(o: Outcome, state: ClusterState | None) -> dict[tuple[str, int, int], str]:
    """``(vendor, container, device) → "MIG 2g.20gb@0"`` for every slice of the decision, as its vendor names it
    (``SliceLabels``), else by its template (``slice vir05_1c_16g``)."""
    d = o.decision
    if state is None or d is None or d.node is None or d.node not in state.nodes:
        return {}
    out: dict[tuple[str, int, int], str] = {}
    for vendor, slices in d.slices.items():
        table = state.nodes[d.node].tables.get(vendor)
        hook = state.vendors[vendor].partitions if vendor in state.vendors else None
        if table is None:
            continue
        if not isinstance(hook, SliceLabels):  # a template carving memory (Ascend's vNPU, Enflame's DRS): its name
            devices = d.devices.get(vendor, ())
            named = [s for s in slices if s.slice.template and _mem_of(devices, s.container, s.device) > 0]
            out.update({(vendor, s.container, s.device): f"slice {s.slice.template}" for s in named})
            continue
        for s in slices:
            info = next((i for i in table.infos if i.id == s.uuid), None)
            labels = hook.slice_labels(info, [s.slice.position]) if info is not None else []
            out[(vendor, s.container, s.device)] = f"{hook.slice_kind} {labels[0] if labels else s.slice.template}"
    return out


def core_unit(state: ClusterState | None, node: str, uuid: str, vendor: str | None = None) -> str:
    """How a device's cores read: ``%`` where a card has 100 core units, ``/<total> cores`` elsewhere (AMD counts
    compute units: 152 of an MI300X's 304 is ``152/304 cores``, not ``152%``). The device is looked up in the
    ``vendor``'s table of ``node``, or in every table of the node when no vendor is given."""
    tables = state.nodes[node].tables if state is not None and node in state.nodes else {}
    for name, table in tables.items():
        i = table.index_of.get(uuid) if vendor in (None, name) else None
        if i is not None and table.infos[i].devcore not in (0, 100):
            assert state is not None
            return f"/{cores_shown(state.vendors.get(name), table.infos[i].devcore)} cores"
        if i is not None:
            return "%"
    return "%"


def _count(state: ClusterState | None, vendor: str, cores: int) -> int:
    """A charge's cores as a number of cores (``CoreCount``: AWS Neuron's core mask)."""
    return cores if state is None else cores_shown(state.vendors.get(vendor), cores)


def _devices_cell(o: Outcome, state: ClusterState | None = None) -> str:
    """Per container: ``uuid (MiB, cores%)`` per device; containers are named when it helps."""
    d = o.decision
    if d is None or d.node is None:
        return "-"
    node = d.node
    per_container: list[str] = []
    sliced = _slice_texts(o, state)
    n = max((len(v) for v in d.devices.values()), default=0)
    for ci in range(n):
        items: list[str] = []
        for vendor in sorted(d.devices):
            containers = d.devices[vendor]
            if ci >= len(containers) or not containers[ci]:
                continue
            devs = containers[ci]
            labels = [sliced.get((vendor, ci, di)) for di in range(len(devs))]
            if len(devs) > 1 and not any(labels) and len({(x.usedmem, x.usedcores) for x in devs}) == 1:
                uuids = ", ".join(x.uuid for x in devs)
                unit = core_unit(state, node, devs[0].uuid, vendor)
                shared = cores_text(_count(state, vendor, devs[0].usedcores), unit)
                items.append(f"{uuids} ({devs[0].usedmem} MiB, {shared} each)")
                continue
            for dev, label in zip(devs, labels, strict=True):
                unit = core_unit(state, node, dev.uuid, vendor)
                # a fixed slice's compute is its template's: its name says more than "unlimited cores"
                count = _count(state, vendor, dev.usedcores)
                cores = "" if label and count == 0 else f", {cores_text(count, unit)}"
                items.append(f"{dev.uuid} ({dev.usedmem} MiB{cores}{f', {label}' if label else ''})")
        per_container.append(", ".join(items))
    with_devices = [i for i, text in enumerate(per_container) if text]
    if len(with_devices) == 1 and o.containers and o.containers[with_devices[0]][1] is Kind.APP:
        return per_container[with_devices[0]]
    parts = []
    for i in with_devices:
        name, kind = o.containers[i] if i < len(o.containers) else (f"#{i}", Kind.APP)
        prefix = "" if kind is Kind.APP else f"{kind.value} "
        parts.append(f"{prefix}{name}: {per_container[i]}")
    return " | ".join(parts)


def _status(o: Outcome, state: ClusterState | None) -> str:
    if o.status == "placed":
        return _devices_cell(o, state)
    if o.status == "no-devices":
        return o.message
    return f"{o.status} (see below)"


def render_placements(outcomes: Sequence[Outcome], state: ClusterState | None = None) -> list[str]:
    """One row per pod: pod, node (``-`` when not placed) and devices, or why there are none (``state`` tells how
    each device counts its cores, and names the slices of a device handed out in fixed slices as its vendor does:
    ``MIG 2g.20gb@0``)."""
    return _table(["POD", "NODE", "DEVICES"], [[o.pod, o.node or "-", _status(o, state)] for o in outcomes])


def render_pending(
    outcomes: Sequence[Outcome], statuses: Collection[str] = ("pending", "invalid", "denied")
) -> list[str]:
    """For each pod of one of ``statuses`` (pending, invalid or denied): its message, then each rejected node's
    reasons (HAMi's text)."""
    lines: list[str] = []
    for o in outcomes:
        if o.status not in statuses:
            continue
        lines.append(f"{o.pod}: {o.message}")
        lines += _rejection_lines({node: r.summary for node, r in o.rejected.items()})
    return lines


GROUPED: Final = 3
"""Nodes rejected for the same reason text are listed on one line when there are at least this many (a mixed
cluster rejects every node of another vendor alike: one line per node would bury the nodes that matter)."""


def _rejection_lines(summaries: Mapping[str, str]) -> list[str]:
    """One line per node, in node order; a reason shared by ``GROUPED`` or more nodes becomes one line naming
    them, placed at its first node."""
    by_text: dict[str, list[str]] = {}
    for node in sorted(summaries):
        by_text.setdefault(summaries[node], []).append(node)
    lines: list[str] = []
    for node in sorted(summaries):
        text = summaries[node]
        nodes = by_text[text]
        if len(nodes) < GROUPED:
            lines.append(f"  {node}: {text}")
        elif nodes[0] == node:
            lines.append(f"  {len(nodes)} nodes ({', '.join(nodes)}): {text}")
    return lines


def _device_note(state: ClusterState, vendor: str, table: DeviceTable, i: int, cordoned: frozenset[str]) -> str:
    info = table.infos[i]
    notes = []
    slices = slice_labels(state, vendor, info, table.slices[i])
    if slices is not None:
        kind = _slice_kind(state, vendor)
        notes.append(f"{kind}: {' '.join(slices)}" if slices else f"{kind}: no instances")
    if not info.health:
        notes.append("unhealthy")
    if table.broken[i]:
        notes.append(f"blocked: {table.broken[i]}")
    if info.id in cordoned:
        notes.append("cordoned")
    return "; ".join(notes)


def held_text(held: HeldCard | None, devcore: int) -> str:
    """What DRA claims hold of a card, for a table cell: ``2 claims: 30720 MiB, 130%`` (``-`` when nothing)."""
    if held is None:
        return "-"
    unit = "%" if devcore in (0, 100) else f"/{devcore} cores"
    return f"{held.claims} claim{'s' if held.claims != 1 else ''}: {held.mem} MiB, {held.cores}{unit}"


def _cores_cell(state: ClusterState, vendor: str, used: int, total: int) -> str:
    """``used/total`` cores as the vendor counts them (a core mask reads as the cores it holds)."""
    counter = state.vendors.get(vendor)
    return f"{cores_shown(counter, used)}/{cores_shown(counter, total)}"


def render_utilization(state: ClusterState) -> list[str]:
    """One row per device of every node: slots, memory (MiB) and cores used out of the total — device-plugin pods
    and DRA claims together; when claims hold anything, a ``DRA-HELD`` column gives their part."""
    rows = []
    held = held_by_card(state)
    for name, node in sorted(state.nodes.items()):
        for vendor in sorted(node.tables):
            table = node.tables[vendor]
            for i, info in enumerate(table.infos):
                row = [
                    name,
                    info.id,
                    info.type,
                    f"{table.used[i]}/{'-' if info.count == DRA_SHARES else info.count}",  # DRA: no slots
                    f"{table.usedmem[i]}/{info.devmem}",
                    _cores_cell(state, vendor, table.usedcores[i], info.devcore),
                ]
                if held:
                    row.append(held_text(held.get((name, vendor, info.id)), info.devcore))
                rows.append([*row, _device_note(state, vendor, table, i, node.cordoned)])
    headers = ["NODE", "DEVICE", "TYPE", "SLOTS", "MEMORY MiB", "CORES"]
    return _table([*headers, *(["DRA-HELD"] if held else []), "NOTE"], rows)
