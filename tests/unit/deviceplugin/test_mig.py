"""Dynamic MIG against the fake NVML: the fake's instance model, and Allocate's create, reuse, adopt, refuse,
roll back, and reconciliation (including across a plugin restart)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hami.deviceplugin.allocate import Allocator
from hami.deviceplugin.discovery import GpuInfo, GpuSource, discover
from hami.deviceplugin.fakenvml import FakeNvmlLib
from hami.deviceplugin.mig import MigInstances, holders, unheld
from hami.deviceplugin.nvml import MigInstance
from hami.deviceplugin.response import HostFiles
from hami.deviceplugin.settings import NodeSettings
from hami.errors import AllocationError, ApiError, NvmlError
from hami.k8s.memory import MemoryCluster
from hami.k8s.nodelock import NodeLocker
from hami.protocol import keys
from hami.protocol.allocation import decode_mig_allocations
from hami.protocol.objects import Pod

from .builders import NODE, TO_ALLOCATE, bound_pod, node

GPU = "GPU-a100"
# An A100-SXM4-40GB's MIG profiles with NVML's profile ids and possible placements.
A100: dict[str, Any] = {
    "uuid": GPU,
    "name": "NVIDIA A100-SXM4-40GB",
    "memory_mib": 40960,
    "mig": True,
    "profiles": [
        {"id": 19, "name": "1g.5gb", "memory_mib": 4864, "slices": 1, "instances": 7,
         "placements": [[i, 1] for i in range(7)]},
        {"id": 14, "name": "2g.10gb", "memory_mib": 9856, "slices": 2, "instances": 3,
         "placements": [[0, 2], [2, 2], [4, 2]]},
        {"id": 9, "name": "3g.20gb", "memory_mib": 19968, "slices": 3, "instances": 2,
         "placements": [[0, 4], [4, 4]]},
        {"id": 0, "name": "7g.40gb", "memory_mib": 40192, "slices": 7, "instances": 1, "placements": [[0, 8]]},
    ],
}  # fmt: skip
MIG_SETTINGS = NodeSettings(operating_mode="mig")


def fake(instances: list[dict[str, Any]] | None = None) -> FakeNvmlLib:
    return FakeNvmlLib({"devices": [{**A100, "instances": instances or []}]})


def reservation(
    profile: str, start: int, size: int, *, container: int = 0, device: int = 0, **runtime: Any
) -> dict[str, Any]:
    entry = {
        "containerIndex": container,
        "deviceIndex": device,
        "gpuUUID": GPU,
        "profile": profile,
        "placement": {"start": start, "size": size},
    }
    return {**entry, **runtime}


def mig_pod(name: str, entries: list[dict[str, Any]], *, devices: int = 1, **kwargs: Any) -> Pod:
    slot = "".join(f"{GPU},NVIDIA,4864,15:" for _ in range(devices))
    notes = {keys.NVIDIA_MIG_ALLOCATIONS: json.dumps(entries, separators=(",", ":"))}
    return bound_pod(name, slot + ";", annotations=notes, **kwargs)


class Node:
    """One plugin process on the node: its NVML session, GPUs, MIG instances and allocator."""

    def __init__(self, lib: FakeNvmlLib, cluster: MemoryCluster, tmp_path: Path, *, list_fails: bool = False) -> None:
        self.lib = lib
        source = GpuSource(lib, discover)
        self.gpus: tuple[GpuInfo, ...] = source.discover()

        async def pods_on_node(name: str) -> list[Pod]:
            if list_fails:
                raise ApiError("the API server is down", 503)
            return [pod for pod in cluster.pods.values() if pod.spec.node_name == name]

        self.allocator = Allocator(
            cluster,
            pods_on_node,
            NodeLocker(cluster),
            node_name=NODE,
            settings=MIG_SETTINGS,
            host=HostFiles(root=tmp_path),
            gpus=lambda: self.gpus,
            mig=MigInstances(source, lambda: self.gpus),
        )

    def instances(self) -> list[MigInstance]:
        return self.lib.mig_instances(0)


def mig_notes(cluster: MemoryCluster, name: str) -> list[Any]:
    return decode_mig_allocations(cluster.pods[("default", name)].metadata.annotations[keys.NVIDIA_MIG_ALLOCATIONS])


# --- the fake NVML's model ----------------------------------------------------------------------------------


def test_fake_nvml_creates_instances_as_nvml_does() -> None:
    lib = fake()
    first = lib.create_mig_instance(0, 9, (4, 4))
    assert (first.gpu_instance_id, first.compute_instance_id, first.placement) == (0, 0, (4, 4))
    assert first.mig_uuid.startswith("MIG-")
    second = lib.create_mig_instance(0, 19, (0, 1))
    assert second.gpu_instance_id == 1
    assert second.mig_uuid != first.mig_uuid
    assert [i.gpu_instance_id for i in lib.mig_instances(0)] == [0, 1]


@pytest.mark.parametrize(
    ("profile", "placement", "code"),
    [
        pytest.param(19, (5, 1), "INSUFFICIENT_RESOURCES", id="overlaps-3g-at-4"),
        pytest.param(0, (0, 8), "INSUFFICIENT_RESOURCES", id="7g-overlaps-everything"),
        pytest.param(19, (7, 1), "INVALID_ARGUMENT", id="not-a-placement-of-the-profile"),
        pytest.param(14, (1, 2), "INVALID_ARGUMENT", id="misaligned"),
        pytest.param(42, (0, 1), "INVALID_ARGUMENT", id="unknown-profile"),
    ],
)
def test_fake_nvml_refuses_what_nvml_refuses(profile: int, placement: tuple[int, int], code: str) -> None:
    lib = fake([{"gi": 2, "profile": 9, "placement": [4, 4], "ci": 0, "uuid": "MIG-held"}])
    with pytest.raises(NvmlError) as caught:
        lib.create_mig_instance(0, profile, placement)
    assert caught.value.code == code
    assert [i.mig_uuid for i in lib.mig_instances(0)] == ["MIG-held"]


def test_fake_nvml_limits_the_instance_count_and_destroys() -> None:
    lib = fake()
    lib.gpus[0].profiles = tuple(p if p.name != "1g.5gb" else type(p)(19, "1g.5gb", 4864, 1, 2, p.placements)
                                 for p in lib.gpus[0].profiles)  # fmt: skip
    lib.create_mig_instance(0, 19, (0, 1))
    lib.create_mig_instance(0, 19, (1, 1))
    with pytest.raises(NvmlError, match=re.escape("no 1g.5gb instance left")):
        lib.create_mig_instance(0, 19, (2, 1))
    lib.destroy_mig_instance(0, 0)
    with pytest.raises(NvmlError) as caught:
        lib.destroy_mig_instance(0, 0)
    assert caught.value.code == "NOT_FOUND"
    assert lib.destroyed == 1


# --- Allocate -----------------------------------------------------------------------------------------------


async def test_allocate_creates_the_reserved_instance_and_hands_over_its_mig_device(tmp_path: Path) -> None:
    pod = mig_pod("p", [reservation("1g.5gb", 6, 1)])
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[pod])
    plugin = Node(fake(), cluster, tmp_path)

    (response,) = await plugin.allocator.allocate([[f"{GPU}-0"]])

    (instance,) = plugin.instances()
    assert (instance.profile_id, instance.placement) == (19, (6, 1))
    assert dict(response.envs) == {"NVIDIA_VISIBLE_DEVICES": instance.mig_uuid}
    assert list(response.mounts) == []  # no HAMi-core limits: the instance is the limit
    (entry,) = mig_notes(cluster, "p")
    assert (entry.mig_uuid, entry.gpu_instance_id, entry.compute_instance_id) == (instance.mig_uuid, 0, 0)
    notes = cluster.pods[("default", "p")].metadata.annotations
    assert notes[keys.BIND_PHASE] == "success"
    assert notes[TO_ALLOCATE] == ";"
    assert plugin.lib.created == 1


async def test_a_retried_allocate_reuses_the_instance(tmp_path: Path) -> None:
    pod = mig_pod("p", [reservation("3g.20gb", 4, 4)])
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[pod])
    plugin = Node(fake(), cluster, tmp_path)
    (first,) = await plugin.allocator.allocate([[f"{GPU}-0"]])
    # kubelet admits the pod again (its allocation annotation restored, its runtime identity kept).
    ready = cluster.pods[("default", "p")].metadata.annotations[keys.NVIDIA_MIG_ALLOCATIONS]
    cluster.put_pod(mig_pod("p", json.loads(ready)))

    (second,) = await plugin.allocator.allocate([[f"{GPU}-0"]])

    assert second.envs["NVIDIA_VISIBLE_DEVICES"] == first.envs["NVIDIA_VISIBLE_DEVICES"]
    assert plugin.lib.created == 1
    assert len(plugin.instances()) == 1


async def test_an_unheld_instance_at_the_placement_is_adopted(tmp_path: Path) -> None:
    lib = fake([{"gi": 5, "profile": 14, "placement": [2, 2], "ci": 0, "uuid": "MIG-left-over"}])
    cluster = MemoryCluster(
        nodes=[node(locked_by=("default", "p"))], pods=[mig_pod("p", [reservation("2g.10gb", 2, 2)])]
    )
    plugin = Node(lib, cluster, tmp_path)
    (response,) = await plugin.allocator.allocate([[f"{GPU}-0"]])
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == "MIG-left-over"
    assert mig_notes(cluster, "p")[0].gpu_instance_id == 5
    assert lib.created == 0


async def test_unheld_instances_in_the_way_are_destroyed_first(tmp_path: Path) -> None:
    lib = fake(
        [
            {"gi": 1, "profile": 9, "placement": [4, 4], "ci": 0, "uuid": "MIG-finished-pod"},
            {"gi": 3, "profile": 19, "placement": [6, 1], "ci": None},  # half created: no compute instance
        ]
    )
    done = mig_pod("done", [reservation("3g.20gb", 4, 4, migUUID="MIG-finished-pod", gpuInstanceID=1,
                                        computeInstanceID=0)], phase="Succeeded")  # fmt: skip
    pod = mig_pod("p", [reservation("1g.5gb", 6, 1)])
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[done, pod])
    plugin = Node(lib, cluster, tmp_path)
    await plugin.allocator.allocate([[f"{GPU}-0"]])
    (instance,) = plugin.instances()
    assert instance.placement == (6, 1)
    assert instance.compute_instance_id == 0
    assert lib.destroyed == 2


async def test_an_instance_another_live_pod_holds_is_never_touched(tmp_path: Path) -> None:
    lib = fake([{"gi": 1, "profile": 9, "placement": [4, 4], "ci": 0, "uuid": "MIG-other"}])
    other = mig_pod("other", [reservation("3g.20gb", 4, 4, migUUID="MIG-other", gpuInstanceID=1,
                                          computeInstanceID=0)], phase="Running", bind_phase="success")  # fmt: skip
    pod = mig_pod("p", [reservation("1g.5gb", 6, 1)])
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[other, pod])
    plugin = Node(lib, cluster, tmp_path)
    message = "MIG 1g.5gb at slices 6+1 of GPU GPU-a100: GPU instance 1 there is held by pod default/other"
    with pytest.raises(AllocationError, match=re.escape(message)):
        await plugin.allocator.allocate([[f"{GPU}-0"]])
    assert [i.mig_uuid for i in plugin.instances()] == ["MIG-other"]
    assert cluster.pods[("default", "p")].metadata.annotations[keys.BIND_PHASE] == "failed"


async def test_a_failed_allocate_destroys_what_it_created(tmp_path: Path) -> None:
    lib = fake()
    pod = mig_pod("p", [reservation("1g.5gb", 6, 1), reservation("1g.5gb", 5, 1, device=1)], devices=2)
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[pod])
    plugin = Node(lib, cluster, tmp_path)
    original = lib.create_mig_instance
    calls = 0

    def second_fails(handle: object, profile_id: int, placement: tuple[int, int]) -> MigInstance:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise NvmlError("INSUFFICIENT_RESOURCES", "create_mig_instance", "injected")
        return original(handle, profile_id, placement)

    lib.create_mig_instance = second_fails  # type: ignore[method-assign]
    with pytest.raises(AllocationError, match="cannot create the GPU instance"):
        await plugin.allocator.allocate([[f"{GPU}-0", f"{GPU}-1"]])
    assert plugin.instances() == []
    assert lib.destroyed == 1
    assert cluster.pods[("default", "p")].metadata.annotations[keys.BIND_PHASE] == "failed"


@pytest.mark.parametrize(
    ("entries", "devices", "message"),
    [
        pytest.param([reservation("1g.5gb", 6, 1, device=1)], 1, "container slot 0 device 0 (GPU-a100) has no MIG",
                     id="no-reservation-for-the-device"),
        pytest.param([reservation("1g.5gb", 3, 2)], 1, "not a placement of 1g.5gb (possible: 0+1, 1+1",
                     id="illegal-placement"),
        pytest.param([reservation("5g.30gb", 0, 4)], 1, "the GPU has no profile '5g.30gb'", id="unknown-profile"),
    ],
)  # fmt: skip
async def test_bad_reservations_are_refused_clearly(
    tmp_path: Path, entries: list[dict[str, Any]], devices: int, message: str
) -> None:
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[mig_pod("p", entries, devices=devices)])
    plugin = Node(fake(), cluster, tmp_path)
    with pytest.raises(AllocationError, match=re.escape(message)):
        await plugin.allocator.allocate([[f"{GPU}-0"] * devices])
    assert plugin.instances() == []


async def test_a_mig_node_refuses_a_pod_without_reservations(tmp_path: Path) -> None:
    cluster = MemoryCluster(nodes=[node(locked_by=("default", "p"))], pods=[bound_pod("p", f"{GPU},NVIDIA,100,0:;")])
    plugin = Node(fake(), cluster, tmp_path)
    with pytest.raises(
        AllocationError, match=re.escape("mig operating mode but the pod has no hami.io/vgpu-mig-allocations")
    ):
        await plugin.allocator.allocate([[f"{GPU}-0"]])


# --- reconciliation ------------------------------------------------------------------------------------------


def ready(profile: str, start: int, size: int, gi: int, uuid: str) -> dict[str, Any]:
    return reservation(profile, start, size, migUUID=uuid, gpuInstanceID=gi, computeInstanceID=0)


async def test_reconcile_keeps_what_live_pods_hold_and_destroys_the_rest(tmp_path: Path) -> None:
    lib = fake(
        [
            {"gi": 1, "profile": 9, "placement": [0, 4], "ci": 0, "uuid": "MIG-running"},
            {"gi": 2, "profile": 19, "placement": [4, 1], "ci": 0, "uuid": "MIG-succeeded"},
            {"gi": 3, "profile": 19, "placement": [5, 1], "ci": 0, "uuid": "MIG-nobody"},
            {"gi": 4, "profile": 19, "placement": [6, 1], "ci": 0, "uuid": "MIG-reserved"},
        ]
    )
    pods = [
        mig_pod("running", [ready("3g.20gb", 0, 4, 1, "MIG-running")], phase="Running", bind_phase="success"),
        mig_pod("finished", [ready("1g.5gb", 4, 1, 2, "MIG-succeeded")], phase="Succeeded", bind_phase="success"),
        mig_pod("waiting", [reservation("1g.5gb", 6, 1)]),  # not allocated yet: its placement is kept
    ]
    plugin = Node(lib, MemoryCluster(nodes=[node()], pods=pods), tmp_path)
    destroyed = await plugin.allocator.reconcile_mig()
    assert sorted(i.mig_uuid for i in plugin.instances()) == ["MIG-reserved", "MIG-running"]
    assert destroyed == ["GPU-a100/GI 2 (MIG-succeeded)", "GPU-a100/GI 3 (MIG-nobody)"]


async def test_reconcile_destroys_nothing_when_the_pods_cannot_be_listed(tmp_path: Path) -> None:
    lib = fake([{"gi": 3, "profile": 19, "placement": [5, 1], "ci": 0, "uuid": "MIG-maybe-held"}])
    plugin = Node(lib, MemoryCluster(nodes=[node()]), tmp_path, list_fails=True)
    assert await plugin.allocator.reconcile_mig() == []
    assert len(plugin.instances()) == 1


async def test_instances_survive_a_plugin_restart_while_their_pod_runs(tmp_path: Path) -> None:
    lib = fake()
    cluster = MemoryCluster(
        nodes=[node(locked_by=("default", "p"))], pods=[mig_pod("p", [reservation("2g.10gb", 4, 2)])]
    )
    await Node(lib, cluster, tmp_path).allocator.allocate([[f"{GPU}-0"]])
    (instance,) = lib.mig_instances(0)
    annotations = cluster.pods[("default", "p")].metadata.annotations
    running = mig_pod("p", json.loads(annotations[keys.NVIDIA_MIG_ALLOCATIONS]), phase="Running", bind_phase="success")
    cluster.put_pod(running)

    restarted = Node(lib, cluster, tmp_path)  # a new process: new allocator, same GPU
    assert await restarted.allocator.reconcile_mig() == []
    assert restarted.instances() == [instance]

    finished = mig_pod("p", json.loads(annotations[keys.NVIDIA_MIG_ALLOCATIONS]), phase="Succeeded")
    cluster.put_pod(finished)
    assert len(await restarted.allocator.reconcile_mig()) == 1
    assert restarted.instances() == []


def test_holders_and_unheld_are_pure() -> None:
    pods = [
        mig_pod("a", [ready("1g.5gb", 0, 1, 7, "MIG-a")], phase="Running"),
        mig_pod("b", [reservation("1g.5gb", 1, 1)]),
        mig_pod("c", [ready("1g.5gb", 2, 1, 9, "MIG-c")], phase="Failed"),
        bound_pod("d", None, annotations={keys.NVIDIA_MIG_ALLOCATIONS: "not json"}),
    ]
    held = holders(pods)
    assert dict(held.instances) == {(GPU, 7): "default/a"}
    assert dict(held.reservations) == {(GPU, "1g.5gb", 1, 1): "default/b"}
    assert holders(pods, skip_uid="uid-a").instances == {}
    lib = fake()
    existing = [MigInstance(7, 19, (0, 1), 0, "MIG-a"), MigInstance(8, 19, (1, 1), 0, "x"), MigInstance(9, 19, (2, 1))]
    gpu = GpuSource(lib, discover).discover()[0]
    assert [i.gpu_instance_id for i in unheld(GPU, existing, gpu.mig_profiles, held)] == [9]
