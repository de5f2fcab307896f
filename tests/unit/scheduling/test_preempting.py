"""hami's own preemption (``--preemption=self``) through the real extender, cycle and ledger over an in-memory
cluster: victims evicted through the Eviction API, their condition and event, the preemptor's nomination, and the
capacity held for it until it is placed, deleted, or the hold lapses (``hami.scheduling.preempting``/``holds``)."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from hami.errors import ApiError
from hami.k8s.memory import MemoryCluster
from hami.protocol import keys
from hami.protocol.objects import (
    LabelSelector,
    ObjectMeta,
    Pod,
    PodCondition,
    PodDisruptionBudget,
    PodDisruptionBudgetSpec,
    PodDisruptionBudgetStatus,
)
from hami.scheduling.holds import HOLD_MARGIN_S, PreemptionHold
from tests.unit.server.support import NOW, NS, World, gpu_node, gpu_pod, make_world

NVIDIA = keys.NVIDIA_KEYS
CONDITION_MESSAGE = f"hami-scheduler: preempting to accommodate a higher priority pod: {NS}/urgent (UID uid-urgent)"


def preempting(backing: MemoryCluster | None = None) -> World:
    world = make_world(backing=backing)
    world.extender.cycle.settings.preemption = True
    return world


def running(
    world: World, name: str, node: str, mem: int, priority: int, *, card: int = 0, labels: dict[str, str] | None = None
) -> Pod:
    """A pod bound to ``node`` holding ``mem`` MiB of its card ``card``, as hami placed it."""
    value = f"GPU-{node}-{card},NVIDIA,{mem},0:;"
    pod = gpu_pod(name, mem=mem, cores=None)
    pod.metadata.annotations = {keys.VGPU_NODE: node, NVIDIA.allocated: value, NVIDIA.to_allocate or "": value}
    pod.metadata.labels = dict(labels or {})
    pod.spec.node_name = node
    pod.spec.priority = priority
    pod.status.phase = "Running"
    pod.status.start_time = "2026-11-27T10:00:00Z"
    return world.add_pod(pod)


def pending(world: World, name: str, mem: int, priority: int, *, never: bool = False) -> Pod:
    pod = gpu_pod(name, mem=mem, cores=None)
    pod.spec.priority = priority
    pod.spec.preemption_policy = "Never" if never else "PreemptLowerPriority"
    pod.spec.scheduler_name = "hami-scheduler"
    return world.add_pod(pod)


def evicted(world: World) -> list[str]:
    """The pods the cluster has seen evicted (deletionTimestamp set), by name."""
    return sorted(n for (_, n), p in world.cluster.pods.items() if p.metadata.deletion_timestamp)


def finish_termination(world: World, *names: str) -> None:
    """What the kubelet does once an evicted pod's containers stopped: the pod goes (the watch delivers both)."""
    for name in names:
        world.deliver(NS, name)  # the watch first shows it terminating
        world.remove_pod(name)


def holds(world: World) -> dict[str, tuple[str, int]]:
    """Preemptor name → (node, MiB held)."""
    return {
        r.name: (r.node, sum(c.mem for c in r.charges))
        for r in world.state.held.values()
        if isinstance(r, PreemptionHold)
    }


def sample(world: World, name: str, **labels: str) -> float:
    return world.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def full_card() -> World:
    """n1: one 24000 MiB card (10 slots) with 8000 MiB of each of three pods of priority 1, 5 and 10."""
    world = preempting()
    world.add_node(gpu_node("n1", gpus=1))
    running(world, "low", "n1", 8000, 1)
    running(world, "mid", "n1", 8000, 5)
    running(world, "high", "n1", 8000, 10)
    return world


