"""MetaX shared GPUs (``Metax-SGPU``, webhook-bind-plugin-vendors.md §7, vendors-appendix.md): slices of a card.

* inventory: ``metax-tech.com/node-gpu-devices`` JSON (``wire``); no handshake (a node is healthy iff it lists
  a device); the shared node lock ``hami.io/mutex.lock``;
* requests, read from **limits only** (HAMi ``metax/sdevice.go:222``): ``metax-tech.com/sgpu`` (count),
  ``metax-tech.com/vcore`` (percent of a card, default 100), ``metax-tech.com/vmemory`` (a bare number counts
  GiB, a number with a unit counts bytes; no memory = the whole card's);
* pod options: QoS policy ``metax-tech.com/sgpu-qos-policy`` (best-effort, fixed-share, burst-share; the webhook
  sets best-effort when absent), app class ``metax-tech.com/sgpu-app-class`` (online, offline; one device only),
  ``metax-tech.com/sgpu-topology-aware`` (overrides the config's ``sgpuTopologyAware``), uuid filters
  ``metax-tech.com/use-gpuuuid`` / ``nouse-gpuuuid``;
* fit: each device checked in HAMi's order (``CardUnhealthy``, ``CardAppClassMismatch``,
  ``CardQosPolicyMismatch``, uuid, slots, mutex, memory, cores, exclusive use, compute units), then the request
  is served from the candidates — online pods prefer devices with fewer online pods, whole-card requests prefer
  devices of one MetaLink zone;
* annotations: the usual to-allocate/allocated pair, ``metax-tech.com/gpu-devices-allocated`` JSON and
  ``metax-tech.com/predicate-time`` (Unix nanoseconds);
* node score: ±10000 (binpack/spread) × the online penalty or the MetaLink score of the choice.

What HAMi keeps in a process-local cache (the QoS a device was just switched to, the pods on a device) hami
keeps in the ledger: every share a pod holds carries a ``ShareTag`` (its QoS policy and app class) as the
device's slice position, decoded again from the pod's annotations after a restart.

Deliberate differences: negative, fractional, out-of-range and above-100 values are refused with a message
(HAMi drops the request, or in the webhook answers an error); a memory with a unit below 1 MiB is refused (HAMi
reads it as 0, i.e. the whole card); ``vmemory: 1000`` counts 1000 GiB (HAMi formats the quantity first,
``1k``, and then reads it as bytes); equal-sized MetaLink zones are taken in zone order (HAMi: map order).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from contextlib import suppress
from typing import Final

from hami.devices.admission import Admitter
from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    AnnotationContext,
    ContainerRequest,
    FitContext,
    Fitted,
    NodeInventory,
    Placement,
    ResourceNames,
    Selector,
    Slice,
    Unfit,
    parse_bool,
)
from hami.devices.common import SharedDeviceVendor, policy_order
from hami.devices.metax.admission import APP_CLASS, QOS_POLICY, SgpuAdmitter
from hami.devices.metax.config import MetaxConfig
from hami.devices.metax.topology import link_score, prefer_link_zones
from hami.devices.metax.wire import (
    OFFLINE,
    ONLINE,
    SGPU,
    ShareTag,
    decode_node_devices,
    encode_allocated,
    link_zone,
    qos_policy,
    share_tag,
    share_tags,
    tags_on,
)
from hami.devices.resources import whole_quantity
from hami.devices.scoring import device_scores
from hami.devices.table import DeviceTable
from hami.errors import InvalidInput, QuantityError
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice
from hami.protocol.objects import Container, Node, QuantityValue
from hami.protocol.quantity import INT32_MAX, quantity_as_int
from hami.protocol.reasons import Reason, Rejection

__all__ = ["ALLOCATED_JSON", "PREDICATE_TIME", "SGPU_KEYS", "TOPOLOGY_AWARE", "MetaxSgpuVendor"]

REGISTER: Final = "metax-tech.com/node-gpu-devices"
ALLOCATED_JSON: Final = "metax-tech.com/gpu-devices-allocated"
PREDICATE_TIME: Final = "metax-tech.com/predicate-time"
TOPOLOGY_AWARE: Final = "metax-tech.com/sgpu-topology-aware"
USE_UUID: Final = "metax-tech.com/use-gpuuuid"
NOUSE_UUID: Final = "metax-tech.com/nouse-gpuuuid"
SGPU_KEYS: Final = keys.VendorKeys(
    SGPU,
    register=REGISTER,
    handshake=None,
    to_allocate="hami.io/metax-sgpu-devices-to-allocate",
    allocated="hami.io/metax-sgpu-devices-allocated",
    extra=(ALLOCATED_JSON, PREDICATE_TIME),
)
_MIB: Final = 1 << 20
_GIB_IN_MIB: Final = 1024
_SCORE_WEIGHT: Final = 10000
_CLOSEST: Final = 3
_INT32_REASON: Final = "exceeds the int32 range HAMi's annotations can carry"

Problem = tuple[Reason, int, int]


def _has_unit(raw: QuantityValue) -> bool:
    return isinstance(raw, str) and any(c.isascii() and c.isalpha() for c in raw)


def _memory_mib(raw: QuantityValue, where: str) -> int:
    """``vmemory`` in MiB: a bare number counts GiB, a number with a unit counts bytes."""
    if _has_unit(raw):
        number = quantity_as_int(raw, where)
        if number < 0:
            raise QuantityError(where, raw, "must not be negative")
        mib = number // _MIB
        if number and not mib:
            raise QuantityError(where, raw, "is less than 1 MiB (a bare number counts GiB)")
    else:
        mib = whole_quantity(where, raw, INT32_MAX, _INT32_REASON) * _GIB_IN_MIB
    if mib > INT32_MAX:
        raise QuantityError(where, raw, f"is {mib} MiB, which {_INT32_REASON}")
    return mib


class MetaxSgpuVendor(SharedDeviceVendor):
    """HAMi's MetaX sGPU backend (``metax:`` section, the ``resourceV*`` names)."""

    name = SGPU
    keys = SGPU_KEYS
    reads_slices = True  # the QoS policy a card's pods share is in their annotations

    def __init__(self, config: MetaxConfig) -> None:
        self.config = config
        # A bare vmemory counts GiB: HAMi's memory factor 1024 (a vmemory quota counts GiB).
        self.resources = ResourceNames(
            count=config.resource_v_count_name,
            memory=config.resource_v_memory_name or None,
            core=config.resource_v_core_name or None,
            memory_factor=_GIB_IN_MIB,
        )

    def _limit(self, container: Container, name: str, field: str) -> tuple[QuantityValue, str] | None:
        if not name or name not in container.resources.limits:
            return None
        return container.resources.limits[name], f"{field}.limits[{name}]"

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        found = self._limit(container, self.config.resource_v_count_name, field)
        if found is None:
            return None
        count = whole_quantity(found[1], found[0], INT32_MAX, _INT32_REASON)
        if count == 0:
            return None
        cores = 100
        core = self._limit(container, self.config.resource_v_core_name, field)
        if core is not None:
            cores = whole_quantity(core[1], core[0], INT32_MAX, _INT32_REASON)
            if cores > 100:
                raise QuantityError(core[1], core[0], "cores are a percentage of one card and cannot exceed 100")
        mem = 0
        memory = self._limit(container, self.config.resource_v_memory_name, field)
        if memory is not None:
            mem = _memory_mib(*memory)
        return ContainerRequest(
            vendor=SGPU,
            nums=count,
            memreq=mem,
            mem_percentage=100 if mem == 0 else MEM_PERCENTAGE_UNSET,
            coresreq=cores,
        )

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        raw = node.metadata.annotations.get(REGISTER)
        if raw is None:
            return None
        return decode_node_devices(raw, REGISTER)

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        options = tuple(
            sorted((k, annotations[k]) for k in (APP_CLASS, QOS_POLICY, TOPOLOGY_AWARE) if k in annotations)
        )
        return Selector.from_annotations(annotations, (USE_UUID, NOUSE_UUID), options=options)

    def admitter(self) -> Admitter:
        return SgpuAdmitter(self.config.resource_v_count_name)

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        return _SgpuFit(table, request, ctx, selector, self.config.sgpu_topology_aware).run()

    def extra_annotations(self, ctx: AnnotationContext) -> dict[str, str]:
        if not any(ctx.devices):
            return {}
        return {ALLOCATED_JSON: encode_allocated(ctx.devices), PREDICATE_TIME: str(ctx.now_ns)}

    def decode_slices(self, annotations: Mapping[str, str]) -> tuple[tuple[str, Hashable], ...]:
        value = annotations.get(self.keys.allocated)
        if value is None:
            return ()
        devices = self.decode(value, self.keys.allocated)
        qos, app = annotations.get(QOS_POLICY, ""), annotations.get(APP_CLASS, "")
        return tuple(share_tags(devices, qos, app))


