"""Gangs on the real control plane (docs/gangs.md): kube-scheduler's gang scheduling with the ``GenericWorkload``
gate on (PodGroup ``scheduling.k8s.io/v1beta1``, served with ``--runtime-config``), and label-based groups
(``scheduling.x-k8s.io/pod-group``) whose members the extender places one by one as a coscheduling scheduler
does before its Permit wait. A gang that cannot be placed whole releases its shares, so a single pod behind it
schedules; two competing gangs complete one after the other, never partly bound.

The control plane of this module runs with the gate on; hami runs under the chart's identity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hami.protocol import keys
from tests.e2e import cluster
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

GANG_API = "/apis/scheduling.k8s.io/v1beta1"
WHOLE = gpu_limits(gpu=1, mem=24000, cores=100)


@pytest.fixture(scope="module")
def gang_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane with kube-scheduler's gang scheduling on (GenericWorkload, PodGroups v1beta1 served)."""
    plane = cluster.start_control_plane(
        tmp_path_factory.mktemp("gang-plane"),
        feature_gates={"GenericWorkload": True},
        runtime_config=["scheduling.k8s.io/v1beta1=true"],
    )
    try:
        yield plane
    finally:
        plane.stop()


class Gangs:
    """One test's namespace on the gang plane: a node of two cards, hami, kube-scheduler and the lock releaser."""

    def __init__(self, plane: ControlPlane, kube: KubeClient, namespace: str, cards: int = 2) -> None:
        self.plane, self.kube, self.namespace = plane, kube, namespace
        self.node = f"{namespace}-n1"
        kube.create_node(self.node, extended={GPU: 10 * cards}, labels={"hami-e2e/run": namespace},
                         annotations={keys.NVIDIA_REGISTER: register_annotation(self.node, cards, 24000)})  # fmt: skip
        self.hami = HamiScheduler(plane, ["--node-lock-timeout=60s"])
        self.hami.start()
        self.scheduler: Scheduler = plane.start_scheduler(extender_config(self.hami))
        self.plugin = FakeDevicePlugin(plane, f"hami-e2e/run={namespace}")
        self.plugin.start()

    def stop(self) -> None:
        self.plugin.stop()
        self.scheduler.stop()
        self.hami.stop()
        self.kube.delete_node(self.node)

    def pod_group(self, name: str, min_count: int) -> None:
        body = {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        }
        self.kube.post(f"{GANG_API}/namespaces/{self.namespace}/podgroups", body)

    def pod(self, name: str, *, group: str = "", label: str = "", scheduler: str = SCHEDULER_NAME) -> dict[str, Any]:
        spec: dict[str, Any] = {"nodeSelector": {"hami-e2e/run": self.namespace}}
        if group:
            spec["schedulingGroup"] = {"podGroupName": group}
        labels = {keys.POD_GROUP_LABEL: label} if label else None
        return self.kube.create_pod(self.namespace, name, limits=WHOLE, scheduler_name=scheduler, labels=labels,
                                    spec=spec)  # fmt: skip

    def pods(self) -> dict[str, dict[str, Any]]:
        return {p["metadata"]["name"]: p for p in self.kube.list_pods(self.namespace)}

    def allocated(self, name: str) -> bool:
        return keys.VGPU_NODE in (self.pods()[name]["metadata"].get("annotations") or {})

    def gang_waiting(self, pod: str) -> bool:
        return any(reason == "GangWaiting" for _, _, reason, _ in pod_events(self.kube, self.namespace, pod))


@pytest.fixture
def gangs(gang_plane: ControlPlane, tmp_path: Path) -> Iterator[Callable[..., Gangs]]:
    made: list[Gangs] = []
    with gang_plane.client() as kube:

        def start(cards: int = 2) -> Gangs:
            g = Gangs(gang_plane, kube, kube.create_namespace(), cards)
            made.append(g)
            return g

        yield start
        for g in made:
            g.stop()
        for g in made:
            assert g.plugin.error is None, f"the fake device plugin failed: {g.plugin.error!r}"
            assert g.hami.problems() == [], "hami logged errors"
            assert set(g.hami.exit_codes) == {0}


