"""kube-scheduler's allocation of a DRA-mode pod's claims, modelled on hami's ledger (issue 38).

In DRA mode kube-scheduler allocates a pod's ResourceClaims itself and says only "cannot allocate all claims" when
it cannot. ``hami explain`` (on a pending DRA-mode pod) and ``hami simulate --dra`` (where pods would go) judge
the same request with this model instead, per node and per card, on hami's ledger — claims *and* device-plugin
pods, so on a card both modes share the answer is what the card really has left.

What is modelled (spec ``dra.md`` §4, hami's translation in DRAMODE.md):

* **which cards**: only cards a configured DRA driver publishes (``published``: by UUID; a node publishing none
  is ``NodeNoDraDevices``); a device published with a ``NoSchedule``/``NoExecute`` taint is unhealthy
  (``CardNotHealth``);
* **first fit in slice order**: each container's claim takes the first ``count`` cards that fit, by card index
  (hami's DRA plugin publishes its devices sorted by minor number, which is the index hami shows); no scoring of
  devices (kube-scheduler has none);
* **distinct cards**: a claim for N cards takes N different cards (the translation's ``distinctAttribute``);
  several containers' claims may share a card, each consuming its own share;
* **capacity**: each card's free memory and cores after every claim and pod on it, judged by the vendor's own
  per-card check (memory, cores, type and UUID filters, health) — the request policies of hami's driver step by
  1 MiB and 1 core, so hami's MiB and percent need no rounding; slots are not limited (a shared DRA device has
  none), so the registration's slot count never refuses a DRA-mode pod;
* **nodes**: every node where all claims fit is feasible; which of them kube-scheduler takes depends on its own
  scoring and on a prioritize extender (hami's ``dra-policy``), so :func:`choose` applies hami's node policy
  (``binpack``: the node with the highest usage score, ``spread``: the lowest; ties by name) and says so.

Not modelled: kube-scheduler's other plugins (taints, affinity, CPU) beyond what ``hami simulate`` checks, the
claims of other pods being allocated in the same moment, and exclusive (100 %) cores, which hami's per-card check
keeps for a card nobody uses while kube-scheduler counts 100 consumable cores.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import msgspec

from hami.devices.base import ContainerRequest, FitContext, Unfit
from hami.devices.table import DeviceTable
from hami.protocol.allocation import ContainerDevice, PodDevices
from hami.protocol.reasons import Reason
from hami.scheduling.dra.mapping import DraDevice
from hami.scheduling.filter import NodeRejection
from hami.scheduling.request import PodRequest
from hami.scheduling.state import ClusterState, NodeState
from hami.scheduling.usage import Charge

__all__ = ["CardCheck", "DraPlacement", "allocate", "choose", "published_cards"]

Published = Mapping[str, Mapping[str, Mapping[str, bool]]]
"""Node → vendor → UUID → whether the device is tainted (``published_cards``)."""


@dataclass(frozen=True, slots=True)
class CardCheck:
    """One card against one device of a container's claim: what it needs, what is free, the verdict (``fits`` or
    the reason codes)."""

    vendor: str
    index: int
    uuid: str
    model: str
    need_mem: int
    need_cores: int
    free_mem: int
    free_cores: int
    verdict: str


@dataclass(frozen=True, slots=True)
class DraPlacement:
    """A node's answer for a pod's claims: the cards taken (``devices``, per vendor one entry per container, as a
    placed pod's; ``charges`` what they hold) or why not (``rejection``); ``cards``: each published card against
    the first container's claim that it could not satisfy (else the pod's first claim)."""

    node: str
    devices: Mapping[str, PodDevices] = field(default_factory=dict)
    charges: tuple[Charge, ...] = ()
    rejection: NodeRejection | None = None
    cards: tuple[CardCheck, ...] = ()
    score: float = 0.0

    @property
    def fits(self) -> bool:
        return self.rejection is None


def published_cards(devices: Iterable[tuple[str, DraDevice]]) -> dict[str, dict[str, dict[str, bool]]]:
    """The published devices (``DraLedger.devices()``) by node, vendor and UUID, with whether each is tainted."""
    out: dict[str, dict[str, dict[str, bool]]] = {}
    for vendor, dev in devices:
        if dev.uuid is not None:
            out.setdefault(dev.node, {}).setdefault(vendor, {})[dev.uuid] = bool(dev.taints)
    return out


def _single(table: DeviceTable, i: int, extra: tuple[int, int], tainted: bool) -> DeviceTable:
    """Card ``i`` alone, with the pod's earlier claims on it (``extra``: MiB, cores), unlimited slots, and
    unhealthy when a driver tainted it."""
    info = table.infos[i]
    info = msgspec.structs.replace(info, count=max(info.count, table.used[i] + 1), health=info.health and not tainted)
    single = DeviceTable(table.vendor, (info,))
    single.used[0] = table.used[i]
    single.usedmem[0] = table.usedmem[i] + extra[0]
    single.usedcores[0] = table.usedcores[i] + extra[1]
    single.slices[0], single.broken[0] = table.slices[i], table.broken[i]
    return single


def _first_fit(
    state: ClusterState,
    node: NodeState,
    req: PodRequest,
    creq: ContainerRequest,
    cards: Mapping[str, bool],
    extra: dict[str, tuple[int, int]],
) -> tuple[list[ContainerDevice], dict[Reason, int], list[CardCheck]]:
    """One container's claim on one vendor's cards: the first ``nums`` that fit, in index order; every published
    card's check, and the reasons of those that do not fit."""
    table = node.tables[creq.vendor]
    one = ContainerRequest(creq.vendor, 1, creq.memreq, creq.mem_percentage, creq.coresreq, creq.priority, creq.variant)
    ctx = FitContext(req.gpu_policy, req.weights, node.cordoned, node_info=node.node_info.get(creq.vendor, {}))
    taken: list[ContainerDevice] = []
    reasons: dict[Reason, int] = {}
    checks: list[CardCheck] = []
    for i in sorted(range(len(table.infos)), key=lambda k: table.infos[k].index):
        info = table.infos[i]
        if info.id not in cards:
            continue  # not published by a DRA driver: kube-scheduler cannot allocate it
        used = extra.get(info.id, (0, 0))
        outcome = state.vendors[creq.vendor].fit(
            _single(table, i, used, cards[info.id]), one, ctx, req.selectors[creq.vendor]
        )
        free = (info.devmem - table.usedmem[i] - used[0], info.devcore - table.usedcores[i] - used[1])
        if isinstance(outcome, Unfit):
            for reason, n in outcome.counts.items():
                reasons[reason] = reasons.get(reason, 0) + n
            verdict = ", ".join(sorted(r.value for r in outcome.counts)) or "does not fit"
        else:
            verdict = "fits"
            if len(taken) < creq.nums:
                taken.append(outcome.placements[0].device)
        checks.append(
            CardCheck(
                creq.vendor, info.index, info.id, info.type, creq.memory_on(info.devmem), creq.coresreq, *free, verdict
            )
        )
    return taken, reasons, checks


