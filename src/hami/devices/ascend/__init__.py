"""Huawei Ascend NPUs: one vendor per chip of the ``vnpus:`` section (``vendor``), the section's model
(``config``) and the Ascend wire formats (``wire``). See each module's docstring."""

from __future__ import annotations

from typing import Final

from hami.devices.ascend.config import (
    VnpuChipConfig,
    VnpusConfig,
    VnpuTemplate,
    default_vnpu_chips,
    legacy_list,
    newer_than_v210,
)
from hami.devices.ascend.vendor import (
    ASCEND_VISIBLE_DEVICES,
    HAMI_CORE,
    NODE_OPT_IN,
    PREDICATE_TIME,
    VNPU_MODE,
    AscendAdmitter,
    AscendTemplates,
    AscendVendor,
    ascend_keys,
    ascend_vendors,
    trim_memory,
)
from hami.devices.family import ChartValues, Gate, VendorFamily

__all__ = [
    "ASCEND_FAMILY",
    "ASCEND_VISIBLE_DEVICES",
    "HAMI_CORE",
    "NODE_OPT_IN",
    "PREDICATE_TIME",
    "VNPU_MODE",
    "AscendAdmitter",
    "AscendTemplates",
    "AscendVendor",
    "VnpuChipConfig",
    "VnpuTemplate",
    "VnpusConfig",
    "ascend_keys",
    "ascend_vendors",
    "default_vnpu_chips",
    "trim_memory",
]

ASCEND_FAMILY: Final = VendorFamily[VnpusConfig](
    family="ascend",
    section="vnpus",
    model=VnpusConfig,
    default=VnpusConfig,
    build=lambda c: tuple(ascend_vendors(c)),
    gate=Gate("enable_ascend", "Schedule Huawei Ascend NPUs"),
    read=legacy_list,
    notes=newer_than_v210,
    chart=ChartValues(
        {"hamiVnpuCore": "devices.ascend.hamiVnpuCore", "configs": "devices.ascend.chips"},
        ("resourceName", "resourceMemoryName", "resourceCoreName"),
    ),
)
"""The registry entry: the ``vnpus:`` section, one vendor per chip of ``configs`` (keyed by ``commonWord``), off
unless ``--enable-ascend``. The chart renders ``configs`` from ``devices.ascend.chips``."""
