"""Cards that DRA claims and hami's pods together hold beyond their capacity (``over-capacity`` problems).

kube-scheduler allocates a claim from the driver's ResourceSlices and sees no device-plugin pod, so it may put a
claim on a card hami's pods already fill; hami sees the claim at once, places nothing more there, but cannot undo
it. This module finds such cards for the ledger. A card that DRA claims alone overshoot in hami's terms (more shares
than hami's slot count, or bytes rounded up to MiB per claim) is not a conflict with hami's pods and is left alone.
"""

from __future__ import annotations

from typing import Final

from hami.scheduling.dra.held import DraRecord
from hami.scheduling.state import ClusterState, PodRecord

__all__ = ["overcommitted"]

_DIMENSIONS: Final = ("slots", "MiB", "cores")


def _held_on(state: ClusterState, node: str, vendor: str, uuid: str) -> tuple[int, int, int]:
    slots = mem = cores = 0
    for uid in state.held_by_node.get(node, ()):
        if not isinstance(state.held[uid], DraRecord):
            continue  # a preemption hold is not a claim
        for ch in state.held[uid].charges:
            if ch.vendor == vendor and ch.uuid == uuid:
                slots, mem, cores = slots + ch.slots, mem + ch.mem, cores + ch.cores
    return slots, mem, cores


def overcommitted(state: ClusterState, record: PodRecord) -> list[str]:
    """One message per card ``record`` (a held record) charges whose usage exceeds its capacity while hami's pods
    hold part of it: what is over, what claims hold, what pods hold."""
    node = state.nodes.get(record.node)
    out: list[str] = []
    for ch in record.charges if node is not None else ():
        table = node.tables.get(ch.vendor) if node is not None else None
        i = table.index_of.get(ch.uuid) if table is not None else None
        if table is None or i is None:
            continue
        info = table.infos[i]
        used = table.usage_of(i)[:3]
        held = _held_on(state, record.node, ch.vendor, ch.uuid)
        pods = tuple(u - h for u, h in zip(used, held, strict=True))
        caps = (info.count, info.devmem, info.devcore)
        over = [f"{d} {u}/{c}" for d, u, c in zip(_DIMENSIONS, used, caps, strict=True) if u > c]
        if over and any(p > 0 for p in pods):
            claims = ", ".join(f"{v} {d}" for d, v in zip(_DIMENSIONS, held, strict=True))
            mine = ", ".join(f"{v} {d}" for d, v in zip(_DIMENSIONS, pods, strict=True))
            out.append(
                f"card {ch.uuid} on {record.node} is over capacity ({', '.join(over)}): DRA claims hold {claims}, "
                f"hami's pods {mine}; kube-scheduler allocated without seeing hami's pods. hami places nothing more "
                f"there until enough is freed (keep DRA and device-plugin pods on different cards)"
            )
    return out
