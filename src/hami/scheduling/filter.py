"""``filter``: one node → the devices for every container of the pod, or every reason it does not fit.

Containers are fitted as they run (scheduler-core.md §4.4, plus sidecars): sidecar and app containers
accumulate on one scratch copy of the node's tables; each regular init container is tried on its own copy
of what the sidecars before it hold (init containers run one at a time). Only the candidate node's tables
are copied, never the node, another node or a pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hami.devices.base import ContainerRequest, FitContext, Fitted, Placement, QuotaCheck, SliceAt, Unfit
from hami.devices.table import DeviceTable
from hami.protocol.allocation import ContainerDevice, PodDevices
from hami.protocol.reasons import Reason, Rejection, summarize
from hami.scheduling.request import PodRequest
from hami.scheduling.state import ClusterState, NodeState
from hami.scheduling.usage import Kind, effective_charges

__all__ = ["NodeFit", "NodeRejection", "filter_node", "unregistered"]


@dataclass(frozen=True, slots=True)
class NodeFit:
    """A node that can run the pod: per vendor, per container (init first), the placements chosen, and the
    vendors' contributions to the node score for this choice (``Fitted.score``, summed). (Its usage score is the
    next stage's: ``hami.scheduling.decide.score``.)"""

    node: str
    placements: Mapping[str, tuple[tuple[Placement, ...], ...]]
    score: float = 0.0

    def pod_devices(self) -> dict[str, PodDevices]:
        return {v: tuple(tuple(p.device for p in c) for c in per) for v, per in self.placements.items()}

    def slices(self) -> dict[str, tuple[SliceAt, ...]]:
        """Per vendor, the slices chosen on partitioned devices (vendors without any are left out)."""
        out: dict[str, tuple[SliceAt, ...]] = {}
        for vendor, per in self.placements.items():
            found = tuple(
                SliceAt(ci, di, p.device.uuid, p.slice)
                for ci, container in enumerate(per)
                for di, p in enumerate(container)
                if p.slice is not None
            )
            if found:
                out[vendor] = found
        return out


@dataclass(frozen=True, slots=True)
class NodeRejection:
    """Why a node cannot run the pod. ``counts`` are devices per reason out of ``total`` (HAMi's numbers);
    ``unresolvable`` means it could not run the pod even if it were empty (preemption would not help).
    ``node_reason`` is set when the whole node was turned down before any device was judged: ``NodeUnregistered``
    (no registration for a vendor of the pod, or no such node), ``NodeQuarantined`` (its registration was refused
    as malformed) or ``NodeDevicesNotAllocatable`` (kubelet does not report the registered devices as allocatable:
    the device plugin is gone or restarting); ``detail`` says the same for a person."""

    node: str
    counts: Mapping[Reason, int]
    total: int
    closest: tuple[Rejection, ...] = ()
    unresolvable: bool = False
    detail: str = ""
    node_reason: Reason | None = field(default=None, compare=False)
    """(Left out of ``==``: it goes with ``detail``, which is compared.)"""

    @property
    def summary(self) -> str:
        """HAMi's reason text (``"1/4 CardInsufficientMemory, 3/4 CardTypeMismatch"``), or the detail."""
        text = summarize(self.counts, self.total)
        if self.detail:
            return f"{self.detail}; {text}" if text else self.detail
        return text


def _whole_node(node: NodeState, vendors: Sequence[str]) -> NodeRejection | None:
    """The node turned down as a whole: a vendor of the pod has no registration there (refused, or none), or kubelet
    does not back its registered devices (``NodeState.unallocatable``). Unresolvable: no eviction changes either;
    the node is judged afresh on its next update (kubelet reporting the devices again)."""
    missing = [v for v in vendors if v not in node.tables]
    if not missing:
        short = [v for v in vendors if v in node.unallocatable]
        if not short:
            return None
        detail = f"{Reason.NODE_DEVICES_NOT_ALLOCATABLE.value}: {short[0]} devices: {node.unallocatable[short[0]]}"
        reason = Reason.NODE_DEVICES_NOT_ALLOCATABLE
        return NodeRejection(node.name, {}, 0, unresolvable=True, detail=detail, node_reason=reason)
    problems = [node.problems[v] for v in missing if v in node.problems]
    if problems:
        detail = f"registration refused: {problems[0]}"
        return NodeRejection(node.name, {}, 0, unresolvable=True, detail=detail, node_reason=Reason.NODE_QUARANTINED)
    return unregistered(node.name, f"node unregistered for {', '.join(missing)}")


