"""One scheduling cycle, stage by stage: prefilter → filter → score → select → reserve (→ commit → bind).

``decide`` is pure: state + request → ``Decision``; it never changes the state. ``reserve`` applies a decision
to the ledger so the next pod sees it, and ``unreserve`` takes it back; both are O(pod). The extender adds
``commit`` (the annotation patch) and ``bind`` around these at the edge.

Deliberate differences from HAMi (spec §11): ties between nodes are broken by node name (HAMi: goroutine
completion order); every rejected node keeps its reasons, also when another node fits; a node that could not
run the pod even if empty is flagged ``unresolvable`` so the extender can spare kube-scheduler a pointless
preemption; annotations are written only for the vendors the pod asks for (HAMi writes empty slots for every
vendor on the node, §11 item 15).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hami.protocol import keys
from hami.protocol.allocation import MigAllocation, PodDevices, encode_mig_allocations
from hami.protocol.events import filtering_succeed_text, no_available_node_text
from hami.scheduling.filter import NodeFit, NodeRejection, filter_node
from hami.scheduling.request import PodRequest
from hami.scheduling.state import ClusterState, NodeState, PodRecord
from hami.scheduling.usage import effective_charges

__all__ = ["Decision", "decide", "reserve", "select", "unreserve"]


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one cycle for one pod.

    ``node`` is None when nothing fits. ``devices`` has, per vendor, one entry per container (init first).
    ``annotations`` are exactly what hami writes on the pod. ``rejected`` has every candidate that was not
    chosen *because it does not fit*; ``scores`` every candidate that fits (the chosen one included).
    """

    uid: str
    pod: str
    node: str | None
    devices: Mapping[str, PodDevices] = field(default_factory=dict)
    mig: tuple[MigAllocation, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    rejected: Mapping[str, NodeRejection] = field(default_factory=dict)
    scores: Mapping[str, float] = field(default_factory=dict)
    message: str = ""
    node_policy: str = ""


def select(fits: Iterable[NodeFit], node_policy: str) -> list[NodeFit]:
    """Fitting nodes, best first: binpack → highest node score, spread → lowest; ties by node name."""
    if node_policy == "spread":
        return sorted(fits, key=lambda f: (f.score, f.node))
    return sorted(fits, key=lambda f: (-f.score, f.node))


def decide(state: ClusterState, req: PodRequest, candidates: Iterable[str], now: int) -> Decision:
    """Choose one node and the devices for every container of ``req`` among ``candidates``.

    ``now`` (Unix seconds) is stamped into ``hami.io/vgpu-time``. A pod that asks for no device gets a
    decision with ``node=None`` and no rejections; callers pass such pods through untouched.
    """
    names = sorted(set(candidates))
    if not req.wants_devices:
        return Decision(req.uid, req.key, None, message="pod requests no managed device")
    fits: list[NodeFit] = []
    rejected: dict[str, NodeRejection] = {}
    key = 0
    if req.signature:
        signature = req.signature
        if state.quotas.has_limits(req.namespace):  # the verdict then also depends on the namespace's usage
            signature = (*signature, req.namespace, state.quotas.generation)
        key = state.signature_id(signature)
    nodes = state.nodes
    for name in names:
        node = nodes.get(name)
        if node is None:
            rejected[name] = NodeRejection(name, {}, 0, unresolvable=True, detail="node unregistered")
            continue
        verdict = _judge(state, node, req, key)
        if isinstance(verdict, NodeFit):
            fits.append(verdict)
        else:
            rejected[name] = verdict
    if not fits:
        return Decision(
            req.uid,
            req.key,
            None,
            rejected=rejected,
            message=no_available_node_text(len(names)),
        )
    ranked = select(fits, req.node_policy)
    best = ranked[0]
    devices = best.pod_devices()
    mig = _mig_allocations(best)
    annotations = {keys.VGPU_NODE: best.node, keys.VGPU_TIME: str(now)}
    for vendor in sorted(devices):
        vk = state.vendors[vendor].keys
        value = state.vendors[vendor].encode(devices[vendor])
        if vk.to_allocate:
            annotations[vk.to_allocate] = value
        annotations[vk.allocated] = value
    if mig:
        annotations[keys.NVIDIA_MIG_ALLOCATIONS] = encode_mig_allocations(list(mig))
    scores = {f.node: f.score for f in ranked}
    # HAMi lists every fitting node in its final sort order, the chosen one last. Deliberate difference: with
    # more than _LISTED fitting nodes only the best _LISTED are listed (an event message is not a node list).
    shown = ranked[:_LISTED]
    message = filtering_succeed_text(best.node, len(names), [(f.node, f.score) for f in reversed(shown)])
    if len(ranked) > _LISTED:
        message = message.replace(
            f"{len(ranked)} nodes fit(", f"{len(ranked)} nodes fit(… {len(ranked) - _LISTED} more,", 1
        )
    return Decision(req.uid, req.key, best.node, devices, mig, annotations, rejected, scores, message, req.node_policy)


def _judge(state: ClusterState, node: NodeState, req: PodRequest, key: int) -> NodeFit | NodeRejection:
    """``filter`` for one node, plus the never-fits check for rejections; memoised per node generation
    under ``key`` (the request's signature id; 0 = do not memoise)."""
    memo = state.verdicts.get(node.name)
    if key and memo is not None:
        hit = memo.get(key)
        if hit is not None and hit[0] == node.generation:
            return hit[1]  # type: ignore[return-value]
    verdict = filter_node(state, node, req)
    if isinstance(verdict, NodeRejection) and not verdict.unresolvable:
        never = filter_node(state, node, req, empty=True)
        if isinstance(never, NodeRejection):
            verdict = NodeRejection(verdict.node, verdict.counts, verdict.total, verdict.closest, True, verdict.detail)
    if key:
        if memo is None:
            memo = state.verdicts[node.name] = {}
        elif len(memo) >= _MEMO_PER_NODE and key not in memo:
            memo.pop(next(iter(memo)))
        memo[key] = (node.generation, verdict)
    return verdict


_MEMO_PER_NODE = 8
_LISTED = 10


def _mig_allocations(fit: NodeFit) -> tuple[MigAllocation, ...]:
    out: list[MigAllocation] = []
    for per_container in fit.placements.values():
        for ci, container in enumerate(per_container):
            for di, p in enumerate(container):
                if p.mig_profile is not None and p.mig_placement is not None:
                    out.append(MigAllocation(ci, di, p.device.uuid, p.mig_profile, p.mig_placement))
    return tuple(out)


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
        mig=tuple((m.gpu_uuid, m.placement) for m in decision.mig),
        mig_allocations=decision.mig,
    )
    state.apply(record, add=True)
    return state.pods.get(req.uid)


def unreserve(state: ClusterState, uid: str) -> PodRecord | None:
    """Take a pod's usage back out of the ledger (no-op when absent). Returns what was removed."""
    return state.remove_pod(uid)
