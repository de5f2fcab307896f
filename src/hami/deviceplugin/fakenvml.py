"""An in-memory NVML for tests and GPU-less clusters, loaded from a YAML fixture.

It implements :class:`~hami.deviceplugin.nvml.NvmlLib`, so discovery, scoring and health handling run the same
code as on real GPUs. Fixture format (every key but ``devices[].uuid`` optional)::

    driver: "580.65.06"
    devices:
      - uuid: GPU-0a1
        name: Tesla T4                 # NVML's name; the inventory adds the NVIDIA- prefix
        memory_mib: 15360
        bus_id: "00000000:3B:00.0"     # default: derived from the position
        numa: 1                        # what sysfs would say (-1 reads as 0)
        mig: true                      # MIG mode enabled
        profiles:                      # MIG GPU-instance profiles (only read when mig is true)
          - {id: 0, name: 1g.5gb, memory_mib: 4864, slices: 1, instances: 7, placements: [[0, 1], [1, 1]]}
        errors: {memory_total_bytes: NOT_SUPPORTED}   # this call always fails for this GPU
    links:                             # PCIe level: internal|single|multiple|hostbridge|node|system
      - {between: [GPU-0a1, GPU-0a2], pcie: single, nvlinks: 2}   # both directions
      - {from: GPU-0a1, to: GPU-0a3, nvlinks: 1}                  # one direction only (asymmetric data)
    xids:                              # critical XID events, delivered in order by next_xid
      - {uuid: GPU-0a2, xid: 79}
    errors:                            # the next calls of these methods fail, one code per call
      device_count: [UNKNOWN, UNKNOWN]

Pairs without a ``links`` entry report PCIe level ``system`` and no NVLink. Tests can also inject XIDs
(:meth:`FakeNvmlLib.inject_xid`) and errors (:meth:`FakeNvmlLib.fail_next`) while the plugin runs.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from hami.deviceplugin.nvml import GpuInstanceProfile, NvmlError, TopologyLevel, XidEvent
from hami.errors import ConfigError

__all__ = ["FakeGpu", "FakeNvmlLib", "load_fake_nvml"]


class FakeGpu:
    """One fixture GPU (mutable, so tests can change it between discoveries)."""

    def __init__(self, spec: Mapping[str, Any], position: int) -> None:
        self.uuid = str(_required(spec, "uuid", position))
        self.name = str(spec.get("name", "Tesla T4"))
        self.memory_mib = int(spec.get("memory_mib", 15360))
        self.bus_id = str(spec.get("bus_id", f"00000000:{position + 1:02X}:00.0"))
        self.numa = int(spec.get("numa", 0))
        self.mig = bool(spec.get("mig", False))
        self.profiles = tuple(_profile(p) for p in spec.get("profiles", ()))
        self.errors: dict[str, str] = {str(k): str(v) for k, v in dict(spec.get("errors", {})).items()}


class FakeNvmlLib:
    """:class:`~hami.deviceplugin.nvml.NvmlLib` over fixture data. Handles are device positions."""

    def __init__(self, fixture: Mapping[str, Any]) -> None:
        self.driver = str(fixture.get("driver", "fake"))
        self.gpus = [FakeGpu(spec, i) for i, spec in enumerate(fixture.get("devices", ()))]
        self._links: dict[tuple[str, str], tuple[TopologyLevel, int]] = {}
        for entry in fixture.get("links", ()):
            level = _level(str(entry.get("pcie", "system")))
            nvlinks = int(entry.get("nvlinks", 0))
            if "between" in entry:
                a, b = (str(u) for u in entry["between"])
                self._links[(a, b)] = self._links[(b, a)] = (level, nvlinks)
            else:
                self._links[(str(entry["from"]), str(entry["to"]))] = (level, nvlinks)
        self._pending_errors: dict[str, list[str]] = {
            str(call): [str(c) for c in codes] for call, codes in dict(fixture.get("errors", {})).items()
        }
        self._xids: queue.Queue[XidEvent] = queue.Queue()
        for event in fixture.get("xids", ()):
            self._xids.put(XidEvent(uuid=str(event["uuid"]), xid=int(event.get("xid", 79))))
        self._lock = threading.Lock()
        self.initialised = False
        self.watched: list[str] = []

    # --- test controls -----------------------------------------------------------------------
    def fail_next(self, call: str, *codes: str) -> None:
        """Make the next ``len(codes)`` calls of ``call`` raise these NVML error codes."""
        with self._lock:
            self._pending_errors.setdefault(call, []).extend(codes)

    def inject_xid(self, uuid: str, xid: int = 79) -> None:
        """Report a critical XID for ``uuid`` (79: GPU has fallen off the bus)."""
        self._xids.put(XidEvent(uuid=uuid, xid=xid))

    def numa_of(self, bus_id: str) -> int:
        """What sysfs would say for this bus id: the fixture's ``numa`` with negative values read as 0."""
        for gpu in self.gpus:
            if gpu.bus_id == bus_id:
                return max(gpu.numa, 0)
        return 0

    # --- NvmlLib -----------------------------------------------------------------------------
    def _check(self, call: str, gpu: FakeGpu | None = None) -> None:
        with self._lock:
            pending = self._pending_errors.get(call)
            if pending:
                raise NvmlError(pending.pop(0), call, "injected")
        if gpu is not None and call in gpu.errors:
            raise NvmlError(gpu.errors[call], call, f"injected for {gpu.uuid}")

    def _gpu(self, handle: object) -> FakeGpu:
        assert isinstance(handle, int)
        return self.gpus[handle]

    def init(self) -> None:
        self._check("init")
        self.initialised = True

    def shutdown(self) -> None:
        self.initialised = False

    def driver_version(self) -> str:
        self._check("driver_version")
        return self.driver

    def device_count(self) -> int:
        self._check("device_count")
        return len(self.gpus)

    def handle(self, index: int) -> object:
        self._check("handle", self.gpus[index])
        return index

    def uuid(self, handle: object) -> str:
        gpu = self._gpu(handle)
        self._check("uuid", gpu)
        return gpu.uuid

    def name(self, handle: object) -> str:
        gpu = self._gpu(handle)
        self._check("name", gpu)
        return gpu.name

    def memory_total_bytes(self, handle: object) -> int:
        gpu = self._gpu(handle)
        self._check("memory_total_bytes", gpu)
        return gpu.memory_mib * 1024 * 1024

    def pci_bus_id(self, handle: object) -> str:
        gpu = self._gpu(handle)
        self._check("pci_bus_id", gpu)
        return gpu.bus_id

    def mig_enabled(self, handle: object) -> bool:
        gpu = self._gpu(handle)
        self._check("mig_enabled", gpu)
        return gpu.mig

    def gpu_instance_profiles(self, handle: object) -> list[GpuInstanceProfile]:
        gpu = self._gpu(handle)
        self._check("gpu_instance_profiles", gpu)
        return list(gpu.profiles)

    def common_ancestor(self, a: object, b: object) -> TopologyLevel:
        first, second = self._gpu(a), self._gpu(b)
        self._check("common_ancestor", first)
        return self._links.get((first.uuid, second.uuid), (TopologyLevel.SYSTEM, 0))[0]

    def nvlink_peers(self, handle: object) -> list[str]:
        gpu = self._gpu(handle)
        self._check("nvlink_peers", gpu)
        peers: list[str] = []
        for other in self.gpus:
            count = self._links.get((gpu.uuid, other.uuid), (TopologyLevel.SYSTEM, 0))[1]
            peers.extend([other.bus_id] * count)
        return peers

    def watch_xids(self, handles: list[object]) -> None:
        self._check("watch_xids")
        self.watched = [self._gpu(h).uuid for h in handles]

    def next_xid(self, timeout_ms: int) -> XidEvent | None:
        self._check("next_xid")
        try:
            return self._xids.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            return None