async def test_a_high_priority_pod_evicts_exactly_the_lowest_priority_pod_and_gets_its_room(full_card: World) -> None:
    world = full_card
    preemptor = pending(world, "urgent", 6000, 100)

    result = await world.filter(preemptor, ["n1"])

    assert evicted(world) == ["low"]
    assert holds(world) == {"urgent": ("n1", 6000)}
    assert world.pod("urgent").status.nominated_node_name == "n1"
    message = result.failed_nodes["n1"] if result.failed_nodes else ""
    assert message.startswith(f"preempting 1 pod(s) of lower priority ({NS}/low) on n1 for this pod; ")
    assert "the freed capacity is held for this pod until 2026-08-21T06:21:39Z" in message  # NOW + 30 s + 30 s
    conditions = [s for ns, n, s in world.cluster.statuses if n == "low"]
    assert len(conditions) == 1
    [condition] = conditions[0]["conditions"]  # type: ignore[union-attr]
    assert {k: v for k, v in condition.items() if k != "lastTransitionTime"} == {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": CONDITION_MESSAGE,
    }
    events = await world.events()
    assert ("Normal", "Preempted", "Preempted by pod uid-urgent on node n1") in events
    assert any(e[:2] == ("Normal", "Preempting") and e[2] == message for e in events)
    assert sample(world, "hami_preemption_attempts_total", result="preempted") == 1
    assert sample(world, "hami_preemption_victims_evicted_total") == 1
    assert sample(world, "hami_preemption_holds") == 1
    assert sample(world, "hami_preemption_held_memory_bytes") == 6000 * 1048576
    assert world.state.verify() == []

    # While the victim terminates the preemptor waits, is told so, and nothing more is evicted.
    again = await world.filter(world.pod("urgent"), ["n1"])
    assert again.failed_nodes == {
        "n1": f"waiting for 1 preempted pod(s) ({NS}/low) to terminate on n1; " + message.split("; ")[1]
    }
    assert evicted(world) == ["low"]

    finish_termination(world, "low")
    # The room is held: a lower-priority pod that fits in it is not given it.
    other = pending(world, "other", 6000, 0)
    assert (await world.filter(other, ["n1"])).node_names is None
    # The preemptor is.
    placed = await world.filter(world.pod("urgent"), ["n1"])
    assert placed.node_names == ["n1"]
    assert holds(world) == {}
    assert world.usage() == {"GPU-n1-0": (3, 22000, 0)}
    assert sample(world, "hami_preemption_wasted_evictions_total", why="deleted") == 0
    assert sample(world, "hami_preemption_wasted_evictions_total", why="elsewhere") == 0
    assert world.state.verify() == []


async def test_one_big_victim_is_taken_rather_than_two_small_ones() -> None:
    world = preempting()
    world.add_node(gpu_node("n1", gpus=1))
    running(world, "small-a", "n1", 6000, 1)
    running(world, "small-b", "n1", 6000, 1)
    running(world, "big", "n1", 12000, 1)
    await world.filter(pending(world, "urgent", 12000, 100), ["n1"])
    assert evicted(world) == ["big"]


@pytest.mark.parametrize(
    ("mem", "priority", "never"),
    [
        pytest.param(6000, 100, True, id="preemptionPolicy-Never"),
        pytest.param(6000, 1, False, id="equal-priority"),
        pytest.param(30000, 100, False, id="larger-than-any-card"),
        pytest.param(6000, 0, False, id="priority-zero"),
    ],
)
async def test_pods_that_may_not_or_cannot_preempt_evict_nothing(
    full_card: World, mem: int, priority: int, never: bool
) -> None:
    world = full_card
    await world.filter(pending(world, "urgent", mem, priority, never=never), ["n1"])
    assert evicted(world) == []
    assert "evict_pod" not in world.cluster.calls
    assert holds(world) == {}
    assert world.pod("urgent").status.nominated_node_name == ""
    counted = sample(world, "hami_preemption_attempts_total", result="no-candidate")
    assert counted == (0 if priority == 0 else 1)  # a pod of priority 0 never tries


async def test_without_self_preemption_hami_evicts_nothing(full_card: World) -> None:
    world = full_card
    world.extender.cycle.settings.preemption = False  # --preemption=extender (kube-scheduler evicts) or off
    result = await world.filter(pending(world, "urgent", 6000, 100), ["n1"])
    assert result.failed_nodes == {"n1": "1/1 CardInsufficientMemory"}
    assert evicted(world) == []
    assert holds(world) == {}


