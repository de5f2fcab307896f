"""The shared fit loop: HAMi's per-device checks in order, scores, NUMA, topology and MIG (spec §5.1, §6)."""

from __future__ import annotations

from collections.abc import Sequence
from math import comb
from typing import Any

import pytest

from hami.devices.base import ContainerRequest, Fitted, Placement, QuotaCheck, Selector, Slice, Unfit
from hami.devices.common import EXHAUSTIVE_SUBSETS, best_combination, fit_shared, worst_single
from hami.devices.nvidia.mig import MigPartitions
from hami.devices.scoring import device_scores
from hami.devices.table import DeviceTable
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo, MigPlacement
from hami.protocol.reasons import Reason, Rejection
from tests.unit.scheduling.builders import (
    A100,
    ANY,
    NVIDIA,
    ctx,
    gpu,
    gpus,
    mig_gpu,
    req,
    symmetric,
    table,
)

R = Reason
P = MigPlacement


def cd(uuid: str, mem: int, cores: int = 0) -> ContainerDevice:
    return ContainerDevice(uuid, NVIDIA, mem, cores)


def placed(*items: tuple[int, str, int, int]) -> Fitted:
    """Fitted placements from (table position, uuid, MiB, cores)."""
    return Fitted(tuple(Placement(i, cd(u, m, c)) for i, u, m, c in items))


def uuids(outcome: Fitted | Unfit) -> list[str]:
    assert isinstance(outcome, Fitted), outcome
    return [p.device.uuid for p in outcome.placements]


def fit(
    t: DeviceTable,
    request: ContainerRequest,
    policy: str = "spread",
    selector: Selector = ANY,
    **ctx_args: Any,
) -> Fitted | Unfit:
    return fit_shared(t, request, ctx(policy, **ctx_args), selector, NVIDIA, MigPartitions())


# --- the checks of spec §6.2, each with its reason and numbers -------------------------------------------

REFUSE = lambda accepted, mem, cores, uuid: False  # noqa: E731 - a quota that never fits


def fit_one(
    *,
    device: DeviceInfo | None = None,
    usage: tuple[int, int, int] = (0, 0, 0),
    request: ContainerRequest | None = None,
    policy: str = "spread",
    cordoned: frozenset[str] = frozenset(),
    selector: Selector = ANY,
    quota: QuotaCheck | None = None,
    broken: str | None = None,
    mig: Sequence[MigPlacement] = (),
) -> Fitted | Unfit:
    t = table(device or gpu("GPU-0"), usage={0: usage})
    t.broken[0] = broken
    t.slices[0] = tuple(mig)
    return fit(t, request or req(memreq=1000), policy, selector, cordoned=cordoned, quota=quota)


def unfit(reason: Reason, *closest: Rejection) -> Unfit:
    return Unfit({reason: 1}, 1, closest)


MIG_FULL = (P(0, 8),)

