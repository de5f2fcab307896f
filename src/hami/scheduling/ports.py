"""The cycle's ports: what it needs from Kubernetes (``ClusterPort``, whose pod write ``PodWriter`` the shell's
``ClusterClient`` shares), where its lock waits wait (``LockWaits``), and who hears what it did beside its answers
(``CycleObserver``). The core implements none of them: ``hami.k8s`` and ``hami.server`` do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from hami.protocol import keys
from hami.protocol.events import EventReason, EventType
from hami.protocol.objects import Pod, PodDisruptionBudget
from hami.scheduling.outcomes import Cleanup, FilterOutcome

__all__ = ["ClusterPort", "CycleObserver", "LockWaits", "PodWriter", "Unobserved"]


class PodWriter(Protocol):
    """The one pod write hami makes: a merge-patch of metadata under preconditions. Declared here once; the
    cycle's ``ClusterPort`` and the shell's ``hami.k8s.cluster.ClusterClient`` both extend it."""

    async def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None] | None = None,
        labels: Mapping[str, str | None] | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> Pod:
        """Merge-patch the pod's annotations and labels (``None`` deletes a key); returns the patched pod.

        With ``uid`` it lands only if the pod is still the pod with that UID, with ``resource_version`` only on
        that version of it: ``Conflict`` otherwise; ``NotFound`` if there is no pod of that name. The cycle always
        passes ``uid``."""
        ...


class ClusterPort(PodWriter, Protocol):
    """What the cycle needs from Kubernetes (implemented once in ``hami.k8s.extender_io``; the in-memory cluster
    of the tests sits behind the same implementation). Writes raise ``ApiError``, the node lock ``HamiError``."""

    def watched_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod of that name as the pod watch last saw it, or ``None`` if the watch has not seen it (yet)."""

    async def get_pod(self, namespace: str, name: str) -> Pod: ...

    async def lock_node(
        self, node: str, namespace: str, name: str, key: str = keys.NODE_LOCK, expiry_s: float | None = None
    ) -> None:
        """Take the node lock ``key`` for a pod (re-entrant for the same pod), counting it expired after
        ``expiry_s`` seconds (None: the configured node-lock timeout); raises ``HamiError`` on contention."""

    async def unlock_node(self, node: str, namespace: str, name: str, key: str = keys.NODE_LOCK) -> None:
        """Release the node lock ``key`` if (and only if) this pod holds it."""

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, resource_version: str | None = None
    ) -> None:
        """Create the pod's Binding; with ``resource_version``, it lands only on that version of the pod
        (``Conflict`` otherwise: kube-apiserver takes the Binding's ``metadata.resourceVersion`` as a precondition)."""

    def event(self, pod: Pod, type: EventType, reason: EventReason, message: str) -> None:
        """Record an event on the pod (fire and forget; never raises). Used by the edge and by preemption."""

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """Evict the pod through the Eviction API (``policy/v1``, graceful: the pod's own grace period), only if it
        is still the pod ``uid``. ``BudgetRefused`` when a PodDisruptionBudget allows no disruption now;
        ``NotFound`` or ``Conflict`` when the pod is gone or another one."""

    async def mark_preempted(self, namespace: str, name: str, uid: str, message: str) -> None:
        """Set the pod's ``DisruptionTarget`` condition (``True``, reason ``PreemptionByScheduler``) (pods/status)."""

    async def nominate(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Set the pod's ``status.nominatedNodeName`` (pods/status; ``""`` clears it)."""

    async def disruption_budgets(self) -> list[PodDisruptionBudget]:
        """Every PodDisruptionBudget (policy/v1) of the cluster."""


class LockWaits(Protocol):
    """Where lock waits wait (implemented in the shell over the node watch; the core reads no clock)."""

    async def wait(self, node: str, holder: str, timeout: float, key: str = keys.NODE_LOCK) -> bool:
        """Return once the lock ``key`` that ``holder`` (``namespace/name``) holds on ``node`` may have been handed
        over and it is this waiter's turn to try (one waiter per release): True; or after ``timeout`` s: False."""

    def tried(self, node: str, locked: bool, key: str = keys.NODE_LOCK) -> None:
        """The waiter whose turn it was tried the lock: took it (``locked``) or not (the turn passes on)."""


class CycleObserver(Protocol):
    """Who hears what the cycle did beside the outcome it returns (the extender: metrics, events, log lines)."""

    def commit_failed_late(self, outcome: FilterOutcome) -> None:
        """A commit that failed after /filter had answered (background commit)."""

    def stage_timed(self, stage: str, seconds: float) -> None:
        """A stage's duration (``decide``, ``commit``) as measured with ``Clocks.stopwatch``."""

    def cleanup_retried(self, cleanup: Cleanup) -> None:
        """One background retry of an allocation clean-up (see ``Cleared``)."""

    def lock_waited(self, seconds: float, timed_out: bool) -> None:
        """One wait for a node lock: how long it took (``Clocks.stopwatch``) and whether it ran out."""

    def evictions_wasted(self, count: int, why: str) -> None:
        """``count`` evictions made for a preemptor did not lead to its placement where they were made (``why``:
        ``deleted``, ``elsewhere``)."""

    def capacity_freed(self, node: str) -> None:
        """Capacity of ``node`` freed with no pod event to tell: a preemption hold there ran out."""


class Unobserved:
    """A ``CycleObserver`` that hears nothing (the default; tests override the methods they watch)."""

    def commit_failed_late(self, outcome: FilterOutcome) -> None:
        pass

    def stage_timed(self, stage: str, seconds: float) -> None:
        pass

    def cleanup_retried(self, cleanup: Cleanup) -> None:
        pass

    def lock_waited(self, seconds: float, timed_out: bool) -> None:
        pass

    def evictions_wasted(self, count: int, why: str) -> None:
        pass

    def capacity_freed(self, node: str) -> None:
        pass
