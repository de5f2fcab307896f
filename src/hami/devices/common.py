"""The shared fit loop: every vendor with slot/memory/core sharing uses it (scheduler-core.md §6.2–§6.7).

Checks run per device in HAMi's order and the first failing one is counted (``Unfit.counts``), exactly as
HAMi's reason strings count them. Vendors differ in the request they build, the ``Selector``, the device order
(``SharedDeviceVendor.order``) and, for devices carved into fixed slices, the partition hook (``Partitions``):
the loop asks it for slices and never knows what they are.

Deliberate differences from HAMi, each kept in one place here:

* exclusive rule: a request of 100 or more cores needs an idle device whatever the device's core total
  (HAMi applies it only when ``devcore == 100``, spec §11 item 12);
* the device score used for ordering includes the pod's own request (HAMi's never matches, §11 item 2);
* a slice of a partitioned device (``Partitions``; NVIDIA: a MIG instance) is checked against the namespace quota
  with its template's memory and cores — what the ledger will charge — as well as with the request's (HAMi
  checks only the request, so 1 MiB requests could take whole 1g.5gb instances past a quota);
* ``topology-aware`` together with NUMA binding picks the best group across all NUMA nodes (HAMi keeps only
  the last group visited, §11 item 11) and counts ``NumaNotFit`` for groups that were too small.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from itertools import combinations
from math import comb
from typing import ClassVar, Protocol

from hami.devices.admission import Admitter, CountInLimits
from hami.devices.base import (
    AnnotationContext,
    ContainerRequest,
    FitContext,
    Fitted,
    Partitions,
    Placement,
    ResourceNames,
    Selector,
    Unfit,
    too_few_devices,
)
from hami.devices.scoring import CLOSEST, device_scores
from hami.devices.screening import Screener, shared_screener
from hami.devices.table import DeviceTable
from hami.protocol.allocation import ContainerDevice, PodDevices, decode_pod_devices, encode_pod_devices
from hami.protocol.inventory import DeviceInfo
from hami.protocol.reasons import Reason, Rejection

__all__ = [
    "EXHAUSTIVE_SUBSETS",
    "Gather",
    "SharedDeviceVendor",
    "best_combination",
    "fit_shared",
    "policy_order",
    "worst_single",
]


def _pair(scores: FitContext, a: str, b: str) -> int:
    row = scores.pair_scores.get(a)
    return row.get(b, 0) if row else 0


def worst_single(ctx: FitContext, candidates: Sequence[Placement]) -> Placement:
    """One GPU: the candidate least connected to the other candidates (keeps well-connected GPUs free)."""
    best = candidates[0]
    best_total: int | None = None
    for c in candidates:
        total = sum(_pair(ctx, c.device.uuid, o.device.uuid) for o in candidates if o is not c)
        if best_total is None or total < best_total:
            best, best_total = c, total
    return best


EXHAUSTIVE_SUBSETS = 50_000
"""Above this many n-subsets, ``best_combination`` searches greedily instead of trying every subset. Every node of
up to 16 GPUs stays exhaustive (C(16, 8) = 12,870); a registration with hundreds of devices cannot stall Filter."""


def best_combination(ctx: FitContext, candidates: Sequence[Placement], n: int) -> tuple[int, tuple[Placement, ...]]:
    """Several GPUs: the n-subset with the highest sum of pair scores (first in lexicographic order wins ties).

    Exhaustive as in HAMi while there are at most ``EXHAUSTIVE_SUBSETS`` subsets; beyond that (HAMi would try
    them all, which never ends for a few hundred devices) a greedy search from every starting candidate.
    """
    if comb(len(candidates), n) > EXHAUSTIVE_SUBSETS:
        return _greedy_combination(ctx, candidates, n)
    best: tuple[Placement, ...] = tuple(candidates[:n])
    best_score: int | None = None
    for combo in combinations(candidates, n):
        score = sum(_pair(ctx, a.device.uuid, b.device.uuid) for a, b in combinations(combo, 2))
        if best_score is None or score > best_score:
            best, best_score = combo, score
    return best_score or 0, best


def _greedy_combination(ctx: FitContext, candidates: Sequence[Placement], n: int) -> tuple[int, tuple[Placement, ...]]:
    """From each candidate in turn, add the candidate that raises the subset's score most (first wins ties);
    keep the best subset found (O(len² · n²) pair look-ups). Scores are summed in candidate order, as above."""
    best: tuple[Placement, ...] = tuple(candidates[:n])
    best_score: int | None = None
    for seed in range(len(candidates)):
        chosen = [seed]
        while len(chosen) < n:
            gains = (
                (sum(_pair(ctx, *_ordered(candidates, c, j)) for c in chosen), j)
                for j in range(len(candidates))
                if j not in chosen
            )
            _, pick = max(gains, key=lambda g: (g[0], -g[1]))
            chosen.append(pick)
        combo = tuple(candidates[i] for i in sorted(chosen))
        score = sum(_pair(ctx, a.device.uuid, b.device.uuid) for a, b in combinations(combo, 2))
        if best_score is None or score > best_score:
            best, best_score = combo, score
    return best_score or 0, best


def _ordered(candidates: Sequence[Placement], i: int, j: int) -> tuple[str, str]:
    """The pair's uuids in candidate order (pair scores are read one direction only: earlier → later)."""
    a, b = (i, j) if i < j else (j, i)
    return candidates[a].device.uuid, candidates[b].device.uuid


