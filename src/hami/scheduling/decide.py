"""``decide`` = filter → score → select, pure; ``reserve`` and ``unreserve`` apply a decision to the ledger.

``decide`` reads the state and never changes it; the only thing it writes is the ``Verdicts`` memo its caller owns
and passes in (never authoritative, see ``hami.scheduling.memo``). ``reserve`` applies a decision to the ledger so
the next pod sees it, ``unreserve`` takes it back; both are O(pod).

Deliberate differences from HAMi (spec §11): ties between nodes are broken by node name (HAMi: goroutine
completion order); every rejected node keeps its reasons, also when another node fits; a node that could not
run the pod even if empty is flagged ``unresolvable`` so the extender can spare kube-scheduler a pointless
preemption; annotations are written only for the vendors the pod asks for (HAMi writes empty slots for every
vendor on the node, §11 item 15); a fitting node in ``busy`` (a bind in progress there holds or is about to take
its node lock) ranks after every fitting node that is not, HAMi's order kept within each group (see ``rank``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from hami.devices.base import AnnotationContext, SliceAt
from hami.protocol import keys
from hami.protocol.allocation import PodDevices
from hami.protocol.events import filtering_succeed_text, no_available_node_text
from hami.protocol.inventory import DeviceInfo
from hami.scheduling.filter import NodeFit, NodeRejection, filter_node, unregistered
from hami.scheduling.memo import NodeMemo, Verdict, Verdicts, room_of
from hami.scheduling.request import PodRequest
from hami.scheduling.screen import NO_SHORTCUT, Screen, realize, screened_fit, screened_fits
from hami.scheduling.state import ClusterState, NodeState, PodRecord
from hami.scheduling.usage import effective_charges

__all__ = [
    "LISTED",
    "PASSED_OVER",
    "Decision",
    "decide",
    "filter_nodes",
    "judge",
    "rank",
    "reserve",
    "score",
    "select",
    "unreserve",
]

LISTED = 10
"""At most this many fitting nodes are listed with their scores in the ``FilteringSucceed`` message."""
PASSED_OVER = "a bind in progress there holds or is about to take the node lock"
"""Why the busy nodes named in the ``FilteringSucceed`` message (``…; passed over <nodes>: <this>``) were skipped."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one decision for one pod.

    ``node`` is None when nothing fits. ``devices`` has, per vendor, one entry per container (init first);
    ``slices``, per vendor, the slices chosen on partitioned devices. ``annotations`` are exactly what hami writes
    on the pod. ``rejected`` has every candidate that was not chosen *because it does not fit*; ``scores`` every
    candidate that fits (the chosen one included), best first (``rank``: the busy ones after the others).
    ``passed_over`` has the busy fitting nodes HAMi's order ranks before ``node``, best first: skipped because a
    bind in progress there holds or is about to take their node lock.
    """

    uid: str
    pod: str
    node: str | None
    devices: Mapping[str, PodDevices] = field(default_factory=dict)
    slices: Mapping[str, tuple[SliceAt, ...]] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    rejected: Mapping[str, NodeRejection] = field(default_factory=dict)
    scores: Mapping[str, float] = field(default_factory=dict)
    message: str = ""
    node_policy: str = ""
    passed_over: tuple[str, ...] = ()


def judge(state: ClusterState, node: NodeState, req: PodRequest) -> Verdict:
    """``filter`` for one node, plus the never-fits check for a rejection (``unresolvable``)."""
    verdict = filter_node(state, node, req)
    if isinstance(verdict, NodeRejection) and not verdict.unresolvable:
        never = filter_node(state, node, req, empty=True)
        if isinstance(never, NodeRejection):
            verdict = NodeRejection(
                verdict.node, verdict.counts, verdict.total, verdict.closest, True, verdict.detail, verdict.node_reason
            )
    return verdict


def filter_nodes(
    state: ClusterState, req: PodRequest, names: Sequence[str], memo: Verdicts | None = None
) -> tuple[list[NodeFit], dict[str, NodeRejection]]:
    """The filter stage: every candidate judged; the fitting ones and every rejection with its numbers."""
    memo = memo or Verdicts(per_node=0)
    screen = Screen.prepare(state, req) if memo.screening else None  # fitting nodes come back SCREENED
    if screen is None:
        return _judge_each(state, names, memo, memo.shape(req, state.quotas), partial(judge, state, req=req))
    fits, rejected = _judge_each(state, names, memo, memo.shape(req, state.quotas), screen.judge, screen.shortcut())
    if not screen.audit():  # the capacity index disagreed with Fit: judge with Fit only
        memo.clear()
        return filter_nodes(state, req, names, Verdicts(per_node=0, screening=False))
    return fits, rejected


def _judge_each(
    state: ClusterState,
    names: Sequence[str],
    memo: Verdicts,
    shape: int,
    fresh: Callable[[NodeState], Verdict],
    shortcut: tuple[str, Callable[[DeviceInfo], bool] | None, int, int] = NO_SHORTCUT,
) -> tuple[list[NodeFit], dict[str, NodeRejection]]:
    """``filter_nodes``' loop: each candidate's verdict from the memo, else the screen's ``shortcut``, else
    ``fresh``. The shortcut is inlined and compares the numbers kept with the node's memo entry (``room_of``: read
    from its summary once per node change), so a fresh screened fit touches nothing a memo hit does not: with
    many request shapes in turn a decision costs little more than with one (issue 19 item 4)."""
    fits: list[NodeFit] = []
    rejected: dict[str, NodeRejection] = {}
    nodes, entries = state.nodes, memo.nodes
    per_node = memo.per_node if shape else 0  # memo.keep, inlined below
    vendor, carves, memreq, cores = shortcut
    screened = screened_fits()
    for name in names:
        node = nodes.get(name)
        if node is None:
            rejected[name] = unregistered(name)
            continue
        entry = entries.get(name)  # memo.entry(node), inlined: this loop is the hot path
        if entry is None or entry.node is not node or entry.generation != node.generation:
            entry = entries[name] = NodeMemo(node)
        verdict = entry.verdicts.get(shape)
        if verdict is None:
            room = entry.room  # Screen.shortcut, inlined, on the numbers kept with the entry
            if room[0] != vendor:
                room = entry.room = room_of(node, vendor, carves)
            roomy = memreq <= room[1] and cores <= room[2]
            verdict = (screened.get(name) or screened_fit(name)) if roomy else fresh(node)
            if per_node:
                kept = entry.verdicts
                if len(kept) >= per_node:  # full: start over (cheaper than evicting one per verdict, as often)
                    kept.clear()
                kept[shape] = verdict
        if isinstance(verdict, NodeFit):
            fits.append(verdict)
        else:
            rejected[name] = verdict
    return fits, rejected


def score(state: ClusterState, fits: Iterable[NodeFit], memo: Verdicts | None = None) -> dict[str, float]:
    """The score stage: each fitting node's score before the pod (spec §5.2), plus the vendors' contributions for
    the devices chosen there (``NodeFit.score``; 0 for vendors scored on usage alone)."""
    nodes = state.nodes
    if memo is None:
        return {f.node: nodes[f.node].score() + f.score for f in fits}
    out: dict[str, float] = {}
    entries = memo.nodes
    for f in fits:
        name = f.node
        node, entry = nodes[name], entries.get(name)  # memo.entry(node), inlined
        if entry is None or entry.node is not node or entry.generation != node.generation:
            entry = entries[name] = NodeMemo(node)
        value = entry.score
        if value is None:
            value = entry.score = node.score()
        out[name] = value + f.score
    return out


def select(scores: Mapping[str, float], node_policy: str) -> list[str]:
    """The select stage: fitting nodes, best first: binpack → highest score, spread → lowest; ties by name."""
    ranked = sorted(scores)  # by name first: the sort by score below is stable, so ties stay in name order
    ranked.sort(key=scores.__getitem__, reverse=node_policy != "spread")
    return ranked


def rank(ranked: Sequence[str], busy: Collection[str]) -> tuple[list[str], tuple[str, ...]]:
    """HAMi's order (``select``) with the ``busy`` nodes moved after all the others, each group in HAMi's order; and
    the busy nodes passed over: those HAMi's order puts before the first node that is not busy (all of them when
    every fitting node is busy, then nothing is passed over).

    Deliberate difference from HAMi: a node whose node lock is held takes one pod per lock hand-over (the device
    plugin releases it after Allocate), so under ``binpack`` a burst sent to the one fullest node queues there
    and its binds wait, or fail once the wait runs out; a free node takes the pod now. A node where a bind is in
    progress counts too, before its lock shows: kube-scheduler filters the next pods while it binds. With
    ``busy`` empty (no lock held, no bind in progress) the order is HAMi's, unchanged."""
    if not busy:
        return list(ranked), ()
    free = [n for n in ranked if n not in busy]
    if not free:
        return list(ranked), ()
    held = [n for n in ranked if n in busy]
    first = ranked.index(free[0])
    return free + held, tuple(ranked[:first])


