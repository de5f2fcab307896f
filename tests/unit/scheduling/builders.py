"""Small fixture builders for the scheduling-core tests (devices and scheduling alike).

Everything is built from domain types (``DeviceInfo``, ``NodeInventory``, ``ContainerRequest``, ``PodRequest``)
so the tests do not depend on the wire codecs or on request parsing. ``pod()`` builds a ``Pod`` only for the
tests of ``prefilter`` and ``record_from_pod``; it uses plain integer resources, which every parser accepts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    ContainerRequest,
    FitContext,
    NodeInventory,
    QuotaCheck,
    Selector,
    Vendor,
)
from hami.devices.policy import parse_gpu_policy
from hami.devices.table import DeviceTable
from hami.protocol.inventory import DeviceInfo, MigPlacement, MigProfile
from hami.protocol.objects import Pod, ResourceQuota
from hami.scheduling.request import PodRequest
from hami.scheduling.state import ClusterState
from hami.scheduling.usage import Kind

NVIDIA = "NVIDIA"
DCU = "DCU"
T4 = "NVIDIA-Tesla T4"
A100 = "NVIDIA A100-SXM4-40GB"


def vendors() -> dict[str, Vendor]:
    """The registered vendors with their default configuration (the only place that touches hami.config)."""
    return vendors_from_config(default_device_config())


def gpu(
    uuid: str,
    *,
    index: int = 0,
    count: int = 10,
    devmem: int = 8192,
    devcore: int = 100,
    type: str = T4,
    numa: int = 0,
    mode: str = "hami-core",
    health: bool = True,
    mig_profiles: tuple[MigProfile, ...] = (),
) -> DeviceInfo:
    return DeviceInfo(
        id=uuid,
        index=index,
        count=count,
        devmem=devmem,
        devcore=devcore,
        type=type,
        numa=numa,
        mode=mode,
        mig_profiles=mig_profiles,
        health=health,
    )


def gpus(n: int, prefix: str = "GPU-", **kwargs: Any) -> tuple[DeviceInfo, ...]:
    """``n`` identical devices ``GPU-0 … GPU-n-1`` with their index set."""
    return tuple(gpu(f"{prefix}{i}", index=i, **kwargs) for i in range(n))


def _profile(name: str, memory: int, core: int, slices: int, size: int, starts: Sequence[int]) -> MigProfile:
    return MigProfile(name, memory, core, slices, tuple(MigPlacement(s, size) for s in starts))


A100_PROFILES: tuple[MigProfile, ...] = (
    _profile("1g.5gb", 4864, 14, 1, 1, range(7)),
    _profile("2g.10gb", 9984, 28, 2, 2, (0, 2, 4)),
    _profile("3g.20gb", 19968, 42, 3, 4, (0, 4)),
    _profile("4g.20gb", 19968, 57, 4, 4, (0,)),
    _profile("7g.40gb", 40192, 100, 7, 8, (0,)),
)
"""An A100-40GB's MIG profiles: legal placements ``[start, start + size)`` over 8 slices."""


def mig_gpu(uuid: str, *, index: int = 0, numa: int = 0, count: int = 7) -> DeviceInfo:
    return gpu(
        uuid, index=index, count=count, devmem=40960, type=A100, numa=numa, mode="mig", mig_profiles=A100_PROFILES
    )


def table(
    *infos: DeviceInfo, vendor: str = NVIDIA, usage: Mapping[int, tuple[int, int, int]] | None = None
) -> DeviceTable:
    """A device table; ``usage`` maps device position → (slots, MiB, cores) already in use."""
    t = DeviceTable(vendor, infos)
    for i, (slots, mem, cores) in (usage or {}).items():
        t.charge(i, slots, mem, cores)
    return t


def req(
    nums: int = 1,
    memreq: int = 0,
    pct: int = MEM_PERCENTAGE_UNSET,
    cores: int = 0,
    vendor: str = NVIDIA,
) -> ContainerRequest:
    return ContainerRequest(vendor, nums, memreq, pct, cores)


def ctx(
    policy: str = "spread",
    *,
    numa_bind: bool = False,
    weights: tuple[int, int, int] = (1, 1, 1),
    cordoned: frozenset[str] = frozenset(),
    pair_scores: Mapping[str, Mapping[str, int]] | None = None,
    quota: QuotaCheck | None = None,
) -> FitContext:
    return FitContext(parse_gpu_policy(policy, numa_bind), weights, cordoned, pair_scores or {}, quota)


