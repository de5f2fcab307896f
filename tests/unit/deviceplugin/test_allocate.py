from __future__ import annotations

import re
from pathlib import Path

import pytest

from hami.deviceplugin.allocate import Allocator, take_slots, vendor_work_left
from hami.deviceplugin.response import HostFiles
from hami.deviceplugin.settings import NodeSettings
from hami.errors import AllocationError, ApiError
from hami.errors import AllocationFailure as Failure
from hami.k8s.memory import MemoryCluster
from hami.k8s.nodelock import NodeLocker
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice
from hami.protocol.objects import Pod

from .builders import ALLOCATED, DCU_TO_ALLOCATE, NODE, TO_ALLOCATE, bound_pod, lock_value, node

A = "GPU-a,NVIDIA,3000,30:"
B = "GPU-b,NVIDIA,5000,50:"
AB = "GPU-a,NVIDIA,1000,10:GPU-b,NVIDIA,2000,20:"


def allocator(cluster: MemoryCluster, tmp_path: Path) -> Allocator:
    async def pods_on_node(name: str) -> list[Pod]:
        return [pod for pod in cluster.pods.values() if pod.spec.node_name == name]

    return Allocator(
        cluster,
        pods_on_node,
        NodeLocker(cluster),
        node_name=NODE,
        settings=NodeSettings(),
        host=HostFiles(root=tmp_path),
        new_cache_id=lambda: "cache",
    )


def annotations(cluster: MemoryCluster, name: str = "p") -> dict[str, str]:
    return cluster.pods[("default", name)].metadata.annotations


def lock_of(cluster: MemoryCluster) -> str | None:
    return cluster.nodes[NODE].metadata.annotations.get(keys.NODE_LOCK)


# --- pure helpers -------------------------------------------------------------------------------------------

D = ContainerDevice("GPU-a", "NVIDIA", 1, 1)


@pytest.mark.parametrize(
    ("slots", "wanted", "taken", "left"),
    [
        pytest.param(((D,),), [1], [0], ((),), id="one-container"),
        pytest.param(((), (D,), (D, D)), [1], [1], ((), (), (D, D)), id="skips-empty-slots"),
        pytest.param(((D,), (D, D)), [1, 2], [0, 1], ((), ()), id="two-requests"),
    ],
)
def test_take_slots_empties_taken_slots_in_place(
    slots: tuple[tuple[ContainerDevice, ...], ...], wanted: list[int], taken: list[int], left: object
) -> None:
    got, remaining = take_slots(slots, wanted)
    assert [slot for slot, _ in got] == taken
    assert remaining == left
    assert len(remaining) == len(slots)


@pytest.mark.parametrize(
    ("slots", "wanted", "message"),
    [
        pytest.param(((D,),), [2], "device number not matched: container slot 0 has 1 GPU(s), kubelet asks for 2"),
        pytest.param(((), ()), [1], "container request 0: no container slot left"),
    ],
)
def test_take_slots_refuses_what_does_not_fit(
    slots: tuple[tuple[ContainerDevice, ...], ...], wanted: list[int], message: str
) -> None:
    with pytest.raises(AllocationError, match=re.escape(message)):
        take_slots(slots, wanted)


@pytest.mark.parametrize(
    ("notes", "left"),
    [
        pytest.param({TO_ALLOCATE: ";;"}, [], id="all-empty"),
        pytest.param({TO_ALLOCATE: f";{B};"}, ["NVIDIA"], id="nvidia-left"),
        pytest.param({TO_ALLOCATE: ";", DCU_TO_ALLOCATE: "DCU-1,DCU,100,10:;"}, ["DCU"], id="other-vendor-left"),
        pytest.param({TO_ALLOCATE: "NVIDIA"}, [], id="the-word-nvidia-is-not-a-device"),
        pytest.param({TO_ALLOCATE: "a,b:;"}, ["NVIDIA"], id="undecodable-counts-as-left"),
    ],
)
def test_work_left_is_decided_by_decoding(notes: dict[str, str], left: list[str]) -> None:
    assert vendor_work_left(notes) == left


# --- Allocate -----------------------------------------------------------------------------------------------


