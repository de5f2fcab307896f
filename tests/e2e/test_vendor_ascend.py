"""Huawei Ascend through the real control plane: kube-scheduler calls ``hami scheduler`` (a subprocess) for a pod
asking for an Ascend 910B3 vNPU template on a fake node that registers its NPUs as HAMi's Ascend device plugin
does, and a pod mixing an NVIDIA GPU and an Ascend NPU; each is bound with HAMi's annotations, byte for byte. There
is no kubelet and no device plugin.

(The file sorts after ``test_chart.py``: the chart's identities this stack applies to the session's control plane
would make that file's server-side dry runs of the same cluster-scoped objects answer 409.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hami.devices.ascend import ascend_keys
from hami.protocol import keys
from hami.protocol.nodelock import decode_node_lock
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler
from tests.e2e.hami_stack import GPU, GPUMEM, SCHEDULER_NAME, HamiScheduler, extender_config, register_annotation

CW = "Ascend910B3"
COUNT, MEM = f"huawei.com/{CW}", f"huawei.com/{CW}-memory"
KEYS = ascend_keys(CW)


def register(node: str, npus: int) -> str:
    """``hami.io/node-register-Ascend910B3`` as the Ascend plugin writes it (Go's key spelling, a NetworkID)."""
    devices = [
        {"ID": f"{node}-npu-{i}", "Index": i, "Count": 4, "Devmem": 65536, "Devcore": 20, "Type": CW,
         "Health": True, "CustomInfo": {"NetworkID": i // 2}}
        for i in range(npus)
    ]  # fmt: skip
    return json.dumps(devices, separators=(",", ":"))


@pytest.fixture
def hami(control_plane: ControlPlane, start_scheduler: Callable[..., Scheduler]) -> Iterator[HamiScheduler]:
    scheduler = HamiScheduler(
        control_plane, ["--node-lock-timeout=60s", "--enable-ascend"]
    )  # off by default, as in HAMi
    scheduler.start()
    config = extender_config(scheduler)
    managed = config["extenders"][0]["managedResources"]
    managed += [{"name": name, "ignoredByScheduler": True} for name in (COUNT, MEM)]
    start_scheduler(config)
    yield scheduler
    scheduler.stop()
    assert scheduler.problems() == [], "hami logged errors"


def test_an_ascend_template_pod_is_bound_with_hamis_annotations(
    hami: HamiScheduler, kube: KubeClient, make_node: Callable[..., dict[str, Any]], namespace: str
) -> None:
    node = f"{namespace}-npu"
    make_node(
        node, extended={COUNT: 8}, labels={"hami-e2e/run": namespace}, annotations={KEYS.register: register(node, 4)}
    )
    # As the webhook leaves it: the memory rounded up to the vir05_1c_16g template in limits and requests.
    kube.create_pod(
        namespace,
        "vnpu",
        limits={COUNT: 1, MEM: 16384},
        requests={COUNT: 1, MEM: 16384},
        scheduler_name=SCHEDULER_NAME,
        spec={"nodeSelector": {"hami-e2e/run": namespace}},
    )
    pod = kube.wait_for_pod_scheduled(namespace, "vnpu")

    assert pod["spec"]["nodeName"] == node
    annotations = pod["metadata"]["annotations"]
    allocation = annotations[KEYS.allocated]
    assert allocation.endswith(f",{CW},16384,0:;")
    assert allocation.startswith(f"{node}-npu-")
    assert annotations[KEYS.to_allocate or ""] == allocation
    uuid = allocation.split(",", 1)[0]
    assert annotations[f"huawei.com/{CW}"] == f'[{{"UUID":"{uuid}","temp":"vir05_1c_16g","memory":16384}}]'
    assert annotations["predicate-time"] == annotations[keys.VGPU_TIME]
    assert annotations[keys.VGPU_NODE] == node
    assert annotations[keys.BIND_PHASE] == "allocating"
    lock = decode_node_lock(kube.get(f"/api/v1/nodes/{node}")["metadata"]["annotations"][keys.NODE_LOCK])
    assert (lock.namespace, lock.name) == (namespace, "vnpu")
    assert hami.ledger() == {uuid: (1, 16384, 0)}


def test_a_pod_mixing_nvidia_and_ascend_gets_both_allocations(
    hami: HamiScheduler, kube: KubeClient, make_node: Callable[..., dict[str, Any]], namespace: str
) -> None:
    npu_only = f"{namespace}-npu-only"
    mixed = f"{namespace}-mixed"
    label = {"hami-e2e/run": namespace}
    make_node(npu_only, extended={COUNT: 8}, labels=label, annotations={KEYS.register: register(npu_only, 2)})
    annotations = {KEYS.register: register(mixed, 2), keys.NVIDIA_REGISTER: register_annotation(mixed, 1, 24000)}
    make_node(mixed, extended={COUNT: 8, GPU: 10}, labels=label, annotations=annotations)
    image = "registry.invalid/hami-e2e:none"
    containers = [
        {"name": "gpu", "image": image, "resources": {"limits": {GPU: "1", GPUMEM: "3000"}}},
        {"name": "npu", "image": image, "resources": {"limits": {COUNT: "1", MEM: "65536"}}},
    ]
    kube.create_pod(
        namespace, "mixed", containers=containers, scheduler_name=SCHEDULER_NAME, spec={"nodeSelector": label}
    )
    pod = kube.wait_for_pod_scheduled(namespace, "mixed")

    assert pod["spec"]["nodeName"] == mixed  # the only node with both vendors
    annotations = pod["metadata"]["annotations"]
    assert annotations[keys.NVIDIA_KEYS.allocated] == f"GPU-{mixed}-0,NVIDIA,3000,0:;;"
    npu = annotations[KEYS.allocated]
    assert npu.startswith(f";{mixed}-npu-")
    assert npu.endswith(f",{CW},65536,0:;")
    uuid = npu[1:].split(",", 1)[0]
    assert annotations[f"huawei.com/{CW}"] == f'[{{"UUID":"{uuid}","memory":65536}}]'  # a whole card: no template
    assert hami.ledger() == {f"GPU-{mixed}-0": (1, 3000, 0), uuid: (1, 65536, 0)}
