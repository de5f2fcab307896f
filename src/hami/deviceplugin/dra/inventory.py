"""What the DRA plugin publishes, read from the node: NVML (through the device plugin's discovery) and sysfs.

:class:`HealthBook` is pure: a GPU with a critical XID is unhealthy until ``recover_after_s`` has passed without
another one while NVML still answers for it; a GPU that discovery no longer finds stays listed, unhealthy, until
it is back. *Where hami differs from its device plugin:* there a GPU stays unhealthy until the plugin restarts;
a DRA device taint can be lifted, so hami lifts it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from hami.deviceplugin.discovery import GpuInfo, sysfs_bus_id
from hami.deviceplugin.dra.slices import NodeFacts, SliceDevice, slice_devices
from hami.deviceplugin.nvml import GpuDetails, NvmlLib
from hami.errors import NvmlError

__all__ = ["RECOVER_AFTER_S", "HealthBook", "Inventory", "pcie_root", "read_inventory"]

log = logging.getLogger(__name__)

RECOVER_AFTER_S: Final = 300.0
"""A GPU is healthy again after this long without a critical XID (and still answering NVML)."""


def pcie_root(nvml_bus_id: str, sysfs_root: Path = Path("/sys")) -> str:
    """The PCIe root complex of a GPU (``pci0000:00``) as Kubernetes' ``deviceattribute`` resolves it: the first
    path element under ``/sys/devices`` of the ``/sys/bus/pci/devices/<bus id>`` link; "" when that cannot be read."""
    bus = sysfs_bus_id(nvml_bus_id)
    link = sysfs_root / "bus" / "pci" / "devices" / bus
    try:
        target = os.readlink(link)
    except OSError:
        return ""
    resolved = os.path.normpath(os.path.join(link.parent, target))
    devices = os.path.join(str(sysfs_root), "devices") + os.sep
    if not resolved.startswith(devices + "pci") or os.path.basename(resolved) != bus:
        return ""
    return resolved[len(devices) :].split(os.sep)[0]


@dataclass(slots=True)
class HealthBook:
    """Which GPUs are unhealthy (module docstring). Times are the caller's monotonic clock."""

    recover_after_s: float = RECOVER_AFTER_S
    _xid_at: dict[str, float] = field(default_factory=dict)

    def critical_xid(self, uuid: str, now: float) -> None:
        self._xid_at[uuid] = now

    def unhealthy(self, now: float, answering: Iterable[str]) -> frozenset[str]:
        """GPUs with a recent critical XID; an XID older than ``recover_after_s`` is forgotten for a GPU that
        NVML answers for (``answering``)."""
        present = set(answering)
        for uuid, at in list(self._xid_at.items()):
            if uuid in present and now - at >= self.recover_after_s:
                del self._xid_at[uuid]
                log.info("GPU %s: no critical XID for %.0f s, healthy again", uuid, now - at)
        return frozenset(self._xid_at)


@dataclass(frozen=True, slots=True)
class Inventory:
    """One reading of the node: the devices to publish and the node-wide facts."""

    devices: tuple[SliceDevice, ...]
    facts: NodeFacts

    def by_name(self) -> dict[str, SliceDevice]:
        return {d.name: d for d in self.devices}


def read_inventory(
    lib: NvmlLib,
    gpus: Sequence[GpuInfo],
    *,
    lost: Mapping[str, GpuInfo],
    unhealthy: frozenset[str],
    root_of: Callable[[str], str] = pcie_root,
) -> Inventory:
    """The devices of ``gpus`` (just discovered) plus ``lost`` (published before, not found now: unhealthy).
    ``lib`` must be initialised. NVML failures of the details leave those attributes out."""
    details: dict[str, GpuDetails] = {}
    for gpu in gpus:
        try:
            details[gpu.uuid] = lib.details(lib.handle(gpu.index))
        except NvmlError as exc:
            log.warning("GPU %s: no brand, architecture or compute capability: %s", gpu.uuid, exc)
    try:
        cuda: tuple[int, int] | None = lib.cuda_driver_version()
    except NvmlError as exc:
        log.warning("no CUDA driver version: %s", exc)
        cuda = None
    everything = [*gpus, *lost.values()]
    devices = slice_devices(
        everything,
        details=details,
        pcie_roots={gpu.uuid: root_of(gpu.bus_id) for gpu in everything if gpu.bus_id},
        unhealthy=unhealthy | frozenset(lost),
    )
    return Inventory(devices=tuple(devices), facts=NodeFacts(driver_version=lib.driver_version(), cuda_version=cuda))
