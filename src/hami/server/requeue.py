"""The leader's nudge to kube-scheduler once a node's capacity frees: ``hami.io/capacity-freed`` on that node, so
the pods kube-scheduler parked after hami turned them down are retried now, not at its 5-minute flush (why, and the
pace: ``hami.scheduling.requeue``).

Every replica follows the pods waiting for hami's scheduler on its pod watch; only the leader writes, and only while
some wait. The pod watch handler calls ``pod_seen`` after the ledger has taken the event, naming the node the event
freed capacity on; the extender calls ``capacity_freed`` for a freeing no pod event tells of (a preemption hold
that ran out, or was lifted because its preemptor was deleted). The write runs in the background through the
runtime's supervisor.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from hami.errors import ApiError, NotFound
from hami.k8s.cluster import ClusterClient
from hami.k8s.tasks import Supervisor
from hami.protocol import keys
from hami.protocol.objects import Pod
from hami.scheduling.requeue import RequeuePacer, waits_for_scheduler
from hami.server.metrics import Metrics

__all__ = ["RequeueNudges"]

log = logging.getLogger("hami.scheduler")


@dataclass
class RequeueNudges:
    """The pods waiting for ``scheduler_name`` and the nudges written for them. The cluster and the supervisor are
    attached once the API client exists (``attach``); ``interval`` 0 writes none (``--requeue-interval 0``)."""

    scheduler_name: str
    interval: float
    is_leader: Callable[[], bool]
    metrics: Metrics
    waiting: set[str] = field(default_factory=set)
    """UIDs of the pods kube-scheduler may hold back for hami's scheduler (``waits_for_scheduler``)."""
    pacer: RequeuePacer = field(init=False)
    clock: Callable[[], float] = time.monotonic
    cluster: ClusterClient | None = None
    tasks: Supervisor | None = None

    def __post_init__(self) -> None:
        self.pacer = RequeuePacer(self.interval)

    def attach(self, cluster: ClusterClient, tasks: Supervisor) -> None:
        self.cluster, self.tasks = cluster, tasks

    def pod_seen(self, pod: Pod, deleted: bool, freed_on: str | None) -> None:
        """Follow one pod event; ``freed_on``: the node the ledger freed capacity on for it, if any."""
        uid = pod.metadata.uid
        if not deleted and waits_for_scheduler(pod, self.scheduler_name):
            self.waiting.add(uid)
        else:
            self.waiting.discard(uid)
        if freed_on and self._wanted():
            self._nudge(freed_on)

    def capacity_freed(self, node: str) -> None:
        """Capacity of ``node`` freed with no pod event (a preemption hold ran out): nudged as a freeing pod is."""
        if self._wanted():
            self._nudge(node)

    def node_gone(self, name: str) -> None:
        self.pacer.forget(name)

    def _wanted(self) -> bool:
        return self.interval > 0 and bool(self.waiting) and self.is_leader()

    def _nudge(self, node: str) -> None:
        delay = self.pacer.freed(node, self.clock())
        if delay is not None and self.cluster is not None and self.tasks is not None:
            self.tasks.once(self._write(self.cluster, node, delay), name=f"requeue-{node}")
        elif delay is not None:
            self.pacer.done(node, self.clock(), written=False)

    async def _write(self, cluster: ClusterClient, node: str, delay: float) -> None:
        """Write the nudge after ``delay`` seconds, unless by then nothing waits or this replica no longer leads."""
        written = False
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            if not self._wanted():
                return
            written = True
            stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            await cluster.patch_node_annotations(node, {keys.CAPACITY_FREED: stamp})
            log.debug("node %s: capacity freed, %d pod(s) waiting: kube-scheduler nudged", node, len(self.waiting))
        except NotFound:
            pass  # the node is gone: nothing to retry there
        except ApiError as err:
            self.metrics.api_errors.labels("patch_node").inc()
            log.warning("nudging kube-scheduler on node %s (capacity freed) failed: %s", node, err)
        finally:
            self.pacer.done(node, self.clock(), written)
