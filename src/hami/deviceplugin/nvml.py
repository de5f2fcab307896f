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

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol

from hami.errors import HamiError

__all__ = [
    "APPLICATION_XIDS",
    "GpuInstanceProfile",
    "NvmlError",
    "NvmlLib",
    "PynvmlLib",
    "TopologyLevel",
    "XidEvent",
]

# XIDs caused by applications rather than the GPU (NVIDIA's device plugin skips the same set): a graphics
# engine exception, an MMU fault, a reset channel, a preempted channel, a video decoder error and a
# software-induced error. They never make a device unhealthy.
APPLICATION_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})


class NvmlError(HamiError):
    """An NVML call failed. ``code`` is NVML's error name without ``NVML_ERROR_`` (e.g. ``"NOT_SUPPORTED"``)."""

    def __init__(self, code: str, call: str = "", detail: str = "") -> None:
        self.code = code
        self.call = call
        text = f"NVML {call}: {code}" if call else f"NVML: {code}"
        super().__init__(f"{text} ({detail})" if detail else text)


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
class XidEvent:
    """A critical XID reported for one GPU."""

    uuid: str
    xid: int


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

    def common_ancestor(self, a: object, b: object) -> TopologyLevel: ...

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
