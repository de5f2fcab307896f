"""The runtime's watch handlers (handshake, quarantine report, lock release) and leadership, over MemoryCluster."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

import hami.server.leadership as leadership_module
import hami.server.runtime as runtime_module
from hami.config import SchedulerSettings, default_device_config
from hami.devices.hygon import HYGON_KEYS
from hami.k8s.config import KubeConfig
from hami.k8s.records import Lease, LeaseSpec, ObjectRef
from hami.k8s.tasks import Supervisor
from hami.protocol import keys
from hami.protocol.nodelock import NodeLock, encode_node_lock
from hami.protocol.objects import Node, ObjectMeta, Pod
from hami.server.nodes import REGISTRATION_REFUSED
from hami.server.runtime import Runtime, api_client_settings, parse_bind
from tests.unit.server.support import NOW_DT, NS, World, garbage_node, gpu_node, gpu_pod, make_world


@dataclass
class Wired:
    runtime: Runtime
    world: World
    supervisor: Supervisor

    def node_event(self, node: Node, deleted: bool = False) -> None:
        """Deliver a node (as stored in the cluster) to the runtime's node handler."""
        recorder = self.world.recorder
        cluster = self.world.cluster
        handlers = self.runtime.watch_handlers(
            self.world.extender, cluster, self.world.locker, recorder, self.supervisor
        )  # type: ignore[arg-type]
        handlers[0](node, deleted)

    def pod_event(self, pod: Pod, deleted: bool = False) -> None:
        recorder, cluster = self.world.recorder, self.world.cluster
        handlers = self.runtime.watch_handlers(
            self.world.extender, cluster, self.world.locker, recorder, self.supervisor
        )  # type: ignore[arg-type]
        handlers[1](pod, deleted)

    async def settle(self) -> None:
        """Let the handlers' pending checks and background writes finish."""
        while self.supervisor.running or self.runtime.housekeeping.left_behind:
            if self.supervisor.running:
                await self.supervisor.drain()
            else:
                await asyncio.sleep(0.01)
        await self.world.recorder.flush()


def make_runtime(**settings: object) -> Runtime:
    runtime = Runtime(
        SchedulerSettings(**settings),  # type: ignore[arg-type]
        default_device_config(),
        KubeConfig(server="https://127.0.0.1:6443", token="t0ken"),
        identity="sched-1",
    )
    runtime.housekeeping.left_behind_grace = 0.0  # a lock the device plugin left behind is checked at once
    return runtime


@pytest.fixture
async def wired() -> AsyncIterator[Wired]:
    runtime = make_runtime()
    world = make_world()
    world.extender.state = runtime.state  # the runtime's state, so its handlers and the extender agree
    async with Supervisor() as supervisor:
        yield Wired(runtime, world, supervisor)


def stored(wired: Wired, node: Node) -> Node:
    return wired.world.cluster.put_node(node)


# --- node handshake ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "stamped"),
    [
        pytest.param(gpu_node("n1"), True, id="registered-node-without-handshake-is-stamped"),
        pytest.param(
            gpu_node("n1", annotations={keys.NVIDIA_HANDSHAKE: "Reported 2024-05-01 10:00:00 +0800 CST"}),
            True,
            id="legacy-reported-is-stamped-again",
        ),
        pytest.param(
            gpu_node("n1", annotations={keys.NVIDIA_HANDSHAKE: "Requesting_2026-08-21 06:20:39"}),
            False,
            id="already-requesting-is-left-alone",
        ),
        pytest.param(Node(metadata=ObjectMeta(name="n1")), False, id="node-without-the-vendor-is-not-stamped"),
    ],
)
async def test_handshake_is_stamped_only_on_nodes_that_register_the_vendor(
    wired: Wired, node: Node, stamped: bool
) -> None:
    before = datetime.now().replace(microsecond=0)
    wired.node_event(stored(wired, node))
    await wired.settle()

    value = wired.world.cluster.nodes["n1"].metadata.annotations.get(keys.NVIDIA_HANDSHAKE, "")
    if stamped:
        assert value.startswith("Requesting_")
        moment = datetime.strptime(value.removeprefix("Requesting_"), "%Y-%m-%d %H:%M:%S")
        assert before <= moment <= datetime.now()  # local wall time, as HAMi writes it
    else:
        assert value == node.metadata.annotations.get(keys.NVIDIA_HANDSHAKE, "")
    assert ("patch_node_annotations" in wired.world.cluster.calls) is stamped
    assert wired.world.cluster.nodes["n1"].metadata.annotations.get(HYGON_KEYS.handshake or "") is None


