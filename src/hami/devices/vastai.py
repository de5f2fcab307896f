"""The Vastai vendor (``Vastai``), as HAMi v2.10's ``pkg/device/vastai`` schedules it (webhook-bind-plugin-vendors.md
§7).

Count-only time slicing, as Biren: ``vastaitech.com/va`` (limits, else requests) devices, one slot each, no memory
or cores (the allocation records ``<uuid>,Vastai,0,0``). Inventory: ``hami.io/node-va-register`` (JSON, §0.4) with
``devcore`` forced to 100 and, per device, ``custominfo`` holding ``DeviceStrategy`` and ``AIC`` (the physical
card a die sits on). Handshake ``hami.io/node-handshake-va``; allocation ``hami.io/Vastai-devices-to-allocate`` /
``-allocated``; filter ``vastaitech.com/use-gpuuuid`` / ``nouse-gpuuuid``; the webhook only reports "found" when
the count is in limits.

**Die mode** (the node's devices register ``DeviceStrategy: die``): every usable die is collected first; one die is
the first in policy order; several dies come from the AIC cards with the most usable dies first (all dies of one
card before the next card). Under the ``mutex`` policy a whole AIC card is exclusive: an idle die on a card another
die of which is in use is refused (``ExclusiveDeviceAllocateConflict``). Each container adds
``maxSameAIC / dies`` to the node score (1.0 when all its dies sit on one card) — HAMi's ``ScoreNode``.

Where hami differs from the reference, each kept here:

* between AIC cards with as many usable dies, the card with the lowest die index wins (HAMi: Go map order, random);
* whether the node is in die mode is read from its first registered device (HAMi reads the first device of the
  list sorted for this pod, which is the same on a node whose plugin registers one strategy);
* a die that names no AIC card is a card of its own (HAMi drops it from a multi-die choice and can then report
  success with fewer dies than asked for);
* unhealthy and cordoned dies are skipped, and bad counts refused with the container named, as for Biren.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec
from pydantic import StrictStr

from hami.devices.base import (
    ContainerRequest,
    FitContext,
    Fitted,
    NodeInventory,
    Placement,
    Selector,
    Unfit,
    too_few_devices,
)
from hami.devices.common import SharedDeviceVendor, policy_order
from hami.devices.configmodel import ConfigModel
from hami.devices.countonly import CountOnlyResources, count_request
from hami.devices.family import ChartValues, vendor_family
from hami.devices.scoring import device_scores
from hami.devices.table import DeviceTable
from hami.errors import AnnotationError
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo, decode_inventory_json
from hami.protocol.objects import Container, Node
from hami.protocol.reasons import Reason, Rejection

__all__ = ["VASTAI", "VASTAI_FAMILY", "VASTAI_KEYS", "VastaiConfig", "VastaiVendor", "aic_score"]


class VastaiConfig(ConfigModel):
    """``vastai:`` — count-only time slicing."""

    resource_count_name: StrictStr = "vastaitech.com/va"


VASTAI: Final = "Vastai"
VASTAI_KEYS: Final = keys.VendorKeys(
    VASTAI,
    register="hami.io/node-va-register",
    handshake="hami.io/node-handshake-va",
    to_allocate="hami.io/Vastai-devices-to-allocate",
    allocated="hami.io/Vastai-devices-allocated",
)
USE_UUID: Final = "vastaitech.com/use-gpuuuid"
NOUSE_UUID: Final = "vastaitech.com/nouse-gpuuuid"
DIE: Final = "die"
STRATEGY_INFO: Final = "strategy"
"""``node_info`` key: the ``DeviceStrategy`` of the node's first registered device."""
AIC_INFO: Final = "aic/"
"""``node_info`` key prefix: ``aic/<device id>`` → the AIC card of a device that may count in the AIC score."""
_CLOSEST: Final = 3


class _Custom(msgspec.Struct):
    """The part of a registered device the shared ``DeviceInfo`` leaves out: its id and ``custominfo``."""

    id: str = ""
    custominfo: dict[str, Any] | None = None


_CUSTOM_DECODER: Final = msgspec.json.Decoder(list[_Custom] | None)


def _node_info(raw: str, field: str) -> dict[str, str]:
    """``strategy`` and ``aic/<id>`` entries from the registration's ``custominfo`` objects.

    A device names an AIC card for the score when its ``custominfo`` has an ``AIC`` text and no ``DeviceStrategy``
    other than ``die`` (HAMi's ``ScoreNode`` rules)."""
    try:
        customs = _CUSTOM_DECODER.decode(raw) or []
    except msgspec.DecodeError as exc:
        raise AnnotationError(field, raw, f"custominfo does not decode: {exc}") from None
    info: dict[str, str] = {}
    for position, custom in enumerate(customs):
        extra = custom.custominfo or {}
        strategy = extra.get("DeviceStrategy")
        if position == 0 and isinstance(strategy, str):
            info[STRATEGY_INFO] = strategy
        aic = extra.get("AIC")
        if isinstance(aic, str) and strategy in (None, DIE):
            info[AIC_INFO + custom.id] = aic
    return info


