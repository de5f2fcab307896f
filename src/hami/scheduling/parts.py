"""What the verbs of the cycle share (``CycleParts``): its collaborators, its settings (``CycleSettings``), its
clocks (``Clocks``), its observer, and the state it holds in flight beside the ledger.

``hami.scheduling.cycle`` (/filter, commit, the pod watch), ``hami.scheduling.bind`` (/bind) and
``hami.scheduling.cleanup`` (removing an allocation, retried in the background) each work on one ``CycleParts``;
``Cycle`` is one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field

from hami.devices.base import Vendor
from hami.protocol.objects import Pod
from hami.scheduling.decide import unreserve
from hami.scheduling.gangs import GangBook
from hami.scheduling.holds import HoldBook
from hami.scheduling.memo import Verdicts
from hami.scheduling.outcomes import FilterOutcome
from hami.scheduling.ports import ClusterPort, CycleObserver, LockWaits, Unobserved
from hami.scheduling.records import RecordReader
from hami.scheduling.request import SchedulingDefaults
from hami.scheduling.state import ClusterState

__all__ = ["Clocks", "CycleParts", "CycleSettings"]


@dataclass(slots=True)
class CycleSettings:
    """Settings of the cycle (``hami scheduler`` flags where there is one)."""

    background_commit: bool = True
    """Write the allocation annotations beside /filter's answer (kube-scheduler's serial scheduling cycle does not
    wait for the PATCH; /bind waits for it). False: /filter answers after the write."""
    cleanup_backoff: tuple[float, float] = (0.5, 30.0)
    """First and longest pause between the background retries of an allocation clean-up (doubling)."""
    lock_retry_timeout: float = 0.0
    """``--node-lock-retry-timeout``: how long the bind of a PodGroup member waits for a locked node (0: not)."""
    lock_retry_interval: float = 0.1
    """Pause between two tries of such a wait (HAMi's 100 ms) when there is no ``LockWaits``."""
    bind_lock_wait: float = 0.0
    """``--bind-lock-wait``: how long a bind waits for a node locked by another hami bind in progress (0: not)."""
    scheduler_name: str = "hami-scheduler"
    """``--scheduler-name``: the pods whose allocation annotations the watch believes without a reservation of
    this process (``hami.scheduling.records.believed_node``)."""
    preemption: bool = False
    """``--preemption`` resolved to ``self``: a pod that fits nowhere preempts lower-priority pods through hami
    (``hami.scheduling.preempting``). False with ``extender`` (kube-scheduler evicts) and ``off``."""


@dataclass(slots=True)
class Clocks:
    """Every clock the cycle reads, injected: the cycle reads none itself."""

    wall: Callable[[], float]
    """Unix seconds: stamped into ``hami.io/vgpu-time`` and ``hami.io/bind-time``."""
    stopwatch: Callable[[], float] = lambda: 0.0
    """Monotonic seconds: stage durations and lock waits (a PodGroup lock wait never counts less than its pauses)."""
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    """Pauses between retries (clean-ups, the PodGroup lock wait)."""


@dataclass(slots=True)
class CycleParts:
    """The collaborators, settings, clocks and observer of one cycle, and what it holds in flight."""

    state: ClusterState
    vendors: Mapping[str, Vendor]
    defaults: SchedulingDefaults
    port: ClusterPort
    clocks: Clocks
    settings: CycleSettings = field(default_factory=CycleSettings)
    observer: CycleObserver = field(default_factory=Unobserved)
    lock_waits: LockWaits | None = None
    """Wakes lock waits when the node watch shows the lock released; None: pause ``lock_retry_interval``."""
    memo: Verdicts = field(default_factory=Verdicts)
    binding: set[str] = field(default_factory=set)
    """UIDs whose /bind is running."""
    bound: set[str] = field(default_factory=set)
    """UIDs this process bound that the pod watch has not shown bound yet."""
    gangs: GangBook = field(default_factory=GangBook)
    """Which pods belong to which gang, and each gang's minimum (``hami.scheduling.gangs``)."""
    pending: set[str] = field(default_factory=set)
    """UIDs reserved by /filter whose annotations the pod watch has not brought back yet."""
    commits: dict[str, asyncio.Task[FilterOutcome | None]] = field(default_factory=dict)
    """Annotation commits still running beside /filter's answer, by pod UID."""
    cleanups: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """Allocation clean-ups that failed once and are being retried, by pod UID."""
    written: dict[str, str] = field(default_factory=dict)
    """Pod UID → the resourceVersion hami's allocation write left the pod at: its Binding lands only on that
    version, so a Binding that arrives after its request timed out cannot bind a pod whose allocation was cleaned
    up (or rewritten) meanwhile."""
    records: RecordReader | None = None
    """Reads the watched pods' records for ``vendors`` and ``settings.scheduler_name`` (built on first use, again
    if ``vendors`` is replaced)."""
    holds: HoldBook = field(default_factory=HoldBook)
    """Capacity held for preemptors while their victims terminate (``hami.scheduling.holds``)."""
    nominated: dict[str, Pod] = field(default_factory=dict)
    """Pending pods with a ``status.nominatedNodeName``, by UID: the holds are rebuilt from them after a restart."""
    victims: dict[str, tuple[tuple[str, str], str, str]] = field(default_factory=dict)
    """Terminating pods hami evicted, by UID → ((preemptor ``namespace/name``, its UID), node, the victim's
    ``namespace/name``): with the nominations, what the holds are rebuilt from after a restart. Only pods whose
    ``hami.io/preempted-for`` the ``DisruptionTarget`` condition hami wrote confirms
    (``hami.protocol.disruption.preempted_for``): a tenant can write the annotation, not the condition."""
    nominations: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """Preemptors whose ``nominatedNodeName`` is checked again after /filter answered (``renominate``), by UID."""
    node_locks: Mapping[str, Collection[str]] = field(default_factory=dict)
    """Node → the lock annotation keys held there, as the node watch shows them, or being taken by a /bind of this
    process in progress that the watch does not show yet (the shell's view, ``hami.server.busy.BusyNodes``; read
    only here): a node where a lock the pod's bind would take is held or being taken ranks after the free ones
    (``decide``'s ``busy``). Empty: no lock held and no bind in progress, HAMi's order."""

    async def settle(self, uid: str) -> FilterOutcome | None:
        """Wait for the pod's commit still in flight, if any; returns its failure or None."""
        task = self.commits.pop(uid, None)
        if task is None:
            return None
        return await task

    def forget(self, uid: str) -> None:
        """Drop the pod's reservation and what is held in flight for it."""
        self.pending.discard(uid)
        self.written.pop(uid, None)
        unreserve(self.state, uid)

    def cancel_cleanup(self, uid: str) -> None:
        task = self.cleanups.pop(uid, None)
        if task is not None:
            task.cancel()
