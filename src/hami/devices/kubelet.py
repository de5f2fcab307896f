"""Whether kubelet backs a node's registered devices: the node's ``status.allocatable`` of the vendor's count resource.

A registration annotation (or the node's capacity) says which devices a node has; kubelet's allocatable says how many
units of the vendor's count resource (``ResourceNames.count``: ``nvidia.com/gpu``) its device plugin serves right now.
The registration outlives the plugin: while the plugin is gone or restarting, kubelet marks every unit unhealthy
(allocatable 0, capacity unchanged) and rejects each pod bound there (``UnexpectedAdmissionError``, "no healthy
devices present"). So a vendor's devices on a node count only while kubelet reports at least the units they need:

* ``kubelet_units`` — the fewest units kubelet reports while the plugin serves the healthy registered devices: the
  vendor's own ``KubeletUnits`` when it declares one (NVIDIA: each healthy card's ``count``, the fake devices its
  plugin advertises), else one per healthy device for a vendor with a registration annotation, and one in all for a
  vendor whose devices come from the node's capacity (``VendorKeys.register`` ""): their number is kubelet's own,
  so only "none at all" (allocatable 0) tells of a plugin that is gone;
* ``allocatable_shortfall`` — why the node's allocatable falls short of that, or None. A node that does not report
  the count resource in ``status.allocatable`` at all (a Node object without status, as test fixtures and
  ``hami simulate`` snapshots have; a fake node with no kubelet) is not judged: the registration alone counts, as
  before. kubelet keeps a resource in allocatable once its plugin has registered (at 0 after the plugin leaves, and
  after a kubelet restart until the plugin registers again), so every window this rule is for is judged.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Protocol, cast, runtime_checkable

from hami.devices.base import Vendor
from hami.errors import QuantityError
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Node
from hami.protocol.quantity import quantity_as_int

__all__ = ["KubeletUnits", "allocatable_shortfall", "kubelet_units"]


@runtime_checkable
class KubeletUnits(Protocol):
    """Optional for a vendor that knows how many units of its count resource its device plugin advertises per
    registered device. Without it, one unit per healthy device is required (none more)."""

    def kubelet_units(self, devices: Sequence[DeviceInfo]) -> int:
        """The units kubelet reports at least while the plugin serves ``devices`` (the healthy registered ones)."""


def kubelet_units(vendor: Vendor, devices: Sequence[DeviceInfo]) -> int:
    """The fewest units of ``vendor``'s count resource kubelet reports while its plugin serves ``devices`` (all
    registered devices; only the healthy ones count)."""
    healthy = [d for d in devices if d.health]
    if not healthy:
        return 0
    if _declares_units(type(vendor)):
        return cast(KubeletUnits, vendor).kubelet_units(healthy)
    return len(healthy) if vendor.keys.register else 1


@functools.cache
def _declares_units(kind: type) -> bool:
    """Whether a vendor class implements ``KubeletUnits``, asked once per class: the protocol check costs about 20 µs,
    and every node update of a scheduler starting on 5,000 nodes asks it."""
    return issubclass(kind, KubeletUnits)


def allocatable_shortfall(vendor: Vendor, node: Node, devices: Sequence[DeviceInfo]) -> str | None:
    """Why kubelet does not back ``vendor``'s registered ``devices`` on ``node`` (the text says what kubelet reports
    and what the registration needs), or None when it does or the node does not report the count resource."""
    resource = vendor.resources.count
    raw = node.status.allocatable.get(resource) if resource else None
    if raw is None:
        return None
    where = f"status.allocatable[{resource}]"
    try:
        reported = quantity_as_int(raw, where)
    except QuantityError as err:
        return f"kubelet's count cannot be read: {err}"
    needed = kubelet_units(vendor, devices)
    if reported >= needed:
        return None
    source = f"registration ({vendor.keys.register})" if vendor.keys.register else "capacity"
    healthy = sum(1 for d in devices if d.health)
    gone = "the device plugin is gone or restarting" if reported <= 0 else "kubelet serves fewer devices"
    return (
        f"kubelet reports {resource} allocatable {reported} where the {source} of {healthy} healthy "
        f"device(s) needs {needed}: {gone}"
    )