def load_fake_nvml(path: Path) -> FakeNvmlLib:
    """Read a fixture file (format in the module docstring). Raises ``ConfigError`` naming the file."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(str(path), "", f"cannot read fake NVML fixture: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(str(path), data, "a fake NVML fixture must be a mapping with a 'devices' list")
    try:
        return FakeNvmlLib(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(str(path), "", f"malformed fake NVML fixture: {exc!r}") from exc


def _required(spec: Mapping[str, Any], key: str, position: int) -> object:
    if key not in spec:
        raise ValueError(f"devices[{position}] has no {key!r}")
    return spec[key]


def _profile(spec: Mapping[str, Any]) -> GpuInstanceProfile:
    return GpuInstanceProfile(
        profile_id=int(spec.get("id", 0)),
        name=str(spec["name"]),
        memory_mib=int(spec["memory_mib"]),
        slice_count=int(spec.get("slices", 1)),
        instance_count=int(spec.get("instances", 1)),
        placements=tuple((int(start), int(size)) for start, size in spec.get("placements", ())),
    )


_LEVELS = {
    "internal": TopologyLevel.INTERNAL,
    "same-board": TopologyLevel.INTERNAL,
    "single": TopologyLevel.SINGLE,
    "single-switch": TopologyLevel.SINGLE,
    "multiple": TopologyLevel.MULTIPLE,
    "multi-switch": TopologyLevel.MULTIPLE,
    "hostbridge": TopologyLevel.HOSTBRIDGE,
    "host-bridge": TopologyLevel.HOSTBRIDGE,
    "node": TopologyLevel.NODE,
    "same-cpu": TopologyLevel.NODE,
    "system": TopologyLevel.SYSTEM,
    "cross-cpu": TopologyLevel.SYSTEM,
}


def _level(name: str) -> TopologyLevel:
    try:
        return _LEVELS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown PCIe level {name!r}; one of {sorted(_LEVELS)}") from None
