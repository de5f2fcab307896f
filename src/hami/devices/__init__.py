"""Device vendors behind one interface (``base.Vendor``). Pure: no I/O.

The registry is explicit: ``FAMILIES`` maps each family — the chart's ``devices.<family>`` key — to the vendors
it builds from the device config (one for most families; one per chip where HAMi keys a vendor per chip).
``vendors_from_config`` builds the enabled families' vendors. Adding a vendor means adding its module and one
line in ``FAMILIES``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Final

from hami.config import DeviceConfig, default_device_config
from hami.devices.amd import AmdVendor
from hami.devices.ascend import ascend_vendors
from hami.devices.awsneuron import AwsNeuronVendor
from hami.devices.base import Vendor
from hami.devices.biren import BirenVendor
from hami.devices.cambricon import CambriconVendor
from hami.devices.enflame import EnflameDrsVendor, EnflameGcuVendor
from hami.devices.hygon import HygonVendor
from hami.devices.iluvatar import IluvatarVendor
from hami.devices.kunlun import KunlunVendor, XpuVendor
from hami.devices.metax import MetaxGpuVendor, MetaxSgpuVendor
from hami.devices.mthreads import MthreadsVendor
from hami.devices.nvidia.vendor import NvidiaVendor
from hami.devices.vastai import VastaiVendor
from hami.protocol.keys import VendorKeys

__all__ = ["FAMILIES", "registered_keys", "vendors_from_config"]

FAMILIES: Final[dict[str, Callable[[DeviceConfig], Sequence[Vendor]]]] = {
    "nvidia": lambda c: (NvidiaVendor(c.nvidia),),
    "hygon": lambda c: (HygonVendor(c.hygon),),
    "kunlun": lambda c: (KunlunVendor(c.kunlun), XpuVendor(c.kunlun)),
    "enflame": lambda c: (EnflameGcuVendor(c.enflame), EnflameDrsVendor(c.enflame)),
    "awsneuron": lambda c: (AwsNeuronVendor(c.awsneuron),),
    "cambricon": lambda c: (CambriconVendor(c.cambricon),),
    "mthreads": lambda c: (MthreadsVendor(c.mthreads),),
    "amd": lambda c: (AmdVendor(c.amd),),
    "biren": lambda c: (BirenVendor(c.biren),),
    "vastai": lambda c: (VastaiVendor(c.vastai),),
    "iluvatar": lambda c: tuple(IluvatarVendor(chip) for chip in c.iluvatars),
    "metax": lambda c: (MetaxGpuVendor(c.metax), MetaxSgpuVendor(c.metax)),
    "ascend": lambda c: tuple(ascend_vendors(c.vnpus)),
}
"""Every vendor family hami schedules, in registry order (the order vendors are tried and listed)."""


def vendors_from_config(config: DeviceConfig, enabled: Collection[str] | None = None) -> dict[str, Vendor]:
    """The vendors of the ``enabled`` families (``FAMILIES`` keys; None: every family), keyed by vendor key, in
    registry order. A family switched off is not registered: its resources, registrations and allocations are
    not hami's (``hami scheduler``'s ``--enable-ascend``, ``--disable-devices``; see ``SchedulerSettings``)."""
    vendors = [v for family, build in FAMILIES.items() if enabled is None or family in enabled for v in build(config)]
    return {v.name: v for v in vendors}


def registered_keys() -> tuple[VendorKeys, ...]:
    """Every registered vendor's annotation keys, in registry order (the node agent reads the other vendors'
    allocations to leave their work alone). Keys do not depend on the config."""
    return tuple(v.keys for v in vendors_from_config(default_device_config()).values())
