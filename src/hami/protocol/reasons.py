"""Why a device or node does not fit: reason codes as data (scheduler-core.md §4.8).

Reason values are HAMi's exact wire keys, including the ``CardUuidMismatch`` spelling, so users' runbooks
and dashboards keep working. They become text only here (``summarize``); nothing parses the text back.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Reason", "Rejection", "summarize"]


class Reason(enum.StrEnum):
    CARD_TYPE_MISMATCH = "CardTypeMismatch"
    CARD_UUID_MISMATCH = "CardUuidMismatch"  # HAMi's spelling: it is a wire key
    CARD_TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
    CARD_COMPUTE_UNITS_EXHAUSTED = "CardComputeUnitsExhausted"
    CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
    CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
    CARD_NOT_HEALTH = "CardNotHealth"
    CARD_CORDONED = "CardCordoned"
    NUMA_NOT_FIT = "NumaNotFit"
    EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = "ExclusiveDeviceAllocateConflict"
    CARD_NOT_FOUND_CUSTOM_FILTER_RULE = "CardNotFoundCustomFilterRule"
    CARD_MIG_TOPOLOGY_INFEASIBLE = "CardMigTopologyInfeasible"
    NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
    ALLOCATED_CARDS_INSUFFICIENT_REQUEST = "AllocatedCardsInsufficientRequest"
    RESOURCE_QUOTA_NOT_FIT = "ResourceQuotaNotFit"
    MODE_NOT_FIT = "ModeNotFit"
    CARD_UNHEALTHY = "CardUnhealthy"  # MetaX sGPU's own spelling of CardNotHealth
    CARD_QOS_POLICY_MISMATCH = "CardQosPolicyMismatch"
    CARD_APP_CLASS_MISMATCH = "CardAppClassMismatch"
    # Node-level reasons (no device involved). HAMi writes these as bare strings.
    NODE_UNREGISTERED = "NodeUnregistered"
    NODE_QUARANTINED = "NodeQuarantined"
    NODE_DEVICES_NOT_ALLOCATABLE = "NodeDevicesNotAllocatable"  # hami's own: kubelet does not back the registration
    NODE_NO_DRA_DEVICES = "NodeNoDraDevices"  # hami's own: a DRA-mode pod, and the node publishes no DRA device


@dataclass(frozen=True, slots=True)
class Rejection:
    """One reason one device (or, with ``device=None``, the whole node) was not used.

    ``requested`` / ``available`` carry the numbers behind the reason in the unit the reason implies
    (MiB for memory, percent of a card for cores, slots for time slicing, devices for counts).
    """

    reason: Reason
    device: str | None = None
    requested: int = 0
    available: int = 0


def summarize(counts: Mapping[Reason, int], total: int) -> str:
    """HAMi's per-node reason text: ``"<count>/<total> <Reason>"`` entries, sorted as strings, joined by ``", "``.

    Sorting is lexicographic on the whole entry, as HAMi does (so ``"10/12 X"`` precedes ``"2/12 Y"``).
    """
    return ", ".join(sorted(f"{n}/{total} {reason.value}" for reason, n in counts.items() if n > 0))
