"""GPU discovery: what NVML says about this node's GPUs, interpreted once, in hami's types.

:func:`discover` walks the GPUs through an :class:`~hami.deviceplugin.nvml.NvmlLib` and returns
:class:`GpuInfo` records. Rules (webhook-bind-plugin-vendors.md §6.1):

* total memory that NVML reports as ``NOT_SUPPORTED`` becomes ``None`` here; the inventory then uses
  ``preConfiguredDeviceMemory``. Any other per-device failure skips that device with one log line and the
  others are still registered (a lost GPU must not hide the healthy ones).
* the NUMA node comes from sysfs ``/sys/bus/pci/devices/<busid>/numa_node``; negative or unreadable → 0.
* MIG profiles are read only from GPUs whose MIG mode is enabled.
* links between every ordered pair of GPUs: the PCIe common ancestor plus the number of NVLinks whose far
  end is the peer's bus id (scored by ``inventory.pair_scores``).

A failure of NVML as a whole (no library, no driver, no GPUs) raises :class:`DiscoveryError` with a sentence
an operator can act on, never a traceback.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from hami.deviceplugin.nvml import GpuInstanceProfile, NvmlLib, TopologyLevel, XidEvent
from hami.errors import DiscoveryError, NvmlError

__all__ = [
    "GpuInfo",
    "GpuSource",
    "Links",
    "discover",
    "explain_nvml_failure",
    "numa_node",
    "sysfs_bus_id",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Links:
    """The connections between two GPUs as seen from one of them: the PCIe path and the NVLink count."""

    pcie: TopologyLevel | None = None  # None: NVML could not tell
    nvlinks: int = 0


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One physical GPU. ``memory_mib`` is ``None`` when NVML reports its total memory as NOT_SUPPORTED."""

    uuid: str
    index: int
    name: str
    memory_mib: int | None
    bus_id: str = ""
    numa: int = 0
    mig_enabled: bool = False
    mig_profiles: tuple[GpuInstanceProfile, ...] = ()
    links: Mapping[str, Links] = field(default_factory=dict)  # peer UUID -> links from this GPU to it
    minor: int | None = None  # N of /dev/nvidiaN; None when NVML cannot tell


_HINTS = {
    "LIBRARY_NOT_FOUND": "libnvidia-ml.so.1 is not available: install the NVIDIA driver on the node, and run the "
    "plugin with the NVIDIA container runtime (or mount the driver libraries)",
    "DRIVER_NOT_LOADED": "the NVIDIA kernel driver is not loaded on this node",
    "NO_PERMISSION": "the plugin may not open /dev/nvidia* (run it privileged, as the chart does)",
    "LIB_RM_VERSION_MISMATCH": "the NVIDIA user-space library and kernel driver versions differ: reboot or "
    "reload the driver",
}


class GpuSource:
    """Owns the NVML session: initialises it on first use and again after a failure.

    Every method blocks (NVML is a C library); callers run them in worker threads. ``discover`` may run while
    another thread waits in ``next_xid``; ``close`` waits for that wait (at most its timeout) before shutting
    NVML down, so the event set is never freed under a waiter.
    """

    def __init__(self, lib: NvmlLib, discover: Callable[[NvmlLib], tuple[GpuInfo, ...]]) -> None:
        self._lib = lib
        self._discover = discover
        self._session = threading.Lock()  # guards init, shutdown and the event set
        self._ready = False
        self._watching = False

    @property
    def watching(self) -> bool:
        return self._watching

    def _ensure_init(self) -> None:
        with self._session:
            if not self._ready:
                self._lib.init()
                self._ready = True
                log.info("NVML initialised (driver %s)", self._lib.driver_version())

    def call(self, work: Callable[[NvmlLib], T]) -> T:
        """Run ``work`` with the initialised library (MIG changes at Allocate). Raises ``NvmlError``."""
        self._ensure_init()
        return work(self._lib)

    def discover(self) -> tuple[GpuInfo, ...]:
        """The GPUs now. Raises ``DiscoveryError`` (and starts a fresh NVML session next time)."""
        try:
            self._ensure_init()
            return self._discover(self._lib)
        except NvmlError as exc:
            self.close()
            raise DiscoveryError(explain_nvml_failure(exc)) from exc
        except DiscoveryError:
            self.close()
            raise

    def watch_xids(self, gpus: Sequence[GpuInfo]) -> None:
        """Start collecting critical XIDs of these GPUs. Raises ``NvmlError``."""
        self._ensure_init()
        with self._session:
            self._lib.watch_xids([self._lib.handle(gpu.index) for gpu in gpus])
            self._watching = True

    def next_xid(self, timeout_ms: int) -> XidEvent | None:
        """The next critical XID, waiting up to ``timeout_ms``; ``None`` at once when not watching."""
        with self._session:
            if not self._watching:
                return None
            return self._lib.next_xid(timeout_ms)

    def close(self) -> None:
        self._watching = False
        with self._session:
            if not self._ready:
                return
            self._ready = False
            try:
                self._lib.shutdown()
            except NvmlError as exc:
                log.warning("NVML shutdown failed: %s", exc)


