"""hami's scheduler extender against the real control plane: etcd, kube-apiserver and kube-scheduler calling
``hami scheduler`` (a subprocess, as users run it) for filter and bind; fake nodes registering GPUs in HAMi's
format. There is no kubelet and no device plugin; ``FakeDevicePlugin`` (``tests/e2e/hami_stack.py``) releases
node locks as HAMi's plugin does after Allocate, where a test needs several binds per node.

Waits poll with bounded deadlines and return as soon as their condition holds; nothing asserts on speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice, decode_pod_devices
from hami.protocol.nodelock import NodeLock, decode_node_lock, encode_node_lock
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler, wait_until
from tests.e2e.hami_stack import (
    GPU,
    SCHEDULER_NAME,
    FakeDevicePlugin,
    HamiScheduler,
    Usage,
    api_requests,
    extender_config,
    gpu_limits,
    is_bound,
    pod_events,
    register_annotation,
    usage_from_annotations,
)
from tests.e2e.invariants import check_invariants

NVIDIA = keys.NVIDIA_KEYS

# HAMi's contract: the device plugin releases the node lock after Allocate. FakeDevicePlugin does that here, so
# the lock timeout is only a safety net for a lock nobody releases (say, hami stopped between taking a lock
# and binding). 60 s rather than HAMi's 5 min keeps such a leak from stalling a test for long, yet a live lock
# a test writes stays live while the test watches hami respect it, even on a slow machine. Tests that need an
# expired lock write one that is an hour old.
LOCK_TIMEOUT = "60s"


@dataclass
class Stack:
    """One test's cluster: its namespace, its labelled fake GPU nodes, hami and kube-scheduler."""

    plane: ControlPlane
    kube: KubeClient
    namespace: str
    hami: HamiScheduler
    make_node: Callable[..., dict[str, Any]]
    plugin: FakeDevicePlugin | None = None
    nodes: list[str] = field(default_factory=list)
    scheduler: Scheduler | None = None
    scheduler_saw: int = 0  # how many of ``nodes`` kube-scheduler was last seen to know

    @property
    def label(self) -> dict[str, str]:
        return {"hami-e2e/run": self.namespace}

    def node(self, name: str, *, gpus: int = 2, mem: int = 24000, count: int = 10, register: str | None = None) -> str:
        """A fake node (name prefixed with the namespace) registering ``gpus`` cards; returns its name."""
        full = f"{self.namespace}-{name}"
        annotations = {keys.NVIDIA_REGISTER: register or register_annotation(full, gpus, mem, count)}
        self.make_node(full, extended={GPU: gpus * count}, labels=self.label, annotations=annotations)
        self.nodes.append(full)
        return full

    def pod(
        self,
        name: str,
        limits: dict[str, int] | None = None,
        *,
        annotations: dict[str, str] | None = None,
        node: str | None = None,
    ) -> None:
        """A GPU pod for hami-scheduler, limited to this test's nodes (or to ``node``)."""
        selector = {"kubernetes.io/hostname": node} if node else self.label
        self.wait_for_scheduler_nodes()
        self.kube.create_pod(
            self.namespace,
            name,
            limits=limits or gpu_limits(),
            scheduler_name=SCHEDULER_NAME,  # the webhook would set it; it is not part of these tests
            annotations=annotations,
            spec={"nodeSelector": selector},
        )

    def wait_for_scheduler_nodes(self) -> None:
        """Wait until kube-scheduler's node cache holds every node the API server has, once per node added: a
        pod created before kube-scheduler's informer saw this test's last node would be filtered without it
        (under load the informer can lag the node's creation), and the test would see other candidates."""
        if self.scheduler is None or self.scheduler_saw == len(self.nodes):
            return
        scheduler, token = self.scheduler, self.plane.token

        def caught_up() -> bool:
            cached = scheduler.cached_nodes(token)
            return cached is None or cached >= len(self.kube.get("/api/v1/nodes")["items"])

        wait_until(caught_up, interval=0.1, description="kube-scheduler's node cache to hold every node")
        self.scheduler_saw = len(self.nodes)

    def get(self, name: str) -> dict[str, Any]:
        return self.kube.get_pod(self.namespace, name)

    def pods(self) -> list[dict[str, Any]]:
        return self.kube.list_pods(self.namespace)

    def bound(self, name: str) -> dict[str, Any]:
        return self.kube.wait_for_pod_scheduled(self.namespace, name)

    def events(self, pod: str) -> list[tuple[str, str, str, str]]:
        return pod_events(self.kube, self.namespace, pod)

    def wait_for_event(self, pod: str, reason: str, contains: str = "") -> list[tuple[str, str, str, str]]:
        def seen() -> list[tuple[str, str, str, str]] | None:
            events = self.events(pod)
            return events if any(e[2] == reason and contains in e[3] for e in events) else None

        return wait_until(seen, interval=0.25, description=f"a {reason} event on {pod} containing {contains!r}")

    def lock(self, node: str) -> str | None:
        node_obj = self.kube.get(f"/api/v1/nodes/{node}")
        value: str | None = (node_obj["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
        return value

    def wait_unlocked(self, node: str) -> None:
        wait_until(lambda: self.lock(node) is None, description=f"the node lock of {node} released")

    def usage(self) -> Usage:
        """Per-device usage recounted from every pod's allocation annotation."""
        return usage_from_annotations(self.pods())

    def settled(self, bound: int) -> bool:
        """``bound`` pods are bound and kube-scheduler found every other one unschedulable."""
        pods = self.pods()
        waiting = [p for p in pods if not is_bound(p)]
        unschedulable = [
            p
            for p in waiting
            if any(
                c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in p["status"].get("conditions") or []
            )
        ]
        return len(pods) - len(waiting) == bound and len(unschedulable) == len(waiting)


StackFactory = Callable[..., Stack]


@pytest.fixture
def stack(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
) -> Iterator[StackFactory]:
    """Factory: ``stack(*hami_flags, plugin=True)`` starts hami (with those extra flags) and kube-scheduler
    calling it, and with ``plugin`` a FakeDevicePlugin for this test's nodes; all stopped afterwards."""
    made: list[Stack] = []

    def start(*hami_flags: str, plugin: bool = True) -> Stack:
        hami = HamiScheduler(control_plane, [f"--node-lock-timeout={LOCK_TIMEOUT}", *hami_flags])
        s = Stack(control_plane, kube, namespace, hami, make_node)
        made.append(s)
        hami.start()
        s.scheduler = start_scheduler(extender_config(hami))
        if plugin:
            s.plugin = FakeDevicePlugin(control_plane, f"hami-e2e/run={namespace}")
            s.plugin.start()
        return s

    yield start
    for s in made:
        if s.plugin is not None:
            s.plugin.stop()
        s.hami.stop()
    for s in made:
        assert s.plugin is None or s.plugin.error is None, f"the fake device plugin failed: {s.plugin.error!r}"
        assert s.hami.problems() == [], "hami logged errors"
        assert set(s.hami.exit_codes) == {0}, "hami did not shut down cleanly on SIGTERM"


# --- one pod ----------------------------------------------------------------------------------------------


def test_gpu_pod_is_bound_with_hami_compatible_annotations(stack: StackFactory) -> None:
    s = stack(plugin=False)
    big = s.node("big", gpus=2, mem=24000)
    small = s.node("small", gpus=2, mem=2000)  # can never hold 3000 MiB

    s.pod("p1", gpu_limits(gpu=1, mem=3000, cores=30))
    pod = s.bound("p1")

    assert pod["spec"]["nodeName"] == big
    annotations = pod["metadata"]["annotations"]
    allocation = annotations[NVIDIA.allocated]
    assert annotations[NVIDIA.to_allocate or ""] == allocation
    assert decode_pod_devices(allocation) == ((ContainerDevice(f"GPU-{big}-0", "NVIDIA", 3000, 30),),)
    assert allocation == f"GPU-{big}-0,NVIDIA,3000,30:;"
    assert annotations[keys.VGPU_NODE] == big
    assert pod["metadata"]["labels"][keys.VGPU_NODE] == big
    assert annotations[keys.BIND_PHASE] == "allocating"
    filtered_at = int(annotations[keys.VGPU_TIME])
    assert 0 <= int(annotations[keys.BIND_TIME]) - filtered_at <= 120  # hami writes it with the allocation
    # Without a device plugin the node stays locked for the pod: <RFC3339>,<namespace>,<pod>.
    lock = decode_node_lock(s.lock(big) or "")
    assert (lock.namespace, lock.name) == (s.namespace, "p1")
    assert filtered_at - 1 <= lock.timestamp.timestamp() <= time.time() + 1  # taken by /bind, after /filter
    assert s.lock(small) is None
    events = s.wait_for_event("p1", "BindingSucceed")
    ours = [(t, r, m) for c, t, r, m in events if c == SCHEDULER_NAME]
    assert ours == [
        ("Normal", "FilteringSucceed", f"find fit node({big}), 1 nodes not fit, 1 nodes fit({big}:0.00)"),
        ("Normal", "FilteredNodes", f"nodes not chosen: {small}: 2/2 CardInsufficientMemory"),
        ("Normal", "BindingSucceed", f"Successfully binding node [{big}] to {s.namespace}/p1"),
    ]
    assert s.hami.ledger() == {f"GPU-{big}-0": (1, 3000, 30)}


# --- policies ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # binpack: the busiest node, and on it the busiest card; the first pod breaks the tie by node name.
        pytest.param("binpack", [("a", 0), ("a", 0), ("a", 0)], id="binpack"),
        # spread: the least used node, and on it the least used card.
        pytest.param("spread", [("a", 0), ("b", 0), ("a", 1)], id="spread"),
    ],
)
def test_node_and_gpu_policies_place_a_sequence_of_pods(
    stack: StackFactory, policy: str, expected: list[tuple[str, int]]
) -> None:
    s = stack(f"--node-scheduler-policy={policy}", f"--gpu-scheduler-policy={policy}")
    a, b = s.node("a"), s.node("b")
    names = {"a": a, "b": b}

    placed = []
    for i in range(3):
        s.pod(f"p{i}")
        pod = s.bound(f"p{i}")  # one at a time: each decision sees the ones before
        (device,) = decode_pod_devices(pod["metadata"]["annotations"][NVIDIA.allocated])[0]
        node = pod["spec"]["nodeName"]
        placed.append((node, device.uuid))
        # ... and its node lock released by the device plugin: a node a bind holds locked ranks after free ones
        s.wait_unlocked(node)

    assert placed == [(names[n], f"GPU-{names[n]}-{i}") for n, i in expected]


