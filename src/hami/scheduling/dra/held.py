"""Capacity DRA claims hold, as ledger records and per card (for display and metrics)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hami.scheduling.state import ClusterState, PodRecord

__all__ = ["DraRecord", "HeldCard", "held_by_card"]


@dataclass(frozen=True, slots=True)
class DraRecord(PodRecord):
    """A claim's capacity on one node, charged like a pod's and kept in ``ClusterState.held`` (its quota is counted
    per claim: ``ClusterState.set_claim_quota``)."""

    held: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class HeldCard:
    """What DRA claims hold of one card (for display): how many claims, slots, MiB and core units."""

    claims: int
    slots: int
    mem: int
    cores: int


def held_by_card(state: ClusterState) -> dict[tuple[str, str, str], HeldCard]:
    """DRA-held capacity per card, keyed by (node, vendor, uuid), summed over the held records."""
    out: dict[tuple[str, str, str], HeldCard] = {}
    for record in state.held.values():
        if not isinstance(record, DraRecord):
            continue  # a preemption hold (``hami.scheduling.holds``) is no claim
        for ch in record.charges:
            key = (record.node, ch.vendor, ch.uuid)
            have = out.get(key, HeldCard(0, 0, 0, 0))
            out[key] = HeldCard(have.claims + 1, have.slots + ch.slots, have.mem + ch.mem, have.cores + ch.cores)
    return out
