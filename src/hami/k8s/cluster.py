"""The I/O seam of the scheduler (STYLE rule 9): the few cluster writes and reads it makes outside the caches.

:class:`ClusterClient` is the whole surface; :class:`KubeCluster` implements it over :class:`KubeClient`, and
:class:`hami.k8s.memory.MemoryCluster` implements it in memory with the same semantics for unit tests and
simulations. Semantics every implementation keeps:

* every write bumps the object's ``resourceVersion``;
* ``patch_node_annotations(..., resource_version=rv)`` is a compare-and-swap: if the node's current
  resourceVersion is not ``rv`` → :class:`~hami.errors.Conflict`, nothing written;
* in annotation/label maps a ``None`` value deletes the key (JSON merge patch ``null``);
* a missing object → :class:`~hami.errors.NotFound`;
* ``bind`` with a UID that is not the pod's, or of a pod that already has a node → :class:`~hami.errors.Conflict`;
* ``patch_pod_metadata(..., uid=u)`` writes only if the pod is still the one with UID ``u`` (a pod deleted and
  re-created under the same name has a new UID) and ``resource_version=rv`` only if it is still at ``rv``;
  either failing → :class:`~hami.errors.Conflict`, nothing written. (The API server answers a UID mismatch
  in a patch with 422 ``metadata.uid: field is immutable``, a stale resourceVersion with 409; both become
  ``Conflict`` here, so callers need one ``except``.)
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from typing import Protocol

import msgspec

from hami.errors import ApiError, PodReplaced
from hami.k8s.client import KubeClient, ListPage, PatchType
from hami.k8s.records import ObjectRef, make_event
from hami.k8s.resources import EVENTS, NODES, POD_DISRUPTION_BUDGETS, PODS
from hami.protocol.objects import Node, Pod, PodDisruptionBudget
from hami.scheduling.ports import PodWriter

__all__ = ["LIVE_PODS", "ClusterClient", "KubeCluster", "WallClock", "pod_replaced", "utc_now"]

LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
"""Field selector of ``list_pods``: finished pods hold no devices, and batch clusters keep many of them."""

WallClock = Callable[[], datetime]
"""Returns the current time as an aware datetime (injected wherever a timestamp is written)."""


def utc_now() -> datetime:
    return datetime.now(UTC)


def pod_replaced(namespace: str, name: str, uid: str, detail: str, status: int) -> PodReplaced:
    """The error of a pod write whose UID precondition failed: the pod of that name is another one now."""
    return PodReplaced(
        f"pod {namespace}/{name} is no longer the pod with UID {uid} (deleted, or deleted and re-created); "
        f"nothing written: {detail}",
        status,
    )


class ClusterClient(PodWriter, Protocol):
    """The cluster as the scheduler's request handlers see it (see the module docstring for semantics); its pod
    write, ``patch_pod_metadata``, is declared once in ``hami.scheduling.ports.PodWriter``."""

    async def get_pod(self, namespace: str, name: str) -> Pod: ...

    async def get_node(self, name: str) -> Node: ...

    async def patch_node_annotations(
        self, name: str, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> Node:
        """Merge-patch the node's annotations; with ``resource_version``, only if the node is still at it."""
        ...

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, resource_version: str | None = None
    ) -> None:
        """Create the pod's Binding to ``node``; ``uid`` must be the pod's and, with ``resource_version``, the pod
        must still be at that version (``Conflict`` otherwise)."""
        ...

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """Evict the pod (Eviction API, graceful) if it is still the pod ``uid``: see ``ClusterPort.evict_pod``."""
        ...

    async def patch_pod_status(self, namespace: str, name: str, uid: str, status: Mapping[str, object]) -> None:
        """Strategic-merge-patch the pod's status (conditions merge by ``type``), only while it is the pod ``uid``."""
        ...

    async def disruption_budgets(self) -> list[PodDisruptionBudget]:
        """Every PodDisruptionBudget of the cluster."""
        ...

    async def emit_event(self, involved: ObjectRef, type: str, reason: str, message: str, component: str) -> str:
        """Create a core/v1 Event about ``involved`` (``type`` is ``Normal`` or ``Warning``); returns its name."""
        ...

    async def fold_event(self, namespace: str, name: str, count: int) -> None:
        """Set the Event's ``count`` and its ``lastTimestamp`` to now (the same event happened again)."""
        ...


