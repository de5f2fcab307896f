"""``hami explain POD``: every node's verdict on one pod, with the numbers, and what would make it fit.

The verdicts are the scheduler's own: the pod is read by ``prefilter`` and judged by ``decide`` (through
``hami.simulate.whatif``) on the ``ClusterState`` the snapshot or the live listing built, among the same
candidates the simulator uses (nodeSelector and ``spec.unschedulable``; nodes left out that way are judged too
and marked as excluded). A pod that already holds devices is judged as if it were pending again: its own usage
is taken out of the ledger first, so it does not compete with itself.

Per card, the card's free slots, memory and cores are set beside what one device of the request needs there,
and the check that refuses it comes from the vendor's own ``fit`` run on that card alone (so the reason is the
scheduler's, not a re-implementation). A node-level verdict (too few cards, NUMA, topology, quota) is the one
``decide`` gave.

What would make it fit, for a pod no candidate can take:

* **evictions**: per rejected node that could run the pod if it were emptier, the smallest set of the node's
  pods whose leaving makes ``decide`` accept it (sets of up to ``MAX_EVICT`` pods, fewest pods first, then least
  memory freed; at most ``MAX_TRIES`` sets tried in all, nodes with the fewest pods first);
* **excluded nodes**: a node the pod's nodeSelector (or the node's cordon) leaves out that would take it;
* **annotations**: one of the pod's own annotations whose removal (or a plain ``binpack``/``spread`` GPU policy
  instead of the one it asks for) lets ``decide`` place it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from hami.devices.base import ContainerRequest, FitContext, Unfit, Vendor
from hami.devices.table import DeviceTable
from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol.drapod import is_dra_pod
from hami.protocol.objects import Pod
from hami.protocol.podpatch import PatchOp
from hami.scheduling.decide import Decision
from hami.scheduling.dra import HeldCard, held_by_card
from hami.scheduling.filter import NodeRejection
from hami.scheduling.request import PodRequest, prefilter
from hami.scheduling.state import ClusterState, NodeState, PodRecord
from hami.scheduling.usage import Kind
from hami.simulate.gangview import GangView, gang_json, render_gang
from hami.simulate.loading import Sourced
from hami.simulate.preempting import PreemptionView, explain_preemption, preemption_json, render_preemption
from hami.simulate.report import cores_text
from hami.simulate.simulator import DEFAULT_NAMESPACE, Outcome, Simulator
from hami.simulate.whatif import judge, put_back, take_out

__all__ = [
    "MAX_EVICT",
    "MAX_TRIES",
    "CardVerdict",
    "Eviction",
    "Explanation",
    "NodeVerdict",
    "explain",
    "explain_json",
    "explain_manifest",
    "render_explain",
]

MAX_EVICT: Final = 3
MAX_TRIES: Final = 20000
"""Eviction sets tried for one pod, over all nodes (nodes with fewer pods are searched first), so explaining a
pod on a large cluster stays a matter of seconds."""

_WRITTEN_BY_HAMI: Final = frozenset({keys.VGPU_NODE, keys.VGPU_TIME, keys.BIND_PHASE, keys.BIND_TIME})
"""Annotations hami writes for every pod; each vendor's allocation and extra annotations are added to them."""


@dataclass(frozen=True, slots=True)
class CardVerdict:
    """One card against one device of the request: what it needs there, what is free, and the verdict
    (``"fits"`` or the scheduler's reason code)."""

    vendor: str
    index: int
    uuid: str
    model: str
    need_mem: int
    need_cores: int
    free_slots: int
    """Slots left; -1 where slots do not count (a DRA-mode pod: a shared DRA device has none)."""
    free_mem: int
    free_cores: int
    verdict: str
    dra: HeldCard | None = None
    """What DRA claims hold of the card (already out of the free amounts); None when nothing."""


@dataclass(frozen=True, slots=True)
class Eviction:
    """Pods that would have to leave ``node`` for the pod to fit there, and the memory they free (MiB)."""

    node: str
    pods: tuple[str, ...]
    freed_mem: int


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    node: str
    fits: bool
    chosen: bool = False
    score: float | None = None
    summary: str = ""
    counts: Mapping[str, int] = field(default_factory=dict)
    unresolvable: bool = False
    excluded: str = ""  # why the node is not a candidate at all ("nodeSelector …", "unschedulable")
    cards: tuple[CardVerdict, ...] = ()
    eviction: Eviction | None = None


