"""Test support for the server: a small world for the extender's unit tests and builders for GPU nodes and pods.

The world is a ``MemoryCluster`` behind the real ``ExtenderIO`` (real ``NodeLocker``, real ``EventRecorder``),
with the real ``ClusterState`` and ``Metrics``. The test plays the watch: :meth:`World.add_node` and
:meth:`World.add_pod` write an object to the cluster and hand the stored version to the extender's handlers, as
the reflectors do.

Time is fixed: the extender's clock says :data:`NOW` (Unix seconds), the node lock's clock :data:`NOW_DT`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.devices.base import Vendor
from hami.k8s.cluster import ClusterClient
from hami.k8s.events import EventRecorder
from hami.k8s.extender_io import ExtenderIO
from hami.k8s.memory import MemoryCluster
from hami.k8s.nodelock import NodeLocker
from hami.protocol import keys
from hami.protocol.extender import FilterArgs, FilterResult
from hami.protocol.inventory import DeviceInfo, encode_inventory_json
from hami.protocol.objects import (
    Container,
    Node,
    ObjectMeta,
    Pod,
    PodSpec,
    PodStatus,
    QuantityValue,
    ResourceRequirements,
)
from hami.scheduling.request import SchedulingDefaults
from hami.scheduling.state import ClusterState
from hami.server.extender import Extender, Readiness
from hami.server.metrics import Metrics

NOW_DT = datetime(2026, 8, 21, 6, 20, 39, tzinfo=UTC)
NOW = int(NOW_DT.timestamp())  # 1787293239
NS = "team-a"

Usage = dict[str, tuple[int, int, int]]
"""device UUID → (slots, MiB, cores) in use."""


def gpu_node(
    name: str,
    *,
    gpus: int = 2,
    mem: int = 24000,
    cores: int = 100,
    count: int = 10,
    type: str = "NVIDIA-A100",
    annotations: Mapping[str, str] | None = None,
) -> Node:
    """A node registering ``gpus`` identical devices ``GPU-<name>-<i>`` in HAMi's JSON format."""
    devices = [
        DeviceInfo(
            id=f"GPU-{name}-{i}",
            index=i,
            count=count,
            devmem=mem,
            devcore=cores,
            type=type,
            mode="hami-core",
            health=True,
        )
        for i in range(gpus)
    ]
    meta = ObjectMeta(
        name=name, annotations={keys.NVIDIA_REGISTER: encode_inventory_json(devices), **(annotations or {})}
    )
    return Node(metadata=meta)


def garbage_node(name: str) -> Node:
    """A node whose NVIDIA register annotation is not JSON (a broken or foreign device plugin)."""
    return Node(metadata=ObjectMeta(name=name, annotations={keys.NVIDIA_REGISTER: "[{garbage"}))


def gpu_pod(
    name: str,
    *,
    gpu: int | str = 1,
    mem: int | str | None = 3000,
    cores: int | str | None = 30,
    namespace: str = NS,
    annotations: Mapping[str, str] | None = None,
    phase: str = "Pending",
) -> Pod:
    """A one-container pod of hami's scheduler asking for NVIDIA resources in its limits (``None`` leaves a
    resource out)."""
    limits: dict[str, QuantityValue] = {"nvidia.com/gpu": gpu}
    if mem is not None:
        limits["nvidia.com/gpumem"] = mem
    if cores is not None:
        limits["nvidia.com/gpucores"] = cores
    return Pod(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=f"uid-{name}", annotations=dict(annotations or {})),
        spec=PodSpec(
            containers=[Container(name="main", resources=ResourceRequirements(limits=limits))],
            scheduler_name="hami-scheduler",  # as hami's webhook leaves it
        ),
        status=PodStatus(phase=phase),
    )


def plain_pod(name: str, limits: Mapping[str, str] | None = None, namespace: str = NS) -> Pod:
    resources = ResourceRequirements(limits=dict(limits or {}))
    return Pod(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=f"uid-{name}"),
        spec=PodSpec(containers=[Container(name="main", resources=resources)]),
    )