def decide(
    state: ClusterState,
    req: PodRequest,
    candidates: Iterable[str],
    now: int,
    memo: Verdicts | None = None,
    *,
    now_ns: int | None = None,
    busy: Collection[str] = (),
) -> Decision:
    """Choose one node and the devices for every container of ``req`` among ``candidates``.

    ``now`` (Unix seconds) is stamped into ``hami.io/vgpu-time``; ``now_ns`` is the same instant in Unix
    nanoseconds for the vendors' extra annotations (``AnnotationContext.now_ns``; default ``now × 10⁹``). A pod
    that asks for no device gets a decision with ``node=None`` and no rejections; callers pass such pods through
    untouched. ``busy`` names the nodes where a bind in progress holds or is about to take a node lock the pod's
    bind would take (the caller's view: the locks the node watch shows, and the binds it runs): they rank after
    every other fitting node (``rank``); which nodes fit does not depend on it.
    """
    names = sorted(set(candidates))
    if not req.wants_devices:
        return Decision(req.uid, req.key, None, message="pod requests no managed device")
    fits, rejected = filter_nodes(state, req, names, memo)
    if not fits:
        return Decision(req.uid, req.key, None, rejected=rejected, message=no_available_node_text(len(names)))
    scores = score(state, fits, memo)
    ranked, passed_over = rank(select(scores, req.node_policy), busy)
    best = realize(state, req, next(f for f in fits if f.node == ranked[0]))
    if best is None:  # a screen disagreed with Fit: judge every node as without screening
        return decide(state, req, names, now, Verdicts(per_node=0, screening=False), busy=busy)
    devices = best.pod_devices()
    slices = best.slices()
    stamp = _Stamp(now, now * 10**9 if now_ns is None else now_ns, req.names)
    return Decision(
        req.uid,
        req.key,
        best.node,
        devices,
        slices,
        _annotations(state, best.node, devices, slices, stamp),
        rejected,
        dict(zip(ranked, map(scores.__getitem__, ranked), strict=True)),
        _success_message(best.node, len(names), ranked, scores, passed_over),
        req.node_policy,
        passed_over,
    )