@dataclass(frozen=True, slots=True)
class Explanation:
    pod: str
    status: str
    """``placed`` (a pod of the cluster, judged as if pending again), ``would-place`` (a manifest: ``hami
    simulate`` would place it), ``pending``, ``no-devices``, ``invalid``, ``denied`` (by the admission webhook)."""
    message: str
    node: str | None = None  # where it is (placed) or where decide would put it now
    current_node: str | None = None
    needs: tuple[str, ...] = ()
    verdicts: tuple[NodeVerdict, ...] = ()
    suggestions: tuple[str, ...] = ()
    admission: tuple[PatchOp, ...] | None = None
    """The admission webhook's patch applied to a manifest before it was judged (None: a pod of the cluster,
    already admitted, or a manifest the webhook denied)."""
    warnings: tuple[str, ...] = ()
    """What the manifest likely gets wrong (as ``hami simulate`` warns: resource typos, a zero count)."""
    preemption: PreemptionView | None = None
    """For a pending pod that fits nowhere: the pods hami would preempt and why (``hami.simulate.preempting``)."""
    gang: GangView | None = None
    """For a member of a gang: its members' states and what the gang lacks (``hami.simulate.gangview``)."""


def describe_need(req: PodRequest) -> tuple[str, ...]:
    """What each container asks for, one line each (``needs`` of the explanation)."""
    out = []
    for pos, containers in enumerate(req.containers):
        for vendor, c in sorted(containers.items()):
            mem = (
                f"{c.memreq} MiB"
                if c.memreq
                else (f"{c.mem_percentage}% of memory" if c.mem_percentage <= 100 else "all memory")
            )
            cores = cores_text(c.coresreq, "% cores")
            name = req.names[pos] if pos < len(req.names) and req.names[pos] else f"#{pos}"
            kind = "" if req.kinds[pos] is Kind.APP else f"{req.kinds[pos].value} "
            out.append(f"{kind}container {name}: {c.nums} x {vendor} device, {mem}, {cores} each")
    return tuple(out)


def _first_requests(req: PodRequest) -> dict[str, ContainerRequest]:
    """Per vendor, the largest single-device need among the containers (what one card has to hold)."""
    out: dict[str, ContainerRequest] = {}
    for containers in req.containers:
        for vendor, c in containers.items():
            best = out.get(vendor)
            if best is None or (c.memreq, c.coresreq) > (best.memreq, best.coresreq):
                out[vendor] = c
    return out


def _card_verdicts(state: ClusterState, node: NodeState, req: PodRequest) -> tuple[CardVerdict, ...]:
    out: list[CardVerdict] = []
    held = held_by_card(state) if state.held_by_node.get(node.name) else {}
    for vendor, creq in sorted(_first_requests(req).items()):
        table = node.tables.get(vendor)
        if table is None:
            continue
        one_each = ContainerRequest(
            vendor, 1, creq.memreq, creq.mem_percentage, creq.coresreq, creq.priority, creq.variant
        )
        ctx = FitContext(
            policy=req.gpu_policy, weights=req.weights, cordoned=node.cordoned, node_info=node.node_info.get(vendor, {})
        )
        for i, info in enumerate(table.infos):
            single = DeviceTable(vendor, (info,))
            single.used[0], single.usedmem[0], single.usedcores[0] = table.used[i], table.usedmem[i], table.usedcores[i]
            single.slices[0], single.broken[0] = table.slices[i], table.broken[i]
            outcome = state.vendors[vendor].fit(single, one_each, ctx, req.selectors[vendor])
            verdict = "fits" if not isinstance(outcome, Unfit) else ", ".join(sorted(r.value for r in outcome.counts))
            out.append(
                CardVerdict(
                    vendor,
                    info.index,
                    info.id,
                    info.type,
                    creq.memory_on(info.devmem),
                    min(creq.coresreq, 100),
                    info.count - table.used[i],
                    info.devmem - table.usedmem[i],
                    info.devcore - table.usedcores[i],
                    verdict or "does not fit",
                    held.get((node.name, vendor, info.id)),
                )
            )
    return tuple(out)


