"""A vendor shaped like the new families, end to end: kube-scheduler calling ``hami scheduler`` whose registry
also holds the made-up ``TOY`` vendor (``tests/toyvendor.py``, started through ``tests/e2e/toy_hami.py``).

The node registers nothing: its TOY devices come from ``status.capacity``. A TOY pod is bound with the vendor's
allocation and extra annotations (no to-allocate annotation, no handshake written), under the vendor's own node
lock ``toy.example/node.lock`` — not ``hami.io/mutex.lock``. A second pod waits for that lock and is bound once
the vendor's device plugin (played by the test) releases it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hami.protocol import keys
from hami.protocol.nodelock import decode_node_lock
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler, wait_until
from tests.e2e.hami_stack import SCHEDULER_NAME, HamiScheduler, extender_config, is_bound
from tests.e2e.toy_hami import TOY_WRAPPER
from tests.toyvendor import ALLOCATED, ASSIGNED, COUNT, LOCK, MEMORY


@pytest.fixture
def toy_hami(control_plane: ControlPlane) -> Iterator[HamiScheduler]:
    hami = HamiScheduler(control_plane, wrapper=TOY_WRAPPER, log_name="hami-scheduler-toy")
    hami.start()
    yield hami
    hami.stop()
    assert hami.problems() == [], "hami logged errors"
    assert set(hami.exit_codes) == {0}, "hami did not shut down cleanly on SIGTERM"


def toy_extender_config(hami: HamiScheduler) -> dict[str, Any]:
    config = extender_config(hami)
    config["extenders"][0]["managedResources"] += [
        {"name": name, "ignoredByScheduler": True} for name in (COUNT, MEMORY)
    ]
    return config


def node_annotations(kube: KubeClient, node: str) -> dict[str, str]:
    annotations: dict[str, str] = kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}
    return annotations


def test_a_toy_pod_is_bound_under_the_vendors_own_lock(
    toy_hami: HamiScheduler,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
) -> None:
    start_scheduler(toy_extender_config(toy_hami))
    node = f"{namespace}-toy"
    make_node(node, extended={COUNT: 2}, labels={"hami-e2e/run": namespace})

    def create(name: str) -> None:
        kube.create_pod(
            namespace,
            name,
            limits={COUNT: 1, MEMORY: 1000},
            scheduler_name=SCHEDULER_NAME,
            spec={"nodeSelector": {"hami-e2e/run": namespace}},
        )

    create("p1")
    first = kube.wait_for_pod_scheduled(namespace, "p1")
    notes = first["metadata"]["annotations"]
    device = notes[ALLOCATED].split(",")[0]
    assert notes[ALLOCATED] == f"{device},TOY,1000,0:;"
    assert device in (f"{node}-toy-0", f"{node}-toy-1")
    assert notes[keys.VGPU_NODE] == node
    where, _, rest = notes[ASSIGNED].partition("@")
    now_ns, _, containers = rest.partition(":")
    assert (where, containers) == (node, f"main={device}")
    assert int(now_ns) // 10**9 == int(notes[keys.VGPU_TIME])  # the same instant as hami.io/vgpu-time
    assert not any(key.endswith("-to-allocate") for key in notes)
    locks = node_annotations(kube, node)
    assert decode_node_lock(locks[LOCK], LOCK).name == "p1"
    assert keys.NODE_LOCK not in locks
    assert not any("handshake" in key for key in locks)  # TOY has none, and the node has no other vendor

    create("p2")
    # p2 is filtered onto the node and its bind waits for (or fails on) p1's TOY lock: it is not bound while the
    # lock names p1 — binding takes the lock first.
    wait_until(
        lambda: keys.VGPU_NODE in (kube.get_pod(namespace, "p2")["metadata"].get("annotations") or {}),
        description="p2 placed by hami",
    )
    assert not is_bound(kube.get_pod(namespace, "p2"))
    assert decode_node_lock(node_annotations(kube, node)[LOCK], LOCK).name == "p1"

    # The TOY device plugin has allocated for p1: it marks it and releases its lock.
    path = f"/api/v1/namespaces/{namespace}/pods/p1"
    kube.patch(path, {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}})
    kube.patch(f"/api/v1/nodes/{node}", {"metadata": {"annotations": {LOCK: None}}})

    second = kube.wait_for_pod_scheduled(namespace, "p2")
    assert second["spec"]["nodeName"] == node
    assert decode_node_lock(node_annotations(kube, node)[LOCK], LOCK).name == "p2"
    devices = {notes[ALLOCATED], second["metadata"]["annotations"][ALLOCATED]}
    assert len(devices) == 2  # spread over both TOY devices: the ledger charged p1's
