from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime, timedelta

import pytest

from hami.errors import AnnotationError, ApiError, Conflict, LockContention, NotFound
from hami.k8s.memory import MemoryCluster
from hami.k8s.nodelock import RELEASE_GRACE, NodeLocker
from hami.protocol.keys import BIND_PHASE, NODE_LOCK
from hami.protocol.nodelock import LOCK_CONTENTION, NodeLock, decode_node_lock, encode_node_lock
from hami.protocol.objects import Node, ObjectMeta, Pod, PodSpec, PodStatus
from tests.unit.k8s.conftest import NOW, FakeSleep, Seam

TIMEOUT = timedelta(minutes=5)


def lock_value(namespace: str = "", name: str = "", *, age: timedelta = timedelta(0)) -> str:
    return encode_node_lock(NodeLock(NOW - age, namespace, name))


def written(namespace: str, name: str) -> NodeLock:
    """The lock as it reads back from the node: the wire format keeps whole seconds."""
    return decode_node_lock(encode_node_lock(NodeLock(NOW, namespace, name)))


def node(lock: str | None = None, name: str = "gpu-1") -> Node:
    annotations = {"other": "x"} if lock is None else {"other": "x", NODE_LOCK: lock}
    return Node(metadata=ObjectMeta(name=name, annotations=annotations))


def pod(name: str, phase: str = "Running", namespace: str = "default", *, bind_phase: str = "", on: str = "") -> Pod:
    """A pod; ``bind_phase`` sets ``hami.io/bind-phase``, ``on`` binds it to that node."""
    annotations = {BIND_PHASE: bind_phase} if bind_phase else {}
    return Pod(
        metadata=ObjectMeta(name=name, namespace=namespace, annotations=annotations),
        spec=PodSpec(node_name=on),
        status=PodStatus(phase=phase),
    )


def locker(cluster: object, sleep: FakeSleep | None = None, **kwargs: object) -> NodeLocker:
    return NodeLocker(cluster, timeout=TIMEOUT, clock=lambda: NOW, sleep=sleep or FakeSleep(), **kwargs)  # type: ignore[arg-type]


def lock_on(memory: MemoryCluster, name: str = "gpu-1") -> str | None:
    return memory.nodes[name].metadata.annotations.get(NODE_LOCK)


# --- acquire ----------------------------------------------------------------------------------------------


async def test_a_free_node_is_locked_with_the_pods_identity(seam: Seam) -> None:
    seam.backing.put_node(node())
    got = await locker(seam.cluster).acquire("gpu-1", "default", "p1")
    assert got == written("default", "p1")
    assert lock_on(seam.backing) == encode_node_lock(got)
    assert seam.backing.nodes["gpu-1"].metadata.annotations["other"] == "x"


async def test_locking_again_for_the_same_pod_is_reentrant_and_writes_nothing() -> None:
    memory = MemoryCluster(nodes=[node(lock_value("default", "p1", age=timedelta(minutes=1)))])
    got = await locker(memory).acquire("gpu-1", "default", "p1")
    assert got == decode_node_lock(lock_value("default", "p1", age=timedelta(minutes=1)))
    assert memory.calls == ["get_node"]


@pytest.mark.parametrize(
    ("holder_ns", "holder"), [("default", "p10"), ("other", "p1"), ("fault", "p1")], ids=["name", "ns", "ns-suffix"]
)
async def test_ownership_is_exact_equality_not_a_suffix(holder_ns: str, holder: str) -> None:
    memory = MemoryCluster(nodes=[node(lock_value(holder_ns, holder))], pods=[pod(holder, namespace=holder_ns)])
    with pytest.raises(LockContention):
        await locker(memory).acquire("gpu-1", "default", "p1")


async def test_a_live_holder_means_contention_naming_holder_and_time(seam: Seam) -> None:
    value = lock_value("ml", "trainer-0", age=timedelta(minutes=2))
    seam.backing.put_node(node(value))
    seam.backing.put_pod(pod("trainer-0", namespace="ml"))
    with pytest.raises(LockContention) as caught:
        await locker(seam.cluster).acquire("gpu-1", "default", "p1")
    since = decode_node_lock(value).timestamp
    assert str(caught.value) == (
        f"node gpu-1 is locked by ml/trainer-0 since {since.isoformat()} (expires after 300s): node lock contention"
    )
    assert (caught.value.node, caught.value.holder, caught.value.since) == ("gpu-1", "ml/trainer-0", since)
    assert str(caught.value).endswith(LOCK_CONTENTION)  # HAMi's sentinel, which PodGroup retries look for
    assert lock_on(seam.backing) == value


