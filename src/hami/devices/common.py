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
from itertools import combinations, groupby
from math import comb
from typing import Protocol

from hami.devices.admission import Admitter, CountInLimits
from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    AnnotationContext,
    ContainerRequest,
    FitContext,
    Fitted,
    Partitions,
    Placement,
    ResourceNames,
    Selector,
    Unfit,
)
from hami.devices.policy import GpuPolicy
from hami.devices.table import Capacity, DeviceTable, MemoryMiss, OpenCard
from hami.protocol.allocation import ContainerDevice, PodDevices, decode_pod_devices, encode_pod_devices
from hami.protocol.inventory import DeviceInfo
from hami.protocol.reasons import Reason, Rejection

__all__ = [
    "EXHAUSTIVE_SUBSETS",
    "Gather",
    "Screener",
    "SharedDeviceVendor",
    "best_combination",
    "device_score",
    "device_scores",
    "fit_shared",
    "policy_order",
    "shared_screener",
    "worst_single",
]

_CLOSEST = 3


def device_scores(table: DeviceTable, req: ContainerRequest, weights: tuple[int, int, int]) -> list[float]:
    """Spec §5.1 for every device of the table, with the pod's own request counted: ``device_score`` each."""
    return [
        device_score(info, used, usedcores, usedmem, req, weights)
        for info, used, usedcores, usedmem in zip(table.infos, table.used, table.usedcores, table.usedmem, strict=True)
    ]


