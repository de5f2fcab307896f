"""What ``hami simulate`` prints: the stable JSON document, and tables for people.

JSON (``--output json``) is one object, ``{"decisions": [...]}``, one entry per pod in the order placed::

    {"pod": "<ns>/<name>",
     "node": "<name>" | null,
     "devices": [[{"uuid", "type", "usedmem", "usedcores"}, ...], ...],   # per container, init first
     "annotations": {...},                                                # what hami would write
     "reasons": {"<node>": {"<ReasonCode>": <count>, ...}, ...},          # every rejected node
     "message": "..."}

Entries keep this field order; the keys of ``annotations`` and ``reasons`` (and of each node's codes) are
sorted. ``devices`` follows the allocation annotation: one list per container (init containers first),
empty lists for containers without devices, and ``[]`` when the pod was not placed. ``type`` is the vendor key
(``NVIDIA``, ``DCU``), as on the wire; a pod asking for several vendors gets each container's devices of every
vendor, vendors in sorted order. A reason count is the number of devices that failed that check; a node that
cannot be considered at all has one node-level code with count 1: ``NodeUnregistered`` (no registration for
a vendor the pod asks for, or not a known node) or ``NodeQuarantined`` (its registration does not decode).
An invalid pod has ``node: null``, empty fields and the error as ``message``.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Sequence

from hami.devices.table import DeviceTable
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo, MigPlacement
from hami.scheduling.state import ClusterState
from hami.scheduling.usage import Kind
from hami.simulate.simulator import Outcome, container_devices

__all__ = ["decisions_document", "render_json", "render_pending", "render_placements", "render_utilization"]


def _device_json(d: ContainerDevice) -> dict[str, object]:
    return {"uuid": d.uuid, "type": d.type, "usedmem": d.usedmem, "usedcores": d.usedcores}


def decisions_document(outcomes: Iterable[Outcome]) -> dict[str, object]:
    """The JSON document as Python objects (field order as documented, maps sorted)."""
    decisions = []
    for o in outcomes:
        d = o.decision
        annotations = dict(sorted(d.annotations.items())) if d is not None and d.node is not None else {}
        decisions.append(
            {
                "pod": o.pod,
                "node": o.node,
                "devices": [[_device_json(d) for d in c] for c in container_devices(o.decision)],
                "annotations": annotations,
                "reasons": {node: dict(sorted(codes.items())) for node, codes in sorted(o.reasons.items())},
                "message": o.message,
            }
        )
    return {"decisions": decisions}


def render_json(outcomes: Iterable[Outcome]) -> str:
    return json.dumps(decisions_document(outcomes), indent=2, ensure_ascii=False)


# --- tables -------------------------------------------------------------------------------------------
def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = []
    for row in (headers, *rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return lines


def _mig_labels(o: Outcome) -> dict[tuple[int, int], str]:
    if o.decision is None:
        return {}
    return {
        (s.container, s.device): f"{s.slice.template}@{s.slice.position.start}"
        for s in o.decision.slices.get("NVIDIA", ())
        if isinstance(s.slice.position, MigPlacement)
    }


def _devices_cell(o: Outcome) -> str:
    """Per container: ``uuid (MiB, cores%)`` per device; containers are named when it helps."""
    d = o.decision
    if d is None or d.node is None:
        return "-"
    per_container: list[str] = []
    mig = _mig_labels(o)
    n = max((len(v) for v in d.devices.values()), default=0)
    for ci in range(n):
        items: list[str] = []
        for vendor in sorted(d.devices):
            containers = d.devices[vendor]
            if ci >= len(containers) or not containers[ci]:
                continue
            devs = containers[ci]
            labels = [mig.get((ci, di)) if vendor == "NVIDIA" else None for di in range(len(devs))]
            if len(devs) > 1 and not any(labels) and len({(x.usedmem, x.usedcores) for x in devs}) == 1:
                uuids = ", ".join(x.uuid for x in devs)
                items.append(f"{uuids} ({devs[0].usedmem} MiB, {devs[0].usedcores}% each)")
                continue
            for dev, label in zip(devs, labels, strict=True):
                extra = f", MIG {label}" if label else ""
                items.append(f"{dev.uuid} ({dev.usedmem} MiB, {dev.usedcores}%{extra})")
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


def _status(o: Outcome) -> str:
    if o.status == "placed":
        return _devices_cell(o)
    if o.status == "no-devices":
        return o.message
    return f"{o.status} (see below)"


def render_placements(outcomes: Sequence[Outcome]) -> list[str]:
    """One row per pod: pod, node (``-`` when not placed) and devices, or why there are none."""
    return _table(["POD", "NODE", "DEVICES"], [[o.pod, o.node or "-", _status(o)] for o in outcomes])


def render_pending(outcomes: Sequence[Outcome]) -> list[str]:
    """For each pending or invalid pod: its message, then each rejected node's reasons (HAMi's text)."""
    lines: list[str] = []
    for o in outcomes:
        if o.status not in ("pending", "invalid"):
            continue
        lines.append(f"{o.pod}: {o.message}")
        for node, rejection in sorted(o.rejected.items()):
            lines.append(f"  {node}: {rejection.summary}")
    return lines


def _mig_instances(info: DeviceInfo, positions: Sequence[Hashable]) -> str:
    names = []
    placements = [p for p in positions if isinstance(p, MigPlacement)]
    for p in sorted(placements, key=lambda p: (p.start, p.size)):
        profile = next((m.name for m in info.mig_profiles if p in m.placements), f"{p.size}-slice")
        names.append(f"{profile}@{p.start}")
    return " ".join(names)


def _device_note(table: DeviceTable, i: int, cordoned: frozenset[str]) -> str:
    info = table.infos[i]
    notes = []
    if info.mode == "mig":
        instances = _mig_instances(info, table.slices[i])
        notes.append(f"MIG: {instances}" if instances else "MIG: no instances")
    if not info.health:
        notes.append("unhealthy")
    if table.broken[i]:
        notes.append(f"blocked: {table.broken[i]}")
    if info.id in cordoned:
        notes.append("cordoned")
    return "; ".join(notes)


def render_utilization(state: ClusterState) -> list[str]:
    """One row per device of every node: slots, memory (MiB) and cores used out of the total."""
    rows = []
    for name, node in sorted(state.nodes.items()):
        for vendor in sorted(node.tables):
            table = node.tables[vendor]
            for i, info in enumerate(table.infos):
                rows.append(
                    [
                        name,
                        info.id,
                        info.type,
                        f"{table.used[i]}/{info.count}",
                        f"{table.usedmem[i]}/{info.devmem}",
                        f"{table.usedcores[i]}/{info.devcore}",
                        _device_note(table, i, node.cordoned),
                    ]
                )
    return _table(["NODE", "DEVICE", "TYPE", "SLOTS", "MEMORY MiB", "CORES", "NOTE"], rows)
