"""Wire records only the Kubernetes I/O layer uses: list and watch envelopes, API ``Status``, ``Lease``, ``Binding``
and core/v1 ``Event`` bodies, object references.

The object views the decision core reads (Pod, Node, ResourceQuota) live in :mod:`hami.protocol.objects`. Like
them, these records hold only the fields hami reads or writes (decode at the edge, STYLE rule 8); unknown fields are
ignored on decode, defaults are omitted on encode.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Generic, Protocol, TypeVar

import msgspec

from hami.protocol.objects import Node, ObjectMeta, Pod

__all__ = [
    "Binding",
    "Bookmark",
    "Event",
    "EventSource",
    "EventType",
    "KubeObject",
    "Lease",
    "LeaseSpec",
    "ListMeta",
    "ObjectList",
    "ObjectRef",
    "Status",
    "WatchLine",
    "make_event",
    "object_key",
]

T = TypeVar("T")


class KubeObject(Protocol):
    """What the watch machinery needs from a view: its metadata (identity and resourceVersion)."""

    @property
    def metadata(self) -> ObjectMeta: ...


def object_key(obj: KubeObject) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones (the cache key)."""
    meta = obj.metadata
    return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name


class EventType(enum.StrEnum):
    """Watch event types hami acts on. ``ERROR`` is not one: the client raises it as an :class:`ApiError`."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"


class ListMeta(msgspec.Struct, rename={"resource_version": "resourceVersion", "continue_": "continue"}):
    resource_version: str = ""
    continue_: str = ""


class ObjectList(msgspec.Struct, Generic[T]):
    """A list response (``PodList``, ``NodeList``…). ``items`` may be ``null`` on the wire."""

    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[T] | None = None


class WatchLine(msgspec.Struct):
    """One line of a watch stream; ``object`` stays raw until its type is known (an ERROR carries a Status)."""

    type: str
    object: msgspec.Raw


class Bookmark(msgspec.Struct):
    """The object of a watch ``BOOKMARK`` event, of which only ``metadata.resourceVersion`` counts."""

    metadata: ListMeta = msgspec.field(default_factory=ListMeta)


class Status(msgspec.Struct):
    """The API's ``Status`` body, sent with every failed request and in watch ``ERROR`` events."""

    status: str = ""
    message: str = ""
    reason: str = ""
    code: int = 0


class LeaseSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    holder_identity: str | None = None
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None  # RFC3339 with microseconds (MicroTime)
    renew_time: str | None = None
    lease_transitions: int | None = None


class Lease(msgspec.Struct, omit_defaults=True):
    """``coordination.k8s.io/v1`` Lease: who leads the kube-scheduler this extender sits beside (spec webhook §3.4)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: LeaseSpec = msgspec.field(default_factory=LeaseSpec)
    kind: str = "Lease"


class ObjectRef(msgspec.Struct, rename="camel", frozen=True):
    """An ``ObjectReference``: the involved object of an Event, the target of a Binding."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"

    @classmethod
    def for_pod(cls, pod: Pod) -> ObjectRef:
        meta = pod.metadata
        return cls("Pod", meta.name, meta.namespace, meta.uid)

    @classmethod
    def for_node(cls, node: Node) -> ObjectRef:
        # As the kubelet does, a node reference without a UID uses the node name.
        return cls("Node", node.metadata.name, "", node.metadata.uid or node.metadata.name)


class Binding(msgspec.Struct, rename={"api_version": "apiVersion"}):
    """``POST …/pods/<name>/binding``: metadata carries the pod's UID as a precondition."""

    metadata: ObjectMeta
    target: ObjectRef
    kind: str = "Binding"
    api_version: str = "v1"


class EventSource(msgspec.Struct, omit_defaults=True):
    component: str = ""
    host: str = ""


class Event(msgspec.Struct, rename="camel", omit_defaults=True):
    """A core/v1 Event, written the way client-go's legacy recorder (which HAMi uses) writes it."""

    metadata: ObjectMeta
    involved_object: ObjectRef
    reason: str
    message: str
    type: str
    source: EventSource
    first_timestamp: str
    last_timestamp: str
    count: int
    reporting_component: str = ""
    reporting_instance: str = ""


def make_event(
    involved: ObjectRef, type: str, reason: str, message: str, *, component: str, instance: str, now: datetime
) -> Event:
    """Build a core/v1 Event about ``involved`` at ``now`` (an aware datetime).

    Mirrors client-go's ``record`` package: name ``<involved name>.<unix nanoseconds in hex>``, namespace of the
    involved object (``default`` for cluster-scoped ones such as Nodes), ``firstTimestamp = lastTimestamp = now``,
    ``count = 1``, ``source.component`` and ``reportingComponent`` = ``component``, ``reportingInstance`` =
    ``instance``. ``eventTime`` is left unset on purpose: with it set, the API also requires ``action`` and
    treats the event as a new-style (events.k8s.io) one.
    """
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    nanos = int(now.timestamp() * 1_000_000) * 1000
    namespace = involved.namespace or "default"
    return Event(
        metadata=ObjectMeta(name=f"{involved.name}.{nanos:x}", namespace=namespace),
        involved_object=involved,
        reason=reason,
        message=message,
        type=type,
        source=EventSource(component=component, host=instance),
        first_timestamp=stamp,
        last_timestamp=stamp,
        count=1,
        reporting_component=component,
        reporting_instance=instance,
    )
