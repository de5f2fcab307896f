"""The cycle's port to Kubernetes, assembled from the seam, the node lock and the event recorder.

:class:`ExtenderIO` is the one implementation of ``hami.scheduling.ports.ClusterPort`` (structurally; the core
does not import ``hami.k8s``): pod patches (with their UID and resourceVersion preconditions), pod GET and Binding
go to a :class:`ClusterClient`, ``watched_pod`` to the pod watch's store, ``lock_node`` / ``unlock_node`` to a
:class:`NodeLocker`, and ``event`` to an :class:`EventRecorder` (fire and forget). The same class serves the real
cluster (``KubeCluster``) and the unit tests' in-memory one (``MemoryCluster``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, timedelta

from hami.k8s.cluster import ClusterClient, WallClock, utc_now
from hami.k8s.events import EventRecorder
from hami.k8s.nodelock import NodeLocker
from hami.k8s.records import ObjectRef
from hami.protocol.events import EventReason, EventType
from hami.protocol.keys import NODE_LOCK
from hami.protocol.objects import Node, Pod, PodDisruptionBudget

__all__ = ["ExtenderIO"]


class ExtenderIO:
    """``ClusterPort`` over hami.k8s. Lock failures raise ``LockContention`` (a ``HamiError``), API ones
    ``ApiError``; ``event`` never raises."""

    def __init__(
        self,
        cluster: ClusterClient,
        locker: NodeLocker,
        recorder: EventRecorder,
        node_hint: Callable[[str], Node | None] | None = None,
        pod_hint: Callable[[str, str], Pod | None] | None = None,
        clock: WallClock = utc_now,
    ) -> None:
        self.cluster = cluster
        self.locker = locker
        self.recorder = recorder
        self.node_hint = node_hint
        """The node as the watch last saw it (saves the lock's first GET when it shows no lock)."""
        self.pod_hint = pod_hint
        """``(namespace, name)`` → the pod as the watch last saw it (the identity checks of /filter and /bind)."""
        self.clock = clock
        """Stamps a condition's ``lastTransitionTime``."""

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
        return await self.cluster.patch_pod_metadata(
            namespace, name, annotations, labels, uid=uid, resource_version=resource_version
        )

    async def get_pod(self, namespace: str, name: str) -> Pod:
        return await self.cluster.get_pod(namespace, name)

    def watched_pod(self, namespace: str, name: str) -> Pod | None:
        return self.pod_hint(namespace, name) if self.pod_hint is not None else None

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, resource_version: str | None = None
    ) -> None:
        await self.cluster.bind(namespace, name, uid, node, resource_version=resource_version)

    async def lock_node(
        self, node: str, namespace: str, name: str, key: str = NODE_LOCK, expiry_s: float | None = None
    ) -> None:
        hint = self.node_hint(node) if self.node_hint is not None else None
        timeout = None if expiry_s is None else timedelta(seconds=expiry_s)
        await self.locker.acquire(node, namespace, name, hint=hint, key=key, timeout=timeout, watched=self.pod_hint)

    async def unlock_node(self, node: str, namespace: str, name: str, key: str = NODE_LOCK) -> None:
        await self.locker.release(node, namespace, name, key=key)

    def event(self, pod: Pod, type: EventType, reason: EventReason, message: str) -> None:
        self.recorder.record(ObjectRef.for_pod(pod), type, reason, message)

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        await self.cluster.evict_pod(namespace, name, uid)

    async def mark_preempted(self, namespace: str, name: str, uid: str, message: str) -> None:
        """kube-scheduler's condition on a victim (``preemption/executor.go``), written after the eviction: the
        Eviction API writes its own ``DisruptionTarget`` (reason ``EvictionByEvictionAPI``), which this replaces."""
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": message,
            "lastTransitionTime": self.clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        await self.cluster.patch_pod_status(namespace, name, uid, {"conditions": [condition]})

    async def nominate(self, namespace: str, name: str, uid: str, node: str) -> None:
        await self.cluster.patch_pod_status(namespace, name, uid, {"nominatedNodeName": node or None})

    async def disruption_budgets(self) -> list[PodDisruptionBudget]:
        return await self.cluster.disruption_budgets()
