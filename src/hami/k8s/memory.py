"""An in-memory cluster with the semantics of :class:`~hami.k8s.cluster.ClusterClient` (see that module).

For unit tests of the server and for simulations: nodes and pods are put in directly, every write bumps a
cluster-wide resourceVersion counter (as etcd does), stale resourceVersions get 409, a pod patch naming
another UID 422 (as ``Conflict`` and its ``PodReplaced``, as ``KubeCluster`` raises them), missing objects 404.
Objects are copied in and out, so callers never share state with the cluster. :meth:`MemoryCluster.fail` makes
the next call(s) of one operation raise a chosen error, to test failure paths.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec

from hami.errors import ApiError, BudgetRefused, Conflict, NotFound
from hami.k8s.client import ListPage
from hami.k8s.cluster import pod_replaced
from hami.k8s.records import ObjectRef
from hami.protocol.objects import Node, Pod, PodCondition, PodDisruptionBudget

__all__ = ["MemoryCluster", "RecordedEvent"]

S = TypeVar("S", Pod, Node)


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    involved: ObjectRef
    type: str
    reason: str
    message: str
    component: str
    count: int = 1
    """1 when created; set by ``fold_event`` when the same event happened again."""
    name: str = field(default="", compare=False)


def _merge(target: dict[str, str], changes: Mapping[str, str | None] | None) -> None:
    for key, value in (changes or {}).items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value


def _merged(old: Iterable[PodCondition], new: Iterable[PodCondition]) -> tuple[PodCondition, ...]:
    """``old`` with each condition of ``new`` in place of the one of its type (appended when there is none)."""
    out = list(old)
    for condition in new:
        at = next((i for i, c in enumerate(out) if c.type == condition.type), None)
        if at is None:
            out.append(condition)
        else:
            out[at] = condition
    return tuple(out)


def _modified(resource: str, name: str) -> Conflict:
    return Conflict(
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        409,
    )


class MemoryCluster:
    """Pods and nodes in dicts; implements ``ClusterClient``. Not thread-safe (one event loop)."""

    def __init__(self, *, nodes: Iterable[Node] = (), pods: Iterable[Pod] = ()) -> None:
        self._rv = 0
        self._nodes: dict[str, Node] = {}
        self._pods: dict[tuple[str, str], Pod] = {}
        self._failures: dict[str, list[ApiError]] = {}
        self.events: list[RecordedEvent] = []
        self.calls: list[str] = []
        """Names of the ``ClusterClient`` operations called, in order (``"get_node"``, ``"bind"``…)."""
        self.budgets: list[PodDisruptionBudget] = []
        """PodDisruptionBudgets: ``evict_pod`` honours them as the Eviction API does (and counts them down)."""
        self.statuses: list[tuple[str, str, dict[str, object]]] = []
        """Every status patch that landed: (namespace, name, the patch's ``status``)."""
        for node in nodes:
            self.put_node(node)
        for pod in pods:
            self.put_pod(pod)

    # --- setting up and inspecting ---------------------------------------------------------------------------

    def _stamp(self, obj: S) -> S:
        self._rv += 1
        obj.metadata.resource_version = str(self._rv)
        return obj

    def put_node(self, node: Node) -> Node:
        """Create or replace a node (a copy is stored); returns the stored state."""
        stored = self._stamp(copy.deepcopy(node))
        self._nodes[stored.metadata.name] = stored
        return copy.deepcopy(stored)

    def put_pod(self, pod: Pod) -> Pod:
        """Create or replace a pod (a copy is stored; a missing UID becomes ``uid-<ns>-<name>``)."""
        stored = self._stamp(copy.deepcopy(pod))
        meta = stored.metadata
        meta.uid = meta.uid or f"uid-{meta.namespace}-{meta.name}"
        self._pods[(meta.namespace, meta.name)] = stored
        return copy.deepcopy(stored)

    def delete_pod(self, namespace: str, name: str) -> None:
        self._pods.pop((namespace, name), None)

    def delete_node(self, name: str) -> None:
        self._nodes.pop(name, None)

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> Pod:
        pod = self._pod(namespace, name)
        pod.status.phase = phase
        return copy.deepcopy(self._stamp(pod))

    @property
    def nodes(self) -> Mapping[str, Node]:
        """Name → a copy of each node."""
        return {name: copy.deepcopy(node) for name, node in self._nodes.items()}

    @property
    def pods(self) -> Mapping[tuple[str, str], Pod]:
        """``(namespace, name)`` → a copy of each pod."""
        return {key: copy.deepcopy(pod) for key, pod in self._pods.items()}

    def fail(self, operation: str, error: ApiError, times: int = 1) -> None:
        """Make the next ``times`` calls of ``operation`` (e.g. ``"bind"``) raise ``error`` instead."""
        self._failures.setdefault(operation, []).extend([error] * times)

    def _enter(self, operation: str) -> None:
        self.calls.append(operation)
        pending = self._failures.get(operation)
        if pending:
            raise pending.pop(0)

    def _pod(self, namespace: str, name: str) -> Pod:
        pod = self._pods.get((namespace, name))
        if pod is None:
            raise NotFound(f'pods "{name}" not found', 404)
        return pod

    def _node(self, name: str) -> Node:
        node = self._nodes.get(name)
        if node is None:
            raise NotFound(f'nodes "{name}" not found', 404)
        return node

    # --- ClusterClient ------------------------------------------------------------------------------------

    async def get_pod(self, namespace: str, name: str) -> Pod:
        self._enter("get_pod")
        return copy.deepcopy(self._pod(namespace, name))

    async def get_node(self, name: str) -> Node:
        self._enter("get_node")
        return copy.deepcopy(self._node(name))

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
        self._enter("patch_pod_metadata")
        pod = self._pod(namespace, name)
        if uid and uid != pod.metadata.uid:
            # what the API server answers (422), as KubeCluster turns it into a Conflict
            detail = f'Pod "{name}" is invalid: metadata.uid: Invalid value: "{uid}": field is immutable'
            raise pod_replaced(namespace, name, uid, detail, 422)
        if resource_version is not None and resource_version != pod.metadata.resource_version:
            raise _modified("pods", name)
        _merge(pod.metadata.annotations, annotations)
        _merge(pod.metadata.labels, labels)
        return copy.deepcopy(self._stamp(pod))

    async def patch_node_annotations(
        self, name: str, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> Node:
        self._enter("patch_node_annotations")
        node = self._node(name)
        if resource_version is not None and resource_version != node.metadata.resource_version:
            raise _modified("nodes", name)
        _merge(node.metadata.annotations, annotations)
        return copy.deepcopy(self._stamp(node))

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, resource_version: str | None = None
    ) -> None:
        self._enter("bind")
        pod = self._pod(namespace, name)
        if uid and uid != pod.metadata.uid:
            raise Conflict(
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {pod.metadata.uid}", 409
            )
        if resource_version and resource_version != pod.metadata.resource_version:
            raise Conflict(
                f"Precondition failed: ResourceVersion in precondition: {resource_version}, "
                f"ResourceVersion in object meta: {pod.metadata.resource_version}",
                409,
            )
        if pod.spec.node_name:
            raise Conflict(
                f'Operation cannot be fulfilled on pods/binding "{name}": '
                f'pod {name} is already assigned to node "{pod.spec.node_name}"',
                409,
            )
        pod.spec.node_name = node
        self._stamp(pod)

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """As the Eviction API: the UID precondition, then every budget selecting the pod must allow one more
        disruption (``BudgetRefused`` otherwise); then the ``DisruptionTarget`` condition (reason
        ``EvictionByEvictionAPI``) and a graceful delete (``deletionTimestamp`` set, pod kept)."""
        self._enter("evict_pod")
        pod = self._pod(namespace, name)
        if uid != pod.metadata.uid:
            raise Conflict(f"the UID in the precondition ({uid}) does not match the UID in record", 409)
        selecting = [
            b
            for b in self.budgets
            if b.metadata.namespace == namespace and b.spec.selector is not None
            if b.spec.selector.selects(pod.metadata.labels)
        ]
        for budget in selecting:
            if budget.status.disruptions_allowed <= 0:
                raise BudgetRefused("Cannot evict pod as it would violate the pod's disruption budget.", 429)
        for budget in selecting:
            budget.status.disruptions_allowed -= 1
        pod.metadata.deletion_timestamp = pod.metadata.deletion_timestamp or "2026-01-01T00:00:00Z"
        evicting = PodCondition("DisruptionTarget", "True", "EvictionByEvictionAPI", "Eviction API: evicting")
        pod.status.conditions = _merged(pod.status.conditions, [evicting])
        self._stamp(pod)

    async def patch_pod_status(self, namespace: str, name: str, uid: str, status: Mapping[str, object]) -> None:
        self._enter("patch_pod_status")
        pod = self._pod(namespace, name)
        if uid != pod.metadata.uid:
            detail = f'Pod "{name}" is invalid: metadata.uid: Invalid value: "{uid}": field is immutable'
            raise pod_replaced(namespace, name, uid, detail, 422)
        if "nominatedNodeName" in status:
            pod.status.nominated_node_name = str(status["nominatedNodeName"] or "")
        if "conditions" in status:  # a strategic merge: by type
            given = msgspec.convert(status["conditions"], type=list[PodCondition])
            pod.status.conditions = _merged(pod.status.conditions, given)
        self.statuses.append((namespace, name, copy.deepcopy(dict(status))))
        self._stamp(pod)

    async def disruption_budgets(self) -> list[PodDisruptionBudget]:
        self._enter("disruption_budgets")
        return copy.deepcopy(self.budgets)

    async def emit_event(self, involved: ObjectRef, type: str, reason: str, message: str, component: str) -> str:
        self._enter("emit_event")
        name = f"{involved.name}.{len(self.events) + 1:x}"
        self.events.append(RecordedEvent(involved, type, reason, message, component, name=name))
        return name

    async def fold_event(self, namespace: str, name: str, count: int) -> None:
        self._enter("fold_event")
        for i, event in enumerate(self.events):
            if event.name == name and (event.involved.namespace or "default") == namespace:
                self.events[i] = dataclasses.replace(event, count=count)
                return
        raise NotFound(f'events "{name}" not found', 404)

    async def list_pods(self, page_size: int = 500) -> AsyncIterator[ListPage[Pod]]:
        """As ``KubeCluster.list_pods``: the pods that have not finished, ``page_size`` a page, all from the
        snapshot taken when the first page is asked for (later writes do not show, as in a paginated list)."""
        self._enter("list_pods")
        snapshot = [copy.deepcopy(p) for p in self._pods.values() if p.status.phase not in ("Succeeded", "Failed")]
        version = str(self._rv)
        step = max(page_size, 1)
        for start in range(0, max(len(snapshot), 1), step):
            rest = start + step < len(snapshot)
            yield ListPage(snapshot[start : start + step], version, str(start + step) if rest else "", start == 0)
