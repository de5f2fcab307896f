"""The DRA ledger: ResourceSlices and ResourceClaims of configured drivers, charged as held capacity (issue 18).

kube-scheduler allocates DRA claims on GPUs that hami's device-plugin pods also use; each side alone believes it
owns the whole card. ``DraLedger`` reads (never writes) the DRA objects and charges every allocated device to the
card of the same UUID in the node's hami registration, through ``ClusterState.apply`` — so ``/filter`` never gives
a device-plugin pod capacity that a claim holds. Pure: the shell feeds it watch events, it does no I/O.

**What is charged.** One ``DraRecord`` per (claim, node) — in practice one per claim, as a pod's devices sit on one
node — holding one ``Charge`` per card:

* a **shared** allocation (a ``shareID`` on a device with ``allowMultipleAllocations``): one slot per distinct
  (device, shareID) of the claim, and its ``consumedCapacity`` of memory (driver unit → MiB, rounded up) and cores
  (→ the card's core units); a capacity the claim did not ask for is consumed at the device's request-policy default
  (kube-scheduler writes it into ``consumedCapacity``; hami falls back to the same default when it is absent);
* an **exclusive** allocation (no ``shareID``, or a device without ``allowMultipleAllocations``): the whole card —
  every slot, all its memory, all its cores;
* admin-access allocations (monitoring) take nothing, as in kube-scheduler.

A claim shared by several pods (``reservedFor`` lists them all) is charged once: the claim holds the capacity, not
its pods. Held records never count toward namespace quotas (``PodRecord.held``).

**What is reported, and what is still counted** (``DraProblem``; kinds in ``ProblemKind``):

* ``unknown-device`` — an allocated device in no slice hami has: not counted until its slice arrives (hami cannot
  tell which card it is). A device that *was* published and disappeared (the driver restarting) is still counted
  where it was last published, and reported, until the claim lets it go;
* ``unknown-uuid`` — the device has no UUID, or its UUID matches no card of its node's registration: not counted
  (there is no card to charge); re-derived whenever that node's registration changes. A device on a node with no
  hami registration of the driver's vendor at all (a node moved wholly to DRA) is neither counted nor reported:
  hami places no pod there, so there is nothing to count against (it is counted once the node registers the card);
* ``unit-mismatch`` — counted by share of the device (see ``mapping``), and reported;
* ``malformed`` — a field hami reads does not parse: a slice's unreadable device is left out; a claim's unreadable
  consumed amount is charged as the whole card, and a share of a device publishing no memory capacity as the
  card's whole memory;
* ``over-capacity`` — kube-scheduler allocated the claim on a card whose capacity the claim and hami's pods
  together exceed (it sees no device-plugin pod): counted (it is held), reported until enough is freed;
* ``stale-allocation`` — allocated but reserved for no live pod (its pods deleted; nothing deallocates a claim
  without kube-controller-manager): **still counted** until the allocation is removed — a stale claim may be
  about to be used again, and freeing capacity that is still held is the one mistake that double-allocates;
* ``inconsistent-pool`` — slices of one pool name different nodes: a slice of a node other than the pool's is not
  used (``pools``: the pool's node is the one it is named after; a pool is read per node, and a claim is resolved
  on the node its allocation names), so no node can move another node's devices by publishing in its pool.

Which pods live: the extender calls ``pod_event`` from its pod watch (a dictionary test for pods no claim
names), and sets ``pod_lookup`` (namespace, name → UID of the live pod, from the pod watch's store) for pods seen
before the claim that names them.

**Start-up.** Watches deliver their first lists in no particular order: a claim listed before its slice, its node or
its pods would look like ``unknown-device``, ``unknown-uuid`` or ``stale-allocation`` for a moment. Until
``settled()`` (every watch has delivered its first list; the extender passes its readiness) such problems are held
back — what can be counted is counted at once — and ``recheck()`` raises those that remain once settled; a pod not
seen by then counts as live.

**Order does not matter.** A slice arriving after its claim (or changing, or its pool moving to a new generation)
re-derives the claims on its devices; a node's registration changing re-derives the claims on that node
(``node_event``); a claim changing replaces its records. ``DraWarning``s name the traps: a DeviceClass whose
``extendedResourceName`` is one of hami's resources, and shared devices whose ``cores`` default to the whole card.
``tainted()`` lists the devices a driver published with a ``NoSchedule``/``NoExecute`` taint (an unhealthy GPU:
``hami top`` shows it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from hami.config.dra import MEMORY_UNITS_MIB, DraConfig, DraDriverConfig
from hami.protocol.dra import DeviceClass, DeviceRequestAllocationResult, ResourceClaim, ResourceSlice
from hami.protocol.inventory import DeviceInfo
from hami.scheduling.dra.conflict import overcommitted
from hami.scheduling.dra.held import DraRecord
from hami.scheduling.dra.mapping import DeviceKey, DraDevice, ProblemKind, read_slice, taken
from hami.scheduling.dra.pools import PoolKey, PoolView, Published, pool_view, resolve
from hami.scheduling.dra.reports import (
    DraProblem,
    DraWarning,
    WarningKind,
    cores_warning,
    extended_resource_warning,
)
from hami.scheduling.state import ClusterState
from hami.scheduling.usage import Charge

__all__ = ["DraLedger"]

K = TypeVar("K")

_ORDER_KINDS = frozenset(
    {ProblemKind.UNKNOWN_DEVICE, ProblemKind.UNKNOWN_UUID, ProblemKind.STALE_ALLOCATION, ProblemKind.OVER_CAPACITY}
)
"""Problems that the order of the watches' first lists can cause for a moment (held back until settled)."""


