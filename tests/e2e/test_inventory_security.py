"""Hostile device registrations against the real control plane (issue 11, item 3).

The issue's attack: a node registers two devices with the same id, 10,000 MiB each. HAMi charges every pod to the
first entry, so the second always looks empty: five pods of 6,000 MiB pinned to that id were placed on one
10,000 MiB card. hami refuses the whole NVIDIA registration of that node (quarantine): a Warning event on the node,
``hami_quarantined_nodes{vendor="NVIDIA"}``, a log line, and no pod is placed on it. Another node keeps scheduling.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hami.protocol import keys
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler, wait_until
from tests.e2e.hami_stack import (
    GPU,
    SCHEDULER_NAME,
    FakeDevicePlugin,
    HamiScheduler,
    extender_config,
    gpu_limits,
    is_bound,
    pod_events,
    register_annotation,
)

DUPLICATE = "GPU-dup"


def duplicate_id_registration() -> str:
    """Two devices with one id, 10,000 MiB each, as a hostile or broken device plugin might write them."""
    card = {"id": DUPLICATE, "count": 10, "devmem": 10000, "devcore": 100, "type": "NVIDIA-A100", "health": True}
    return json.dumps([card, {**card, "index": 1}])


@pytest.fixture
def hami(
    control_plane: ControlPlane, start_scheduler: Callable[..., Scheduler], namespace: str
) -> Iterator[HamiScheduler]:
    """hami and kube-scheduler calling it, with a fake device plugin releasing node locks after binds."""
    scheduler = HamiScheduler(control_plane, ["--node-lock-timeout=60s"])
    scheduler.start()
    start_scheduler(extender_config(scheduler))
    plugin = FakeDevicePlugin(control_plane, f"hami-e2e/run={namespace}")
    plugin.start()
    yield scheduler
    plugin.stop()
    scheduler.stop()
    assert plugin.error is None, f"the fake device plugin failed: {plugin.error!r}"
    assert scheduler.problems() == [], "hami logged errors"
    assert set(scheduler.exit_codes) == {0}, "hami did not shut down cleanly on SIGTERM"


def node_events(kube: KubeClient, node: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind=Node,involvedObject.name={node}"
    items: list[dict[str, Any]] = kube.get("/api/v1/namespaces/default/events", fieldSelector=selector)["items"]
    return items


def test_duplicate_device_ids_quarantine_the_node_and_pinned_pods_are_not_placed(
    hami: HamiScheduler, kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]]
) -> None:
    label = {"hami-e2e/run": namespace}
    hostile = f"{namespace}-hostile"
    good = f"{namespace}-good"
    make_node(
        hostile, extended={GPU: 20}, labels=label, annotations={keys.NVIDIA_REGISTER: duplicate_id_registration()}
    )
    make_node(
        good, extended={GPU: 10}, labels=label, annotations={keys.NVIDIA_REGISTER: register_annotation(good, 1, 24000)}
    )

    pinned = [f"pinned-{i}" for i in range(5)]
    for name in pinned:
        kube.create_pod(
            namespace,
            name,
            limits=gpu_limits(gpu=1, mem=6000, cores=10),
            scheduler_name=SCHEDULER_NAME,
            annotations={keys.NVIDIA_USE_GPUUUID: DUPLICATE},
            spec={"nodeSelector": label},
        )
    kube.create_pod(
        namespace,
        "honest",
        limits=gpu_limits(gpu=1, mem=6000, cores=10),
        scheduler_name=SCHEDULER_NAME,
        spec={"nodeSelector": label},
    )

    # Another node keeps scheduling.
    assert kube.wait_for_pod_scheduled(namespace, "honest")["spec"]["nodeName"] == good

    # The hostile node is refused as a whole, and says why on the node, in the metrics and in the log.
    events = wait_until(lambda: node_events(kube, hostile), description=f"an event on node {hostile}")
    # One Event, written once (a repeat would fold into it as count 2; a second hami process would add an Event).
    assert [(e["type"], e["reason"], e["source"]["component"], e["count"]) for e in events] == [
        ("Warning", "RegistrationRefused", SCHEDULER_NAME, 1)
    ]
    message = events[0]["message"]
    assert message.startswith(f"NVIDIA devices of node {hostile} are not scheduled: registration refused: ")
    assert "hami.io/node-nvidia-register devices[1].id: device id repeated (index 1; devices[0] has the same id)" in (
        message
    )
    assert f"(got '{DUPLICATE}')" in message
    assert hami.metrics()["hami_quarantined_nodes"] == [({"vendor": "NVIDIA"}, 1.0)]
    assert f"node {hostile}: NVIDIA registration refused" in hami.log()

    # Every pinned pod is refused with the quarantine as the reason on that node; none is ever placed.
    for name in pinned:
        wait_until(
            lambda name=name: any(
                e[2] == "FilteringFailed" and f"NodeQuarantined({hostile})" in e[3]
                for e in pod_events(kube, namespace, name)
            ),
            interval=0.25,
            description=f"{name} refused because {hostile} is quarantined",
        )
    pods = {p["metadata"]["name"]: p for p in kube.list_pods(namespace)}
    assert [name for name in pinned if is_bound(pods[name])] == []
    assert [name for name in pinned if keys.VGPU_NODE in (pods[name]["metadata"].get("annotations") or {})] == []
    assert not any(DUPLICATE in str(labels) for labels, _ in hami.metrics().get("hami_gpu_memory_limit_bytes", []))
