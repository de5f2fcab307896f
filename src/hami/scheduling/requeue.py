"""When to nudge kube-scheduler into retrying the pods hami turned down, once a node's capacity frees.

kube-scheduler (v1.36) parks a pod its extender rejected among its unschedulable pods with the pseudo-plugin
``Extender`` as the rejector (``pkg/scheduler/schedule_one.go:702-715``), which is registered for every cluster event,
Pod and Node ones included (``framework/runtime/framework.go:362-368``, ``defaultEnqueueExtension`` and
``framework/types.go:146``). So the next Pod or Node event moves the pod back to the queues; without one, only the
flush of pods parked for ``podMaxInUnschedulablePodsDuration`` (5 minutes, ``backend/queue/scheduling_queue.go:66``,
``:985``) does. The event that frees a GPU (the holder deleted or finished) is such an event, but kube-scheduler gets it
as early as hami: its retry may reach hami's ``/filter`` before hami's ledger has freed the devices, and then nothing
moves the pod again for up to 5 minutes.

hami's answer: once its ledger has freed capacity on a node while pods wait for hami's scheduler, the leader writes
the annotation ``hami.io/capacity-freed`` (the time) on that node. A node's annotation change is a Node event
(``framework/events.go:235``, ``UpdateNodeAnnotation``) that kube-scheduler requeues the parked pods on
(``eventhandlers.go:84-96``), and it comes after the ledger is ready for them. ``RequeuePacer`` keeps it to one write
per node per ``interval``: a freeing inside the interval gets one trailing write at its end, so the last one is never
lost, and a burst of deletions on a node costs one write.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hami.protocol.objects import Pod
from hami.scheduling.records import is_terminal

__all__ = ["RequeuePacer", "waits_for_scheduler"]


def waits_for_scheduler(pod: Pod, scheduler_name: str) -> bool:
    """Whether ``pod`` is one kube-scheduler may hold back for ``scheduler_name``: not bound, not being deleted,
    not finished."""
    return (
        pod.spec.scheduler_name == scheduler_name
        and not pod.spec.node_name
        and pod.metadata.deletion_timestamp is None
        and not is_terminal(pod)
    )


@dataclass
class RequeuePacer:
    """One nudge per node per ``interval`` seconds. Times are the caller's monotonic clock."""

    interval: float
    last: dict[str, float] = field(default_factory=dict)
    """Node → when its last nudge was written."""
    due: set[str] = field(default_factory=set)
    """Nodes whose nudge is scheduled and not written yet."""

    def freed(self, node: str, now: float) -> float | None:
        """Capacity freed on ``node`` at ``now``: in how many seconds to write its nudge (0: now), or None when one is
        already due (that one comes after this freeing, so it covers it)."""
        if node in self.due:
            return None
        self.due.add(node)
        last = self.last.get(node)
        return 0.0 if last is None else max(0.0, last + self.interval - now)

    def done(self, node: str, now: float, written: bool) -> None:
        """The due nudge of ``node`` ended at ``now``: ``written``, or dropped (nothing waits any more, not the
        leader, the node is gone). A failed write counts as written: the pace holds for retries too."""
        self.due.discard(node)
        if written:
            self.last[node] = now
        self._prune(now)

    def forget(self, node: str) -> None:
        """The node is gone."""
        self.last.pop(node, None)
        self.due.discard(node)

    def _prune(self, now: float) -> None:
        """Drop the times that no longer hold a nudge back (the map stays as small as the nodes freed lately)."""
        stale = [n for n, at in self.last.items() if at + self.interval <= now]
        for node in stale:
            del self.last[node]
