"""What a DRA device is and what a claim holds of it, in hami's units, without a hami registration (issue 38).

The ledger (``ledger.py``) charges a claim to the *registered* card of the same UUID. A node served by DRA alone
has no registration; two things still need amounts there:

* **the node policy** for DRA-mode pods (``hami.scheduling.dra.policy``): how full each card of a node is;
* **namespace quotas** (``limits.<memory resource>``, ``limits.<core resource>`` of the driver's vendor): what the
  namespace's allocated claims hold, counted once per claim whatever its node.

Both read the device as its own card: memory is its ``memoryCapacity`` converted to MiB, cores 100 (one whole card in
percent; a ``share`` unit is scaled to that), and a shared allocation takes its ``consumedCapacity`` converted with the
same rounding up as the ledger (``mapping.taken``); an exclusive one takes the whole device; admin access, nothing.
Pure functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hami.config.dra import MEMORY_UNITS_MIB, DraDriverConfig
from hami.protocol.dra import DeviceRequestAllocationResult
from hami.protocol.inventory import DeviceInfo
from hami.scheduling.dra.mapping import DraDevice, taken

__all__ = ["WHOLE_CORES", "Held", "device_card", "result_held"]

WHOLE_CORES = 100
"""One whole card in core units (percent): what a device read as its own card has."""


@dataclass(frozen=True, slots=True)
class Held:
    """What one allocation result holds of a device: MiB of memory and core units (percent of one card)."""

    mem: int
    cores: int


def device_card(dev: DraDevice, cfg: DraDriverConfig) -> DeviceInfo:
    """The device read as its own card: its memory in MiB (rounded down: a card never looks bigger than it is),
    ``WHOLE_CORES`` cores, one slot (DRA has no slot count). A device publishing no memory capacity has 0 MiB."""
    mem = 0
    if dev.memory is not None:
        num, den = MEMORY_UNITS_MIB[cfg.memory_unit]
        mem = math.floor(dev.memory.value * num / den)
    return DeviceInfo(id=dev.uuid or dev.key[2], count=1, devmem=mem, devcore=WHOLE_CORES)


def result_held(result: DeviceRequestAllocationResult, dev: DraDevice, cfg: DraDriverConfig, where: str) -> Held:
    """What ``result`` (an allocation on ``dev``) holds: a share its consumed capacity (rounded up, as the ledger
    charges it), an exclusive allocation the whole device, admin access nothing."""
    if result.admin_access:
        return Held(0, 0)
    card = device_card(dev, cfg)
    if result.share_id is None or not dev.shared:
        return Held(card.devmem, card.devcore)
    amount = taken(result, dev, cfg, card, where)
    return Held(amount.mem, amount.cores)
