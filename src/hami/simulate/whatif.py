"""The one place ``hami explain`` and ``hami simulate --defrag`` call the scheduler's cycle.

``judge`` asks ``decide`` without changing the ledger; ``place`` decides and reserves; ``take_out`` and
``put_back`` remove a pod's record from the ledger and restore it (``ClusterState.apply``, the ledger's only
mutation path), so "what if these pods left" questions are asked of the very state and code the scheduler uses.
"""

from __future__ import annotations

from collections.abc import Iterable

from hami.scheduling.decide import Decision, decide, reserve
from hami.scheduling.request import PodRequest
from hami.scheduling.state import ClusterState, PodRecord

__all__ = ["judge", "place", "put_back", "take_out"]


def judge(state: ClusterState, req: PodRequest, candidates: Iterable[str]) -> Decision:
    """The scheduler's decision for ``req`` among ``candidates`` on ``state`` as it is; the state is unchanged."""
    return decide(state, req, candidates, 0)


def place(state: ClusterState, req: PodRequest, candidates: Iterable[str]) -> Decision:
    """Decide and, when a node fits, reserve the placement in the ledger."""
    decision = decide(state, req, candidates, 0)
    reserve(state, req, decision)
    return decision


def take_out(state: ClusterState, uids: Iterable[str]) -> list[PodRecord]:
    """Remove these pods' usage from the ledger; returns the records removed (for ``put_back``)."""
    return [r for r in (state.remove_pod(uid) for uid in uids) if r is not None]


def put_back(state: ClusterState, records: Iterable[PodRecord]) -> None:
    """Charge removed records again (idempotent)."""
    for record in records:
        state.apply(record, add=True)
