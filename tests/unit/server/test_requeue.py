"""The leader's nudge to kube-scheduler once a node's capacity frees (``hami.server.requeue``), through the runtime's
pod and node watch handlers, over MemoryCluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from hami.errors import ApiError
from hami.k8s.tasks import Supervisor
from hami.protocol import keys
from hami.protocol.objects import Pod
from tests.unit.server.support import NOW, NS, gpu_node, gpu_pod, make_world
from tests.unit.server.test_runtime import Wired, lease, make_runtime, stored

SCHEDULER = "hami-scheduler"
PATCH = "patch_node_annotations"


@pytest.fixture
async def wired() -> AsyncIterator[Wired]:
    runtime = make_runtime(requeue_interval=0.2)
    world = make_world()
    runtime.state = world.state  # the ledger the extender's cycle keeps, as in the runtime itself
    async with Supervisor() as supervisor:
        w = Wired(runtime, world, supervisor)
        # a node whose handshake is already requesting: the node event writes nothing of its own
        w.node_event(stored(w, gpu_node("n1", annotations={keys.NVIDIA_HANDSHAKE: "Requesting_x"})))
        yield w


def holder(wired: Wired, name: str, mem: int = 3000) -> Pod:
    """A pod bound to n1 holding ``mem`` MiB of GPU-n1-0, delivered to the watch handler (the ledger charges it)."""
    pod = gpu_pod(name, mem=mem, phase="Running")
    pod.spec.node_name = "n1"
    pod.spec.scheduler_name = SCHEDULER
    pod.metadata.annotations.update(
        {
            keys.VGPU_NODE: "n1",
            keys.BIND_PHASE: "success",
            keys.NVIDIA_KEYS.allocated: f"GPU-n1-0,NVIDIA,{mem},30:;",
        }
    )
    pod = wired.world.cluster.put_pod(pod)
    wired.pod_event(pod)
    assert pod.metadata.uid in wired.runtime.state.pods
    return pod


def waiter(wired: Wired, name: str = "waiter") -> Pod:
    """A pod for hami's scheduler that kube-scheduler has not bound (hami turned it down)."""
    pod = gpu_pod(name, mem=20000)
    pod.spec.scheduler_name = SCHEDULER
    pod = wired.world.cluster.put_pod(pod)
    wired.pod_event(pod)
    return pod


def delete(wired: Wired, pod: Pod) -> None:
    wired.world.cluster.delete_pod(NS, pod.metadata.name)
    wired.pod_event(pod, deleted=True)


def nudge(wired: Wired) -> str | None:
    return wired.world.cluster.nodes["n1"].metadata.annotations.get(keys.CAPACITY_FREED)


async def test_capacity_freed_while_a_pod_waits_marks_the_node(wired: Wired) -> None:
    held = holder(wired, "holder")
    waiter(wired)
    before = datetime.now(UTC).replace(microsecond=0)

    delete(wired, held)
    await wired.settle()

    stamp = nudge(wired)
    assert stamp is not None
    assert stamp.endswith("Z")
    assert before <= datetime.fromisoformat(stamp) <= datetime.now(UTC)
    assert wired.world.cluster.calls.count(PATCH) == 1


async def test_a_finished_holder_frees_capacity_as_a_deleted_one_does(wired: Wired) -> None:
    held = holder(wired, "holder")
    waiter(wired)

    wired.pod_event(wired.world.cluster.set_pod_phase(NS, held.metadata.name, "Succeeded"))
    await wired.settle()

    assert nudge(wired) is not None


async def test_no_pod_waiting_no_nudge(wired: Wired) -> None:
    held = holder(wired, "holder")
    waiting = waiter(wired)
    waiting.spec.node_name = "n2"  # bound meanwhile (elsewhere): nobody waits any more
    wired.pod_event(wired.world.cluster.put_pod(waiting))

    delete(wired, held)
    await wired.settle()

    assert nudge(wired) is None
    assert PATCH not in wired.world.cluster.calls


async def test_a_pod_without_an_allocation_frees_nothing(wired: Wired) -> None:
    waiter(wired)
    other = waiter(wired, "other")

    delete(wired, other)
    await wired.settle()

    assert nudge(wired) is None


