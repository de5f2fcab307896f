"""Capacity held for a preemptor (issue 28), pure: what its victims free is charged to it in the ledger until it is
placed, deleted, or the hold's deadline passes, so no other pod's /filter is given that capacity meanwhile.

A hold is a ledger record of the ``held`` kind (``PreemptionHold``, like a DRA claim's: kept in
``ClusterState.held``, charged to devices, never to namespace quotas), keyed by the preemptor's UID, charging what
the preemptor would get on the node once its victims (and the node's other pods being preempted) are gone. While the
victims still terminate, the device is charged twice (their usage and the hold): nothing else fits there. When
they have left, what remains charged is the hold, exactly the preemptor's need; its own /filter lifts the hold
first and then finds that room.

The hold charges no partition slices (of partitioned devices): its victims may still occupy the very slices it would
take, and a charge that overlaps a slice in use takes the device out of service. Memory, cores and slots are
charged, which keeps every other pod off the freed room all the same.

``HoldBook`` keeps the holds with their deadlines (Unix seconds, passed in: this module reads no clock), the
victims evicted for each preemptor (``owed``: an eviction not followed by the preemptor's placement on that node is
counted as wasted) and every UID evicted so far (never evicted twice). One hold per node: a node with a hold has a
preemption in flight, and no other preemptor picks it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from hami.scheduling.preemption import fits_without, leaving_of
from hami.scheduling.request import PodRequest
from hami.scheduling.state import ClusterState, PodRecord
from hami.scheduling.usage import effective_charges

__all__ = ["HOLD_MARGIN_S", "Hold", "HoldBook", "PreemptionHold", "hold_record", "leaving_on"]

HOLD_MARGIN_S = 30.0
"""Added to the victims' longest termination grace period to make a hold's deadline: the kubelet needs a little
while beyond the grace period to report a pod gone, and kube-scheduler's retry of the preemptor waits for a
backoff (up to 10 s) after the victims' deletion events."""


@dataclass(frozen=True, slots=True)
class PreemptionHold(PodRecord):
    """What a preemptor will take on a node, held for it while its victims terminate (see the module docstring)."""

    held: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Hold:
    """One preemption in flight: the record held, the victims (``namespace/name``), and when the hold lapses."""

    record: PreemptionHold
    victims: tuple[str, ...]
    deadline: float

    @property
    def node(self) -> str:
        return self.record.node


def leaving_on(state: ClusterState, node: str, evicted: Collection[str] = ()) -> frozenset[str]:
    """The UIDs of the node's pods being preempted (``preemption.leaving_of``: terminating with a scheduler's
    preemption condition, or ``evicted`` by hami); a pod terminating for another reason is not leaving."""
    return leaving_of((state.pods[uid] for uid in state.pods_by_node.get(node, ())), evicted)


def hold_record(state: ClusterState, req: PodRequest, node: str, leaving: Collection[str]) -> PreemptionHold | None:
    """The record to hold for ``req`` on ``node`` once the pods ``leaving`` are gone (the vendors' own fit on a
    what-if copy of the node), or None when it would not fit even then."""
    fit = fits_without(state, req, node, leaving)
    if fit is None:
        return None
    return PreemptionHold(
        uid=req.uid,
        namespace=req.namespace,
        name=req.name,
        node=node,
        devices=fit.pod_devices(),
        charges=effective_charges(fit.pod_devices(), req.kinds),
        priority=req.priority,
    )


@dataclass(slots=True)
class HoldBook:
    """The holds in force, by preemptor UID; the evictions owed to each preemptor; every UID evicted."""

    holds: dict[str, Hold] = field(default_factory=dict)
    owed: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Preemptor UID → (node, how many victims were evicted there for it) until it is placed or gone."""
    evicted: set[str] = field(default_factory=set)
    """UIDs of every pod evicted and not yet seen deleted: never victims again."""
    rebuilt: bool = False
    """Whether the holds were rebuilt from the pods' ``status.nominatedNodeName`` (once, at the first /filter)."""

    def busy(self, node: str) -> bool:
        """Whether a preemption is in flight on ``node``."""
        return any(h.node == node for h in self.holds.values())

    def place(self, state: ClusterState, hold: Hold) -> None:
        """Charge ``hold`` to the ledger (replacing the preemptor's earlier hold, if any)."""
        self.lift(state, hold.record.uid)
        state.apply(hold.record, add=True)
        self.holds[hold.record.uid] = hold

    def lift(self, state: ClusterState, uid: str) -> Hold | None:
        """Take the preemptor's hold out of the ledger; returns it (None when it had none)."""
        hold = self.holds.pop(uid, None)
        if hold is not None:
            state.apply(hold.record, add=False)
        return hold

    def expire(self, state: ClusterState, now: float) -> list[Hold]:
        """Lift every hold whose deadline has passed; returns them."""
        lapsed = [uid for uid, h in self.holds.items() if h.deadline <= now]
        return [h for h in (self.lift(state, uid) for uid in lapsed) if h is not None]

    def owe(self, uid: str, node: str, evicted: Iterable[str]) -> int:
        """Record victims evicted on ``node`` for the preemptor ``uid``; returns how many evictions made for it
        on another node before are wasted now (it is being placed elsewhere)."""
        done = list(evicted)
        self.evicted.update(done)
        if not done:
            return 0
        before, count = self.owed.get(uid, (node, 0))
        self.owed[uid] = (node, count + len(done) if before == node else len(done))
        return 0 if before == node else count

    def settle(self, uid: str, placed_on: str | None) -> int:
        """The preemptor was placed on ``placed_on`` (None: deleted): how many evictions made for it were wasted
        (0 when it was placed where they were made)."""
        node, count = self.owed.pop(uid, ("", 0))
        return 0 if placed_on == node else count
