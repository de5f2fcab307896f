"""One scheduling cycle: decide (filter, score, select), reserve and unreserve (spec §4.1, §5.5, §5.6)."""

from __future__ import annotations

import pytest

from hami.devices.nvidia.mig import mig_allocations
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice, MigAllocation
from hami.protocol.inventory import MigPlacement
from hami.protocol.reasons import Reason, Rejection
from hami.scheduling.decide import Decision, decide, reserve, select, unreserve
from hami.scheduling.filter import NodeRejection
from hami.scheduling.memo import Verdicts
from hami.scheduling.state import ClusterState
from hami.scheduling.usage import Kind
from tests.unit.scheduling.builders import (
    DCU,
    NVIDIA,
    gpu,
    gpus,
    mig_gpu,
    pod_request,
    req,
    resource_quota,
    state,
    usage,
)

NOW = 1_700_000_000
TO_ALLOCATE, ALLOCATED = "hami.io/vgpu-devices-to-allocate", "hami.io/vgpu-devices-allocated"
P = MigPlacement


def mig(decision: Decision) -> tuple[MigAllocation, ...]:
    """The decision's MIG instances as NVIDIA annotates them (its slices, through the NVIDIA vendor's encoder)."""
    return tuple(mig_allocations(decision.slices.get(NVIDIA, ())))


def cd(uuid: str, mem: int, cores: int = 0, vendor: str = NVIDIA) -> ContainerDevice:
    return ContainerDevice(uuid, vendor, mem, cores)


def half_used(s: ClusterState, node: str) -> ClusterState:
    s.nodes[node].tables[NVIDIA].charge(0, 5, 4096, 50)
    return s


# --- decide: the chosen node, devices and annotations ----------------------------------------------------


def test_decision_and_annotations_are_exact() -> None:
    s = state({"node-1": gpus(1)})
    decision = decide(s, pod_request(req(memreq=3000, cores=30)), ["node-1"], NOW)
    value = "GPU-0,NVIDIA,3000,30:;"
    assert decision == Decision(
        uid="uid-1",
        pod="default/pod-1",
        node="node-1",
        devices={NVIDIA: ((cd("GPU-0", 3000, 30),),)},
        annotations={
            keys.VGPU_NODE: "node-1",
            keys.VGPU_TIME: "1700000000",
            TO_ALLOCATE: value,
            ALLOCATED: value,
        },
        scores={"node-1": 0.0},
        message="find fit node(node-1), 0 nodes not fit, 1 nodes fit(node-1:0.00)",
        node_policy="binpack",
    )


def test_empty_containers_keep_their_place_in_the_annotation() -> None:
    s = state({"node-1": gpus(2)})
    request = pod_request(None, req(memreq=1000), None, req(nums=2, memreq=500), kinds=(Kind.INIT, *(Kind.APP,) * 3))
    decision = decide(s, request, ["node-1"], NOW)
    assert decision.devices == {
        NVIDIA: ((), (cd("GPU-0", 1000),), (), (cd("GPU-1", 500), cd("GPU-0", 500))),
    }
    value = ";GPU-0,NVIDIA,1000,0:;;GPU-1,NVIDIA,500,0:GPU-0,NVIDIA,500,0:;"
    assert (decision.annotations[TO_ALLOCATE], decision.annotations[ALLOCATED]) == (value, value)


def test_multi_vendor_pod_writes_each_vendors_annotations() -> None:
    s = state({"node-1": gpus(1)}, dcu={"node-1": [gpu("DCU-0", devmem=16384)]})
    request = pod_request(req(memreq=1000), req(pct=100, cores=100, vendor=DCU))
    decision = decide(s, request, ["node-1"], NOW)
    assert decision.annotations == {
        keys.VGPU_NODE: "node-1",
        keys.VGPU_TIME: str(NOW),
        TO_ALLOCATE: "GPU-0,NVIDIA,1000,0:;;",
        ALLOCATED: "GPU-0,NVIDIA,1000,0:;;",
        "hami.io/dcu-devices-to-allocate": ";DCU-0,DCU,16384,100:;",
        "hami.io/dcu-devices-allocated": ";DCU-0,DCU,16384,100:;",
    }


def test_only_the_requested_vendors_are_annotated() -> None:
    s = state({"node-1": gpus(1)}, dcu={"node-1": [gpu("DCU-0")]})
    decision = decide(s, pod_request(req(memreq=1000)), ["node-1"], NOW)
    assert sorted(decision.annotations) == sorted([keys.VGPU_NODE, keys.VGPU_TIME, TO_ALLOCATE, ALLOCATED])
    assert list(decision.devices) == [NVIDIA]


