"""Cluster state with an incremental usage ledger.

``ClusterState`` holds nodes (their device tables per vendor), pod records (keyed by pod UID) and namespace
quotas. There is exactly one mutation path for usage: ``apply(record, add=…)``, used by reserve, unreserve and
the watch handlers alike. It is idempotent — a second add or an absent remove returns False and changes
nothing — and costs time proportional to the pod. Node updates re-charge only that node's pods.

Records that name an unknown node are kept (``orphans``) and counted as soon as the node appears; charges that
name a device the node does not have are kept and reported (``dangling``). ``verify()`` recounts everything
from the records and returns the differences (an empty list when the ledger is right).

Capacity held outside hami's pods — a DRA claim's allocation (``hami.scheduling.dra``) — goes through the same
``apply`` as a record whose class sets ``held``: it is kept apart in ``held``/``held_by_node`` (so nothing that
walks ``pods`` mistakes a claim for a pod: the API audit, metrics, defrag) and charged to devices like a pod. A
claim's namespace quota usage is kept apart too (``set_claim_quota``, one entry per claim whatever its node, fed by the
DRA ledger; issue 38), so a held record itself charges no quota and nothing is counted twice.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from hami.devices.base import NodeInventory, Vendor, parse_uuid_list
from hami.devices.kubelet import allocatable_shortfall
from hami.devices.table import DeviceTable
from hami.errors import InvalidInput, LedgerError
from hami.protocol import keys
from hami.protocol.allocation import PodDevices
from hami.protocol.inventory import check_inventory
from hami.protocol.objects import Node, ResourceQuota
from hami.scheduling.quota import QuotaBook
from hami.scheduling.usage import Charge

__all__ = ["ClusterState", "NodeState", "PodRecord"]


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What one pod holds: its node, its raw allocation per vendor, and the effective charges per device.

    ``slices`` lists the slices the pod occupies on partitioned devices as (vendor, device id, position).
    ``problem`` is set when the pod's annotations could not be decoded (see ``hami.scheduling.records``: what
    could be decoded is charged). ``priority`` (``spec.priority``, 0 when unset), ``started`` (``status.startTime``,
    RFC 3339, None before the kubelet starts it), ``terminating`` (``metadata.deletionTimestamp`` set) and
    ``preempted`` (terminating because a scheduler preempted it: ``hami.protocol.disruption``) are what preemption
    reads (``hami.scheduling.preemption``); they charge nothing.
    """

    uid: str
    namespace: str
    name: str
    node: str
    devices: Mapping[str, PodDevices]
    charges: tuple[Charge, ...]
    slices: tuple[tuple[str, str, Hashable], ...] = ()
    problem: str | None = None
    priority: int = 0
    started: str | None = None
    terminating: bool = False
    preempted: bool = False
    held: ClassVar[bool] = False
    """True on record classes of capacity held outside hami's pods (DRA claims): see ``ClusterState``. A class
    attribute, so it costs no byte per record."""

    def __post_init__(self) -> None:
        if type(self.devices) is dict and len(self.devices) == 1:  # the common case, kept compact (state size)
            object.__setattr__(self, "devices", OneVendor(*next(iter(self.devices.items()))))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class OneVendor(Mapping[str, PodDevices]):
    """A read-only ``{vendor: devices}`` with one entry: what almost every ``PodRecord`` holds, in 48 bytes instead of
    a dict's 184 (the ledger keeps one record per placed pod: 13 MB at 100,000 pods). Equal to the dict it stands
    for."""

    __slots__ = ("_devices", "_vendor")

    def __init__(self, vendor: str, devices: PodDevices) -> None:
        self._vendor, self._devices = vendor, devices

    def __getitem__(self, key: str) -> PodDevices:
        if key != self._vendor:
            raise KeyError(key)
        return self._devices

    def __iter__(self) -> Iterator[str]:
        yield self._vendor

    def __len__(self) -> int:
        return 1

    def __repr__(self) -> str:
        return repr({self._vendor: self._devices})


