"""DRA fixtures: real ``resource.k8s.io/v1`` objects captured from the project's v1.36.3 control plane
(``fixtures/dra/*.json``, managedFields stripped) and small builders for synthetic slices and claims.

The captured cluster: node ``dra-node-1`` publishes shared A100s ``gpu-0``/``gpu-1`` (memory 80Gi, cores 100 with
default 100) and exclusive ``gpu-2``; node ``dra-node-2`` (pool generation 3) publishes memory-only shared 16Gi
devices ``gpu-0``/``gpu-1``. ``registered()`` builds a hami state whose NVIDIA registrations hold the same UUIDs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from hami.config.dra import DraConfig, DraDriverConfig
from hami.devices.base import NodeInventory
from hami.protocol.dra import DeviceClass, ResourceClaim, ResourceSlice
from hami.protocol.inventory import DeviceInfo
from hami.scheduling.dra import DraLedger
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import NVIDIA, gpu, vendors

FIXTURES = Path(__file__).parent / "fixtures" / "dra"
DRIVER = "gpu.nvidia.com"
UUID = {
    ("dra-node-1", "gpu-0"): "GPU-11111111-1111-1111-1111-111111111111",
    ("dra-node-1", "gpu-1"): "GPU-22222222-2222-2222-2222-222222222222",
    ("dra-node-1", "gpu-2"): "GPU-33333333-3333-3333-3333-333333333333",
    ("dra-node-2", "gpu-0"): "GPU-44444440-0000-0000-0000-000000000000",
    ("dra-node-2", "gpu-1"): "GPU-44444441-0000-0000-0000-000000000000",
}
A100_MIB = 81920
SMALL_MIB = 16384


def raw(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def slice_(name: str = "resourceslice") -> ResourceSlice:
    return msgspec.convert(raw(name), type=ResourceSlice)


def claim(name: str) -> ResourceClaim:
    return msgspec.convert(raw(name), type=ResourceClaim)


def device_class(name: str = "deviceclass") -> DeviceClass:
    return msgspec.convert(raw(name), type=DeviceClass)


def cards(node: str, devmem: int, count: int = 10, devcore: int = 100) -> tuple[DeviceInfo, ...]:
    names = sorted(dev for n, dev in UUID if n == node)
    return tuple(
        gpu(UUID[(node, dev)], index=i, count=count, devmem=devmem, devcore=devcore) for i, dev in enumerate(names)
    )


def registered(*, count: int = 10) -> ClusterState:
    """hami's view of the captured cluster: both nodes registered with the DRA devices' UUIDs."""
    s = ClusterState(vendors())
    s.set_node("dra-node-1", {NVIDIA: NodeInventory(cards("dra-node-1", A100_MIB, count))})
    s.set_node("dra-node-2", {NVIDIA: NodeInventory(cards("dra-node-2", SMALL_MIB, count))})
    return s


def ledger(state: ClusterState | None = None, **driver: Any) -> DraLedger:
    """A ledger over ``state`` (default ``registered()``) counting the NVIDIA driver (``driver`` overrides keys)."""
    config = DraConfig(drivers=(DraDriverConfig(driver=DRIVER, **driver),))
    return DraLedger(state if state is not None else registered(), config)


def synthetic_slice(
    name: str,
    node: str,
    devices: list[dict[str, Any]],
    *,
    pool: str | None = None,
    generation: int = 1,
    driver: str = DRIVER,
) -> ResourceSlice:
    """A slice from plain device dicts (``shared_device``/``exclusive_device``)."""
    spec = {"driver": driver, "pool": {"name": pool or node, "generation": generation}, "nodeName": node}
    return msgspec.convert({"metadata": {"name": name}, "spec": {**spec, "devices": devices}}, type=ResourceSlice)


def shared_device(
    name: str, uuid: str, memory: Any = "16Gi", *, cores: Any = None, cores_default: Any = None
) -> dict[str, Any]:
    capacity: dict[str, Any] = {"memory": {"value": memory, "requestPolicy": {"default": "1Gi"}}}
    if cores is not None:
        policy = {"requestPolicy": {"default": cores_default}} if cores_default is not None else {}
        capacity["cores"] = {"value": cores, **policy}
    return {
        "name": name,
        "attributes": {"uuid": {"string": uuid}},
        "capacity": capacity,
        "allowMultipleAllocations": True,
    }


def exclusive_device(name: str, uuid: str, memory: Any = "16Gi") -> dict[str, Any]:
    return {"name": name, "attributes": {"uuid": {"string": uuid}}, "capacity": {"memory": {"value": memory}}}


def synthetic_claim(
    name: str,
    results: list[dict[str, Any]],
    *,
    pods: list[tuple[str, str]] | None = None,
    namespace: str = "ns",
    uid: str | None = None,
) -> ResourceClaim:
    """A claim allocated with ``results`` (``result()``), reserved for ``pods`` [(name, uid)] (default: one)."""
    reserved = [
        {"resource": "pods", "name": n, "uid": u}
        for n, u in (pods if pods is not None else [(f"{name}-pod", f"uid-{name}-pod")])
    ]
    return msgspec.convert(
        {
            "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"},
            "status": {"allocation": {"devices": {"results": results}}, "reservedFor": reserved},
        },
        type=ResourceClaim,
    )


def result(device: str, pool: str, share: str | None = None, driver: str = DRIVER, **consumed: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"request": "gpu", "driver": driver, "pool": pool, "device": device}
    if share is not None:
        out["shareID"] = share
    if consumed:
        out["consumedCapacity"] = consumed
    return out
