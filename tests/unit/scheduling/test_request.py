"""``prefilter``: a pod read once — requests per container, policies, weights, selectors (spec §3.1, §5.7)."""

from __future__ import annotations

import pytest

from hami.devices.base import ContainerRequest, Selector
from hami.devices.policy import parse_gpu_policy
from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol.weights import decode_scoring_weights
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.usage import Kind
from tests.unit.scheduling.builders import DCU, NVIDIA, container, pod, vendors


def parse_weights(value: str | None) -> tuple[int, int, int]:
    """The weights prefilter puts into the request (parsed by the protocol's HAMi-exact codec)."""
    w = decode_scoring_weights(value)
    return (w.slot, w.core, w.memory)


GPU, GPUMEM, GPUCORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"
DCUNUM, DCUMEM = "hygon.com/dcunum", "hygon.com/dcumem"
DEFAULTS = SchedulingDefaults()

# --- hami.io/device-scoring-weights (spec §5.7) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "weights"),
    [
        pytest.param(None, (1, 1, 1), id="absent-equal-weights"),
        pytest.param("slot=1,core=2,memory=3", (1, 2, 3), id="in-order"),
        pytest.param(" memory = 3 , slot=1,core= 0 ", (1, 0, 3), id="any-order-with-spaces"),
        pytest.param("slot=+2,core=0,memory=0", (2, 0, 0), id="explicit-plus-sign"),
        pytest.param("slot=-0,core=0,memory=1", (0, 0, 1), id="minus-zero-is-not-negative"),
    ],
)
def test_parse_weights(value: str | None, weights: tuple[int, int, int]) -> None:
    assert parse_weights(value) == weights


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        pytest.param("", "expected slot, core, and memory weights", id="empty"),
        pytest.param("slot=1,core=1", "expected slot, core, and memory weights", id="two-entries"),
        pytest.param("slot=1,core=1,memory=1,", "expected slot, core, and memory weights", id="trailing-comma"),
        pytest.param("slot=1,core,memory=1", "expected key=value entries", id="entry-without-equals"),
        pytest.param("slot=1,core=x,memory=1", '"core" weight must be an integer', id="not-a-number"),
        pytest.param("slot=1,core=1=2,memory=1", '"core" weight must be an integer', id="split-on-the-first-equals"),
        pytest.param("slot=1.5,core=1,memory=1", '"slot" weight must be an integer', id="fraction"),
        pytest.param("slot=,core=1,memory=1", '"slot" weight must be an integer', id="empty-value"),
        pytest.param("slot=1_0,core=1,memory=1", '"slot" weight must be an integer', id="underscore-separator"),
        pytest.param("slot=\uff19,core=1,memory=1", '"slot" weight must be an integer', id="non-ascii-digit"),
        pytest.param("slot=9223372036854775808,core=1,memory=1", '"slot" weight must be an integer', id="beyond-int64"),
        pytest.param("slot=-1,core=1,memory=1", '"slot" weight must not be negative', id="negative"),
        pytest.param("slot=1,cores=1,memory=1", 'unknown weight "cores"', id="unknown-key"),
        pytest.param("slot=1,slot=2,memory=1", 'duplicate "slot" weight', id="duplicate-key"),
        pytest.param("slot=1,slot=x,memory=1", 'duplicate "slot" weight', id="duplicate-checked-before-integer"),
        pytest.param("gpu=x,core=1,memory=1", '"gpu" weight must be an integer', id="integer-checked-before-key"),
        pytest.param("gpu=-1,core=1,memory=1", '"gpu" weight must not be negative', id="negative-before-key"),
        pytest.param("slot=0,core=0,memory=0", "at least one weight must be positive", id="all-zero"),
    ],
)
def test_parse_weights_rejects(value: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_weights(value)
    assert (info.value.field, info.value.value, info.value.reason) == (keys.DEVICE_SCORING_WEIGHTS, value, reason)


# --- prefilter ---------------------------------------------------------------------------------------------


def test_prefilter_reads_every_container_init_first() -> None:
    p = pod(
        [container({GPU: 2, GPUMEM: 3000}, name="main"), container(name="log")],
        init=[container({GPU: 1, GPUMEM: 1000}, name="warm"), container(name="side", restart_policy="Always")],
        uid="u-1",
        namespace="team",
        name="train",
    )
    r = prefilter(p, vendors(), DEFAULTS)
    assert (r.uid, r.namespace, r.name, r.key) == ("u-1", "team", "train", "team/train")
    assert r.kinds == (Kind.INIT, Kind.SIDECAR, Kind.APP, Kind.APP)
    assert r.containers == (
        {NVIDIA: ContainerRequest(NVIDIA, 1, 1000, 101, 0)},
        {},
        {NVIDIA: ContainerRequest(NVIDIA, 2, 3000, 101, 0)},
        {},
    )
    assert (r.vendors, r.wants_devices) == ((NVIDIA,), True)
    assert (r.node_policy, r.gpu_policy, r.weights) == ("binpack", parse_gpu_policy("spread", False), (1, 1, 1))
    assert r.selectors == {NVIDIA: Selector()}


def test_prefilter_multi_vendor_pod() -> None:
    p = pod([container({GPU: 1, GPUMEM: 1000}, name="a"), container({DCUNUM: 1, DCUMEM: 2048}, name="b")])
    r = prefilter(p, vendors(), DEFAULTS)
    assert r.containers == (
        {NVIDIA: ContainerRequest(NVIDIA, 1, 1000, 101, 0)},
        {DCU: ContainerRequest(DCU, 1, 2048, 101, 100)},
    )
    assert (r.vendors, sorted(r.selectors)) == ((DCU, NVIDIA), [DCU, NVIDIA])


def test_prefilter_pod_without_devices() -> None:
    r = prefilter(pod([container({"cpu": 1})]), vendors(), DEFAULTS)
    assert (r.containers, r.vendors, r.wants_devices, r.selectors) == (({},), (), False, {})


def test_prefilter_annotation_overrides() -> None:
    p = pod(
        [container({GPU: 1, GPUMEM: 1000})],
        annotations={
            keys.GPU_SCHEDULER_POLICY: "binpack,numa",
            keys.NODE_SCHEDULER_POLICY: "spread",
            keys.NVIDIA_NUMA_BIND: "True",
            keys.DEVICE_SCORING_WEIGHTS: "slot=0,core=1,memory=5",
            keys.NVIDIA_USE_GPUTYPE: "A100",
        },
    )
    r = prefilter(p, vendors(), SchedulingDefaults(node_policy="binpack", gpu_policy="mutex"))
    assert (r.gpu_policy, r.node_policy, r.weights) == (parse_gpu_policy("binpack,numa", True), "spread", (0, 1, 5))
    assert r.selectors == {NVIDIA: Selector(use_types=(("a100",),))}


def test_prefilter_uses_the_defaults() -> None:
    r = prefilter(pod([container({GPU: 1})]), vendors(), SchedulingDefaults(node_policy="spread", gpu_policy="mutex"))
    assert (r.node_policy, r.gpu_policy) == ("spread", parse_gpu_policy("mutex", False))


@pytest.mark.parametrize(("value", "bind"), [("1", True), ("t", True), ("TRUE", True), ("0", False), ("False", False)])
def test_prefilter_numa_bind_go_booleans(value: str, bind: bool) -> None:
    r = prefilter(pod([container({GPU: 1})], annotations={keys.NVIDIA_NUMA_BIND: value}), vendors(), DEFAULTS)
    assert r.gpu_policy.numa_bind is bind


@pytest.mark.parametrize(
    ("key", "value"),
    [
        pytest.param(keys.NVIDIA_NUMA_BIND, "yes", id="numa-bind-not-a-boolean"),
        pytest.param(keys.GPU_SCHEDULER_POLICY, "best-fit", id="unknown-gpu-policy"),
        pytest.param(keys.NODE_SCHEDULER_POLICY, "random", id="unknown-node-policy"),
        pytest.param(keys.DEVICE_SCORING_WEIGHTS, "slot=1", id="invalid-weights"),
    ],
)
def test_prefilter_rejects_bad_annotations(key: str, value: str) -> None:
    with pytest.raises(InvalidInput) as info:
        prefilter(pod([container({GPU: 1})], annotations={key: value}), vendors(), DEFAULTS)
    assert (info.value.field, info.value.value) == (key, value)
