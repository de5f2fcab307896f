"""``hami simulate --defrag``: a dry-run plan of pod moves that free whole cards.

The plan is made on the snapshot's ledger with the scheduler's own ``decide``/``reserve`` (through
``hami.simulate.whatif``); nothing in the cluster is touched. Greedy, cheapest card first: among the cards in use
(healthy, not cordoned), take the one held by the fewest pods (then the least memory), take its pods out of the
ledger, and place them again — largest first — anywhere else their nodeSelector allows, with that card and every
card that is already wholly free kept out of reach (a move onto an empty card frees nothing). If every pod finds a
place, the moves are kept and the card counts as freed; otherwise the ledger is put back as it was and the next
card is tried. It stops when no card can be freed.

Freeing a card held by *k* pods costs at least *k* moves, so taking the cheapest feasible card each round gives the
fewest moves per freed card whenever the cards' pods are independent (the common case, and the fixtures' optimum);
a pod spread over several cards frees them together.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hami.errors import InvalidInput
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState, PodRecord
from hami.simulate.devconfig import device_config_from_text
from hami.simulate.loading import load_snapshot, read_files
from hami.simulate.simulator import Simulator
from hami.simulate.whatif import place, put_back, take_out

__all__ = ["DefragPlan", "Move", "defrag_json", "plan_defrag", "render_defrag", "run_defrag"]


@dataclass(frozen=True, slots=True)
class Move:
    pod: str
    from_node: str
    from_devices: tuple[str, ...]
    to_node: str
    to_devices: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DefragPlan:
    moves: tuple[Move, ...]
    freed: tuple[tuple[str, str], ...]  # (node, card uuid) freed, in plan order
    free_before: int
    free_after: int
    cards: int


CardKey = tuple[str, str, str]  # node, vendor, uuid


def _cards(state: ClusterState) -> tuple[set[CardKey], dict[CardKey, int], int]:
    """Whole-free usable cards, used usable cards → memory used, and the number of cards."""
    free: set[CardKey] = set()
    used: dict[CardKey, int] = {}
    total = 0
    for name, node in state.nodes.items():
        for vendor, table in node.tables.items():
            for i, info in enumerate(table.infos):
                total += 1
                if not info.health or table.broken[i] is not None or info.id in node.cordoned:
                    continue
                if table.used[i] == 0 and table.usedmem[i] == 0:
                    free.add((name, vendor, info.id))
                else:
                    used[(name, vendor, info.id)] = table.usedmem[i]
    return free, used, total


def _holders(state: ClusterState, card: CardKey) -> list[PodRecord]:
    node, vendor, uuid = card
    return [
        state.pods[uid]
        for uid in sorted(state.pods_by_node.get(node, ()))
        if any(c.vendor == vendor and c.uuid == uuid for c in state.pods[uid].charges)
    ]


def _claimed(state: ClusterState, card: CardKey) -> bool:
    """Whether capacity held outside pods (a DRA claim, ``ClusterState.held``) is charged to the card."""
    node, vendor, uuid = card
    held = (state.held[uid] for uid in state.held_by_node.get(node, ()))
    return any(c.vendor == vendor and c.uuid == uuid for r in held for c in r.charges)


def _block(state: ClusterState, cards: Sequence[CardKey]) -> dict[str, frozenset[str]]:
    """Cordon ``cards`` on the scratch state; returns the nodes' previous cordon sets."""
    before: dict[str, frozenset[str]] = {}
    for node, _, uuid in cards:
        n = state.nodes[node]
        before.setdefault(node, n.cordoned)
        n.cordoned = n.cordoned | {uuid}
        n.generation += 1  # verdicts memoised for the node are stale now
    return before


def _unblock(state: ClusterState, before: dict[str, frozenset[str]]) -> None:
    for node, cordoned in before.items():
        n = state.nodes[node]
        n.cordoned = cordoned
        n.generation += 1


def _devices(record: PodRecord) -> tuple[str, ...]:
    return tuple(sorted({c.uuid for c in record.charges}))