@dataclass(frozen=True, slots=True)
class _Stamp:
    """What the annotations of a decision need besides the devices: the time (seconds and nanoseconds) and the
    container names."""

    now: int
    now_ns: int
    containers: tuple[str, ...]


def _annotations(
    state: ClusterState,
    node: str,
    devices: Mapping[str, PodDevices],
    slices: Mapping[str, Sequence[SliceAt]],
    stamp: _Stamp,
) -> dict[str, str]:
    annotations = {keys.VGPU_NODE: node, keys.VGPU_TIME: str(stamp.now)}
    for vendor in sorted(devices):
        vk = state.vendors[vendor].keys
        value = state.vendors[vendor].encode(devices[vendor])
        if vk.to_allocate:
            annotations[vk.to_allocate] = value
        annotations[vk.allocated] = value
    for vendor in sorted(devices):
        per = devices[vendor]
        names = stamp.containers if len(stamp.containers) == len(per) else ("",) * len(per)
        ctx = AnnotationContext(node, per, tuple(slices.get(vendor, ())), names, stamp.now_ns)
        annotations.update(state.vendors[vendor].extra_annotations(ctx))
    return annotations


def _success_message(
    chosen: str, total: int, ranked: Sequence[str], scores: Mapping[str, float], passed_over: Sequence[str] = ()
) -> str:
    """HAMi lists every fitting node in its final sort order, the chosen one last. Deliberate differences: with
    more than ``LISTED`` fitting nodes only the best ``LISTED`` are listed (an event message is not a node list);
    the counts are always of every node; the busy nodes passed over (``rank``) are named after it, the best
    ``LISTED`` of them."""
    shown = [(n, scores[n]) for n in reversed(ranked[:LISTED])]
    text = filtering_succeed_text(chosen, total, shown, fitting=len(ranked))
    if not passed_over:
        return text
    named = ",".join(passed_over[:LISTED])
    if len(passed_over) > LISTED:
        named += f",… {len(passed_over) - LISTED} more"
    return f"{text}; passed over {named}: {PASSED_OVER}"


def reserve(state: ClusterState, req: PodRequest, decision: Decision) -> PodRecord | None:
    """Charge a decision to the ledger (idempotent). Returns the record, or None if nothing was chosen."""
    if decision.node is None:
        return None
    record = PodRecord(
        uid=req.uid,
        namespace=req.namespace,
        name=req.name,
        node=decision.node,
        devices=decision.devices,
        charges=effective_charges(decision.devices, req.kinds),
        slices=tuple(
            (vendor, s.uuid, s.slice.position)
            for vendor, per in sorted(decision.slices.items())
            for s in per
            if s.slice.position is not None
        ),
        priority=req.priority,
    )
    state.apply(record, add=True)
    return state.pods.get(req.uid)


def unreserve(state: ClusterState, uid: str) -> PodRecord | None:
    """Take a pod's usage back out of the ledger (no-op when absent). Returns what was removed."""
    return state.remove_pod(uid)
