"""The periodic API re-list (``hami.server.audit.LedgerAudit``) over the in-memory cluster and the real extender.

The test plays the pod watch (``World.deliver``, ``Extender.on_pod``) and decides which events it "missed"; the
audit lists the ``MemoryCluster`` as it would list the API server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import pytest

from hami.errors import ApiError
from hami.k8s.client import ListPage
from hami.protocol.objects import Pod
from hami.scheduling.audit import DriftKind
from hami.server import runtime as runtime_module
from hami.server.audit import LedgerAudit, PodLister
from tests.unit.server.support import NS, GatedCluster, World, gpu_node, gpu_pod, make_world
from tests.unit.server.test_runtime import make_runtime

NODE = "n1"


def audit_of(world: World, lister: PodLister | None = None, ready: Callable[[], bool] = lambda: True) -> LedgerAudit:
    extender = world.extender
    return LedgerAudit(
        world.state,
        extender.vendors,
        lister or world.cluster,
        world.metrics,
        lambda: extender.cycle.pending,
        ready,
        page_size=2,
    )


def drift_gauge(world: World, kind: DriftKind) -> float | None:
    return world.metrics.registry.get_sample_value("hami_ledger_api_drift", {"kind": kind.value})


def repairs(world: World, kind: DriftKind) -> float | None:
    return world.metrics.registry.get_sample_value("hami_ledger_api_repairs_total", {"kind": kind.value})


async def place(world: World, name: str, *, deliver: bool = True) -> Pod:
    """``/filter`` a 3,000 MiB pod onto the node; with ``deliver``, the watch then brings its annotations back."""
    world.add_pod(gpu_pod(name))
    result = await world.filter(world.pod(name), [NODE])
    assert result.node_names == [NODE]
    return world.deliver(NS, name) if deliver else world.pod(name)


@pytest.fixture
def node_world(world: World) -> World:
    world.add_node(gpu_node(NODE, gpus=1, mem=10000))
    return world


async def test_a_leaked_ledger_entry_is_found_by_two_relists_then_dropped(
    node_world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world = node_world
    await place(world, "kept")
    gone = await place(world, "web-0")
    world.cluster.delete_pod(NS, "web-0")  # the watch never delivers the deletion
    audit = audit_of(world)
    caplog.set_level(logging.INFO, "hami.audit")

    first = await audit.run()

    assert first == []
    assert gone.metadata.uid in world.state.pods, "one sighting may be a race: nothing is changed yet"
    assert drift_gauge(world, DriftKind.LEAKED) == 0
    assert "checking again at the next re-list" in caplog.text

    second = await audit.run()

    assert [(d.kind, d.pod) for d in second or []] == [(DriftKind.LEAKED, f"{NS}/web-0")]
    assert gone.metadata.uid not in world.state.pods
    assert world.usage() == {f"GPU-{NODE}-0": (1, 3000, 30)}, "only the pod that still exists is charged"
    assert world.state.verify() == []
    assert drift_gauge(world, DriftKind.LEAKED) == 1
    assert repairs(world, DriftKind.LEAKED) == 1
    assert f"leaked pod {NS}/web-0 (uid uid-web-0)" in caplog.text
    assert "repaired" in caplog.text

    assert await audit.run() == []
    assert drift_gauge(world, DriftKind.LEAKED) == 0


async def test_a_pod_the_ledger_missed_is_charged_after_two_relists(node_world: World) -> None:
    world = node_world
    await place(world, "a")
    world.extender.on_pod(world.pod("a"), deleted=True)  # a wrong deletion: the pod still runs with its devices
    audit = audit_of(world)

    assert await audit.run() == []
    assert world.usage() == {}
    confirmed = await audit.run()

    assert [d.kind for d in confirmed or []] == [DriftKind.MISSING]
    assert world.usage() == {f"GPU-{NODE}-0": (1, 3000, 30)}
    assert repairs(world, DriftKind.MISSING) == 1
    world.deliver(NS, "a")  # the watch's next event for the pod agrees with the repair
    assert world.usage() == {f"GPU-{NODE}-0": (1, 3000, 30)}
    assert world.state.verify() == []


async def test_a_pending_reservation_is_never_reported_nor_repaired() -> None:
    backing = GatedCluster()
    world = make_world(backing=backing)
    world.add_node(gpu_node(NODE, gpus=1, mem=10000))
    world.add_pod(gpu_pod("p"))
    result = await world.filter(world.pod("p"), [NODE], settle=False)  # its annotation commit is still in flight
    assert result.node_names == [NODE]
    audit = audit_of(world)

    assert await audit.run() == []
    assert await audit.run() == []

    assert "uid-p" in world.extender.cycle.pending
    assert world.usage() == {f"GPU-{NODE}-0": (1, 3000, 30)}, "the reservation holds"
    assert [drift_gauge(world, kind) for kind in DriftKind] == [0, 0, 0]
    backing.gate.set()
    await world.extender.settle_all()
    world.deliver(NS, "p")
    assert await audit.run() == []
    assert world.usage() == {f"GPU-{NODE}-0": (1, 3000, 30)}


async def test_a_pod_listed_before_the_watch_delivered_it_is_not_reported(node_world: World) -> None:
    world = node_world
    await place(world, "a", deliver=False)
    world.extender.cycle.pending.clear()  # as if placed by another scheduler: only the watch will tell the ledger
    world.state.remove_pod("uid-a")
    audit = audit_of(world)

    assert await audit.run() == []  # the API has it, the ledger not yet
    world.deliver(NS, "a")  # the watch catches up before the next re-list

    assert await audit.run() == []
    assert world.usage() == {f"GPU-{NODE}-0": (1, 3000, 30)}
    assert repairs(world, DriftKind.MISSING) == 0


class DeletingDuringTheList:
    """Lists the cluster page by page, and after the first page lets the watch deliver a pod's deletion (the
    pod is deleted after the list's snapshot was taken)."""

    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name

    async def list_pods(self, page_size: int = 500) -> AsyncIterator[ListPage[Pod]]:
        async for page in self.world.cluster.list_pods(page_size):
            yield page
            if page.first:
                pod = self.world.pod(self.name)
                self.world.cluster.delete_pod(NS, self.name)
                self.world.extender.on_pod(pod, deleted=True)