@dataclass(slots=True)
class _Card:
    """One card's share of a claim while deriving: every shareID seen, and the amounts."""

    info: DeviceInfo
    whole: bool = False
    shares: int = 0
    mem: int = 0
    cores: int = 0

    def charge(self, vendor: str) -> Charge:
        info = self.info
        if self.whole:
            return Charge(vendor, info.id, info.count, info.devmem, info.devcore)
        return Charge(vendor, info.id, self.shares, self.mem, self.cores)


@dataclass(slots=True)
class _Derived:
    """What one claim amounts to: its cards by (node, vendor, uuid), problems, and the devices and nodes it names."""

    cards: dict[tuple[str, str, str], _Card]
    problems: list[DraProblem]
    devices: set[DeviceKey]
    nodes: set[str]


class DraLedger:
    """Slices and claims of the configured drivers → held records in ``state`` (module docstring)."""

    def __init__(self, state: ClusterState, config: DraConfig) -> None:
        self.state = state
        self.drivers = config.active()
        self.pod_lookup: Callable[[str, str], str | None] | None = None
        """(namespace, name) → the UID of the live pod of that name ("" when its UID is unknown), None when there is
        none."""
        self.settled: Callable[[], bool] = lambda: True
        """Whether every watch (nodes, pods, DRA objects) has delivered its first list (module docstring)."""
        self._slices: dict[str, Published] = {}  # name -> pool, node, generation, devices
        self._sizes: dict[str, tuple[int, ...]] = {}  # driver -> memory_sizes, until the next slice event
        self._pools: dict[PoolKey, set[str]] = {}  # (driver, pool) -> slice names
        self._views: dict[PoolKey, PoolView] = {}  # per pool: what is used of it, per node (``pools``)
        self._last_known: dict[DeviceKey, dict[str, DraDevice]] = {}  # gone from the slices, still held by a claim
        self._claims: dict[str, ResourceClaim] = {}  # claim id (UID) -> claim
        self._by_device: dict[DeviceKey, set[str]] = {}
        self._by_node: dict[str, set[str]] = {}
        self._claim_refs: dict[str, tuple[DeviceKey, ...]] = {}
        self._claim_nodes: dict[str, tuple[str, ...]] = {}
        self._records: dict[str, tuple[DraRecord, ...]] = {}
        self._claim_problems: dict[str, tuple[DraProblem, ...]] = {}
        self._slice_problems: dict[str, tuple[DraProblem, ...]] = {}
        self._consumers: dict[str, set[str]] = {}  # pod UID named in reservedFor -> claim ids
        self._alive: dict[str, bool] = {}  # such a pod as last seen by pod_event
        self._held_back: set[str] = set()  # claims whose order-dependent problems wait for settled()
        self._class_warnings: dict[str, DraWarning] = {}
        self._slice_warnings: dict[str, DraWarning] = {}
        known = set(state.vendors)
        self._config_warnings = tuple(
            DraWarning(
                WarningKind.UNKNOWN_VENDOR,
                f"dra.drivers[{i}]",
                f"driver {d.driver} maps to vendor {d.vendor!r}, which hami does not schedule here (vendors: "
                f"{', '.join(sorted(known)) or 'none'}): no node registers it, so its claims are not counted",
            )
            for i, d in enumerate(config.drivers)
            if config.enabled and d.vendor not in known
        )

    # --- queries -----------------------------------------------------------------------------------------------
    def problems(self) -> tuple[DraProblem, ...]:
        """Every current problem, slices first (then pools), each group sorted by object."""
        out = [p for name in sorted(self._slice_problems) for p in self._slice_problems[name]]
        out += [p for pool in sorted(self._views) for p in self._views[pool].problems]
        ordered = sorted(self._claim_problems.items(), key=lambda kv: (self._claims[kv[0]].key, kv[0]))
        return tuple(out + [p for _, problems in ordered for p in problems])

    def warnings(self) -> tuple[DraWarning, ...]:
        """Every current warning: configuration, DeviceClasses, slices."""
        classes = [self._class_warnings[k] for k in sorted(self._class_warnings)]
        slices = [self._slice_warnings[k] for k in sorted(self._slice_warnings)]
        return self._config_warnings + tuple(classes + slices)

    def tainted(self) -> tuple[tuple[str, DraDevice], ...]:
        """Every used device with a blocking taint, with its driver's hami vendor key, by node and device."""
        found = [
            (self.drivers[dev.key[0]].vendor, dev)
            for view in self._views.values()
            for devices in view.groups.values()
            for dev in devices.values()
            if dev.taints and dev.key[0] in self.drivers
        ]
        return tuple(sorted(found, key=lambda vd: (vd[1].node, vd[1].key)))

    def records(self) -> tuple[DraRecord, ...]:
        """Every held record the ledger charged."""
        return tuple(r for cid in sorted(self._records) for r in self._records[cid])

    def memory_sizes(self, driver: str) -> tuple[int, ...]:
        """The distinct memory sizes in MiB (rounded down) of the devices ``driver`` publishes, smallest first (DRA
        mode turns a ``gpumem-percentage`` into one alternative per card size); () for a driver not counted. Kept
        until the next slice event: every admission asks, and reading every published device is O(the cluster)."""
        config = self.drivers.get(driver)
        if config is None:
            return ()
        known = self._sizes.get(driver)
        if known is not None:
            return known
        num, den = MEMORY_UNITS_MIB[config.memory_unit]
        sizes = {
            int(dev.memory.value * num / den)
            for published in self._slices.values()
            if published.pool[0] == driver
            for dev in published.devices
            if dev.memory is not None
        }
        self._sizes[driver] = tuple(sorted(size for size in sizes if size > 0))
        return self._sizes[driver]

    # --- events --------------------------------------------------------------------------------------------------
    def slice_event(self, sl: ResourceSlice, deleted: bool = False) -> list[DraProblem]:
        """Apply a ResourceSlice event; returns the problems it newly raised. Slices of drivers not configured are
        ignored (their devices are not GPUs hami registers)."""
        cfg = self.drivers.get(sl.spec.driver)
        name = sl.metadata.name
        old = self._slices.pop(name, None)
        if cfg is None and old is None:
            return []
        self._sizes.clear()
        before = self._slice_problems.pop(name, ())
        self._slice_warnings.pop(name, None)
        old_pool = old.pool if old is not None else None
        if old_pool is not None:
            _discard(self._pools, old_pool, name)
        if deleted or cfg is None:
            return self._reindex(old_pool) if old_pool is not None else []
        pool = (sl.spec.driver, sl.spec.pool.name)
        devices, malformed = read_slice(sl, cfg)
        problems = tuple(
            DraProblem(ProblemKind.MALFORMED, f"ResourceSlice {name}", sl.spec.node_name, f"{m}: left out, not counted")
            for m in malformed
        )
        if problems:
            self._slice_problems[name] = problems
        warning = cores_warning(sl, devices, cfg)
        if warning is not None:
            self._slice_warnings[name] = warning
        self._slices[name] = Published(pool, sl.spec.node_name, sl.spec.pool.generation, tuple(devices))
        self._pools.setdefault(pool, set()).add(name)
        raised = [p for p in problems if p not in before]
        if old_pool is not None and old_pool != pool:  # a pool is immutable in the API; be safe if it moved
            raised += self._reindex(old_pool)
        return raised + self._reindex(pool)

    def claim_event(self, claim: ResourceClaim, deleted: bool = False) -> list[DraProblem]:
        """Apply a ResourceClaim event; returns the problems it newly raised. A deleted claim, or one whose
        allocation was removed, frees what it held."""
        cid = claim.metadata.uid or claim.key
        if deleted:
            self._forget_claim(cid)
            return []
        before = set(self._claim_problems.get(cid, ()))
        self._set_consumers(cid, self._claims.get(cid), claim)
        self._claims[cid] = claim
        self._derive_claim(cid)
        return [p for p in self._claim_problems.get(cid, ()) if p not in before]

    def class_event(self, dc: DeviceClass, deleted: bool = False) -> list[DraProblem]:
        """Apply a DeviceClass event: its warning (``warnings()``) is set or cleared. Raises no problem."""
        name = dc.metadata.name
        self._class_warnings.pop(name, None)
        resource = dc.spec.extended_resource_name
        if deleted or not resource or resource not in self._managed():
            return []
        self._class_warnings[name] = extended_resource_warning(name, resource)
        return []

    def pod_event(self, namespace: str, name: str, uid: str, deleted: bool = False) -> list[DraProblem]:
        """A pod was seen (or deleted). Costs a dictionary test unless a claim is reserved for that pod; then
        that claim's staleness is looked at again. Returns the problems newly raised."""
        claims = self._consumers.get(uid)
        if claims is None or self._alive.get(uid) == (not deleted):
            return []
        self._alive[uid] = not deleted
        return self._rederive(claims)

    def node_event(self, name: str) -> list[DraProblem]:
        """A node's registration changed (or the node came or went): re-derive the claims on it."""
        return self._rederive(self._by_node.get(name, ()))

    def recheck(self) -> list[DraProblem]:
        """Once ``settled()``: raise the problems held back during start-up, and look again at claims reserved for
        pods that no pod event has mentioned (``pod_lookup`` knows them now); returns the problems newly raised.
        O(such claims and pods)."""
        if not self.settled():
            return []
        again = set(self._held_back)
        again |= {c for c, ps in self._claim_problems.items() if any(p.kind is ProblemKind.OVER_CAPACITY for p in ps)}
        if self.pod_lookup is not None:
            again |= {cid for uid, cids in self._consumers.items() if uid not in self._alive for cid in cids}
        return self._rederive(again)

    # --- slices --------------------------------------------------------------------------------------------------
    def _reindex(self, pool: PoolKey) -> list[DraProblem]:
        """Publish what is used of a pool (per node, its highest generation: ``pools``); re-derive the claims on
        devices that changed. Returns the problems newly raised (the pool's, then the claims')."""
        old_view = self._views.pop(pool, None)
        view = pool_view(pool, {n: self._slices[n] for n in self._pools.get(pool, ())})
        if view.groups or view.problems:
            self._views[pool] = view
        old = old_view.flat() if old_view is not None else {}
        fresh = view.flat()
        changed = {k for k in old.keys() | fresh.keys() if old.get(k) != fresh.get(k)}
        for group, key in changed:
            if (group, key) in fresh:
                known = self._last_known.get(key, {})
                known.pop(group, None)
                if not known:
                    self._last_known.pop(key, None)
            elif key in self._by_device:
                self._last_known.setdefault(key, {})[group] = old[(group, key)]
        raised = [p for p in view.problems if old_view is None or p not in old_view.problems]
        return raised + self._rederive({cid for _, key in changed for cid in self._by_device.get(key, ())})

    # --- claims --------------------------------------------------------------------------------------------------
    def _rederive(self, claims: Iterable[str]) -> list[DraProblem]:
        fresh: list[DraProblem] = []
        for cid in sorted(claims):
            before = set(self._claim_problems.get(cid, ()))
            self._derive_claim(cid)
            fresh += [p for p in self._claim_problems.get(cid, ()) if p not in before]
        return fresh

    def _derive_claim(self, cid: str) -> None:
        """Charge what the claim holds now (replacing its records) and set its problems."""
        claim = self._claims[cid]
        derived = self._derive(claim)
        self._set_refs(cid, tuple(sorted(derived.devices)), tuple(sorted(derived.nodes)))
        by_node: dict[str, list[Charge]] = {}
        for (node, vendor, _), card in sorted(derived.cards.items()):
            by_node.setdefault(node, []).append(card.charge(vendor))
        meta = claim.metadata
        records = tuple(
            DraRecord(f"dra:{cid}@{node}", meta.namespace, meta.name, node, {}, tuple(charges))
            for node, charges in sorted(by_node.items())
        )
        self._replace(cid, records)
        subject = f"ResourceClaim {claim.key}"
        problems = derived.problems
        for record in records:
            over = overcommitted(self.state, record)
            problems += [DraProblem(ProblemKind.OVER_CAPACITY, subject, record.node, message) for message in over]
        stale = self._stale(claim) if derived.devices else None
        if stale is not None:
            problems.append(DraProblem(ProblemKind.STALE_ALLOCATION, subject, _one(derived.nodes), stale))
        self._set_problems(cid, problems)

    def _set_problems(self, cid: str, problems: list[DraProblem]) -> None:
        """A claim's current problems; until settled, those the watches' order may cause are held back."""
        self._held_back.discard(cid)
        if any(p.kind in _ORDER_KINDS for p in problems) and not self.settled():
            self._held_back.add(cid)
            problems = [p for p in problems if p.kind not in _ORDER_KINDS]
        if problems:
            self._claim_problems[cid] = tuple(problems)
        else:
            self._claim_problems.pop(cid, None)

    def _derive(self, claim: ResourceClaim) -> _Derived:
        derived = _Derived({}, [], set(), set())
        allocation = claim.status.allocation
        if allocation is None:
            return derived
        node = allocation.node_selector.node_name() if allocation.node_selector is not None else ""
        for i, result in enumerate(allocation.devices.results):
            cfg = self.drivers.get(result.driver)
            if cfg is None or result.admin_access:
                continue
            where = f"status.allocation.devices.results[{i}]"
            self._derive_result(claim, result, cfg, where, node, derived)
        return derived

    def _derive_result(
        self,
        claim: ResourceClaim,
        result: DeviceRequestAllocationResult,
        cfg: DraDriverConfig,
        where: str,
        node: str,
        d: _Derived,
    ) -> None:
        key = (result.driver, result.pool, result.device)
        d.devices.add(key)
        subject = f"ResourceClaim {claim.key}"
        dev = self._device(key, node, subject, where, d)
        if dev is None:
            return
        d.nodes.add(dev.node)
        info, why = self._card(dev, cfg)
        if info is None:
            if why:  # else: not a node hami places pods on (no registration of the vendor): nothing to count against
                d.problems.append(
                    DraProblem(
                        ProblemKind.UNKNOWN_UUID, subject, dev.node, f"device {'/'.join(key)} {why}: not counted"
                    )
                )
            return
        card = d.cards.setdefault((dev.node, cfg.vendor, info.id), _Card(info))
        if result.share_id is None or not dev.shared:
            card.whole = True
            return
        amount = taken(result, dev, cfg, info, where)
        card.shares += 1
        card.mem += amount.mem
        card.cores += amount.cores
        d.problems += [DraProblem(kind, subject, dev.node, message) for kind, message in amount.problems]

    def _device(self, key: DeviceKey, node: str, subject: str, where: str, d: _Derived) -> DraDevice | None:
        """The published device a result names, on the claim's ``node`` ("" when its allocation names none);
        else the one last published there, still held (reported); else None (reported)."""
        named = f"device {'/'.join(key)}"
        view = self._views.get(key[:2])
        dev, several = resolve((g[key] for g in view.groups.values() if key in g) if view else (), node)
        if dev is None and not several:
            dev, several = resolve(self._last_known.get(key, {}).values(), node)
            if dev is not None:
                message = f"{named} is no longer published by its driver: still counted on {dev.node} where it was"
                d.problems.append(DraProblem(ProblemKind.UNKNOWN_DEVICE, subject, dev.node, message))
                return dev
        if several:
            message = (
                f"{named} ({where}) is published by nodes {', '.join(several)} and the claim's allocation names "
                f"no node: not counted (hami cannot tell whose it is)"
            )
            d.problems.append(DraProblem(ProblemKind.INCONSISTENT_POOL, subject, "", message))
        elif dev is None:
            on = f" of node {node}" if node else ""
            message = f"{named} ({where}) is in no ResourceSlice{on} hami uses: not counted until it is"
            d.problems.append(DraProblem(ProblemKind.UNKNOWN_DEVICE, subject, node, message))
        return dev

    def _card(self, dev: DraDevice, cfg: DraDriverConfig) -> tuple[DeviceInfo | None, str]:
        """The registered card of the device's UUID, or why there is none ("" when the node has no registration of
        the vendor at all: not hami's to count)."""
        node = self.state.nodes.get(dev.node)
        table = node.tables.get(cfg.vendor) if node is not None else None
        if table is None:
            return None, ""
        if dev.uuid is None:
            return None, f"has no {cfg.uuid_attribute!r} attribute in ResourceSlice {dev.slice}"
        i = table.index_of.get(dev.uuid)
        if i is None:
            return None, f"(UUID {dev.uuid}) matches no card of node {dev.node}'s hami registration"
        return table.infos[i], ""

    def _stale(self, claim: ResourceClaim) -> str | None:
        """Why the claim is stale (reserved for no live pod), None when it is not. Consumers other than pods
        cannot be checked and count as live."""
        refs = claim.status.reserved_for
        counted = "still counted until its allocation is removed"
        if not refs:
            return f"allocated but reserved for no pod: {counted}"
        if any(r.resource != "pods" or r.api_group for r in refs):
            return None
        gone = [self._gone(claim.metadata.namespace, r.name, r.uid) for r in refs]  # each looked at (and kept)
        if all(gone):
            pods = ", ".join(f"{claim.metadata.namespace}/{r.name}" for r in refs)
            return f"reserved only for pods that no longer exist ({pods}): {counted}"
        return None

    def _gone(self, namespace: str, name: str, uid: str) -> bool:
        alive = self._alive.get(uid)
        if alive is not None:
            return not alive
        if self.pod_lookup is None or not self.settled():
            return False
        found = self.pod_lookup(namespace, name)
        live = found is not None and found in ("", uid)  # "": a pod of that name whose UID is not known (a file)
        self._alive[uid] = live  # from now on its pod events keep this (a claim names it): no second look-up
        return not live

    def _replace(self, cid: str, records: tuple[DraRecord, ...]) -> None:
        old = self._records.get(cid, ())
        if old == records:
            return
        for record in old:
            self.state.apply(record, add=False)
        for record in records:
            self.state.apply(record, add=True)
        if records:
            self._records[cid] = records
        else:
            self._records.pop(cid, None)

    def _forget_claim(self, cid: str) -> None:
        self._replace(cid, ())
        self._held_back.discard(cid)
        self._set_consumers(cid, self._claims.pop(cid, None), None)
        self._set_refs(cid, (), ())
        self._claim_problems.pop(cid, None)

    def _set_refs(self, cid: str, devices: tuple[DeviceKey, ...], nodes: tuple[str, ...]) -> None:
        """Index the devices and nodes a claim names; forget last-known devices no claim holds any more."""
        dropped = self._claim_refs.pop(cid, ())
        for key in dropped:
            _discard(self._by_device, key, cid)
        for node in self._claim_nodes.pop(cid, ()):
            _discard(self._by_node, node, cid)
        for key in devices:
            self._by_device.setdefault(key, set()).add(cid)
        for key in dropped:
            if key not in self._by_device:  # (a claim re-derived still holds its devices: they stay known)
                self._last_known.pop(key, None)
        for node in nodes:
            self._by_node.setdefault(node, set()).add(cid)
        if devices:
            self._claim_refs[cid] = devices
        if nodes:
            self._claim_nodes[cid] = nodes

    def _set_consumers(self, cid: str, old: ResourceClaim | None, new: ResourceClaim | None) -> None:
        for claim, add in ((old, False), (new, True)):
            for ref in claim.status.reserved_for if claim is not None else ():
                if add:
                    self._consumers.setdefault(ref.uid, set()).add(cid)
                elif _discard(self._consumers, ref.uid, cid):
                    self._alive.pop(ref.uid, None)

    def _managed(self) -> set[str]:
        names = set()
        for vendor in self.state.vendors.values():
            names |= {n for n in (vendor.resources.count, vendor.resources.memory, vendor.resources.core) if n}
        return names


def _discard(index: dict[K, set[str]], key: K, cid: str) -> bool:
    """Remove ``cid`` from ``index[key]``; drop the key when its set empties (returns True then)."""
    members = index.get(key)
    if members is None:
        return False
    members.discard(cid)
    if not members:
        del index[key]
        return True
    return False


def _one(nodes: set[str]) -> str:
    return next(iter(nodes)) if len(nodes) == 1 else ""
