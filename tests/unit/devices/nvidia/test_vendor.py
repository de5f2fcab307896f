"""The NVIDIA vendor: its keys, selector and fit (request parsing and codecs are tested with their modules)."""

from __future__ import annotations

import msgspec
import pytest

from hami.devices.base import Fitted, NodeInventory, Placement, Selector, Unfit
from hami.devices.nvidia.vendor import NvidiaVendor
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice
from hami.protocol.objects import Node
from hami.protocol.reasons import Reason
from tests.unit.scheduling.builders import A100, NVIDIA, T4, ctx, gpu, req, table, vendors


@pytest.fixture
def nvidia() -> NvidiaVendor:
    v = vendors()[NVIDIA]
    assert isinstance(v, NvidiaVendor)
    return v


def test_identity(nvidia: NvidiaVendor) -> None:
    assert (nvidia.name, nvidia.keys) == (NVIDIA, keys.NVIDIA_KEYS)
    assert (nvidia.resources.count, nvidia.resources.memory, nvidia.resources.core) == (
        "nvidia.com/gpu",
        "nvidia.com/gpumem",
        "nvidia.com/gpucores",
    )


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, Selector(), id="no-annotations-no-filter"),
        pytest.param(
            {keys.NVIDIA_USE_GPUTYPE: "A100, Tesla T4", keys.NVIDIA_NOUSE_GPUTYPE: "V100"},
            Selector(use_types=(("a100",), ("tesla", "t4")), nouse_types=(("v100",),)),
            id="type-lists-as-words",
        ),
        pytest.param(
            {keys.NVIDIA_USE_GPUUUID: "GPU-a, GPU-b", keys.NVIDIA_NOUSE_GPUUUID: " GPU-c "},
            Selector(use_uuids=frozenset({"GPU-a", "GPU-b"}), nouse_uuids=frozenset({"GPU-c"})),
            id="uuid-lists-trimmed",
        ),
        pytest.param(
            {keys.NVIDIA_VGPU_MODE: "hami-core, mig"},
            Selector(modes=frozenset({"hami-core", "mig"})),
            id="vgpu-mode-as-a-set",
        ),
        pytest.param({keys.NVIDIA_VGPU_MODE: ""}, Selector(), id="empty-vgpu-mode-unrestricted"),
        pytest.param({keys.NVIDIA_VGPU_MODE: " , "}, Selector(), id="blank-vgpu-mode-unrestricted-like-empty"),
    ],
)
def test_selector(nvidia: NvidiaVendor, annotations: dict[str, str], expected: Selector) -> None:
    assert nvidia.selector(annotations) == expected


def test_use_gputype_a10_never_selects_a100(nvidia: NvidiaVendor) -> None:
    t = table(gpu("GPU-0", type=A100), gpu("GPU-1", index=1, type="NVIDIA A10"))
    sel = nvidia.selector({keys.NVIDIA_USE_GPUTYPE: "A10"})
    assert nvidia.fit(t, req(memreq=100), ctx(), sel) == Fitted(
        (Placement(1, ContainerDevice("GPU-1", NVIDIA, 100, 0)),)
    )
    sel = nvidia.selector({keys.NVIDIA_USE_GPUTYPE: "a10", keys.NVIDIA_USE_GPUUUID: "GPU-0"})
    assert nvidia.fit(t, req(memreq=100), ctx(), sel) == Unfit(
        {Reason.CARD_TYPE_MISMATCH: 1, Reason.CARD_UUID_MISMATCH: 1}, 2
    )


def test_decode_inventory(nvidia: NvidiaVendor) -> None:
    assert nvidia.decode_inventory(Node()) is None
    # The spec's §2.2 example: two T4s, keys in HAMi's order, zero values omitted.
    value = (
        '[{"id":"GPU-0a1","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4","mode":"hami-core",'
        '"health":true},{"id":"GPU-0a2","index":1,"count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4",'
        '"numa":1,"mode":"hami-core","health":true}]'
    )
    node = msgspec.convert({"metadata": {"annotations": {keys.NVIDIA_REGISTER: value}}}, Node)
    assert nvidia.decode_inventory(node) == NodeInventory(
        (gpu("GPU-0a1", devmem=15360, type=T4), gpu("GPU-0a2", index=1, devmem=15360, type=T4, numa=1))
    )
