"""NVIDIA GPUs (vendor key ``NVIDIA``): the ``nvidia:`` section (``config``), request parsing (``request``),
admission (``admission``), MIG partitions (``mig``) and the vendor (``vendor``)."""

from __future__ import annotations

from typing import Final

from hami.devices.family import ChartValues, vendor_family
from hami.devices.nvidia.config import GpuCorePolicy, MigProfileAllowlistEntry, NvidiaConfig
from hami.devices.nvidia.request import parse_nvidia_request, parse_pod_nvidia_requests
from hami.devices.nvidia.vendor import NvidiaVendor

__all__ = [
    "NVIDIA_FAMILY",
    "GpuCorePolicy",
    "MigProfileAllowlistEntry",
    "NvidiaConfig",
    "NvidiaVendor",
    "parse_nvidia_request",
    "parse_pod_nvidia_requests",
]

_DEVICES: Final = "devices.nvidia."
_PLUGIN: Final = "devicePlugin."
_MANAGED: Final = (
    "resourceCountName",
    "resourceMemoryName",
    "resourceMemoryPercentageName",
    "resourceCoreName",
    "resourcePriorityName",
)

NVIDIA_FAMILY: Final = vendor_family(
    "nvidia",
    NvidiaConfig,
    NvidiaVendor,
    chart=ChartValues(
        {
            "resourceCountName": "resourceName",
            "resourceMemoryName": "resourceMem",
            "resourceMemoryPercentageName": "resourceMemPercentage",
            "resourceCoreName": "resourceCores",
            "resourcePriorityName": "resourcePriority",
            "overwriteEnv": "scheduler.overwriteEnv",
            **{key: _DEVICES + key for key in ("defaultMemory", "defaultCores", "defaultGPUNum", "memoryFactor")},
            **{key: _DEVICES + key for key in ("gpuCorePolicy", "libCudaLogLevel", "runtimeClassName")},
            **{key: _PLUGIN + key for key in ("deviceSplitCount", "deviceMemoryScaling", "deviceCoreScaling")},
            **{key: _PLUGIN + key for key in ("preConfiguredDeviceMemory", "enableNumaTopology")},
            "disableCoreLimit": _PLUGIN + "disablecorelimit",
        },
        _MANAGED,
    ),
)
"""The registry entry: the ``nvidia:`` section (HAMi's NVIDIA keys, the device plugin's among them), one vendor."""