async def test_a_budget_steers_the_choice_to_another_node() -> None:
    world = preempting()
    world.add_node(gpu_node("n1", gpus=1))
    world.add_node(gpu_node("n2", gpus=1))
    running(world, "guarded", "n1", 20000, 1, labels={"app": "db"})
    running(world, "free", "n2", 20000, 5)  # a higher priority, but no budget stands in the way
    selector = LabelSelector(match_labels={"app": "db"})
    world.cluster.budgets = [
        PodDisruptionBudget(
            ObjectMeta(name="db", namespace=NS), PodDisruptionBudgetSpec(selector), PodDisruptionBudgetStatus(0)
        )
    ]
    await world.filter(pending(world, "urgent", 10000, 100), ["n1", "n2"])
    assert evicted(world) == ["free"]


async def test_a_budget_refusing_the_only_candidate_leaves_everything_as_it_was(full_card: World) -> None:
    world = full_card
    budget = PodDisruptionBudget(
        ObjectMeta(name="all", namespace=NS), PodDisruptionBudgetSpec(LabelSelector()), PodDisruptionBudgetStatus(0)
    )
    world.cluster.budgets = [budget]
    result = await world.filter(pending(world, "urgent", 6000, 100), ["n1"])
    assert "evict_pod" in world.cluster.calls  # the Eviction API refused (429)
    assert evicted(world) == []
    assert holds(world) == {}
    assert world.pod("urgent").status.nominated_node_name == ""
    assert sample(world, "hami_preemption_attempts_total", result="budget-refused") == 1
    assert result.failed_nodes == {"n1": "1/1 CardInsufficientMemory"}
    assert world.state.verify() == []


async def test_two_preemptors_never_share_the_freed_capacity() -> None:
    world = preempting()
    world.add_node(gpu_node("n1", gpus=1))
    running(world, "low", "n1", 20000, 1)
    first, second = pending(world, "first", 14000, 100), pending(world, "second", 14000, 100)
    await world.filter(first, ["n1"])
    await world.filter(second, ["n1"])  # one preemption in flight per node: no second victim, no share
    assert evicted(world) == ["low"]
    assert holds(world) == {"first": ("n1", 14000)}
    assert sample(world, "hami_preemption_attempts_total", result="no-candidate") == 1
    finish_termination(world, "low")
    assert (await world.filter(world.pod("second"), ["n1"])).node_names is None  # 10000 MiB left beside the hold
    assert (await world.filter(world.pod("first"), ["n1"])).node_names == ["n1"]
    assert world.usage()["GPU-n1-0"][1] <= 24000
    assert world.state.verify() == []


def terminate(world: World, name: str, *conditions: PodCondition) -> Pod:
    """The pod is deleted (gracefully: it terminates) with ``conditions``; the watch shows it."""
    stored = world.cluster._pods[(NS, name)]
    stored.metadata.deletion_timestamp = "2026-08-21T06:20:00Z"
    stored.status.conditions = conditions
    return world.deliver(NS, name)


PREEMPTED_BY_KUBE_SCHEDULER = PodCondition(
    "DisruptionTarget",
    "True",
    "PreemptionByScheduler",
    "default-scheduler: preempting to accommodate a higher priority pod",
)


async def test_reserved_but_unbound_and_preempted_pods_are_never_victims() -> None:
    world = preempting()
    world.add_node(gpu_node("n1", gpus=1))
    reserved = pending(world, "reserved", 12000, 1)
    assert (await world.filter(reserved, ["n1"])).node_names == ["n1"]  # reserved and annotated, not bound
    leaving = running(world, "leaving", "n1", 6000, 1)
    terminate(world, "leaving", PREEMPTED_BY_KUBE_SCHEDULER)
    running(world, "victim", "n1", 6000, 1)
    await world.filter(pending(world, "urgent", 12000, 100), ["n1"])
    assert evicted(world) == ["leaving", "victim"]  # "leaving" was being preempted already: counted as leaving
    assert world.cluster.calls.count("evict_pod") == 1
    assert leaving.metadata.name not in [r.name for r in world.state.held.values()]