Order = Callable[[DeviceTable, Sequence[float], FitContext], Sequence[int]]
"""The order in which a vendor's devices are tried: ``order(table, device_scores, ctx)`` → table indexes."""


def policy_order(table: DeviceTable, scores: Sequence[float], ctx: FitContext) -> Sequence[int]:
    """HAMi's order for GPU-like devices: the pod's GPU policy (binpack/spread, NUMA grouping, topology)."""
    return ctx.policy.order(len(table.infos), scores.__getitem__, [info.numa for info in table.infos], table.used)


Gather = Callable[[Sequence[Placement], int], tuple[Placement, ...] | None]
"""A vendor's own choice among candidates: ``gather(candidates, nums)`` → the ``nums`` devices to use (None when no
acceptable set exists). With a gather the loop collects every device that could serve the container (as for the
topology-aware policy) and lets the vendor choose (Ascend: NetworkID groups, super-pod pairs)."""


def fit_shared(
    table: DeviceTable,
    req: ContainerRequest,
    ctx: FitContext,
    selector: Selector,
    vendor: str,
    partitions: Partitions | None = None,
    order: Order = policy_order,
    rule: Rule | None = None,
    gather: Gather | None = None,
) -> Fitted | Unfit:
    """Choose ``req.nums`` devices of ``table`` for one container, or say why not. Reads the table only.

    ``rule`` is a vendor's last per-device check (HAMi's ``CustomFilterRule``), made after every other one; a device
    it refuses counts ``CardNotFoundCustomFilterRule``."""
    n = len(table.infos)
    several = partitions is not None and partitions.several_per_device(table.infos, selector)
    if req.nums > n and not several:
        return too_few_devices(n, req.nums)
    return _SharedFit(table, req, ctx, selector, vendor, partitions, rule, gather).run(order)


Rule = Callable[[DeviceInfo], bool]
"""A vendor's custom filter rule: may this device take the container (given what the rule captured, such as the
devices the pod's earlier containers got)?"""

Problem = tuple[Reason, int, int]
"""Why one device cannot take the container: the reason, and the amounts requested and available (0 if none)."""


