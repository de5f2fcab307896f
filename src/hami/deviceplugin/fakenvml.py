"""An in-memory NVML for tests and GPU-less clusters, loaded from a YAML fixture.

It implements :class:`~hami.deviceplugin.nvml.NvmlLib`, so discovery, scoring and health handling run the same
code as on real GPUs. Fixture format (every key but ``devices[].uuid`` optional)::

    driver: "580.65.06"
    cuda: "12.8"                       # the CUDA version the driver supports
    devices:
      - uuid: GPU-0a1
        name: Tesla T4                 # NVML's name; the inventory adds the NVIDIA- prefix
        memory_mib: 15360
        bus_id: "00000000:3B:00.0"     # default: derived from the position
        numa: 1                        # what sysfs would say (-1 reads as 0)
        minor: 0                       # N of /dev/nvidiaN (default: the position)
        brand: Tesla                   # NVML brand, architecture and compute capability (DRA attributes);
        architecture: Turing           # absent: NVML cannot tell
        compute_capability: "7.5"
        pcie_root: pci0000:3a          # what sysfs would say (absent: unknown)
        mig: true                      # MIG mode enabled
        profiles:                      # MIG GPU-instance profiles (only read when mig is true)
          - {id: 0, name: 1g.5gb, memory_mib: 4864, slices: 1, instances: 7, placements: [[0, 1], [1, 1]]}
        instances:                     # MIG instances that exist when the fake starts (a plugin restart)
          - {gi: 13, profile: 0, placement: [6, 1], ci: 0, uuid: MIG-3c5e...}   # ci: null = no compute instance
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

MIG instances behave as NVML's do: a GPU instance is created only on a MIG-enabled GPU, for one of its profiles,
at one of that profile's possible placements (else ``INVALID_ARGUMENT``), never overlapping another GPU instance's
slices and never beyond the profile's instance count (``INSUFFICIENT_RESOURCES``). It gets the lowest free GPU
instance id (0 is valid), its compute instance id 0, and a fresh MIG UUID each time it is created, so a
recreated instance is told apart from a reused one. ``created`` and ``destroyed`` count the calls.
"""

from __future__ import annotations

import queue
import threading
import uuid as uuidlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from hami.deviceplugin.nvml import GpuDetails, GpuInstanceProfile, MigInstance, TopologyLevel, XidEvent
from hami.errors import ConfigError, NvmlError

__all__ = ["FakeGpu", "FakeNvmlLib", "load_fake_nvml", "load_fixture"]


_Fake = TypeVar("_Fake", bound="FakeNvmlLib")


class FakeGpu:
    """One fixture GPU (mutable, so tests can change it between discoveries)."""

    def __init__(self, spec: Mapping[str, Any], position: int) -> None:
        self.uuid = str(_required(spec, "uuid", position))
        self.name = str(spec.get("name", "Tesla T4"))
        self.memory_mib = int(spec.get("memory_mib", 15360))
        self.bus_id = str(spec.get("bus_id", f"00000000:{position + 1:02X}:00.0"))
        self.numa = int(spec.get("numa", 0))
        self.minor = int(spec.get("minor", position))
        self.mig = bool(spec.get("mig", False))
        self.details = GpuDetails(
            brand=str(spec.get("brand", "")),
            architecture=str(spec.get("architecture", "")),
            compute_capability=str(spec.get("compute_capability", "")),
        )
        self.pcie_root = str(spec.get("pcie_root", ""))
        self.profiles = tuple(_profile(p) for p in spec.get("profiles", ()))
        self.instances: dict[int, MigInstance] = {}
        for entry in spec.get("instances", ()):
            instance = _instance(entry)
            self.instances[instance.gpu_instance_id] = instance
        self.errors: dict[str, str] = {str(k): str(v) for k, v in dict(spec.get("errors", {})).items()}