async def test_one_container_gets_the_scheduler_choice_and_the_pod_succeeds(tmp_path: Path) -> None:
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[bound_pod("p", A + ";")])
    (response,) = await allocator(cluster, tmp_path).allocate([["GPU-a-7"]])
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-a"
    assert response.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert response.envs["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert annotations(cluster)[TO_ALLOCATE] == ";"
    assert annotations(cluster)[ALLOCATED] == A + ";"  # the permanent record is never touched
    assert annotations(cluster)[keys.BIND_PHASE] == "success"
    assert lock_of(cluster) is None
    assert (tmp_path / "usr/local/vgpu/containers/uid-p_main").is_dir()


async def test_containers_allocated_one_call_each_keep_the_annotation_length(tmp_path: Path) -> None:
    pod = bound_pod("p", f"{A};{B};", containers=("first", "second"))
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[pod])
    plugin = allocator(cluster, tmp_path)

    (first,) = await plugin.allocate([["GPU-a-0"]])
    assert first.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-a"
    assert annotations(cluster)[TO_ALLOCATE] == f";{B};"
    assert annotations(cluster)[keys.BIND_PHASE] == "allocating"
    assert lock_of(cluster) == lock_value("default", "p")

    (second,) = await plugin.allocate([["GPU-b-3"]])
    assert second.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-b"
    assert "/usr/local/vgpu/containers/uid-p_second" in {m.host_path for m in second.mounts}
    assert annotations(cluster)[TO_ALLOCATE] == ";;"
    assert annotations(cluster)[keys.BIND_PHASE] == "success"
    assert lock_of(cluster) is None


async def test_several_containers_in_one_call(tmp_path: Path) -> None:
    pod = bound_pod("p", f";{AB};{B};", init=("setup",), containers=("two-gpus", "one-gpu"))
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[pod])
    responses = await allocator(cluster, tmp_path).allocate([["GPU-a-0", "GPU-b-0"], ["GPU-b-1"]])
    assert [r.envs["NVIDIA_VISIBLE_DEVICES"] for r in responses] == ["GPU-a,GPU-b", "GPU-b"]
    limits = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1000m", "CUDA_DEVICE_MEMORY_LIMIT_1": "2000m"}
    assert limits.items() <= dict(responses[0].envs).items()
    assert [m.host_path for m in responses[0].mounts][1] == "/usr/local/vgpu/containers/uid-p_two-gpus"
    assert annotations(cluster)[TO_ALLOCATE] == ";;;"
    assert annotations(cluster)[keys.BIND_PHASE] == "success"


@pytest.mark.parametrize(
    ("to_allocate", "message"),
    [
        pytest.param(None, "device request not found", id="missing"),
        pytest.param("GPU-a,NVIDIA:;", "pod annotation format error, missing fields", id="missing-fields"),
        pytest.param("GPU-a,NVIDIA,lots,30:;", "invalid memory field", id="bad-number"),
    ],
)
async def test_a_broken_annotation_fails_the_pod_and_frees_the_node(
    tmp_path: Path, to_allocate: str | None, message: str
) -> None:
    pod = bound_pod("p", to_allocate, annotations={ALLOCATED: A + ";"})
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[pod])
    with pytest.raises(AllocationError, match=message) as info:
        await allocator(cluster, tmp_path).allocate([["GPU-a-0"]])
    assert info.value.failure is Failure.BAD_REQUEST
    assert "default/p" in str(info.value)
    assert annotations(cluster)[keys.BIND_PHASE] == "failed"
    assert lock_of(cluster) is None


async def test_a_device_count_mismatch_fails_the_pod(tmp_path: Path) -> None:
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[bound_pod("p", A + ";")])
    with pytest.raises(AllocationError, match="device number not matched"):
        await allocator(cluster, tmp_path).allocate([["GPU-a-0", "GPU-a-1"]])
    assert annotations(cluster)[keys.BIND_PHASE] == "failed"
    assert annotations(cluster)[TO_ALLOCATE] == A + ";"  # nothing consumed
    assert lock_of(cluster) is None


async def test_no_pod_being_bound_is_an_error_that_changes_nothing(tmp_path: Path) -> None:
    done = bound_pod("p", ";", bind_phase="success")
    cluster = MemoryCluster(nodes=[node()], pods=[done])
    with pytest.raises(AllocationError, match=f"no binding pod found on node {NODE}") as info:
        await allocator(cluster, tmp_path).allocate([["GPU-a-0"]])
    assert info.value.failure is Failure.NO_POD
    assert annotations(cluster)[keys.BIND_PHASE] == "success"
    assert "patch_pod_metadata" not in cluster.calls