def test_a_node_locked_by_a_bind_in_progress_is_passed_over_for_a_free_one(stack: StackFactory) -> None:
    # No device plugin: p1 keeps its node's lock after its bind, as while its device plugin has not allocated yet.
    s = stack(plugin=False)
    a, b = s.node("a"), s.node("b")
    s.pod("p1")
    assert s.bound("p1")["spec"]["nodeName"] == a  # binpack, a tie of empty nodes: the first by name
    assert s.lock(a) is not None

    s.pod("p2")

    assert s.bound("p2")["spec"]["nodeName"] == b  # a is fuller, but its lock is held by p1's bind in progress
    events = s.wait_for_event("p2", "FilteringSucceed")
    (message,) = [m for c, _, r, m in events if c == SCHEDULER_NAME and r == "FilteringSucceed"]
    assert message.startswith(f"find fit node({b}), 0 nodes not fit, 2 nodes fit({a}:"), message
    held = "a bind in progress there holds or is about to take the node lock"
    assert message.endswith(f",{b}:0.00); passed over {a}: {held}"), message
    assert s.hami.metrics()["hami_lock_busy_skips_total"] == [({}, 1.0)]


# --- nothing fits -----------------------------------------------------------------------------------------


def test_pod_that_fits_nowhere_stays_pending_with_the_reasons(stack: StackFactory) -> None:
    s = stack()
    a, b = s.node("a", mem=24000), s.node("b", mem=16000)

    s.pod("huge", gpu_limits(mem=30000))
    pod = s.kube.wait_for_pod_unschedulable(s.namespace, "huge")
    events = s.wait_for_event("huge", "FilteringFailed", "no available node")

    assert not is_bound(pod)
    assert keys.VGPU_NODE not in (pod["metadata"].get("annotations") or {})
    ours = {(t, r, m) for c, t, r, m in events if c == SCHEDULER_NAME}
    assert ("Warning", "FilteringFailed", f"2 nodes CardInsufficientMemory({a},{b})") in ours
    assert ("Warning", "FilteringFailed", "no available node, 2 nodes do not meet") in ours
    (condition,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert condition["reason"] == "Unschedulable"
    assert "2/2 CardInsufficientMemory" in condition["message"]  # kube-scheduler shows hami's reasons too
    assert s.hami.ledger() == {}


def test_repeated_filtering_failures_of_a_pending_pod_are_folded_into_one_event(stack: StackFactory) -> None:
    s = stack()
    s.node("a", mem=16000)
    s.pod("huge", gpu_limits(mem=30000))
    s.wait_for_event("huge", "FilteringFailed", "no available node")
    touched: list[int] = []

    def folded() -> list[dict[str, Any]] | None:
        # the pod's labels changing sends it through /filter again, with the same verdict
        touched.append(len(touched))
        path = f"/api/v1/namespaces/{s.namespace}/pods/huge"
        s.kube.patch(path, {"metadata": {"labels": {"hami-e2e/touched": str(len(touched))}}})
        events = s.kube.get(f"/api/v1/namespaces/{s.namespace}/events", fieldSelector="involvedObject.name=huge")
        ours = [
            e
            for e in events["items"]
            if e["source"].get("component") == SCHEDULER_NAME and e["reason"] == "FilteringFailed"
        ]
        return ours if any(e.get("count", 1) > 1 for e in ours) else None

    ours = wait_until(folded, interval=1.0, timeout=60, description="a FilteringFailed event of huge counted twice")
    messages = [e["message"] for e in ours]
    assert len(messages) == len(set(messages))  # one Event per distinct message, however often it happened
    repeated = [e for e in ours if e["count"] > 1]
    assert all(e["lastTimestamp"] >= e["firstTimestamp"] for e in repeated)


def test_a_refused_pod_sheds_a_stale_allocation(stack: StackFactory) -> None:
    s = stack()
    a, small = s.node("a"), s.node("small", mem=2000)
    # As an earlier /filter left it when the bind never came (kube-scheduler restarted, say): placed on a.
    stale = {keys.VGPU_NODE: a, keys.VGPU_TIME: "1", NVIDIA.allocated: f"GPU-{a}-0,NVIDIA,3000,30:;"}
    s.pod("x", annotations=stale, node=small)  # now it may only go to small, where it never fits

    s.wait_for_event("x", "FilteringFailed", "no available node")

    wait_until(lambda: keys.VGPU_NODE not in (s.get("x")["metadata"].get("annotations") or {}), description="shed")
    assert keys.VGPU_NODE not in (s.get("x")["metadata"].get("labels") or {})
    wait_until(lambda: s.hami.ledger() == {}, description="the devices on a free again")


# --- 60 pods at once --------------------------------------------------------------------------------------


def test_sixty_pods_at_once_where_forty_fit(stack: StackFactory, capsys: pytest.CaptureFixture[str]) -> None:
    # The default node policy, binpack: every pod goes to the fullest node that fits, so the binds of a burst queue
    # on one node's lock (held from each bind until the device plugin has allocated) and wait for its hand-over.
    s = stack()
    # 5 nodes × 2 cards × 16000 MiB, 100 cores; each pod takes 4000 MiB and 25 cores: 4 per card, 40 in all.
    nodes = [s.node(f"n{i}", gpus=2, mem=16000) for i in range(5)]
    capacity = {f"GPU-{n}-{i}": (10, 16000, 100) for n in nodes for i in range(2)}

    requests_before = api_requests(s.kube)
    started = time.monotonic()
    for i in range(60):
        s.pod(f"p{i:02}", gpu_limits(mem=4000, cores=25))
    first_seen: dict[str, float] = {}

    def forty_bound() -> bool:
        now = time.monotonic()
        for pod in s.pods():
            if is_bound(pod):
                first_seen.setdefault(pod["metadata"]["name"], now)
        return len(first_seen) >= 40

    wait_until(forty_bound, interval=0.05, timeout=240, description="40 pods bound")
    wait_until(lambda: s.settled(40), description="the other 20 pods found unschedulable")
    fortieth = sorted(first_seen.values())[39] - started
    requests = api_requests(s.kube) - requests_before  # the test's own polling included (reads)
    writes = sum(n for (verb, _), n in requests.items() if verb in ("POST", "PUT", "PATCH", "DELETE", "APPLY"))

    pods = s.pods()
    bound = [p for p in pods if is_bound(p)]
    assert len(bound) == 40
    usage = usage_from_annotations(bound)
    for uuid, (slots, mem, cores) in usage.items():
        cap_slots, cap_mem, cap_cores = capacity[uuid]
        assert (slots <= cap_slots, mem <= cap_mem, cores <= cap_cores) == (True, True, True), uuid
    assert usage == dict.fromkeys(capacity, (4, 16000, 100))
    assert usage_from_annotations(pods) == usage  # the 20 waiting pods carry no allocation
    assert all(p["metadata"]["annotations"][keys.VGPU_NODE] == p["spec"]["nodeName"] for p in bound)
    assert s.hami.ledger() == usage
    events = s.kube.get(f"/api/v1/namespaces/{s.namespace}/events")["items"]
    lock_failures = [
        (e["involvedObject"]["name"], e["reason"], e["message"])
        for e in events
        if e["reason"] in ("FailedScheduling", "BindingFailed") and "lock" in e["message"]
    ]
    with capsys.disabled():
        print(
            f"\n[hami e2e] 60 pods created at once (binpack), 40 fit: the 40th was bound {fortieth:.2f} s after the "
            f"first creation ({40 / fortieth:.1f} pods/s); per bound pod {requests.total() / 40:.1f} API requests "
            f"(test polling included), {writes / 40:.1f} writes, {requests['POST', 'events'] / 40:.1f} events "
            f"created; "
            f"{len(lock_failures)} scheduling failures caused by the node lock"
        )
    assert lock_failures == []  # every bind behind another waited for the lock's hand-over


# --- deleting pods, restarting hami -----------------------------------------------------------------------


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "sigkill"])
def test_restarts_rebuild_the_ledger_and_deleted_pods_free_capacity(stack: StackFactory, crash: bool) -> None:
    s = stack()
    node = s.node("solo", gpus=1, mem=16000)
    full = {f"GPU-{node}-0": (4, 16000, 100)}
    for i in range(6):
        s.pod(f"p{i}", gpu_limits(mem=4000, cores=25))  # 4 fit on the one card

    wait_until(lambda: any(map(is_bound, s.pods())), interval=0.05, description="a first pod bound")
    # Mid-way: other pods are being filtered and bound. SIGTERM lets in-flight requests and annotation commits
    # finish; SIGKILL loses them. Either way kube-scheduler retries what failed.
    s.hami.restart(crash=crash)
    wait_until(lambda: s.settled(4), description="4 pods bound, 2 unschedulable")
    check_invariants(s.kube, s.namespace, s.hami, {f"GPU-{node}-0": (10, 16000, 100)}, s.nodes, bound=4)
    before = s.usage()
    assert before == full  # no double allocation across the restart
    assert s.hami.ledger() == before
    for pod in s.pods():  # and no pod bound without its allocation
        annotations = pod["metadata"].get("annotations") or {}
        assert annotations.get(keys.VGPU_NODE) == (pod["spec"].get("nodeName") or None), pod["metadata"]["name"]

    s.hami.restart()  # at rest: a new process rebuilds the same ledger from the annotations alone

    assert s.hami.ledger() == before
    bound = sorted(p["metadata"]["name"] for p in s.pods() if is_bound(p))
    waiting = sorted(p["metadata"]["name"] for p in s.pods() if not is_bound(p))
    for name in bound[:2]:
        s.kube.delete_pod(s.namespace, name)
    for name in waiting:
        s.bound(name)  # kube-scheduler retries unschedulable pods when pods are deleted

    wait_until(lambda: s.settled(4), description="the 2 waiting pods bound")
    assert s.usage() == full
    assert s.hami.ledger() == full