def symmetric(pairs: Mapping[tuple[str, str], int]) -> dict[str, dict[str, int]]:
    """Pair scores in both directions from ``{(a, b): score}``."""
    out: dict[str, dict[str, int]] = {}
    for (a, b), s in pairs.items():
        out.setdefault(a, {})[b] = s
        out.setdefault(b, {})[a] = s
    return out


ANY = Selector()


def state(
    nodes: Mapping[str, Sequence[DeviceInfo]] | None = None,
    *,
    dcu: Mapping[str, Sequence[DeviceInfo]] | None = None,
) -> ClusterState:
    """A cluster with NVIDIA nodes (``nodes``) and, optionally, DCU devices per node (``dcu``)."""
    s = ClusterState(vendors())
    names = sorted(set(nodes or {}) | set(dcu or {}))
    for name in names:
        inventories: dict[str, NodeInventory] = {}
        if nodes and nodes.get(name):
            inventories[NVIDIA] = NodeInventory(tuple(nodes[name]))
        if dcu and dcu.get(name):
            inventories[DCU] = NodeInventory(tuple(dcu[name]))
        s.set_node(name, inventories)
    return s


def pod_request(
    *containers: Mapping[str, ContainerRequest] | ContainerRequest | None,
    kinds: Sequence[Kind] | None = None,
    gpu_policy: str = "spread",
    numa_bind: bool = False,
    node_policy: str = "binpack",
    weights: tuple[int, int, int] = (1, 1, 1),
    annotations: Mapping[str, str] | None = None,
    uid: str = "uid-1",
    namespace: str = "default",
    name: str = "pod-1",
) -> PodRequest:
    """A parsed pod: one entry per container (init first). A bare ``ContainerRequest`` is keyed by its vendor,
    ``None`` is a container without devices. ``kinds`` defaults to all app containers."""
    per: list[Mapping[str, ContainerRequest]] = []
    for c in containers:
        if c is None:
            per.append({})
        elif isinstance(c, ContainerRequest):
            per.append({c.vendor: c})
        else:
            per.append(dict(c))
    vs = vendors()
    used = sorted({v for c in per for v in c})
    return PodRequest(
        uid=uid,
        namespace=namespace,
        name=name,
        kinds=tuple(kinds) if kinds is not None else (Kind.APP,) * len(per),
        containers=tuple(per),
        node_policy=node_policy,
        gpu_policy=parse_gpu_policy(gpu_policy, numa_bind),
        weights=weights,
        selectors={v: vs[v].selector(annotations or {}) for v in used},
    )


def container(
    limits: Mapping[str, int] | None = None, *, name: str = "c", restart_policy: str | None = None
) -> dict[str, Any]:
    """A container spec with integer resource limits (``{"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}``)."""
    spec: dict[str, Any] = {"name": name, "resources": {"limits": dict(limits or {})}}
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return spec


def pod(
    containers: Sequence[dict[str, Any]],
    *,
    init: Sequence[dict[str, Any]] = (),
    annotations: Mapping[str, str] | None = None,
    uid: str = "uid-1",
    namespace: str = "default",
    name: str = "pod-1",
    phase: str = "",
    init_statuses: Sequence[dict[str, Any]] = (),
    scheduler_name: str = "hami-scheduler",
    node_name: str = "",
) -> Pod:
    """A pod of hami's scheduler (as hami's webhook leaves it), unbound unless ``node_name`` is given."""
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": dict(annotations or {})},
        "spec": {
            "containers": list(containers),
            "initContainers": list(init),
            "schedulerName": scheduler_name,
            "nodeName": node_name,
        },
        "status": {"phase": phase, "initContainerStatuses": list(init_statuses)},
    }
    return msgspec.convert(raw, type=Pod)


def resource_quota(namespace: str, name: str, hard: Mapping[str, int | str]) -> ResourceQuota:
    return msgspec.convert(
        {"metadata": {"namespace": namespace, "name": name}, "spec": {"hard": dict(hard)}}, type=ResourceQuota
    )


def usage(s: ClusterState) -> dict[str, dict[str, list[tuple[Any, ...]]]]:
    """Every table's usage lists (slots, MiB, cores, MIG placements, broken), for exact before/after comparisons."""
    return {
        name: {v: [(*t.usage_of(i), t.broken[i]) for i in range(len(t))] for v, t in sorted(node.tables.items())}
        for name, node in sorted(s.nodes.items())
    }
