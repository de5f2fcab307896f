"""Generated clusters for the benchmarks (issue 7): every device 10 slots, 8,192 MiB, 100 cores, NUMA 0/1
alternating; every cached pod one device with 1,024 MiB and 10 cores, spread round-robin over the devices."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.devices.base import NodeInventory, Vendor
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Pod
from hami.scheduling.request import PodRequest, SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState, PodRecord
from hami.scheduling.usage import Charge
from hami.server.runtime import settle_heap

__all__ = ["SCENARIOS", "Scenario", "build_state", "make_pod", "make_request"]


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int
    gpus: int
    pods: int
    candidates: int
    init_containers: int = 0
    gpus_per_pod: int = 1
    gpu_policy: str = "spread"


SCENARIOS = {
    s.name: s
    for s in [
        Scenario("S", 10, 4, 100, 10),
        Scenario("M", 100, 8, 2000, 100),
        Scenario("M-50x8", 50, 8, 1000, 50),
        Scenario("M-100x16", 100, 16, 5000, 100),
        Scenario("M-topo4", 100, 8, 2000, 100, gpus_per_pod=4, gpu_policy="topology-aware"),
        Scenario("L-420", 1000, 8, 20000, 420),
        Scenario("L-1000", 1000, 8, 20000, 1000),
        Scenario("L-1000-init3", 1000, 8, 20000, 1000, init_containers=3),
        Scenario("XL-500", 5000, 8, 100000, 500),
        Scenario("XL-5000", 5000, 8, 100000, 5000),
    ]
}


def vendors() -> dict[str, Vendor]:
    return vendors_from_config(default_device_config())


def node_devices(n: int, gpus: int) -> tuple[DeviceInfo, ...]:
    return tuple(
        DeviceInfo(
            id=f"GPU-{n:05d}-{i:02d}",
            index=i,
            count=10,
            devmem=8192,
            devcore=100,
            type="NVIDIA-Tesla T4",
            numa=i % 2,
            mode="hami-core",
            health=True,
        )
        for i in range(gpus)
    )


def pair_scores(n: int, gpus: int) -> dict[str, dict[str, int]]:
    ids = [f"GPU-{n:05d}-{i:02d}" for i in range(gpus)]
    return {a: {b: (600 if i // 4 == j // 4 else 20) for j, b in enumerate(ids) if b != a} for i, a in enumerate(ids)}


def build_state(s: Scenario) -> ClusterState:
    state = ClusterState(vendors())
    for n in range(s.nodes):
        inv = NodeInventory(node_devices(n, s.gpus), pair_scores(n, s.gpus) if s.gpu_policy == "topology-aware" else {})
        state.set_node(f"node-{n:05d}", {"NVIDIA": inv})
    total = s.nodes * s.gpus
    for p in range(s.pods):
        d = p % total
        n, i = divmod(d, s.gpus)
        uuid = f"GPU-{n:05d}-{i:02d}"
        record = PodRecord(
            uid=f"cached-{p}",
            namespace="bench",
            name=f"cached-{p}",
            node=f"node-{n:05d}",
            devices={"NVIDIA": ((ContainerDevice(uuid, "NVIDIA", 1024, 10),),)},
            charges=(Charge("NVIDIA", uuid, 1, 1024, 10),),
        )
        state.apply(record, add=True)
    settle_heap()  # as hami scheduler does once its caches are synced
    return state


def make_pod(s: Scenario, uid: str, gpumem: int = 1024, annotations: Mapping[str, str] | None = None) -> Pod:
    res = {"limits": {"nvidia.com/gpu": s.gpus_per_pod, "nvidia.com/gpumem": gpumem, "nvidia.com/gpucores": 10}}
    spec = {
        "containers": [{"name": "main", "image": "cuda:12", "resources": res}],
        "initContainers": [
            {"name": f"init{k}", "image": "cuda:12", "resources": res} for k in range(s.init_containers)
        ],
    }
    meta = {"hami.io/gpu-scheduler-policy": s.gpu_policy, **(annotations or {})}
    return msgspec.convert(
        {"metadata": {"name": uid, "namespace": "bench", "uid": uid, "annotations": meta}, "spec": spec},
        type=Pod,
    )


def make_request(
    s: Scenario, uid: str, vs: dict[str, Vendor], gpumem: int = 1024, annotations: Mapping[str, str] | None = None
) -> PodRequest:
    return prefilter(make_pod(s, uid, gpumem, annotations), vs, SchedulingDefaults())


def candidates(s: Scenario, rng: random.Random) -> list[str]:
    names = [f"node-{n:05d}" for n in range(s.nodes)]
    return names if s.candidates >= s.nodes else rng.sample(names, s.candidates)