async def test_another_vendors_lock_holder_is_left_alone(tmp_path: Path) -> None:
    dcu = bound_pod("dcu", None, annotations={DCU_TO_ALLOCATE: "DCU-1,DCU,100,10:;"})
    ours = bound_pod("p", A + ";")
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "dcu"))], pods=[dcu, ours])
    (response,) = await allocator(cluster, tmp_path).allocate([["GPU-a-0"]])
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-a"
    assert annotations(cluster, "dcu")[keys.BIND_PHASE] == "allocating"  # HAMi would fail it (spec §11.14)
    assert annotations(cluster)[keys.BIND_PHASE] == "success"
    assert lock_of(cluster) == lock_value("default", "dcu")  # not ours to release


@pytest.mark.parametrize(
    "holder",
    [
        pytest.param(bound_pod("h", A + ";", node_name="gpu-2"), id="other-node"),
        pytest.param(bound_pod("h", A + ";", phase="Running"), id="running"),
        pytest.param(bound_pod("h", A + ";", bind_phase="success"), id="already-successful"),
        pytest.param(bound_pod("h", ";"), id="nothing-left"),
    ],
)
async def test_a_lock_holder_that_does_not_check_out_is_not_used(tmp_path: Path, holder: Pod) -> None:
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "h"))], pods=[holder, bound_pod("p", B + ";")])
    (response,) = await allocator(cluster, tmp_path).allocate([["GPU-b-0"]])
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-b"
    assert annotations(cluster, "h") == holder.metadata.annotations


async def test_without_a_lock_the_oldest_binding_pod_is_served(tmp_path: Path) -> None:
    newer = bound_pod("newer", A + ";", bind_time="1700000100")
    older = bound_pod("older", B + ";", bind_time="1700000000")
    cluster = MemoryCluster(nodes=[node()], pods=[newer, older])
    (response,) = await allocator(cluster, tmp_path).allocate([["GPU-b-0"]])
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-b"
    assert annotations(cluster, "older")[keys.BIND_PHASE] == "success"
    assert annotations(cluster, "newer")[keys.BIND_PHASE] == "allocating"


async def test_a_pod_waiting_for_another_vendor_keeps_allocating_and_its_lock(tmp_path: Path) -> None:
    pod = bound_pod("p", A + ";", annotations={DCU_TO_ALLOCATE: "DCU-1,DCU,100,10:;"})
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[pod])
    await allocator(cluster, tmp_path).allocate([["GPU-a-0"]])
    assert annotations(cluster)[TO_ALLOCATE] == ";"
    assert annotations(cluster)[keys.BIND_PHASE] == "allocating"
    assert lock_of(cluster) == lock_value("default", "p")


async def test_an_api_failure_while_committing_fails_the_pod(tmp_path: Path) -> None:
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[bound_pod("p", A + ";")])
    cluster.fail("patch_pod_metadata", ApiError("etcdserver: request timed out", 500))
    with pytest.raises(AllocationError, match="request timed out") as info:
        await allocator(cluster, tmp_path).allocate([["GPU-a-0"]])
    assert info.value.failure is Failure.API
    assert annotations(cluster)[keys.BIND_PHASE] == "failed"
    assert lock_of(cluster) is None


async def test_preferred_allocation_names_the_chosen_gpus(tmp_path: Path) -> None:
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[bound_pod("p", AB + ";")])
    available = ["GPU-a-0", "GPU-a-1", "GPU-c-0", "GPU-b-0", "GPU-b-1"]
    assert await allocator(cluster, tmp_path).preferred(available, [], 2) == ["GPU-a-0", "GPU-b-0"]
    assert "patch_pod_metadata" not in cluster.calls


async def test_preferred_allocation_falls_back_to_kubelets_order(tmp_path: Path) -> None:
    cluster = MemoryCluster(nodes=[node()], pods=[])
    assert await allocator(cluster, tmp_path).preferred(["x-0", "y-0", "z-0"], ["z-0"], 2) == ["z-0", "x-0"]


async def test_a_mig_pod_on_a_hami_core_node_is_refused_clearly(tmp_path: Path) -> None:
    mig = '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":6,"size":1}}]'
    pod = bound_pod("p", A + ";", annotations={keys.NVIDIA_MIG_ALLOCATIONS: mig})
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[pod])
    message = "carries hami.io/vgpu-mig-allocations but node gpu-1 is in hami-core operating mode"
    with pytest.raises(AllocationError, match=message):
        await allocator(cluster, tmp_path).allocate([["GPU-a-0"]])
    assert annotations(cluster)[keys.BIND_PHASE] == "failed"
    assert lock_of(cluster) is None
