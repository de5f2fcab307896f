"""hami's own preemption (``--preemption=self``) stays out of DRA mode's way (issue 38).

kube-scheduler preempts for DRA-mode pods itself (for node resources; Kubernetes 1.37 does not preempt to free a
device: see tests/e2e/test_dra_policy.py). hami must:

* never preempt *for* a DRA-mode pod: no eviction, no hold, no nomination — neither from a /filter (kube-scheduler
  does not call it for a pod that names no managed resource, but a stray call must change nothing), nor from the
  holds rebuilt after a restart out of a ``nominatedNodeName`` that kube-scheduler's own preemption wrote;
* never evict a DRA-mode pod *for* an extender pod: the capacity its claim holds is kube-scheduler's to give, and
  hami cannot keep it for the preemptor (kube-scheduler sees no hold of hami's), so a claim's pod is no victim and
  the capacity a claim holds is never counted as freeable.
"""

from __future__ import annotations

import json

from hami.protocol import keys
from hami.protocol.objects import ObjectMeta, Pod, PodResourceClaim, PodSpec, PodStatus
from tests.unit.scheduling.drafix import result, shared_device, synthetic_claim, synthetic_slice
from tests.unit.scheduling.test_preempting import evicted, holds, pending, preempting, running, sample
from tests.unit.server.support import NS, World, gpu_node, plain_pod

REQUESTS = json.dumps({"dra-main-bcdfg": {"container": "main", "resources": {"nvidia.com/gpu": "1"}}})


def dra_pod(world: World, name: str, priority: int, *, node: str = "", nominated: str = "") -> Pod:
    """A pod as the DRA-mode webhook leaves it: no vendor resource, its claim by name, hami's scheduler."""
    pod = plain_pod(name)
    pod.metadata = ObjectMeta(
        name=name,
        namespace=NS,
        uid=f"uid-{name}",
        labels={keys.DRA_LABEL: "true"},
        annotations={keys.DRA_REQUESTS: REQUESTS},
    )
    pod.spec = PodSpec(
        containers=pod.spec.containers,
        scheduler_name="hami-scheduler",
        priority=priority,
        node_name=node,
        resource_claims=[PodResourceClaim(name="hami-main", resource_claim_name=f"{name}-main-bcdfg")],
    )
    pod.status = PodStatus(phase="Running" if node else "Pending", nominated_node_name=nominated)
    return world.add_pod(pod)


def claim_world() -> World:
    """n1: one 24000 MiB card, registered with hami and published by a DRA driver; a DRA-mode pod of priority 1
    holds 16000 MiB of it through its claim, an extender pod of priority 1 holds 8000 MiB."""
    world = preempting()
    world.add_node(gpu_node("n1", gpus=1))
    device = shared_device("gpu-0", "GPU-n1-0", "24000Mi", cores=100, cores_default=0)
    world.extender.on_resource_slice(synthetic_slice("s1", "n1", [device]))
    dra_pod(world, "dra-low", 1, node="n1")
    taken = [result("gpu-0", "n1", "s1", memory="16000Mi", cores="0")]
    world.extender.on_resource_claim(synthetic_claim("dra-low-main-bcdfg", taken, pods=[("dra-low", "uid-dra-low")]))
    running(world, "ext-low", "n1", 8000, 1)
    assert world.usage() == {"GPU-n1-0": (2, 24000, 0)}
    return world


async def test_a_dra_mode_pod_never_preempts_through_hami() -> None:
    world = claim_world()
    urgent = dra_pod(world, "dra-urgent", 1000)
    calls = list(world.cluster.calls)
    answer = await world.filter(urgent, ["n1"])
    assert answer.node_names == ["n1"]  # passed through: hami has nothing to decide for it
    assert evicted(world) == []
    assert holds(world) == {}
    assert world.pod("dra-urgent").status.nominated_node_name == ""
    assert world.cluster.calls == calls  # nothing written: no eviction, no nomination, no event


async def test_a_nomination_by_kube_schedulers_preemption_is_no_hold_of_hamis_after_a_restart() -> None:
    """kube-scheduler preempted for a DRA-mode pod and nominated it; hami restarts: it rebuilds no hold for it."""
    world = claim_world()
    dra_pod(world, "dra-urgent", 1000, nominated="n1")
    other = pending(world, "other", 100, 0)
    assert (await world.filter(other, ["n1"])).node_names is None  # the card is full, for a reason of its own
    assert holds(world) == {}
    assert world.extender.cycle.holds.rebuilt


async def test_an_extender_pod_evicts_only_extender_pods_never_a_claims_pod() -> None:
    """Room on the card needs the claim's 16000 MiB: the claim's pod is no victim, so nothing is evicted."""
    world = claim_world()
    calls = list(world.cluster.calls)
    answer = await world.filter(pending(world, "urgent", 12000, 100), ["n1"])
    assert answer.node_names is None
    assert evicted(world) == []
    assert holds(world) == {}
    assert "evict_pod" not in world.cluster.calls[len(calls) :]
    assert answer.failed_nodes == {"n1": "1/1 CardInsufficientMemory"}
    assert sample(world, "hami_preemption_attempts_total", result="no-candidate") == 1  # tried, found no victim


async def test_when_the_extender_pods_room_is_enough_only_that_pod_goes() -> None:
    world = claim_world()
    await world.filter(pending(world, "urgent", 6000, 100), ["n1"])
    assert evicted(world) == ["ext-low"]
    assert holds(world) == {"urgent": ("n1", 6000)}
    assert world.state.verify() == []
