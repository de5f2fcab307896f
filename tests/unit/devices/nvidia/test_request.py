from __future__ import annotations

import pytest

from hami.devices.base import MEM_PERCENTAGE_UNSET, ContainerRequest
from hami.devices.nvidia import parse_nvidia_request, parse_pod_nvidia_requests
from hami.devices.nvidia.config import NvidiaConfig
from hami.errors import QuantityError
from hami.protocol.objects import Container, Pod, PodSpec, QuantityValue, ResourceRequirements

GPU = "nvidia.com/gpu"
MEM = "nvidia.com/gpumem"
PCT = "nvidia.com/gpumem-percentage"
CORES = "nvidia.com/gpucores"
PRIORITY = "nvidia.com/priority"
DEFAULTS = NvidiaConfig()  # defaultMemory 0, defaultCores 0, memoryFactor 1 (the spec's §3.4 setting)
UNSET = MEM_PERCENTAGE_UNSET


def container(
    limits: dict[str, QuantityValue] | None = None,
    requests: dict[str, QuantityValue] | None = None,
    name: str = "main",
) -> Container:
    return Container(name=name, resources=ResourceRequirements(limits=limits or {}, requests=requests or {}))


def nvidia(nums: int, memreq: int, pct: int, cores: int, priority: int | None = None) -> ContainerRequest:
    """The spec's ``{Nums, NVIDIA, Memreq, MemPercentagereq, Coresreq}`` notation."""
    return ContainerRequest(
        vendor="NVIDIA", nums=nums, memreq=memreq, mem_percentage=pct, coresreq=cores, priority=priority
    )


# --- scheduler-core.md §3.4, every row ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("ctr", "cfg", "expected"),
    [
        pytest.param(container({GPU: "1"}), DEFAULTS, nvidia(1, 0, 100, 0), id="count-alone-takes-the-whole-card"),
        pytest.param(
            container({GPU: "2", MEM: "4096"}), DEFAULTS, nvidia(2, 4096, UNSET, 0), id="memory-leaves-percentage-unset"
        ),
        pytest.param(container({GPU: "1", PCT: "50"}), DEFAULTS, nvidia(1, 0, 50, 0), id="percentage-is-used"),
        pytest.param(
            container({GPU: "1", PCT: "150"}), DEFAULTS, nvidia(1, 0, 100, 0), id="percentage-150-clamps-to-100"
        ),
        pytest.param(
            container({GPU: "1", PCT: "101"}), DEFAULTS, nvidia(1, 0, 100, 0), id="percentage-101-clamps-to-100"
        ),
        pytest.param(
            container({GPU: "1", PCT: str(2**32 + 50)}),
            DEFAULTS,
            nvidia(1, 0, 100, 0),
            id="percentage-beyond-int32-clamps-to-100",
        ),
        pytest.param(
            container({GPU: "1", PCT: "0"}), DEFAULTS, nvidia(1, 0, 100, 0), id="percentage-0-is-unset-so-whole-card"
        ),
        pytest.param(
            container({GPU: "1", PCT: "-1"}),
            DEFAULTS,
            nvidia(1, 0, 100, 0),
            id="negative-percentage-is-unset-so-whole-card",
        ),
        pytest.param(
            container({GPU: "1", MEM: "2000", PCT: "0"}),
            DEFAULTS,
            nvidia(1, 2000, UNSET, 0),
            id="percentage-0-with-memory-keeps-memory",
        ),
        pytest.param(container({GPU: "1", CORES: "50"}), DEFAULTS, nvidia(1, 0, 100, 50), id="cores-are-used"),
        pytest.param(container(requests={GPU: "1"}), DEFAULTS, nvidia(1, 0, 100, 0), id="requests-only-count"),
        pytest.param(
            container({GPU: "1"}),
            NvidiaConfig(default_memory=512),
            nvidia(1, 512, UNSET, 0),
            id="default-memory-applies-without-memory",
        ),
        pytest.param(
            container({GPU: "1", PCT: "0"}),
            NvidiaConfig(default_memory=512),
            nvidia(1, 512, UNSET, 0),
            id="default-memory-applies-with-percentage-0",
        ),
        pytest.param(
            container({GPU: "1", MEM: "0"}),
            NvidiaConfig(default_memory=512),
            nvidia(1, 512, UNSET, 0),
            id="default-memory-applies-with-memory-0",
        ),
        pytest.param(
            container({GPU: "1", MEM: "1024"}),
            NvidiaConfig(memory_factor=2),
            nvidia(1, 2048, UNSET, 0),
            id="memory-factor-multiplies-memory",
        ),
        pytest.param(container({"cpu": "1"}), DEFAULTS, None, id="no-gpu-no-request"),
    ],
)
def test_spec_worked_examples(ctr: Container, cfg: NvidiaConfig, expected: ContainerRequest | None) -> None:
    assert parse_nvidia_request(ctr, cfg, "containers[0](main)") == expected


