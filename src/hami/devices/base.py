"""What every vendor shares: the parsed container request (scheduler-core.md §1.5).

The vendor interface itself (``Vendor`` protocol: parse requests, decode inventory, fit, encode annotations)
is added with the scheduling decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["MEM_PERCENTAGE_UNSET", "ContainerRequest"]

MEM_PERCENTAGE_UNSET: Final = 101
"""HAMi's sentinel for "no memory percentage given" (scheduler-core.md §3.2)."""


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """One container's request for one vendor's devices.

    * ``vendor`` — the vendor key (``"NVIDIA"``, ``"DCU"``), not a card model;
    * ``nums`` — how many devices (> 0; containers without a request have no ``ContainerRequest``);
    * ``memreq`` — MiB per device, already multiplied by the vendor's memory factor (0 = use the percentage);
    * ``mem_percentage`` — percent of each device's memory, 1..100, or ``MEM_PERCENTAGE_UNSET`` (101);
    * ``coresreq`` — core units per device (percent of a card);
    * ``priority`` — ``nvidia.com/priority`` (task priority passed to HAMi-core), ``None`` when absent.
    """

    vendor: str
    nums: int
    memreq: int = 0
    mem_percentage: int = MEM_PERCENTAGE_UNSET
    coresreq: int = 0
    priority: int | None = None