async def test_a_young_legacy_lock_is_contention_without_an_owner() -> None:
    memory = MemoryCluster(nodes=[node(NOW.isoformat())])
    with pytest.raises(LockContention, match=r"locked \(legacy lock, no owner recorded\) since"):
        await locker(memory).acquire("gpu-1", "default", "p1")


@pytest.mark.parametrize(
    ("value", "pods"),
    [
        (lock_value("default", "old", age=TIMEOUT + timedelta(seconds=1)), [pod("old")]),
        ((NOW - TIMEOUT - timedelta(seconds=1)).isoformat(), []),
        (lock_value("default", "ghost"), []),
        (lock_value("default", "done", age=timedelta(seconds=5)), [pod("done", "Succeeded")]),
        (lock_value("default", "crashed"), [pod("crashed", "Failed")]),
        (lock_value("default", "p1", age=TIMEOUT + timedelta(seconds=1)), [pod("p1")]),
        (lock_value("default", "served"), [pod("served", "Pending", bind_phase="success", on="gpu-1")]),
        (lock_value("default", "refused"), [pod("refused", "Pending", bind_phase="failed", on="gpu-1")]),
    ],
    ids=[
        "expired",
        "expired-legacy",
        "holder-deleted",
        "holder-succeeded",
        "holder-failed",
        "own-expired-restamped",
        "holder-allocated-release-lost",
        "holder-allocate-failed-release-lost",
    ],
)
async def test_stale_locks_are_taken_over(seam: Seam, value: str, pods: list[Pod]) -> None:
    seam.backing.put_node(node(value))
    for p in pods:
        seam.backing.put_pod(p)
    got = await locker(seam.cluster).acquire("gpu-1", "default", "p1")
    assert got == written("default", "p1")
    assert lock_on(seam.backing) == encode_node_lock(got)


@pytest.mark.parametrize(
    "holder",
    [
        pod("h", "Pending", bind_phase="allocating", on="gpu-1"),  # its device plugin is serving it now
        pod("h", "Running", bind_phase="allocating", on="gpu-1"),
        pod("h", "Pending", bind_phase="success"),  # not bound: the phase is from an earlier bind attempt
        pod("h", "Pending", bind_phase="failed"),  # not bound: about to bind again
        pod("h", "Pending", on="gpu-1"),  # bound, no bind phase (a foreign scheduler's pod)
    ],
    ids=["bound-allocating", "running-allocating", "unbound-success", "unbound-failed", "bound-no-phase"],
)
async def test_a_holder_whose_allocate_may_not_be_over_keeps_its_lock(holder: Pod) -> None:
    value = lock_value("default", "h")
    memory = MemoryCluster(nodes=[node(value)], pods=[holder])
    with pytest.raises(LockContention) as caught:
        await locker(memory).acquire("gpu-1", "default", "p1")
    assert caught.value.holder == "default/h"
    assert lock_on(memory) == value
    assert await locker(memory).release_if_stale("gpu-1") is False
    assert lock_on(memory) == value


async def test_the_bind_phase_frees_only_hamis_lock_not_a_vendors_own() -> None:
    """A vendor's own lock is released by its own device plugin, which does not follow the bind phase."""
    value = lock_value("default", "h")
    vendor_key = "vendor.example/lock"
    gpu = Node(metadata=ObjectMeta(name="gpu-1", annotations={vendor_key: value}))
    memory = MemoryCluster(nodes=[gpu], pods=[pod("h", "Pending", bind_phase="success", on="gpu-1")])
    with pytest.raises(LockContention):
        await locker(memory).acquire("gpu-1", "default", "p1", key=vendor_key)
    assert await locker(memory).release_if_stale("gpu-1", key=vendor_key) is False
    assert memory.nodes["gpu-1"].metadata.annotations[vendor_key] == value


async def test_a_watched_live_holder_is_contention_without_a_request() -> None:
    """The node watch shows another pod's young lock and the pod watch shows that pod running: contention at once,
    nothing read or written (a bind queued behind a hand-over costs no request until the watch shows the release)."""
    value = lock_value("ml", "trainer-0", age=timedelta(seconds=3))
    memory = MemoryCluster(nodes=[node(value)], pods=[pod("trainer-0", namespace="ml")])
    store = {("ml", "trainer-0"): pod("trainer-0", namespace="ml")}
    with pytest.raises(LockContention) as caught:
        await locker(memory).acquire(
            "gpu-1", "default", "p1", hint=node(value), watched=lambda ns, name: store.get((ns, name))
        )
    assert (caught.value.node, caught.value.holder) == ("gpu-1", "ml/trainer-0")
    assert caught.value.since == decode_node_lock(value).timestamp
    assert memory.calls == []


