"""Device vendors behind one interface (``base.Vendor``). Pure: no I/O.

The registry is explicit: ``vendors_from_config`` builds every enabled vendor from the device config.
Adding a vendor means adding its module and one line here.
"""

from __future__ import annotations

from hami.config import DeviceConfig
from hami.devices.base import Vendor
from hami.devices.hygon import HygonVendor
from hami.devices.nvidia.vendor import NvidiaVendor

__all__ = ["vendors_from_config"]


def vendors_from_config(config: DeviceConfig) -> dict[str, Vendor]:
    """Every vendor hami schedules, keyed by vendor key, in a fixed order."""
    vendors: list[Vendor] = [NvidiaVendor(config.nvidia), HygonVendor(config.hygon)]
    return {v.name: v for v in vendors}