# Each case makes the device fail one check AND a later one: only the first failing check is counted.
CHECK_ORDER = [
    pytest.param(
        {"device": gpu("GPU-0", health=False), "cordoned": frozenset({"GPU-0"})},
        unfit(R.CARD_NOT_HEALTH),
        id="1-unhealthy-before-cordoned",
    ),
    pytest.param(
        {"broken": "MIG task on a hami-core GPU", "cordoned": frozenset({"GPU-0"})},
        unfit(R.CARD_NOT_HEALTH),
        id="1-broken-counts-as-unhealthy",
    ),
    pytest.param(
        {"cordoned": frozenset({"GPU-0"}), "selector": Selector(use_types=(("a100",),))},
        unfit(R.CARD_CORDONED),
        id="2-cordoned-before-type",
    ),
    pytest.param(
        {"selector": Selector(use_types=(("a100",),), nouse_uuids=frozenset({"GPU-0"}))},
        unfit(R.CARD_TYPE_MISMATCH),
        id="3-use-gputype-before-uuid",
    ),
    pytest.param(
        {"selector": Selector(nouse_types=(("t4",),), nouse_uuids=frozenset({"GPU-0"}))},
        unfit(R.CARD_TYPE_MISMATCH),
        id="3-nouse-gputype-before-uuid",
    ),
    pytest.param(
        {"selector": Selector(modes=frozenset({"mig"}), nouse_uuids=frozenset({"GPU-0"}))},
        unfit(R.CARD_TYPE_MISMATCH),
        id="3-vgpu-mode-before-uuid",
    ),
    pytest.param(
        {"selector": Selector(use_uuids=frozenset({"GPU-9"})), "device": gpu("GPU-0", count=2), "usage": (2, 0, 0)},
        unfit(R.CARD_UUID_MISMATCH),
        id="5-use-gpuuuid-before-slots",
    ),
    pytest.param(
        {"device": gpu("GPU-0", count=2), "usage": (2, 0, 0), "policy": "mutex"},
        unfit(R.CARD_TIME_SLICING_EXHAUSTED, Rejection(R.CARD_TIME_SLICING_EXHAUSTED, "GPU-0", 1, 0)),
        id="6-slots-before-mutex",
    ),
    pytest.param(
        {"usage": (1, 0, 0), "policy": "mutex", "quota": REFUSE},
        unfit(R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT),
        id="7-mutex-before-quota",
    ),
    pytest.param(
        {"usage": (1, 8000, 0), "quota": REFUSE},
        unfit(R.RESOURCE_QUOTA_NOT_FIT, Rejection(R.RESOURCE_QUOTA_NOT_FIT, "GPU-0", 1000, 0)),
        id="10-quota-before-memory",
    ),
    pytest.param(
        {"usage": (1, 8000, 90), "request": req(memreq=1000, cores=50)},
        unfit(R.CARD_INSUFFICIENT_MEMORY, Rejection(R.CARD_INSUFFICIENT_MEMORY, "GPU-0", 1000, 192)),
        id="11-memory-before-cores",
    ),
    pytest.param(
        {"usage": (1, 0, 10), "request": req(memreq=1000, cores=100)},
        unfit(R.CARD_INSUFFICIENT_CORE, Rejection(R.CARD_INSUFFICIENT_CORE, "GPU-0", 100, 90)),
        id="12-cores-before-exclusive",
    ),
    pytest.param(
        {"device": mig_gpu("GPU-0"), "usage": (1, 0, 0), "request": req(memreq=1000, cores=100), "mig": MIG_FULL},
        unfit(R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, Rejection(R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, "GPU-0", 100, 100)),
        id="13-exclusive-cores-100-on-a-used-card-before-mig",
    ),
    pytest.param(
        {"device": mig_gpu("GPU-0"), "usage": (1, 0, 100), "request": req(memreq=1000), "mig": MIG_FULL},
        unfit(R.CARD_COMPUTE_UNITS_EXHAUSTED),
        id="14-cores-0-on-a-fully-cored-card-before-mig",
    ),
    pytest.param(
        {"device": mig_gpu("GPU-0"), "usage": (1, 4000, 50), "request": req(memreq=1000), "mig": MIG_FULL},
        unfit(R.CARD_MIG_TOPOLOGY_INFEASIBLE, Rejection(R.CARD_MIG_TOPOLOGY_INFEASIBLE, "GPU-0", 1000, 36960)),
        id="15-mig-no-free-placement",
    ),
]


