"""Capacity DRA claims hold, as ledger records and per card (for display and metrics)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hami.protocol import keys
from hami.protocol.dra import ResourceClaim
from hami.scheduling.state import ClusterState, PodRecord

__all__ = ["DraRecord", "HeldCard", "claim_users", "consumers", "held_by_card"]


@dataclass(frozen=True, slots=True)
class DraRecord(PodRecord):
    """A claim's capacity on one node, charged like a pod's and kept in ``ClusterState.held`` (its quota is counted
    per claim: ``ClusterState.set_claim_quota``).

    ``consumers`` are the names of the pods (in the claim's namespace) the claim's capacity is attributed to
    (:func:`consumers`): ``hami top`` and the per-pod metrics show the claim's share under each of them."""

    held: ClassVar[bool] = True
    consumers: tuple[str, ...] = ()


def consumers(claim: ResourceClaim) -> tuple[str, ...]:
    """The pods a claim serves, by name: those its ``status.reservedFor`` names (kube-scheduler reserves the claim
    for the pod it allocated it for; a claim shared by several pods names them all), else the pod hami's claim
    controller made it for (annotation ``hami.io/dra-pod``), else none. Consumers that are not pods are left out."""
    pods = tuple(r.name for r in claim.status.reserved_for if r.resource == "pods" and not r.api_group and r.name)
    if pods:
        return tuple(dict.fromkeys(pods))
    owner = claim.metadata.annotations.get(keys.DRA_POD, "")
    return (owner,) if owner else ()


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


def claim_users(state: ClusterState) -> list[tuple[DraRecord, str]]:
    """Every claim record with each pod it serves (``DraRecord.consumers``), by namespace, claim and pod; a claim
    serving no pod is left out (its capacity stays in the card's totals)."""
    records = sorted((r for r in state.held.values() if isinstance(r, DraRecord)), key=lambda r: (r.key, r.uid))
    return [(r, pod) for r in records for pod in r.consumers]
