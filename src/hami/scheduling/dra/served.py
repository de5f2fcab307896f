"""Cards only a DRA driver serves: a node's published devices as hami's cards, for the tools (DRA mode, issue 38).

A node moved wholly to DRA mode runs the DRA driver and no device plugin: it has no hami registration of the
vendor, so the ledger charges nothing there (``hami.scheduling.dra.ledger``: not hami's to place on) and the
scheduler's state has no card to show. ``hami top``, ``explain`` and ``simulate --dra`` still have to show what
the claims hold there, exactly like a registered card. :func:`served_inventories` turns each such node's published
devices into the :class:`~hami.protocol.inventory.DeviceInfo` a registration would have given:

* ``id`` the device's UUID (a device without one is left out: nothing could be charged to it);
* ``index`` the ``minor`` attribute (hami's and HAMi's drivers), else ``index``, else the device's position among
  the node's devices in slice order;
* ``type`` the ``productName`` attribute, else the device name; ``devmem`` the memory capacity in MiB (rounded
  down: never more than the device has); ``devcore`` the vendor's whole card (100) when the cores capacity is in
  percent, else the capacity's value;
* ``count`` :data:`DRA_SHARES`: kube-scheduler limits the shares of a device by its capacity alone, not by a slot
  count;
* ``health`` false while a driver publishes the device with a blocking taint (kube-scheduler places no claim on it).

Pure; the scheduler's own state is never given these cards (``/filter`` places no device-plugin pod on a node
without a device plugin): the tools add them to their own copy (``hami.simulate.simulator``), and the scheduler
keeps them in a :class:`ServedView` of their own for its metrics.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Final

from hami.config.dra import DraConfig, DraDriverConfig
from hami.devices.base import NodeInventory
from hami.protocol.dra import ResourceClaim, ResourceSlice
from hami.protocol.inventory import DeviceInfo
from hami.scheduling.dra.amounts import device_card
from hami.scheduling.dra.ledger import DraLedger
from hami.scheduling.dra.mapping import DeviceKey, DraDevice, read_slice
from hami.scheduling.state import ClusterState

__all__ = ["DRA_SHARES", "INDEX_ATTRIBUTES", "MODEL_ATTRIBUTE", "ServedView", "card_info", "served_inventories"]

DRA_SHARES: Final = 1 << 16
"""The slots of a card only a DRA driver serves: shares of a DRA device are limited by capacity, not counted."""

INDEX_ATTRIBUTES: Final = ("minor", "index")
"""Device attributes read as the card's index, first found wins."""

MODEL_ATTRIBUTE: Final = "productName"
"""The device attribute read as the card's model (the GPU drivers hami counts by default publish it)."""


def card_info(dev: DraDevice, cfg: DraDriverConfig, position: int) -> DeviceInfo | None:
    """The card a published device stands for (module docstring); None without a UUID."""
    if dev.uuid is None:
        return None
    index = next((int(v) for v in (dev.attribute(a) for a in INDEX_ATTRIBUTES) if v is not None and v.isdigit()), None)
    mem = device_card(dev, cfg).devmem  # the ledger's reading of the memory capacity (DraLedger.unregistered_cards)
    cores = 0
    if dev.cores is not None:
        cores = 100 if cfg.cores_unit == "percent" else math.floor(dev.cores.value)
    return DeviceInfo(
        id=dev.uuid,
        index=position if index is None else index,
        count=DRA_SHARES,
        devmem=mem,
        devcore=cores,
        type=dev.attribute(MODEL_ATTRIBUTE) or dev.key[2],
        health=not dev.taints,
    )


def served_inventories(
    state: ClusterState, devices: Iterable[tuple[str, DraDevice]], drivers: Mapping[str, DraDriverConfig]
) -> dict[str, dict[str, NodeInventory]]:
    """Per node and vendor, the cards of the published ``devices`` (``DraLedger.devices()``: (vendor, device)) on
    nodes that have no hami registration of that vendor. A UUID published twice on a node counts once."""
    found: dict[str, dict[str, list[DeviceInfo]]] = {}
    positions: dict[tuple[str, str], int] = {}
    for vendor, dev in devices:
        node = state.nodes.get(dev.node)
        if node is not None and vendor in node.tables:
            continue  # registered: the ledger charges the claims on the registered cards
        at = positions.get((dev.node, vendor), 0)
        positions[(dev.node, vendor)] = at + 1
        info = card_info(dev, drivers[dev.key[0]], at)
        cards = found.setdefault(dev.node, {}).setdefault(vendor, [])
        if info is not None and all(c.id != info.id for c in cards):
            cards.append(info)
    return {
        node: {
            vendor: NodeInventory(tuple(sorted(cards, key=lambda c: c.index))) for vendor, cards in per.items() if cards
        }
        for node, per in found.items()
        if any(per.values())
    }