@pytest.mark.parametrize(("setup", "expected"), CHECK_ORDER)
def test_first_failing_check_is_counted(setup: dict[str, Any], expected: Unfit) -> None:
    assert fit_one(**setup) == expected


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        pytest.param(
            {"device": gpu("GPU-0", type=A100), "selector": Selector(use_types=(("a10",),))},
            unfit(R.CARD_TYPE_MISMATCH),
            id="use-gputype-A10-does-not-select-A100",
        ),
        pytest.param(
            {"device": gpu("GPU-0", type="NVIDIA A10"), "selector": Selector(nouse_types=(("a100",),))},
            placed((0, "GPU-0", 1000, 0)),
            id="nouse-gputype-A100-keeps-A10",
        ),
        pytest.param(
            {"device": gpu("GPU-0", mode="hami-core"), "selector": Selector(modes=frozenset({"hami"}))},
            unfit(R.CARD_TYPE_MISMATCH),
            id="vgpu-mode-hami-does-not-admit-hami-core",
        ),
        pytest.param(
            {"selector": Selector(nouse_uuids=frozenset({"GPU-0"}))},
            unfit(R.CARD_UUID_MISMATCH),
            id="nouse-gpuuuid",
        ),
        pytest.param(
            {"usage": (1, 0, 0), "policy": "mutex,binpack"},
            unfit(R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT),
            id="mutex-in-a-chain",
        ),
        pytest.param(
            {"device": gpu("GPU-0", devcore=200), "usage": (1, 0, 0), "request": req(cores=100)},
            unfit(
                R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, Rejection(R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, "GPU-0", 100, 200)
            ),
            id="exclusive-also-on-a-200-core-card-deliberate-difference",
        ),
        pytest.param(
            {"usage": (1, 0, 0), "request": req(cores=99)},
            placed((0, "GPU-0", 0, 99)),
            id="99-cores-are-not-exclusive",
        ),
        pytest.param(
            {"request": req(memreq=1000, cores=150)},
            placed((0, "GPU-0", 1000, 100)),
            id="cores-over-100-clamped-to-100",
        ),
        pytest.param(
            {"usage": (1, 0, 10), "request": req(memreq=1000, cores=150)},
            unfit(R.CARD_INSUFFICIENT_CORE, Rejection(R.CARD_INSUFFICIENT_CORE, "GPU-0", 100, 90)),
            id="clamped-cores-still-need-free-cores",
        ),
        pytest.param(
            {"device": gpu("GPU-0", devcore=200), "usage": (2, 0, 200)},
            unfit(R.CARD_COMPUTE_UNITS_EXHAUSTED),
            id="cores-0-refused-on-a-fully-cored-200-core-card",
        ),
        pytest.param(
            {"usage": (2, 0, 100), "request": req(memreq=1000, cores=1)},
            unfit(R.CARD_INSUFFICIENT_CORE, Rejection(R.CARD_INSUFFICIENT_CORE, "GPU-0", 1, 0)),
            id="cores-1-on-a-fully-cored-card-is-insufficient-core",
        ),
        pytest.param(
            {"device": gpu("GPU-0", count=3), "usage": (3, 0, 0)},
            unfit(R.CARD_TIME_SLICING_EXHAUSTED, Rejection(R.CARD_TIME_SLICING_EXHAUSTED, "GPU-0", 1, 0)),
            id="all-slots-taken",
        ),
    ],
)
def test_single_check(setup: dict[str, Any], expected: Fitted | Unfit) -> None:
    assert fit_one(**setup) == expected


def test_reasons_are_summed_per_device_and_closest_misses_sorted_by_free_amount() -> None:
    t = table(
        *gpus(4),
        gpu("GPU-4", index=4, health=False),
        usage={0: (1, 8092, 0), 1: (1, 7892, 0), 2: (1, 7992, 0), 3: (1, 8142, 0)},
    )
    assert fit(t, req(memreq=1000)) == Unfit(
        {R.CARD_INSUFFICIENT_MEMORY: 4, R.CARD_NOT_HEALTH: 1},
        5,
        (
            Rejection(R.CARD_INSUFFICIENT_MEMORY, "GPU-1", 1000, 300),
            Rejection(R.CARD_INSUFFICIENT_MEMORY, "GPU-2", 1000, 200),
            Rejection(R.CARD_INSUFFICIENT_MEMORY, "GPU-0", 1000, 100),
        ),
    )


def test_node_insufficient_device() -> None:
    """Spec §6.12 example 4: 2 idle devices, 3 GPUs requested. Via fitInDevices HAMi says NodeInsufficientDevice
    (Fit called directly would say ``2/2 AllocatedCardsInsufficientRequest``); fit_shared includes the count check."""
    assert fit(table(*gpus(2)), req(nums=3)) == Unfit(
        {R.NODE_INSUFFICIENT_DEVICE: 2}, 2, (Rejection(R.NODE_INSUFFICIENT_DEVICE, None, 3, 2),)
    )


def test_allocated_cards_insufficient_request_counts_the_partial_allocation() -> None:
    t = table(*gpus(2), gpu("GPU-2", index=2, health=False))
    assert fit(t, req(nums=3)) == Unfit({R.CARD_NOT_HEALTH: 1, R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 2}, 3)


# --- spec §6.12 worked examples ----------------------------------------------------------------------------


