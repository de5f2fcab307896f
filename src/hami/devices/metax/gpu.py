"""MetaX whole cards (``Metax-GPU``, webhook-bind-plugin-vendors.md §7): one card per device, no sharing.

* inventory: derived from ``node.status.capacity[metax-tech.com/gpu]`` — ``n`` cards ``<node>-metax-<i>``, each
  one slot, 65536 MiB, 100 cores; no registration annotation, no handshake (a node is healthy iff the capacity is
  above 0), no node lock (the MetaX device plugin takes none);
* requests: ``metax-tech.com/gpu`` (limits first, requests as the fallback) — whole cards;
* fit: the shared checks in the pod's GPU policy order; each container takes idle cards of its own, so a pod's
  containers spread over distinct cards (one slot a card). HAMi v2.10 also required every container on the card of
  the earlier ones (``CardNotFoundCustomFilterRule``), which refused any second container; HAMi has since removed
  that filter (its ``Test_Fit_MultiContainerPodSpreadsOverCards``), and so does hami;
* node score: the node annotations ``metax-tech.com/gpu.topology.losses`` (binpack: ``2000 − loss[n]``) and
  ``…scores`` (spread: ``2000 − score[n]``), JSON maps keyed by the pod's card count ``n`` (a missing count reads
  0). Deliberate difference: a malformed map quarantines the node's MetaX cards with a message naming the
  annotation (HAMi logs it and scores the node 2000, as if the topology were perfect).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Final

import msgspec

from hami.devices.admission import Admitter, CountInLimits
from hami.devices.base import (
    ContainerRequest,
    FitContext,
    Fitted,
    NodeInventory,
    Placement,
    ResourceNames,
    Selector,
    Unfit,
    too_few_devices,
)
from hami.devices.common import SharedDeviceVendor, policy_order
from hami.devices.metax.config import MetaxConfig
from hami.devices.resources import lookup_resource, whole_quantity
from hami.devices.scoring import device_scores
from hami.devices.table import DeviceTable
from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol._gojson import GoInt, decode
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Container, Node
from hami.protocol.quantity import INT32_MAX, quantity_as_int
from hami.protocol.reasons import Reason, Rejection

__all__ = ["GPU", "GPU_KEYS", "TOPOLOGY_LOSSES", "TOPOLOGY_SCORES", "MetaxGpuVendor", "topology_score"]

GPU: Final = "Metax-GPU"
GPU_KEYS: Final = keys.VendorKeys(
    GPU,
    register="",
    handshake=None,
    to_allocate="hami.io/metax-gpu-devices-to-allocate",
    allocated="hami.io/metax-gpu-devices-allocated",
    lock=None,
)
TOPOLOGY_LOSSES: Final = "metax-tech.com/gpu.topology.losses"
TOPOLOGY_SCORES: Final = "metax-tech.com/gpu.topology.scores"
CARD_MEMORY: Final = 65536
"""MiB HAMi registers for each whole MetaX card (the capacity does not say)."""
_MAX_CARDS: Final = 1024
_TOPOLOGY: Final = msgspec.json.Decoder(dict[int, GoInt])
_CLOSEST: Final = 3


def _capacity_cards(node: Node, resource: str) -> int | None:
    raw = node.status.capacity.get(resource) if resource else None
    if raw is None:
        return None
    where = f"status.capacity[{resource}]"
    number = quantity_as_int(raw, where)
    if not 0 <= number <= _MAX_CARDS:
        raise InvalidInput(where, raw, f"a MetaX card count must be between 0 and {_MAX_CARDS}")
    return number


@lru_cache(maxsize=256)
def _topology_map(value: str, field: str) -> Mapping[int, int]:
    return decode(value, _TOPOLOGY, field) or {}


def topology_score(node_info: Mapping[str, str], node_policy: str, cards: int) -> float:
    """HAMi's ``ScoreNode`` for a pod holding ``cards`` MetaX cards on the node: binpack prefers a low topology loss,
    spread a high topology score (spread ranks low node scores first); 0 without the annotation or without cards."""
    key = TOPOLOGY_SCORES if node_policy == "spread" else TOPOLOGY_LOSSES
    raw = node_info.get(key)
    if raw is None or cards == 0:
        return 0.0
    return float(2000 - _topology_map(raw, key).get(cards, 0))


class MetaxGpuVendor(SharedDeviceVendor):
    """HAMi's MetaX whole-card backend (``metax:`` section, ``resourceCountName``)."""

    name = GPU
    keys = GPU_KEYS

    def __init__(self, config: MetaxConfig) -> None:
        self.config = config
        self.resources = ResourceNames(count=config.resource_count_name, memory=None, core=None)

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        found = lookup_resource(container, self.config.resource_count_name)
        if found is None:
            return None
        section, raw = found
        where = f"{field}.{section}[{self.config.resource_count_name}]"
        count = whole_quantity(where, raw, INT32_MAX, "exceeds the int32 range HAMi's annotations can carry")
        if count == 0:
            return None
        return ContainerRequest(vendor=GPU, nums=count, memreq=0, mem_percentage=100, coresreq=100)

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        cards = _capacity_cards(node, self.config.resource_count_name)
        if cards is None:
            return None
        name = node.metadata.name
        devices = tuple(
            DeviceInfo(id=f"{name}-metax-{i}", index=i, count=1, devmem=CARD_MEMORY, devcore=100, type=GPU, health=True)
            for i in range(cards)
        )
        info: dict[str, str] = {}
        for key in (TOPOLOGY_LOSSES, TOPOLOGY_SCORES):
            raw = node.metadata.annotations.get(key)
            if raw is not None:
                _topology_map(raw, key)  # refuse a malformed map now: the node is quarantined for MetaX cards
                info[key] = raw
        return NodeInventory(devices, node_info=info)

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return Selector()  # HAMi's MetaX card backend reads no type or uuid filter

    def admitter(self) -> Admitter:
        return CountInLimits(self.config.resource_count_name)

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        n = len(table.infos)
        if request.nums > n:
            return too_few_devices(n, request.nums)
        counts: dict[Reason, int] = {}
        misses: list[Rejection] = []
        accepted: list[Placement] = []
        for i in policy_order(table, device_scores(table, request, ctx.weights), ctx):
            info = table.infos[i]
            problem = _card_problem(table, i, ctx, accepted)
            if problem is not None:
                counts[problem[0]] = counts.get(problem[0], 0) + 1
                if problem[1] or problem[2]:
                    misses.append(Rejection(problem[0], info.id, problem[1], problem[2]))
                continue
            accepted.append(Placement(i, ContainerDevice(info.id, GPU, info.devmem, 100)))
            if len(accepted) == request.nums:
                before = sum(len(c) for c in ctx.chosen)
                gain = topology_score(ctx.node_info, ctx.node_policy, before + request.nums)
                gain -= topology_score(ctx.node_info, ctx.node_policy, before)
                return Fitted(tuple(accepted), gain)
        if accepted:
            counts[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(accepted)
        misses.sort(key=lambda r: r.available, reverse=True)
        return Unfit(counts, n, tuple(misses[:_CLOSEST]))


def _card_problem(
    table: DeviceTable, i: int, ctx: FitContext, accepted: Sequence[Placement]
) -> tuple[Reason, int, int] | None:
    """The first reason card ``i`` cannot be given whole to this container, in HAMi's order."""
    info = table.infos[i]
    if not info.health or table.broken[i] is not None:
        return (Reason.CARD_NOT_HEALTH, 0, 0)
    if info.id in ctx.cordoned:
        return (Reason.CARD_CORDONED, 0, 0)
    if info.count <= table.used[i]:
        return (Reason.CARD_TIME_SLICING_EXHAUSTED, 1, info.count - table.used[i])
    if ctx.quota is not None and not ctx.quota(accepted, info.devmem, 100, info.id):
        return (Reason.RESOURCE_QUOTA_NOT_FIT, info.devmem, 0)
    return _room_problem(table, i)


def _room_problem(table: DeviceTable, i: int) -> tuple[Reason, int, int] | None:
    """Memory, cores and an idle card."""
    info = table.infos[i]
    free_mem = info.devmem - table.usedmem[i]
    if free_mem < info.devmem:
        return (Reason.CARD_INSUFFICIENT_MEMORY, info.devmem, free_mem)
    free_cores = info.devcore - table.usedcores[i]
    if free_cores < 100:
        return (Reason.CARD_INSUFFICIENT_CORE, 100, free_cores)
    if table.used[i] > 0:
        return (Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, 100, free_cores)
    return None