def _smallest_eviction(state: ClusterState, req: PodRequest, node: str, budget: list[int]) -> Eviction | None:
    """The smallest set of ``node``'s pods whose leaving lets ``req`` fit there; ``budget[0]`` counts down the
    sets still allowed to be tried."""
    vendors = set(req.vendors)
    holders = [
        state.pods[uid]
        for uid in sorted(state.pods_by_node.get(node, ()))
        if any(ch.vendor in vendors for ch in state.pods[uid].charges)
    ]
    for size in range(1, min(MAX_EVICT, len(holders)) + 1):
        combos = sorted(
            itertools.combinations(holders, size),
            key=lambda rs: (sum(c.mem for r in rs for c in r.charges), [r.key for r in rs]),
        )
        for records in combos:
            if budget[0] <= 0:
                return None
            budget[0] -= 1
            removed = take_out(state, [r.uid for r in records])
            try:
                fits = judge(state, req, [node]).node == node
            finally:
                put_back(state, removed)
            if fits:
                return Eviction(node, tuple(r.key for r in records), sum(c.mem for r in records for c in r.charges))
    return None


def _variants(pod: Pod, vendors: Mapping[str, Vendor]) -> list[tuple[str, dict[str, str]]]:
    """Annotation changes to try: each annotation a user wrote left out, and a plain GPU policy."""
    annotations = dict(pod.metadata.annotations)
    written = _WRITTEN_BY_HAMI | {
        key for v in vendors.values() for key in (v.keys.allocated, v.keys.to_allocate, *v.keys.extra) if key
    }
    out: list[tuple[str, dict[str, str]]] = []
    for key in sorted(annotations):
        if key in written:
            continue
        rest = {k: v for k, v in annotations.items() if k != key}
        out.append((f"without the annotation {key}={annotations[key]}", rest))
    for policy in ("binpack", "spread"):
        if annotations.get(keys.GPU_SCHEDULER_POLICY, "") != policy:
            out.append(
                (f"with {keys.GPU_SCHEDULER_POLICY}={policy}", {**annotations, keys.GPU_SCHEDULER_POLICY: policy})
            )
    return out


def _with_annotations(pod: Pod, annotations: dict[str, str]) -> Pod:
    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, annotations=annotations))


def _find_record(state: ClusterState, key: str) -> PodRecord | None:
    return next((r for r in state.pods.values() if r.key == key), None)


def explain_manifest(sim: Simulator, item: Sourced[Pod], suggest: bool = True) -> Explanation:
    """Explain a pod not created yet (``hami explain -f``) through the pipeline ``hami simulate`` places pods with
    (``Simulator.admit``, then the decision): the admission webhook's defaults and rewrites are applied first (a
    pod asking for ``nvidia.com/gpumem`` alone gets ``nvidia.com/gpu: 1``), a pod it denies is ``denied``, and the
    pod's warnings are ``Simulator.pod_warnings``. So explain and simulate never disagree on a manifest."""
    warnings = [*item.warnings, *sim.pod_warnings(item)]
    admitted = sim.admit(item)
    if isinstance(admitted, Outcome):
        return Explanation(admitted.pod, admitted.status, admitted.message, warnings=tuple(warnings))
    e = explain(sim, admitted.pod, suggest, item.node)
    if e.node is not None:
        req = prefilter(admitted.pod, sim.vendors, sim.defaults)
        topology = sim.topology_warning(item, req, e.node)
        warnings += [topology] if topology else []
    patch = admitted.patch if sim.admission is not None else None
    return dataclasses.replace(e, admission=patch, warnings=tuple(warnings))


