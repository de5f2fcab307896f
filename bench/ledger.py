"""Ledger benchmarks: pod add/remove per second, full recount, memory of the cached state, cold start."""

from __future__ import annotations

import gc
import time
import tracemalloc

import msgspec

from bench.scenarios import Scenario, build_state, vendors
from hami.protocol.allocation import ContainerDevice
from hami.protocol.objects import Node, WatchedPod
from hami.scheduling.records import RecordReader
from hami.scheduling.state import ClusterState, PodRecord
from hami.scheduling.usage import Charge
from hami.server.runtime import hold_collector, settle_heap


def ledger_ops(s: Scenario, n: int = 20000) -> dict[str, float]:
    state = build_state(s)
    total = s.nodes * s.gpus
    records = []
    for p in range(n):
        d = (p * 7) % total
        node, i = divmod(d, s.gpus)
        uuid = f"GPU-{node:05d}-{i:02d}"
        records.append(
            PodRecord(
                uid=f"extra-{p}",
                namespace="bench",
                name=f"extra-{p}",
                node=f"node-{node:05d}",
                devices={"NVIDIA": ((ContainerDevice(uuid, "NVIDIA", 16, 1),),)},
                charges=(Charge("NVIDIA", uuid, 1, 16, 1),),
            )
        )
    t0 = time.perf_counter()
    for r in records:
        state.apply(r, add=True)
    t_add = time.perf_counter() - t0
    t0 = time.perf_counter()
    for r in records:
        state.apply(r, add=False)
    t_remove = time.perf_counter() - t0
    t0 = time.perf_counter()
    diffs = state.verify()
    t_recount = time.perf_counter() - t0
    assert not diffs, diffs[:3]
    return {"adds_per_s": n / t_add, "removes_per_s": n / t_remove, "recount_ms": t_recount * 1e3}


def _node_json(n: int, gpus: int) -> dict[str, object]:
    from bench.scenarios import node_devices
    from hami.protocol.inventory import encode_inventory_json

    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{n:05d}",
            "uid": f"uid-node-{n}",
            "resourceVersion": "1",
            "labels": {"kubernetes.io/hostname": f"node-{n:05d}", "gpu": "on"},
            "annotations": {"hami.io/node-nvidia-register": encode_inventory_json(list(node_devices(n, gpus)))},
        },
        "status": {"capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus * 10)}},
    }


def _pod_json(p: int, s: Scenario) -> dict[str, object]:
    total = s.nodes * s.gpus
    node, i = divmod(p % total, s.gpus)
    value = f"GPU-{node:05d}-{i:02d},NVIDIA,1024,10:;"
    env = [{"name": f"ENV_{k}", "value": "x" * 40} for k in range(20)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"cached-{p}",
            "namespace": "bench",
            "uid": f"uid-{p:08d}",
            "resourceVersion": str(p),
            "labels": {"app": "bench", "hami.io/vgpu-node": f"node-{node:05d}"},
            "annotations": {
                "hami.io/vgpu-node": f"node-{node:05d}",
                "hami.io/vgpu-time": "1700000000",
                "hami.io/vgpu-devices-allocated": value,
                "hami.io/vgpu-devices-to-allocate": ";",
                "hami.io/bind-phase": "success",
            },
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "x"}],
        },
        "spec": {
            "nodeName": f"node-{node:05d}",
            "schedulerName": "hami-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/cuda:12.4.0-base",
                    "env": env,
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "10"}
                    },
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
        "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
    }


class PodList(msgspec.Struct):
    items: list[WatchedPod]


class NodeList(msgspec.Struct):
    items: list[Node]


def cold_start(s: Scenario) -> dict[str, float]:
    """Build the state from full list responses (JSON bytes, as the API server sends them) and measure it: the time
    from the decoding of the lists to a settled heap (``settle_heap``, as the scheduler does when it turns ready),
    and the ledger's size. Only the decoding and the ledger: ``bench.coldstart`` times the real start."""
    nodes_raw = msgspec.json.encode({"kind": "NodeList", "items": [_node_json(n, s.gpus) for n in range(s.nodes)]})
    pods_raw = msgspec.json.encode({"kind": "PodList", "items": [_pod_json(p, s) for p in range(s.pods)]})

    def build() -> ClusterState:
        vs = vendors()
        state = ClusterState(vs)
        reader = RecordReader(vs)
        for node in msgspec.json.decode(nodes_raw, type=NodeList).items:
            state.upsert_node(node)
        for pod in msgspec.json.decode(pods_raw, type=PodList).items:
            record = reader.read(pod)
            if record is not None:
                state.apply(record, add=True)
        return state

    gc.collect()
    t0 = time.perf_counter()
    hold_collector()  # as hami scheduler does until its first sync
    timed = build()  # without tracemalloc, which slows allocation-heavy code several times
    settle_heap()
    elapsed = time.perf_counter() - t0
    gc.unfreeze()
    assert not timed.verify()
    del timed
    gc.collect()
    tracemalloc.start()
    state = build()
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "cold_start_s": elapsed,
        "state_mb": current / 2**20,
        "peak_mb": peak / 2**20,
        "list_json_mb": (len(nodes_raw) + len(pods_raw)) / 2**20,
        "pods": len(state.pods),
    }


if __name__ == "__main__":
    import sys

    from bench.scenarios import SCENARIOS

    for name in sys.argv[1:] or ["M"]:
        print(name, ledger_ops(SCENARIOS[name]))
        print(name, cold_start(SCENARIOS[name]))
