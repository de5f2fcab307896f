"""``hami simulate --defrag``: a dry-run plan of pod moves that free whole cards.

The plan is made on the snapshot's ledger with the scheduler's own ``decide``/``reserve`` (through
``hami.simulate.whatif``) under the active policies; nothing in the cluster is touched. Greedy, cheapest card
first: among the cards in use (healthy, not blocked, neither the card nor its node cordoned: ``card_usable``, the
rule ``hami top``'s stranded capacity follows), take the one held by the fewest pods (then the least
memory) and move its pods — largest first, one at a time, as deleting them one by one would: each pod is taken out
of the ledger and placed again where the scheduler itself would put its replacement (nothing is blocked or
steered). A move counts only if that choice leaves the card (and lands on a card already in use: a move onto an
empty card frees nothing); so every planned move is one that ``kubectl delete pod`` reproduces, given that nothing
else is scheduled meanwhile (under ``spread`` a pod deleted from a card that is then emptiest comes back to it, and
no move is planned). If every pod of the card moves, the moves are kept and the card counts as freed; otherwise
the ledger is put back as it was and the next card is tried. It stops when no card can be freed.

Only a pod that its controller recreates elsewhere is ever moved: one owned by a ReplicaSet (a Deployment's),
ReplicationController, StatefulSet or Job (``RECREATED``). A pod with no controller is lost when deleted; a
DaemonSet's pod comes back on the same node; another owner's is not known to come back: such a pod stays, the plan
says why (``DefragPlan.kept``), and a card it holds is never counted as one to free. A card on a cordoned node is
neither a source (freeing it gains nothing the scheduler could use) nor a destination (the scheduler places nothing
there).

Freeing a card held by *k* pods costs at least *k* moves, so taking the cheapest feasible card each round gives the
fewest moves per freed card whenever the cards' pods are independent (the common case, and the fixtures' optimum);
a pod spread over several cards frees them together.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from hami.errors import InvalidInput
from hami.scheduling.decide import Decision
from hami.scheduling.fragmentation import card_usable
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState, PodRecord
from hami.simulate.devconfig import Families, device_config_from_text
from hami.simulate.html import render_defrag_html
from hami.simulate.loading import load_snapshot, read_files
from hami.simulate.report import utilization_document
from hami.simulate.simulator import Simulator
from hami.simulate.whatif import place, put_back, take_out
from hami.simulate.wording import counted

__all__ = [
    "CARRY_OUT",
    "RECREATED",
    "DefragOptions",
    "DefragPlan",
    "Move",
    "defrag_json",
    "delete_command",
    "plan_defrag",
    "render_defrag",
    "run_defrag",
    "stay_reason",
]


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
    kept: tuple[tuple[str, str], ...] = ()
    """(pod, why it is not moved) for each pod holding a usable card that no controller would recreate elsewhere."""


RECREATED: Final = frozenset({"ReplicaSet", "ReplicationController", "StatefulSet", "Job", "Deployment"})
"""The controllers that make a new pod, which the scheduler places anew, when one of theirs is deleted."""


def stay_reason(controller: tuple[str, str] | None) -> str | None:
    """Why a pod with this controller (kind, name) must not be deleted to move it; None when it may."""
    if controller is None:
        return "no controller: deleting it would lose it (give it a Deployment, or move it by hand)"
    kind, name = controller
    if kind in RECREATED:
        return None
    if kind == "DaemonSet":
        return f"DaemonSet {name}'s pod: its controller recreates it on the same node"
    return f"owned by {kind} {name}, which is not known to recreate it elsewhere"


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
                if not card_usable(node, table, i):
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


def _devices(record: PodRecord) -> tuple[str, ...]:
    return tuple(sorted({c.uuid for c in record.charges}))


def _lands(decision: Decision) -> set[CardKey]:
    node = decision.node or ""
    return {(node, v, d.uuid) for v, containers in decision.devices.items() for c in containers for d in c}


def _try_free(sim: Simulator, card: CardKey, free: set[CardKey]) -> list[Move] | None:
    state = sim.state
    holders = _holders(state, card)
    if not holders or any(r.uid not in sim.existing for r in holders):
        return None  # a pod the plan cannot re-read (say, a record without its Pod) is never moved
    if any(stay_reason(sim.controllers.get(r.uid)) is not None for r in holders):
        return None  # a pod no controller recreates elsewhere holds it: the card stays in use
    if _claimed(state, card):
        return None  # a DRA claim holds part of it: moving the pods away would not free it
    holders.sort(key=lambda r: (-sum(c.mem for c in r.charges), r.key))
    removed: list[PodRecord] = []
    placed: list[str] = []
    moves: list[Move] = []
    for record in holders:
        removed += take_out(state, [record.uid])
        pod = sim.existing[record.uid]
        req = prefilter(pod, sim.vendors, sim.defaults)
        names, _ = sim.candidates(pod)
        decision = place(state, req, names)  # where the scheduler puts the replacement, nothing steered
        if decision.node is not None:
            placed.append(record.uid)
        lands = _lands(decision)
        if decision.node is None or card in lands or lands & free:
            take_out(state, placed)
            put_back(state, removed)
            return None
        moves.append(Move(record.key, record.node, _devices(record), decision.node, _devices(state.pods[record.uid])))
    return moves


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
    after, _, _ = _cards(state)
    return DefragPlan(tuple(moves), tuple(freed), free_before, len(after), total, _kept(sim))


def _kept(sim: Simulator) -> tuple[tuple[str, str], ...]:
    """Each pod holding a usable card that stays because no controller would recreate it elsewhere, and why."""
    _, used, _ = _cards(sim.state)
    kept: dict[str, str] = {}
    for card in sorted(used):
        for record in _holders(sim.state, card):
            reason = stay_reason(sim.controllers.get(record.uid))
            if reason is not None:
                kept[record.key] = reason
    return tuple(sorted(kept.items()))


def delete_command(pod: str) -> str:
    """The kubectl command that carries one move out: the pod's controller recreates it and the scheduler places
    the new pod."""
    namespace, _, name = pod.partition("/")
    return f"kubectl delete pod -n {namespace} {name}"


CARRY_OUT: Final = (
    "To carry the plan out, run the commands in order, one at a time, each once the previous pod's replacement is "
    "running. Each move is where the "
    "scheduler itself puts the replacement under the policies given, as long as nothing else is scheduled meanwhile."
)


def render_defrag(plan: DefragPlan, policies: str = "") -> str:
    under = f", {policies}" if policies else ""
    lines = [
        f"Defragmentation plan (dry run{under}): {_moves_free(plan)}; "
        f"whole free cards {plan.free_before} -> {plan.free_after} of {plan.cards}"
    ]
    for i, m in enumerate(plan.moves, start=1):
        source, target = ", ".join(m.from_devices), ", ".join(m.to_devices)
        lines.append(f"  {i}. move {m.pod}: {m.from_node} ({source}) -> {m.to_node} ({target})")
        lines.append(f"     {delete_command(m.pod)}")
    for node, uuid in plan.freed:
        lines.append(f"  frees {node}/{uuid}")
    if not plan.moves:
        lines.append(
            "  no card can be freed by deleting its pods: the scheduler would put them back on it, on an empty "
            "card, or nowhere, or a pod there has no controller to recreate it"
        )
    if plan.kept:
        lines += ["", f"{counted(len(plan.kept), 'pod')} not moved:"]
        lines += [f"  {pod}: {why}" for pod, why in plan.kept]
    if plan.moves:
        lines += ["", CARRY_OUT]
    return "\n".join(lines)


def _moves_free(plan: DefragPlan) -> str:
    """``1 move frees 1 card``, ``2 moves free 2 cards``."""
    verb = "frees" if len(plan.moves) == 1 else "free"
    return f"{counted(len(plan.moves), 'move')} {verb} {counted(len(plan.freed), 'card')}"


def defrag_json(plan: DefragPlan) -> dict[str, Any]:
    return {
        "moves": [
            {
                "pod": m.pod,
                "from": {"node": m.from_node, "devices": list(m.from_devices)},
                "to": {"node": m.to_node, "devices": list(m.to_devices)},
                "command": delete_command(m.pod),
            }
            for m in plan.moves
        ],
        "freedCards": [{"node": n, "uuid": u} for n, u in plan.freed],
        "wholeFreeCardsBefore": plan.free_before,
        "wholeFreeCardsAfter": plan.free_after,
        "cards": plan.cards,
        "kept": [{"pod": pod, "reason": why} for pod, why in plan.kept],
    }


@dataclass(frozen=True, slots=True)
class DefragOptions:
    """``hami simulate --defrag``'s arguments: the snapshot, the device config, the output, the policies and the
    device families, as for placing pods."""

    snapshots: Sequence[Path]
    config: Path | None = None
    output: str = "table"
    node_policy: str = "binpack"
    gpu_policy: str = "spread"
    families: Families = field(default_factory=Families)
    report: Path | None = None
    """Also write the plan as an HTML page: memory heat maps before and after, the moves and their commands."""


def run_defrag(opts: DefragOptions, out: Callable[[str], None], err: Callable[[str], None]) -> int:
    """``hami simulate --snapshot … --defrag``: print the plan (table or JSON). Returns the exit status."""
    try:
        config_text = read_files([opts.config])[0][1] if opts.config is not None else None
        device_config, warnings = device_config_from_text(config_text, str(opts.config))
        snapshot = load_snapshot(read_files(opts.snapshots))
        families = opts.families.enabled()
    except InvalidInput as error:
        err(f"error: {error}")
        return 1
    sim = Simulator(device_config, SchedulingDefaults(opts.node_policy, opts.gpu_policy), families=families)
    sim.add_snapshot(snapshot)
    for warning in [*warnings, *sim.warnings]:
        err(f"warning: {warning}")
    before = utilization_document(sim.state)
    plan = plan_defrag(sim)
    policies = f"node policy {opts.node_policy}, GPU policy {opts.gpu_policy}"
    text = render_defrag(plan, policies)
    if opts.report is not None:
        page = render_defrag_html(
            "hami simulate --defrag",
            text.splitlines()[0],
            before,
            utilization_document(sim.state),
            _move_rows(plan),
            CARRY_OUT,
        )
        try:
            opts.report.write_text(page, encoding="utf-8")
        except OSError as error:
            err(f"error: {opts.report}: cannot write the report: {error.strerror or error}")
            return 1
        err(f"report written to {opts.report}")
    if opts.output == "yaml":
        text = yaml.safe_dump(defrag_json(plan), sort_keys=False, allow_unicode=True).rstrip("\n")
    elif opts.output == "json":
        text = json.dumps(defrag_json(plan), indent=2)
    out(text)
    return 0


def _move_rows(plan: DefragPlan) -> list[list[str]]:
    return [
        [
            str(i),
            m.pod,
            f"{m.from_node} ({', '.join(m.from_devices)})",
            f"{m.to_node} ({', '.join(m.to_devices)})",
            delete_command(m.pod),
        ]
        for i, m in enumerate(plan.moves, start=1)
    ]