def test_a_pod_turned_down_for_lack_of_gpu_is_retried_when_the_holder_is_deleted(stack: StackFactory) -> None:
    """kube-scheduler parks a pod its extender turned down and retries it on the next Pod or Node event, else after
    its 5-minute flush. The holder's deletion is such an event, but it reaches kube-scheduler as early as hami, whose
    ledger may not have freed the card yet when the retry comes; hami's leader then annotates the node that freed
    capacity (``hami.io/capacity-freed``), a Node event that comes after its ledger has (docs/coming-from-hami.md,
    "Where hami differs from HAMi"). The wait below is far under the flush."""
    s = stack()
    node = s.node("one", gpus=1, mem=16000)
    s.pod("holder", gpu_limits(mem=12000, cores=10))
    s.bound("holder")
    s.pod("waiter", gpu_limits(mem=8000, cores=10))  # 12000 + 8000 MiB > 16000
    s.kube.wait_for_pod_unschedulable(s.namespace, "waiter")
    time.sleep(3)  # past its backoff (podMaxBackoffSeconds: 2 here): the deletion sends it straight to the extender

    s.kube.delete_pod(s.namespace, "holder")

    assert s.kube.wait_for_pod_scheduled(s.namespace, "waiter", timeout=90)["spec"]["nodeName"] == node
    assert s.usage() == {f"GPU-{node}-0": (1, 8000, 10)}
    nudged = s.kube.get(f"/api/v1/nodes/{node}")["metadata"]["annotations"][keys.CAPACITY_FREED]
    assert datetime.fromisoformat(nudged) > datetime.now(UTC) - timedelta(minutes=5)


