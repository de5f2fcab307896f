"""``filter_node``: one node → devices for every container, or every reason it does not fit (spec §4.4, §4.5)."""

from __future__ import annotations

import pytest

from hami.devices.base import NodeInventory, Placement
from hami.protocol.allocation import ContainerDevice
from hami.protocol.reasons import Reason, Rejection
from hami.scheduling.decide import score
from hami.scheduling.filter import NodeFit, NodeRejection, filter_node
from hami.scheduling.state import ClusterState
from hami.scheduling.usage import Kind
from tests.unit.scheduling.builders import DCU, NVIDIA, gpu, gpus, mig_gpu, pod_request, req, resource_quota, state

R = Reason
INIT, SIDE, APP = Kind.INIT, Kind.SIDECAR, Kind.APP


def p(i: int, uuid: str, mem: int, cores: int = 0, vendor: str = NVIDIA) -> tuple[Placement, ...]:
    """One container's single placement."""
    return (Placement(i, ContainerDevice(uuid, vendor, mem, cores)),)


def one_gpu(devmem: int = 8192) -> ClusterState:
    return state({"node-1": [gpu("GPU-0", devmem=devmem)]})


def run(s: ClusterState, *containers: object, node: str = "node-1", **kwargs: object) -> NodeFit | NodeRejection:
    return filter_node(s, s.nodes[node], pod_request(*containers, **kwargs))  # type: ignore[arg-type]


def test_single_container_fits() -> None:
    assert run(one_gpu(), req(memreq=3000, cores=30)) == NodeFit("node-1", {NVIDIA: (p(0, "GPU-0", 3000, 30),)})


def test_score_is_the_node_score_before_the_pod() -> None:
    s = state({"node-1": [gpu("GPU-0", count=10, devmem=8000)]})
    s.nodes["node-1"].tables[NVIDIA].charge(0, 5, 4000, 50)
    fit = run(s, req(memreq=1000))
    assert isinstance(fit, NodeFit)
    assert score(s, [fit]) == {"node-1": 15.0}


def test_app_containers_accumulate() -> None:
    s = state({"node-1": gpus(2)})
    assert run(s, req(memreq=5000), req(memreq=5000), gpu_policy="binpack") == NodeFit(
        "node-1", {NVIDIA: (p(0, "GPU-0", 5000), p(1, "GPU-1", 5000))}
    )
    assert run(one_gpu(), req(memreq=5000), req(memreq=5000)) == NodeRejection(
        "node-1", {R.CARD_INSUFFICIENT_MEMORY: 1}, 1, (Rejection(R.CARD_INSUFFICIENT_MEMORY, "GPU-0", 5000, 3192),)
    )


def test_init_containers_are_each_fitted_alone() -> None:
    fit = run(one_gpu(), req(memreq=8000), req(memreq=8000), req(memreq=8000), kinds=(INIT, INIT, APP))
    assert fit == NodeFit("node-1", {NVIDIA: (p(0, "GPU-0", 8000),) * 3})


def test_sidecar_is_summed_with_app_containers() -> None:
    assert run(one_gpu(), req(memreq=4000), req(memreq=6000), kinds=(SIDE, APP)) == NodeRejection(
        "node-1", {R.CARD_INSUFFICIENT_MEMORY: 1}, 1, (Rejection(R.CARD_INSUFFICIENT_MEMORY, "GPU-0", 6000, 4192),)
    )


def test_sidecar_runs_beside_later_init_containers() -> None:
    assert run(one_gpu(), req(memreq=4000), req(memreq=6000), None, kinds=(SIDE, INIT, APP)) == NodeRejection(
        "node-1", {R.CARD_INSUFFICIENT_MEMORY: 1}, 1, (Rejection(R.CARD_INSUFFICIENT_MEMORY, "GPU-0", 6000, 4192),)
    )


def test_sidecar_after_an_init_container_does_not_overlap_it() -> None:
    fit = run(one_gpu(), req(memreq=6000), req(memreq=4000), None, kinds=(INIT, SIDE, APP))
    assert fit == NodeFit("node-1", {NVIDIA: (p(0, "GPU-0", 6000), p(0, "GPU-0", 4000), ())})


def test_failing_init_container_rejects_the_node() -> None:
    assert run(one_gpu(), req(memreq=9000), req(memreq=10), kinds=(INIT, APP)) == NodeRejection(
        "node-1", {R.CARD_INSUFFICIENT_MEMORY: 1}, 1, (Rejection(R.CARD_INSUFFICIENT_MEMORY, "GPU-0", 9000, 8192),)
    )