# --- further rules of §3.2 ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ctr", "cfg", "expected"),
    [
        pytest.param(container({GPU: "0", MEM: "16Gi"}), DEFAULTS, None, id="count-0-is-no-request"),
        pytest.param(container(requests={MEM: "1024"}), DEFAULTS, None, id="memory-without-count-is-no-request"),
        pytest.param(
            container({GPU: "1"}, {GPU: "3", MEM: "1000"}),
            DEFAULTS,
            nvidia(1, 1000, UNSET, 0),
            id="limits-win-and-requests-fill-in-per-resource",
        ),
        pytest.param(
            container({GPU: "1", MEM: "2000"}, {MEM: "1000"}),
            DEFAULTS,
            nvidia(1, 2000, UNSET, 0),
            id="limits-memory-beats-requests-memory",
        ),
        pytest.param(
            container({GPU: "1", MEM: "3000", PCT: "50"}),
            DEFAULTS,
            nvidia(1, 3000, 50, 0),
            id="memory-and-percentage-are-both-kept",
        ),
        pytest.param(container({GPU: "1", PCT: "100"}), DEFAULTS, nvidia(1, 0, 100, 0), id="percentage-100"),
        pytest.param(container({GPU: "1", MEM: "0"}), DEFAULTS, nvidia(1, 0, 100, 0), id="memory-0-is-the-whole-card"),
        pytest.param(
            container({GPU: "1"}), NvidiaConfig(default_cores=30), nvidia(1, 0, 100, 30), id="default-cores-apply"
        ),
        pytest.param(
            container({GPU: "1", CORES: "0"}),
            NvidiaConfig(default_cores=30),
            nvidia(1, 0, 100, 0),
            id="explicit-cores-0-beat-default-cores",
        ),
        pytest.param(container({GPU: "1", CORES: "100"}), DEFAULTS, nvidia(1, 0, 100, 100), id="cores-100-allowed"),
        pytest.param(
            container({GPU: "1", MEM: "1024"}),
            NvidiaConfig(default_memory=512, memory_factor=4),
            nvidia(1, 4096, UNSET, 0),
            id="explicit-memory-beats-default-memory",
        ),
        pytest.param(
            container({GPU: "1"}),
            NvidiaConfig(default_memory=512, memory_factor=4),
            nvidia(1, 512, UNSET, 0),
            id="default-memory-is-not-multiplied-by-the-factor",
        ),
        pytest.param(container({GPU: "1", PRIORITY: "1"}), DEFAULTS, nvidia(1, 0, 100, 0, 1), id="priority"),
        pytest.param(container({GPU: "1k"}), DEFAULTS, nvidia(1000, 0, 100, 0), id="count-with-suffix"),
        pytest.param(
            container({GPU: "1", MEM: "1k"}), DEFAULTS, nvidia(1, 1000, UNSET, 0), id="memory-is-a-plain-number"
        ),
        pytest.param(container({GPU: 2, MEM: 4096}), DEFAULTS, nvidia(2, 4096, UNSET, 0), id="yaml-integers"),
        pytest.param(container({GPU: "1.0"}), DEFAULTS, nvidia(1, 0, 100, 0), id="non-canonical-whole-count"),
        pytest.param(
            container({"example.com/vgpu": "2", "example.com/vmem": "100"}),
            NvidiaConfig(resource_count_name="example.com/vgpu", resource_memory_name="example.com/vmem"),
            nvidia(2, 100, UNSET, 0),
            id="configured-resource-names",
        ),
        pytest.param(
            container({GPU: "1", MEM: "16Gi"}),
            NvidiaConfig(resource_memory_name=""),
            nvidia(1, 0, 100, 0),
            id="empty-resource-name-is-never-read",
        ),
    ],
)
def test_request_rules(ctr: Container, cfg: NvidiaConfig, expected: ContainerRequest | None) -> None:
    assert parse_nvidia_request(ctr, cfg, "containers[0](main)") == expected