async def test_a_pod_terminating_on_its_own_is_no_free_room_and_a_victim_like_any_other() -> None:
    """Deleted by its owner (a long grace period, a finalizer): its capacity is still used; of lower priority, it
    is evicted as any victim (which shortens its grace period to its own and marks it preempted)."""
    world = preempting()
    world.add_node(gpu_node("n1", gpus=1))
    running(world, "own-delete", "n1", 12000, 1)
    terminate(world, "own-delete")
    running(world, "victim", "n1", 12000, 1)
    await world.filter(pending(world, "urgent", 12000, 100), ["n1"])
    assert world.cluster.calls.count("evict_pod") == 1
    assert holds(world) == {"urgent": ("n1", 12000)}
    assert world.pod("urgent").status.nominated_node_name == "n1"
    marked = [n for _, n, status in world.cluster.statuses if "conditions" in status]
    assert len(marked) == 1


async def test_a_pod_terminating_on_its_own_does_not_hold_back_preemption_on_another_node() -> None:
    """Issue 39: a tenant's pod of high priority deleted with a day-long grace period on n1 does not make n1 a free
    candidate (no hold, no nomination there); the lower-priority pod on n2 is preempted."""
    world = preempting()
    world.add_node(gpu_node("n1", gpus=1))
    world.add_node(gpu_node("n2", gpus=1))
    running(world, "tenant", "n1", 24000, 1000)
    terminate(world, "tenant")
    running(world, "low", "n2", 24000, 1)
    await world.filter(pending(world, "urgent", 6000, 100), ["n1", "n2"])
    assert holds(world) == {"urgent": ("n2", 6000)}
    assert world.pod("urgent").status.nominated_node_name == "n2"
    assert evicted(world) == ["low", "tenant"]  # "tenant" only by its owner
    assert world.cluster.calls.count("evict_pod") == 1


async def test_the_hold_lapses_at_its_deadline(full_card: World) -> None:
    world = full_card
    world.add_pod(msgspec.structs.replace(pending(world, "urgent", 6000, 100)))
    await world.filter(world.pod("urgent"), ["n1"])
    finish_termination(world, "low")
    world.extender.cycle.clocks.wall = lambda: NOW + 30 + HOLD_MARGIN_S  # the deadline
    other = pending(world, "other", 6000, 0)
    assert (await world.filter(other, ["n1"])).node_names == ["n1"]
    assert holds(world) == {}


async def test_a_deleted_preemptor_frees_the_hold_and_counts_its_evictions_wasted(full_card: World) -> None:
    world = full_card
    await world.filter(pending(world, "urgent", 6000, 100), ["n1"])
    world.remove_pod("urgent")
    assert holds(world) == {}
    assert sample(world, "hami_preemption_wasted_evictions_total", why="deleted") == 1


async def test_after_a_restart_the_hold_is_rebuilt_from_the_nominated_node(full_card: World) -> None:
    world = full_card
    await world.filter(pending(world, "urgent", 6000, 100), ["n1"])
    world.deliver(NS, "urgent")  # its nominatedNodeName
    # hami restarts: a new process over the same cluster; the victim finishes while it is down.
    restarted = preempting(backing=world.cluster)
    restarted.add_node(world.cluster.nodes["n1"])
    for (_, name), pod in sorted(world.cluster.pods.items()):
        if name != "low":
            restarted.add_pod(pod)
    world.cluster.delete_pod(NS, "low")
    other = pending(restarted, "other", 6000, 0)
    assert (await restarted.filter(other, ["n1"])).node_names is None  # the rebuilt hold keeps it off
    assert holds(restarted) == {"urgent": ("n1", 6000)}
    assert (await restarted.filter(restarted.pod("urgent"), ["n1"])).node_names == ["n1"]
    assert restarted.state.verify() == []


async def test_a_nomination_kube_scheduler_clears_right_after_the_answer_is_set_again(full_card: World) -> None:
    world = full_card
    pauses: list[float] = []

    async def no_wait(seconds: float) -> None:
        pauses.append(seconds)

    world.extender.cycle.clocks.sleep = no_wait
    await world.filter(pending(world, "urgent", 6000, 100), ["n1"], settle=False)
    # kube-scheduler's failure handling, seeing no victim it understands, clears the nomination
    await world.cluster.patch_pod_status(NS, "urgent", "uid-urgent", {"nominatedNodeName": None})
    world.deliver(NS, "urgent")
    await asyncio.gather(*world.extender.cycle.nominations.values())
    assert world.pod("urgent").status.nominated_node_name == "n1"
    assert pauses == [1.0, 2.0, 4.0]


