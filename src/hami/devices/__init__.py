"""Device vendors behind one interface (``base.Vendor``). Pure: no I/O.

The registry is explicit: ``vendors_from_config`` builds every enabled vendor from the device config.
Adding a vendor means adding its module and one line here.
"""

from __future__ import annotations

from hami.config import DeviceConfig, default_device_config
from hami.devices.amd import AmdVendor
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

__all__ = ["registered_keys", "vendors_from_config"]


def vendors_from_config(config: DeviceConfig) -> dict[str, Vendor]:
    """Every vendor hami schedules, keyed by vendor key, in a fixed order."""
    vendors: list[Vendor] = [NvidiaVendor(config.nvidia), HygonVendor(config.hygon)]
    vendors += [KunlunVendor(config.kunlun), XpuVendor(config.kunlun)]
    vendors += [EnflameGcuVendor(config.enflame), EnflameDrsVendor(config.enflame), AwsNeuronVendor(config.awsneuron)]
    vendors += [CambriconVendor(config.cambricon), MthreadsVendor(config.mthreads)]
    vendors += [AmdVendor(config.amd), BirenVendor(config.biren), VastaiVendor(config.vastai)]
    vendors += [IluvatarVendor(chip) for chip in config.iluvatars]
    vendors += [MetaxGpuVendor(config.metax), MetaxSgpuVendor(config.metax)]
    return {v.name: v for v in vendors}


def registered_keys() -> tuple[VendorKeys, ...]:
    """Every registered vendor's annotation keys, in registry order (the node agent reads the other vendors'
    allocations to leave their work alone). Keys do not depend on the config."""
    return tuple(v.keys for v in vendors_from_config(default_device_config()).values())
