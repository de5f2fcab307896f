"""Priority feedback: what HAMi's monitor writes back into the regions every round, as data.

``nvidia.com/priority`` becomes ``CUDA_TASK_PRIORITY`` in the container (the webhook), which HAMi-core stores as
the region's ``priority`` (0 high, 1 low). On every kernel launch HAMi-core waits while ``recent_kernel`` is
negative, then sets it to 2; it enforces the core limit only while ``utilization_switch`` is 1. Each round
(HAMi: every 5 s) the monitor, over the regions of live pods:

1. **ages** activity: a positive ``recent_kernel`` is decremented (written back); a region whose value is still
   positive afterwards counts as *active* on each of its devices, at its priority;
2. **blocks**: if, on the first of a region's devices that has any active region, a region of strictly higher
   priority (a lower number) is active, ``recent_kernel`` becomes -1 (kernel launches wait); otherwise a negative
   ``recent_kernel`` is reset to 0;
3. **switches**: if on any of its devices a higher-priority region is active, or more than one region of its own
   priority, ``utilization_switch`` becomes 1 (the core limit is enforced); otherwise 0.

So a low-priority task runs unthrottled while it is alone, is limited to its cores as soon as it shares the GPU
with another active task, and stops launching kernels while a high-priority task on the same GPU is active. Only
changed values are written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["FeedbackInput", "Write", "observe"]


@dataclass(frozen=True, slots=True)
class FeedbackInput:
    """One region's feedback fields (``key`` identifies it; ``uuids`` are its initialised devices, in order)."""

    key: str
    priority: int
    recent_kernel: int
    utilization_switch: int
    uuids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Write:
    """Set ``field`` (``recent_kernel`` or ``utilization_switch``) of region ``key`` to ``value``."""

    key: str
    field: str
    value: int


def observe(regions: Sequence[FeedbackInput]) -> list[Write]:
    """One feedback round (see the module docstring): the writes to make, in order."""
    writes: list[Write] = []
    active: dict[str, Counter[int]] = {}
    recent: dict[str, int] = {}
    for region in regions:
        value = region.recent_kernel
        if value > 0:
            value -= 1
            writes.append(Write(region.key, "recent_kernel", value))
            if value > 0:
                for uuid in region.uuids:
                    active.setdefault(uuid, Counter())[region.priority] += 1
        recent[region.key] = value
    for region in regions:
        value = recent[region.key]
        if _blocked(active, region):
            if value >= 0:
                writes.append(Write(region.key, "recent_kernel", -1))
        elif value < 0:
            writes.append(Write(region.key, "recent_kernel", 0))
        switch = 1 if _contended(active, region) else 0
        if switch != region.utilization_switch:
            writes.append(Write(region.key, "utilization_switch", switch))
    return writes


def _higher_active(counts: Counter[int], priority: int) -> bool:
    return any(count > 0 for p, count in counts.items() if p < priority)


def _blocked(active: dict[str, Counter[int]], region: FeedbackInput) -> bool:
    for uuid in region.uuids:
        if uuid in active:
            return _higher_active(active[uuid], region.priority)
    return False


def _contended(active: dict[str, Counter[int]], region: FeedbackInput) -> bool:
    for uuid in region.uuids:
        counts = active.get(uuid)
        if counts is not None and (_higher_active(counts, region.priority) or counts[region.priority] > 1):
            return True
    return False