# --- a broken node ----------------------------------------------------------------------------------------


def test_node_with_garbage_inventory_is_excluded_and_reported(stack: StackFactory) -> None:
    s = stack()
    good = s.node("good")
    bad = s.node("bad", register="[{garbage")

    for i in range(3):
        s.pod(f"p{i}")
    s.pod("only-bad", node=bad)

    assert [s.bound(f"p{i}")["spec"]["nodeName"] for i in range(3)] == [good] * 3
    s.wait_for_event("only-bad", "FilteringFailed", f"1 nodes NodeQuarantined({bad})")
    node_events = s.kube.get(
        "/api/v1/namespaces/default/events", fieldSelector=f"involvedObject.kind=Node,involvedObject.name={bad}"
    )["items"]
    # One Event, written once: a repeat of the same problem would fold into it (count 2), one from a second
    # hami process would be a second Event.
    assert [(e["type"], e["reason"], e["source"]["component"], e["count"]) for e in node_events] == [
        ("Warning", "RegistrationRefused", SCHEDULER_NAME, 1)
    ]
    assert "registration refused: hami.io/node-nvidia-register: invalid JSON" in node_events[0]["message"]
    assert s.hami.metrics()["hami_quarantined_nodes"] == [({"vendor": "NVIDIA"}, 1.0)]
    assert "registration refused" in s.hami.log()