@dataclass(slots=True)
class NodeState:
    """One node as hami sees it. ``tables`` maps vendor key → device table (usage included)."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    cordoned: frozenset[str] = frozenset()
    tables: dict[str, DeviceTable] = field(default_factory=dict)
    pair_scores: dict[str, Mapping[str, Mapping[str, int]]] = field(default_factory=dict)
    node_info: dict[str, Mapping[str, str]] = field(default_factory=dict)  # vendor -> NodeInventory.node_info
    problems: dict[str, str] = field(default_factory=dict)  # vendor -> why its registration was refused
    generation: int = 0
    unallocatable: dict[str, str] = field(default_factory=dict)
    """Vendor -> why kubelet does not back its registered devices (``hami.devices.kubelet``): its tables stay and
    are charged, but the filter turns the node down for that vendor until kubelet reports the devices again."""

    def score(self) -> float:
        """Spec §5.2: ``10 × (Σused/Σcount + Σcores/Σdevcore + Σmem/Σdevmem)`` over every device of the node."""
        used = count = cores = devcore = mem = devmem = 0
        for table in self.tables.values():
            u, c, uc, dc, um, dm = table.totals()
            used += u
            count += c
            cores += uc
            devcore += dc
            mem += um
            devmem += dm
        if count == 0 or devcore == 0 or devmem == 0:
            return 0.0
        return 10.0 * (used / count + cores / devcore + mem / devmem)


def parse_cordon(value: str | None) -> frozenset[str]:
    """``hami.io/device-cordon``: comma-separated UUIDs, trimmed, blanks skipped (spec §2.8)."""
    return parse_uuid_list(value)


class ClusterState:
    """Nodes, pod records and quotas, with per-device usage kept current incrementally."""

    def __init__(self, vendors: Mapping[str, Vendor]) -> None:
        self.vendors = dict(vendors)
        self.nodes: dict[str, NodeState] = {}
        self.pods: dict[str, PodRecord] = {}
        self.pods_by_node: dict[str, set[str]] = {}
        self.dangling: dict[str, set[tuple[str, str]]] = {}  # pod uid -> {(vendor, uuid)} not on its node
        self.held: dict[str, PodRecord] = {}  # records of capacity held outside hami's pods (``PodRecord.held``)
        self.held_by_node: dict[str, set[str]] = {}
        tracked: list[str] = []
        for v in self.vendors.values():
            tracked += [r for r in (v.resources.memory, v.resources.core) if r]
        self.quota_factors = {
            v.resources.memory: v.resources.memory_factor for v in self.vendors.values() if v.resources.memory
        }
        self.quotas = QuotaBook(tracked)
        self.claim_quota: dict[str, tuple[str, dict[str, int]]] = {}
        """Per DRA claim (its ledger id): its namespace and what it counts against the namespace's quotas
        (``set_claim_quota``)."""

    # --- nodes ----------------------------------------------------------------------------------------
    def upsert_node(self, node: Node) -> NodeState:
        """Decode a Node's registrations and (re)build its tables; its pods are charged again.

        A vendor whose registration cannot be decoded, or breaks hami's acceptance rules (``check_inventory``:
        duplicate or blank ids, numbers out of range, too many devices — the same rules for every vendor), is left
        out of the node and reported in ``problems`` (the node is quarantined for that vendor); the other vendors
        and nodes keep working. A vendor whose devices kubelet does not back (``status.allocatable`` of its count
        resource below what they need: its device plugin is gone or restarting) keeps its table and is named in
        ``unallocatable``.
        """
        name = node.metadata.name
        inventories: dict[str, NodeInventory] = {}
        problems: dict[str, str] = {}
        unallocatable: dict[str, str] = {}
        for vendor_name, vendor in self.vendors.items():
            try:
                inv = vendor.decode_inventory(node)
                if inv is not None:
                    check_inventory(inv.devices, vendor.keys.register or "status.capacity")
            except InvalidInput as err:
                problems[vendor_name] = str(err)
                continue
            if inv is not None and inv.devices:
                inventories[vendor_name] = inv
                short = allocatable_shortfall(vendor, node, inv.devices)
                if short is not None:
                    unallocatable[vendor_name] = short
        return self.set_node(
            name,
            inventories,
            labels=dict(node.metadata.labels),
            unschedulable=node.spec.unschedulable,
            cordoned=parse_cordon(node.metadata.annotations.get(keys.DEVICE_CORDON)),
            problems=problems,
            unallocatable=unallocatable,
        )

    def set_node(
        self,
        name: str,
        inventories: Mapping[str, NodeInventory],
        labels: Mapping[str, str] | None = None,
        unschedulable: bool = False,
        cordoned: frozenset[str] = frozenset(),
        problems: Mapping[str, str] | None = None,
        unallocatable: Mapping[str, str] | None = None,
    ) -> NodeState:
        old = self.nodes.get(name)
        state = NodeState(
            name=name,
            labels=dict(labels or {}),
            unschedulable=unschedulable,
            cordoned=cordoned,
            tables={v: DeviceTable(v, inv.devices) for v, inv in inventories.items()},
            pair_scores={v: inv.pair_scores for v, inv in inventories.items() if inv.pair_scores},
            node_info={v: inv.node_info for v, inv in inventories.items() if inv.node_info},
            problems=dict(problems or {}),
            generation=(old.generation + 1) if old else 1,
            unallocatable=dict(unallocatable or {}),
        )
        self.nodes[name] = state
        for record in self._on_node(name):
            self.dangling.pop(record.uid, None)
            self._charge(state, record, 1)
        return state

    def remove_node(self, name: str) -> None:
        """Forget a node; its pods' records are kept and count again if the node comes back."""
        self.nodes.pop(name, None)
        for record in self._on_node(name):
            self.dangling.pop(record.uid, None)

    def _on_node(self, name: str) -> list[PodRecord]:
        """Every record on a node: its pods', then the capacity held outside pods."""
        records = [self.pods[uid] for uid in self.pods_by_node.get(name, ())]
        held = self.held_by_node.get(name)
        return records + [self.held[uid] for uid in held] if held else records

    # --- pods ------------------------------------------------------------------------------------------
    def apply(self, record: PodRecord, add: bool) -> bool:
        """Add or remove a pod's usage. Idempotent: returns False (and changes nothing) for a second add of
        the same UID or the removal of an absent one. To change a pod's allocation, remove it and add again.
        A ``held`` record (a DRA claim's) is kept in ``held`` and charges no quota here (``set_claim_quota``).
        """
        uid = record.uid
        records, by_node = (self.held, self.held_by_node) if record.held else (self.pods, self.pods_by_node)
        if add:
            if uid in records:
                return False
            records[uid] = record
            by_node.setdefault(record.node, set()).add(uid)
            node = self.nodes.get(record.node)
            if node is not None:
                self._charge(node, record, 1)
            self._quota_usage(record, 1)
            return True
        current = records.pop(uid, None)
        if current is None:
            return False
        on_node = by_node.get(current.node)
        if on_node is not None:
            on_node.discard(uid)
            if not on_node:
                del by_node[current.node]
        node = self.nodes.get(current.node)
        if node is not None:
            self._charge(node, current, -1)
            if any(b is not None for t in node.tables.values() for b in t.broken):
                self._recharge(node)  # an inconsistent slice may have left with this pod
        self.dangling.pop(uid, None)
        self._quota_usage(current, -1)
        return True

    def remove_pod(self, uid: str) -> PodRecord | None:
        record = self.pods.get(uid)
        if record is not None:
            self.apply(record, add=False)
        return record

    def _charge(self, node: NodeState, record: PodRecord, sign: int) -> None:
        missing = _charge_tables(self.vendors, node.tables, record, sign)
        node.generation += 1
        if sign > 0 and missing:
            self.dangling[record.uid] = missing

    def _recharge(self, node: NodeState) -> None:
        node.tables = {v: t.empty() for v, t in node.tables.items()}
        for record in self._on_node(node.name):
            self.dangling.pop(record.uid, None)
            self._charge(node, record, 1)

    def _quota_usage(self, record: PodRecord, sign: int) -> None:
        if not record.held:  # capacity held outside pods (a DRA claim) is no request for hami's resources
            self.quotas.add_usage(record.namespace, self._quota_amounts(record), sign=sign)

    def quota_amounts(self, record: PodRecord) -> dict[str, int]:
        """What ``record`` counts against its namespace's quotas, by resource name."""
        return self._quota_amounts(record)

    def _quota_amounts(self, record: PodRecord) -> dict[str, int]:
        amounts: dict[str, int] = {}
        for ch in record.charges:
            vendor = self.vendors.get(ch.vendor)
            if vendor is None:
                continue
            names = vendor.resources
            if names.memory:
                amounts[names.memory] = amounts.get(names.memory, 0) + ch.mem
            if names.core:
                amounts[names.core] = amounts.get(names.core, 0) + ch.cores
        return amounts

    def what_if(self, name: str, leaving: Collection[str]) -> ClusterState:
        """A copy of the cluster reduced to node ``name`` as it would be without the pods ``leaving`` (UIDs): its
        tables charged afresh with every other record of the node, the namespace quota usage less the leaving
        pods'. Nothing here changes; the copy shares the vendors, the quota limits and the inventories. Used by
        preemption to ask the vendors' own Fit whether a pod fits once some pods are gone."""
        copy = ClusterState(self.vendors)
        copy.quotas = self.quotas.copy()
        node = self.nodes[name]
        tables = {v: t.empty() for v, t in node.tables.items()}
        copy.nodes[name] = NodeState(
            name,
            node.labels,
            node.unschedulable,
            node.cordoned,
            tables,
            node.pair_scores,
            node.node_info,
            node.problems,
            node.generation,
            node.unallocatable,
        )
        for record in self._on_node(name):
            if record.uid in leaving and not record.held:
                copy._quota_usage(record, -1)
                continue
            records, by_node = (copy.held, copy.held_by_node) if record.held else (copy.pods, copy.pods_by_node)
            records[record.uid] = record
            by_node.setdefault(name, set()).add(record.uid)
            missing = _charge_tables(self.vendors, tables, record, 1)
            if missing:
                copy.dangling[record.uid] = missing
        return copy

    # --- quotas ----------------------------------------------------------------------------------------
    def set_claim_quota(self, claim: str, namespace: str, amounts: Mapping[str, int]) -> bool:
        """What DRA claim ``claim`` counts against its namespace's quotas from now on (empty: nothing, the claim
        deallocated or gone), replacing what it counted before; one entry per claim, however many pods share it.
        Returns whether anything changed."""
        fresh = {r: a for r, a in amounts.items() if a}
        old = self.claim_quota.get(claim)
        if old == (namespace, fresh) or (old is None and not fresh):
            return False
        if old is not None:
            self.quotas.add_usage(old[0], old[1], sign=-1)
            del self.claim_quota[claim]
        if fresh:
            self.quotas.add_usage(namespace, fresh)
            self.claim_quota[claim] = (namespace, fresh)
        return True

    def upsert_quota(self, quota: ResourceQuota) -> list[InvalidInput]:
        return self.quotas.upsert(quota)

    def remove_quota(self, namespace: str, name: str) -> None:
        self.quotas.remove(namespace, name)

    # --- checking --------------------------------------------------------------------------------------
    def orphans(self) -> list[PodRecord]:
        """Records whose node is not (yet) known."""
        return [self.pods[uid] for node, uids in self.pods_by_node.items() if node not in self.nodes for uid in uids]

    def verify(self) -> list[str]:
        """Recount every device's usage and every namespace's quota usage from the records.

        Returns one line per difference; an empty list means the incremental ledger equals a full recount.
        """
        return self.verify_nodes(list(self.nodes)) + self.verify_rest()

    def verify_nodes(self, names: Iterable[str]) -> list[str]:
        """The part of :meth:`verify` that recounts the named nodes' devices (names no longer known are skipped).
        Each node is recounted in one go, so a caller may verify the nodes a slice at a time with the ledger
        moving in between (the self-check does, to keep the event loop free at 100,000 pods)."""
        diffs: list[str] = []
        for name in names:
            node = self.nodes.get(name)
            if node is not None:
                diffs += self._recount(node)
        return diffs

    def verify_rest(self) -> list[str]:
        """The part of :meth:`verify` beside the devices: quota usage and the node indexes of the records."""
        return [line for part in self.verify_rest_sliced(max(len(self.pods), 1)) for line in part]

    def verify_rest_sliced(self, size: int) -> Iterator[list[str]]:
        """:meth:`verify_rest` ``size`` records at a time: the differences found in each slice, then the quota
        comparison. The records (immutable) and the quota usage are taken at the start, so the recount is exact
        however the ledger moves between slices; a record gone or replaced since is not looked up in the index."""
        records, used = list(self.pods.items()), {ns: dict(per) for ns, per in self.quotas.used.items()}
        claims = list(self.claim_quota.values())  # DRA claims count too (``set_claim_quota``)
        recount = QuotaBook()
        for start in range(0, len(records), size):
            diffs: list[str] = []
            for uid, record in records[start : start + size]:
                recount.add_usage(record.namespace, self._quota_amounts(record))
                if self.pods.get(uid) is record and uid not in self.pods_by_node.get(record.node, ()):
                    diffs.append(f"pod {record.key} missing from its node index")
            yield diffs
        for namespace, amounts in claims:
            recount.add_usage(namespace, amounts)
        diffs = [f"quota usage: ledger {used} != recount {recount.used}"] if recount.used != used else []
        for uid, held in self.held.items():
            if uid not in self.held_by_node.get(held.node, ()):
                diffs.append(f"held record {uid} ({held.key}) missing from its node index")
        yield diffs

    def _recount(self, node: NodeState) -> list[str]:
        """The differences between a node's tables and its pods charged afresh to empty ones."""
        fresh = {v: t.empty() for v, t in node.tables.items()}
        for record in self._on_node(node.name):
            _charge_tables(self.vendors, fresh, record, 1)
        diffs: list[str] = []
        for vendor, table in node.tables.items():
            owner = self.vendors.get(vendor)
            partitions = owner.partitions if owner is not None else None
            if table.stale_summary(partitions.carves if partitions is not None else None):
                diffs.append(f"{node.name}/{vendor}: the capacity index differs from the device table")
            ref = fresh[vendor]
            for i, info in enumerate(table.infos):
                have = table.usage_of(i)
                want = ref.usage_of(i)
                if have[:3] != want[:3] or sorted(have[3], key=repr) != sorted(want[3], key=repr):
                    diffs.append(f"{node.name}/{vendor}/{info.id}: ledger {have} != recount {want}")
        return diffs

    def check(self) -> None:
        """Raise ``LedgerError`` if ``verify()`` finds differences (for tests and self-checks)."""
        diffs = self.verify()
        if diffs:
            raise LedgerError("; ".join(diffs[:10]))