def test_containers_without_devices_keep_their_position() -> None:
    fit = run(one_gpu(), None, req(memreq=1000), None)
    assert fit == NodeFit("node-1", {NVIDIA: ((), p(0, "GPU-0", 1000), ())})


def test_multi_vendor_pod() -> None:
    s = state({"node-1": gpus(1)}, dcu={"node-1": [gpu("DCU-0", type="DCU-Z100", devmem=16384)]})
    fit = run(s, req(memreq=1000), {DCU: req(pct=100, cores=100, vendor=DCU), NVIDIA: req(memreq=500)})
    assert fit == NodeFit(
        "node-1",
        {
            DCU: ((), p(0, "DCU-0", 16384, 100, DCU)),
            NVIDIA: (p(0, "GPU-0", 1000), p(0, "GPU-0", 500)),
        },
    )


def test_node_without_the_vendor_is_unresolvable() -> None:
    s = state({"node-1": gpus(1)})
    verdict = run(s, req(vendor=DCU))
    assert verdict == NodeRejection("node-1", {}, 0, (), True, "node unregistered for DCU")
    assert isinstance(verdict, NodeRejection)
    assert verdict.summary == "node unregistered for DCU"


def test_quarantined_vendor_is_unresolvable_with_its_problem() -> None:
    s = state({"node-1": gpus(1)})
    s.set_node("node-2", {}, problems={NVIDIA: "hami.io/node-nvidia-register: not JSON"})
    assert run(s, req(), node="node-2") == NodeRejection(
        "node-2", {}, 0, (), True, "registration refused: hami.io/node-nvidia-register: not JSON"
    )


def test_empty_judges_the_node_without_usage() -> None:
    s = one_gpu()
    s.nodes["node-1"].tables[NVIDIA].charge(0, 1, 8000, 10)
    node = s.nodes["node-1"]
    request = pod_request(req(memreq=1000))
    assert isinstance(filter_node(s, node, request), NodeRejection)
    empty = filter_node(s, node, request, empty=True)
    assert isinstance(empty, NodeFit)
    assert empty.placements == {NVIDIA: (p(0, "GPU-0", 1000),)}
    assert node.tables[NVIDIA].usage_of(0) == (1, 8000, 10, ())  # untouched


def test_filter_never_writes_the_live_tables() -> None:
    s = state({"node-1": gpus(2)})
    run(s, req(memreq=1000), req(nums=2, memreq=1000), kinds=(SIDE, APP))
    assert [s.nodes["node-1"].tables[NVIDIA].usage_of(i) for i in range(2)] == [(0, 0, 0, ())] * 2


# --- quota --------------------------------------------------------------------------------------------


def with_quota(s: ClusterState, mem: int, namespace: str = "default") -> ClusterState:
    s.upsert_quota(resource_quota(namespace, "q", {"limits.nvidia.com/gpumem": mem}))
    return s


def test_quota_sums_app_containers() -> None:
    s = with_quota(state({"node-1": gpus(2)}), 8000)
    assert run(s, req(memreq=5000), req(memreq=5000)) == NodeRejection(
        "node-1",
        {R.RESOURCE_QUOTA_NOT_FIT: 2},
        2,
        (Rejection(R.RESOURCE_QUOTA_NOT_FIT, "GPU-1", 5000, 0), Rejection(R.RESOURCE_QUOTA_NOT_FIT, "GPU-0", 5000, 0)),
    )


def test_quota_counts_every_device_of_a_container() -> None:
    s = with_quota(state({"node-1": gpus(2)}), 8000)
    verdict = run(s, req(nums=2, memreq=5000))
    assert isinstance(verdict, NodeRejection)
    assert (verdict.counts, verdict.total) == (
        {R.RESOURCE_QUOTA_NOT_FIT: 1, R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1},
        2,
    )


def test_quota_counts_existing_namespace_usage() -> None:
    s = with_quota(one_gpu(), 8000)
    s.quotas.add_usage("default", {"nvidia.com/gpumem": 7500})
    verdict = run(s, req(memreq=1000))
    assert isinstance(verdict, NodeRejection)
    assert verdict.counts == {R.RESOURCE_QUOTA_NOT_FIT: 1}
    assert isinstance(run(s, req(memreq=1000), namespace="other"), NodeFit)


def test_quota_takes_the_init_peak_not_the_sum() -> None:
    # Init 6000 then app 6000 on the same GPU hold 6000 at most: within an 8000 MiB quota.
    s = with_quota(one_gpu(), 8000)
    fit = run(s, req(memreq=6000), req(memreq=6000), kinds=(INIT, APP))
    assert fit == NodeFit("node-1", {NVIDIA: (p(0, "GPU-0", 6000), p(0, "GPU-0", 6000))})


