"""The slice of NVML the device plugin uses, behind one small Protocol (like httpx's transport).

:class:`NvmlLib` names exactly the queries discovery and health checking make, in hami's own types.
:class:`PynvmlLib` implements it over NVIDIA's official bindings (``nvidia-ml-py``, imported as ``pynvml``);
``hami.deviceplugin.fakenvml`` implements it from YAML fixtures for tests and GPU-less clusters. Everything
that interprets the answers (fallbacks, skipping broken devices, scoring) lives in ``discovery`` and is
therefore tested against the fake.

Every failure is an :class:`NvmlError` carrying NVML's error name without the prefix (``"NOT_SUPPORTED"``,
``"GPU_IS_LOST"``, ``"LIBRARY_NOT_FOUND"``, …), so callers compare codes, not message text.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol

from hami.errors import NvmlError

__all__ = [
    "APPLICATION_XIDS",
    "GpuDetails",
    "GpuInstanceProfile",
    "MigInstance",
    "NvmlLib",
    "PynvmlLib",
    "TopologyLevel",
    "XidEvent",
]

# XIDs caused by applications rather than the GPU (NVIDIA's device plugin skips the same set): a graphics
# engine exception, an MMU fault, a reset channel, a preempted channel, a video decoder error and a
# software-induced error. They never make a device unhealthy.
APPLICATION_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})


class TopologyLevel(enum.IntEnum):
    """How close two GPUs are on the PCIe tree (NVML's ``nvmlGpuTopologyLevel_t`` values)."""

    INTERNAL = 0  # same board (multi-GPU card)
    SINGLE = 10  # one PCIe switch
    MULTIPLE = 20  # several PCIe switches, no host bridge
    HOSTBRIDGE = 30  # one host bridge
    NODE = 40  # same NUMA node / CPU, across host bridges
    SYSTEM = 50  # across CPUs (SMP interconnect)


@dataclass(frozen=True, slots=True)
class GpuInstanceProfile:
    """A MIG GPU-instance profile as NVML describes it. ``memory_mib`` is NVML's ``memorySizeMB``."""

    profile_id: int
    name: str
    memory_mib: int
    slice_count: int
    instance_count: int
    placements: tuple[tuple[int, int], ...]  # (start, size) in GPU slices


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A MIG GPU instance and its compute instance, as they exist on a GPU.

    ``compute_instance_id`` is ``None`` (and ``mig_uuid`` empty) for a GPU instance without a compute instance,
    which no container can use: left behind by a creation that failed half way.
    """

    gpu_instance_id: int
    profile_id: int
    placement: tuple[int, int]  # (start, size) in GPU slices
    compute_instance_id: int | None = None
    mig_uuid: str = ""


@dataclass(frozen=True, slots=True)
class XidEvent:
    """A critical XID reported for one GPU."""

    uuid: str
    xid: int


@dataclass(frozen=True, slots=True)
class GpuDetails:
    """What a DRA ResourceSlice says about a GPU beyond discovery's facts; "" where NVML could not tell."""

    brand: str = ""
    architecture: str = ""
    compute_capability: str = ""  # "8.0"


class NvmlLib(Protocol):
    """The NVML queries hami makes. ``Handle`` values are opaque; each call raises :class:`NvmlError`."""

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def driver_version(self) -> str: ...
    def device_count(self) -> int: ...
    def handle(self, index: int) -> object: ...
    def uuid(self, handle: object) -> str: ...
    def name(self, handle: object) -> str: ...
    def memory_total_bytes(self, handle: object) -> int: ...
    def pci_bus_id(self, handle: object) -> str: ...

    def mig_enabled(self, handle: object) -> bool:
        """Current MIG mode; raises ``NOT_SUPPORTED`` on GPUs without MIG."""
        ...

    def gpu_instance_profiles(self, handle: object) -> list[GpuInstanceProfile]:
        """Every GPU-instance profile the GPU supports (MIG mode must be enabled)."""
        ...

    def minor_number(self, handle: object) -> int:
        """The N of the GPU's ``/dev/nvidiaN`` device node."""
        ...

    def mig_instances(self, handle: object) -> list[MigInstance]:
        """Every GPU instance on the GPU (MIG mode enabled), each with its first compute instance."""
        ...

    def create_mig_instance(self, handle: object, profile_id: int, placement: tuple[int, int]) -> MigInstance:
        """Create a GPU instance of ``profile_id`` at ``placement`` and one compute instance spanning it.
        Raises ``INSUFFICIENT_RESOURCES`` when the placement overlaps an existing GPU instance. On a failure
        after the GPU instance was created, that instance is destroyed again."""
        ...

    def destroy_mig_instance(self, handle: object, gpu_instance_id: int) -> None:
        """Destroy the GPU instance's compute instances, then the GPU instance. ``IN_USE`` while a process
        runs on it; ``NOT_FOUND`` when it does not exist."""
        ...

    def common_ancestor(self, a: object, b: object) -> TopologyLevel: ...

    def details(self, handle: object) -> GpuDetails:
        """Brand, architecture and CUDA compute capability (each "" when NVML cannot tell)."""
        ...

    def cuda_driver_version(self) -> tuple[int, int]:
        """The CUDA version the driver supports, as (major, minor)."""
        ...

    def nvlink_peers(self, handle: object) -> list[str]:
        """The PCI bus id at the far end of each active NVLink (one entry per link)."""
        ...

    def watch_xids(self, handles: list[object]) -> None:
        """Start collecting critical-XID events for these GPUs (``next_xid`` reads them)."""
        ...

    def next_xid(self, timeout_ms: int) -> XidEvent | None:
        """Block up to ``timeout_ms`` for the next critical XID; ``None`` on timeout."""
        ...


class PynvmlLib:
    """:class:`NvmlLib` over ``pynvml`` (``nvidia-ml-py``). Importing ``pynvml`` needs no GPU; ``init`` does."""

    def __init__(self) -> None:
        import pynvml

        self._nv: Any = pynvml
        self._event_set: Any = None

    @contextmanager
    def _call(self, name: str) -> Iterator[None]:
        try:
            yield
        except self._nv.NVMLError as exc:
            raise NvmlError(self._code(exc), name, str(exc)) from exc

    def _code(self, exc: Any) -> str:
        value = getattr(exc, "value", None)
        for attr in dir(self._nv):
            if attr.startswith("NVML_ERROR_") and getattr(self._nv, attr) == value:
                return attr.removeprefix("NVML_ERROR_")
        return f"UNKNOWN_{value}"

    def init(self) -> None:
        with self._call("nvmlInit"):
            self._nv.nvmlInit()

    def shutdown(self) -> None:
        with self._call("nvmlShutdown"):
            if self._event_set is not None:
                self._nv.nvmlEventSetFree(self._event_set)
                self._event_set = None
            self._nv.nvmlShutdown()

    def driver_version(self) -> str:
        with self._call("nvmlSystemGetDriverVersion"):
            return str(self._nv.nvmlSystemGetDriverVersion())

    def device_count(self) -> int:
        with self._call("nvmlDeviceGetCount"):
            return int(self._nv.nvmlDeviceGetCount())

    def handle(self, index: int) -> object:
        with self._call("nvmlDeviceGetHandleByIndex"):
            handle: object = self._nv.nvmlDeviceGetHandleByIndex(index)
            return handle

    def uuid(self, handle: object) -> str:
        with self._call("nvmlDeviceGetUUID"):
            return str(self._nv.nvmlDeviceGetUUID(handle))

    def name(self, handle: object) -> str:
        with self._call("nvmlDeviceGetName"):
            return str(self._nv.nvmlDeviceGetName(handle))

    def memory_total_bytes(self, handle: object) -> int:
        with self._call("nvmlDeviceGetMemoryInfo"):
            return int(self._nv.nvmlDeviceGetMemoryInfo(handle).total)

    def pci_bus_id(self, handle: object) -> str:
        with self._call("nvmlDeviceGetPciInfo"):
            return _text(self._nv.nvmlDeviceGetPciInfo(handle).busId)

    def mig_enabled(self, handle: object) -> bool:
        with self._call("nvmlDeviceGetMigMode"):
            current, _pending = self._nv.nvmlDeviceGetMigMode(handle)
            return bool(current == self._nv.NVML_DEVICE_MIG_ENABLE)

    def gpu_instance_profiles(self, handle: object) -> list[GpuInstanceProfile]:
        import ctypes

        nv = self._nv
        profiles: list[GpuInstanceProfile] = []
        for profile_index in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile_index)
            except nv.NVMLError as exc:
                if self._code(exc) in {"NOT_SUPPORTED", "INVALID_ARGUMENT"}:
                    continue  # this GPU has no such profile
                raise NvmlError(self._code(exc), "nvmlDeviceGetGpuInstanceProfileInfo", str(exc)) from exc
            with self._call("nvmlDeviceGetGpuInstancePossiblePlacements"):
                slots = (nv.c_nvmlGpuInstancePlacement_t * max(int(info.instanceCount), 1))()
                count = ctypes.c_uint(len(slots))
                nv.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, slots, ctypes.byref(count))
                placements = tuple((int(slots[i].start), int(slots[i].size)) for i in range(count.value))
            profiles.append(
                GpuInstanceProfile(
                    profile_id=int(info.id),
                    name=_text(info.name),
                    memory_mib=int(info.memorySizeMB),
                    slice_count=int(info.sliceCount),
                    instance_count=int(info.instanceCount),
                    placements=placements,
                )
            )
        return profiles

    def minor_number(self, handle: object) -> int:
        with self._call("nvmlDeviceGetMinorNumber"):
            return int(self._nv.nvmlDeviceGetMinorNumber(handle))

    def details(self, handle: object) -> GpuDetails:
        nv = self._nv
        brand = architecture = capability = ""
        with contextlib.suppress(nv.NVMLError):
            brand = _enum_name(nv, "NVML_BRAND_", nv.nvmlDeviceGetBrand(handle))
        with contextlib.suppress(nv.NVMLError):
            architecture = _enum_name(nv, "NVML_DEVICE_ARCH_", nv.nvmlDeviceGetArchitecture(handle))
        with contextlib.suppress(nv.NVMLError):
            major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)
            capability = f"{int(major)}.{int(minor)}"
        return GpuDetails(brand=brand, architecture=architecture, compute_capability=capability)

    def cuda_driver_version(self) -> tuple[int, int]:
        with self._call("nvmlSystemGetCudaDriverVersion"):
            version = int(self._nv.nvmlSystemGetCudaDriverVersion())
        return version // 1000, (version % 1000) // 10

    def mig_instances(self, handle: object) -> list[MigInstance]:
        import ctypes

        nv = self._nv
        uuids = self._mig_uuids(handle)
        found: list[MigInstance] = []
        for profile in self.gpu_instance_profiles(handle):
            with self._call("nvmlDeviceGetGpuInstances"):
                slots = (nv.c_nvmlGpuInstance_t * max(profile.instance_count, 1))()
                count = ctypes.c_uint(0)
                nv.nvmlDeviceGetGpuInstances(handle, profile.profile_id, slots, ctypes.byref(count))
            for i in range(count.value):
                with self._call("nvmlGpuInstanceGetInfo"):
                    info = nv.nvmlGpuInstanceGetInfo(slots[i])
                gi = int(info.id)
                ci = self._first_compute_instance(slots[i])
                found.append(
                    MigInstance(
                        gpu_instance_id=gi,
                        profile_id=int(info.profileId),
                        placement=(int(info.placement.start), int(info.placement.size)),
                        compute_instance_id=ci,
                        mig_uuid=uuids.get((gi, ci), "") if ci is not None else "",
                    )
                )
        return found

    def _mig_uuids(self, handle: object) -> dict[tuple[int, int], str]:
        """(GPU instance id, compute instance id) → MIG device UUID, for every MIG device of the GPU."""
        nv = self._nv
        uuids: dict[tuple[int, int], str] = {}
        with self._call("nvmlDeviceGetMaxMigDeviceCount"):
            most = int(nv.nvmlDeviceGetMaxMigDeviceCount(handle))
        for index in range(most):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
            except nv.NVMLError as exc:
                if self._code(exc) in {"NOT_FOUND", "INVALID_ARGUMENT"}:
                    continue  # no MIG device at this index
                raise NvmlError(self._code(exc), "nvmlDeviceGetMigDeviceHandleByIndex", str(exc)) from exc
            with self._call("nvmlDeviceGetGpuInstanceId"):
                key = (int(nv.nvmlDeviceGetGpuInstanceId(mig)), int(nv.nvmlDeviceGetComputeInstanceId(mig)))
            with self._call("nvmlDeviceGetUUID"):
                uuids[key] = _text(nv.nvmlDeviceGetUUID(mig))
        return uuids

    def _first_compute_instance(self, gpu_instance: Any) -> int | None:
        import ctypes

        nv = self._nv
        for profile_index in range(nv.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gpu_instance, profile_index, nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
                )
            except nv.NVMLError:
                continue  # a compute profile this GPU instance does not offer
            slots = (nv.c_nvmlComputeInstance_t * max(int(info.instanceCount), 1))()
            count = ctypes.c_uint(0)
            with self._call("nvmlGpuInstanceGetComputeInstances"):
                nv.nvmlGpuInstanceGetComputeInstances(gpu_instance, info.id, slots, ctypes.byref(count))
            if count.value:
                with self._call("nvmlComputeInstanceGetInfo"):
                    return int(nv.nvmlComputeInstanceGetInfo(slots[0]).id)
        return None

    def create_mig_instance(self, handle: object, profile_id: int, placement: tuple[int, int]) -> MigInstance:
        nv = self._nv
        where = nv.c_nvmlGpuInstancePlacement_t()
        where.start, where.size = placement
        with self._call("nvmlDeviceCreateGpuInstanceWithPlacement"):
            gpu_instance = nv.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, where)
        try:
            with self._call("nvmlGpuInstanceGetInfo"):
                gi = int(nv.nvmlGpuInstanceGetInfo(gpu_instance).id)
            compute_profile = self._full_compute_profile(gpu_instance)
            with self._call("nvmlGpuInstanceCreateComputeInstance"):
                compute_instance = nv.nvmlGpuInstanceCreateComputeInstance(gpu_instance, compute_profile)
            with self._call("nvmlComputeInstanceGetInfo"):
                ci = int(nv.nvmlComputeInstanceGetInfo(compute_instance).id)
            uuid = self._mig_uuids(handle).get((gi, ci), "")
            if not uuid:
                raise NvmlError("NOT_FOUND", "nvmlDeviceGetMigDeviceHandleByIndex", f"no MIG device for GI {gi}")
        except NvmlError:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlGpuInstanceDestroy(gpu_instance)
            raise
        return MigInstance(gi, profile_id, placement, ci, uuid)

    def _full_compute_profile(self, gpu_instance: Any) -> int:
        """The id of the compute-instance profile with the most slices this GPU instance offers."""
        nv = self._nv
        best: tuple[int, int] | None = None
        for profile_index in range(nv.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gpu_instance, profile_index, nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
                )
            except nv.NVMLError:
                continue
            if best is None or int(info.sliceCount) > best[0]:
                best = (int(info.sliceCount), int(info.id))
        if best is None:
            raise NvmlError("NOT_SUPPORTED", "nvmlGpuInstanceGetComputeInstanceProfileInfo", "no compute profile")
        return best[1]

    def destroy_mig_instance(self, handle: object, gpu_instance_id: int) -> None:
        import ctypes

        nv = self._nv
        with self._call("nvmlDeviceGetGpuInstanceById"):
            gpu_instance = nv.nvmlDeviceGetGpuInstanceById(handle, gpu_instance_id)
        for profile_index in range(nv.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gpu_instance, profile_index, nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
                )
            except nv.NVMLError:
                continue
            slots = (nv.c_nvmlComputeInstance_t * max(int(info.instanceCount), 1))()
            count = ctypes.c_uint(0)
            with self._call("nvmlGpuInstanceGetComputeInstances"):
                nv.nvmlGpuInstanceGetComputeInstances(gpu_instance, info.id, slots, ctypes.byref(count))
            for i in range(count.value):
                with self._call("nvmlComputeInstanceDestroy"):
                    nv.nvmlComputeInstanceDestroy(slots[i])
        with self._call("nvmlGpuInstanceDestroy"):
            nv.nvmlGpuInstanceDestroy(gpu_instance)

    def common_ancestor(self, a: object, b: object) -> TopologyLevel:
        with self._call("nvmlDeviceGetTopologyCommonAncestor"):
            return TopologyLevel(int(self._nv.nvmlDeviceGetTopologyCommonAncestor(a, b)))

    def nvlink_peers(self, handle: object) -> list[str]:
        nv = self._nv
        peers: list[str] = []
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            try:
                if nv.nvmlDeviceGetNvLinkState(handle, link) != nv.NVML_FEATURE_ENABLED:
                    continue
                peers.append(_text(nv.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId))
            except nv.NVMLError:
                continue  # a link index the GPU does not have, or an inactive link
        return peers

    def watch_xids(self, handles: list[object]) -> None:
        nv = self._nv
        with self._call("nvmlEventSetCreate"):
            self._event_set = nv.nvmlEventSetCreate()
        for handle in handles:
            with self._call("nvmlDeviceRegisterEvents"):
                nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, self._event_set)

    def next_xid(self, timeout_ms: int) -> XidEvent | None:
        nv = self._nv
        try:
            data = nv.nvmlEventSetWait_v2(self._event_set, timeout_ms)
        except nv.NVMLError as exc:
            if self._code(exc) == "TIMEOUT":
                return None
            raise NvmlError(self._code(exc), "nvmlEventSetWait", str(exc)) from exc
        if data.eventType != nv.nvmlEventTypeXidCriticalError:
            return None
        with self._call("nvmlDeviceGetUUID"):
            uuid = str(nv.nvmlDeviceGetUUID(data.device))
        return XidEvent(uuid=uuid, xid=int(data.eventData))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _enum_name(nv: Any, prefix: str, value: object) -> str:
    """The name of pynvml's ``<prefix>*`` constant equal to ``value``, as NVIDIA's tools spell it
    (``NVML_DEVICE_ARCH_AMPERE`` → ``Ampere``, ``NVML_BRAND_NVIDIA_RTX`` → ``NvidiaRTX``); "" when none is."""
    for attr in sorted(dir(nv)):
        if attr.startswith(prefix) and not attr.endswith(("_COUNT", "_UNKNOWN")) and getattr(nv, attr) == value:
            words = attr.removeprefix(prefix).split("_")
            return "".join(w if w.isupper() and len(w) <= 3 and w != "NVIDIA" else w.capitalize() for w in words)
    return ""
