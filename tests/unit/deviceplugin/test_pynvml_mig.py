"""``PynvmlLib``'s MIG calls over the real ``pynvml`` module, with only the C library's functions stood in.

No GPU is needed: the structures, constants and errors are nvidia-ml-py's own, and :class:`StandInDriver`
answers the handful of NVML functions the MIG calls use, with NVML's rules (placements may not overlap, a GPU
instance with compute instances cannot be destroyed). This checks the ctypes plumbing — arrays of handles,
``byref`` counts, placement structures, error codes — that the fake NVML does not exercise.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import pynvml
import pytest

from hami.deviceplugin.nvml import MigInstance, PynvmlLib
from hami.errors import NvmlError

DEVICE = "device-0"
# GPU-instance profile index -> (profile id, name, slices, instances, MiB, placements)
GI_PROFILES = {
    0: (19, "1g.5gb", 1, 7, 4864, [(i, 1) for i in range(7)]),
    2: (9, "3g.20gb", 3, 2, 19968, [(0, 4), (4, 4)]),
}
CI_PROFILES = {0: (0, 1), 2: (2, 3)}  # compute profile index -> (profile id, slices)


@dataclass
class Gi:
    id: int
    profile_id: int
    start: int
    size: int
    slices: int
    handle: Any
    cis: dict[int, Any] = field(default_factory=dict)  # ci id -> handle


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class StandInDriver:
    """The NVML C functions the MIG calls use; everything else is the real ``pynvml`` module."""

    def __init__(self) -> None:
        self.gis: dict[int, Gi] = {}
        self.fail_compute_instance = False
        self.ci_profiles_used: list[int] = []
        self._keep: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(pynvml, name)

    def __dir__(self) -> list[str]:
        return dir(pynvml)

    def _handle(self, struct: type) -> Any:
        target = struct()
        self._keep.append(target)
        return ctypes.pointer(target)

    def _gi(self, handle: Any) -> Gi:
        address = ctypes.addressof(handle.contents)
        return next(g for g in self.gis.values() if ctypes.addressof(g.handle.contents) == address)

    # GPU instances
    def nvmlDeviceGetGpuInstanceProfileInfo(self, device: str, index: int) -> Any:
        if index not in GI_PROFILES:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        pid, name, slices, count, mib, _ = GI_PROFILES[index]
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.id, info.sliceCount, info.instanceCount, info.memorySizeMB = pid, slices, count, mib
        info.name = name.encode()
        return info

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, device: str, pid: int, slots: Any, count: Any) -> None:
        placements = next(p[5] for p in GI_PROFILES.values() if p[0] == pid)
        for i, (start, size) in enumerate(placements):
            slots[i].start, slots[i].size = start, size
        count._obj.value = len(placements)

    def nvmlDeviceGetGpuInstances(self, device: str, pid: int, slots: Any, count: Any) -> None:
        mine = [g for g in self.gis.values() if g.profile_id == pid]
        for i, gi in enumerate(mine):
            slots[i] = gi.handle
        count._obj.value = len(mine)

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, device: str, pid: int, placement: Any) -> Any:
        start, size = placement.start, placement.size
        if any(start < g.start + g.size and g.start < start + size for g in self.gis.values()):
            raise _error(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        slices = next(p[2] for p in GI_PROFILES.values() if p[0] == pid)
        gi_id = next(i for i in range(1, 16) if i not in self.gis)
        self.gis[gi_id] = Gi(gi_id, pid, start, size, slices, self._handle(pynvml.struct_c_nvmlGpuInstance_t))
        return self.gis[gi_id].handle

    def nvmlGpuInstanceGetInfo(self, handle: Any) -> Any:
        gi = self._gi(handle)
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id, info.profileId = gi.id, gi.profile_id
        info.placement.start, info.placement.size = gi.start, gi.size
        return info

    def nvmlDeviceGetGpuInstanceById(self, device: str, gi_id: int) -> Any:
        if gi_id not in self.gis:
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return self.gis[gi_id].handle

    def nvmlGpuInstanceDestroy(self, handle: Any) -> None:
        gi = self._gi(handle)
        if gi.cis:
            raise _error(pynvml.NVML_ERROR_IN_USE)
        del self.gis[gi.id]

    # compute instances
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, handle: Any, index: int, engines: int) -> Any:
        gi = self._gi(handle)
        if index not in CI_PROFILES or CI_PROFILES[index][1] > gi.slices:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = pynvml.c_nvmlComputeInstanceProfileInfo_v2_t()
        info.id, info.sliceCount = CI_PROFILES[index]
        info.instanceCount = gi.slices // info.sliceCount
        return info

    def nvmlGpuInstanceCreateComputeInstance(self, handle: Any, ci_profile: int) -> Any:
        if self.fail_compute_instance:
            raise _error(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi = self._gi(handle)
        ci_id = len(gi.cis)
        gi.cis[ci_id] = self._handle(pynvml.struct_c_nvmlComputeInstance_t)
        self.ci_profiles_used.append(ci_profile)
        return gi.cis[ci_id]

    def nvmlGpuInstanceGetComputeInstances(self, handle: Any, ci_profile: int, slots: Any, count: Any) -> None:
        gi = self._gi(handle)
        for i, ci in enumerate(gi.cis.values()):
            slots[i] = ci
        count._obj.value = len(gi.cis)

    def _ci(self, handle: Any) -> tuple[Gi, int]:
        address = ctypes.addressof(handle.contents)
        for gi in self.gis.values():
            for ci_id, ci in gi.cis.items():
                if ctypes.addressof(ci.contents) == address:
                    return gi, ci_id
        raise _error(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlComputeInstanceGetInfo(self, handle: Any) -> Any:
        info = pynvml.c_nvmlComputeInstanceInfo_t()
        info.id = self._ci(handle)[1]
        return info

    def nvmlComputeInstanceDestroy(self, handle: Any) -> None:
        gi, ci_id = self._ci(handle)
        del gi.cis[ci_id]

    # MIG devices
    def _mig_devices(self) -> list[tuple[int, int]]:
        return sorted((gi.id, ci) for gi in self.gis.values() for ci in gi.cis)

    def nvmlDeviceGetMaxMigDeviceCount(self, device: str) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: str, index: int) -> tuple[int, int]:
        devices = self._mig_devices()
        if index >= len(devices):
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return devices[index]

    def nvmlDeviceGetGpuInstanceId(self, mig: tuple[int, int]) -> int:
        return mig[0]

    def nvmlDeviceGetComputeInstanceId(self, mig: tuple[int, int]) -> int:
        return mig[1]

    def nvmlDeviceGetUUID(self, mig: tuple[int, int]) -> str:
        return f"MIG-{mig[0]}-{mig[1]}"


@pytest.fixture
def driver() -> StandInDriver:
    return StandInDriver()


@pytest.fixture
def lib(driver: StandInDriver) -> PynvmlLib:
    lib = PynvmlLib()
    lib._nv = driver
    return lib


def test_create_lists_and_destroys_a_mig_instance(lib: PynvmlLib, driver: StandInDriver) -> None:
    created = lib.create_mig_instance(DEVICE, 9, (4, 4))
    assert created == MigInstance(1, 9, (4, 4), 0, "MIG-1-0")
    assert driver.ci_profiles_used == [2]  # the compute profile spanning all three slices
    small = lib.create_mig_instance(DEVICE, 19, (0, 1))
    assert lib.mig_instances(DEVICE) == [small, created]
    lib.destroy_mig_instance(DEVICE, 1)  # its compute instance first, or NVML refuses with IN_USE
    assert lib.mig_instances(DEVICE) == [small]


def test_an_overlapping_placement_is_nvmls_insufficient_resources(lib: PynvmlLib) -> None:
    lib.create_mig_instance(DEVICE, 9, (4, 4))
    with pytest.raises(NvmlError) as caught:
        lib.create_mig_instance(DEVICE, 19, (6, 1))
    assert (caught.value.code, caught.value.call) == (
        "INSUFFICIENT_RESOURCES",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
    )


def test_a_failed_compute_instance_destroys_its_gpu_instance(lib: PynvmlLib, driver: StandInDriver) -> None:
    driver.fail_compute_instance = True
    with pytest.raises(NvmlError) as caught:
        lib.create_mig_instance(DEVICE, 19, (6, 1))
    assert caught.value.call == "nvmlGpuInstanceCreateComputeInstance"
    assert driver.gis == {}
    assert lib.mig_instances(DEVICE) == []


def test_destroying_a_missing_instance_is_not_found(lib: PynvmlLib) -> None:
    with pytest.raises(NvmlError) as caught:
        lib.destroy_mig_instance(DEVICE, 5)
    assert caught.value.code == "NOT_FOUND"