def _charge_tables(
    vendors: Mapping[str, Vendor], tables: Mapping[str, DeviceTable], record: PodRecord, sign: int
) -> set[tuple[str, str]]:
    """Charge (``sign`` 1) or discharge (-1) one pod's charges to a node's tables; returns the (vendor, UUID)
    pairs it names that the tables do not have. A charge that contradicts its device's partitioning (the
    vendor's ``Partitions.conflict``) takes the device out of service (``broken``)."""
    missing: set[tuple[str, str]] = set()
    held: dict[tuple[str, str], list[Hashable]] = {}
    for vendor_name, uuid, position in record.slices:
        held.setdefault((vendor_name, uuid), []).append(position)
    for ch in record.charges:
        table = tables.get(ch.vendor)
        i = table.index_of.get(ch.uuid) if table is not None else None
        if table is None or i is None:
            missing.add((ch.vendor, ch.uuid))
            continue
        positions = held.pop((ch.vendor, ch.uuid), [])
        table.charge(i, ch.slots, ch.mem, ch.cores, positions, sign)
        owner = vendors.get(ch.vendor)
        partitions = owner.partitions if owner is not None else None
        if sign > 0 and partitions is not None:
            table.mark_broken(i, partitions.conflict(table.infos[i], positions, record.key) or table.broken[i])
    return missing