def test_example_two_idle_devices_one_gpu() -> None:
    """[dev-0, dev-1] 128 MiB / 100 cores / 100 slots, request 1×{64 MiB, 50 cores}. HAMi tries dev-1 (the later
    one) on this exact tie; hami breaks exact ties by device index (deliberate difference, policy.py)."""
    t = table(*(gpu(f"dev-{i}", index=i, count=100, devmem=128) for i in range(2)))
    assert fit(t, req(memreq=64, cores=50)) == placed((0, "dev-0", 64, 50))


def test_example_percentage_memory() -> None:
    t = table(gpu("GPU-0", count=100, devmem=1280), usage={0: (20, 0, 10)})
    assert fit(t, req(pct=10, cores=20)) == placed((0, "GPU-0", 128, 20))


def test_example_whole_card_percentage() -> None:
    assert fit(table(gpu("GPU-0", devmem=11264)), req(pct=100)) == placed((0, "GPU-0", 11264, 0))
    full = table(gpu("GPU-0", devmem=11264), usage={0: (1, 11260, 0)})
    assert fit(full, req(pct=100)) == unfit(
        R.CARD_INSUFFICIENT_MEMORY, Rejection(R.CARD_INSUFFICIENT_MEMORY, "GPU-0", 11264, 4)
    )


# --- device score (spec §5.1, with the pod's own request) ---------------------------------------------


def test_device_score_example_11_75() -> None:
    """Count 10, Used 2, cores 1/4, memory 2048/8192, request {Memreq 1024, pct 0, cores 1}: 10 × (3/10 + 2/4 +
    3072/8192) = 11.75 (in HAMi the request term only applies when types match; hami always counts it)."""
    t = table(gpu("GPU-0", count=10, devcore=4, devmem=8192), usage={0: (2, 2048, 1)})
    assert device_scores(t, req(memreq=1024, pct=0, cores=1), (1, 1, 1))[0] == 11.75


@pytest.mark.parametrize(
    ("weights", "score"),
    [
        pytest.param((2, 0, 1), 9.75, id="slot-twice-no-core"),
        pytest.param((0, 1, 0), 5.0, id="core-only"),
        pytest.param((0, 0, 3), 11.25, id="memory-only-tripled"),
    ],
)
def test_device_score_weights(weights: tuple[int, int, int], score: float) -> None:
    t = table(gpu("GPU-0", count=10, devcore=4, devmem=8192), usage={0: (2, 2048, 1)})
    assert device_scores(t, req(memreq=1024, pct=0, cores=1), weights)[0] == pytest.approx(score)


@pytest.mark.parametrize("field", ["count", "devcore", "devmem"])
def test_device_score_zero_totals_score_zero(field: str) -> None:
    t = table(gpu("GPU-0", **{field: 0}))
    assert device_scores(t, req(memreq=1), (1, 1, 1))[0] == 0.0


def test_device_score_percentage_request_uses_the_device_memory() -> None:
    t = table(gpu("GPU-0", count=10, devcore=100, devmem=1000))
    assert device_scores(t, req(pct=50), (1, 1, 1))[0] == pytest.approx(10 * (1 / 10 + 0 + 500 / 1000))


def test_own_request_changes_the_spread_choice() -> None:
    # Equal usage (none) but a 900 MiB request nearly fills the small card: spread prefers the big one.
    t = table(gpu("GPU-0", devmem=1000), gpu("GPU-1", index=1, devmem=100000))
    assert uuids(fit(t, req(memreq=900))) == ["GPU-1"]
    assert uuids(fit(t, req(memreq=900), "binpack")) == ["GPU-0"]


@pytest.mark.parametrize(
    ("weights", "chosen"),
    [
        pytest.param((1, 1, 1), "GPU-1", id="equal-weights-memory-and-cores-outweigh-slots"),
        pytest.param((1, 0, 0), "GPU-0", id="slots-only-most-tasks"),
        pytest.param((0, 0, 1), "GPU-1", id="memory-only-most-memory"),
        pytest.param((0, 1, 0), "GPU-1", id="cores-only-most-cores"),
    ],
)
def test_scoring_weights_change_the_binpack_choice(weights: tuple[int, int, int], chosen: str) -> None:
    # GPU-0 runs many small tasks, GPU-1 one big task.
    t = table(*gpus(2), usage={0: (8, 800, 8), 1: (1, 6000, 60)})
    assert uuids(fit(t, req(memreq=100), "binpack", weights=weights)) == [chosen]