async def test_a_pod_deleted_while_the_list_runs_is_not_reported_nor_charged(node_world: World) -> None:
    world = node_world
    for name in ("a", "b", "c"):
        await place(world, name)
    racing = audit_of(world, DeletingDuringTheList(world, "a"))

    assert await racing.run() == []  # the snapshot still has "a", the ledger no longer
    after = audit_of(world)
    after.previous = racing.previous

    assert await after.run() == []
    assert "uid-a" not in world.state.pods
    assert world.usage() == {f"GPU-{NODE}-0": (2, 6000, 60)}


class RestartingList:
    """A listing whose continue token expired after one page: it starts over with a full, newer list."""

    def __init__(self, stale: list[Pod], fresh: list[Pod]) -> None:
        self.stale = stale
        self.fresh = fresh

    async def list_pods(self, page_size: int = 500) -> AsyncIterator[ListPage[Pod]]:
        yield ListPage(self.stale, "1", "token", True)
        yield ListPage(self.fresh, "2", "", True)


async def test_a_listing_that_started_over_forgets_its_partial_pages(node_world: World) -> None:
    world = node_world
    a = await place(world, "a")
    b = await place(world, "b")
    world.cluster.delete_pod(NS, "b")
    world.extender.on_pod(b, deleted=True)
    audit = audit_of(world, RestartingList(stale=[a, b], fresh=[a]))

    assert await audit.run() == []
    assert await audit.run() == []  # "b" of the abandoned page never counts as missing

    assert set(world.state.pods) == {"uid-a"}


async def test_a_failed_list_is_counted_and_changes_nothing(
    node_world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world = node_world
    await place(world, "a")
    world.cluster.fail("list_pods", ApiError("etcdserver: request timed out", 504))
    audit = audit_of(world)

    assert await audit.run() is None

    assert world.metrics.registry.get_sample_value("hami_kube_api_errors_total", {"operation": "list_pods"}) == 1
    assert "re-listing pods to check the ledger failed" in caplog.text
    assert "etcdserver: request timed out" in caplog.text
    assert "uid-a" in world.state.pods


async def test_nothing_is_listed_before_the_caches_have_synced(node_world: World) -> None:
    world = node_world
    audit = audit_of(world, ready=lambda: False)

    assert await audit.run() is None
    assert "list_pods" not in world.cluster.calls


async def test_the_self_check_loop_runs_the_relist_every_period(
    node_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = node_world
    await place(world, "web-0")
    world.cluster.delete_pod(NS, "web-0")
    monkeypatch.setattr(runtime_module, "SELF_CHECK_SECONDS", 0.001)
    monkeypatch.setattr(runtime_module, "API_AUDIT_SECONDS", 0.0)
    runtime = make_runtime()
    runtime.state = world.state
    runtime.metrics = world.metrics

    loop = asyncio.get_running_loop().create_task(runtime._self_check(audit_of(world)))
    try:
        async with asyncio.timeout(10):
            while "uid-web-0" in world.state.pods:
                await asyncio.sleep(0.001)
    finally:
        loop.cancel()

    assert world.cluster.calls.count("list_pods") >= 2
    assert drift_gauge(world, DriftKind.LEAKED) in (0, 1)
    assert repairs(world, DriftKind.LEAKED) == 1
    assert world.metrics.registry.get_sample_value("hami_ledger_drift") == 0
