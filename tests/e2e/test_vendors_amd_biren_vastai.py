"""AMD, Biren and Vastai end to end: kube-scheduler calling ``hami scheduler`` (a subprocess, its default device
config) for one pod per vendor, each on a fake node registering that vendor in HAMi's format.

Each pod is bound with HAMi's allocation annotations, byte for byte, under ``hami.io/mutex.lock``; hami stamps the
Biren and Vastai handshakes (``Requesting_…``) and none for AMD, which has no handshake. The Vastai node is in die
mode: a two-die pod gets both dies of one AIC card although a lower free die sits on the other card.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hami.protocol import keys
from hami.protocol.nodelock import decode_node_lock
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler, wait_until
from tests.e2e.hami_stack import SCHEDULER_NAME, HamiScheduler, extender_config

AMD_REGISTER = "hami.io/node-amd-register"
BIREN_REGISTER = "hami.io/node-biren-register"
VA_REGISTER = "hami.io/node-va-register"
MANAGED = ("amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores", "birentech.com/gpu", "vastaitech.com/va")


@pytest.fixture
def hami(control_plane: ControlPlane) -> Iterator[HamiScheduler]:
    scheduler = HamiScheduler(control_plane, log_name="hami-scheduler-newer-vendors")
    scheduler.start()
    yield scheduler
    scheduler.stop()
    assert scheduler.problems() == [], "hami logged errors"


def registration(devices: list[dict[str, Any]]) -> str:
    return json.dumps(devices, separators=(",", ":"))


def node_annotations(kube: KubeClient, node: str) -> dict[str, str]:
    annotations: dict[str, str] = kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}
    return annotations


def test_one_pod_per_vendor_is_bound_with_hamis_annotations(
    hami: HamiScheduler,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
) -> None:
    config = extender_config(hami)
    config["extenders"][0]["managedResources"] += [{"name": name, "ignoredByScheduler": True} for name in MANAGED]
    start_scheduler(config)
    amd, biren, vastai = f"{namespace}-amd", f"{namespace}-biren", f"{namespace}-va"
    mi300x = {"count": 4, "devmem": 196608, "devcore": 304, "type": "AMD Instinct MI300X", "health": True}
    make_node(
        amd,
        extended={"amd.com/gpu": 2},
        labels={"hami-e2e/run": amd},
        annotations={AMD_REGISTER: registration([{"id": "amd-0", **mi300x}, {"id": "amd-1", "index": 1, **mi300x}])},
    )
    br = {"count": 4, "devmem": 32768, "devcore": 100, "type": "Biren BR106", "health": True}
    make_node(biren, labels={"hami-e2e/run": biren}, annotations={BIREN_REGISTER: registration([{"id": "br-0", **br}])})
    dies = [
        {"id": f"va-{i}", "index": i, "count": 1, "devmem": 16384, "devcore": 100, "type": "VA1", "health": True,
         "custominfo": {"AIC": aic, "DeviceStrategy": "die"}}
        for i, aic in enumerate(["A", "A", "B", "B"])
    ]  # fmt: skip
    make_node(vastai, labels={"hami-e2e/run": vastai}, annotations={VA_REGISTER: registration(dies)})

    def create(name: str, node: str, limits: dict[str, int]) -> dict[str, str]:
        kube.create_pod(
            namespace, name, limits=limits, scheduler_name=SCHEDULER_NAME, spec={"nodeSelector": {"hami-e2e/run": node}}
        )
        pod = kube.wait_for_pod_scheduled(namespace, name)
        assert pod["spec"]["nodeName"] == node
        notes: dict[str, str] = pod["metadata"]["annotations"]
        assert notes[keys.VGPU_NODE] == node
        assert decode_node_lock(node_annotations(kube, node)[keys.NODE_LOCK], keys.NODE_LOCK).name == name
        return notes

    notes = create("amd-half", amd, {"amd.com/gpu": 1, "amd.com/gpumem": 8192, "amd.com/gpucores": 50})
    uuid = notes["hami.io/amd-devices-allocated"].split(",")[0]
    assert uuid in ("amd-0", "amd-1")
    expected = f"{uuid},AMD Instinct MI300X,8192,152:;"  # 50% of 304 compute units
    assert (notes["hami.io/amd-devices-to-allocate"], notes["hami.io/amd-devices-allocated"]) == (expected, expected)

    notes = create("biren-one", biren, {"birentech.com/gpu": 1})
    expected = "br-0,Biren,0,0:;"
    assert (notes["hami.io/Biren-devices-to-allocate"], notes["hami.io/Biren-devices-allocated"]) == (
        expected,
        expected,
    )

    # va-0 is taken by a first pod (the lock is released as the device plugin would); the pair then takes the
    # free card B, not va-1 + va-2 across two cards.
    notes = create("va-one", vastai, {"vastaitech.com/va": 1})
    assert notes["hami.io/Vastai-devices-allocated"] == "va-0,Vastai,0,0:;"
    kube.patch(
        f"/api/v1/namespaces/{namespace}/pods/va-one", {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}}
    )
    kube.patch(f"/api/v1/nodes/{vastai}", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
    notes = create("va-pair", vastai, {"vastaitech.com/va": 2})
    assert notes["hami.io/Vastai-devices-allocated"] == "va-2,Vastai,0,0:va-3,Vastai,0,0:;"

    def handshakes() -> dict[str, list[str]]:
        return {
            node: sorted(k for k in node_annotations(kube, node) if k.startswith("hami.io/node-handshake"))
            for node in (amd, biren, vastai)
        }

    wait_until(
        lambda: (
            handshakes() == {amd: [], biren: ["hami.io/node-handshake-biren"], vastai: ["hami.io/node-handshake-va"]}
        ),
        description="the Biren and Vastai handshakes stamped, none for AMD",
    )
    assert node_annotations(kube, biren)["hami.io/node-handshake-biren"].startswith("Requesting_")