# --- node locks -------------------------------------------------------------------------------------------


def write_lock(s: Stack, node: str, lock: NodeLock) -> str:
    value = encode_node_lock(lock)
    s.kube.set_node_annotations(node, {keys.NODE_LOCK: value})
    return value


@pytest.mark.parametrize(
    ("holder_exists", "age", "why"),
    [
        pytest.param(True, timedelta(hours=1), "expired", id="expired-lock-of-a-live-pod"),
        pytest.param(False, timedelta(0), "no longer exists", id="fresh-lock-of-a-deleted-pod"),
    ],
)
def test_stale_lock_is_taken_over(stack: StackFactory, holder_exists: bool, age: timedelta, why: str) -> None:
    s = stack(plugin=False)
    node = s.node("a")
    if holder_exists:  # a pod that is not scheduled by hami and stays Pending
        s.kube.create_pod(s.namespace, "holder", scheduler_name="nobody")
    write_lock(s, node, NodeLock(datetime.now(UTC) - age, s.namespace, "holder"))

    s.pod("p1")

    assert s.bound("p1")["spec"]["nodeName"] == node
    lock = decode_node_lock(s.lock(node) or "")
    assert (lock.namespace, lock.name) == (s.namespace, "p1")
    assert "taking over lock" in s.hami.log()
    assert why in s.hami.log()


