"""hami under faults: a burst of GPU pods while kube-apiserver hangs (SIGSTOP), crashes (SIGKILL and a restart),
or sheds load with 429s. Each test ends with the invariant check of ``tests/e2e/invariants.py``.

Each control plane here is this module's own, so killing its API server disturbs no other test: a plain one
for the SIGSTOP/SIGKILL tests, and one started with ``--max-requests-inflight=1
--max-mutating-requests-inflight=1 --enable-priority-and-fairness=false`` for the 429 storm. hami runs under
the chart's ServiceAccount, as in every e2e test: the in-flight limits apply to it (the admin is exempt).
Sizes are fixed and small (3 nodes × 2 cards, 30 pods of which 24 fit), every wait is bounded, and nothing
leaves loopback. Nothing asserts on speed; the figures are printed (and measured by ``make bench``).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e import cluster
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler, wait_until
from tests.e2e.hami_stack import FakeDevicePlugin, HamiScheduler, Usage, extender_config, gpu_limits, is_bound
from tests.e2e.invariants import check_invariants
from tests.e2e.test_extender import LOCK_TIMEOUT, Stack

THROTTLE_ARGS = (
    "--max-requests-inflight=1",
    "--max-mutating-requests-inflight=1",
    "--enable-priority-and-fairness=false",
)
NODES, CARDS, PODS, FIT = 3, 2, 30, 24
"""3 nodes × 2 cards × 16000 MiB / 100 cores; each pod takes 4000 MiB and 25 cores: 4 per card, 24 in all."""


def _plane(factory: pytest.TempPathFactory, name: str, args: tuple[str, ...] = ()) -> Iterator[ControlPlane]:
    try:
        plane = cluster.start_control_plane(factory.mktemp(name), apiserver_args=args)
    except cluster.ControlPlaneError as err:
        pytest.fail(str(err), pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def fault_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    yield from _plane(tmp_path_factory, "fault-plane")


@pytest.fixture(scope="module")
def throttled_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    yield from _plane(tmp_path_factory, "throttled-plane", THROTTLE_ARGS)


FaultStack = Callable[..., Stack]


@pytest.fixture
def fault_stack() -> Iterator[FaultStack]:
    """Factory: ``fault_stack(plane)``: a namespace, hami (as the chart's ServiceAccount), kube-scheduler calling
    it and a FakeDevicePlugin on ``plane``; all stopped afterwards."""
    made: list[tuple[Stack, KubeClient, list[str]]] = []

    def start(plane: ControlPlane) -> Stack:
        kube = plane.client()
        namespace = kube.create_namespace()
        nodes: list[str] = []

        def make_node(name: str, **kwargs: Any) -> dict[str, Any]:
            nodes.append(name)
            return kube.create_node(name, **kwargs)

        hami = HamiScheduler(plane, [f"--node-lock-timeout={LOCK_TIMEOUT}"])
        s = Stack(plane, kube, namespace, hami, make_node)
        made.append((s, kube, nodes))
        hami.start()
        plane.start_scheduler(extender_config(hami))
        s.plugin = FakeDevicePlugin(plane, f"hami-e2e/run={namespace}")
        s.plugin.start()
        return s

    yield start
    for s, kube, nodes in made:
        assert s.plugin is not None
        s.plugin.stop()
        s.hami.stop()
        for scheduler in list(s.plane.schedulers):
            scheduler.stop()
            s.plane.schedulers.remove(scheduler)
        for pod in kube.list_pods(s.namespace):
            kube.delete_pod(s.namespace, pod["metadata"]["name"])
        for node in nodes:
            kube.delete_node(node)
        kube.close()
        assert s.plugin.error is None, f"the fake device plugin failed: {s.plugin.error!r}"
        assert set(s.hami.exit_codes) == {0}, "hami did not shut down cleanly on SIGTERM"


def cluster_and_burst(s: Stack) -> tuple[Usage, float]:
    """The nodes, then :data:`PODS` pods at once; returns the capacity and when the burst started."""
    for i in range(NODES):
        s.node(f"n{i}", gpus=CARDS, mem=16000)
    capacity = {f"GPU-{n}-{c}": (10, 16000, 100) for n in s.nodes for c in range(CARDS)}
    started = time.monotonic()
    for i in range(PODS):
        s.pod(f"p{i:02}", gpu_limits(mem=4000, cores=25))
    return capacity, started


def some_bound(s: Stack, count: int = 3) -> None:
    wait_until(lambda: sum(map(is_bound, s.pods())) >= count, interval=0.05, description=f"{count} pods bound")


def test_apiserver_hanging_mid_burst_keeps_the_invariants(fault_plane: ControlPlane, fault_stack: FaultStack) -> None:
    s = fault_stack(fault_plane)
    capacity, _ = cluster_and_burst(s)
    some_bound(s)

    fault_plane.pause_apiserver()  # SIGSTOP: every open request and watch hangs
    try:
        time.sleep(3)
    finally:
        fault_plane.resume_apiserver()

    check_invariants(s.kube, s.namespace, s.hami, capacity, s.nodes, bound=FIT)


def test_apiserver_crashing_mid_burst_keeps_the_invariants(
    fault_plane: ControlPlane, fault_stack: FaultStack, capsys: pytest.CaptureFixture[str]
) -> None:
    s = fault_stack(fault_plane)
    capacity, _ = cluster_and_burst(s)
    some_bound(s)

    fault_plane.kill_apiserver()  # SIGKILL: connections reset; etcd keeps the data
    time.sleep(1)
    restart = fault_plane.start_apiserver()
    restarted = time.monotonic()

    check_invariants(s.kube, s.namespace, s.hami, capacity, s.nodes, bound=FIT)
    with capsys.disabled():
        print(
            f"\n[hami e2e] kube-apiserver SIGKILLed mid-burst: back in {restart:.1f} s; all {FIT} pods bound and "
            f"at rest {time.monotonic() - restarted:.1f} s later"
        )


def test_a_429_storm_still_binds_every_pod_and_keeps_the_invariants(
    throttled_plane: ControlPlane, fault_stack: FaultStack, capsys: pytest.CaptureFixture[str]
) -> None:
    s = fault_stack(throttled_plane)
    capacity, started = cluster_and_burst(s)

    wait_until(lambda: sum(map(is_bound, s.pods())) >= FIT, interval=0.1, timeout=240, description="24 pods bound")
    elapsed = time.monotonic() - started
    check_invariants(s.kube, s.namespace, s.hami, capacity, s.nodes, bound=FIT)

    log = s.hami.log()
    assert "too many requests" in log.lower(), "the API server never answered 429: the storm did not happen"
    assert "relisting" not in log, "a throttled watch relisted instead of resuming"
    with capsys.disabled():
        print(f"\n[hami e2e] 429 storm: {FIT} pods bound in {elapsed:.1f} s ({FIT / elapsed:.1f} pods/s)")


def as_host(name: str, namespace: str) -> list[str]:
    """Run a command under its own host name (a UTS namespace), as if in pod ``namespace/name``: kube-scheduler
    campaigns for the Lease as ``<host>_<uuid>`` and hami follows it by that host name."""
    script = f'hostname {name} && exec env POD_NAME={name} POD_NAMESPACE={namespace} "$@"'
    return ["unshare", "--uts", "sh", "-c", script, "sh"]


def leader_of(kube: KubeClient, namespace: str, names: list[str]) -> str | None:
    roles = {n: (kube.get_pod(namespace, n)["metadata"].get("labels") or {}).get(ROLE) for n in names}
    leaders = [n for n, role in roles.items() if role == "leader"]
    return leaders[0] if len(leaders) == 1 and all(roles.values()) else None


ROLE = "hami.io/scheduler-role"
RELEASE_NAMESPACE = "hami-system"  # where the chart's Role lets hami read the Lease (tests/e2e/identities.py)


def test_killing_the_leader_mid_burst_hands_over_and_keeps_the_invariants(
    fault_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    kube = fault_plane.client()
    namespace = kube.create_namespace()  # the workload
    system = kube.create_namespace()  # the replicas' own pod objects, which hami labels with its role
    names = ["hami-a", "hami-b"]
    replicas: dict[str, tuple[HamiScheduler, Scheduler]] = {}
    plugin = FakeDevicePlugin(fault_plane, f"hami-e2e/run={namespace}")
    made_nodes: list[str] = []

    def make_node(name: str, **kwargs: Any) -> dict[str, Any]:
        made_nodes.append(name)
        return kube.create_node(name, **kwargs)

    try:
        for name in names:  # two replicas: each a hami and a kube-scheduler sharing a host name, as in a pod
            kube.create_pod(system, name, scheduler_name="nobody")
            hami = HamiScheduler(
                fault_plane,
                [
                    f"--node-lock-timeout={LOCK_TIMEOUT}",
                    "--leader-elect",
                    f"--leader-elect-resource-namespace={RELEASE_NAMESPACE}",
                ],
                wrapper=as_host(name, system),
                log_name=name,
            )
            hami.start()
            config = extender_config(hami) | {
                "leaderElection": {
                    "leaderElect": True,
                    "resourceName": "hami-scheduler",
                    "resourceNamespace": RELEASE_NAMESPACE,
                    "leaseDuration": "4s",
                    "renewDeadline": "3s",
                    "retryPeriod": "1s",
                }
            }
            scheduler = fault_plane.start_scheduler(
                config, name=f"kube-scheduler-{name}", wrapper=as_host(name, namespace)
            )
            replicas[name] = (hami, scheduler)
        leader = wait_until(lambda: leader_of(kube, system, names), description="one replica labelled leader")
        follower = next(n for n in names if n != leader)
        s = Stack(fault_plane, kube, namespace, replicas[leader][0], make_node)
        plugin.start()
        capacity, _ = cluster_and_burst(s)
        some_bound(s)

        killed = time.monotonic()
        hami, scheduler = replicas[leader]  # the leader's pod dies: both its containers, at once
        hami.kill()
        assert scheduler.process.popen is not None
        os.killpg(scheduler.process.popen.pid, signal.SIGKILL)

        wait_until(lambda: leader_of(kube, system, [follower]) == follower, description="the follower leads")
        handed_over = time.monotonic() - killed
        check_invariants(kube, namespace, replicas[follower][0], capacity, s.nodes, bound=FIT)
        assert "is the leader now" in replicas[follower][0].log()
        with capsys.disabled():
            print(f"\n[hami e2e] leader killed mid-burst: the follower labelled leader {handed_over:.1f} s later")
    finally:
        plugin.stop()
        for hami, scheduler in replicas.values():
            hami.stop()
            scheduler.stop()
            fault_plane.schedulers.remove(scheduler)
        for ns in (namespace, system):
            for pod in kube.list_pods(ns):
                kube.delete_pod(ns, pod["metadata"]["name"])
        for node in made_nodes:
            kube.delete_node(node)
        kube.close()
