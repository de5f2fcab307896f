"""DRA-mode pods in the tools (issue 38): ``hami explain`` on a pending DRA-mode pod, and ``hami simulate --dra``.

A DRA-mode pod's request is read back from its ``hami.io/dra-requests`` annotation (``hami.protocol.drapod``:
the pod as written for HAMi), so it is judged by hami's own request reader, and its claims are allocated by the
model of kube-scheduler's allocator in :mod:`hami.scheduling.dra.allocate` (first fit in slice order over the
published cards, distinct cards per claim, capacity after every claim and pod; node chosen by hami's node policy)
on the simulator's ledger. ``simulate --dra`` places pods written for HAMi (the webhook's defaults applied first)
as the DRA-mode webhook would make them, and charges each placement as a claim, so the next pod sees it; the report
is the one ``hami simulate`` writes.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from hami.errors import InvalidInput
from hami.protocol.drapod import as_written, dra_requests
from hami.protocol.objects import Pod
from hami.scheduling.decide import Decision
from hami.scheduling.dra import DraRecord, held_by_card
from hami.scheduling.dra.allocate import DraPlacement, allocate, choose, published_cards
from hami.scheduling.request import PodRequest, prefilter
from hami.scheduling.state import ClusterState, PodRecord
from hami.scheduling.usage import container_kinds
from hami.simulate.explain import CardVerdict, Explanation, NodeVerdict, describe_need
from hami.simulate.loading import Sourced
from hami.simulate.simulator import DEFAULT_NAMESPACE, Outcome, Simulator

__all__ = ["explain_dra", "judge_dra", "place_dra"]

TERSE = "kube-scheduler itself says only that it cannot allocate all claims"


def judge_dra(sim: Simulator, req: PodRequest, names: Sequence[str]) -> tuple[list[DraPlacement], DraPlacement | None]:
    """Every candidate's answer for the pod's claims and the node chosen (None: no node can allocate them)."""
    published = published_cards(sim.dra.devices())
    placements = [allocate(sim.state, name, req, published) for name in names]
    return placements, choose(placements, req.node_policy)


def _own_claims(state: ClusterState, namespace: str, name: str) -> list[PodRecord]:
    """The claim records serving the pod (taken out while it is judged as if pending again)."""
    return [
        r for r in state.held.values() if isinstance(r, DraRecord) and r.namespace == namespace and name in r.consumers
    ]


def _verdict(sim: Simulator, p: DraPlacement, chosen: str | None) -> NodeVerdict:
    held = held_by_card(sim.state)
    cards = tuple(
        CardVerdict(
            c.vendor,
            c.index,
            c.uuid,
            c.model,
            c.need_mem,
            c.need_cores,
            -1,
            c.free_mem,
            c.free_cores,
            c.verdict,
            held.get((p.node, c.vendor, c.uuid)),
        )
        for c in p.cards
    )
    if p.rejection is None:
        return NodeVerdict(p.node, True, p.node == chosen, p.score, "fits", cards=cards)
    rej = p.rejection
    counts = {r.value: n for r, n in sorted(rej.counts.items())}
    return NodeVerdict(p.node, False, summary=rej.summary, counts=counts, unresolvable=rej.unresolvable, cards=cards)


def explain_dra(sim: Simulator, pod: Pod, pinned: str | None = None) -> Explanation:
    """Explain a DRA-mode pod: per candidate node whether kube-scheduler could allocate its claims, and per card
    what it lacks (``hami.scheduling.dra.allocate``); a bound pod is judged as if pending again, its own claims
    taken out of the ledger first."""
    ns = pod.metadata.namespace or DEFAULT_NAMESPACE
    key = f"{ns}/{pod.metadata.name}"
    try:
        claims = sorted(dra_requests(pod))
        req = prefilter(as_written(pod), sim.vendors, sim.defaults)
    except InvalidInput as err:
        return Explanation(key, "invalid", str(err))
    own = _own_claims(sim.state, ns, pod.metadata.name)
    for record in own:
        sim.state.apply(record, add=False)
    try:
        names, _ = sim.candidates(pod, pinned)
        placements, best = judge_dra(sim, req, names)
        verdicts = tuple(_verdict(sim, p, best.node if best else None) for p in placements)
    finally:
        for record in own:
            sim.state.apply(record, add=True)
    where = pod.spec.node_name or None
    chosen = best.node if best is not None else None
    named = f"claim{'s' if len(claims) != 1 else ''} {', '.join(claims)}"
    said = _said(best, placements, named)
    if where is not None and own:
        status, message = "placed", f"DRA mode: {named} allocated on {where}; were it pending now: {said}"
    elif chosen is not None:
        status, message = "would-place", f"DRA mode: {said}"
    else:
        status, message = "pending", f"DRA mode: {said} ({TERSE})"
    needs = tuple(f"{n} (DRA claim)" for n in describe_need(req))
    return Explanation(key, status, message, chosen, where if own else None, needs, verdicts)


def _said(best: DraPlacement | None, placements: Sequence[DraPlacement], named: str = "the claims") -> str:
    feasible = sum(1 for p in placements if p.fits)
    if best is None:
        return f"0/{len(placements)} nodes can allocate {named}"
    return (
        f"{feasible}/{len(placements)} nodes can allocate {named}; {best.node} by hami's node policy (which of them "
        "kube-scheduler takes depends on its scoring and on a prioritize extender)"
    )


def place_dra(sim: Simulator, item: Sourced[Pod], now: int) -> Outcome:
    """Place one pod as a DRA-mode pod (``hami simulate --dra``): the webhook's admission first (when on), then the
    allocation of its claims; the placement is charged as a claim serving the pod, so the next pod sees it."""
    del now  # kube-scheduler writes no decision time on a DRA-mode pod
    admitted = sim.admit(item)
    if isinstance(admitted, Outcome):
        return admitted
    pod = admitted.pod
    every = [*pod.spec.init_containers, *pod.spec.containers]
    containers = tuple((c.name, kind) for c, kind in zip(every, container_kinds(pod), strict=True))
    ns = pod.metadata.namespace or DEFAULT_NAMESPACE
    pod = msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, namespace=ns))
    patch = admitted.patch if sim.admission is not None else None
    try:
        req = prefilter(as_written(pod) if dra_requests(pod) else pod, sim.vendors, sim.defaults)
    except InvalidInput as err:
        return Outcome(pod.key, item.origin, f"{item.origin}: {err}", containers=containers, admission=patch)
    if not req.wants_devices:
        none = Decision("", pod.key, None, message="asks for no device hami manages: no claim")
        return Outcome(pod.key, item.origin, none.message, none, {}, containers, False, admission=patch)
    names, _ = sim.candidates(pod, item.node)
    placements, best = judge_dra(sim, req, names)
    rejected = {p.node: p.rejection for p in placements if p.rejection is not None}
    scores = {p.node: p.score for p in placements if p.fits}
    uid = f"dra-sim-{ns}-{pod.metadata.name}-{len(sim.state.held)}"
    node = best.node if best is not None else None
    message = f"DRA mode: {_said(best, placements)}"
    devices = best.devices if best is not None else {}
    decision = Decision(uid, pod.key, node, devices, rejected=rejected, scores=scores, message=message)
    if best is not None:
        claim = DraRecord(
            uid, ns, f"{pod.metadata.name}-claim", best.node, {}, best.charges, consumers=(pod.metadata.name,)
        )
        sim.state.apply(claim, add=True)
    reasons = {n: {r.value: c for r, c in rej.counts.items()} for n, rej in sorted(rejected.items())}
    return Outcome(pod.key, item.origin, message, decision, reasons, containers, admission=patch)