def test_mig_reservations_are_annotated() -> None:
    s = state({"node-1": [mig_gpu("GPU-M")]})
    request = pod_request(req(memreq=3000), req(nums=2, memreq=9000), kinds=(Kind.INIT, Kind.APP))
    decision = decide(s, request, ["node-1"], NOW)
    assert decision.devices == {NVIDIA: ((cd("GPU-M", 4864, 14),), (cd("GPU-M", 9984, 28), cd("GPU-M", 9984, 28)))}
    assert mig(decision) == (
        MigAllocation(0, 0, "GPU-M", "1g.5gb", P(6, 1)),
        MigAllocation(1, 0, "GPU-M", "2g.10gb", P(0, 2)),
        MigAllocation(1, 1, "GPU-M", "2g.10gb", P(2, 2)),
    )
    assert keys.NVIDIA_MIG_ALLOCATIONS in decision.annotations
    assert keys.NVIDIA_MIG_ALLOCATIONS not in decide(state({"node-1": gpus(1)}), request, ["node-1"], NOW).annotations


# --- select: node policies and ties (spec §5.5) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "chosen", "listed"),
    [
        pytest.param("binpack", "node-b", "node-c:0.00,node-a:0.00,node-b:15.00", id="binpack-most-used-node"),
        pytest.param("spread", "node-a", "node-b:15.00,node-c:0.00,node-a:0.00", id="spread-least-used-tie-by-name"),
    ],
)
def test_node_policy(policy: str, chosen: str, listed: str) -> None:
    s = half_used(state({"node-a": gpus(1, devmem=8192), "node-b": gpus(1, devmem=8192), "node-c": gpus(1)}), "node-b")
    decision = decide(s, pod_request(req(memreq=100), node_policy=policy), ["node-c", "node-b", "node-a"], NOW)
    assert (decision.node, decision.scores) == (chosen, {"node-a": 0.0, "node-b": 15.0, "node-c": 0.0})
    assert decision.message == f"find fit node({chosen}), 0 nodes not fit, 3 nodes fit({listed})"


def test_select_breaks_ties_by_node_name() -> None:
    scores = {"b": 1.0, "c": 2.0, "a": 1.0, "d": 2.0}
    assert select(scores, "binpack") == ["c", "d", "a", "b"]
    assert select(scores, "spread") == ["a", "b", "c", "d"]


def test_more_fitting_nodes_than_listed_are_counted_right() -> None:
    names = [f"n{i:02d}" for i in range(12)]
    s = state({n: gpus(1) for n in names})
    decision = decide(s, pod_request(req(memreq=100)), names, NOW)
    listed = ",".join(f"{n}:0.00" for n in reversed(names[:10]))
    assert decision.message == f"find fit node(n00), 0 nodes not fit, 12 nodes fit(… 2 more,{listed})"


def test_the_memo_never_changes_a_decision() -> None:
    s = half_used(state({"node-a": gpus(1, devmem=8192), "node-b": gpus(1, devmem=8192)}), "node-b")
    memo = Verdicts()
    request = pod_request(req(memreq=100))
    fresh = decide(s, request, ["node-a", "node-b"], NOW)
    assert decide(s, request, ["node-a", "node-b"], NOW, memo) == fresh
    assert decide(s, request, ["node-a", "node-b"], NOW, memo) == fresh  # served from the memo
    # A node removed and registered again (a new NodeState, generation counted from 1 again) is judged afresh.
    s.remove_node("node-b")
    s.set_node("node-b", {})
    again = decide(s, request, ["node-a", "node-b"], NOW, memo)
    assert (again.node, again.rejected["node-b"].unresolvable) == ("node-a", True)


# --- rejected nodes ----------------------------------------------------------------------------------------