def test_live_lock_of_another_pod_is_respected_until_released(stack: StackFactory) -> None:
    s = stack(plugin=False)
    node = s.node("a")
    s.kube.create_pod(s.namespace, "holder", scheduler_name="nobody")
    held = write_lock(s, node, NodeLock(datetime.now(UTC), s.namespace, "holder"))

    s.pod("p1")
    s.wait_for_event("p1", "BindingFailed", "node lock contention")

    pod = s.get("p1")
    assert not is_bound(pod)
    assert s.lock(node) == held
    s.kube.set_node_annotations(node, {keys.NODE_LOCK: None})  # the holder's device plugin is done with it

    assert s.bound("p1")["spec"]["nodeName"] == node
    lock = decode_node_lock(s.lock(node) or "")
    assert (lock.namespace, lock.name) == (s.namespace, "p1")


def test_deleting_the_lock_holder_releases_the_node_at_once(stack: StackFactory) -> None:
    # no device plugin: p1 keeps the lock after its bind; p2's bind fails at once instead of waiting for it
    s = stack("--bind-lock-wait=0", plugin=False)
    node = s.node("a")
    s.pod("p1")
    s.bound("p1")
    s.pod("p2")
    s.wait_for_event("p2", "BindingFailed", f"locked by {s.namespace}/p1")

    s.kube.delete_pod(s.namespace, "p1")  # hami sees the holder go (pod watch) and releases its lock

    assert s.bound("p2")["spec"]["nodeName"] == node
    lock = decode_node_lock(s.lock(node) or "")
    assert (lock.namespace, lock.name) == (s.namespace, "p2")
    assert list(s.usage().values()) == [(1, 3000, 30)]  # p2 alone: p1's share left with it
    assert s.hami.ledger() == s.usage()