def unregistered(node: str, detail: str = "node unregistered") -> NodeRejection:
    """The rejection of a node with no registration for a vendor of the pod, or no such node at all."""
    return NodeRejection(node, {}, 0, unresolvable=True, detail=detail, node_reason=Reason.NODE_UNREGISTERED)


def _quota_check(
    state: ClusterState,
    req: PodRequest,
    vendor: str,
    done: Sequence[Sequence[Placement]],
    kinds: Sequence[Kind],
    pos: int,
) -> QuotaCheck | None:
    """A ``QuotaCheck`` for container ``pos`` of ``req``, or None when the namespace has no device limits."""
    if not state.quotas.has_limits(req.namespace):
        return None
    names = state.vendors[vendor].resources

    def check(accepted: Sequence[Placement], mem: int, cores: int, uuid: str) -> bool:
        # The candidate carries its real UUID: collapsed per device, an app container on the GPU an earlier init
        # container used counts max(init, app) there, as the ledger will charge it — not init + app.
        current = (*(p.device for p in accepted), ContainerDevice(uuid, vendor, mem, cores))
        containers = [tuple(p.device for p in c) for c in done] + [current]
        charges = effective_charges({vendor: tuple(containers)}, kinds[: pos + 1])
        amounts: dict[str, int] = {}
        if names.memory:
            amounts[names.memory] = sum(c.mem for c in charges)
        if names.core:
            amounts[names.core] = sum(c.cores for c in charges)
        return state.quotas.fits(req.namespace, amounts, state.quota_factors)

    return check


def filter_node(state: ClusterState, node: NodeState, req: PodRequest, empty: bool = False) -> NodeFit | NodeRejection:
    """Fit every container of ``req`` on ``node``; pure (only scratch tables change).

    With ``empty=True`` the node is judged without any usage and without the namespace quota — used to tell
    nodes that can never run the pod.
    """
    vendors = req.vendors
    turned_down = _whole_node(node, vendors)
    if turned_down is not None:
        return turned_down
    work: dict[str, DeviceTable] = {v: node.tables[v].empty() if empty else node.tables[v].scratch() for v in vendors}
    placements: dict[str, list[tuple[Placement, ...]]] = {v: [] for v in vendors}
    counts: dict[Reason, int] = {}
    total = 0
    closest: list[Rejection] = []
    bonus = 0.0
    failed = False
    for pos, creqs in enumerate(req.containers):
        kind = req.kinds[pos] if pos < len(req.kinds) else Kind.APP
        for vendor in vendors:
            creq: ContainerRequest | None = creqs.get(vendor)
            if creq is None:
                placements[vendor].append(())
                continue
            table = work[vendor].scratch() if kind is Kind.INIT else work[vendor]
            ctx = FitContext(
                policy=req.gpu_policy,
                weights=req.weights,
                cordoned=node.cordoned,
                pair_scores=node.pair_scores.get(vendor, {}),
                node_info=node.node_info.get(vendor, {}),
                chosen=tuple(placements[vendor]),
                node_policy=req.node_policy,
                # The never-fits judgement ignores the namespace quota: freeing quota (deleting or preempting
                # pods of the namespace) can make the pod fit, so such a node is not unresolvable.
                quota=None if empty else _quota_check(state, req, vendor, placements[vendor], req.kinds, pos),
            )
            outcome = state.vendors[vendor].fit(table, creq, ctx, req.selectors[vendor])
            if isinstance(outcome, Unfit):
                failed = True
                for reason, n in outcome.counts.items():
                    counts[reason] = counts.get(reason, 0) + n
                total = max(total, outcome.total)
                closest.extend(outcome.closest)
                break
            placements[vendor].append(outcome.placements)
            bonus += outcome.score
            if kind is not Kind.INIT:
                _reserve_scratch(table, outcome)
        if failed:
            break
    if failed:
        closest.sort(key=lambda r: r.available, reverse=True)
        return NodeRejection(node.name, counts, total, tuple(closest[:3]))
    return NodeFit(node.name, {v: tuple(p) for v, p in placements.items()}, bonus)


def _reserve_scratch(table: DeviceTable, fitted: Fitted) -> None:
    for p in fitted.placements:
        positions = (p.slice.position,) if p.slice is not None and p.slice.position is not None else ()
        table.charge(p.index, 1, p.device.usedmem, p.device.usedcores, positions)