class GatedCluster(MemoryCluster):
    """A cluster whose pod patches wait until :attr:`gate` is set: a slow allocation commit (the one a /bind waits
    for first)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def patch_pod_metadata(self, *args: object, **kwargs: object) -> Pod:
        await self.gate.wait()
        return await super().patch_pod_metadata(*args, **kwargs)  # type: ignore[arg-type]


@dataclass
class World:
    cluster: MemoryCluster
    extender: Extender
    recorder: EventRecorder
    locker: NodeLocker
    readiness: dict[str, bool] = field(default_factory=lambda: {"synced": True, "leader": True})
    """What the extender's ``Readiness`` reports; a test flips ``synced`` or ``leader``."""
    watched: dict[tuple[str, str], Pod] = field(default_factory=dict)
    """The pod watch's store as the extender sees it (``watched_pod``): what ``add_pod``/``deliver`` handed over."""

    @property
    def state(self) -> ClusterState:
        return self.extender.state

    @property
    def metrics(self) -> Metrics:
        return self.extender.metrics

    def add_node(self, node: Node) -> Node:
        stored = self.cluster.put_node(node)
        self.extender.on_node(stored)
        return stored

    def add_pod(self, pod: Pod) -> Pod:
        stored = self.cluster.put_pod(pod)
        self.watched[(stored.metadata.namespace, stored.metadata.name)] = stored
        self.extender.on_pod(stored)
        return stored

    def deliver(self, namespace: str, name: str) -> Pod:
        """Hand the pod's current version to the extender, as the pod watch would after a write."""
        pod = self.cluster.pods[(namespace, name)]
        self.watched[(namespace, name)] = pod
        self.extender.on_pod(pod)
        return pod

    def remove_pod(self, name: str, namespace: str = NS) -> Pod:
        """Delete the pod and deliver the deletion, as the pod watch would."""
        pod = self.cluster.pods[(namespace, name)]
        self.cluster.delete_pod(namespace, name)
        self.watched.pop((namespace, name), None)
        self.extender.on_pod(pod, deleted=True)
        return pod

    def pod(self, name: str, namespace: str = NS) -> Pod:
        return self.cluster.pods[(namespace, name)]

    async def filter(self, pod: Pod, nodes: Iterable[str], *, settle: bool = True) -> FilterResult:
        """``/filter`` with ``nodenames``; with ``settle``, also wait until its annotation commit (which runs
        beside the answer) has finished."""
        result = await self.extender.filter(FilterArgs(pod, nodenames=list(nodes)))
        if settle:
            await self.extender.settle_all()
        return result

    async def events(self) -> list[tuple[str, str, str]]:
        """Every event written so far as (type, reason, message), after the recorder's writes finished."""
        await self.recorder.flush()
        return [(e.type, e.reason, e.message) for e in self.cluster.events]

    async def clear_events(self) -> None:
        """Forget the events written so far (after the recorder's writes finished)."""
        await self.recorder.flush()
        self.cluster.events.clear()

    def usage(self) -> Usage:
        """Per-device usage from the ledger, devices without usage left out."""
        out: Usage = {}
        for node in self.state.nodes.values():
            for table in node.tables.values():
                for i, info in enumerate(table.infos):
                    used = (table.used[i], table.usedmem[i], table.usedcores[i])
                    if used != (0, 0, 0):
                        out[info.id] = used
        return out


def make_world(
    defaults: SchedulingDefaults | None = None,
    *,
    backing: MemoryCluster | None = None,
    seam: ClusterClient | None = None,
    background_commit: bool = True,
    vendors: Mapping[str, Vendor] | None = None,
) -> World:
    """A world over ``backing`` (a new ``MemoryCluster`` by default). ``seam`` is what the extender talks to:
    ``backing`` itself by default, or a ``KubeCluster`` over HTTP to a fake API server backed by it. ``vendors``:
    the registered ones with their default configuration unless given."""
    vendors = dict(vendors) if vendors is not None else vendors_from_config(default_device_config())
    state = ClusterState(vendors)
    memory = backing or MemoryCluster()
    io: ClusterClient = seam or memory
    locker = NodeLocker(io, clock=lambda: NOW_DT)
    recorder = EventRecorder(io, "hami-scheduler")
    flags = {"synced": True, "leader": True}
    watched: dict[tuple[str, str], Pod] = {}
    extender = Extender(
        state=state,
        vendors=vendors,
        defaults=defaults or SchedulingDefaults(),
        cluster=ExtenderIO(io, locker, recorder, pod_hint=lambda ns, name: watched.get((ns, name))),
        metrics=Metrics(lambda: state),
        readiness=Readiness(synced=lambda: flags["synced"], leader=lambda: flags["leader"]),
        clock=lambda: float(NOW),
        background_commit=background_commit,
    )
    return World(memory, extender, recorder, locker, flags, watched)
