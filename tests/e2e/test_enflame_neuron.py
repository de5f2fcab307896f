"""Enflame DRS, Enflame whole GCUs and AWS Neuron end to end: kube-scheduler calling ``hami scheduler``, one pod
per vendor bound on a node that registers nothing but HAMi's inputs for that vendor (the DRS capacity annotation,
or ``status.capacity``), with the allocation and extra annotations HAMi's device plugins read, and no node lock
(none of the three vendors has one)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hami.protocol import keys
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler
from tests.e2e.hami_stack import SCHEDULER_NAME, HamiScheduler, extender_config

VENDOR_RESOURCES = (
    "enflame.com/gcu",
    "enflame.com/drs-gcu",
    "enflame.com/gcu-memory",
    "enflame.com/gcu-core",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
)
DRS_CAPACITY = json.dumps(
    {
        "devices": [{"index": "0", "minor": "3", "capacity": 6}],
        "profiles": {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"},
    }
)


@pytest.fixture
def hami(control_plane: ControlPlane) -> Iterator[HamiScheduler]:
    scheduler = HamiScheduler(control_plane, log_name="hami-scheduler-enflame-neuron")
    scheduler.start()
    yield scheduler
    scheduler.stop()
    assert scheduler.problems() == [], "hami logged errors"


@pytest.fixture
def scheduler(hami: HamiScheduler, start_scheduler: Callable[..., Scheduler]) -> Scheduler:
    config = extender_config(hami)
    config["extenders"][0]["managedResources"] += [{"name": n, "ignoredByScheduler": True} for n in VENDOR_RESOURCES]
    return start_scheduler(config)


def _bound(kube: KubeClient, namespace: str, name: str, limits: dict[str, int], node_label: str) -> dict[str, Any]:
    kube.create_pod(
        namespace,
        name,
        limits=limits,
        scheduler_name=SCHEDULER_NAME,
        spec={"nodeSelector": {"hami-e2e/node": node_label}},
    )
    pod: dict[str, Any] = kube.wait_for_pod_scheduled(namespace, name)
    return pod


def test_one_pod_per_vendor_is_bound_with_hamis_annotations(
    scheduler: Scheduler, kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]]
) -> None:
    drs, gcu, inf = f"{namespace}-drs", f"{namespace}-gcu", f"{namespace}-inf"
    make_node(drs, annotations={"enflame.com/gcu-drs-capacity": DRS_CAPACITY}, labels={"hami-e2e/node": drs})
    make_node(gcu, extended={"enflame.com/gcu": 2}, labels={"hami-e2e/node": gcu})
    make_node(
        inf,
        extended={"aws.amazon.com/neuron": 4, "aws.amazon.com/neuroncore": 8},
        labels={"hami-e2e/node": inf, "node.kubernetes.io/instance-type": "inf2.24xlarge"},
    )

    notes = _bound(kube, namespace, "drs", {"enflame.com/gcu-memory": 16}, drs)["metadata"]["annotations"]
    assert notes[keys.VGPU_NODE] == drs
    assert notes["hami.io/enflame-vgpu-devices-allocated"] == f"{drs}-enflame-drs-0,Enflame,20480,50:;"
    assert notes["assigned-containers"] == (
        '{"main":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}}'
    )
    assert (notes["enflame.com/gcu-assigned"], notes["enflame.com/gcu-request-size"]) == ("false", "3")
    assert (notes["enflame.com/gcu-assigned-index"], notes["enflame.com/gcu-assigned-minor"]) == ("0", "3")
    assert int(notes["enflame.com/gcu-assigned-time"]) // 10**9 == int(notes[keys.VGPU_TIME])

    notes = _bound(kube, namespace, "whole", {"enflame.com/gcu": 2}, gcu)["metadata"]["annotations"]
    value = notes["hami.io/enflame-gcu-devices-allocated"]
    assert sorted(value.rstrip(";").rstrip(":").split(":")) == [f"{gcu}-GCU-0,GCU,100,100", f"{gcu}-GCU-1,GCU,100,100"]
    assert notes["hami.io/enflame-gcu-devices-to-allocate"] == value

    notes = _bound(kube, namespace, "neuron", {"aws.amazon.com/neuron": 2}, inf)["metadata"]["annotations"]
    assert notes["hami.io/aws-neuron-devices-allocated"] == (
        f"{inf}-AWSNeuron-0,AWSNeuron,0,3:{inf}-AWSNeuron-1,AWSNeuron,0,3:;"
    )
    assert (notes["AWS_NEURON_IDS"], notes["NEURON_ALLOCATED"]) == ("0,1", "false")
    assert notes["aws.amazon.com/predicate-node"] == inf
    assert int(notes["NEURON_ALLOC_TIME"]) // 10**9 == int(notes[keys.VGPU_TIME])

    for node in (drs, gcu, inf):
        node_notes = kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}
        assert keys.NODE_LOCK not in node_notes
        assert not any(k.startswith("hami.io/node-handshake") for k in node_notes)