def explain_nvml_failure(error: NvmlError) -> str:
    """One sentence for an operator: what failed and what to do."""
    hint = _HINTS.get(error.code, "see the NVML error above")
    return f"cannot use NVML ({error}): {hint}"


def discover(lib: NvmlLib, numa: Callable[[str], int] | None = None) -> tuple[GpuInfo, ...]:
    """Every usable GPU on this node, in NVML index order. ``lib`` must be initialised.

    ``numa`` maps an NVML bus id to its NUMA node (default: :func:`numa_node`, reading sysfs).

    Raises :class:`DiscoveryError` when NVML cannot list devices or lists none.
    """
    read_numa = numa or numa_node
    try:
        count = lib.device_count()
    except NvmlError as exc:
        raise DiscoveryError(explain_nvml_failure(exc)) from exc
    if count == 0:
        raise DiscoveryError("NVML reports no GPU on this node; nothing to register")

    handles: dict[str, object] = {}
    gpus: list[GpuInfo] = []
    for index in range(count):
        try:
            handle = lib.handle(index)
            gpu = _describe(lib, handle, index, read_numa)
        except NvmlError as exc:
            log.error("skipping GPU %d: %s", index, exc)
            continue
        handles[gpu.uuid] = handle
        gpus.append(gpu)
    return tuple(_with_links(lib, gpus, handles))


def _describe(lib: NvmlLib, handle: object, index: int, numa: Callable[[str], int]) -> GpuInfo:
    uuid = lib.uuid(handle)
    name = lib.name(handle)
    try:
        memory_mib: int | None = lib.memory_total_bytes(handle) // (1024 * 1024)
    except NvmlError as exc:
        if exc.code != "NOT_SUPPORTED":
            raise
        memory_mib = None
    bus_id = lib.pci_bus_id(handle)
    try:
        mig_enabled = lib.mig_enabled(handle)
    except NvmlError as exc:
        if exc.code != "NOT_SUPPORTED":
            raise
        mig_enabled = False
    profiles = tuple(lib.gpu_instance_profiles(handle)) if mig_enabled else ()
    try:
        minor: int | None = lib.minor_number(handle)
    except NvmlError as exc:
        log.warning("GPU %s: no device node number (%s); CDI specs and device specs leave it out", uuid, exc)
        minor = None
    return GpuInfo(
        uuid=uuid,
        index=index,
        name=name,
        memory_mib=memory_mib,
        bus_id=bus_id,
        numa=numa(bus_id),
        mig_enabled=mig_enabled,
        mig_profiles=profiles,
        minor=minor,
    )


def _with_links(lib: NvmlLib, gpus: list[GpuInfo], handles: Mapping[str, object]) -> list[GpuInfo]:
    by_bus = {sysfs_bus_id(gpu.bus_id): gpu.uuid for gpu in gpus}
    result = []
    for gpu in gpus:
        handle = handles[gpu.uuid]
        try:
            peers = [by_bus.get(sysfs_bus_id(bus)) for bus in lib.nvlink_peers(handle)]
        except NvmlError as exc:
            log.warning("GPU %s: cannot read NVLinks: %s", gpu.uuid, exc)
            peers = []
        links: dict[str, Links] = {}
        for other in gpus:
            if other.uuid == gpu.uuid:
                continue
            try:
                pcie: TopologyLevel | None = lib.common_ancestor(handle, handles[other.uuid])
            except NvmlError as exc:
                log.warning("GPUs %s and %s: cannot read PCIe topology: %s", gpu.uuid, other.uuid, exc)
                pcie = None
            links[other.uuid] = Links(pcie=pcie, nvlinks=peers.count(other.uuid))
        result.append(dataclasses.replace(gpu, links=links))
    return result


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:3B:00.0`` as sysfs names it: ``0000:3b:00.0`` (4-digit domain, lower case)."""
    text = nvml_bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep:
        return text
    return f"{domain[-4:].rjust(4, '0')}:{rest}"


def numa_node(nvml_bus_id: str, sysfs_root: Path = Path("/sys")) -> int:
    """The GPU's NUMA node from ``<sysfs>/bus/pci/devices/<busid>/numa_node``; negative or unreadable → 0."""
    path = sysfs_root / "bus" / "pci" / "devices" / sysfs_bus_id(nvml_bus_id) / "numa_node"
    try:
        value = int(path.read_text().strip())
    except (OSError, ValueError):
        return 0
    return max(value, 0)