def test_every_rejected_node_keeps_its_reasons_also_when_another_fits() -> None:
    s = state({"full": gpus(1), "small": gpus(1, devmem=1000), "ok": gpus(1)})
    s.nodes["full"].tables[NVIDIA].charge(0, 1, 8000, 0)
    decision = decide(s, pod_request(req(memreq=2000)), ["full", "small", "ok", "ghost"], NOW)
    assert decision.node == "ok"
    assert decision.rejected == {
        "full": NodeRejection(
            "full",
            {Reason.CARD_INSUFFICIENT_MEMORY: 1},
            1,
            (Rejection(Reason.CARD_INSUFFICIENT_MEMORY, "GPU-0", 2000, 192),),
        ),
        "small": NodeRejection(
            "small",
            {Reason.CARD_INSUFFICIENT_MEMORY: 1},
            1,
            (Rejection(Reason.CARD_INSUFFICIENT_MEMORY, "GPU-0", 2000, 1000),),
            unresolvable=True,
        ),
        "ghost": NodeRejection("ghost", {}, 0, unresolvable=True, detail="node unregistered"),
    }
    assert decision.message == "find fit node(ok), 3 nodes not fit, 1 nodes fit(ok:0.00)"


@pytest.mark.parametrize(
    ("request_nums", "usage_slots", "unresolvable"),
    [
        pytest.param(3, 0, True, id="more-gpus-than-the-node-has-unresolvable"),
        pytest.param(1, 10, False, id="busy-node-could-fit-when-empty"),
    ],
)
def test_unresolvable_flag(request_nums: int, usage_slots: int, unresolvable: bool) -> None:
    s = state({"node-1": gpus(2)})
    for i in range(2):
        s.nodes["node-1"].tables[NVIDIA].charge(i, usage_slots, 0, 0)
    decision = decide(s, pod_request(req(nums=request_nums)), ["node-1"], NOW)
    assert decision.node is None
    assert decision.rejected["node-1"].unresolvable is unresolvable


def test_no_node_fits() -> None:
    s = state({"node-1": gpus(1, devmem=1000)})
    s.set_node("node-2", {}, problems={NVIDIA: "bad register"})
    decision = decide(s, pod_request(req(memreq=2000)), ["node-1", "node-2"], NOW)
    assert decision == Decision(
        "uid-1",
        "default/pod-1",
        None,
        rejected={
            "node-1": NodeRejection(
                "node-1",
                {Reason.CARD_INSUFFICIENT_MEMORY: 1},
                1,
                (Rejection(Reason.CARD_INSUFFICIENT_MEMORY, "GPU-0", 2000, 1000),),
                unresolvable=True,
            ),
            "node-2": NodeRejection("node-2", {}, 0, unresolvable=True, detail="registration refused: bad register"),
        },
        message="no available node, 2 nodes do not meet",
    )


def test_pod_without_devices_passes_through() -> None:
    s = state({"node-1": gpus(1)})
    assert decide(s, pod_request(None), ["node-1"], NOW) == Decision(
        "uid-1", "default/pod-1", None, message="pod requests no managed device"
    )


def test_candidates_are_deduplicated() -> None:
    s = state({"node-1": gpus(1)})
    decision = decide(s, pod_request(req()), ["node-1", "node-1"], NOW)
    assert decision.message == "find fit node(node-1), 0 nodes not fit, 1 nodes fit(node-1:0.00)"


def test_decide_does_not_change_the_state() -> None:
    s = state({"node-1": gpus(2), "node-2": [mig_gpu("GPU-M")]})
    before = usage(s)
    decide(s, pod_request(req(nums=2, memreq=100), req(memreq=9000)), ["node-1", "node-2"], NOW)
    assert (usage(s), s.pods) == (before, {})


# --- reserve / unreserve ------------------------------------------------------------------------------------


def test_reserve_charges_the_ledger_and_the_next_pod_sees_it() -> None:
    s = state({"node-1": gpus(1)})
    first = pod_request(req(memreq=5000, cores=50), uid="uid-1")
    record = reserve(s, first, decide(s, first, ["node-1"], NOW))
    assert record is not None
    assert (record.node, record.devices, s.pods) == ("node-1", {NVIDIA: ((cd("GPU-0", 5000, 50),),)}, {"uid-1": record})
    assert s.nodes["node-1"].tables[NVIDIA].usage_of(0) == (1, 5000, 50, ())
    assert s.quotas.used == {"default": {"nvidia.com/gpumem": 5000, "nvidia.com/gpucores": 50}}
    second = pod_request(req(memreq=5000), uid="uid-2")
    assert decide(s, second, ["node-1"], NOW).node is None


def test_reserve_is_idempotent_and_unreserve_restores() -> None:
    s = state({"node-1": gpus(2)})
    before = usage(s)
    request = pod_request(req(nums=2, memreq=1000, cores=10))
    decision = decide(s, request, ["node-1"], NOW)
    record = reserve(s, request, decision)
    after = usage(s)
    assert reserve(s, request, decision) == record
    assert usage(s) == after
    assert unreserve(s, "uid-1") == record
    assert (usage(s), s.quotas.used, s.pods) == (before, {}, {})
    assert unreserve(s, "uid-1") is None


