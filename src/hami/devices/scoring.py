"""The device score (spec §5.1) the shared fit loop orders devices by, and how many closest misses a rejection
keeps (``CLOSEST``)."""

from __future__ import annotations

from hami.devices.base import MEM_PERCENTAGE_UNSET, ContainerRequest
from hami.devices.table import DeviceTable
from hami.protocol.inventory import DeviceInfo

__all__ = ["CLOSEST", "device_score", "device_scores"]

CLOSEST = 3
"""A rejection keeps this many closest misses (``Unfit.closest``)."""


def device_scores(table: DeviceTable, req: ContainerRequest, weights: tuple[int, int, int]) -> list[float]:
    """Spec §5.1 for every device of the table, with the pod's own request counted: ``device_score`` each."""
    return [
        device_score(info, used, usedcores, usedmem, req, weights)
        for info, used, usedcores, usedmem in zip(table.infos, table.used, table.usedcores, table.usedmem, strict=True)
    ]


def device_score(
    info: DeviceInfo, used: int, usedcores: int, usedmem: int, req: ContainerRequest, weights: tuple[int, int, int]
) -> float:
    """Spec §5.1 for one device with its usage, the pod's own request counted: ``10 × (w·slots + w·cores +
    w·memory)`` fractions; 0 for a device with a zero total."""
    count, devcore, devmem = info.count, info.devcore, info.devmem
    if count == 0 or devcore == 0 or devmem == 0:
        return 0.0
    ws, wc, wm = weights
    memreq, pct = req.memreq, req.mem_percentage
    mem = memreq if memreq > 0 else (devmem * pct // 100 if pct != MEM_PERCENTAGE_UNSET else 0)
    return 10.0 * (ws * (1 + used) / count + wc * (req.coresreq + usedcores) / devcore + wm * (mem + usedmem) / devmem)