def bound_per_gang(g: Gangs, groups: dict[str, list[str]]) -> dict[str, int]:
    pods = g.pods()
    return {name: sum(1 for m in members if m in pods and is_bound(pods[m])) for name, members in groups.items()}


def test_a_gang_that_cannot_fit_holds_no_share_and_a_single_pod_schedules(gangs: Callable[..., Gangs]) -> None:
    g = gangs()
    g.pod_group("train", min_count=3)
    for i in range(3):
        g.pod(f"train-{i}", group="train")

    wait_until(lambda: any(g.gang_waiting(f"train-{i}") for i in range(3)), interval=0.5,
               description="hami to release the gang's unbound allocations")  # fmt: skip
    g.pod("single")
    single = g.kube.wait_for_pod_scheduled(g.namespace, "single")

    assert single["spec"]["nodeName"] == g.node
    pods = g.pods()
    assert not any(is_bound(pods[f"train-{i}"]) for i in range(3)), "a gang member was bound: the gang is partly bound"
    gauge = g.hami.metrics().get("hami_gang_releases_total", [])
    assert sum(v for labels, v in gauge if labels.get("trigger") == "member-unschedulable") >= 1


def test_two_competing_gangs_complete_one_after_the_other(gangs: Callable[..., Gangs]) -> None:
    """Three cards, two gangs of two: the gang placed second gets one card and fits no further, so it releases it
    (it would otherwise hold it for as long as it waits), and completes once the first gang leaves."""
    g = gangs(cards=3)
    groups = {"a": ["a-0", "a-1"], "b": ["b-0", "b-1"]}
    for name in groups:
        g.pod_group(name, min_count=2)
    for i in range(2):
        for name in groups:
            g.pod(f"{name}-{i}", group=name)

    def one_gang_bound() -> str | None:
        done = [name for name, c in bound_per_gang(g, groups).items() if c == 2]
        return done[0] if done else None

    first = wait_until(one_gang_bound, interval=0.25, description="one gang bound whole")
    second = next(name for name in groups if name != first)
    wait_until(lambda: any(g.gang_waiting(pod) for pod in groups[second]), interval=0.25,
               description=f"gang {second} to release the card it got")  # fmt: skip
    assert bound_per_gang(g, groups)[second] == 0
    for pod in groups[first]:
        g.kube.delete_pod(g.namespace, pod)

    wait_until(lambda: bound_per_gang(g, {second: groups[second]})[second] == 2, interval=0.25,
               description=f"gang {second} bound whole after gang {first} left")  # fmt: skip


def test_a_label_gang_releases_its_members_when_one_fits_nowhere(gangs: Callable[..., Gangs]) -> None:
    """Label-based group: the extender places each member as a coscheduling scheduler's Filter would, and the
    members wait unbound (Permit); the third fits nowhere, so the first two release their cards."""
    g = gangs()
    members = [g.pod(f"job-{i}", label="job", scheduler="held-by-permit") for i in range(3)]  # no scheduler runs

    def place(pod: dict[str, Any]) -> Any:
        return httpx.post(f"{g.hami.url}/filter", json={"Pod": pod, "NodeNames": [g.node]}, timeout=30).json()

    placed = [place(pod).get("NodeNames") for pod in members[:2]]
    wait_until(lambda: g.allocated("job-0") and g.allocated("job-1"), interval=0.1,
               description="the first two members' allocations written")  # fmt: skip
    third = place(members[2])

    assert placed == [[g.node], [g.node]]
    assert not third.get("NodeNames")
    wait_until(lambda: not g.allocated("job-0") and not g.allocated("job-1"), interval=0.25,
               description="the members' allocations removed from the pods")  # fmt: skip
    wait_until(lambda: g.gang_waiting("job-0") and g.gang_waiting("job-2"), interval=0.25,
               description="GangWaiting events on a released member and on the one that fits nowhere")  # fmt: skip
    g.pod("single")
    assert g.kube.wait_for_pod_scheduled(g.namespace, "single")["spec"]["nodeName"] == g.node
