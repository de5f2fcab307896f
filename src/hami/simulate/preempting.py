"""``hami explain``'s preemption part: for a pending pod that fits nowhere, which pods hami would preempt on the
best nodes and why, from the scheduler's own preemption core (``hami.scheduling.preemption``) on the state explain
built — so what it shows is what the preempt verb answers kube-scheduler, and what hami evicts itself.

Per candidate node (best first, as kube-scheduler ranks them): each victim with its priority and what it frees
per card; each other pod holding the node's devices with why it stays (equal or higher priority, being preempted
and so leaving anyway, or not needed: the pod fits with it staying; a pod terminating for another reason is
weighed as any other, as kube-scheduler weighs it). Per other node, why preemption cannot help there.
PodDisruptionBudgets are not read by explain: the ranking shown is the one without them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from hami.protocol.objects import Pod
from hami.scheduling.preemption import NOT_EVEN_ALL_LOWER, Candidate, preempt
from hami.scheduling.request import PodRequest
from hami.scheduling.state import ClusterState, PodRecord
from hami.scheduling.usage import Charge
from hami.simulate.report import core_unit, cores_text
from hami.simulate.wording import counted

__all__ = [
    "SHOWN",
    "Freed",
    "NodePreemption",
    "PodPreemption",
    "PreemptionView",
    "explain_preemption",
    "preemption_json",
    "render_preemption",
]

SHOWN: Final = 3
"""Candidate nodes shown, best first; the others are counted."""


@dataclass(frozen=True, slots=True)
class Freed:
    """What one pod gives back on one card."""

    uuid: str
    mem: int
    cores: int
    slots: int
    cores_shown: str = ""
    """The cores for a person (``30% cores``, ``152/304 cores``, ``unlimited cores``)."""


@dataclass(frozen=True, slots=True)
class PodPreemption:
    """A pod of a candidate node: a victim (``why`` empty) or one that stays, and why."""

    pod: str
    priority: int
    freed: tuple[Freed, ...]
    why: str = ""


@dataclass(frozen=True, slots=True)
class NodePreemption:
    node: str
    victims: tuple[PodPreemption, ...]
    kept: tuple[PodPreemption, ...]


@dataclass(frozen=True, slots=True)
class PreemptionView:
    """The pending pod's priority and policy, a one-line verdict, the best candidates and why the other nodes
    have none."""

    priority: int
    policy: str
    message: str
    candidates: tuple[NodePreemption, ...] = ()
    more: int = 0
    refused: Mapping[str, str] = field(default_factory=dict)


def explain_preemption(state: ClusterState, pod: Pod, req: PodRequest, nodes: Sequence[str]) -> PreemptionView:
    """What preempting would do for ``req`` (which fits on none of ``nodes``); ``state`` is left as it was."""
    policy = pod.spec.preemption_policy or "PreemptLowerPriority"
    outcome = preempt(state, req, nodes)
    refused = {node: _refusal(state, req, node, why) for node, why in outcome.refused.items()}
    if outcome.chosen is None:
        return PreemptionView(req.priority, policy, f"no pod would be preempted: {outcome.reason}", (), 0, refused)
    shown = tuple(_node(state, req, c) for c in outcome.candidates[:SHOWN])
    best = shown[0]
    if best.victims:
        names = ", ".join(v.pod for v in best.victims)
        message = f"would preempt {counted(len(best.victims), 'pod')} on {best.node}: {names}"
    else:
        message = f"fits on {best.node} once the pods being preempted there have left: nothing to preempt"
    return PreemptionView(req.priority, policy, message, shown, len(outcome.candidates) - len(shown), refused)


def _refusal(state: ClusterState, req: PodRequest, node: str, why: str) -> str:
    """The core's reason, made concrete where no pod of the node has a lower priority than the pod's."""
    records = [state.pods[u] for u in state.pods_by_node.get(node, ())]
    if why == NOT_EVEN_ALL_LOWER and not any(r.priority < req.priority and not r.preempted for r in records):
        return f"every pod there has equal or higher priority (the pod's is {req.priority})"
    return why


def _node(state: ClusterState, req: PodRequest, candidate: Candidate) -> NodePreemption:
    chosen = {r.uid for r in candidate.victims}
    records = sorted((state.pods[u] for u in state.pods_by_node.get(candidate.node, ())), key=_order)
    victims = tuple(_pod(state, r) for r in candidate.victims)
    kept = tuple(_pod(state, r, _why_kept(r, req)) for r in records if r.uid not in chosen)
    return NodePreemption(candidate.node, victims, kept)


def _order(record: PodRecord) -> tuple[int, str]:
    return (record.priority, record.key)


def _pod(state: ClusterState, record: PodRecord, why: str = "") -> PodPreemption:
    freed = tuple(Freed(c.uuid, c.mem, c.cores, c.slots, _cores(state, record.node, c)) for c in record.charges)
    return PodPreemption(record.key, record.priority, freed, why)


def _cores(state: ClusterState, node: str, charge: Charge) -> str:
    unit = core_unit(state, node, charge.uuid, charge.vendor)
    return cores_text(charge.cores, "% cores" if unit == "%" else unit)


def _why_kept(record: PodRecord, req: PodRequest) -> str:
    if record.preempted:
        return "being preempted: leaves anyway"
    if record.priority > req.priority:
        return "higher priority"
    if record.priority == req.priority:
        return "equal priority"
    return "not needed: the pod fits with it staying"


# --- output ---------------------------------------------------------------------------------------------------


def render_preemption(view: PreemptionView) -> list[str]:
    """The lines ``hami explain`` prints under "Preemption"."""
    lines = ["", f"Preemption (priority {view.priority}, {view.policy}): {view.message}"]
    for rank, node in enumerate(view.candidates, 1):
        lines.append(f"  {rank}. {node.node}")
        lines += [f"     preempt {_pod_text(v, 'frees')}" for v in node.victims]
        lines += [f"     keep    {_pod_text(k, 'holds')}: {k.why}" for k in node.kept]
    if view.more:
        lines.append(f"  ... and {view.more} more candidate {'node' if view.more == 1 else 'nodes'}")
    lines += [f"  {node}: none, {why}" for node, why in sorted(view.refused.items())]
    return lines


def _pod_text(p: PodPreemption, verb: str) -> str:
    freed = "; ".join(
        f"{f.uuid} {f.mem} MiB, {f.cores_shown}, {f.slots} slot{'' if f.slots == 1 else 's'}" for f in p.freed
    )
    return f"{p.pod} (priority {p.priority}, {verb} {freed or 'no device hami manages'})"


def preemption_json(view: PreemptionView) -> dict[str, Any]:
    def pod(p: PodPreemption) -> dict[str, Any]:
        freed = [{"uuid": f.uuid, "memoryMiB": f.mem, "cores": f.cores, "slots": f.slots} for f in p.freed]
        return {"pod": p.pod, "priority": p.priority, "frees": freed, **({"why": p.why} if p.why else {})}

    return {
        "priority": view.priority,
        "preemptionPolicy": view.policy,
        "message": view.message,
        "candidates": [
            {"node": n.node, "victims": [pod(v) for v in n.victims], "kept": [pod(k) for k in n.kept]}
            for n in view.candidates
        ],
        "moreCandidates": view.more,
        "refused": dict(sorted(view.refused.items())),
    }
