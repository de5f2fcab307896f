"""The NVIDIA vendor: its keys, selector and fit (request parsing and codecs are tested with their modules)."""

from __future__ import annotations

import msgspec
import pytest

from hami.devices.admission import ContainerEdit, PodContext
from hami.devices.base import (
    AnnotationContext,
    Carved,
    Fitted,
    NodeInventory,
    Placement,
    Selector,
    Slice,
    SliceAt,
    Unfit,
)
from hami.devices.nvidia.admission import NvidiaAdmitter
from hami.devices.nvidia.mig import MigPartitions
from hami.devices.nvidia.vendor import NvidiaVendor
from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo, MigPlacement
from hami.protocol.objects import Container, Node
from hami.protocol.reasons import Reason
from tests.unit.scheduling.builders import A100, NVIDIA, T4, ctx, gpu, mig_gpu, req, table, vendors

P = MigPlacement


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


# --- what the vendor owns behind the plug-in interface ------------------------------------------------------


def test_keys_it_owns(nvidia: NvidiaVendor) -> None:
    assert (nvidia.keys.extra, nvidia.keys.lock, nvidia.keys.handshake) == (
        ("hami.io/vgpu-mig-allocations",),
        "hami.io/mutex.lock",
        "hami.io/node-handshake",
    )


def test_admitter_is_nvidias(nvidia: NvidiaVendor) -> None:
    admitter = nvidia.admitter()
    assert isinstance(admitter, NvidiaAdmitter)
    edit = ContainerEdit()
    gpu_only = msgspec.convert({"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}, Container)
    assert admitter.admit(gpu_only, "containers[0](c)", edit, PodContext()) is True
    assert edit.limits == {"nvidia.com/gpucores": "100"}  # a bare count is a whole, exclusive GPU


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [({}, False), ({keys.NVIDIA_NUMA_BIND: "true"}, True), ({keys.NVIDIA_NUMA_BIND: "0"}, False)],
)
def test_numa_bind(nvidia: NvidiaVendor, annotations: dict[str, str], expected: bool) -> None:
    assert nvidia.numa_bind(annotations) is expected


def test_numa_bind_refuses_a_non_boolean(nvidia: NvidiaVendor) -> None:
    with pytest.raises(InvalidInput, match=r"nvidia.com/numa-bind: not a boolean .*'yes'"):
        nvidia.numa_bind({keys.NVIDIA_NUMA_BIND: "yes"})


MIG_VALUE = (
    '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-M","profile":"1g.5gb","placement":{"start":6,"size":1}},'
    '{"containerIndex":1,"deviceIndex":1,"gpuUUID":"GPU-M","profile":"2g.10gb","placement":{"start":0,"size":2}}]'
)


def _ctx(slices: tuple[SliceAt, ...]) -> AnnotationContext:
    return AnnotationContext("node", ((), ()), slices, ("a", "b"), 0)


def test_extra_annotations_are_hamis_mig_allocations_byte_for_byte(nvidia: NvidiaVendor) -> None:
    slices = (
        SliceAt(0, 0, "GPU-M", Slice("1g.5gb", P(6, 1))),
        SliceAt(1, 1, "GPU-M", Slice("2g.10gb", P(0, 2))),
    )
    assert nvidia.extra_annotations(_ctx(slices)) == {keys.NVIDIA_MIG_ALLOCATIONS: MIG_VALUE}
    assert nvidia.extra_annotations(_ctx(())) == {}


def test_decode_slices_reads_the_mig_reservations(nvidia: NvidiaVendor) -> None:
    assert nvidia.decode_slices({keys.NVIDIA_MIG_ALLOCATIONS: MIG_VALUE}) == (("GPU-M", P(6, 1)), ("GPU-M", P(0, 2)))
    assert nvidia.decode_slices({}) == ()
    with pytest.raises(InvalidInput, match=r"hami\.io/vgpu-mig-allocations"):
        nvidia.decode_slices({keys.NVIDIA_MIG_ALLOCATIONS: '[{"containerIndex":0}]'})


def test_decode_charges_legacy_mig_uuids_to_their_gpu(nvidia: NvidiaVendor) -> None:
    decoded = nvidia.decode("GPU-936619fc[7-9],NVIDIA,4864,14:GPU-1,NVIDIA,10,0:;", keys.NVIDIA_KEYS.allocated)
    assert decoded[0] == (ContainerDevice("GPU-936619fc", NVIDIA, 4864, 14), ContainerDevice("GPU-1", NVIDIA, 10, 0))


@pytest.mark.parametrize(
    ("device", "held", "expected"),
    [
        pytest.param(mig_gpu("GPU-M"), [P(6, 1)], None, id="mig-gpu-with-its-instance"),
        pytest.param(
            mig_gpu("GPU-M"), [], "MIG task of ns/p has no placement on this GPU", id="mig-gpu-without-instance"
        ),
        pytest.param(gpu("GPU-0"), [], None, id="shared-gpu-without-instance"),
        pytest.param(gpu("GPU-0"), [P(6, 1)], "MIG task of ns/p on a GPU in hami-core mode", id="instance-on-shared"),
    ],
)
def test_mig_partitions_fail_closed(device: DeviceInfo, held: list[MigPlacement], expected: str | None) -> None:
    assert MigPartitions().conflict(device, held, "ns/p") == expected


def test_mig_partitions_plan_slices_with_profile_memory_and_cores() -> None:
    plan = MigPartitions().plan(mig_gpu("GPU-M"), [P(4, 4)], [3000, 9000])
    assert plan == [Carved(Slice("1g.5gb", P(3, 1)), 4864, 14), Carved(Slice("2g.10gb", P(0, 2)), 9984, 28)]
    assert MigPartitions().plan(mig_gpu("GPU-M"), [P(0, 8)], [1]) is None
    assert (MigPartitions().carves(mig_gpu("GPU-M")), MigPartitions().carves(gpu("GPU-0"))) == (True, False)