class FakeNvmlLib:
    """:class:`~hami.deviceplugin.nvml.NvmlLib` over fixture data. Handles are device positions."""

    def __init__(self, fixture: Mapping[str, Any]) -> None:
        self.driver = str(fixture.get("driver", "fake"))
        self.cuda = str(fixture.get("cuda", "12.8"))
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
        self.created = 0
        self.destroyed = 0

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

    def pcie_root_of(self, bus_id: str) -> str:
        """What sysfs would say for this bus id: the fixture's ``pcie_root`` ("" = unknown)."""
        return next((gpu.pcie_root for gpu in self.gpus if gpu.bus_id == bus_id), "")

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

    def minor_number(self, handle: object) -> int:
        gpu = self._gpu(handle)
        self._check("minor_number", gpu)
        return gpu.minor

    def mig_instances(self, handle: object) -> list[MigInstance]:
        gpu = self._gpu(handle)
        self._check("mig_instances", gpu)
        if not gpu.mig:
            raise NvmlError("NOT_SUPPORTED", "mig_instances", f"MIG is disabled on {gpu.uuid}")
        with self._lock:
            return sorted(gpu.instances.values(), key=lambda i: i.gpu_instance_id)

    def create_mig_instance(self, handle: object, profile_id: int, placement: tuple[int, int]) -> MigInstance:
        gpu = self._gpu(handle)
        self._check("create_mig_instance", gpu)
        call = "create_mig_instance"
        if not gpu.mig:
            raise NvmlError("NOT_SUPPORTED", call, f"MIG is disabled on {gpu.uuid}")
        profile = next((p for p in gpu.profiles if p.profile_id == profile_id), None)
        if profile is None:
            raise NvmlError("INVALID_ARGUMENT", call, f"{gpu.uuid} has no GPU instance profile {profile_id}")
        start, size = placement
        if (start, size) not in profile.placements:
            raise NvmlError("INVALID_ARGUMENT", call, f"{start}+{size} is not a placement of {profile.name}")
        with self._lock:
            for other in gpu.instances.values():
                other_start, other_size = other.placement
                if start < other_start + other_size and other_start < start + size:
                    raise NvmlError(
                        "INSUFFICIENT_RESOURCES",
                        call,
                        f"slices {start}+{size} overlap GPU instance {other.gpu_instance_id}",
                    )
            if sum(i.profile_id == profile_id for i in gpu.instances.values()) >= profile.instance_count:
                raise NvmlError("INSUFFICIENT_RESOURCES", call, f"no {profile.name} instance left")
            gi = next(i for i in range(len(gpu.instances) + 1) if i not in gpu.instances)
            self.created += 1
            mig_uuid = f"MIG-{uuidlib.uuid5(uuidlib.NAMESPACE_OID, f'{gpu.uuid}/{gi}/{self.created}')}"
            instance = MigInstance(gi, profile_id, (start, size), 0, mig_uuid)
            gpu.instances[gi] = instance
            return instance

    def destroy_mig_instance(self, handle: object, gpu_instance_id: int) -> None:
        gpu = self._gpu(handle)
        self._check("destroy_mig_instance", gpu)
        with self._lock:
            if gpu.instances.pop(gpu_instance_id, None) is None:
                raise NvmlError(
                    "NOT_FOUND", "destroy_mig_instance", f"{gpu.uuid} has no GPU instance {gpu_instance_id}"
                )
            self.destroyed += 1

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

    def details(self, handle: object) -> GpuDetails:
        gpu = self._gpu(handle)
        self._check("details", gpu)
        return gpu.details

    def cuda_driver_version(self) -> tuple[int, int]:
        self._check("cuda_driver_version")
        major, _, minor = self.cuda.partition(".")
        return int(major), int(minor or 0)

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
    return load_fixture(path, FakeNvmlLib)


def load_fixture(path: Path, kind: type[_Fake]) -> _Fake:
    """Read a fixture file into ``kind``: ``FakeNvmlLib`` or a subclass that reads more of the fixture (the
    monitor's statistics). Raises ``ConfigError`` naming the file."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(str(path), "", f"cannot read fake NVML fixture: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(str(path), data, "a fake NVML fixture must be a mapping with a 'devices' list")
    try:
        return kind(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(str(path), "", f"malformed fake NVML fixture: {exc}") from exc


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


def _instance(spec: Mapping[str, Any]) -> MigInstance:
    start, size = (int(v) for v in spec["placement"])
    ci = spec.get("ci", 0)
    return MigInstance(
        gpu_instance_id=int(spec["gi"]),
        profile_id=int(spec.get("profile", 0)),
        placement=(start, size),
        compute_instance_id=None if ci is None else int(ci),
        mig_uuid=str(spec.get("uuid", "")) if ci is not None else "",
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