@pytest.mark.parametrize(
    ("value", "watched"),
    [
        (lock_value("default", "ghost"), []),
        (lock_value("default", "done"), [pod("done", "Succeeded")]),
        (lock_value("default", "old", age=TIMEOUT + timedelta(seconds=1)), [pod("old")]),
        ((NOW - TIMEOUT - timedelta(seconds=1)).isoformat(), []),
        (
            lock_value("default", "served", age=RELEASE_GRACE),
            [pod("served", "Pending", bind_phase="success", on="gpu-1")],
        ),
        (lock_value("default", "failing"), [pod("failing", "Pending", bind_phase="failed", on="gpu-1")]),
    ],
    ids=[
        "holder-not-watched",
        "holder-finished",
        "expired",
        "expired-legacy",
        "holder-allocated-release-lost",
        "holder-failed",
    ],
)
async def test_a_watched_lock_that_may_be_stale_is_read_afresh_and_taken_over(value: str, watched: list[Pod]) -> None:
    """Only a live holder per the watches skips the reads: a lock that may be stale is decided on a fresh read
    (and the holder's own GET), as without the watches."""
    memory = MemoryCluster(nodes=[node(value)], pods=[p for p in watched if p.metadata.name != "ghost"])
    store = {(p.metadata.namespace, p.metadata.name): p for p in watched}
    got = await locker(memory).acquire(
        "gpu-1", "default", "p1", hint=node(value), watched=lambda ns, name: store.get((ns, name))
    )
    assert got == written("default", "p1")
    assert memory.calls[0] == "get_node"


async def test_a_young_lock_whose_holder_just_succeeded_waits_for_the_release_without_a_request() -> None:
    """HAMi's device plugin writes ``success`` and then releases the lock: a bind that sees the first through the
    pod watch and the lock still on the node waits for the release (contention, nothing read or written) instead of
    reading both and taking the lock over."""
    value = lock_value("default", "served", age=RELEASE_GRACE - timedelta(seconds=1))
    served = pod("served", "Pending", bind_phase="success", on="gpu-1")
    memory = MemoryCluster(nodes=[node(value)], pods=[served])
    with pytest.raises(LockContention) as caught:
        await locker(memory).acquire("gpu-1", "default", "p1", hint=node(value), watched=lambda ns, n: served)
    assert caught.value.holder == "default/served"
    assert memory.calls == []


async def test_a_watched_lock_that_is_already_gone_is_read_afresh() -> None:
    """The watch is behind: it still shows the holder's lock, the node has none any more. Contention is raised
    from the watch (the release the watch then shows wakes the bind); the holder finished meanwhile: read afresh."""
    value = lock_value("ml", "trainer-0")
    memory = MemoryCluster(nodes=[node()], pods=[])
    store = {("ml", "trainer-0"): pod("trainer-0", "Succeeded", namespace="ml")}
    got = await locker(memory).acquire(
        "gpu-1", "default", "p1", hint=node(value), watched=lambda ns, name: store.get((ns, name))
    )
    assert got == written("default", "p1")
    assert memory.calls == ["get_node", "patch_node_annotations"]


async def test_a_race_lost_to_a_watched_live_holder_reads_the_node_but_not_the_holder() -> None:
    """The watch showed the node free, another bind won the write: the node is read again, and its new holder,
    alive per the pod watch, is contention without a GET of that pod."""
    memory = MemoryCluster(nodes=[node(lock_value("default", "winner"))], pods=[pod("winner")])
    store = {("default", "winner"): pod("winner")}
    stale = node()
    stale.metadata.resource_version = "stale"
    with pytest.raises(LockContention):
        await locker(memory).acquire("gpu-1", "default", "p1", hint=stale, watched=lambda ns, n: store.get((ns, n)))
    assert "get_pod" not in memory.calls
    assert memory.calls.count("get_node") == 1


async def test_an_unparsable_lock_is_never_overwritten() -> None:
    memory = MemoryCluster(nodes=[node("lock")])
    with pytest.raises(AnnotationError) as caught:
        await locker(memory).acquire("gpu-1", "default", "p1")
    assert caught.value.field == NODE_LOCK
    assert lock_on(memory) == "lock"


