"""Small builders for pods and nodes as the scheduler leaves them after Filter and Bind."""

from __future__ import annotations

from datetime import UTC, datetime

from hami.protocol import keys
from hami.protocol.nodelock import NodeLock, encode_node_lock
from hami.protocol.objects import Container, EnvVar, Node, ObjectMeta, Pod, PodSpec, PodStatus

NODE = "gpu-1"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
ALLOCATED = "hami.io/vgpu-devices-allocated"
DCU_TO_ALLOCATE = "hami.io/dcu-devices-to-allocate"
LOCK_TIME = datetime(2026, 8, 21, 6, 20, 39, tzinfo=UTC)


def lock_value(namespace: str, name: str) -> str:
    return encode_node_lock(NodeLock(LOCK_TIME, namespace, name))


def node(name: str = NODE, *, locked_by: tuple[str, str] | None = None, **annotations: str) -> Node:
    notes = dict(annotations)
    if locked_by is not None:
        notes[keys.NODE_LOCK] = lock_value(*locked_by)
    return Node(metadata=ObjectMeta(name=name, annotations=notes))


def bound_pod(
    name: str,
    to_allocate: str | None,
    *,
    namespace: str = "default",
    containers: tuple[str, ...] = ("main",),
    init: tuple[str, ...] = (),
    node_name: str = NODE,
    phase: str = "Pending",
    bind_phase: str = "allocating",
    bind_time: str = "1700000000",
    env: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Pod:
    """A pod the scheduler placed on ``node_name`` and Bind marked ``allocating``."""
    notes = {keys.VGPU_NODE: node_name, keys.BIND_PHASE: bind_phase, keys.BIND_TIME: bind_time}
    if to_allocate is not None:
        notes[TO_ALLOCATE] = to_allocate
        notes[ALLOCATED] = to_allocate
    notes.update(annotations or {})
    variables = [EnvVar(name=k, value=v) for k, v in (env or {}).items()]
    return Pod(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=f"uid-{name}", annotations=notes),
        spec=PodSpec(
            node_name=node_name,
            containers=[Container(name=c, env=variables) for c in containers],
            init_containers=[Container(name=c) for c in init],
        ),
        status=PodStatus(phase=phase),
    )
