"""MIG, HAMi v2.10's dynamic model (scheduler-core.md §6.8): NVIDIA's partition hook.

Profile and placement choice are pure functions over a GPU's profiles and its occupied placements; no usage
numbers are touched here. ``MigPartitions`` plugs them into the shared fit loop and the ledger.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from hami.devices.base import Carved, Selector, Slice, SliceAt
from hami.protocol.allocation import MigAllocation
from hami.protocol.inventory import DeviceInfo, MigPlacement, MigProfile
from hami.protocol.reasons import Reason

__all__ = ["MigPartitions", "mig_allocations", "overlaps", "plan_instances", "select_instance"]


def overlaps(a: MigPlacement, b: MigPlacement) -> bool:
    """Whether two slice intervals ``[start, start + size)`` intersect."""
    return a.start < b.start + b.size and b.start < a.start + a.size


def _ordered_profiles(profiles: Sequence[MigProfile]) -> list[MigProfile]:
    return sorted(profiles, key=lambda p: (p.memory_mb, p.slice_count))


def _ordered_placements(profile: MigProfile) -> list[MigPlacement]:
    # HAMi fills 1g./3g. profiles from the top of the GPU and the others from the bottom.
    descending = profile.name.startswith(("1g.", "3g."))
    return sorted(profile.placements, key=lambda p: p.start, reverse=descending)


def select_instance(
    profiles: Sequence[MigProfile], occupied: Iterable[MigPlacement], memory: int
) -> tuple[MigProfile, MigPlacement] | None:
    """The smallest profile with at least ``memory`` MiB that still has a free placement, and that placement."""
    taken = tuple(occupied)
    for profile in _ordered_profiles(profiles):
        if profile.memory_mb < memory:
            continue
        for placement in _ordered_placements(profile):
            if not any(overlaps(placement, t) for t in taken):
                return profile, placement
    return None


def plan_instances(
    profiles: Sequence[MigProfile], occupied: Iterable[MigPlacement], memories: Sequence[int]
) -> list[tuple[MigProfile, MigPlacement]] | None:
    """Place one instance per requested memory size, in order, greedily as HAMi does; None if any fails."""
    taken = list(occupied)
    plan: list[tuple[MigProfile, MigPlacement]] = []
    for memory in memories:
        chosen = select_instance(profiles, taken, memory)
        if chosen is None:
            return None
        plan.append(chosen)
        taken.append(chosen[1])
    return plan


class MigPartitions:
    """NVIDIA's partition hook (``hami.devices.base.Partitions``): a GPU in ``mig`` mode is handed out as MIG
    instances of the profiles it registers (none registered: none can be planned, as in HAMi, so the GPU is never
    shared as a whole card); positions are ``MigPlacement`` slice intervals.

    Fail closed (spec §6.8 usage reconstruction): a pod's device on a ``mig`` GPU without a reservation for it
    (no ``hami.io/vgpu-mig-allocations`` entry, or none left) takes the GPU out of service, since its instance
    is unknown and any instance might be in use; a reservation on a GPU that is not in ``mig`` mode does too.
    """

    infeasible = Reason.CARD_MIG_TOPOLOGY_INFEASIBLE
    slice_kind = "MIG"

    def slice_labels(self, info: DeviceInfo, positions: Sequence[Hashable]) -> list[str]:
        """``<profile>@<start>`` by start (``2g.20gb@0``; ``<size>-slice@<start>`` for a placement no profile has)."""
        placements = sorted((p for p in positions if isinstance(p, MigPlacement)), key=lambda p: (p.start, p.size))
        return [
            f"{next((m.name for m in info.mig_profiles if p in m.placements), f'{p.size}-slice')}@{p.start}"
            for p in placements
        ]

    def carves(self, info: DeviceInfo) -> bool:
        return info.mode == "mig"

    def several_per_device(self, infos: Sequence[DeviceInfo], selector: Selector) -> bool:
        return any(self.carves(info) for info in infos) and (selector.modes is None or "mig" in selector.modes)

    def plan(self, info: DeviceInfo, occupied: Sequence[Hashable], amounts: Sequence[int]) -> list[Carved] | None:
        taken = [p for p in occupied if isinstance(p, MigPlacement)]
        plan = plan_instances(info.mig_profiles, taken, amounts)
        if plan is None:
            return None
        return [Carved(Slice(profile.name, placement), profile.memory_mb, profile.core) for profile, placement in plan]

    def conflict(self, info: DeviceInfo, held: Sequence[Hashable], owner: str) -> str | None:
        if info.mode == "mig" and not held:
            return f"MIG task of {owner} has no placement on this GPU"
        if info.mode != "mig" and held:
            return f"MIG task of {owner} on a GPU in {info.mode or 'hami-core'} mode"
        return None


def mig_allocations(slices: Sequence[SliceAt]) -> list[MigAllocation]:
    """The ``hami.io/vgpu-mig-allocations`` elements for the slices of one decision (spec §2.6)."""
    out: list[MigAllocation] = []
    for s in slices:
        if isinstance(s.slice.position, MigPlacement):
            out.append(MigAllocation(s.container, s.device, s.uuid, s.slice.template, s.slice.position))
    return out