async def test_a_missing_node_is_not_found() -> None:
    with pytest.raises(NotFound):
        await locker(MemoryCluster()).acquire("gpu-1", "default", "p1")


class Racing(MemoryCluster):
    """Before each of the first ``races`` lock writes, another writer changes the node first."""

    def __init__(self, racer_writes: list[Mapping[str, str | None]], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.racer_writes = list(racer_writes)

    async def patch_node_annotations(
        self, name: str, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> Node:
        if self.racer_writes:
            await super().patch_node_annotations(name, self.racer_writes.pop(0))
        return await super().patch_node_annotations(name, annotations, resource_version)


async def test_a_lost_race_rereads_and_retries() -> None:
    cluster = Racing([{"unrelated": "1"}], nodes=[node()])
    got = await locker(cluster).acquire("gpu-1", "default", "p1")
    assert lock_on(cluster) == encode_node_lock(got)
    assert cluster.calls.count("get_node") == 2


async def test_a_race_lost_to_another_pod_ends_in_contention() -> None:
    cluster = Racing([{NODE_LOCK: lock_value("default", "rival")}], nodes=[node()], pods=[pod("rival")])
    with pytest.raises(LockContention, match="by default/rival"):
        await locker(cluster).acquire("gpu-1", "default", "p1")
    assert lock_on(cluster) == lock_value("default", "rival")


async def test_attempts_are_bounded() -> None:
    cluster = Racing([{"n": str(i)} for i in range(3)], nodes=[node()])
    with pytest.raises(Conflict):
        await locker(cluster, attempts=3).acquire("gpu-1", "default", "p1")
    assert lock_on(cluster) is None


async def test_transport_errors_retry_with_growing_pauses_other_errors_do_not() -> None:
    memory = MemoryCluster(nodes=[node()])
    memory.fail("patch_node_annotations", ApiError("connection reset", 0), times=2)
    sleep = FakeSleep()
    await locker(memory, sleep).acquire("gpu-1", "default", "p1")
    assert sleep.delays == pytest.approx([0.1, 0.2])
    memory.fail("patch_node_annotations", ApiError("forbidden", 403))
    with pytest.raises(ApiError, match="forbidden"):
        await locker(memory).acquire("gpu-1", "default", "p2")


class Yielding(MemoryCluster):
    """Lets other tasks run inside every call, as a real API round trip does."""

    async def get_node(self, name: str) -> Node:
        await asyncio.sleep(0)
        return await super().get_node(name)

    async def patch_node_annotations(
        self, name: str, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> Node:
        await asyncio.sleep(0)
        return await super().patch_node_annotations(name, annotations, resource_version)


async def test_of_many_concurrent_acquirers_exactly_one_wins() -> None:
    pods = [pod(f"p{i}") for i in range(8)]
    cluster = Yielding(nodes=[node()], pods=pods)
    results = await asyncio.gather(
        *(locker(cluster).acquire("gpu-1", "default", f"p{i}") for i in range(8)), return_exceptions=True
    )
    winners = [r for r in results if isinstance(r, NodeLock)]
    assert len(winners) == 1
    assert all(isinstance(r, LockContention) for r in results if r not in winners)
    assert lock_on(cluster) == encode_node_lock(winners[0])


# --- release ----------------------------------------------------------------------------------------------


async def test_the_owner_releases_its_lock(seam: Seam) -> None:
    seam.backing.put_node(node(lock_value("default", "p1")))
    assert await locker(seam.cluster).release("gpu-1", "default", "p1") is True
    assert lock_on(seam.backing) is None
    assert seam.backing.nodes["gpu-1"].metadata.annotations == {"other": "x"}


@pytest.mark.parametrize(
    ("value", "released"),
    [
        (lock_value("default", "p2"), False),
        (lock_value("other", "p1"), False),
        (NOW.isoformat(), True),  # legacy locks name no owner: anyone may release them, as in HAMi
        ("garbage", False),
    ],
    ids=["other-pod", "other-namespace", "legacy", "unparsable"],
)
async def test_release_never_removes_someone_elses_lock(value: str, released: bool) -> None:
    memory = MemoryCluster(nodes=[node(value)])
    assert await locker(memory).release("gpu-1", "default", "p1") is released
    assert lock_on(memory) == (None if released else value)


async def test_release_without_a_lock_or_node_is_a_no_op() -> None:
    memory = MemoryCluster(nodes=[node()])
    assert await locker(memory).release("gpu-1", "default", "p1") is False
    assert await locker(memory).release("absent", "default", "p1") is False
    assert "patch_node_annotations" not in memory.calls


async def test_release_racing_a_new_owner_leaves_the_new_lock() -> None:
    cluster = Racing([{NODE_LOCK: lock_value("default", "p2")}], nodes=[node(lock_value("default", "p1"))])
    assert await locker(cluster).release("gpu-1", "default", "p1") is False
    assert lock_on(cluster) == lock_value("default", "p2")


async def test_release_racing_a_restamp_by_the_same_pod_still_releases() -> None:
    restamped = lock_value("default", "p1", age=timedelta(seconds=-1))
    cluster = Racing([{NODE_LOCK: restamped}], nodes=[node(lock_value("default", "p1"))])
    assert await locker(cluster).release("gpu-1", "default", "p1") is True
    assert lock_on(cluster) is None


@pytest.mark.parametrize(
    ("value", "pods", "released"),
    [
        (lock_value("default", "gone"), [], True),
        (lock_value("default", "done"), [pod("done", "Succeeded")], True),
        (lock_value("default", "oops"), [pod("oops", "Failed")], True),
        (lock_value("default", "busy"), [pod("busy", "Pending")], False),
        (lock_value("default", "old", age=TIMEOUT * 2), [pod("old")], False),  # the next acquire takes it over
        (NOW.isoformat(), [], False),
        (lock_value("default", "served"), [pod("served", "Running", bind_phase="success", on="gpu-1")], True),
        (lock_value("default", "refused"), [pod("refused", "Pending", bind_phase="failed", on="gpu-1")], True),
        (lock_value("default", "serving"), [pod("serving", "Pending", bind_phase="allocating", on="gpu-1")], False),
    ],
    ids=[
        "holder-deleted",
        "holder-succeeded",
        "holder-failed",
        "holder-alive",
        "expired-but-alive",
        "legacy",
        "holder-allocated-release-lost",
        "holder-allocate-failed-release-lost",
        "holder-allocating",
    ],
)
async def test_release_if_stale_frees_locks_of_finished_or_deleted_holders(
    seam: Seam, value: str, pods: list[Pod], released: bool
) -> None:
    seam.backing.put_node(node(value))
    for p in pods:
        seam.backing.put_pod(p)
    assert await locker(seam.cluster).release_if_stale("gpu-1") is released
    assert lock_on(seam.backing) == (None if released else value)


async def test_release_if_stale_can_use_a_cache_lookup() -> None:
    memory = MemoryCluster(nodes=[node(lock_value("default", "cached"))], pods=[pod("cached")])
    asked: list[tuple[str, str]] = []

    async def from_cache(namespace: str, name: str) -> Pod | None:
        asked.append((namespace, name))
        return None  # the cache has seen the pod deleted

    assert await locker(memory).release_if_stale("gpu-1", from_cache) is True
    assert asked == [("default", "cached")]
    assert "get_pod" not in memory.calls


def test_the_clock_is_wall_time_with_an_offset() -> None:
    assert isinstance(NOW, datetime)
    assert NOW.utcoffset() == timedelta(0)


async def test_a_vendor_lock_has_its_own_key_and_expiry() -> None:
    memory = MemoryCluster()
    memory.put_node(Node(metadata=ObjectMeta(name="gpu-1")))
    memory.put_pod(Pod(metadata=ObjectMeta(name="p1", namespace="default")))  # a live holder
    got = await locker(memory).acquire(
        "gpu-1", "default", "p1", key="vendor.example/lock", timeout=timedelta(seconds=120)
    )
    annotations = memory.nodes["gpu-1"].metadata.annotations
    assert (got.name, list(annotations)) == ("p1", ["vendor.example/lock"])
    with pytest.raises(
        LockContention, match=r"node gpu-1 is locked \(vendor.example/lock\) by default/p1 .*after 120s"
    ):
        await locker(memory).acquire(
            "gpu-1", "default", "p2", key="vendor.example/lock", timeout=timedelta(seconds=120)
        )
    assert await locker(memory).release("gpu-1", "default", "p1") is False  # hami.io/mutex.lock: not there
    assert await locker(memory).release("gpu-1", "default", "p1", key="vendor.example/lock") is True
    assert memory.nodes["gpu-1"].metadata.annotations == {}