# --- policies ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "chosen"),
    [
        pytest.param("binpack", ["GPU-0"], id="binpack-most-used"),
        pytest.param("spread", ["GPU-1"], id="spread-least-used"),
        pytest.param("mutex", ["GPU-1"], id="mutex-idle-only"),
        pytest.param("topology-aware", ["GPU-1"], id="topology-aware-single-no-scores-first-visited"),
    ],
)
def test_policy_choice(policy: str, chosen: list[str]) -> None:
    t = table(*gpus(2), usage={0: (3, 3000, 30)})
    assert uuids(fit(t, req(memreq=1000), policy)) == chosen


def test_mutex_with_every_card_used() -> None:
    t = table(*gpus(2), usage={0: (1, 0, 0), 1: (2, 0, 0)})
    assert fit(t, req(), "mutex") == Unfit({R.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: 2}, 2)


def test_multi_gpu_devices_in_visiting_order() -> None:
    t = table(*gpus(3), usage={0: (1, 4000, 0)})
    assert fit(t, req(nums=2, memreq=1000)) == placed((1, "GPU-1", 1000, 0), (2, "GPU-2", 1000, 0))
    assert fit(t, req(nums=2, memreq=1000), "binpack") == placed((0, "GPU-0", 1000, 0), (1, "GPU-1", 1000, 0))


# --- NUMA binding (spec §6.5) ---------------------------------------------------------------------------


def numa_table(*numas: int) -> DeviceTable:
    return table(*(gpu(f"GPU-{i}", index=i, numa=n) for i, n in enumerate(numas)))


def test_numa_bind_takes_all_devices_from_one_group() -> None:
    t = numa_table(0, 0, 1)
    # spread + NUMA binding visits the highest NUMA node first: GPU-2 alone is too few, the group is dropped.
    assert uuids(fit(t, req(nums=2), numa_bind=True)) == ["GPU-0", "GPU-1"]
    assert uuids(fit(t, req(nums=2), "binpack", numa_bind=True)) == ["GPU-0", "GPU-1"]
    assert uuids(fit(t, req(nums=1), numa_bind=True)) == ["GPU-2"]


def test_numa_bind_without_a_big_enough_group() -> None:
    assert fit(numa_table(0, 1), req(nums=2), numa_bind=True) == Unfit(
        {R.NUMA_NOT_FIT: 1, R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1}, 2
    )


def test_numa_group_switch_happens_before_the_uuid_check() -> None:
    # GPU-1 (NUMA 1) is taken; GPU-0 (NUMA 0) switches the group (dropping GPU-1 as NumaNotFit), then fails its
    # UUID check: nothing is left over, so no AllocatedCardsInsufficientRequest (HAMi: "1/2 CardUuidMismatch,
    # 1/2 NumaNotFit").
    t = numa_table(0, 1)
    assert fit(t, req(nums=2), selector=Selector(nouse_uuids=frozenset({"GPU-0"})), numa_bind=True) == Unfit(
        {R.CARD_UUID_MISMATCH: 1, R.NUMA_NOT_FIT: 1}, 2
    )


def test_numa_group_switch_happens_after_the_health_check() -> None:
    t = table(gpu("GPU-0", numa=0, health=False), gpu("GPU-1", index=1, numa=1))
    assert fit(t, req(nums=2), numa_bind=True) == Unfit(
        {R.CARD_NOT_HEALTH: 1, R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1}, 2
    )


def test_without_numa_bind_groups_do_not_matter() -> None:
    assert uuids(fit(numa_table(0, 1), req(nums=2))) == ["GPU-1", "GPU-0"]


# --- topology-aware (spec §6.4) -------------------------------------------------------------------------


def test_topology_single_gpu_takes_the_worst_connected_card() -> None:
    scores = symmetric({("GPU-0", "GPU-1"): 100, ("GPU-0", "GPU-2"): 10, ("GPU-1", "GPU-2"): 10})
    assert uuids(fit(table(*gpus(3)), req(), "topology-aware", pair_scores=scores)) == ["GPU-2"]


def test_topology_single_gpu_tie_keeps_the_first_visited() -> None:
    scores = symmetric({("GPU-0", "GPU-1"): 10, ("GPU-0", "GPU-2"): 10, ("GPU-1", "GPU-2"): 10})
    assert uuids(fit(table(*gpus(3)), req(), "topology-aware", pair_scores=scores)) == ["GPU-0"]


