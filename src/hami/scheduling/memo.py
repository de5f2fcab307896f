"""The memo of ``decide`` (``Verdicts``): per node, its score and its verdict per request shape.

Never authoritative: an entry holds only while its node's ``NodeState`` and generation do (see ``Verdicts``). The
filter and score stages (``hami.scheduling.decide``) read it on their hot loop, inlining ``Verdicts.entry``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from hami.protocol.inventory import DeviceInfo
from hami.scheduling.filter import NodeFit, NodeRejection
from hami.scheduling.quota import QuotaBook
from hami.scheduling.request import PodRequest
from hami.scheduling.state import NodeState

__all__ = ["NO_ROOM", "NodeMemo", "Verdict", "Verdicts", "room_of"]

Verdict = NodeFit | NodeRejection


class NodeMemo:
    """What is known about one node at one generation: its score, and its verdict per request shape."""

    __slots__ = ("generation", "node", "room", "score", "verdicts")

    def __init__(self, node: NodeState) -> None:
        self.node = node
        self.generation = node.generation
        self.score: float | None = None
        self.verdicts: dict[int, Verdict] = {}
        self.room: tuple[str, int, int] = NO_ROOM
        """What a screen's shortcut reads, read once per entry (``room_of``): (vendor, free MiB, cores) or
        ``NO_ROOM``; like the verdicts, it holds while the node's generation does."""


NO_ROOM: Final[tuple[str, int, int]] = ("", -1, -1)


def room_of(node: NodeState, vendor: str, carves: Callable[[DeviceInfo], bool] | None) -> tuple[str, int, int]:
    """(vendor, ``max_mem``, ``first_cores``) of the node's table of ``vendor``: what ``Screen.shortcut`` compares;
    (vendor, -1, -1), which no shortcut passes, for a cordoned node, no such table, a table kubelet does not back
    (``NodeState.unallocatable``), or carved devices."""
    table = node.tables.get(vendor)
    if table is None or node.cordoned or vendor in node.unallocatable:
        return (vendor, -1, -1)
    cap = table.summary(carves)
    return (vendor, -1, -1) if cap.carved else (vendor, cap.max_mem, cap.first_cores)


class Verdicts:
    """The memo of ``decide``, owned by its caller: per node, its score and its verdict per request shape.

    Never authoritative: a node's entry is used only while it was made for the very same ``NodeState`` at the same
    generation (every charge and update bumps it; a node removed and added again is a new object). Bounded:
    ``per_node`` shapes per node (a node's full entry starts over: with more shapes than that in turn no verdict
    is found again either way, and clearing costs less than evicting one per fresh verdict), and when more than
    ``shapes`` request shapes were seen it starts over.
    ``screening=False`` judges every node with Fit (no capacity screening, ``hami.scheduling.screen``).
    """

    def __init__(self, per_node: int = 8, shapes: int = 4096, screening: bool = True) -> None:
        self.per_node = per_node
        self.shapes = shapes
        self.screening = screening
        self.nodes: dict[str, NodeMemo] = {}
        """Node name → its entry; read through ``entry`` (the stages inline that check on their hot loop)."""
        self._ids: dict[tuple[object, ...], int] = {}

    def clear(self) -> None:
        self.nodes.clear()
        self._ids.clear()

    def shape(self, req: PodRequest, quotas: QuotaBook) -> int:
        """A small int standing for the request's shape (0: not memoisable); hashed once per decision."""
        if not req.signature:
            return 0
        signature = req.signature
        if quotas.has_limits(req.namespace):  # the verdict then also depends on the namespace's usage
            signature = (*signature, req.namespace, quotas.generation)
        sid = self._ids.get(signature)
        if sid is None:
            if len(self._ids) >= self.shapes:
                self.clear()
            sid = self._ids[signature] = len(self._ids) + 1
        return sid

    def entry(self, node: NodeState) -> NodeMemo:
        """The node's entry, a fresh one if the node changed since."""
        entry = self.nodes.get(node.name)
        if entry is None or entry.node is not node or entry.generation != node.generation:
            entry = self.nodes[node.name] = NodeMemo(node)
        return entry

    def keep(self, entry: NodeMemo, shape: int, verdict: Verdict) -> None:
        if not shape or not self.per_node:
            return
        memo = entry.verdicts
        if len(memo) >= self.per_node and shape not in memo:
            memo.clear()
        memo[shape] = verdict