def explain(sim: Simulator, pod: Pod, suggest: bool = True, pinned: str | None = None) -> Explanation:
    """Explain ``pod`` on ``sim``'s state (left as it was found), as it is (no admission: a pod of the cluster
    went through it already); ``pinned`` is the node a controller binds it to (``Simulator.candidates``)."""
    ns = pod.metadata.namespace or DEFAULT_NAMESPACE
    pod = msgspec.structs.replace(
        pod,
        metadata=msgspec.structs.replace(
            pod.metadata, namespace=ns, uid=pod.metadata.uid or f"explain-{ns}-{pod.metadata.name}"
        ),
    )
    if is_dra_pod(pod):  # its claims are kube-scheduler's to allocate: judged by that allocator's model
        from hami.simulate.dramode import explain_dra  # (it builds on this module)

        return explain_dra(sim, pod, pinned)
    key = pod.key
    state = sim.state
    record = _find_record(state, key)
    removed = take_out(state, [record.uid]) if record is not None else []
    try:
        try:
            req = prefilter(pod, sim.vendors, sim.defaults)
        except InvalidInput as err:
            return Explanation(key, "invalid", str(err))
        if not req.wants_devices:
            return Explanation(
                key, "no-devices", "the pod asks for no device hami manages; kube-scheduler alone places it"
            )
        names, _ = sim.candidates(pod, pinned)
        decision = judge(state, req, names)
        verdicts = _verdicts(sim, pod, req, names, decision, suggest and decision.node is None)
        suggestions = _suggestions(sim, pod, names, verdicts) if suggest and decision.node is None else ()
        pending = record is None and decision.node is None
        preemption = explain_preemption(state, pod, req, names) if pending else None
    finally:
        put_back(state, removed)
    if record is not None:
        status, message = (
            "placed",
            f"placed on {record.node}; were it pending now (its own usage taken out): {decision.message}",
        )
    elif decision.node is not None:
        status, message = "would-place", decision.message
    else:
        status, message = "pending", decision.message
    return Explanation(
        key,
        status,
        message,
        decision.node,
        record.node if record else None,
        describe_need(req),
        verdicts,
        suggestions,
        preemption=preemption,
    )


def _excluded_reason(sim: Simulator, pod: Pod, node: str) -> str:
    state = sim.state.nodes[node]
    if state.unschedulable:
        return "node cordoned (spec.unschedulable)"
    wrong = [f"{k}={v}" for k, v in sorted(pod.spec.node_selector.items()) if state.labels.get(k) != v]
    return f"nodeSelector {', '.join(wrong)} does not match"


def _verdicts(
    sim: Simulator, pod: Pod, req: PodRequest, names: Sequence[str], decision: Decision, evict: bool
) -> tuple[NodeVerdict, ...]:
    state = sim.state
    candidates = set(names)
    evictions: dict[str, Eviction | None] = {}
    if evict:
        budget = [MAX_TRIES]
        resolvable = [n for n in names if n in decision.rejected and not decision.rejected[n].unresolvable]
        for node in sorted(resolvable, key=lambda n: (len(state.pods_by_node.get(n, ())), n)):
            evictions[node] = _smallest_eviction(state, req, node, budget)
    out: list[NodeVerdict] = []
    for node in sorted(state.nodes):
        cards = _card_verdicts(state, state.nodes[node], req)
        if node not in candidates:
            alone = judge(state, req, [node])
            out.append(
                NodeVerdict(
                    node,
                    alone.node == node,
                    summary=alone.rejected[node].summary if node in alone.rejected else "would fit",
                    excluded=_excluded_reason(sim, pod, node),
                    cards=cards,
                )
            )
            continue
        if node in decision.scores:
            out.append(NodeVerdict(node, True, decision.node == node, decision.scores[node], "fits", cards=cards))
            continue
        rej: NodeRejection = decision.rejected[node]
        out.append(
            NodeVerdict(
                node,
                False,
                summary=rej.summary,
                counts={r.value: n for r, n in sorted(rej.counts.items())},
                unresolvable=rej.unresolvable,
                cards=cards,
                eviction=evictions.get(node),
            )
        )
    return tuple(out)


def _suggestions(sim: Simulator, pod: Pod, names: Sequence[str], verdicts: Sequence[NodeVerdict]) -> tuple[str, ...]:
    out: list[str] = []
    evictions = sorted((v.eviction for v in verdicts if v.eviction), key=lambda e: (len(e.pods), e.freed_mem, e.node))
    if evictions:
        best = evictions[0]
        out.append(f"it would fit on {best.node} if {', '.join(best.pods)} left ({best.freed_mem} MiB freed)")
    for v in verdicts:
        if v.excluded and v.fits:
            out.append(f"{v.node} would take it, but {v.excluded}")
    state = sim.state
    for description, changed in _variants(pod, sim.vendors):
        try:
            other = prefilter(_with_annotations(pod, changed), sim.vendors, sim.defaults)
        except InvalidInput:
            continue
        decision = judge(state, other, names)
        if decision.node is not None:
            out.append(f"{description} it would be placed on {decision.node}")
    if not out:
        if all(v.unresolvable or v.excluded for v in verdicts):
            out.append("no node could run it even if empty: it asks for more than any node has")
        else:
            out.append(f"no single change found (evicting up to {MAX_EVICT} pods of one node, one annotation)")
    return tuple(out)