def test_topology_multi_gpu_takes_the_best_combination() -> None:
    scores = symmetric({("GPU-0", "GPU-1"): 10, ("GPU-0", "GPU-2"): 20, ("GPU-2", "GPU-3"): 50, ("GPU-1", "GPU-3"): 5})
    outcome = fit(table(*gpus(4)), req(nums=2, memreq=100), "topology-aware", pair_scores=scores)
    assert outcome == placed((2, "GPU-2", 100, 0), (3, "GPU-3", 100, 0))


def test_topology_exactly_enough_candidates() -> None:
    t = table(*gpus(3), usage={0: (10, 0, 0)})
    assert uuids(fit(t, req(nums=2), "topology-aware")) == ["GPU-1", "GPU-2"]


def test_topology_too_few_candidates() -> None:
    t = table(*gpus(2), gpu("GPU-2", index=2, health=False))
    assert fit(t, req(nums=3), "topology-aware") == Unfit(
        {R.CARD_NOT_HEALTH: 1, R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 2}, 3
    )


def test_topology_with_numa_bind_takes_the_best_group_anywhere() -> None:
    # Deliberate difference: HAMi keeps only the last NUMA group visited (NUMA 0 here, pair score 10).
    scores = symmetric({("GPU-0", "GPU-1"): 10, ("GPU-2", "GPU-3"): 50})
    t = numa_table(0, 0, 1, 1)
    outcome = fit(t, req(nums=2), "topology-aware", numa_bind=True, pair_scores=scores)
    assert uuids(outcome) == ["GPU-2", "GPU-3"]
    scores = symmetric({("GPU-0", "GPU-1"): 50, ("GPU-2", "GPU-3"): 10})
    outcome = fit(t, req(nums=2), "topology-aware", numa_bind=True, pair_scores=scores)
    assert uuids(outcome) == ["GPU-0", "GPU-1"]


def test_topology_with_numa_bind_counts_small_groups() -> None:
    assert fit(numa_table(0, 1), req(nums=2), "topology-aware", numa_bind=True) == Unfit(
        {R.NUMA_NOT_FIT: 2, R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1}, 2
    )


def _cands(*names: str) -> list[Placement]:
    return [Placement(i, cd(n, 0)) for i, n in enumerate(names)]


def test_worst_single_sums_scores_towards_the_other_candidates() -> None:
    cands = _cands("a", "b", "c")
    scores = {"a": {"b": 5, "c": 5}, "b": {"a": 1, "c": 1}, "c": {"a": 3}}
    assert worst_single(ctx(pair_scores=scores), cands).device.uuid == "b"


def test_best_combination_reads_one_direction_and_reports_its_score() -> None:
    cands = _cands("a", "b", "c")
    # a→b counts for the subset (a, b); b→a is never read.
    scores = {"a": {"b": 7, "c": 1}, "b": {"a": 100, "c": 6}}
    score, combo = best_combination(ctx(pair_scores=scores), cands, 2)
    assert (score, [p.device.uuid for p in combo]) == (7, ["a", "b"])


def test_best_combination_allows_negative_scores_and_keeps_the_first_tie() -> None:
    cands = _cands("a", "b", "c")
    scores = {"a": {"b": -5, "c": -1}, "b": {"c": -1}}
    score, combo = best_combination(ctx(pair_scores=scores), cands, 2)
    assert (score, [p.device.uuid for p in combo]) == (-1, ["a", "c"])


# --- MIG (spec §6.8) -------------------------------------------------------------------------------------


def mig_placed(*items: tuple[int, str, int, int, str, MigPlacement]) -> Fitted:
    return Fitted(tuple(Placement(i, cd(u, m, c), Slice(prof, pl)) for i, u, m, c, prof, pl in items))


def test_mig_instance_gets_profile_memory_and_cores() -> None:
    outcome = fit(table(mig_gpu("GPU-M")), req(memreq=3000))
    assert outcome == mig_placed((0, "GPU-M", 4864, 14, "1g.5gb", P(6, 1)))


def test_mig_respects_occupied_placements() -> None:
    t = table(mig_gpu("GPU-M"), usage={0: (1, 19968, 42)})
    t.slices[0] = (P(4, 4),)
    assert fit(t, req(memreq=3000)) == mig_placed((0, "GPU-M", 4864, 14, "1g.5gb", P(3, 1)))


