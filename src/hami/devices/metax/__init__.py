"""MetaX: two vendors from the ``metax:`` config section — whole cards (``Metax-GPU``, ``gpu``) and shared slices
of a card (``Metax-SGPU``, ``sgpu``). See each module's docstring."""

from __future__ import annotations

from typing import Final

from hami.devices.family import ChartValues, vendor_family
from hami.devices.metax.config import MetaxConfig
from hami.devices.metax.gpu import GPU, GPU_KEYS, MetaxGpuVendor
from hami.devices.metax.sgpu import SGPU_KEYS, MetaxSgpuVendor
from hami.devices.metax.wire import SGPU

__all__ = ["GPU", "GPU_KEYS", "METAX_FAMILY", "SGPU", "SGPU_KEYS", "MetaxConfig", "MetaxGpuVendor", "MetaxSgpuVendor"]

METAX_FAMILY: Final = vendor_family(
    "metax",
    MetaxConfig,
    MetaxGpuVendor,
    MetaxSgpuVendor,
    chart=ChartValues(
        {
            "resourceCountName": None,
            "resourceVCountName": "metaxResourceName",
            "resourceVMemoryName": "metaxResourceMem",
            "resourceVCoreName": "metaxResourceCore",
            "sgpuTopologyAware": "metaxsGPUTopologyAware",
        },
        ("resourceCountName", "resourceVCountName", "resourceVMemoryName", "resourceVCoreName"),
    ),
)
"""The registry entry: the ``metax:`` section, whole cards and sGPU slices."""