@pytest.mark.parametrize(
    ("holder", "stamped"), [("sched-1_4f9c", True), ("sched-2_77aa", False)], ids=["leader", "follower"]
)
async def test_with_leader_election_only_the_leader_stamps_the_handshake(
    wired: Wired, holder: str, stamped: bool
) -> None:
    """Every replica sees the device plugin's ``Reported``: one ``Requesting_`` PATCH, not one per replica."""
    wired.runtime.leadership.elect = True  # --leader-elect
    wired.runtime.leadership.on_lease(lease(holder, datetime.now(UTC)), False)

    wired.node_event(stored(wired, gpu_node("n1")))
    await wired.settle()

    value = wired.world.cluster.nodes["n1"].metadata.annotations.get(keys.NVIDIA_HANDSHAKE, "")
    assert value.startswith("Requesting_") is stamped
    assert ("patch_node_annotations" in wired.world.cluster.calls) is stamped


async def test_no_handshake_is_written_before_the_caches_are_synced(wired: Wired) -> None:
    """A start on thousands of nodes stamps every one: the stamps wait for the first lists, not the other way."""
    synced = False
    wired.runtime.nodes.ready = lambda: synced
    wired.node_event(stored(wired, gpu_node("n1")))
    await asyncio.sleep(0.3)  # the writer looked several times
    assert "patch_node_annotations" not in wired.world.cluster.calls
    synced = True
    await wired.settle()
    assert wired.world.cluster.nodes["n1"].metadata.annotations[keys.NVIDIA_HANDSHAKE].startswith("Requesting_")