class _SharedFit:
    """One run of the shared fit loop over one table: devices in policy order, each checked in HAMi's order."""

    __slots__ = (
        "accepted",
        "collect",
        "cores",
        "counts",
        "ctx",
        "gather",
        "groups",
        "misses",
        "partitions",
        "prev_numa",
        "req",
        "rule",
        "selector",
        "table",
        "vendor",
    )

    def __init__(
        self,
        table: DeviceTable,
        req: ContainerRequest,
        ctx: FitContext,
        selector: Selector,
        vendor: str,
        partitions: Partitions | None,
        rule: Rule | None = None,
        gather: Gather | None = None,
    ):
        self.table, self.req, self.ctx, self.selector, self.vendor = table, req, ctx, selector, vendor
        self.partitions = partitions
        self.rule = rule
        self.gather = gather
        self.collect = ctx.policy.topology or gather is not None  # every candidate, then choose
        # Spec §6.2 step 8 / §6.7: a request for more than 100 cores is clamped to 100 (a whole card), so it is
        # judged, and recorded in the allocation, as 100 — not refused as CardInsufficientCore on an idle card.
        self.cores = min(req.coresreq, 100)
        self.counts: dict[Reason, int] = {}
        self.misses: list[Rejection] = []
        self.accepted: list[Placement] = []
        self.groups: list[list[Placement]] = []  # topology + NUMA: candidates per NUMA group
        self.prev_numa: int | None = None

    def run(self, order: Order) -> Fitted | Unfit:
        table, ctx, partitions = self.table, self.ctx, self.partitions
        scores = device_scores(table, self.req, ctx.weights)
        for i in order(table, scores, ctx):
            info = table.infos[i]
            problem = self._device_problem(i)
            if problem is None:
                self._numa_boundary(info.numa)
                memreq = self.req.memory_on(info.devmem)
                problem = self._share_problem(i) or self._room_problem(i, memreq) or self._rule_problem(info)
            if problem is not None:
                self._miss(info.id, *problem)
                continue
            carved = partitions is not None and partitions.carves(info)
            fitted = self._place_sliced(i, memreq) if carved else self._place(i, memreq)
            if fitted is not None:
                return fitted
        return self._finish()

    def _miss(self, uuid: str, reason: Reason, requested: int = 0, available: int = 0) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if requested or available:
            self.misses.append(Rejection(reason, uuid, requested, available))

    def _device_problem(self, i: int) -> Problem | None:
        """The checks before the NUMA grouping: health, cordon, type."""
        info = self.table.infos[i]
        if not info.health or self.table.broken[i] is not None:
            return (Reason.CARD_NOT_HEALTH, 0, 0)
        if info.id in self.ctx.cordoned:
            return (Reason.CARD_CORDONED, 0, 0)
        if not self.selector.type_ok(info):
            return (Reason.CARD_TYPE_MISMATCH, 0, 0)
        return None

    def _numa_boundary(self, numa: int | None) -> None:
        """With NUMA binding, a device of another NUMA node closes the group collected so far."""
        if not self.ctx.policy.numa_bind or numa == self.prev_numa:
            return
        if self.accepted:
            if self.ctx.policy.topology:
                self.groups.append(self.accepted)
            else:
                self.counts[Reason.NUMA_NOT_FIT] = self.counts.get(Reason.NUMA_NOT_FIT, 0) + len(self.accepted)
        self.accepted = []
        self.prev_numa = numa

    def _share_problem(self, i: int) -> Problem | None:
        """UUID selection, time slices, exclusive use."""
        info, used = self.table.infos[i], self.table.used[i]
        if not self.selector.uuid_ok(info.id):
            return (Reason.CARD_UUID_MISMATCH, 0, 0)
        if info.count <= used:
            return (Reason.CARD_TIME_SLICING_EXHAUSTED, 1, info.count - used)
        if self.ctx.policy.mutex and used > 0:
            return (Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, 0, 0)
        return None

    def _room_problem(self, i: int, memreq: int) -> Problem | None:
        """Quota, memory, cores, a whole card, compute units."""
        info, table, cores = self.table.infos[i], self.table, self.cores
        quota = self.ctx.quota
        if quota is not None and not quota(self.accepted, memreq, cores, info.id):
            return (Reason.RESOURCE_QUOTA_NOT_FIT, memreq, 0)
        free_mem = info.devmem - table.usedmem[i]
        if free_mem < memreq:
            return (Reason.CARD_INSUFFICIENT_MEMORY, memreq, free_mem)
        free_cores = info.devcore - table.usedcores[i]
        if free_cores < cores:
            return (Reason.CARD_INSUFFICIENT_CORE, cores, free_cores)
        if cores >= 100 and table.used[i] > 0:
            return (Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, cores, free_cores)
        if info.devcore != 0 and table.usedcores[i] >= info.devcore and cores == 0:
            return (Reason.CARD_COMPUTE_UNITS_EXHAUSTED, 0, 0)
        return None

    def _rule_problem(self, info: DeviceInfo) -> Problem | None:
        if self.rule is None or self.rule(info):
            return None
        return (Reason.CARD_NOT_FOUND_CUSTOM_FILTER_RULE, 0, 0)

    def _place(self, i: int, memreq: int) -> Fitted | None:
        self.accepted.append(Placement(i, ContainerDevice(self.table.infos[i].id, self.vendor, memreq, self.cores)))
        if not self.collect and len(self.accepted) == self.req.nums:
            return Fitted(tuple(self.accepted))
        return None

    def _place_sliced(self, i: int, memreq: int) -> Fitted | None:
        """One container may take several slices of one partitioned device (spec §6.8): keep placing on it.

        A device on which no further slice fits counts the hook's ``infeasible`` reason, also when slices of this
        container were already planned on it (HAMi counts it then too; the partial plan alone would only show as
        ``AllocatedCardsInsufficientRequest``)."""
        info, quota, partitions = self.table.infos[i], self.ctx.quota, self.partitions
        assert partitions is not None
        mine = [p for p in self.accepted if p.index == i]
        while True:
            plan = partitions.plan(info, self.table.slices[i], [p.device.usedmem for p in mine] + [memreq])
            if plan is None:
                free_mem = info.devmem - self.table.usedmem[i] - sum(p.device.usedmem for p in mine)
                self._miss(info.id, partitions.infeasible, memreq, free_mem)
                return None
            carved = plan[-1]
            # The slice holds its template's memory and cores, not the request's (a template rounds the request
            # up): judge the quota on that too, or small requests would slip whole slices past it.
            if quota is not None and not quota(self.accepted, carved.mem, carved.cores, info.id):
                self._miss(info.id, Reason.RESOURCE_QUOTA_NOT_FIT, carved.mem)
                return None
            # Earlier slices keep their planned position; re-planning from the same state is stable.
            device = ContainerDevice(info.id, self.vendor, carved.mem, carved.cores)
            placed = Placement(i, device, carved.slice)
            self.accepted.append(placed)
            mine.append(placed)
            if self.collect:
                return None
            if len(self.accepted) == self.req.nums:
                return Fitted(tuple(self.accepted))

    def _finish(self) -> Fitted | Unfit:
        """After the last device: the vendor's gather or topology-aware picks the set; otherwise (or if none) every
        reason."""
        if self.gather is not None:
            picked = self.gather(self.accepted, self.req.nums) if len(self.accepted) >= self.req.nums else None
            if picked:
                return Fitted(picked)
            if self.accepted:
                self.counts[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(self.accepted)
        elif self.ctx.policy.topology:
            fitted = self._topology_fit()
            if fitted is not None:
                return fitted
        elif self.accepted:
            self.counts[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(self.accepted)
        self.misses.sort(key=lambda r: r.available, reverse=True)
        return Unfit(self.counts, len(self.table.infos), tuple(self.misses[:CLOSEST]))

    def _topology_fit(self) -> Fitted | None:
        nums, groups, counts = self.req.nums, self.groups, self.counts
        if self.ctx.policy.numa_bind:
            groups.append(self.accepted)
            viable = [g for g in groups if len(g) >= nums]
            for g in groups:
                if len(g) < nums and g:
                    counts[Reason.NUMA_NOT_FIT] = counts.get(Reason.NUMA_NOT_FIT, 0) + len(g)
        else:
            viable = [self.accepted] if len(self.accepted) >= nums else []
        if viable:
            return Fitted(_topology_choice(self.ctx, viable, nums))
        partial = max((len(g) for g in groups), default=len(self.accepted))
        if partial:
            counts[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = partial
        return None


def _topology_choice(ctx: FitContext, groups: Sequence[Sequence[Placement]], nums: int) -> tuple[Placement, ...]:
    if nums == 1:
        # Across groups, the least connected card of the first viable group (groups are already in preference order).
        return (worst_single(ctx, groups[0]),)
    best: tuple[Placement, ...] = ()
    best_score: int | None = None
    for g in groups:
        if len(g) == nums:
            score = sum(_pair(ctx, a.device.uuid, b.device.uuid) for a, b in combinations(g, 2))
            combo = tuple(g)
        else:
            score, combo = best_combination(ctx, g, nums)
        if best_score is None or score > best_score:
            best, best_score = combo, score
    return best


class SharedDeviceVendor:
    """What vendors with slot/memory/core sharing and HAMi's allocation annotation have in common: the
    resource names of their config section, the shared fit loop and the ``UUID,Type,mem,cores:`` codec.
    Subclasses set ``name`` and ``keys`` and supply request parsing, inventory decoding and their selector."""

    name: str

    def __init__(self, config: _ResourceConfig) -> None:
        self.resources = ResourceNames(
            count=config.resource_count_name,
            memory=config.resource_memory_name or None,
            core=config.resource_core_name or None,
            memory_factor=max(config.memory_factor, 1),
        )

    partitions: Partitions | None = None
    screens: ClassVar[bool] = False
    """Declared (True) by a vendor that keeps the shared ``fit``: its requests are then screened from a table's
    capacity summary (``shared_screener``), which speaks for the shared fit only. A vendor with its own ``fit``
    cannot declare it (``__init_subclass__`` refuses); one with its own screen overrides ``screener``."""
    ordered_by_policy: ClassVar[bool] = True
    """Whether devices are tried in ``policy_order``; a vendor that overrides ``order`` declares False."""
    reads_slices: ClassVar[bool] = False
    """Declared (True) by a vendor whose ``decode_slices`` may find slices in a pod's annotations (NVIDIA's MIG
    instances): a placed pod's record asks only those (``reads_slices``). A vendor with its own ``decode_slices``
    must declare it (``__init_subclass__`` refuses otherwise)."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.screens and "fit" in vars(cls):
            raise TypeError(f"{cls.__name__} has its own fit and declares screens: a summary cannot speak for its fit")
        if cls.ordered_by_policy and "order" in vars(cls):
            raise TypeError(f"{cls.__name__} has its own order: declare ordered_by_policy = False")
        if not cls.reads_slices and "decode_slices" in vars(cls):
            raise TypeError(f"{cls.__name__} has its own decode_slices: declare reads_slices = True")

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        return fit_shared(table, request, ctx, selector, self.name, self.partitions, self.order)

    def order(self, table: DeviceTable, scores: Sequence[float], ctx: FitContext) -> Sequence[int]:
        """The order devices are tried in; a vendor with its own ordering overrides this."""
        return policy_order(table, scores, ctx)

    def screener(self, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Screener | None:
        """A screen of ``fit`` for this container request (``shared_screener``), for a vendor that declares
        ``screens``; None otherwise, and under NUMA binding for one whose devices are not tried in policy order."""
        if not self.screens or (ctx.policy.numa_bind and not self.ordered_by_policy):
            return None
        return shared_screener(request, ctx, selector, self.partitions, self.ordered_by_policy)

    def encode(self, devices: PodDevices) -> str:
        return encode_pod_devices(devices)

    def decode(self, value: str, field: str) -> PodDevices:
        return decode_pod_devices(value, field)

    def admitter(self) -> Admitter:
        """HAMi's default admission: the container uses the vendor iff its count resource is in limits."""
        return CountInLimits(self.resources.count)

    def numa_bind(self, annotations: Mapping[str, str]) -> bool:
        return False

    def extra_annotations(self, ctx: AnnotationContext) -> dict[str, str]:
        return {}

    def decode_slices(self, annotations: Mapping[str, str]) -> tuple[tuple[str, Hashable], ...]:
        return ()


class _ResourceConfig(Protocol):
    @property
    def resource_count_name(self) -> str: ...
    @property
    def resource_memory_name(self) -> str: ...
    @property
    def resource_core_name(self) -> str: ...
    @property
    def memory_factor(self) -> int: ...


def reads_slices(vendor: object) -> bool:
    """Whether ``vendor.decode_slices`` may find slices, as the vendor declares (``SharedDeviceVendor.reads_slices``);
    a vendor that declares nothing is asked (a pod's record need not ask one that declares False)."""
    return bool(getattr(vendor, "reads_slices", True))
