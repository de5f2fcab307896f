"""Victim selection for preemption, pure: which pods of lower priority must leave a node so a pending pod fits there.

Whether a pod fits is always the vendors' own Fit (``filter_node``) asked on a what-if copy of the node
(``ClusterState.what_if``) — memory, cores, slots, exclusive use, partitions, topology, NUMA, the namespace quota:
whatever the vendors judge. Nothing here fits devices itself, and nothing is evicted: the outcome is data.

Per node (kube-scheduler's ``SelectVictimsOnNode``, with the vendors' Fit in place of its filters):

1. pods being preempted count as leaving: they are removed first and are never victims. A pod is being
   preempted when it terminates with the ``DisruptionTarget`` condition kube-scheduler and hami write on their
   victims (``hami.protocol.disruption``; ``PodRecord.preempted``), or when hami evicted it (``evicted``). Any
   other terminating pod stays, as kube-scheduler's dry run keeps it: its capacity is used until it is gone, and a
   pod of lower priority is a victim like any other (deleted by its owner with a day-long grace period, it is not
   a free win, and no node ranks first because of it);
2. every pod of strictly lower priority is removed; if the pod still does not fit, the node has no candidate;
3. the removed pods are put back one at a time, the most important first (those whose eviction would break a
   PodDisruptionBudget before the others, then by priority, highest first, then the smallest share of the
   node's devices, then the earliest start); a pod that can come back without the preemptor losing its fit is
   reprieved, the others are the victims;
4. finally each victim is tried back once more against the final set, until none can come back: the set is
   minimal (returning any one victim makes the pod not fit), whatever the vendors' Fit looks like.

Candidate nodes are ranked as kube-scheduler ranks them: fewest budget violations, then the lowest highest-victim
priority, the smallest sum of priorities, the fewest victims, the latest earliest start among the highest-priority
victims; then by node name. A node where the pod fits once the pods being preempted there have left (no victim)
comes first.

Deliberate difference from kube-scheduler: among pods of equal priority the smaller ones are reprieved first, so
one big pod is preempted rather than several small ones.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from hami.scheduling.filter import NodeFit, filter_node
from hami.scheduling.request import PodRequest
from hami.scheduling.state import ClusterState, PodRecord

__all__ = [
    "MIN_CANDIDATE_NODES_ABSOLUTE",
    "MIN_CANDIDATE_NODES_PERCENTAGE",
    "NOT_EVEN_ALL_LOWER",
    "Budget",
    "Candidate",
    "Preemption",
    "candidate_limit",
    "fits_without",
    "leaving_of",
    "preempt",
    "victims_on",
]

NOT_EVEN_ALL_LOWER = "the pod does not fit even with every pod of lower priority gone"
"""Why a node has no candidate when removing every pod of lower priority is not enough (or there is none)."""

MIN_CANDIDATE_NODES_PERCENTAGE = 10
MIN_CANDIDATE_NODES_ABSOLUTE = 100
"""How many candidates are enough (kube-scheduler's ``DefaultPreemptionArgs`` defaults): the search stops once it
has found the larger of 10 % of the nodes and 100 nodes with victims, so a large cluster does not pay a victim
search on every node for each pod of priority that fits nowhere."""

_OFFSET = 2**31
"""Added to every priority before summing (kube-scheduler's ``MaxInt32 + 1``), so negative priorities sum sanely."""


@dataclass(frozen=True, slots=True)
class Budget:
    """A PodDisruptionBudget as preemption needs it: the UIDs of the pods it selects and how many of them may
    still be disrupted (``status.disruptionsAllowed``). The shell resolves the selector; the core reads no labels."""

    name: str
    pods: frozenset[str]
    allowed: int


@dataclass(frozen=True, slots=True)
class Candidate:
    """One node where the pod fits once ``victims`` are gone (the pods being preempted on the node left too),
    with the numbers it is ranked by."""

    node: str
    victims: tuple[PodRecord, ...]
    violations: int
    """How many victims' eviction breaks a PodDisruptionBudget."""
    highest: int
    """The highest victim priority (0 without victims)."""
    priorities: int
    """The sum of the victims' priorities, each offset by 2³¹."""
    earliest: float
    """The earliest start (Unix seconds) among the highest-priority victims; ``inf`` when none has started."""

    def rank(self) -> tuple[int, int, int, int, int, float, str]:
        """The sort key, best first (kube-scheduler's ``pickOneNodeForPreemption``)."""
        if not self.victims:
            return (0, 0, 0, 0, 0, 0.0, self.node)
        return (1, self.violations, self.highest, self.priorities, len(self.victims), -self.earliest, self.node)


@dataclass(frozen=True, slots=True)
class Preemption:
    """The outcome for one pending pod: the chosen candidate (None when preemption cannot help, ``reason`` says
    why), every candidate ranked best first, and why each other node has none."""

    pod: str
    chosen: Candidate | None
    candidates: tuple[Candidate, ...] = ()
    refused: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""


def candidate_limit(nodes: int) -> int:
    """How many candidates a bounded search stops at, among ``nodes`` nodes (kube-scheduler's
    ``calculateNumCandidates``: the larger of the percentage and the absolute minimum, never above ``nodes``)."""
    wanted = max(nodes * MIN_CANDIDATE_NODES_PERCENTAGE // 100, MIN_CANDIDATE_NODES_ABSOLUTE)
    return min(wanted, nodes)


def fits_without(state: ClusterState, req: PodRequest, node: str, leaving: Collection[str]) -> NodeFit | None:
    """The vendors' fit of ``req`` on ``node`` once the pods ``leaving`` (UIDs) are gone, or None."""
    copy = state.what_if(node, leaving)
    verdict = filter_node(copy, copy.nodes[node], req)
    return verdict if isinstance(verdict, NodeFit) else None


def preempt(
    state: ClusterState,
    req: PodRequest,
    nodes: Iterable[str],
    budgets: Sequence[Budget] = (),
    keep: Collection[str] = (),
    bounded: bool = False,
    evicted: Collection[str] = (),
) -> Preemption:
    """Victims for ``req`` on each of ``nodes`` and the best candidate among them (see the module docstring).
    The pods ``keep`` (UIDs: reserved but not bound yet, already evicted) stay where they are: never victims;
    the pods ``evicted`` (UIDs hami evicted) count as leaving.
    ``bounded``: stop once ``candidate_limit`` candidates are found, searching the nodes in name order from an
    offset fixed by the pod's UID (kube-scheduler starts at a random one), so different pods search different
    nodes first; the nodes not searched are in neither ``candidates`` nor ``refused``."""
    if not req.preempts:
        return Preemption(req.key, None, reason="preemptionPolicy is Never: the pod waits and preempts no pod")
    if not req.wants_devices:
        return Preemption(req.key, None, reason="the pod requests no managed device")
    candidates: list[Candidate] = []
    refused: dict[str, str] = {}
    order = sorted(set(nodes))
    limit = len(order)
    if bounded and order:
        limit = candidate_limit(len(order))
        start = zlib.crc32(req.uid.encode()) % len(order)
        order = order[start:] + order[:start]
    for name in order:
        found = victims_on(state, req, name, budgets, keep=keep, evicted=evicted)
        if isinstance(found, Candidate):
            candidates.append(found)
            if len(candidates) >= limit:
                break
        else:
            refused[name] = found
    candidates.sort(key=Candidate.rank)
    if not candidates:
        return Preemption(req.key, None, (), refused, f"no node of {len(refused)} has victims that make the pod fit")
    return Preemption(req.key, candidates[0], tuple(candidates), refused)


def victims_on(
    state: ClusterState,
    req: PodRequest,
    node: str,
    budgets: Sequence[Budget] = (),
    gone: Collection[str] = (),
    keep: Collection[str] = (),
    evicted: Collection[str] = (),
) -> Candidate | str:
    """The minimal set of lower-priority pods of ``node`` whose removal makes ``req`` fit, or why there is none.
    ``gone`` (UIDs) leave anyway, as pods being preempted do: the victims kube-scheduler's own dry run already
    chose when it asks the extender's preempt verb; they are never among the victims returned. ``keep`` (UIDs:
    reserved but not bound yet, already evicted) stay where they are: never victims either. ``evicted`` (UIDs hami
    evicted) are being preempted, whatever their records show yet."""
    if node not in state.nodes:
        return "node unknown to hami"
    if not req.preempts:
        return "preemptionPolicy is Never"
    if not isinstance(filter_node(state, state.nodes[node], req, empty=True), NodeFit):
        return "the pod does not fit even on the empty node"
    on_node = sorted((state.pods[uid] for uid in state.pods_by_node.get(node, ())), key=lambda r: r.uid)
    leaving = leaving_of(on_node, evicted) | frozenset(gone)
    lower = [r for r in on_node if r.uid not in leaving and r.uid not in keep and r.priority < req.priority]
    removed = {r.uid for r in lower}
    if fits_without(state, req, node, leaving | removed) is None:
        return NOT_EVEN_ALL_LOWER
    order = _reprieve_order(state, node, lower, budgets)
    for record in order:
        removed.discard(record.uid)
        if fits_without(state, req, node, leaving | removed) is None:
            removed.add(record.uid)
    removed = _minimal(state, req, node, leaving, removed, order)
    victims = tuple(r for r in order if r.uid in removed)
    return _candidate(node, victims, budgets)


def leaving_of(records: Iterable[PodRecord], evicted: Collection[str] = ()) -> frozenset[str]:
    """The UIDs of ``records`` being preempted: terminating with a scheduler's preemption condition, or evicted
    by hami (``evicted``). Other terminating pods are not leaving (module docstring)."""
    return frozenset(r.uid for r in records if r.preempted or r.uid in evicted)


def _reprieve_order(
    state: ClusterState, node: str, lower: Sequence[PodRecord], budgets: Sequence[Budget]
) -> list[PodRecord]:
    """Who is tried back first: pods whose eviction breaks a budget, then the others; in each group by priority
    (highest first), then the smallest share of the node's devices, then the earliest start."""
    shares = _shares(state, node, lower)
    important = sorted(lower, key=lambda r: (-r.priority, shares[r.uid], _started(r), r.uid))
    violating = _violating(important, budgets)
    return [r for r in important if r.uid in violating] + [r for r in important if r.uid not in violating]


def _minimal(
    state: ClusterState,
    req: PodRequest,
    node: str,
    leaving: frozenset[str],
    removed: set[str],
    order: Sequence[PodRecord],
) -> set[str]:
    """Try each victim back against the final set until none can come back (minimality for any Fit)."""
    changed = True
    while changed:
        changed = False
        for record in order:
            if record.uid in removed and fits_without(state, req, node, leaving | (removed - {record.uid})):
                removed = removed - {record.uid}
                changed = True
    return removed


def _candidate(node: str, victims: tuple[PodRecord, ...], budgets: Sequence[Budget]) -> Candidate:
    if not victims:
        return Candidate(node, (), 0, 0, 0, math.inf)
    highest = max(r.priority for r in victims)
    earliest = min(_started(r) for r in victims if r.priority == highest)
    return Candidate(
        node,
        victims,
        len(_violating(victims, budgets)),
        highest,
        sum(r.priority + _OFFSET for r in victims),
        earliest,
    )


def _violating(records: Iterable[PodRecord], budgets: Sequence[Budget]) -> set[str]:
    """The UIDs whose eviction, in this order, takes a budget below zero (kube-scheduler's
    ``filterPodsWithPDBViolation``; a pod counts once however many budgets it breaks)."""
    allowed = [b.allowed for b in budgets]
    out: set[str] = set()
    for record in records:
        for i, budget in enumerate(budgets):
            if record.uid in budget.pods:
                allowed[i] -= 1
                if allowed[i] < 0:
                    out.add(record.uid)
    return out


def _shares(state: ClusterState, node: str, records: Iterable[PodRecord]) -> dict[str, float]:
    """Each pod's share of the devices it holds on the node: Σ over its charges of slots/count + MiB/devmem +
    cores/devcore of the device charged (vendor-neutral: the devices' own capacities)."""
    tables = state.nodes[node].tables
    out: dict[str, float] = {}
    for record in records:
        share = 0.0
        for ch in record.charges:
            table = tables.get(ch.vendor)
            i = table.index_of.get(ch.uuid) if table is not None else None
            if table is None or i is None:
                continue
            info = table.infos[i]
            share += _part(ch.slots, info.count) + _part(ch.mem, info.devmem) + _part(ch.cores, info.devcore)
        out[record.uid] = share
    return out


def _part(used: int, capacity: int) -> float:
    return used / capacity if capacity > 0 else 0.0


def _started(record: PodRecord) -> float:
    """``status.startTime`` in Unix seconds; a pod not started yet (or with an unreadable time) counts as started
    now, that is later than any other (kube-scheduler: ``GetPodStartTime``)."""
    if not record.started:
        return math.inf
    try:
        return datetime.fromisoformat(record.started.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return math.inf
