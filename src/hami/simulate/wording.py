"""Words the views share: how a card's health reads, how a share's cores read, counted nouns.

A leaf of ``hami.simulate`` (it imports no view), so ``report``, ``top``, ``explain`` and ``defrag`` use it
without importing each other.
"""

from __future__ import annotations

from typing import Final

__all__ = ["UNLIMITED", "card_health", "cores_text", "counted"]

UNLIMITED: Final = "unlimited cores"
"""How a share without a core limit reads (0 cores in the allocation: the pod's work is not throttled, it may use
the whole card's compute) — never ``0%``."""


def cores_text(cores: int, unit: str) -> str:
    """A share's cores for a person: ``30%``, ``152/304 cores``, or ``unlimited cores`` for 0 (no core limit)."""
    return UNLIMITED if cores == 0 else f"{cores}{unit}"


def card_health(healthy: bool, blocked: str | None, cordoned: bool) -> str:
    """A card's health as ``hami top`` and ``hami simulate`` name it: ``unhealthy``, ``blocked: <why>``,
    ``cordoned`` or ``healthy`` (the first that holds)."""
    if not healthy:
        return "unhealthy"
    if blocked is not None:
        return f"blocked: {blocked}"
    return "cordoned" if cordoned else "healthy"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 pod``, ``2 pods``, ``0 pods`` (``plural`` for a noun that takes more than an ``s``)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
