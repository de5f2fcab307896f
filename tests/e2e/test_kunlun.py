"""Kunlunxin end to end: kube-scheduler calling ``hami scheduler`` (the default registry) binds a whole-XPU pod and a
vXPU pod on fake nodes, with HAMi's annotations — whole XPUs from ``status.capacity`` with no handshake and no node
lock; vXPU from ``hami.io/node-register-xpu`` under ``hami.io/mutex.lock`` with its handshake stamped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hami.protocol import keys
from hami.protocol.inventory import DeviceInfo, encode_inventory_json
from hami.protocol.nodelock import decode_node_lock
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler, wait_until
from tests.e2e.hami_stack import SCHEDULER_NAME, HamiScheduler, extender_config

XPU_COUNT, VXPU, VXPU_MEM = "kunlunxin.com/xpu", "kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory"


@pytest.fixture
def hami(control_plane: ControlPlane) -> Iterator[HamiScheduler]:
    scheduler = HamiScheduler(control_plane, ["--node-lock-timeout=60s"], log_name="hami-scheduler-kunlun")
    scheduler.start()
    yield scheduler
    scheduler.stop()
    assert scheduler.problems() == [], "hami logged errors"


def _config(hami: HamiScheduler) -> dict[str, Any]:
    config = extender_config(hami)
    config["extenders"][0]["managedResources"] += [
        {"name": name, "ignoredByScheduler": True} for name in (XPU_COUNT, VXPU, VXPU_MEM)
    ]
    return config


def _annotations(kube: KubeClient, path: str) -> dict[str, str]:
    found: dict[str, str] = kube.get(path)["metadata"].get("annotations") or {}
    return found


def test_whole_xpu_and_vxpu_pods_are_bound_with_hamis_annotations(
    hami: HamiScheduler,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
) -> None:
    start_scheduler(_config(hami))
    whole, shared = f"{namespace}-xpu", f"{namespace}-vxpu"
    labels = {"hami-e2e/run": namespace}
    make_node(whole, extended={XPU_COUNT: 8}, labels=labels)
    register = encode_inventory_json(
        DeviceInfo(f"XPU-{shared}-{i}", i, 4, 98304, 100, "P800-OAM", i // 4, health=True) for i in range(8)
    )
    make_node(shared, extended={VXPU: 32}, labels=labels, annotations={"hami.io/node-register-xpu": register})
    select = {"nodeSelector": labels}

    kube.create_pod(namespace, "train", limits={XPU_COUNT: 2}, scheduler_name=SCHEDULER_NAME, spec=select)
    train = kube.wait_for_pod_scheduled(namespace, "train")
    assert train["spec"]["nodeName"] == whole
    notes = train["metadata"]["annotations"]
    # An idle board: a 2-card request takes two cards of one wing (HAMi's tightest wing, left first).
    assert notes["hami.io/kunlun-allocated"] == f"{whole}-kunlun-0,kunlun,98304,100:{whole}-kunlun-1,kunlun,98304,100:;"
    assert notes["BAIDU_COM_DEVICE_IDX"] == "0,1"
    assert not any(key.endswith("-to-allocate") for key in notes)
    node_notes = _annotations(kube, f"/api/v1/nodes/{whole}")
    assert keys.NODE_LOCK not in node_notes  # whole XPUs take no lock
    assert not any("handshake" in key for key in node_notes)  # nor a handshake: the node registers no vXPU

    kube.create_pod(namespace, "infer", limits={VXPU: 2, VXPU_MEM: 20000}, scheduler_name=SCHEDULER_NAME, spec=select)
    infer = kube.wait_for_pod_scheduled(namespace, "infer")
    assert infer["spec"]["nodeName"] == shared
    notes = infer["metadata"]["annotations"]
    value = f"XPU-{shared}-0,XPU,24576,25:XPU-{shared}-1,XPU,24576,25:;"
    assert (notes["hami.io/xpu-devices-to-allocate"], notes["hami.io/xpu-devices-allocated"]) == (value, value)
    node_notes = _annotations(kube, f"/api/v1/nodes/{shared}")
    assert decode_node_lock(node_notes[keys.NODE_LOCK], keys.NODE_LOCK).name == "infer"
    wait_until(
        lambda: (
            _annotations(kube, f"/api/v1/nodes/{shared}")
            .get("hami.io/node-handshake-xpu", "")
            .startswith("Requesting_")
        ),
        description="the vXPU handshake stamped",
    )
