"""hami's own preemption (``--preemption=auto`` on Kubernetes 1.36, which asks no extender for victims: hami evicts)
against the real control plane: etcd, kube-apiserver (its Priority admission, Eviction API and PodDisruptionBudgets)
and kube-scheduler calling ``hami scheduler`` (a subprocess, with the chart's ServiceAccount and rights).

One shared stack for the whole module (a namespace, PriorityClasses, one fake GPU node per scenario, hami and
kube-scheduler), so the file stays short in wall time. The low-priority pods are created already bound to their node
with hami's allocation annotations (as if hami had placed them earlier) and a 30 s grace period, so an eviction
leaves them terminating. There is no kubelet: the test itself finishes a victim's termination by deleting the
evicted pod (grace period 0), as a stand-in for the kubelet once the containers stopped. There is no
kube-controller-manager either, so a PodDisruptionBudget's status stays empty: it allows no disruption.

Waits poll with bounded deadlines and return as soon as their condition holds; nothing asserts on speed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from hami.protocol import keys
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler, wait_until
from tests.e2e.hami_stack import (
    GPU,
    SCHEDULER_NAME,
    HamiScheduler,
    extender_config,
    gpu_limits,
    is_bound,
    pod_events,
    register_annotation,
    usage_from_annotations,
)
from tests.e2e.invariants import over_capacity

NVIDIA = keys.NVIDIA_KEYS
CARD_MIB = 24000
NODES = ("one", "big", "never", "pdb-a", "pdb-b", "twice", "crash", "own-a", "own-b", "forge")
_PRIORITY_CLASS = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
PRIORITIES = {"low": 10, "mid": 50, "urgent": 1000, "second": 500}


@dataclass
class Preemption:
    """The module's stack: its namespace, nodes (short name → node name), hami and kube-scheduler."""

    kube: KubeClient
    namespace: str
    hami: HamiScheduler
    nodes: dict[str, str]
    scheduler: Scheduler | None = None
    classes: list[str] = field(default_factory=list)

    def cls(self, name: str) -> str:
        return f"{self.namespace}-{name}"

    def running(self, name: str, node: str, mem: int, priority: str, labels: dict[str, str] | None = None) -> None:
        """A low-priority pod bound to ``node`` holding ``mem`` MiB of its only card, as hami placed it."""
        full = self.nodes[node]
        value = f"GPU-{full}-0,NVIDIA,{mem},0:;"
        annotations = {keys.VGPU_NODE: full, NVIDIA.allocated: value, NVIDIA.to_allocate or "": value}
        self.kube.create_pod(
            self.namespace,
            name,
            limits=gpu_limits(gpu=1, mem=mem, cores=0),
            scheduler_name=SCHEDULER_NAME,  # hami believes the allocations of its own scheduler's pods only
            annotations=annotations,
            labels=labels,
            node_name=full,
            spec={"priorityClassName": self.cls(priority), "terminationGracePeriodSeconds": 30},
        )

    def pending(self, name: str, nodes: tuple[str, ...], mem: int, priority: str) -> None:
        """A GPU pod for hami, allowed on ``nodes`` only."""
        self.kube.create_pod(
            self.namespace,
            name,
            limits=gpu_limits(gpu=1, mem=mem, cores=0),
            scheduler_name=SCHEDULER_NAME,
            spec={
                "priorityClassName": self.cls(priority),
                "affinity": _on_nodes([self.nodes[n] for n in nodes]),
            },
        )

    def get(self, name: str) -> dict[str, Any]:
        return self.kube.get_pod(self.namespace, name)

    def delete_on_its_own(self, name: str) -> None:
        """The pod's owner deletes it with a day-long grace period (without a kubelet it terminates for good)."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 86400}
        self.kube.delete(f"/api/v1/namespaces/{self.namespace}/pods/{name}", body)
        wait_until(lambda: self.get(name)["metadata"].get("deletionTimestamp"), description=f"{name} terminating")

    def terminating(self) -> list[str]:
        return sorted(
            p["metadata"]["name"] for p in self.kube.list_pods(self.namespace) if p["metadata"].get("deletionTimestamp")
        )

    def wait_terminating(self, *names: str) -> None:
        wait_until(lambda: set(names) <= set(self.terminating()), description=f"{names} evicted")

    def finish(self, *names: str) -> None:
        """The kubelet's part once an evicted pod's containers stopped: the pod goes."""
        for name in names:
            self.kube.delete_pod(self.namespace, name)

    def bound_to(self, name: str, node: str) -> None:
        pod = self.kube.wait_for_pod_scheduled(self.namespace, name)
        assert pod["spec"]["nodeName"] == self.nodes[node]

    def nominated(self, name: str, node: str) -> None:
        full = self.nodes[node]
        wait_until(
            lambda: self.get(name)["status"].get("nominatedNodeName") == full,
            description=f"{name} nominated to {full}",
        )

    def within_capacity(self) -> None:
        capacity = {f"GPU-{full}-0": (10, CARD_MIB, 100) for full in self.nodes.values()}
        live = [p for p in self.kube.list_pods(self.namespace) if not p["metadata"].get("deletionTimestamp")]
        assert over_capacity(usage_from_annotations(live), capacity) == []

    def metric(self, name: str, **labels: str) -> float:
        samples = self.hami.metrics().get(name, [])
        return sum(v for got, v in samples if all(got.get(k) == x for k, x in labels.items()))


def _on_nodes(names: list[str]) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": names}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


@pytest.fixture(scope="module")
def preemption(control_plane: ControlPlane, kube: KubeClient) -> Iterator[Preemption]:
    namespace = kube.create_namespace()
    nodes = {n: f"{namespace}-{n}" for n in NODES}
    hami = HamiScheduler(control_plane, ["--node-lock-timeout=60s"])  # --preemption=auto (the default)
    stack = Preemption(kube, namespace, hami, nodes)
    try:
        for name, value in PRIORITIES.items():
            kube.post(
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                {**_PRIORITY_CLASS, "metadata": {"name": stack.cls(name)}, "value": value},
            )
            stack.classes.append(stack.cls(name))
        kube.post(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {**_PRIORITY_CLASS, "metadata": {"name": stack.cls("never")}, "value": 1000, "preemptionPolicy": "Never"},
        )
        stack.classes.append(stack.cls("never"))
        for full in nodes.values():
            annotations = {keys.NVIDIA_REGISTER: register_annotation(full, 1, CARD_MIB, 10)}
            kube.create_node(full, extended={GPU: 10}, annotations=annotations, labels={"hami-e2e/run": namespace})
        hami.start()
        stack.scheduler = control_plane.start_scheduler(extender_config(hami))
        yield stack
    finally:
        if stack.scheduler is not None:
            stack.scheduler.stop()
        hami.stop()
        for pod in kube.list_pods(namespace):
            kube.delete_pod(namespace, pod["metadata"]["name"])
        for full in nodes.values():
            kube.delete_node(full)
        for name in stack.classes:
            kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
        kube.delete(f"/api/v1/namespaces/{namespace}")
    assert hami.problems() == [], "hami logged errors"


def test_auto_picks_self_preemption_before_kubernetes_1_38(preemption: Preemption) -> None:
    # the control plane's own release (HAMI_K8S_VERSION): 1.36 and 1.37 ask no extender for victims
    version = preemption.kube.get("/version")["gitVersion"]
    expected = f"preemption: self (--preemption=auto: Kubernetes {version} asks no extender for victims"
    assert expected in preemption.hami.log()


def test_a_high_priority_pod_evicts_exactly_the_lowest_priority_pod_and_binds_there(preemption: Preemption) -> None:
    s = preemption
    s.running("one-low", "one", 8000, "low")  # the card's memory is full, its slots are not
    s.running("one-mid-a", "one", 8000, "mid")
    s.running("one-mid-b", "one", 8000, "mid")
    s.pending("one-urgent", ("one",), 6000, "urgent")

    s.wait_terminating("one-low")
    s.nominated("one-urgent", "one")
    victim = s.get("one-low")
    uid = s.get("one-urgent")["metadata"]["uid"]
    [condition] = [c for c in victim["status"].get("conditions") or [] if c["type"] == "DisruptionTarget"]
    assert (condition["status"], condition["reason"]) == ("True", "PreemptionByScheduler")
    preemptor = f"{s.namespace}/one-urgent (UID {uid})"
    assert condition["message"] == f"{SCHEDULER_NAME}: preempting to accommodate a higher priority pod: {preemptor}"
    wait_until(
        lambda: (
            (SCHEDULER_NAME, "Normal", "Preempted", f"Preempted by pod {uid} on node {s.nodes['one']}")
            in pod_events(s.kube, s.namespace, "one-low")
        ),
        description="the Preempted event on the victim",
    )
    assert not is_bound(s.get("one-urgent"))  # the victim still terminates: the pod waits
    s.finish("one-low")
    s.bound_to("one-urgent", "one")
    assert s.terminating() == []  # exactly one victim
    s.within_capacity()


def test_one_big_victim_rather_than_two_small_ones(preemption: Preemption) -> None:
    s = preemption
    s.running("big-small-a", "big", 6000, "low")
    s.running("big-small-b", "big", 6000, "low")
    s.running("big-big", "big", 12000, "low")
    s.pending("big-urgent", ("big",), 12000, "urgent")
    s.wait_terminating("big-big")
    s.finish("big-big")
    s.bound_to("big-urgent", "big")
    assert s.terminating() == []


def test_never_equal_priority_and_too_large_evict_nothing(preemption: Preemption) -> None:
    s = preemption
    s.running("never-low", "never", 20000, "low")
    s.pending("never-never", ("never",), 8000, "never")  # preemptionPolicy: Never
    s.pending("never-equal", ("never",), 8000, "low")  # the same priority as the pod on the card
    s.pending("never-huge", ("never",), CARD_MIB + 1000, "urgent")  # larger than any card
    for name in ("never-never", "never-equal", "never-huge"):
        s.kube.wait_for_pod_unschedulable(s.namespace, name)
    assert s.metric("hami_preemption_attempts_total", result="no-candidate") >= 3  # each tried, none could
    assert s.terminating() == []
    for name in ("never-never", "never-equal", "never-huge"):
        assert not s.get(name)["status"].get("nominatedNodeName")
        s.kube.delete_pod(s.namespace, name)


def test_a_pod_disruption_budget_steers_the_choice(preemption: Preemption) -> None:
    s = preemption
    s.running("pdb-guarded", "pdb-a", 20000, "low", labels={"app": "guarded"})
    s.running("pdb-free", "pdb-b", 20000, "mid")  # a higher priority than the guarded one, but no budget
    s.kube.post(
        f"/apis/policy/v1/namespaces/{s.namespace}/poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    s.pending("pdb-urgent", ("pdb-a", "pdb-b"), 10000, "urgent")
    s.wait_terminating("pdb-free")
    s.finish("pdb-free")
    s.bound_to("pdb-urgent", "pdb-b")
    assert s.terminating() == []


def test_two_preemptors_at_once_never_share_the_freed_capacity(preemption: Preemption) -> None:
    s = preemption
    s.running("twice-low", "twice", 20000, "low")
    s.pending("twice-first", ("twice",), 14000, "urgent")
    s.pending("twice-second", ("twice",), 14000, "urgent")
    s.wait_terminating("twice-low")
    s.finish("twice-low")
    bound = wait_until(
        lambda: [n for n in ("twice-first", "twice-second") if is_bound(s.get(n))] or None,
        description="one of the two preemptors bound",
    )
    [other] = {"twice-first", "twice-second"} - set(bound)
    s.kube.wait_for_pod_unschedulable(s.namespace, other)
    assert len(bound) == 1
    assert s.terminating() == []  # no second victim: nothing else could make room
    s.within_capacity()
    s.kube.delete_pod(s.namespace, other)


def test_hami_killed_mid_preemption_leaves_no_double_allocation(preemption: Preemption) -> None:
    s = preemption
    s.running("crash-low", "crash", 20000, "low")
    s.pending("crash-urgent", ("crash",), 14000, "urgent")
    s.wait_terminating("crash-low")
    s.nominated("crash-urgent", "crash")
    s.hami.restart(crash=True)  # SIGKILL after the eviction, before the bind; its holds were in memory only
    s.pending("crash-second", ("crash",), 14000, "second")  # would fit in the freed room, had it no owner
    s.kube.wait_for_pod_unschedulable(s.namespace, "crash-second")
    s.finish("crash-low")
    s.bound_to("crash-urgent", "crash")
    s.kube.wait_for_pod_unschedulable(s.namespace, "crash-second")
    assert not is_bound(s.get("crash-second"))
    s.within_capacity()
    assert s.metric("hami_preemption_wasted_evictions_total") == 0
    assert s.hami.ledger()[f"GPU-{s.nodes['crash']}-0"][1] == 14000


def test_a_pod_terminating_on_its_own_does_not_hold_back_preemption_on_another_node(preemption: Preemption) -> None:
    """Issue 39: a tenant's pod deleted with a day-long grace period fills own-a; own-b holds a pod of lower
    priority. kube-scheduler waits only for pods terminating because of a preemption: so does hami, which
    preempts on own-b rather than holding own-a for the preemptor (and renewing that hold for a day)."""
    s = preemption
    s.running("own-tenant", "own-a", CARD_MIB, "mid")
    s.delete_on_its_own("own-tenant")
    s.running("own-low", "own-b", CARD_MIB, "low")
    s.pending("own-urgent", ("own-a", "own-b"), 6000, "urgent")
    s.wait_terminating("own-low")
    s.nominated("own-urgent", "own-b")
    conditions = s.get("own-tenant")["status"].get("conditions") or []
    assert not [c for c in conditions if c["type"] == "DisruptionTarget"]  # nobody preempted it
    s.finish("own-low")
    s.bound_to("own-urgent", "own-b")
    s.finish("own-tenant")
    assert s.terminating() == []
    s.within_capacity()


def test_a_tenant_written_preempted_for_is_not_believed_after_a_restart(preemption: Preemption) -> None:
    """Issue 39: a tenant deletes its own pod and writes ``hami.io/preempted-for`` on it, naming a pending pod of
    its own; after a restart hami holds nothing for that pod on the tenant's node (only the condition hami writes
    on its victims, naming the preemptor's UID, is believed: a tenant cannot write a pod's status)."""
    s = preemption
    s.running("forge-tenant", "forge", 20000, "low")
    s.pending("forge-named", ("forge",), 6000, "never")  # 4000 MiB left: waits, and preempts nobody
    s.kube.wait_for_pod_unschedulable(s.namespace, "forge-named")
    path = f"/api/v1/namespaces/{s.namespace}/pods/forge-tenant"
    s.kube.patch(path, {"metadata": {"annotations": {keys.PREEMPTED_FOR: f"{s.namespace}/forge-named"}}})
    s.delete_on_its_own("forge-tenant")
    s.hami.restart()
    s.pending("forge-small", ("forge",), 3000, "low")  # fits beside the tenant's pod unless a hold took the room
    s.bound_to("forge-small", "forge")
    assert not s.get("forge-named")["status"].get("nominatedNodeName")
    assert s.hami.ledger()[f"GPU-{s.nodes['forge']}-0"][1] == 23000  # the tenant's pod and forge-small, no hold
    for name in ("forge-tenant", "forge-named", "forge-small"):
        s.kube.delete_pod(s.namespace, name)
