"""GPU policy parsing and the device preference order (scheduler-core.md §5.4)."""

from __future__ import annotations

import pytest

from hami.devices.policy import GpuPolicy, parse_gpu_policy, parse_node_policy
from hami.errors import InvalidInput
from hami.protocol import keys


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("binpack", GpuPolicy("binpack", "binpack", None, False, False, False), id="binpack-is-single"),
        pytest.param("spread", GpuPolicy("spread", "spread", None, False, False, False), id="spread-is-single"),
        pytest.param(
            "topology-aware",
            GpuPolicy("topology-aware", "topology-aware", None, True, False, False),
            id="topology-aware-sets-topology",
        ),
        pytest.param("mutex", GpuPolicy("mutex", "mutex", None, False, True, False), id="mutex-sets-mutex"),
        pytest.param("numa", GpuPolicy("numa", "numa", ("numa",), False, False, False), id="bare-numa-is-a-chain"),
        pytest.param(" numa ", GpuPolicy(" numa ", "numa", ("numa",), False, False, False), id="numa-trimmed"),
        pytest.param(
            "binpack,numa",
            GpuPolicy("binpack,numa", "", ("binpack", "numa"), False, False, False),
            id="comma-list-is-a-chain-in-order",
        ),
        pytest.param(
            "spread, binpack ,spread",
            GpuPolicy("spread, binpack ,spread", "", ("spread", "binpack"), False, False, False),
            id="chain-tokens-trimmed-and-deduplicated",
        ),
        pytest.param(
            "mutex,topology-aware",
            GpuPolicy("mutex,topology-aware", "", ("spread",), True, True, False),
            id="chain-without-order-keys-defaults-to-spread",
        ),
        pytest.param(
            "binpack,", GpuPolicy("binpack,", "binpack", ("binpack",), False, False, False), id="trailing-comma"
        ),
    ],
)
def test_parse_gpu_policy(value: str, expected: GpuPolicy) -> None:
    assert parse_gpu_policy(value, numa_bind=False) == expected


def test_parse_gpu_policy_keeps_numa_bind() -> None:
    assert parse_gpu_policy("binpack", numa_bind=True).numa_bind is True


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        pytest.param("", "empty GPU scheduler policy", id="empty"),
        pytest.param(" , ", "empty GPU scheduler policy", id="only-commas"),
        pytest.param(
            "best-fit",
            "unknown GPU policy 'best-fit'; expected one of binpack, mutex, numa, spread, topology-aware",
            id="unknown-single",
        ),
        pytest.param(
            "binpack,foo",
            "unknown GPU policy 'foo'; expected one of binpack, mutex, numa, spread, topology-aware",
            id="unknown-in-chain",
        ),
    ],
)
def test_parse_gpu_policy_rejects(value: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_gpu_policy(value, numa_bind=False)
    assert (info.value.field, info.value.value, info.value.reason) == (keys.GPU_SCHEDULER_POLICY, value, reason)


def test_parse_node_policy() -> None:
    assert parse_node_policy(" spread ") == "spread"
    assert parse_node_policy("binpack") == "binpack"
    with pytest.raises(InvalidInput) as info:
        parse_node_policy("random")
    assert (info.value.field, info.value.value) == (keys.NODE_SCHEDULER_POLICY, "random")


# Four devices: scores, NUMA nodes and slots in use, chosen so every key of every order matters.
SCORES = [1.0, 3.0, 3.0, 2.0]
NUMA = [0, 0, 1, 1]
USED = [2, 0, 1, 0]


@pytest.mark.parametrize(
    ("policy", "numa_bind", "order"),
    [
        pytest.param("spread", False, [0, 3, 2, 1], id="spread-lowest-score-first-ties-highest-numa"),
        pytest.param("binpack", False, [2, 1, 3, 0], id="binpack-highest-score-first-ties-highest-numa"),
        pytest.param("topology-aware", False, [0, 3, 2, 1], id="topology-aware-orders-like-spread"),
        pytest.param("mutex", False, [3, 1, 2, 0], id="mutex-idle-first-ties-highest-numa"),
        pytest.param("mutex", True, [3, 1, 2, 0], id="mutex-wins-over-numa-bind"),
        pytest.param("binpack", True, [1, 0, 2, 3], id="numa-bind-binpack-lowest-numa-group-highest-score"),
        pytest.param("spread", True, [3, 2, 0, 1], id="numa-bind-spread-highest-numa-group-lowest-score"),
        pytest.param("topology-aware", True, [3, 2, 0, 1], id="numa-bind-topology-aware-like-spread"),
        pytest.param("binpack,numa", False, [2, 1, 3, 0], id="chain-binpack-then-numa"),
        pytest.param("spread,numa", False, [0, 3, 2, 1], id="chain-spread-then-numa"),
        pytest.param("numa", False, [2, 3, 0, 1], id="chain-numa-highest-first-then-index"),
        pytest.param("numa,binpack", False, [2, 3, 1, 0], id="chain-numa-then-binpack"),
        pytest.param("binpack,spread", True, [2, 3, 1, 0], id="chain-numa-bind-moves-numa-to-front"),
        pytest.param("mutex,topology-aware", False, [0, 3, 1, 2], id="chain-default-spread-ties-by-index"),
    ],
)
def test_order(policy: str, numa_bind: bool, order: list[int]) -> None:
    p = parse_gpu_policy(policy, numa_bind)
    assert p.order(4, SCORES.__getitem__, NUMA, USED) == order


@pytest.mark.parametrize("policy", ["spread", "binpack", "mutex", "numa", "binpack,spread"])
def test_exact_ties_go_to_the_lowest_device_index(policy: str) -> None:
    # Deliberate difference from HAMi, whose sort tries the later-registered device first on exact ties.
    p = parse_gpu_policy(policy, numa_bind=False)
    assert p.order(3, lambda i: 5.0, [0, 0, 0], [0, 0, 0]) == [0, 1, 2]