def test_several_mig_instances_of_one_gpu_for_one_container() -> None:
    # More instances than physical GPUs: the device-count check does not apply to MIG requests.
    outcome = fit(table(mig_gpu("GPU-M")), req(nums=3, memreq=4000))
    assert outcome == mig_placed(
        (0, "GPU-M", 4864, 14, "1g.5gb", P(6, 1)),
        (0, "GPU-M", 4864, 14, "1g.5gb", P(5, 1)),
        (0, "GPU-M", 4864, 14, "1g.5gb", P(4, 1)),
    )


def test_mig_instances_of_different_sizes_on_one_gpu() -> None:
    outcome = fit(table(mig_gpu("GPU-M")), req(nums=2, memreq=19000))
    assert outcome == mig_placed(
        (0, "GPU-M", 19968, 42, "3g.20gb", P(4, 4)),
        (0, "GPU-M", 19968, 42, "3g.20gb", P(0, 4)),
    )


def test_mig_gpu_runs_out_of_placements() -> None:
    # Seven 1g.5gb instances are planned; the eighth has no placement left: the GPU counts
    # CardMigTopologyInfeasible (spec §6.8) beside the partial allocation, with the memory the plan left free.
    assert fit(table(mig_gpu("GPU-M")), req(nums=8, memreq=1)) == Unfit(
        {R.CARD_MIG_TOPOLOGY_INFEASIBLE: 1, R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 7},
        1,
        (Rejection(R.CARD_MIG_TOPOLOGY_INFEASIBLE, "GPU-M", 1, 40960 - 7 * 4864),),
    )


def test_a_second_mig_instance_that_does_not_fit_counts_topology_infeasible() -> None:
    # Two 3g.20gb instances fill the A100; the third of this container cannot be placed on it.
    outcome = fit(table(mig_gpu("GPU-M")), req(nums=3, memreq=19000))
    assert isinstance(outcome, Unfit)
    assert outcome.counts == {R.CARD_MIG_TOPOLOGY_INFEASIBLE: 1, R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 2}


def test_a_mig_gpu_without_profiles_is_never_shared_as_a_whole_card() -> None:
    # HAMi plans instances on every mig-mode GPU; with no profile registered none can be planned. (Handing such a
    # GPU out as a shared card would give its pod no instance, and the ledger then fails the GPU closed.)
    bare = gpu("GPU-M", devmem=40960, mode="mig")
    assert fit(table(bare), req(memreq=1000)) == unfit(
        R.CARD_MIG_TOPOLOGY_INFEASIBLE, Rejection(R.CARD_MIG_TOPOLOGY_INFEASIBLE, "GPU-M", 1000, 40960)
    )


def test_mig_excluded_by_mode_keeps_the_device_count_check() -> None:
    assert fit(table(mig_gpu("GPU-M")), req(nums=2), selector=Selector(modes=frozenset({"hami-core"}))) == Unfit(
        {R.NODE_INSUFFICIENT_DEVICE: 1}, 1, (Rejection(R.NODE_INSUFFICIENT_DEVICE, None, 2, 1),)
    )


def test_mig_and_shared_gpus_together() -> None:
    t = table(mig_gpu("GPU-M"), gpu("GPU-1", index=1, devmem=40960), usage={1: (1, 1000, 0)})
    assert fit(t, req(nums=2, memreq=9000), "binpack") == Fitted(
        (Placement(1, cd("GPU-1", 9000)), Placement(0, cd("GPU-M", 9984, 28), Slice("2g.10gb", P(0, 2))))
    )


# --- the quota hook ---------------------------------------------------------------------------------------


def test_quota_sees_the_devices_already_accepted_for_this_container() -> None:
    calls: list[tuple[list[str], int, int, str]] = []

    def quota(accepted: Sequence[Placement], mem: int, cores: int, uuid: str) -> bool:
        calls.append(([p.device.uuid for p in accepted], mem, cores, uuid))
        return not accepted  # room for one device only

    t = table(*gpus(2))
    assert fit(t, req(nums=2, memreq=1000, cores=10), quota=quota) == Unfit(
        {R.RESOURCE_QUOTA_NOT_FIT: 1, R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1},
        2,
        (Rejection(R.RESOURCE_QUOTA_NOT_FIT, "GPU-1", 1000, 0),),
    )
    assert calls == [([], 1000, 10, "GPU-0"), (["GPU-0"], 1000, 10, "GPU-1")]