# --- output ---------------------------------------------------------------------------------------------


def render_explain(e: Explanation, wide: bool = False) -> str:
    """The explanation for a person; ``wide`` (``-o wide``) adds each card's vendor and each node's reasons
    counted (HAMi's ``CardInsufficientMemory: 2`` and so on)."""
    lines = [f"{e.pod}: {e.status}", f"  {e.message}"]
    lines += [f"  needs {n}" for n in e.needs]
    for v in e.verdicts:
        if v.excluded:
            alone = "would fit" if v.fits else f"would not fit: {v.summary}"
            head = f"{v.node}: excluded, {v.excluded}; on its own it {alone}"
        elif v.fits:
            head = f"{v.node}: fits, score {v.score:.2f}" + (" <- chosen" if v.chosen else "")
        else:
            head = f"{v.node}: does not fit: {v.summary}" + (" (even if empty)" if v.unresolvable else "")
        lines += ["", head]
        if wide and v.counts:
            lines.append("  reasons: " + ", ".join(f"{k} {n}" for k, n in sorted(v.counts.items())))
        if v.cards:
            rows = [
                [
                    "  #",
                    "DEVICE",
                    *(["VENDOR"] if wide else []),
                    "MODEL",
                    "NEED MiB",
                    "FREE MiB",
                    "NEED CORES",
                    "FREE CORES",
                    "FREE SLOTS",
                    "VERDICT",
                ]
            ]
            rows += [
                [
                    f"  {c.index}",
                    c.uuid,
                    *([c.vendor] if wide else []),
                    c.model,
                    str(c.need_mem),
                    str(c.free_mem),
                    str(c.need_cores) if c.need_cores else "unlimited",
                    str(c.free_cores),
                    str(c.free_slots) if c.free_slots >= 0 else "-",
                    c.verdict
                    if c.dra is None
                    else f"{c.verdict} (DRA claims hold {c.dra.mem} MiB, {c.dra.cores} cores)",
                ]
                for c in v.cards
            ]
            widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
            lines += ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows]
        if v.eviction is not None:
            lines.append(f"  would fit if {', '.join(v.eviction.pods)} left ({v.eviction.freed_mem} MiB freed)")
    if e.suggestions:
        lines += ["", "What would make it fit:"]
        lines += [f"  - {s}" for s in e.suggestions]
    if e.preemption is not None:
        lines += render_preemption(e.preemption)
    if e.gang is not None:
        lines += ["", "Gang:", *render_gang(e.gang)]
    return "\n".join(lines)


def explain_json(e: Explanation) -> dict[str, Any]:
    return {
        "pod": e.pod,
        "status": e.status,
        "message": e.message,
        "node": e.node,
        "currentNode": e.current_node,
        "needs": list(e.needs),
        "nodes": [
            {
                "node": v.node,
                "fits": v.fits,
                "chosen": v.chosen,
                "score": v.score,
                "summary": v.summary,
                "reasons": dict(v.counts),
                "unresolvable": v.unresolvable,
                "excluded": v.excluded or None,
                "cards": [
                    {
                        "vendor": c.vendor,
                        "index": c.index,
                        "uuid": c.uuid,
                        "model": c.model,
                        "needMemoryMiB": c.need_mem,
                        "freeMemoryMiB": c.free_mem,
                        "needCores": c.need_cores,
                        "freeCores": c.free_cores,
                        "freeSlots": c.free_slots if c.free_slots >= 0 else None,
                        "verdict": c.verdict,
                        "dra": None
                        if c.dra is None
                        else {"claims": c.dra.claims, "memoryMiB": c.dra.mem, "cores": c.dra.cores},
                    }
                    for c in v.cards
                ],
                "eviction": None
                if v.eviction is None
                else {"pods": list(v.eviction.pods), "freedMemoryMiB": v.eviction.freed_mem},
            }
            for v in e.verdicts
        ],
        "suggestions": list(e.suggestions),
        "admission": list(e.admission) if e.admission is not None else None,
        "warnings": list(e.warnings),
        "preemption": preemption_json(e.preemption) if e.preemption is not None else None,
        "gang": gang_json(e.gang) if e.gang is not None else None,
    }
