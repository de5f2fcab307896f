"""hami's node policy for DRA-mode pods: the scores of the prioritize-only extender verb (issue 38).

In DRA mode kube-scheduler allocates a pod's claims itself, first-fit over the slice order, and scores no device
(spec dra.md §4): it never calls hami's ``/filter``. What hami can still decide is the **order of the nodes**
kube-scheduler found feasible: ``POST /prioritize`` answers a score per candidate node, which kube-scheduler adds,
times the extender's weight, to its own plugins' scores. It writes nothing.

**Who is scored.** Only pods labelled ``hami.io/dra: "true"`` (the DRA-mode webhook's label); every other pod gets
0 on every node at once (kube-scheduler asks the extender for every pod with more than one feasible node).

**How full a node is.** HAMi's node score (spec §5.2, ``NodeState.score``) over every card of the node, from hami's
one ledger: a registered card counts hami's pods *and* the DRA claims charged to it; a node served by DRA alone
has its published devices read as cards (``DraLedger.unregistered_cards``) with what the claims allocated there hold.
Such a card has no slot count, so its part is ``15 × (cores + memory)`` fractions: the same 0–30 range.

**The pod's demand** comes from its ``hami.io/dra-requests`` annotation (the original HAMi request per claim),
parsed with each vendor's own ``parse_request``. A node where hami's ledger says the demand cannot fit (cards that
kube-scheduler cannot see as used: hami's extender pods on a shared node) scores 0. A pod without the annotation
(claims written by hand) is ordered by fill alone. An annotation that cannot be read is **no error**: every node
scores 0 (kube-scheduler's own order stands) and the reason is returned for a log line — the annotation is the
tenant's, and a scoring extender must never fail a pod's scheduling.

**Scores.** Fitting nodes get 1 to 10 (``MAX_PRIORITY``, kube-scheduler's MaxExtenderPriority) linearly between the
emptiest and the fullest candidate: ``binpack`` gives the fullest 10, ``spread`` the emptiest; equal fills score
equal. Nodes that do not fit, or that hami knows no card of, score 0. The node policy is the pod's
``hami.io/node-scheduler-policy`` annotation, else the one its request entries carry, else ``--node-policy``.
Device choice inside a node stays kube-scheduler's first fit over hami's plugin's slice order (devices by minor).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hami.devices.base import MEM_PERCENTAGE_UNSET, ContainerRequest, Vendor
from hami.devices.policy import parse_node_policy
from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Container, Pod, ResourceRequirements
from hami.scheduling.dra.amounts import Held
from hami.scheduling.dra.ledger import DraLedger

__all__ = [
    "MAX_PRIORITY",
    "Card",
    "DraDemand",
    "Ranking",
    "dra_demand",
    "is_dra_pod",
    "node_cards",
    "node_fill",
    "prioritize",
    "rank_nodes",
]

MAX_PRIORITY = 10
"""kube-scheduler's ``MaxExtenderPriority``: an extender's scores run from 0 to this."""


@dataclass(frozen=True, slots=True)
class Card:
    """One card of a node as the policy reads it: capacity and what is used of it (hami's pods and claims)."""

    vendor: str
    slots: int
    """0 for a device read from DRA alone (no slot count)."""
    used: int
    mem: int
    usedmem: int
    cores: int
    usedcores: int

    @classmethod
    def unregistered(cls, vendor: str, card: DeviceInfo, held: Held) -> Card:
        return cls(vendor, 0, 0, card.devmem, held.mem, card.devcore, held.cores)

    def fits(self, req: ContainerRequest) -> bool:
        """Whether one more share of ``req`` fits on this card by hami's ledger (no memory asked: the whole card,
        as the DRA translation and HAMi's defaultMemory 0 do)."""
        if self.slots and self.used >= self.slots:
            return False
        mem = req.memory_on(self.mem) if req.memreq > 0 or req.mem_percentage != MEM_PERCENTAGE_UNSET else self.mem
        return self.usedmem + mem <= self.mem and self.usedcores + req.coresreq <= self.cores


@dataclass(frozen=True, slots=True)
class DraDemand:
    """A DRA-mode pod's demand: one request per (claim, vendor), and the node policy it asks for ("" for none)."""

    requests: tuple[ContainerRequest, ...] = ()
    node_policy: str = ""
    known: bool = False
    """False when the pod carries no ``hami.io/dra-requests`` (nodes are then ordered by fill alone)."""


@dataclass(frozen=True, slots=True)
class Ranking:
    """The scores by node (every candidate named once) and why they are all 0, if they are for a reason."""

    scores: dict[str, int]
    policy: str = ""
    problem: str | None = None
    fills: Mapping[str, float] = field(default_factory=dict)


def is_dra_pod(pod: Pod) -> bool:
    """Whether the pod took DRA mode (labelled ``hami.io/dra: "true"``)."""
    return pod.metadata.labels.get(keys.DRA_LABEL) == "true"


def dra_demand(pod: Pod, vendors: Mapping[str, Vendor]) -> DraDemand:
    """The demand of a DRA-mode pod from its ``hami.io/dra-requests``; raises ``InvalidInput`` naming the field."""
    raw = pod.metadata.annotations.get(keys.DRA_REQUESTS)
    if raw is None:
        return DraDemand(node_policy=_policy_of(pod.metadata.annotations, keys.NODE_SCHEDULER_POLICY))
    try:
        entries = json.loads(raw)
    except ValueError as err:
        raise InvalidInput(keys.DRA_REQUESTS, raw[:80], f"is not JSON: {err}") from None
    if not isinstance(entries, dict):
        raise InvalidInput(keys.DRA_REQUESTS, raw[:80], "must be a JSON object of claim names")
    requests: list[ContainerRequest] = []
    policy = _policy_of(pod.metadata.annotations, keys.NODE_SCHEDULER_POLICY)
    for claim, entry in sorted(entries.items()):
        where = f"{keys.DRA_REQUESTS}[{claim}]"
        if not isinstance(entry, dict):
            raise InvalidInput(where, type(entry).__name__, "must be an object")
        resources, notes = entry.get("resources", {}), entry.get("annotations", {})
        if not _strings(resources) or not _strings(notes):
            raise InvalidInput(where, "resources/annotations", "must be objects of strings")
        policy = policy or _policy_of(notes, f"{where}.annotations")
        container = Container(name=str(entry.get("container", "")), resources=ResourceRequirements(limits=resources))
        for vendor in vendors.values():
            req = vendor.parse_request(container, f"{where}.resources")
            if req is not None and req.nums > 0:
                requests.append(req)
    return DraDemand(tuple(requests), policy, known=True)


def _strings(obj: object) -> bool:
    return isinstance(obj, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in obj.items())


def _policy_of(annotations: Mapping[str, str], where: str) -> str:
    value = annotations.get(keys.NODE_SCHEDULER_POLICY)
    return parse_node_policy(value, where) if value is not None else ""


def node_fill(cards: Sequence[Card]) -> float:
    """HAMi's node score (spec §5.2) over ``cards``: ``10 × (slots + cores + memory)`` fractions over the registered
    cards; cards read from DRA alone (no slots) add ``15 × (cores + memory)`` fractions, weighted by their share of
    the node's memory so a node mixing both stays in the same 0–30 range. 0 for a node without capacity."""
    reg = [c for c in cards if c.slots]
    bare = [c for c in cards if not c.slots]
    parts: list[tuple[float, int]] = []  # (score of the group, its memory)
    if reg:
        slots, mem, cores = sum(c.slots for c in reg), sum(c.mem for c in reg), sum(c.cores for c in reg)
        if mem and cores:
            used = sum(c.used for c in reg) / slots
            parts.append(
                (10.0 * (used + sum(c.usedcores for c in reg) / cores + sum(c.usedmem for c in reg) / mem), mem)
            )
    if bare:
        mem, cores = sum(c.mem for c in bare), sum(c.cores for c in bare)
        if mem and cores:
            parts.append((15.0 * (sum(c.usedcores for c in bare) / cores + sum(c.usedmem for c in bare) / mem), mem))
    total = sum(m for _, m in parts)
    return sum(score * m for score, m in parts) / total if total else 0.0


def fits(cards: Iterable[Card], demand: DraDemand) -> bool:
    """Whether every request of ``demand`` finds its count of distinct cards of its vendor with room on them (each
    request judged alone: a pod's claims are allocated together, so this errs towards saying it fits)."""
    have = list(cards)
    return all(sum(1 for c in have if c.vendor == req.vendor and c.fits(req)) >= req.nums for req in demand.requests)


def rank_nodes(
    candidates: Sequence[str], cards: Mapping[str, Sequence[Card]], demand: DraDemand, default_policy: str
) -> Ranking:
    """The scores of ``candidates`` (module docstring). ``cards``: each node's cards (a node absent or without
    cards scores 0)."""
    policy = demand.node_policy or default_policy
    fills = {n: node_fill(cards[n]) for n in candidates if cards.get(n) and fits(cards[n], demand)}
    scores = dict.fromkeys(candidates, 0)
    if fills:
        low, high = min(fills.values()), max(fills.values())
        span = high - low
        for name, fill in fills.items():
            share = (fill - low) / span if span > 0 else 1.0
            if policy == "spread" and span > 0:
                share = 1.0 - share
            scores[name] = 1 + round((MAX_PRIORITY - 1) * share)
    return Ranking(scores, policy, None, fills)


def node_cards(ledger: DraLedger, node: str) -> list[Card]:
    """Every card of ``node`` in hami's one ledger: the registered ones (hami's pods and the claims charged to them)
    and the devices it publishes for DRA alone (``DraLedger.unregistered_cards``)."""
    cards: list[Card] = []
    registered = ledger.state.nodes.get(node)
    for vendor, table in registered.tables.items() if registered is not None else ():
        for i, info in enumerate(table.infos):
            used, mem, cores = table.used[i], table.usedmem[i], table.usedcores[i]
            cards.append(Card(vendor, info.count, used, info.devmem, mem, info.devcore, cores))
    cards += [Card.unregistered(v, card, held) for v, card, held in ledger.unregistered_cards(node)]
    return cards


def prioritize(ledger: DraLedger, pod: Pod, candidates: Sequence[str], default_policy: str) -> Ranking:
    """The ``/prioritize`` answer for ``pod`` (module docstring): all 0 for a pod not in DRA mode, or whose demand
    cannot be read (``Ranking.problem`` says why)."""
    zeros = dict.fromkeys(candidates, 0)
    if not is_dra_pod(pod):
        return Ranking(zeros)
    try:
        demand = dra_demand(pod, ledger.state.vendors)
    except InvalidInput as err:
        return Ranking(zeros, problem=f"{err}: every node scores 0")
    cards = {n: node_cards(ledger, n) for n in dict.fromkeys(candidates)}
    return rank_nodes(candidates, cards, demand, default_policy)