def test_mig_instance_is_judged_by_the_quota_at_its_profile_size() -> None:
    seen: list[tuple[int, int]] = []

    def quota(accepted: Sequence[Placement], mem: int, cores: int, uuid: str) -> bool:
        seen.append((mem, cores))
        return sum(p.device.usedmem for p in accepted) + mem <= 5000

    # The request (1000 MiB) passes; the 1g.5gb instance it becomes (4864 MiB) passes; a second one does not.
    assert fit(table(mig_gpu("GPU-M")), req(nums=2, memreq=1000), quota=quota) == Unfit(
        {R.RESOURCE_QUOTA_NOT_FIT: 1, R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1},
        1,
        (Rejection(R.RESOURCE_QUOTA_NOT_FIT, "GPU-M", 4864, 0),),
    )
    assert seen == [(1000, 0), (4864, 14), (4864, 14)]
    assert fit(table(mig_gpu("GPU-M")), req(nums=1, memreq=1000), quota=quota) == mig_placed(
        (0, "GPU-M", 4864, 14, "1g.5gb", P(6, 1))
    )


def test_fit_never_writes_the_table() -> None:
    t = table(*gpus(2), mig_gpu("GPU-M", index=2), usage={0: (1, 100, 10)})
    before = [t.usage_of(i) for i in range(3)]
    fit(t, req(nums=3, memreq=100))
    assert [t.usage_of(i) for i in range(3)] == before


def test_best_combination_over_hundreds_of_devices_finds_the_connected_set_without_trying_every_subset() -> None:
    # 300 candidates choose 8 is about 1.5e15 subsets: exhaustive search would never end (a hostile or broken
    # registration must not stall Filter). The greedy search finds the planted NVLink-like clique.
    names = [f"g{i:03}" for i in range(300)]
    clique = ["g017", "g050", "g101", "g150", "g199", "g230", "g260", "g299"]
    scores = {a: {b: 100 for b in clique if b > a} for a in clique}
    for i, a in enumerate(names):  # weak links everywhere else
        scores.setdefault(a, {}).update({names[(i + 1) % 300]: 1})
    assert comb(300, 8) > EXHAUSTIVE_SUBSETS
    score, combo = best_combination(ctx(pair_scores=scores), _cands(*names), 8)
    assert [p.device.uuid for p in combo] == clique
    assert score == 28 * 100


def test_the_greedy_search_reports_the_score_of_the_subset_it_returns() -> None:
    names = [f"g{i:02}" for i in range(40)]
    scores = {a: {b: (i * 7 + j * 3) % 11 - 3 for j, b in enumerate(names) if j > i} for i, a in enumerate(names)}
    score, combo = best_combination(ctx(pair_scores=scores), _cands(*names), 6)
    uuids = [p.device.uuid for p in combo]
    assert len(set(uuids)) == 6
    assert uuids == sorted(uuids)
    assert score == sum(scores[a].get(b, 0) for k, a in enumerate(uuids) for b in uuids[k + 1 :])


def test_a_gather_sees_every_candidate_and_chooses_the_set() -> None:
    seen: list[list[str]] = []

    def last_two(found: Sequence[Placement], nums: int) -> tuple[Placement, ...] | None:
        seen.append([p.device.uuid for p in found])
        return tuple(found[-nums:])

    t = table(*gpus(4, devmem=8192), usage={1: (10, 0, 0)})  # GPU-1 has no slot left
    outcome = fit_shared(t, req(2, 1000), ctx(), ANY, NVIDIA, gather=last_two)
    assert seen == [["GPU-0", "GPU-2", "GPU-3"]]
    assert outcome == Fitted((Placement(2, cd("GPU-2", 1000)), Placement(3, cd("GPU-3", 1000))))


def test_a_gather_that_finds_no_set_counts_the_candidates() -> None:
    outcome = fit_shared(table(*gpus(3)), req(2, 1000), ctx(), ANY, NVIDIA, gather=lambda found, nums: None)
    assert outcome == Unfit({R.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 3}, 3)