def test_quota_of_init_and_app_on_different_gpus_adds_up() -> None:
    # The ledger charges each GPU its own peak, so GPUs used by different containers add up (as HAMi's collapse).
    # The init container can only use GPU-1; the app container needs both GPUs: GPU-0 adds 3000 MiB on top of the
    # 6000 MiB peak on GPU-1, and 9000 MiB exceed the quota.
    s = state({"node-1": [gpu("GPU-0", devmem=6000), gpu("GPU-1", index=1, devmem=6000)]})
    s.nodes["node-1"].tables[NVIDIA].charge(0, 1, 1000, 0)
    request = (req(memreq=6000), req(nums=2, memreq=3000))
    verdict = run(with_quota(s, 8000), *request, kinds=(INIT, APP))
    assert isinstance(verdict, NodeRejection)
    assert (verdict.counts, verdict.total) == (
        {R.RESOURCE_QUOTA_NOT_FIT: 1, R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1},
        2,
    )
    fit = run(with_quota(s, 9000, "roomy"), *request, kinds=(INIT, APP), namespace="roomy")
    assert isinstance(fit, NodeFit)
    assert fit.pod_devices()[NVIDIA] == (
        (ContainerDevice("GPU-1", NVIDIA, 6000, 0),),
        (ContainerDevice("GPU-1", NVIDIA, 3000, 0), ContainerDevice("GPU-0", NVIDIA, 3000, 0)),
    )


def test_quota_counts_mig_instances_at_their_profile_size() -> None:
    # Three 1 MiB requests become three 1g.5gb instances (4864 MiB each): only one fits a 5000 MiB quota.
    s = with_quota(state({"node-1": [mig_gpu("GPU-M")]}), 5000)
    verdict = run(s, req(nums=3, memreq=1))
    assert isinstance(verdict, NodeRejection)
    assert verdict.counts == {R.RESOURCE_QUOTA_NOT_FIT: 1, R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1}
    fit = run(s, req(nums=1, memreq=1))
    assert isinstance(fit, NodeFit)
    assert fit.pod_devices() == {NVIDIA: ((ContainerDevice("GPU-M", NVIDIA, 4864, 14),),)}


# --- the reason text ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rejection", "text"),
    [
        pytest.param(
            NodeRejection("n", {R.CARD_INSUFFICIENT_MEMORY: 3, R.CARD_TYPE_MISMATCH: 1}, 4),
            "1/4 CardTypeMismatch, 3/4 CardInsufficientMemory",
            id="sorted-as-strings",
        ),
        pytest.param(
            NodeRejection("n", {R.CARD_TYPE_MISMATCH: 2, R.NUMA_NOT_FIT: 10}, 12),
            "10/12 NumaNotFit, 2/12 CardTypeMismatch",
            id="10-sorts-before-2-as-in-hami",
        ),
        pytest.param(NodeRejection("n", {}, 0, detail="node unregistered"), "node unregistered", id="detail-only"),
        pytest.param(
            NodeRejection("n", {R.CARD_NOT_HEALTH: 1}, 1, detail="x"), "x; 1/1 CardNotHealth", id="detail-and-counts"
        ),
    ],
)
def test_summary(rejection: NodeRejection, text: str) -> None:
    assert rejection.summary == text


def test_node_fit_pod_devices() -> None:
    fit = NodeFit("n", {NVIDIA: ((), p(0, "GPU-0", 1000) + p(1, "GPU-1", 1000))})
    assert fit.pod_devices() == {
        NVIDIA: ((), (ContainerDevice("GPU-0", NVIDIA, 1000, 0), ContainerDevice("GPU-1", NVIDIA, 1000, 0)))
    }


def test_inventory_with_pair_scores_reaches_the_fit() -> None:
    s = ClusterState(state().vendors)
    scores = {"GPU-0": {"GPU-1": 1, "GPU-2": 1}, "GPU-1": {"GPU-0": 1, "GPU-2": 50}, "GPU-2": {"GPU-0": 1, "GPU-1": 50}}
    s.set_node("node-1", {NVIDIA: NodeInventory(gpus(3), scores)})
    fit = run(s, req(nums=2), gpu_policy="topology-aware")
    assert isinstance(fit, NodeFit)
    assert [d.uuid for d in fit.pod_devices()[NVIDIA][0]] == ["GPU-1", "GPU-2"]