async def test_a_follower_only_follows(wired: Wired) -> None:
    """Every replica sees the same freeing; the leader alone writes."""
    wired.runtime.leadership.elect = True
    wired.runtime.leadership.on_lease(lease("sched-2_77aa", datetime.now(UTC)), False)
    held = holder(wired, "holder")
    waiter(wired)

    delete(wired, held)
    await wired.settle()

    assert nudge(wired) is None
    assert wired.runtime.requeue.waiting == {"uid-waiter"}  # ready to write once it leads


async def test_interval_zero_switches_the_nudge_off(wired: Wired) -> None:
    wired.runtime.requeue.interval = 0.0
    held = holder(wired, "holder")
    waiter(wired)

    delete(wired, held)
    await wired.settle()

    assert nudge(wired) is None


async def test_a_burst_of_freeings_costs_one_write_and_one_trailing_write(wired: Wired) -> None:
    held = [holder(wired, f"holder-{i}", mem=1000) for i in range(4)]
    waiter(wired)

    delete(wired, held[0])
    await asyncio.sleep(0)  # the first write runs at once
    for pod in held[1:]:
        delete(wired, pod)  # inside the interval: one write at its end covers all three
    await wired.settle()

    assert wired.world.cluster.calls.count(PATCH) == 2


async def test_a_failed_write_is_counted_and_logged(wired: Wired, caplog: pytest.LogCaptureFixture) -> None:
    wired.world.cluster.fail(PATCH, ApiError("the API server is away", status=503))
    held = holder(wired, "holder")
    waiter(wired)

    delete(wired, held)
    await wired.settle()

    assert nudge(wired) is None
    errors = wired.runtime.metrics.registry.get_sample_value("hami_kube_api_errors_total", {"operation": "patch_node"})
    assert errors == 1
    assert "nudging kube-scheduler on node n1 (capacity freed) failed" in caplog.text


async def test_the_ledger_does_not_read_the_nudge(wired: Wired) -> None:
    """The nudge changes the node for kube-scheduler only: hami's state keeps the node's tables as they are."""
    state = wired.runtime.state.nodes["n1"]
    node = wired.world.cluster.nodes["n1"]
    node.metadata.annotations[keys.CAPACITY_FREED] = "2026-08-21T06:20:39.000Z"

    wired.node_event(stored(wired, node))

    assert wired.runtime.state.nodes["n1"] is state


def preemptor(wired: Wired) -> Pod:
    """A pod of priority 100 for hami's scheduler asking both cards of n1 (12000 MiB each), delivered to the watch."""
    pod = gpu_pod("urgent", gpu=2, mem=12000, cores=None)
    pod.spec.scheduler_name = SCHEDULER
    pod.spec.priority = 100
    pod = wired.world.cluster.put_pod(pod)
    wired.pod_event(pod)
    return pod


async def held_for_preemptor(wired: Wired) -> Pod:
    """n1's card 0 full with two pods of priority 0; the preemptor's /filter evicts one and holds the room."""
    wired.world.extender.cycle.settings.preemption = True
    for pod in (holder(wired, "low-a", mem=12000), holder(wired, "low-b", mem=12000), preemptor(wired)):
        wired.world.watched[(NS, pod.metadata.name)] = pod  # what the pod watch shows the cycle
    urgent = wired.world.pod("urgent")
    outcome = await wired.world.filter(urgent, ["n1"])
    assert outcome.node_names is None, outcome
    await wired.settle()
    assert [h.node for h in wired.world.extender.cycle.holds.holds.values()] == ["n1"]
    assert nudge(wired) is None  # nothing freed yet: the victim is still terminating, the room is held
    return urgent


async def test_a_preemption_hold_that_runs_out_nudges_its_node(wired: Wired) -> None:
    await held_for_preemptor(wired)
    wired.world.extender.cycle.clocks.wall = lambda: NOW + 3600  # long past the hold's deadline
    other = waiter(wired, "other")

    await wired.world.filter(other, ["n1"])  # the /filter that finds the hold lapsed
    await wired.settle()

    assert wired.world.extender.cycle.holds.holds == {}
    assert nudge(wired) is not None


async def test_a_hold_lifted_because_its_preemptor_was_deleted_nudges_its_node(wired: Wired) -> None:
    urgent = await held_for_preemptor(wired)
    waiter(wired, "other")

    delete(wired, urgent)
    await wired.settle()

    assert wired.world.extender.cycle.holds.holds == {}
    assert nudge(wired) is not None