class ServedView:
    """The scheduler's view of the nodes only a DRA driver serves, for its metrics (DRA mode, issue 38).

    The scheduler's own ``ClusterState`` must not hold these cards (``/filter`` would place device-plugin pods
    there), so this view keeps them apart: ``state`` has, per such node, the cards :func:`served_inventories` reads
    from its published devices, and ``ledger`` (a ``DraLedger`` over ``state``) charges the claims allocated there,
    each attributed to the pods it serves. Fed the same events as the scheduler's ledger; its problems are that
    ledger's to report (not repeated here). A node that gains a hami registration of the vendor (moved back to the
    device plugin) leaves the view at its next node event.

    Its ledger takes only the claims that can count here: allocated on a device of a node in the view, or taken
    before (their updates and deletion follow). Any other allocated claim of a counted driver waits aside, indexed
    by its devices, and is handed over when a node publishing one of them joins the view; so the claims of
    registered nodes (the scheduler's ledger charges them) cost a dictionary update here, not a second
    derivation, and the view is what it would be had the ledger taken every claim.
    """

    def __init__(self, main: ClusterState, config: DraConfig) -> None:
        self.main = main
        self.state = ClusterState(main.vendors)
        self.ledger = DraLedger(self.state, config)
        self._devices: dict[str, dict[str, tuple[tuple[str, DraDevice], ...]]] = {}  # node -> slice -> devices
        self._nodes_of: dict[str, set[str]] = {}  # slice -> nodes it publishes devices of
        self._keys: dict[str, frozenset[DeviceKey]] = {}  # node in the view -> its devices
        self._in_view: dict[DeviceKey, str] = {}  # every device of a node in the view -> that node
        self._taken: set[str] = set()  # claims the ledger has (by id, as the ledger names them)
        self._waiting: dict[str, tuple[ResourceClaim, frozenset[DeviceKey]]] = {}  # claim id -> claim, devices
        self._waiting_on: dict[DeviceKey, set[str]] = {}  # device -> waiting claims allocated on it

    def slice_event(self, sl: ResourceSlice, deleted: bool = False) -> None:
        name = sl.metadata.name
        touched = self._nodes_of.pop(name, set())
        for node in touched:
            per = self._devices.get(node, {})
            per.pop(name, None)
            if not per:
                self._devices.pop(node, None)
        cfg = self.ledger.drivers.get(sl.spec.driver)
        if not deleted and cfg is not None:
            found: dict[str, list[tuple[str, DraDevice]]] = {}
            for dev in read_slice(sl, cfg)[0]:
                found.setdefault(dev.node, []).append((cfg.vendor, dev))
            for node, devices in found.items():
                self._devices.setdefault(node, {})[name] = tuple(devices)
            if found:
                self._nodes_of[name] = set(found)
            touched |= set(found)
        self.ledger.slice_event(sl, deleted)
        for node in sorted(touched):
            self.node_event(node)

    def claim_event(self, claim: ResourceClaim, deleted: bool = False) -> None:
        """The ledger takes the claim when it can count here, else it waits aside (class docstring)."""
        cid = claim.metadata.uid or claim.key
        self._unwait(cid)
        keys = frozenset() if deleted else self._devices_of(claim)
        if cid in self._taken or any(k in self._in_view for k in keys):
            if deleted:
                self._taken.discard(cid)
            else:
                self._taken.add(cid)
            self.ledger.claim_event(claim, deleted)
        elif keys:
            self._waiting[cid] = (claim, keys)
            for key in keys:
                self._waiting_on.setdefault(key, set()).add(cid)

    def _devices_of(self, claim: ResourceClaim) -> frozenset[DeviceKey]:
        allocation = claim.status.allocation
        results = allocation.devices.results if allocation is not None else ()
        return frozenset((r.driver, r.pool, r.device) for r in results if r.driver in self.ledger.drivers)

    def _unwait(self, cid: str) -> None:
        gone = self._waiting.pop(cid, None)
        for key in gone[1] if gone is not None else ():
            waiting = self._waiting_on.get(key)
            if waiting is not None:
                waiting.discard(cid)
                if not waiting:
                    del self._waiting_on[key]

    def _set_keys(self, node: str, keys: frozenset[DeviceKey]) -> None:
        """The devices of ``node`` that count in the view now (none once it left); the claims waiting on a device
        that joined are handed to the ledger."""
        for key in self._keys.pop(node, frozenset()):
            self._in_view.pop(key, None)
        if not keys:
            return
        self._keys[node] = keys
        self._in_view.update(dict.fromkeys(keys, node))
        for cid in sorted({c for key in keys for c in self._waiting_on.get(key, ())}):
            claim = self._waiting[cid][0]
            self._unwait(cid)
            self._taken.add(cid)
            self.ledger.claim_event(claim)

    def pod_event(self, namespace: str, name: str, uid: str, deleted: bool = False) -> None:
        self.ledger.pod_event(namespace, name, uid, deleted)

    def node_event(self, name: str) -> None:
        """The node (its registration, labels) or its published devices changed: rebuild its served cards."""
        devices = [vd for per in self._devices.get(name, {}).values() for vd in per]
        served = served_inventories(self.main, devices, self.ledger.drivers).get(name, {})
        old = self.state.nodes.get(name)
        main = self.main.nodes.get(name)
        if not served:
            self._set_keys(name, frozenset())
            if old is not None:
                self.state.remove_node(name)
                self.ledger.node_event(name)
            return
        self._set_keys(name, frozenset(dev.key for _, dev in devices))
        same = old is not None and {v: t.infos for v, t in old.tables.items()} == {
            v: inv.devices for v, inv in served.items()
        }
        if same and old is not None and main is not None and old.labels == main.labels:
            return
        labels = dict(main.labels) if main is not None else {}
        self.state.set_node(name, served, labels=labels, unschedulable=main.unschedulable if main else False)
        self.ledger.node_event(name)