def _try_free(sim: Simulator, card: CardKey, free: set[CardKey]) -> list[Move] | None:
    state = sim.state
    holders = _holders(state, card)
    if not holders or any(r.uid not in sim.existing for r in holders):
        return None  # a pod the plan cannot re-read (say, a record without its Pod) is never moved
    if _claimed(state, card):
        return None  # a DRA claim holds part of it: moving the pods away would not free it
    holders.sort(key=lambda r: (-sum(c.mem for c in r.charges), r.key))
    before = _block(state, [card, *sorted(free)])
    removed = take_out(state, [r.uid for r in holders])
    placed: list[str] = []
    moves: list[Move] = []
    try:
        for record in holders:
            pod = sim.existing[record.uid]
            req = prefilter(pod, sim.vendors, sim.defaults)
            names, _ = sim.candidates(pod)
            decision = place(state, req, names)
            if decision.node is None:
                break
            placed.append(record.uid)
            moves.append(
                Move(record.key, record.node, _devices(record), decision.node, _devices(state.pods[record.uid]))
            )
    finally:
        _unblock(state, before)
    if len(moves) == len(holders):
        return moves
    take_out(state, placed)
    put_back(state, removed)
    return None


def plan_defrag(sim: Simulator) -> DefragPlan:
    """Plan moves on ``sim``'s state (which is left with the moves applied: the plan's "after")."""
    state = sim.state
    free, _, total = _cards(state)
    free_before = len(free)
    moves: list[Move] = []
    freed: list[tuple[str, str]] = []
    progress = True
    while progress:
        progress = False
        free, used, _ = _cards(state)
        for card in sorted(used, key=lambda c: (len(_holders(state, c)), used[c], c)):
            found = _try_free(sim, card, free)
            if found is not None:
                moves += found
                freed.append((card[0], card[2]))
                progress = True
                break
    return _finish(state, moves, freed, free_before, total)


def _finish(
    state: ClusterState, moves: list[Move], freed: list[tuple[str, str]], before: int, total: int
) -> DefragPlan:
    after, _, _ = _cards(state)
    return DefragPlan(tuple(moves), tuple(freed), before, len(after), total)


def render_defrag(plan: DefragPlan) -> str:
    lines = [
        f"Defragmentation plan (dry run): {len(plan.moves)} move(s) free {len(plan.freed)} card(s); "
        f"whole free cards {plan.free_before} -> {plan.free_after} of {plan.cards}"
    ]
    for i, m in enumerate(plan.moves, start=1):
        source, target = ", ".join(m.from_devices), ", ".join(m.to_devices)
        lines.append(f"  {i}. move {m.pod}: {m.from_node} ({source}) -> {m.to_node} ({target})")
    for node, uuid in plan.freed:
        lines.append(f"  frees {node}/{uuid}")
    if not plan.moves:
        lines.append("  no card can be freed by moving its pods elsewhere")
    return "\n".join(lines)


def defrag_json(plan: DefragPlan) -> dict[str, Any]:
    return {
        "moves": [
            {
                "pod": m.pod,
                "from": {"node": m.from_node, "devices": list(m.from_devices)},
                "to": {"node": m.to_node, "devices": list(m.to_devices)},
            }
            for m in plan.moves
        ],
        "freedCards": [{"node": n, "uuid": u} for n, u in plan.freed],
        "wholeFreeCardsBefore": plan.free_before,
        "wholeFreeCardsAfter": plan.free_after,
        "cards": plan.cards,
    }


def run_defrag(
    snapshots: Sequence[Path], config: Path | None, output: str, out: Callable[[str], None], err: Callable[[str], None]
) -> int:
    """``hami simulate --snapshot … --defrag``: print the plan (table or JSON). Returns the exit status."""
    try:
        config_text = read_files([config])[0][1] if config is not None else None
        device_config, warnings = device_config_from_text(config_text, str(config))
        snapshot = load_snapshot(read_files(snapshots))
    except InvalidInput as error:
        err(f"error: {error}")
        return 1
    sim = Simulator(device_config, SchedulingDefaults())
    sim.add_snapshot(snapshot)
    for warning in [*warnings, *sim.warnings]:
        err(f"warning: {warning}")
    plan = plan_defrag(sim)
    out(json.dumps(defrag_json(plan), indent=2) if output == "json" else render_defrag(plan))
    return 0