def mark_bind_phase(s: Stack, pod: str, phase: str) -> None:
    """What HAMi's device plugin writes once it has answered the pod's Allocate (before releasing the lock)."""
    s.kube.patch(
        f"/api/v1/namespaces/{s.namespace}/pods/{pod}", {"metadata": {"annotations": {keys.BIND_PHASE: phase}}}
    )


def test_a_lock_whose_holder_is_still_allocating_is_kept_and_taken_over_once_it_is_done(stack: StackFactory) -> None:
    """The device plugin wrote bind phase ``success`` but its release of the lock was lost (HAMi keeps the node
    locked until ``--node-lock-timeout``): the next bind gets the node. While ``allocating``, the holder kept it."""
    s = stack("--bind-lock-wait=0", plugin=False)
    node = s.node("a")
    s.pod("p1")
    s.bound("p1")
    held = s.lock(node)
    s.pod("p2")
    s.wait_for_event("p2", "BindingFailed", f"locked by {s.namespace}/p1")
    assert s.get("p1")["metadata"]["annotations"][keys.BIND_PHASE] == "allocating"
    assert s.lock(node) == held

    mark_bind_phase(s, "p1", "success")  # ... and the plugin's release never arrives

    assert s.bound("p2")["spec"]["nodeName"] == node
    lock = decode_node_lock(s.lock(node) or "")
    assert (lock.namespace, lock.name) == (s.namespace, "p2")
    assert f"holder {s.namespace}/p1 is bound with bind phase success" in s.hami.log()
    assert s.hami.ledger() == s.usage()