def aic_score(devices: Sequence[ContainerDevice], node_info: Mapping[str, str]) -> float:
    """One container's share of HAMi's Vastai node score: the dies on its best-represented AIC card over its dies;
    0 when one of its dies does not name an AIC card (or is not a die)."""
    counts: dict[str, int] = {}
    for device in devices:
        aic = node_info.get(AIC_INFO + device.uuid)
        if aic is None:
            return 0.0
        counts[aic] = counts.get(aic, 0) + 1
    return max(counts.values()) / len(devices) if devices else 0.0


class VastaiVendor(SharedDeviceVendor):
    """HAMi's Vastai backend, configured by the ``vastai:`` section of device-config.yaml."""

    name = VASTAI
    keys = VASTAI_KEYS

    def __init__(self, config: VastaiConfig) -> None:
        super().__init__(CountOnlyResources(config.resource_count_name))
        self.config = config

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        return count_request(VASTAI, self.config.resource_count_name, container, field)

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        raw = node.metadata.annotations.get(self.keys.register)
        if raw is None:
            return None
        devices = decode_inventory_json(raw, self.keys.register)
        forced = tuple(msgspec.structs.replace(d, devcore=100) for d in devices)
        return NodeInventory(forced, node_info=_node_info(raw, self.keys.register))

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return Selector.from_annotations(annotations, (USE_UUID, NOUSE_UUID))

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        n = len(table.infos)
        if request.nums > n:
            return too_few_devices(n, request.nums)
        return _VastaiFit(table, request, ctx, selector).run()


class _VastaiFit:
    """One run of HAMi's Vastai fit over one table (see the module docstring)."""

    __slots__ = ("candidates", "counts", "ctx", "die", "misses", "occupied", "req", "selector", "table")

    def __init__(self, table: DeviceTable, req: ContainerRequest, ctx: FitContext, selector: Selector) -> None:
        self.table, self.req, self.ctx, self.selector = table, req, ctx, selector
        self.die = ctx.node_info.get(STRATEGY_INFO) == DIE
        self.occupied: frozenset[str] = frozenset()
        if self.die and ctx.policy.mutex:
            self.occupied = frozenset(
                aic for i, info in enumerate(table.infos) if table.used[i] > 0 and (aic := self._aic(info)) is not None
            )
        self.counts: dict[Reason, int] = {}
        self.misses: list[Rejection] = []
        self.candidates: list[int] = []

    def _aic(self, info: DeviceInfo) -> str | None:
        return self.ctx.node_info.get(AIC_INFO + info.id)

    def run(self) -> Fitted | Unfit:
        table, nums = self.table, self.req.nums
        for i in policy_order(table, device_scores(table, self.req, self.ctx.weights), self.ctx):
            problem = self._problem(i)
            if problem is not None:
                reason, requested, available = problem
                self.counts[reason] = self.counts.get(reason, 0) + 1
                if requested or available:
                    self.misses.append(Rejection(reason, table.infos[i].id, requested, available))
                continue
            self.candidates.append(i)
            if not self.die and len(self.candidates) == nums:
                return self._fitted(self.candidates)
        if self.die and len(self.candidates) >= nums:
            return self._fitted(self._choose_dies())
        if self.candidates:
            self.counts[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(self.candidates)
        self.misses.sort(key=lambda r: r.available, reverse=True)
        return Unfit(self.counts, len(table.infos), tuple(self.misses[:_CLOSEST]))

    def _problem(self, i: int) -> tuple[Reason, int, int] | None:
        info, table = self.table.infos[i], self.table
        if not info.health or table.broken[i] is not None:
            return (Reason.CARD_NOT_HEALTH, 0, 0)
        if info.id in self.ctx.cordoned:
            return (Reason.CARD_CORDONED, 0, 0)
        if not self.selector.uuid_ok(info.id):
            return (Reason.CARD_UUID_MISMATCH, 0, 0)
        used = table.used[i]
        if info.count <= used:
            return (Reason.CARD_TIME_SLICING_EXHAUSTED, 1, info.count - used)
        if self.ctx.policy.mutex and (used > 0 or self._aic(info) in self.occupied):
            return (Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, 0, 0)
        return None

    def _choose_dies(self) -> list[int]:
        """``nums`` of the candidate dies: the first for one; else the AIC cards with most candidates first (the
        lowest die index between equals), each card's dies in policy order."""
        nums, infos = self.req.nums, self.table.infos
        if nums == 1:
            return self.candidates[:1]
        cards: dict[str, list[int]] = {}
        for i in self.candidates:
            aic = self._aic(infos[i])
            cards.setdefault(f"aic:{aic}" if aic is not None else f"die:{infos[i].id}", []).append(i)
        ordered = sorted(cards.values(), key=lambda dies: (-len(dies), min((infos[i].index, i) for i in dies)))
        return [i for dies in ordered for i in dies][:nums]

    def _fitted(self, chosen: Sequence[int]) -> Fitted:
        placements = tuple(Placement(i, ContainerDevice(self.table.infos[i].id, VASTAI, 0, 0)) for i in chosen)
        return Fitted(placements, aic_score([p.device for p in placements], self.ctx.node_info))


VASTAI_FAMILY: Final = vendor_family(
    "vastai",
    VastaiConfig,
    VastaiVendor,
    chart=ChartValues({"resourceCountName": "vastaiResourceName"}, ("resourceCountName",)),
)
"""The registry entry: the ``vastai:`` section, one vendor."""
