"""A Cambricon MLU pod through the real control plane: kube-scheduler calls ``hami scheduler`` for filter and bind on
a fake node that, like a node running Cambricon's device plugin, has only MLU capacity (no registration
annotation). hami derives the cards, binds the pod with HAMi's Cambricon annotations and takes Cambricon's own node
lock, ``cambricon.com/dsmlu.lock``, not ``hami.io/mutex.lock``; deleting the pod releases it.

Waits poll with bounded deadlines and return as soon as their condition holds; nothing asserts on speed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hami.devices.cambricon import CAMBRICON_KEYS, DSMLU_ASSIGNED, DSMLU_LOCK, DSMLU_PROFILE
from hami.protocol import keys
from hami.protocol.nodelock import decode_node_lock
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler, wait_until
from tests.e2e.hami_stack import SCHEDULER_NAME, HamiScheduler, extender_config

VMLU, VMEMORY, VCORE = "cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"


@pytest.fixture
def hami(control_plane: ControlPlane, start_scheduler: Callable[..., Scheduler]) -> Iterator[HamiScheduler]:
    """hami, and kube-scheduler managing the MLU resources as HAMi's chart configures them."""
    scheduler = HamiScheduler(control_plane, ["--node-lock-timeout=60s"])
    scheduler.start()
    config = extender_config(scheduler)
    managed = config["extenders"][0]["managedResources"]
    managed += [{"name": name, "ignoredByScheduler": True} for name in (VMLU, VMEMORY, VCORE)]
    start_scheduler(config)
    yield scheduler
    scheduler.stop()
    assert scheduler.problems() == [], "hami logged errors"


def _node_annotations(kube: KubeClient, node: str) -> dict[str, str]:
    found: dict[str, Any] = kube.get(f"/api/v1/nodes/{node}")
    return dict(found["metadata"].get("annotations") or {})


def test_an_mlu_pod_is_bound_with_cambricons_annotations_and_lock(
    hami: HamiScheduler, kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]]
) -> None:
    node = f"{namespace}-mlu"
    # Two MLU370s: 200 core units, 2 × 96 memory units of 256 MiB (24576 MiB per card).
    make_node(node, extended={VMLU: 200, VCORE: 200, VMEMORY: 192})
    kube.create_pod(
        namespace,
        "mlu-job",
        limits={VMLU: 1, VMEMORY: 8, VCORE: 30},
        scheduler_name=SCHEDULER_NAME,
        spec={"nodeSelector": {"kubernetes.io/hostname": node}},
    )
    pod = kube.wait_for_pod_scheduled(namespace, "mlu-job")

    assert pod["spec"]["nodeName"] == node
    annotations = pod["metadata"]["annotations"]
    value = f"{node}-cambricon-mlu-0,MLU,2048,30:;"
    assert annotations[CAMBRICON_KEYS.to_allocate or ""] == value
    assert annotations[CAMBRICON_KEYS.allocated] == value
    assert (annotations[DSMLU_ASSIGNED], annotations[DSMLU_PROFILE]) == ("false", "0_30_8")
    assert annotations[keys.VGPU_NODE] == node
    # Without Cambricon's device plugin the node stays locked for the pod, under Cambricon's key only.
    locks = _node_annotations(kube, node)
    assert keys.NODE_LOCK not in locks
    lock = decode_node_lock(locks[DSMLU_LOCK], DSMLU_LOCK)
    assert (lock.namespace, lock.name) == (namespace, "mlu-job")
    assert hami.ledger() == {f"{node}-cambricon-mlu-0": (1, 2048, 30)}

    kube.delete_pod(namespace, "mlu-job")
    wait_until(
        lambda: DSMLU_LOCK not in _node_annotations(kube, node) or None,
        description=f"{DSMLU_LOCK} released once its holder is deleted",
    )
