"""Small clusters for the views' tests, written as the objects ``kubectl get … -o json`` prints and read through
the simulator's own loader (so the views see exactly what a snapshot gives them)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hami.config import default_device_config
from hami.protocol.inventory import DeviceInfo, encode_inventory_json
from hami.scheduling.request import SchedulingDefaults
from hami.simulate.loading import load_snapshot
from hami.simulate.simulator import Simulator

Card = tuple[int, int]  # MiB, slots


def node(
    name: str,
    cards: Sequence[Card],
    *,
    model: str = "NVIDIA-Tesla T4",
    labels: dict[str, str] | None = None,
    unschedulable: bool = False,
    unhealthy: Sequence[int] = (),
    cordon: Sequence[int] = (),
) -> dict[str, Any]:
    devices = [
        DeviceInfo(
            id=f"GPU-{name}-{i}",
            index=i,
            count=slots,
            devmem=mem,
            devcore=100,
            type=model,
            mode="hami-core",
            health=i not in unhealthy,
        )
        for i, (mem, slots) in enumerate(cards)
    ]
    annotations = {"hami.io/node-nvidia-register": encode_inventory_json(devices)}
    if cordon:
        annotations["hami.io/device-cordon"] = ",".join(f"GPU-{name}-{i}" for i in cordon)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            "annotations": annotations,
        },
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
    }


def pod(
    name: str,
    mem: int,
    cores: int = 0,
    *,
    gpus: int = 1,
    namespace: str = "team",
    on: str | None = None,
    cards: Sequence[int] = (0,),
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    priority: int | None = None,
    policy: str | None = None,
    deleting: bool = False,
    preempted: bool = False,
    owner: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A pod asking for ``gpus`` × (``mem`` MiB, ``cores``%); with ``on`` it already holds ``cards`` of that node.
    ``deleting``: terminating (on its own); ``preempted``: terminating because a scheduler preempted it; ``owner``
    (kind, name): its controller (``ownerReferences``)."""
    notes = dict(annotations or {})
    if on is not None:
        allocated = "".join(f"GPU-{on}-{c},NVIDIA,{mem},{cores}:" for c in cards) + ";"
        notes |= {
            "hami.io/vgpu-node": on,
            "hami.io/vgpu-time": "1700000000",
            "hami.io/bind-phase": "success",
            "hami.io/vgpu-devices-allocated": allocated,
            "hami.io/vgpu-devices-to-allocate": ";",
        }
    limits = {"nvidia.com/gpu": gpus, "nvidia.com/gpumem": mem}
    if cores:
        limits["nvidia.com/gpucores"] = cores
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]}
    if on is not None:
        spec["nodeName"] = on
    if node_selector:
        spec["nodeSelector"] = node_selector
    if priority is not None:
        spec["priority"] = priority
    if policy is not None:
        spec["preemptionPolicy"] = policy
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}", "annotations": notes}
    status: dict[str, Any] = {"phase": "Running" if on else "Pending"}
    if deleting or preempted:
        meta["deletionTimestamp"] = "2026-11-27T12:00:00Z"
    if preempted:
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    if owner is not None:
        kind, owned_by = owner
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": kind, "name": owned_by, "uid": f"uid-{owned_by}", "controller": True}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def snapshot_text(*objects: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})


def simulator(*objects: dict[str, Any], gpu_policy: str = "spread", allow_warnings: bool = False) -> Simulator:
    sim = Simulator(default_device_config(), SchedulingDefaults(gpu_policy=gpu_policy))
    sim.add_snapshot(load_snapshot([("snapshot.json", snapshot_text(*objects))]))
    assert allow_warnings or sim.warnings == []
    return sim
