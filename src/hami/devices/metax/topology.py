"""MetaLink: MetaX cards joined by a direct link share a zone (``linkZone`` > 0 in the node's device list).

Whole-card sGPU requests prefer cards of one zone (HAMi v2.10 ``metax/sdevice.go:579``), and with topology
awareness the node score rewards a choice that keeps linked cards together and leaves the remaining idle cards
linked (``metax/score.go``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Final

__all__ = ["DIRECT_LINK_SCORE", "link_score", "prefer_link_zones"]

DIRECT_LINK_SCORE: Final = 10


def prefer_link_zones(candidates: Sequence[int], n: int, zones: Sequence[int]) -> list[int]:
    """``n`` of ``candidates`` (in preference order; ``zones[k]`` is candidate k's zone): the first zone, smallest
    first, that holds all ``n``; else cards across zones (smallest zone first), then cards without a zone.
    Equal-sized zones are taken in zone order (deliberate: HAMi takes them in Go map order)."""
    by_zone: dict[int, list[int]] = {}
    unlinked: list[int] = []
    for c, zone in zip(candidates, zones, strict=True):
        (by_zone.setdefault(zone, []) if zone > 0 else unlinked).append(c)
    groups = [by_zone[z] for z in sorted(by_zone, key=lambda z: (len(by_zone[z]), z))]
    for group in groups:
        if len(group) >= n:
            return group[:n]
    ordered = [c for group in groups for c in group] + unlinked
    return ordered[:n]


def _pairs(devices: Sequence[int], zone: Callable[[int], int]) -> int:
    return sum(DIRECT_LINK_SCORE for a, b in combinations(devices, 2) if a != b and zone(a) > 0 and zone(a) == zone(b))


def link_score(idle: Sequence[int], chosen: Sequence[int], zone: Callable[[int], int]) -> int:
    """HAMi's topology-aware score of taking the whole cards ``chosen`` among the ``idle`` ones:
    ``10 × links(chosen) − loss``, where the loss is the links between chosen and remaining idle cards that the
    choice breaks."""
    taken = set(chosen)
    rest = [i for i in idle if i not in taken]
    allocated = _pairs(chosen, zone)
    loss = _pairs(idle, zone) - allocated - _pairs(rest, zone)
    return 10 * allocated - loss
