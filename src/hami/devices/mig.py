"""MIG profile and placement choice, HAMi v2.10's dynamic model (scheduler-core.md §6.8).

Pure functions over a GPU's profiles and its occupied placements; no usage numbers are touched here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hami.protocol.inventory import MigPlacement, MigProfile

__all__ = ["overlaps", "plan_instances", "select_instance"]


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