def _metadata_patch(
    annotations: Mapping[str, str | None] | None,
    labels: Mapping[str, str | None] | None,
    resource_version: str | None = None,
    uid: str | None = None,
) -> dict[str, object]:
    meta: dict[str, object] = {}
    if uid:
        meta["uid"] = uid  # the API server refuses the patch if the object's UID differs (it is immutable)
    if annotations:
        meta["annotations"] = dict(annotations)
    if labels:
        meta["labels"] = dict(labels)
    if resource_version is not None:
        meta["resourceVersion"] = resource_version  # in a merge patch, a precondition: 409 if it moved on
    return {"metadata": meta}


class KubeCluster:
    """:class:`ClusterClient` over the real API. ``instance`` names this replica in events (default: hostname)."""

    def __init__(self, client: KubeClient, *, instance: str | None = None, clock: WallClock = utc_now) -> None:
        self.client = client
        self.instance = instance or socket.gethostname()
        self._clock = clock

    async def get_pod(self, namespace: str, name: str) -> Pod:
        return await self.client.get(PODS, name, namespace=namespace, type=Pod)

    async def get_node(self, name: str) -> Node:
        return await self.client.get(NODES, name, type=Node)

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
        body = _metadata_patch(annotations, labels, resource_version, uid)
        try:
            return await self.client.patch(PODS, name, body, namespace=namespace, type=Pod)
        except ApiError as err:
            if uid and err.status == 422 and "metadata.uid" in str(err):
                raise pod_replaced(namespace, name, uid, str(err), err.status) from None
            raise

    async def patch_node_annotations(
        self, name: str, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> Node:
        body = _metadata_patch(annotations, None, resource_version)
        return await self.client.patch(NODES, name, body, type=Node)

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, resource_version: str | None = None
    ) -> None:
        await self.client.create_binding(namespace, name, uid, node, resource_version)

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        await self.client.evict(namespace, name, uid)

    async def patch_pod_status(self, namespace: str, name: str, uid: str, status: Mapping[str, object]) -> None:
        body = {"metadata": {"uid": uid}, "status": dict(status)}
        try:
            await self.client.patch(
                PODS, name, body, namespace=namespace, type=msgspec.Raw, patch_type=PatchType.STRATEGIC,
                subresource="status",
            )  # fmt: skip
        except ApiError as err:
            if err.status == 422 and "metadata.uid" in str(err):
                raise pod_replaced(namespace, name, uid, str(err), err.status) from None
            raise

    async def disruption_budgets(self) -> list[PodDisruptionBudget]:
        return (await self.client.list(POD_DISRUPTION_BUDGETS, type=PodDisruptionBudget)).items

    async def emit_event(self, involved: ObjectRef, type: str, reason: str, message: str, component: str) -> str:
        event = make_event(
            involved, type, reason, message, component=component, instance=self.instance, now=self._clock()
        )
        await self.client.create(EVENTS, event, namespace=event.metadata.namespace, type=msgspec.Raw)
        return event.metadata.name

    async def fold_event(self, namespace: str, name: str, count: int) -> None:
        stamp = self._clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"count": count, "lastTimestamp": stamp}
        await self.client.patch(EVENTS, name, body, namespace=namespace, type=msgspec.Raw)

    def list_pods(self, page_size: int = 500) -> AsyncIterator[ListPage[Pod]]:
        """Every pod that has not finished, page by page, as one consistent snapshot. A second page with
        ``first`` set means the listing started over (an expired continue token, see ``KubeClient.list_pages``)."""
        return self.client.list_pages(PODS, type=Pod, field_selector=LIVE_PODS, limit=page_size)