async def test_after_a_restart_the_hold_is_rebuilt_from_the_victims_still_terminating(full_card: World) -> None:
    world = full_card
    await world.filter(pending(world, "urgent", 6000, 100), ["n1"])
    assert world.pod("low").metadata.annotations[keys.PREEMPTED_FOR] == f"{NS}/urgent"
    # kube-scheduler cleared the nomination (a /filter failed while hami was down); the victim still terminates
    await world.cluster.patch_pod_status(NS, "urgent", "uid-urgent", {"nominatedNodeName": None})
    restarted = preempting(backing=world.cluster)
    restarted.add_node(world.cluster.nodes["n1"])
    for pod in world.cluster.pods.values():
        restarted.add_pod(pod)
    other = pending(restarted, "other", 6000, 50)
    assert (await restarted.filter(other, ["n1"])).node_names is None  # the victim still terminates
    finish_termination(restarted, "low")
    result = await restarted.filter(restarted.pod("other"), ["n1"])
    assert result.node_names is None  # the rebuilt hold keeps the freed room for the preemptor
    assert holds(restarted) == {"urgent": ("n1", 6000)}
    assert (await restarted.filter(restarted.pod("urgent"), ["n1"])).node_names == ["n1"]


async def test_an_eviction_that_fails_lifts_the_hold_and_says_why(full_card: World) -> None:
    world = full_card
    world.cluster.fail("evict_pod", ApiError("etcdserver: request timed out", 500))
    result = await world.filter(pending(world, "urgent", 6000, 100), ["n1"])
    assert holds(world) == {}
    assert evicted(world) == []
    assert sample(world, "hami_preemption_attempts_total", result="failed") == 1
    assert sample(world, "hami_kube_api_errors_total", operation="evict_pod") == 1
    assert result.failed_nodes == {"n1": f"preemption on n1 failed: evicting {NS}/low: etcdserver: request timed out"}
    assert world.state.verify() == []


@pytest.mark.parametrize(
    "condition",
    [
        pytest.param(None, id="no-condition"),
        pytest.param(PREEMPTED_BY_KUBE_SCHEDULER, id="kube-schedulers-condition"),
        pytest.param(
            PodCondition(
                "DisruptionTarget",
                "True",
                "PreemptionByScheduler",
                f"hami-scheduler: preempting to accommodate a higher priority pod: {NS}/urgent (UID uid-older-urgent)",
            ),
            id="hamis-condition-for-another-uid",
        ),
        pytest.param(
            PodCondition(
                "DisruptionTarget",
                "True",
                "EvictionByEvictionAPI",
                f"hami-scheduler: preempting to accommodate a higher priority pod: {NS}/urgent (UID uid-urgent)",
            ),
            id="evicted-by-someone-else",
        ),
    ],
)
async def test_a_tenant_written_preempted_for_is_not_believed_after_a_restart(
    full_card: World, condition: PodCondition | None
) -> None:
    """Issue 39: a tenant deletes its own pod and writes ``hami.io/preempted-for`` on it naming a pending pod;
    after a restart hami places no hold for that pod on the tenant's node (only a condition hami wrote, naming
    the pod's UID, is the record of a hami eviction; a tenant cannot write a condition)."""
    world = full_card
    pending(world, "urgent", 6000, 100)
    world.cluster._pods[(NS, "low")].metadata.annotations[keys.PREEMPTED_FOR] = f"{NS}/urgent"
    terminate(world, "low", *([condition] if condition is not None else []))
    restarted = preempting(backing=world.cluster)
    restarted.add_node(world.cluster.nodes["n1"])
    for pod in world.cluster.pods.values():
        restarted.add_pod(pod)
    await restarted.filter(pending(restarted, "other", 1000, 0), ["n1"])
    assert holds(restarted) == {}


async def test_hamis_own_eviction_record_is_believed_after_a_restart(full_card: World) -> None:
    world = full_card
    await world.filter(pending(world, "urgent", 6000, 100), ["n1"])
    restarted = preempting(backing=world.cluster)
    restarted.add_node(world.cluster.nodes["n1"])
    for pod in world.cluster.pods.values():
        restarted.add_pod(pod)
    assert restarted.extender.cycle.victims == {"uid-low": ((f"{NS}/urgent", "uid-urgent"), "n1", f"{NS}/low")}