def device_score(
    info: DeviceInfo, used: int, usedcores: int, usedmem: int, req: ContainerRequest, weights: tuple[int, int, int]
) -> float:
    """Spec §5.1 for one device with its usage, the pod's own request counted: ``10 × (w·slots + w·cores +
    w·memory)`` fractions; 0 for a device with a zero total."""
    count, devcore, devmem = info.count, info.devcore, info.devmem
    if count == 0 or devcore == 0 or devmem == 0:
        return 0.0
    ws, wc, wm = weights
    memreq, pct = req.memreq, req.mem_percentage
    mem = memreq if memreq > 0 else (devmem * pct // 100 if pct != MEM_PERCENTAGE_UNSET else 0)
    return 10.0 * (ws * (1 + used) / count + wc * (req.coresreq + usedcores) / devcore + wm * (mem + usedmem) / devmem)


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
        return Unfit(
            {Reason.NODE_INSUFFICIENT_DEVICE: n}, n, (Rejection(Reason.NODE_INSUFFICIENT_DEVICE, None, req.nums, n),)
        )
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
        return Unfit(self.counts, len(self.table.infos), tuple(self.misses[:_CLOSEST]))

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


class Screener(Protocol):
    """What Fit would answer for one container request, told from a table's capacity summary (``DeviceTable.summary``)
    instead of trying its devices."""

    def __call__(self, table: DeviceTable, idle: bool) -> bool | None:
        """On ``table`` (on ``table.empty()`` when ``idle``): True (a ``Fitted`` with score 0), False (an ``Unfit``),
        None (cannot tell)."""

    def unfit(self, table: DeviceTable) -> Unfit | None:
        """For a table it screens as not fitting: the very ``Unfit`` Fit returns there (reasons, counts, closest
        misses); None when the summary cannot say it."""


def shared_screener(
    req: ContainerRequest, ctx: FitContext, selector: Selector, partitions: Partitions | None, ordered: bool = True
) -> Screener | None:
    """A screen of ``fit_shared`` for one container request, from the tables' capacity summaries; None when the
    summaries cannot tell (a namespace quota, cordoned devices, UUID filters, ``topology-aware`` or ``mutex``). It
    answers None for a table with devices carved into slices. ``ordered`` says the vendor tries devices in
    ``policy_order`` (the closest misses of an ``Unfit`` depend on the order; without it ``unfit`` answers None).

    It mirrors the loop's checks for a device that passed health, type and slots (``Capacity.cards`` holds the cards
    that passed health and slots; the card type filters select whole models, ``Capacity.models``): memory, cores, a
    whole card, compute units; with NUMA binding the devices must be on one NUMA node (the policy orders devices by
    NUMA node first, so the loop's groups are the NUMA nodes). The equivalence with Fit is a property test
    (``tests/unit/scheduling/test_screen.py``).
    """
    policy = ctx.policy
    if ctx.quota is not None or ctx.cordoned or policy.topology or policy.mutex:
        return None
    if selector.use_uuids or selector.nouse_uuids:
        return None
    return _SharedScreen(req, ctx, selector, partitions, ordered)


class _SharedScreen:
    """``shared_screener``'s screen: per request, the numbers Fit compares and which card models the pod accepts."""

    __slots__ = ("carves", "cores", "ctx", "memreq", "models", "nums", "ordered", "pct", "req", "selector", "typed")

    def __init__(
        self, req: ContainerRequest, ctx: FitContext, selector: Selector, partitions: Partitions | None, ordered: bool
    ) -> None:
        self.req, self.ctx, self.selector, self.ordered = req, ctx, selector, ordered
        self.carves = partitions.carves if partitions is not None else None
        self.nums, self.memreq, self.pct = req.nums, req.memreq, req.mem_percentage
        self.cores = min(req.coresreq, 100)
        self.typed = bool(selector.use_types or selector.nouse_types or selector.modes is not None)
        self.models: dict[tuple[str, str], bool] = {}  # (type, mode) -> the selector accepts it

    def _allowed(self, cap: Capacity) -> tuple[bool, ...] | None:
        """Per model of the table, whether the pod's type filters accept it; None when they accept every model."""
        if not self.typed:
            return None
        ok = []
        for info in cap.models:
            key = (info.type, info.mode)
            accepted = self.models.get(key)
            if accepted is None:
                accepted = self.models[key] = self.selector.type_ok(info)
            ok.append(accepted)
        return None if all(ok) else tuple(ok)

    def _cards(self, cap: Capacity) -> Sequence[OpenCard]:
        allowed = self._allowed(cap)
        if allowed is None:
            return cap.cards
        model_of = cap.model_of
        return [c for c in cap.cards if allowed[model_of[c[6]]]]

    def __call__(self, table: DeviceTable, idle: bool) -> bool | None:
        cap = table.idle_summary(self.carves) if idle else table.summary(self.carves)
        if cap.carved:
            return None
        nums, memreq, cores = self.nums, self.memreq, self.cores
        cards = self._cards(cap) if self.typed else cap.cards
        if cards is cap.cards:
            if nums > len(cards) or memreq > cap.max_mem or cores > cap.max_cores:
                return False
            if cores >= 100 and cap.idle < nums:
                return False
            if nums == 1 and memreq > 0 and cores <= cap.first_cores:  # the card with the most free memory will do
                return True
        elif nums > len(cards):
            return False
        return _enough_cards(cards, nums, memreq, self.pct, cores, self.ctx.policy.numa_bind)

    def unfit(self, table: DeviceTable) -> Unfit | None:
        cap = table.summary(self.carves)
        if cap.carved or not self.ordered:
            return None
        n = cap.devices
        if self.nums > n:
            return Unfit(
                {Reason.NODE_INSUFFICIENT_DEVICE: n},
                n,
                (Rejection(Reason.NODE_INSUFFICIENT_DEVICE, None, self.nums, n),),
            )
        if self.memreq > 0 and self.memreq > cap.max_mem and self._allowed(cap) is None:  # no card has the memory
            told = self._memory_unfit(table, cap)
            if told is not None:
                return told
        tally = self._tally(cap)
        if not tally.close(self.ctx.policy, self.nums):
            return None  # enough cards after all: the summary disagrees with its own screen, let Fit judge
        return Unfit(tally.counts, n, self._closest(table, tally.misses))

    def _memory_unfit(self, table: DeviceTable, cap: Capacity) -> Unfit | None:
        """Fit's ``Unfit`` when every open card lacks the memory: the counts are the summary's, and the closest
        misses, which depend only on the cards' usage and the GPU policy's order, are kept with the summary
        (``Capacity.derived``); None when their order depends on the request."""
        policy = self.ctx.policy
        key = (policy.raw, policy.numa_bind)
        derived = cap.derived
        if key not in derived:
            derived[key] = _memory_misses(table, cap, policy)
        misses = derived[key]
        if misses is None:
            return None
        counts: dict[Reason, int] = {}
        if cap.unhealthy:
            counts[Reason.CARD_NOT_HEALTH] = cap.unhealthy
        if cap.full:
            counts[Reason.CARD_TIME_SLICING_EXHAUSTED] = len(cap.full)
        if cap.cards:
            counts[Reason.CARD_INSUFFICIENT_MEMORY] = len(cap.cards)
        infos, memreq = table.infos, self.memreq
        return Unfit(
            counts,
            cap.devices,
            tuple(
                Rejection(Reason.CARD_INSUFFICIENT_MEMORY, infos[i].id, memreq, available)
                if card
                else Rejection(Reason.CARD_TIME_SLICING_EXHAUSTED, infos[i].id, 1, available)
                for available, card, i in misses
            ),
        )

    def _tally(self, cap: Capacity) -> _Tally:
        """Every device's reason, as Fit's checks (``_SharedFit``) give it to a device that is unhealthy, of a model
        the pod refuses, without a free slot, or an open card: ``cap`` holds each of those."""
        tally = _Tally(self.ctx.policy.numa_bind)
        allowed, model_of = self._allowed(cap), cap.model_of
        if cap.unhealthy:
            tally.counts[Reason.CARD_NOT_HEALTH] = cap.unhealthy
        for slots, numa, i in cap.full:
            if allowed is not None and not allowed[model_of[i]]:
                tally.miss(Reason.CARD_TYPE_MISMATCH)
                continue
            tally.numas.append(numa)
            tally.miss(Reason.CARD_TIME_SLICING_EXHAUSTED, i, 1, slots)
        memreq, pct, cores = self.memreq, self.pct, self.cores
        for free_mem, free_cores, used, devmem, devcore, numa, i in cap.cards:
            if allowed is not None and not allowed[model_of[i]]:
                tally.miss(Reason.CARD_TYPE_MISMATCH)
                continue
            tally.numas.append(numa)
            mem = memreq if memreq > 0 else (devmem * pct // 100 if pct != MEM_PERCENTAGE_UNSET else 0)
            if free_mem < mem:
                tally.miss(Reason.CARD_INSUFFICIENT_MEMORY, i, mem, free_mem)
            elif free_cores < cores:
                tally.miss(Reason.CARD_INSUFFICIENT_CORE, i, cores, free_cores)
            elif cores >= 100 and used > 0:
                tally.miss(Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, i, cores, free_cores)
            elif cores == 0 and devcore != 0 and free_cores <= 0:
                tally.miss(Reason.CARD_COMPUTE_UNITS_EXHAUSTED)
            else:
                tally.accept(numa)
        return tally

    def _closest(self, table: DeviceTable, misses: list[tuple[int, int, Reason, int]]) -> tuple[Rejection, ...]:
        """Fit's closest misses: largest available amount first, ties in the order Fit tried the devices (only the
        tied devices among the first three are put in that order: ``GpuPolicy.key``)."""
        if len(misses) > 1:
            misses.sort(key=_available, reverse=True)
            cut = misses[min(len(misses), _CLOSEST) - 1][0]
            head = [m for m in misses if m[0] >= cut]
            if len(head) > _CLOSEST or len({m[0] for m in head}) < len(head):
                infos, used, usedcores, usedmem = table.infos, table.used, table.usedcores, table.usedmem
                req, weights = self.req, self.ctx.weights

                def score(i: int) -> float:
                    return device_score(infos[i], used[i], usedcores[i], usedmem[i], req, weights)

                tried = self.ctx.policy.key(score, [info.numa for info in infos], used)
                head.sort(key=lambda m: (-m[0], tried(m[3])))
            misses = head
        infos = table.infos
        return tuple(
            Rejection(reason, infos[i].id, requested, available)
            for available, requested, reason, i in misses[:_CLOSEST]
        )


def _memory_misses(table: DeviceTable, cap: Capacity, policy: GpuPolicy) -> tuple[MemoryMiss, ...] | None:
    """The closest misses of a table none of whose open cards has the memory: every open card (free MiB) and every
    full card (free slots), largest first, ties in Fit's order; None when tied cards differ in usage (their order
    then depends on the request's device scores)."""
    misses: list[MemoryMiss] = [(c[0], True, c[6]) for c in cap.cards]
    misses += [(f[0], False, f[2]) for f in cap.full]
    if len(misses) > 1:
        cut = sorted(m[0] for m in misses)[-min(len(misses), _CLOSEST)]
        head = [m for m in misses if m[0] >= cut]
        head.sort(key=_available, reverse=True)
        if len(head) > _CLOSEST or len({m[0] for m in head}) < len(head):
            if any(not _same_usage(table, [m[2] for m in tied]) for _, tied in groupby(head, key=_available)):
                return None
            # Tied cards have equal usage, hence equal device scores: the policy's order without them decides.
            tried = policy.key(_unscored, [info.numa for info in table.infos], table.used)
            head.sort(key=lambda m: (-m[0], tried(m[2])))
        misses = head
    return tuple(misses[:_CLOSEST])


def _same_usage(table: DeviceTable, indexes: Sequence[int]) -> bool:
    """Whether the devices have the same slots, memory and cores, and the same usage of each (equal device scores)."""
    infos, used, usedcores, usedmem = table.infos, table.used, table.usedcores, table.usedmem
    return (
        len({(infos[i].count, infos[i].devmem, infos[i].devcore, used[i], usedcores[i], usedmem[i]) for i in indexes})
        < 2
    )


def _unscored(i: int) -> float:
    return 0.0


def _available(miss: tuple[int, object, object, int] | MemoryMiss) -> int:
    return miss[0]


class _Tally:
    """An ``Unfit`` being counted from a summary: devices per reason, the misses with numbers (available, requested,
    reason, index), and the cards that passed every check per NUMA group (one group without NUMA binding)."""

    __slots__ = ("accepted", "counts", "misses", "numa_bind", "numas")

    def __init__(self, numa_bind: bool) -> None:
        self.numa_bind = numa_bind
        self.counts: dict[Reason, int] = {}
        self.misses: list[tuple[int, int, Reason, int]] = []
        self.accepted: dict[int, int] = {}
        self.numas: list[int] = []  # the NUMA node of every card that passed health and type: Fit's NUMA boundaries

    def miss(self, reason: Reason, i: int = -1, requested: int = 0, available: int = 0) -> None:
        counts = self.counts
        counts[reason] = counts.get(reason, 0) + 1
        if requested or available:
            self.misses.append((available, requested, reason, i))

    def accept(self, numa: int) -> None:
        group = numa if self.numa_bind else 0
        self.accepted[group] = self.accepted.get(group, 0) + 1

    def close(self, policy: GpuPolicy, nums: int) -> bool:
        """Count the accepted cards as Fit does after its last device (with NUMA binding: those of every NUMA node
        but the last one tried are ``NumaNotFit``, the last one's ``AllocatedCardsInsufficientRequest``); False if
        some group has ``nums`` cards (Fit would fit)."""
        accepted, counts = self.accepted, self.counts
        if not accepted:
            return True
        if max(accepted.values()) >= nums:
            return False
        last = policy.numa_last(self.numas) if self.numa_bind else 0
        partial = accepted.get(last, 0)
        others = sum(accepted.values()) - partial
        if others:
            counts[Reason.NUMA_NOT_FIT] = others
        if partial:
            counts[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = partial
        return True


def _takes(card: OpenCard, cores: int) -> bool:
    """Whether an open card with room for the memory passes Fit's core checks (cores, a whole card, compute units)."""
    free_cores = card[1]
    return free_cores >= cores and (cores < 100 or card[2] == 0) and (cores != 0 or card[4] == 0 or free_cores > 0)


def _enough_cards(cards: Sequence[OpenCard], nums: int, memreq: int, pct: int, cores: int, numa_bind: bool) -> bool:
    """Whether ``nums`` of the open cards (on one NUMA node with ``numa_bind``) pass Fit's memory and core checks."""
    found: dict[int, int] = {}
    for card in cards:
        free_mem, devmem = card[0], card[3]
        mem = memreq if memreq > 0 else (devmem * pct // 100 if pct != MEM_PERCENTAGE_UNSET else 0)
        if free_mem < mem:
            if memreq > 0:
                break  # cards come largest free memory first: none further has room
            continue
        if not _takes(card, cores):
            continue
        group = card[5] if numa_bind else 0
        n = found[group] = found.get(group, 0) + 1
        if n == nums:
            return True
    return False


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

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        return fit_shared(table, request, ctx, selector, self.name, self.partitions, self.order)

    def order(self, table: DeviceTable, scores: Sequence[float], ctx: FitContext) -> Sequence[int]:
        """The order devices are tried in; a vendor with its own ordering overrides this."""
        return policy_order(table, scores, ctx)

    def screener(self, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Screener | None:
        """A screen of ``fit`` for this container request (``shared_screener``); None for a subclass with its own
        ``fit`` (or its own ``order`` under NUMA binding), which the summary cannot speak for."""
        cls = type(self)
        if cls.fit is not SharedDeviceVendor.fit or (ctx.policy.numa_bind and not self.policy_ordered()):
            return None
        return shared_screener(request, ctx, selector, self.partitions, self.policy_ordered())

    def policy_ordered(self) -> bool:
        """Whether this vendor tries devices in ``policy_order`` (it does not override ``order``)."""
        return type(self).order is SharedDeviceVendor.order

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
    """Whether ``vendor.decode_slices`` may find slices: False only for a vendor that keeps
    ``SharedDeviceVendor``'s, which never does (a pod's record need not ask it)."""
    return getattr(type(vendor), "decode_slices", None) is not SharedDeviceVendor.decode_slices