async def test_handshakes_are_written_one_node_at_a_time_each_node_once(
    wired: Wired, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One write in flight, through the EventRecorder's cluster (its own rate limiter), each node once even when
    its events repeat before its turn."""
    cluster = wired.world.cluster
    in_flight, most, written = 0, 0, []
    original = cluster.patch_node_annotations

    async def patch(name: str, annotations: object, resource_version: str | None = None) -> Node:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)
        written.append(name)
        try:
            return await original(name, annotations, resource_version)  # type: ignore[arg-type]
        finally:
            in_flight -= 1

    monkeypatch.setattr(cluster, "patch_node_annotations", patch)
    names = [f"n{i}" for i in range(8)]
    for name in names:
        wired.node_event(stored(wired, gpu_node(name)))
    assert wired.runtime.nodes._writer() is wired.world.recorder.cluster  # the events' client and rate limiter
    wired.node_event(cluster.nodes["n3"])  # seen again before its turn: still one write
    await wired.settle()
    assert most == 1
    assert sorted(written) == sorted(names)
    assert not wired.runtime.nodes.pending
    assert not wired.runtime.nodes.stamping


# --- quarantine -------------------------------------------------------------------------------------------


async def test_garbage_registration_is_reported_once_on_the_node_and_cleared_when_fixed(wired: Wired) -> None:
    bad = stored(wired, garbage_node("bad"))

    wired.node_event(bad)
    wired.node_event(stored(wired, bad))  # another update (e.g. the kubelet's status): no second event
    await wired.settle()

    problem = "hami.io/node-nvidia-register: invalid JSON: object keys must be strings at position 2 (in '[{garbage')"
    events = [(e.involved, e.type, e.reason, e.message) for e in wired.world.cluster.events]
    assert events == [
        (
            ObjectRef("Node", "bad", "", "bad"),
            "Warning",
            REGISTRATION_REFUSED,
            f"NVIDIA devices of node bad are not scheduled: registration refused: {problem}",
        )
    ]
    assert wired.runtime.nodes.quarantined == {"bad": {"NVIDIA": problem}}

    wired.node_event(stored(wired, gpu_node("bad")))  # the device plugin writes a good registration

    assert wired.runtime.nodes.quarantined == {}
    assert wired.runtime.state.nodes["bad"].problems == {}


@pytest.mark.parametrize(
    ("holder", "events"),
    [
        pytest.param("sched-1_4f9c", 1, id="leader-writes-the-event"),
        pytest.param("sched-2_77aa", 0, id="follower-only-logs"),
        pytest.param("", 0, id="nobody-leads-only-logs"),
    ],
)
async def test_with_leader_election_only_the_leader_writes_the_refused_registration_event(
    wired: Wired, caplog: pytest.LogCaptureFixture, holder: str, events: int
) -> None:
    """Every replica sees the same node: one event per problem, not one per replica; each replica still logs it."""
    wired.runtime.leadership.elect = True  # --leader-elect
    wired.runtime.leadership.on_lease(lease(holder, datetime.now(UTC)), False)

    wired.node_event(stored(wired, garbage_node("bad")))
    await wired.settle()

    assert [e.reason for e in wired.world.cluster.events] == [REGISTRATION_REFUSED] * events
    assert any("node bad: NVIDIA registration refused" in r.getMessage() for r in caplog.records)
    assert set(wired.runtime.nodes.quarantined) == {"bad"}
    assert wired.runtime.state.nodes["bad"].problems  # refused on every replica alike


# --- node lock release ------------------------------------------------------------------------------------


def locked_node(wired: Wired, holder: str) -> Node:
    lock = encode_node_lock(NodeLock(NOW_DT, NS, holder))
    node = stored(wired, gpu_node("n1", annotations={keys.NODE_LOCK: lock, keys.NVIDIA_HANDSHAKE: "Requesting_x"}))
    wired.node_event(node)
    return node


def bound_pod(wired: Wired, name: str, phase: str = "Pending", bind_phase: str | None = None) -> Pod:
    pod = gpu_pod(name, phase=phase)
    pod.spec.node_name = "n1"
    if bind_phase is not None:
        pod.metadata.annotations[keys.BIND_PHASE] = bind_phase
    return wired.world.cluster.put_pod(pod)


@pytest.mark.parametrize(
    ("phase", "deleted"),
    [
        pytest.param("Pending", True, id="holder-deleted"),
        pytest.param("Succeeded", False, id="holder-succeeded"),
        pytest.param("Failed", False, id="holder-failed"),
    ],
)
async def test_lock_of_a_finished_or_deleted_holder_is_released_at_once(
    wired: Wired, phase: str, deleted: bool
) -> None:
    locked_node(wired, "holder")
    holder = bound_pod(wired, "holder", phase)
    if deleted:
        wired.world.cluster.delete_pod(NS, "holder")

    wired.pod_event(holder, deleted=deleted)
    await wired.settle()

    assert keys.NODE_LOCK not in wired.world.cluster.nodes["n1"].metadata.annotations


@pytest.mark.parametrize(
    ("bind_phase", "released"),
    [
        pytest.param("success", True, id="allocated"),
        pytest.param("failed", True, id="allocate-failed"),
        pytest.param("allocating", False, id="still-allocating"),
    ],
)
async def test_lock_left_behind_by_the_device_plugin_is_released_when_the_holder_is_done(
    wired: Wired, bind_phase: str, released: bool
) -> None:
    """The device plugin wrote the bind phase but its release was lost: the watch sees the phase and releases."""
    node = locked_node(wired, "holder")
    holder = bound_pod(wired, "holder", "Pending", bind_phase)

    wired.pod_event(holder)
    await wired.settle()

    left = wired.world.cluster.nodes["n1"].metadata.annotations.get(keys.NODE_LOCK)
    assert left == (None if released else node.metadata.annotations[keys.NODE_LOCK])


async def test_the_device_plugins_own_release_within_the_grace_costs_no_api_request(wired: Wired) -> None:
    """The plugin writes the bind phase, then releases: hami waits for that release instead of racing it."""
    wired.runtime.housekeeping.left_behind_grace = 0.05
    node = locked_node(wired, "holder")
    wired.pod_event(bound_pod(wired, "holder", "Pending", "success"))
    assert wired.runtime.housekeeping.left_behind  # a check is pending, nothing written yet
    del node.metadata.annotations[keys.NODE_LOCK]  # the device plugin's release, seen by the node watch
    wired.node_event(stored(wired, node))
    calls = len(wired.world.cluster.calls)

    await asyncio.sleep(0.1)
    await wired.settle()

    assert wired.world.cluster.calls[calls:] == []  # not even a read


async def test_a_pod_of_the_same_name_created_since_keeps_its_lock(wired: Wired) -> None:
    """The check reads the holder again: the lock now belongs to a new pod of that name, still being bound."""
    wired.runtime.housekeeping.left_behind_grace = 0.05
    node = locked_node(wired, "holder")
    wired.pod_event(bound_pod(wired, "holder", "Pending", "success"))
    wired.world.cluster.delete_pod(NS, "holder")
    wired.world.cluster.put_pod(gpu_pod("holder", phase="Pending"))  # recreated: unbound, being bound (same lock)

    await asyncio.sleep(0.1)
    await wired.settle()

    assert (
        wired.world.cluster.nodes["n1"].metadata.annotations[keys.NODE_LOCK]
        == node.metadata.annotations[keys.NODE_LOCK]
    )


async def test_lock_of_another_pod_is_kept_when_a_pod_finishes(wired: Wired) -> None:
    node = locked_node(wired, "holder")
    bound_pod(wired, "holder")
    other = bound_pod(wired, "other", "Succeeded")

    wired.pod_event(other)
    await wired.settle()

    assert (
        wired.world.cluster.nodes["n1"].metadata.annotations[keys.NODE_LOCK]
        == node.metadata.annotations[keys.NODE_LOCK]
    )


# --- leadership, binds ------------------------------------------------------------------------------------


def lease(holder: str, renewed: datetime, duration: int = 15) -> Lease:
    stamp = renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return Lease(spec=LeaseSpec(holder_identity=holder, lease_duration_seconds=duration, renew_time=stamp))


@pytest.mark.parametrize(
    ("holder", "age", "leader"),
    [
        pytest.param("sched-1_4f9c", 0, True, id="our-host-holds-a-fresh-lease"),
        pytest.param("sched-10_4f9c", 0, False, id="prefix-of-another-host-is-not-us"),
        pytest.param("sched-1_4f9c", 60, False, id="our-lease-expired"),
        pytest.param("", 0, False, id="nobody-holds-it"),
    ],
)
def test_leadership_is_an_exact_host_match_on_a_live_lease(holder: str, age: int, leader: bool) -> None:
    runtime = make_runtime(leader_elect=True)
    runtime.leadership.on_lease(lease(holder, datetime.now(UTC) - timedelta(seconds=age)), False)

    assert runtime.leadership.is_leader() is leader


def test_without_leader_election_every_replica_leads() -> None:
    runtime = make_runtime(leader_elect=False)
    runtime.leadership.on_lease(lease("someone-else_1", datetime.now(UTC)), False)

    assert runtime.leadership.is_leader() is True


def test_a_deleted_lease_ends_leadership() -> None:
    runtime = make_runtime(leader_elect=True)
    runtime.leadership.on_lease(lease("sched-1_1", datetime.now(UTC)), False)
    runtime.leadership.on_lease(Lease(), True)

    assert runtime.leadership.is_leader() is False


@pytest.mark.parametrize(
    ("bind", "expected"),
    [
        pytest.param(":9395", ("0.0.0.0", 9395), id="port-only-listens-everywhere"),
        pytest.param("127.0.0.1:8080", ("127.0.0.1", 8080), id="host-and-port"),
        pytest.param("[::1]:443", ("::1", 443), id="ipv6"),
    ],
)
def test_parse_bind(bind: str, expected: tuple[str, int]) -> None:
    assert parse_bind(bind) == expected


@pytest.mark.parametrize(
    ("vendor", "key", "value", "fragment"),
    [
        pytest.param(
            "NVIDIA",
            keys.NVIDIA_REGISTER,
            '[{"id":"GPU-a","count":10,"devmem":10000,"devcore":100,"health":true},'
            '{"id":"GPU-a","index":1,"count":10,"devmem":10000,"devcore":100,"health":true}]',
            "hami.io/node-nvidia-register devices[1].id: device id repeated (index 1; devices[0] has the same id)",
            id="nvidia-duplicate-id",
        ),
        pytest.param(
            "DCU",
            HYGON_KEYS.register,
            "DCU-0,4,-16384,100,DCU-Z100,0,true,0,hami-core:",
            "hami.io/node-dcu-register devices[0].devmem: device 'DCU-0' (index 0): the memory in MiB must be between"
            " 0 and 2147483647 (got -16384)",
            id="hygon-negative-memory",
        ),
    ],
)
async def test_hostile_registration_is_reported_on_the_node_naming_node_device_field_and_value(
    wired: Wired, vendor: str, key: str, value: str, fragment: str, caplog: pytest.LogCaptureFixture
) -> None:
    node = stored(wired, Node(metadata=ObjectMeta(name="gpu-7", annotations={key: value})))

    wired.node_event(node)
    await wired.settle()

    [event] = wired.world.cluster.events
    assert (event.involved.name, event.type, event.reason) == ("gpu-7", "Warning", REGISTRATION_REFUSED)
    assert event.message.startswith(f"{vendor} devices of node gpu-7 are not scheduled: registration refused: ")
    assert fragment in event.message
    assert fragment in wired.runtime.nodes.quarantined["gpu-7"][vendor]
    assert any("gpu-7" in r.getMessage() and fragment in r.getMessage() for r in caplog.records)
    samples = wired.runtime.metrics.registry.get_sample_value("hami_quarantined_nodes", {"vendor": vendor})
    assert samples == 1


@pytest.mark.parametrize(("kube_timeout", "expected"), [(0.0, 30.0), (7.5, 7.5)], ids=["default", "given"])
def test_kube_timeout_bounds_every_api_request(kube_timeout: float, expected: float) -> None:
    settings = SchedulerSettings(kube_timeout=kube_timeout, kube_qps=50, kube_burst=70)
    client = api_client_settings(settings)
    assert (client.request_timeout, client.qps, client.burst) == (expected, 50, 70)


async def test_the_pod_of_this_replica_carries_its_role_and_follows_the_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leadership_module, "ROLE_CHECK_SECONDS", 0.01)
    runtime = make_runtime(leader_elect=True)
    world = make_world()
    own = world.add_pod(gpu_pod("hami-scheduler-abc"))
    labels = lambda: world.cluster.pods[(NS, own.metadata.name)].metadata.labels.get(keys.SCHEDULER_ROLE_LABEL)  # noqa: E731
    task = asyncio.create_task(runtime.leadership.label_role(world.cluster, runtime.metrics, NS, own.metadata.name))  # type: ignore[arg-type]
    try:
        await wait_for(lambda: labels() == "follower")
        runtime.leadership.on_lease(lease("sched-1_4f9c", datetime.now(UTC)), False)  # our kube-scheduler won the Lease
        await wait_for(lambda: labels() == "leader")
        runtime.leadership.on_lease(lease("sched-1_4f9c", datetime.now(UTC) - timedelta(seconds=60)), False)  # expired
        await wait_for(lambda: labels() == "follower")
    finally:
        task.cancel()
    assert runtime.leadership.role_written == "follower"


async def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def test_a_disabled_family_is_not_scheduled() -> None:
    """``--disable-devices hygon``: the runtime's registry (and so its webhook, filter and ledger) has no Hygon."""
    assert "DCU" in make_runtime().vendors
    runtime = make_runtime(disable_devices="hygon")
    assert "DCU" not in runtime.vendors
    assert "DCU" not in runtime.state.vendors
    assert "NVIDIA" in runtime.vendors


def test_the_heap_settles_without_a_full_collection_and_the_collector_runs_again() -> None:
    runtime_module.hold_collector()
    try:
        assert not gc.isenabled()
        kept = [[i] for i in range(1000)]  # long-lived, tracked objects made while the collector is held
        collections = gc.get_stats()[2]["collections"]
        runtime_module.settle_heap()
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(kept)  # moved out of the collector's sight
        assert gc.get_stats()[2]["collections"] == collections  # no full pass over the new heap
    finally:
        gc.unfreeze()
        gc.enable()