def _no_devices(name: str, vendors: Iterable[str]) -> DraPlacement:
    detail = f"node {name} publishes no {'/'.join(vendors)} device in a DRA driver's ResourceSlice"
    counts = {Reason.NODE_NO_DRA_DEVICES: 1}
    return DraPlacement(name, rejection=NodeRejection(name, counts, 1, (), True, detail, Reason.NODE_NO_DRA_DEVICES))


def allocate(state: ClusterState, name: str, req: PodRequest, published: Published) -> DraPlacement:
    """The pod's claims on node ``name`` (module docstring): one claim per container, allocated in container order
    (init first), each seeing the earlier ones; the first claim that cannot be allocated rejects the node."""
    node = state.nodes.get(name)
    mine = published.get(name, {})
    if node is None or any(v not in mine or v not in node.tables for v in req.vendors):
        return _no_devices(name, req.vendors)
    devices: dict[str, list[tuple[ContainerDevice, ...]]] = {v: [] for v in req.vendors}
    extra: dict[str, tuple[int, int]] = {}
    first: list[CardCheck] = []
    for containers in req.containers:
        for vendor in req.vendors:
            creq = containers.get(vendor)
            if creq is None:
                devices[vendor].append(())
                continue
            taken, reasons, checks = _first_fit(state, node, req, creq, mine[vendor], extra)
            first = first or checks
            if len(taken) < creq.nums:
                rejection = _rejection(name, creq, reasons, len(checks), len(taken))
                return DraPlacement(name, rejection=rejection, cards=tuple(checks))
            devices[vendor].append(tuple(taken))
            for d in taken:
                mem, cores = extra.get(d.uuid, (0, 0))
                extra[d.uuid] = (mem + d.usedmem, cores + d.usedcores)
    charges = tuple(
        Charge(vendor, d.uuid, 1, d.usedmem, d.usedcores) for vendor in req.vendors for c in devices[vendor] for d in c
    )
    placed = {v: tuple(c) for v, c in devices.items()}
    return DraPlacement(name, placed, charges, cards=tuple(first), score=node.score())


def _rejection(
    name: str, creq: ContainerRequest, reasons: dict[Reason, int], published: int, fit: int
) -> NodeRejection:
    """Too few cards fit one claim: the cards' reasons, how many fit of how many asked, and
    ``NodeInsufficientDevice`` when the node does not publish as many cards as the claim asks (it never could:
    unresolvable)."""
    counts = dict(reasons)
    short = published < creq.nums
    if short:
        counts[Reason.NODE_INSUFFICIENT_DEVICE] = max(published, 1)
        detail = f"{published} card(s) published, the claim asks for {creq.nums} distinct"
    else:
        detail = (
            f"{fit} of {published} card(s) fit, the claim asks for {creq.nums}{' distinct' if creq.nums > 1 else ''}"
        )
    return NodeRejection(name, counts, max(published, 1), (), short, detail)


def choose(placements: Iterable[DraPlacement], node_policy: str) -> DraPlacement | None:
    """The feasible node hami's node policy prefers (``binpack``: highest usage score; ``spread``: lowest; ties by
    name), None when no node is feasible."""
    feasible = [p for p in placements if p.fits]
    if not feasible:
        return None
    if node_policy == "spread":
        return min(feasible, key=lambda p: (p.score, p.node))
    return min(feasible, key=lambda p: (-p.score, p.node))