@pytest.mark.parametrize("phase", ["success", "failed"])
def test_a_lock_left_behind_by_the_device_plugin_is_released_without_another_bind(
    stack: StackFactory, phase: str
) -> None:
    s = stack(plugin=False)
    node = s.node("a")
    s.pod("p1")
    s.bound("p1")
    assert s.lock(node) is not None

    mark_bind_phase(s, "p1", phase)  # the device plugin answered; its release of the lock was lost

    wait_until(lambda: s.lock(node) is None, description=f"the lock on {node} released by hami")
    assert f"releasing stale lock: holder {s.namespace}/p1 is bound with bind phase {phase}" in s.hami.log()


# --- switching from HAMi (docs/coming-from-hami.md) --------------------------------------------------------


def test_a_switch_from_hami_to_hami_and_back_keeps_every_allocation(
    stack: StackFactory, kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]]
) -> None:
    """docs/coming-from-hami.md, "Switching a running cluster from HAMi to hami, and back", steps 3 and back.
    HAMi stopped, hami started: hami reads the allocation HAMi wrote from the API and never places a new pod over
    it. hami stopped (its uninstall): every allocation, HAMi's and hami's own, is left on the pods in HAMi's format
    byte for byte, no node lock is left, and a scheduler started afresh from the API alone counts both."""
    node = f"{namespace}-from-hami"
    uuid = f"GPU-{node}-0"
    make_node(
        node,
        extended={GPU: 10},
        labels={"hami-e2e/run": namespace},
        annotations={keys.NVIDIA_REGISTER: register_annotation(node, 1, 16000)},
    )
    # what HAMi v2.10 leaves on a pod it placed, once its device plugin answered Allocate: written by hand, in
    # HAMi's format, before hami runs
    kube.create_pod(
        namespace,
        "placed-by-hami",
        limits=gpu_limits(mem=12000, cores=80),
        scheduler_name=SCHEDULER_NAME,
        node_name=node,
        annotations={
            keys.VGPU_NODE: node,
            keys.VGPU_TIME: str(int(time.time())),
            keys.BIND_PHASE: "success",
            "hami.io/vgpu-devices-allocated": f"{uuid},NVIDIA,12000,80:;",
            "hami.io/vgpu-devices-to-allocate": ";",
        },
    )

    s = stack()
    s.nodes.append(node)
    wait_until(lambda: s.hami.ledger() == {uuid: (1, 12000, 80)}, description="HAMi's allocation in hami's ledger")
    s.pod("too-big", gpu_limits(mem=8000, cores=10))  # 12000 + 8000 MiB > 16000
    s.pod("fits", gpu_limits(mem=4000, cores=20))

    assert s.bound("fits")["spec"]["nodeName"] == node
    s.wait_for_event("too-big", "FilteringFailed")
    assert not is_bound(s.get("too-big"))
    assert s.usage() == {uuid: (2, 16000, 100)}
    assert s.hami.ledger() == s.usage()
    wait_until(lambda: s.get("fits")["metadata"]["annotations"].get(keys.BIND_PHASE) == "success", description="fits")
    hamis = s.get("placed-by-hami")["metadata"]["annotations"]

    s.hami.stop()  # back to HAMi: hami's scheduler goes first
    fits = s.get("fits")["metadata"]["annotations"]
    # what HAMi's scheduler decodes when it starts (its EncodePodDevices format: uuid,type,mem,cores: per device,
    # ; per container), the node it charges, and a finished bind
    assert fits["hami.io/vgpu-devices-allocated"] == f"{uuid},NVIDIA,4000,20:;"
    assert (fits[keys.VGPU_NODE], fits[keys.BIND_PHASE]) == (node, "success")
    assert s.get("placed-by-hami")["metadata"]["annotations"] == hamis  # HAMi's own writes untouched
    node_annotations = kube.get(f"/api/v1/nodes/{node}")["metadata"]["annotations"]
    assert keys.NODE_LOCK not in node_annotations
    assert node_annotations[keys.NVIDIA_REGISTER] == register_annotation(node, 1, 16000)
    s.hami.start()  # a scheduler that knows nothing but the API, as HAMi's is when it comes back
    wait_until(lambda: s.hami.ledger() == {uuid: (2, 16000, 100)}, description="both allocations in a fresh ledger")
    assert not is_bound(s.get("too-big"))