# --- rejections: where HAMi silently drops, hami refuses ------------------------------------------

INT32_REASON = "exceeds the int32 range HAMi's annotations can carry"


@pytest.mark.parametrize(
    ("ctr", "cfg", "message"),
    [
        pytest.param(
            container({GPU: "1", MEM: "16Gi"}),
            DEFAULTS,
            f"containers[1](train).limits[nvidia.com/gpumem]: 17179869184 MiB {INT32_REASON}"
            f"; it counts MiB: did you mean 16384? (got '16Gi')",
            id="memory-16Gi-is-16Gi-MiB-over-int32",
        ),
        pytest.param(
            container({GPU: "1", MEM: "16.0Gi"}),
            DEFAULTS,
            f"containers[1](train).limits[nvidia.com/gpumem]: 17179869184 MiB {INT32_REASON}"
            f"; it counts MiB: did you mean 16384? (got '16.0Gi')",
            id="memory-16.0Gi-over-int32",
        ),
        pytest.param(
            container({GPU: "1", MEM: "3Gi"}),
            DEFAULTS,
            f"containers[1](train).limits[nvidia.com/gpumem]: 3221225472 MiB {INT32_REASON}"
            f"; it counts MiB: did you mean 3072? (got '3Gi')",
            id="memory-3Gi-is-not-3-GiB",
        ),
        pytest.param(
            container({GPU: "1", MEM: "2147483648"}),
            DEFAULTS,
            f"containers[1](train).limits[nvidia.com/gpumem]: 2147483648 MiB {INT32_REASON} (got '2147483648')",
            id="memory-just-over-int32",
        ),
        pytest.param(
            container({GPU: "1", MEM: "1Gi"}),
            NvidiaConfig(memory_factor=2),
            "containers[1](train).limits[nvidia.com/gpumem]: 2147483648 MiB (1073741824 × memoryFactor 2) "
            f"{INT32_REASON}; it counts MiB: did you mean 1024? (got '1Gi')",
            id="memory-over-int32-after-factor-2",
        ),
        pytest.param(
            container({GPU: "1"}, {MEM: "-1"}),
            DEFAULTS,
            "containers[1](train).requests[nvidia.com/gpumem]: must not be negative (got '-1')",
            id="negative-memory-from-requests",
        ),
        pytest.param(
            container({GPU: "1", MEM: "1.5"}),
            DEFAULTS,
            "containers[1](train).limits[nvidia.com/gpumem]: must be a whole number (got '1.5')",
            id="fractional-memory",
        ),
        pytest.param(
            container({GPU: "1", MEM: "500m"}),
            DEFAULTS,
            "containers[1](train).limits[nvidia.com/gpumem]: must be a whole number (got '500m')",
            id="milli-memory",
        ),
        pytest.param(
            container({GPU: "-1"}),
            DEFAULTS,
            "containers[1](train).limits[nvidia.com/gpu]: must not be negative (got '-1')",
            id="negative-count",
        ),
        pytest.param(
            container({GPU: "abc"}),
            DEFAULTS,
            "containers[1](train).limits[nvidia.com/gpu]: is not a quantity: expected a number with an optional "
            "suffix (m, k, M, G, Ki, Mi, Gi, e3, …) (got 'abc')",
            id="non-numeric-count",
        ),
        pytest.param(
            container({GPU: "1.5"}),
            DEFAULTS,
            "containers[1](train).limits[nvidia.com/gpu]: must be a whole number (got '1.5')",
            id="fractional-count",
        ),
        pytest.param(
            container({GPU: "500m"}),
            DEFAULTS,
            "containers[1](train).limits[nvidia.com/gpu]: must be a whole number (got '500m')",
            id="milli-count",
        ),
        pytest.param(
            container({GPU: "2147483648"}),
            DEFAULTS,
            f"containers[1](train).limits[nvidia.com/gpu]: {INT32_REASON} (got '2147483648')",
            id="count-over-int32",
        ),
        pytest.param(
            container({GPU: "1", CORES: "101"}),
            DEFAULTS,
            "containers[1](train).limits[nvidia.com/gpucores]: must be at most 100 (percent of one GPU) (got '101')",
            id="cores-101",
        ),
        pytest.param(
            container({GPU: "1", CORES: "-5"}),
            DEFAULTS,
            "containers[1](train).limits[nvidia.com/gpucores]: must not be negative (got '-5')",
            id="negative-cores",
        ),
        pytest.param(
            container({GPU: "1", CORES: "50.5"}),
            DEFAULTS,
            "containers[1](train).limits[nvidia.com/gpucores]: must be a whole number (got '50.5')",
            id="fractional-cores",
        ),
        pytest.param(
            container({GPU: "1", PCT: "50.5"}),
            DEFAULTS,
            "containers[1](train).limits[nvidia.com/gpumem-percentage]: must be a whole number (got '50.5')",
            id="fractional-percentage",
        ),
        pytest.param(
            container({GPU: "1", PCT: "half"}),
            DEFAULTS,
            "containers[1](train).limits[nvidia.com/gpumem-percentage]: is not a quantity: expected a number with an "
            "optional suffix (m, k, M, G, Ki, Mi, Gi, e3, …) (got 'half')",
            id="non-numeric-percentage",
        ),
        pytest.param(
            container({GPU: "1", PRIORITY: "-1"}),
            DEFAULTS,
            "containers[1](train).limits[nvidia.com/priority]: must not be negative (got '-1')",
            id="negative-priority",
        ),
    ],
)
def test_rejections_name_container_resource_and_value(ctr: Container, cfg: NvidiaConfig, message: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse_nvidia_request(ctr, cfg, "containers[1](train)")
    assert str(caught.value) == message


# --- per pod --------------------------------------------------------------------------------------


def test_pod_requests_list_init_containers_first() -> None:
    pod = Pod(
        spec=PodSpec(
            init_containers=[container({GPU: "1", MEM: "1000"}, name="warmup")],
            containers=[container({"cpu": "1"}, name="sidecar"), container({GPU: "2", CORES: "30"}, name="train")],
        )
    )
    assert parse_pod_nvidia_requests(pod, DEFAULTS) == (nvidia(1, 1000, UNSET, 0), None, nvidia(2, 0, 100, 30))


def test_pod_without_containers_has_no_requests() -> None:
    assert parse_pod_nvidia_requests(Pod(), DEFAULTS) == ()


def test_pod_errors_name_the_container() -> None:
    pod = Pod(
        spec=PodSpec(
            init_containers=[container({GPU: "1"}, name="warmup")],
            containers=[container({GPU: "1"}, name="a"), container({GPU: "1", MEM: "16Gi"}, name="b")],
        )
    )
    with pytest.raises(QuantityError) as caught:
        parse_pod_nvidia_requests(pod, DEFAULTS)
    assert caught.value.field == "containers[1](b).limits[nvidia.com/gpumem]"
    init_pod = Pod(spec=PodSpec(init_containers=[container({GPU: "x"}, name="warmup")]))
    with pytest.raises(QuantityError) as caught:
        parse_pod_nvidia_requests(init_pod, DEFAULTS)
    assert caught.value.field == "initContainers[0](warmup).limits[nvidia.com/gpu]"