def test_reserve_without_a_node_does_nothing() -> None:
    s = state({"node-1": gpus(1, devmem=10)})
    request = pod_request(req(memreq=1000))
    assert reserve(s, request, decide(s, request, ["node-1"], NOW)) is None
    assert s.pods == {}


def test_reserve_records_mig_placements() -> None:
    s = state({"node-1": [mig_gpu("GPU-M")]})
    request = pod_request(req(nums=2, memreq=3000))
    reserve(s, request, decide(s, request, ["node-1"], NOW))
    assert s.nodes["node-1"].tables[NVIDIA].usage_of(0) == (2, 9728, 28, (P(6, 1), P(5, 1)))
    nxt = pod_request(req(memreq=3000), uid="uid-2")
    assert mig(decide(s, nxt, ["node-1"], NOW)) == (MigAllocation(0, 0, "GPU-M", "1g.5gb", P(4, 1)),)
    unreserve(s, "uid-1")
    assert s.nodes["node-1"].tables[NVIDIA].usage_of(0) == (0, 0, 0, ())


def test_reserved_init_and_sidecar_never_exceed_what_fit_checked() -> None:
    # Init 6000 then a sidecar 4000 on one 8192 MiB GPU: they never run together, so the pod holds 6000.
    s = state({"node-1": gpus(1)})
    request = pod_request(req(memreq=6000), req(memreq=4000), None, kinds=(Kind.INIT, Kind.SIDECAR, Kind.APP))
    decision = decide(s, request, ["node-1"], NOW)
    assert decision.devices == {NVIDIA: ((cd("GPU-0", 6000),), (cd("GPU-0", 4000),), ())}
    reserve(s, request, decision)
    assert s.nodes["node-1"].tables[NVIDIA].usage_of(0) == (1, 6000, 0, ())
    assert s.verify() == []


def test_a100_mig_sequence_through_the_ledger() -> None:
    """Spec §6.8 from empty, one pod at a time: 3g.20gb → 4, 2g.10gb → 0, 1g.5gb → 3, 1g.5gb → 2; then full."""
    s = state({"node-1": [mig_gpu("GPU-M")]})
    chosen = []
    for k, memory in enumerate((19968, 9984, 4864, 4864)):
        request = pod_request(req(memreq=memory), uid=f"uid-{k}")
        decision = decide(s, request, ["node-1"], NOW)
        reserve(s, request, decision)
        chosen.append((mig(decision)[0].profile, mig(decision)[0].placement))
    assert chosen == [("3g.20gb", P(4, 4)), ("2g.10gb", P(0, 2)), ("1g.5gb", P(3, 1)), ("1g.5gb", P(2, 1))]
    assert s.nodes["node-1"].tables[NVIDIA].usage_of(0) == (
        4,
        19968 + 9984 + 4864 + 4864,
        42 + 28 + 14 + 14,
        (P(4, 4), P(0, 2), P(3, 1), P(2, 1)),
    )
    full = decide(s, pod_request(req(memreq=1), uid="uid-9"), ["node-1"], NOW)
    assert full.rejected["node-1"].counts == {Reason.CARD_MIG_TOPOLOGY_INFEASIBLE: 1}
    # The second 2g.10gb pod leaving frees slices 0–1 for the next one.
    unreserve(s, "uid-1")
    again = decide(s, pod_request(req(memreq=9000), uid="uid-10"), ["node-1"], NOW)
    assert mig(again) == (MigAllocation(0, 0, "GPU-M", "2g.10gb", P(0, 2)),)


def test_a_node_refused_only_by_the_namespace_quota_is_not_unresolvable() -> None:
    # Freeing quota in the namespace can make the pod fit, so kube-scheduler may still preempt for it.
    s = state({"node-1": gpus(1)})
    s.upsert_quota(resource_quota("default", "gpu", {"limits.nvidia.com/gpumem": 1000}))
    decision = decide(s, pod_request(req(memreq=3000, cores=30)), ["node-1"], NOW)
    rejection = decision.rejected["node-1"]
    assert (decision.node, rejection.counts, rejection.unresolvable) == (
        None,
        {Reason.RESOURCE_QUOTA_NOT_FIT: 1},
        False,
    )