def _classes(tags: Sequence[ShareTag]) -> tuple[int, int]:
    """(online, offline) shares on a device."""
    return sum(t.app_class == ONLINE for t in tags), sum(t.app_class == OFFLINE for t in tags)


def _online_penalty(tags: Sequence[ShareTag]) -> int:
    online, offline = _classes(tags)
    if offline and not online:
        return -100 * offline
    return -20 * online - 2 * offline


class _SgpuFit:
    """One run of HAMi's sGPU Fit over one table: every device judged, then the request served from the
    candidates."""

    def __init__(self, table: DeviceTable, req: ContainerRequest, ctx: FitContext, sel: Selector, topo: bool):
        self.table, self.req, self.ctx, self.sel = table, req, ctx, sel
        self.app = sel.option(APP_CLASS)
        self.qos = sel.option(QOS_POLICY)
        self.online = self.app == ONLINE
        self.topology_aware = topo
        raw = sel.option(TOPOLOGY_AWARE)
        if raw:
            with suppress(InvalidInput):  # HAMi ignores a value it cannot read
                self.topology_aware = parse_bool(raw, TOPOLOGY_AWARE)
        self.counts: dict[Reason, int] = {}
        self.misses: list[Rejection] = []

    def run(self) -> Fitted | Unfit:
        table, req = self.table, self.req
        candidates: list[int] = []
        for i in policy_order(table, device_scores(table, req, self.ctx.weights), self.ctx):
            problem = self._problem(i)
            if problem is None:
                candidates.append(i)
                continue
            reason, requested, available = problem
            self.counts[reason] = self.counts.get(reason, 0) + 1
            if requested or available:
                self.misses.append(Rejection(reason, table.infos[i].id, requested, available))
        if len(candidates) < req.nums:
            if candidates:
                self.counts[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(candidates)
            return self._unfit()
        chosen = self._choose(candidates)
        placements = tuple(self._placement(i) for i in chosen)
        if self.ctx.quota is not None and not self._quota_ok(placements):
            self.counts[Reason.RESOURCE_QUOTA_NOT_FIT] = len(placements)
            return self._unfit()
        return Fitted(placements, self._score(chosen))

    def _unfit(self) -> Unfit:
        self.misses.sort(key=lambda r: r.available, reverse=True)
        return Unfit(self.counts, len(self.table.infos), tuple(self.misses[:_CLOSEST]))

    def _problem(self, i: int) -> Problem | None:
        table, info = self.table, self.table.infos[i]
        if not info.health or table.broken[i] is not None:
            return (Reason.CARD_UNHEALTHY, 0, 0)
        if info.id in self.ctx.cordoned:
            return (Reason.CARD_CORDONED, 0, 0)
        tags = tags_on(table.slices[i])
        if table.used[i] > 0 and not self._app_class_ok(tags):
            return (Reason.CARD_APP_CLASS_MISMATCH, 0, 0)
        if not self.online and not self._qos_ok(i, tags):
            return (Reason.CARD_QOS_POLICY_MISMATCH, 0, 0)
        if not self.sel.uuid_ok(info.id):
            return (Reason.CARD_UUID_MISMATCH, 0, 0)
        return self._share_problem(i)

    def _share_problem(self, i: int) -> Problem | None:
        """Slots, the mutex policy, then room."""
        table, info = self.table, self.table.infos[i]
        if info.count <= table.used[i]:
            return (Reason.CARD_TIME_SLICING_EXHAUSTED, 1, info.count - table.used[i])
        if self.ctx.policy.mutex and table.used[i] > 0:
            return (Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, 0, 0)
        return self._room_problem(i)

    def _room_problem(self, i: int) -> Problem | None:
        table, info, cores = self.table, self.table.infos[i], self.req.coresreq
        memreq = self.req.memory_on(info.devmem)
        free_mem = info.devmem - table.usedmem[i]
        if free_mem < memreq:
            return (Reason.CARD_INSUFFICIENT_MEMORY, memreq, free_mem)
        if self.online:
            return None  # an online pod takes no cores: it preempts the offline ones
        free_cores = info.devcore - table.usedcores[i]
        if free_cores < cores:
            return (Reason.CARD_INSUFFICIENT_CORE, cores, free_cores)
        if cores >= 100 and table.used[i] > 0:
            return (Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, cores, free_cores)
        if info.devcore != 0 and table.usedcores[i] >= info.devcore and cores == 0:
            return (Reason.CARD_COMPUTE_UNITS_EXHAUSTED, 0, 0)
        return None

    def _app_class_ok(self, tags: Sequence[ShareTag]) -> bool:
        """HAMi's ``checkAppClass`` on a device in use: classed pods (online/offline) and plain pods never share
        a device, and an offline pod does not join a device running an online one (it would be suspended)."""
        online, offline = _classes(tags)
        classed = self.app in (ONLINE, OFFLINE)
        if bool(online or offline) != classed:
            return False
        return not (online and self.app == OFFLINE)

    def _qos_ok(self, i: int, tags: Sequence[ShareTag]) -> bool:
        """HAMi's ``checkDeviceQos``: an idle device takes any policy, a whole-card request needs none; otherwise
        the device's policy (from the pods holding it, else the device plugin's report) must be none or equal."""
        if self.table.used[i] == 0 or self.req.coresreq == 100:
            return True
        held = next((t.qos for t in tags if t.qos), None)
        current = held if held is not None else qos_policy(self.ctx.node_info, self.table.infos[i].id)
        return current in ("", self.qos)

    def _choose(self, candidates: list[int]) -> list[int]:
        n = self.req.nums
        if len(candidates) <= n:
            return candidates
        if self.app:
            if self.online:
                return sorted(candidates, key=lambda i: _online_rank(tags_on(self.table.slices[i])))[:n]
            return candidates[:n]
        if self.req.coresreq == 100:
            return prefer_link_zones(candidates, n, [self._zone(i) for i in candidates])
        return candidates[:n]

    def _zone(self, i: int) -> int:
        return link_zone(self.ctx.node_info, self.table.infos[i].id)

    def _placement(self, i: int) -> Placement:
        info = self.table.infos[i]
        cores = 0 if self.online else self.req.coresreq
        device = ContainerDevice(info.id, SGPU, self.req.memory_on(info.devmem), cores)
        return Placement(i, device, Slice("", share_tag(self.qos, self.app, cores)))

    def _quota_ok(self, placements: Sequence[Placement]) -> bool:
        quota = self.ctx.quota
        assert quota is not None
        accepted: list[Placement] = []
        for p in placements:
            if not quota(accepted, p.device.usedmem, p.device.usedcores, p.device.uuid):
                return False
            accepted.append(p)
        return True

    def _score(self, chosen: Sequence[int]) -> float:
        weight = -_SCORE_WEIGHT if self.ctx.node_policy == "spread" else _SCORE_WEIGHT
        if self.online:
            return float(weight * sum(_online_penalty(tags_on(self.table.slices[i])) for i in chosen))
        if self.topology_aware and self.req.coresreq == 100:
            idle = [i for i in range(len(self.table.infos)) if self.table.used[i] == 0]
            return float(weight * link_score(idle, chosen, self._zone))
        return 0.0


def _online_rank(tags: Sequence[ShareTag]) -> tuple[int, int, int]:
    """HAMi's order for online pods: devices holding only offline shares last (fewer of them first), the others by
    fewer online shares, then fewer offline ones."""
    online, offline = _classes(tags)
    if online == 0 and offline > 0:
        return (1, offline, 0)
    return (0, online, offline)
