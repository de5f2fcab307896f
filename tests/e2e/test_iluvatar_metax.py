"""Iluvatar and MetaX pods through the real control plane: kube-scheduler calls ``hami scheduler`` for filter and
bind on fake nodes registered as each vendor's device plugin registers them — an Iluvatar MR-V100 node by its
legacy-string annotation, a MetaX node by its ``metax-tech.com/gpu`` capacity only, a MetaX sGPU node by MetaX's
device list. Each pod is bound with HAMi's annotations for its vendor; the MetaX whole-card bind takes no node lock
(MetaX's plugin releases none), the others take ``hami.io/mutex.lock``.

Waits poll with bounded deadlines and return as soon as their condition holds; nothing asserts on speed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hami.protocol import keys
from hami.protocol.nodelock import decode_node_lock
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler
from tests.e2e.hami_stack import SCHEDULER_NAME, HamiScheduler, extender_config

CHIP = "MR-V100"
ILU_COUNT, ILU_MEM, ILU_CORE = f"iluvatar.ai/{CHIP}-vgpu", f"iluvatar.ai/{CHIP}.vMem", f"iluvatar.ai/{CHIP}.vCore"
METAX_GPU = "metax-tech.com/gpu"
SGPU, VCORE, VMEMORY = "metax-tech.com/sgpu", "metax-tech.com/vcore", "metax-tech.com/vmemory"
ILUVATAR_SWITCH: list[str] = []
"""hami's flags that switch Iluvatar on (HAMi's ``--enable-iluvatar``) where the build gates it."""


@pytest.fixture
def hami(control_plane: ControlPlane, start_scheduler: Callable[..., Scheduler]) -> Iterator[HamiScheduler]:
    """hami, and kube-scheduler managing the Iluvatar and MetaX resources as HAMi's chart configures them."""
    scheduler = HamiScheduler(control_plane, ["--node-lock-timeout=60s", *ILUVATAR_SWITCH])
    scheduler.start()
    config = extender_config(scheduler)
    managed = config["extenders"][0]["managedResources"]
    names = (ILU_COUNT, ILU_MEM, ILU_CORE, METAX_GPU, SGPU, VCORE, VMEMORY)
    managed += [{"name": name, "ignoredByScheduler": True} for name in names]
    start_scheduler(config)
    yield scheduler
    scheduler.stop()
    assert scheduler.problems() == [], "hami logged errors"


def _annotations(kube: KubeClient, node: str) -> dict[str, str]:
    found: dict[str, Any] = kube.get(f"/api/v1/nodes/{node}")
    return dict(found["metadata"].get("annotations") or {})


def _bind(kube: KubeClient, namespace: str, name: str, node: str, limits: dict[str, Any], **kw: Any) -> dict[str, Any]:
    spec = {"nodeSelector": {"kubernetes.io/hostname": node}}
    kube.create_pod(namespace, name, limits=limits, scheduler_name=SCHEDULER_NAME, spec=spec, **kw)
    pod = kube.wait_for_pod_scheduled(namespace, name)
    assert pod["spec"]["nodeName"] == node
    annotations: dict[str, Any] = pod["metadata"]["annotations"]
    assert annotations[keys.VGPU_NODE] == node
    return annotations


def test_iluvatar_and_metax_pods_are_bound_with_hamis_annotations(
    hami: HamiScheduler, kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]]
) -> None:
    ilu, cards, shared = f"{namespace}-ilu", f"{namespace}-mx", f"{namespace}-sgpu"
    register = "".join(f"{ilu}-{i},4,32768,100,{CHIP},0,true,{i},hami-core:" for i in range(2))
    make_node(ilu, extended={ILU_COUNT: 8}, annotations={f"hami.io/node-{CHIP}-register": register})
    make_node(cards, extended={METAX_GPU: 2})
    device = {"uuid": f"{shared}-0", "totalDevCount": 4, "totalCompute": 100, "totalVRam": 65536, "healthy": True}
    make_node(shared, extended={SGPU: 4}, annotations={"metax-tech.com/node-gpu-devices": json.dumps([device])})

    a = _bind(kube, namespace, "ilu-job", ilu, {ILU_COUNT: 1, ILU_MEM: 16, ILU_CORE: 50})
    value = f"{ilu}-0,{CHIP},4096,50:;"
    assert (a[f"hami.io/{CHIP}-devices-to-allocate"], a[f"hami.io/{CHIP}-devices-allocated"]) == (value, value)
    lock = decode_node_lock(_annotations(kube, ilu)[keys.NODE_LOCK], keys.NODE_LOCK)
    assert (lock.namespace, lock.name) == (namespace, "ilu-job")

    b = _bind(kube, namespace, "metax-cards", cards, {METAX_GPU: 2})
    value = f"{cards}-metax-0,Metax-GPU,65536,100:{cards}-metax-1,Metax-GPU,65536,100:;"
    assert (b["hami.io/metax-gpu-devices-to-allocate"], b["hami.io/metax-gpu-devices-allocated"]) == (value, value)
    assert keys.NODE_LOCK not in _annotations(kube, cards)  # MetaX cards: no node lock

    c = _bind(
        kube,
        namespace,
        "metax-slice",
        shared,
        {SGPU: 1, VCORE: 30, VMEMORY: 8},
        annotations={"metax-tech.com/sgpu-qos-policy": "fixed-share"},
    )
    assert c["hami.io/metax-sgpu-devices-allocated"] == f"{shared}-0,Metax-SGPU,8192,30:;"
    assert c["metax-tech.com/gpu-devices-allocated"] == f'[[{{"uuid":"{shared}-0","compute":30,"vRam":8192}}]]'
    assert int(c["metax-tech.com/predicate-time"]) // 10**9 == int(c[keys.VGPU_TIME])
    lock = decode_node_lock(_annotations(kube, shared)[keys.NODE_LOCK], keys.NODE_LOCK)
    assert (lock.namespace, lock.name) == (namespace, "metax-slice")

    assert hami.ledger() == {
        f"{ilu}-0": (1, 4096, 50),
        f"{cards}-metax-0": (1, 65536, 100),
        f"{cards}-metax-1": (1, 65536, 100),
        f"{shared}-0": (1, 8192, 30),
    }
