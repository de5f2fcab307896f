"""The ResourceSlice this node publishes for HAMi-core GPU shares (docs/dra-driver.md, dra.md §1).

Pure: discovered GPUs, their NVML details and the node's facts in, the API object out. Wire-compatible with HAMi's
k8s-dra-driver: driver ``hami-core-gpu.project-hami.io``, one pool named after the node, one device per GPU named
``hami-gpu-<minor>`` with the same attributes, the ``cores`` (percent, 0-100 in steps of 1) and ``memory`` (bytes,
1 MiB to the card's total in steps of 1 MiB) capacities, defaults of a whole card, ``allowMultipleAllocations``.

*Where hami differs from HAMi:* devices are listed by minor number, so the slice never changes by itself (HAMi's
comes from Go map order and reorders on every publish); an attribute NVML or sysfs cannot tell is left out (HAMi's
crashes when the PCIe root is unknown); an unhealthy GPU stays listed with a ``NoSchedule`` device taint, which
is removed when it recovers (HAMi publishes no taints); a card pods of hami's device plugin hold is tainted
``hami.io/device-plugin-pods`` until they are gone (:mod:`.guard`); MIG-enabled GPUs are left out (HAMi-core
cannot limit them; HAMi lists them as whole shares that containers then cannot use).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, Final

from hami.deviceplugin.discovery import GpuInfo
from hami.deviceplugin.dra.guard import held_back_taint
from hami.deviceplugin.nvml import GpuDetails
from hami.protocol.quantity import format_quantity

__all__ = [
    "API_VERSION",
    "DEVICE_TYPE",
    "DRIVER",
    "MIB",
    "PCIE_ROOT",
    "TAINT_KEY",
    "NodeFacts",
    "SliceDevice",
    "device_name",
    "resource_slice",
    "semver",
    "slice_devices",
    "slice_name",
]

log = logging.getLogger(__name__)

DRIVER: Final = "hami-core-gpu.project-hami.io"
DEVICE_TYPE: Final = "hami-gpu"
API_VERSION: Final = "resource.k8s.io/v1"
PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"
TAINT_KEY: Final = f"{DRIVER}/unhealthy"
MIB: Final = 1 << 20
_SEMVER: Final = re.compile(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?")


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What holds for every GPU of the node: the driver's version and the CUDA version it supports."""

    driver_version: str
    cuda_version: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One published device and the GPU behind it (what prepare needs to know about it)."""

    name: str
    gpu: GpuInfo
    memory_bytes: int
    healthy: bool = True
    details: GpuDetails = field(default_factory=GpuDetails)
    pcie_root: str = ""

    @property
    def minor(self) -> int:
        assert self.gpu.minor is not None
        return self.gpu.minor


def device_name(minor: int) -> str:
    """``hami-gpu-<minor>``: named by the NVML minor number (``/dev/nvidia<minor>``), as HAMi's driver does."""
    return f"{DEVICE_TYPE}-{minor}"


def slice_name(node_name: str) -> str:
    """The slice's object name: one per node, so the plugin updates it by name."""
    return f"{node_name}-{DRIVER}"


def semver(text: str) -> str | None:
    """A version as semantic versioning spells it (``580.65.06`` → ``580.65.6``, ``8.0`` → ``8.0.0``); None when
    ``text`` does not start with a number."""
    found = _SEMVER.match(text.strip())
    if found is None:
        return None
    return ".".join(str(int(part or 0)) for part in found.groups())


def slice_devices(
    gpus: Iterable[GpuInfo],
    *,
    details: Mapping[str, GpuDetails],
    pcie_roots: Mapping[str, str],
    unhealthy: Set[str] = frozenset(),
) -> list[SliceDevice]:
    """The GPUs this node offers as shares, by minor number. A GPU is left out (with a log line) when it has no
    minor number (no name, no device node), NVML cannot report its memory, or MIG is enabled on it."""
    devices = []
    for gpu in gpus:
        if gpu.minor is None or gpu.memory_mib is None or gpu.mig_enabled:
            why = "MIG is enabled" if gpu.mig_enabled else "NVML cannot report its minor number or memory"
            log.warning("GPU %s: not offered through DRA: %s", gpu.uuid, why)
            continue
        devices.append(
            SliceDevice(
                name=device_name(gpu.minor),
                gpu=gpu,
                memory_bytes=gpu.memory_mib * MIB,
                healthy=gpu.uuid not in unhealthy,
                details=details.get(gpu.uuid, GpuDetails()),
                pcie_root=pcie_roots.get(gpu.uuid, ""),
            )
        )
    return sorted(devices, key=lambda d: d.minor)


def _attributes(device: SliceDevice, node: NodeFacts) -> dict[str, dict[str, Any]]:
    gpu, details = device.gpu, device.details
    attributes: dict[str, dict[str, Any]] = {
        "type": {"string": DEVICE_TYPE},
        "uuid": {"string": gpu.uuid},
        "minor": {"int": device.minor},
        "productName": {"string": gpu.name},
    }
    for key, value in (("brand", details.brand), ("architecture", details.architecture), ("pcieBusID", gpu.bus_id)):
        if value:
            attributes[key] = {"string": value}
    versions = {
        "cudaComputeCapability": semver(details.compute_capability) if details.compute_capability else None,
        "driverVersion": semver(node.driver_version),
        "cudaDriverVersion": semver("{}.{}".format(*node.cuda_version)) if node.cuda_version else None,
    }
    for key, version in versions.items():
        if version is not None:
            attributes[key] = {"version": version}
    if device.pcie_root:
        attributes[PCIE_ROOT] = {"string": device.pcie_root}
    return attributes


def _capacity(device: SliceDevice) -> dict[str, dict[str, Any]]:
    """Quantities in the API server's canonical spelling (memory binary: ``15Gi``, ``1Mi``), so a slice read back
    equals the one written and an unchanged inventory is never written again."""
    memory = format_quantity(device.memory_bytes, binary=True)
    return {
        "cores": {
            "value": "100",
            "requestPolicy": {"default": "100", "validRange": {"min": "0", "max": "100", "step": "1"}},
        },
        "memory": {
            "value": memory,
            "requestPolicy": {"default": memory, "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"}},
        },
    }


def api_device(device: SliceDevice, node: NodeFacts, *, held_back: bool = False) -> dict[str, Any]:
    """One ``spec.devices[]`` entry; an unhealthy GPU carries the ``NoSchedule`` taint ``TAINT_KEY``, a card pods
    of the device plugin hold (``held_back``) the ``NoSchedule`` taint ``hami.io/device-plugin-pods``
    (:mod:`.guard`)."""
    entry: dict[str, Any] = {
        "name": device.name,
        "attributes": _attributes(device, node),
        "capacity": _capacity(device),
        "allowMultipleAllocations": True,
    }
    taints = [] if device.healthy else [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    if held_back:
        taints.append(held_back_taint())
    if taints:
        entry["taints"] = taints
    return entry


def resource_slice(
    node_name: str,
    node_uid: str,
    devices: Sequence[SliceDevice],
    node: NodeFacts,
    generation: int = 1,
    held_back: Set[str] = frozenset(),
) -> dict[str, Any]:
    """The node's one ResourceSlice: pool = node name, owned by the Node so it goes when the node goes.
    ``held_back``: UUIDs of the cards published with the device-plugin-pods taint."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(node_name),
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": [api_device(d, node, held_back=d.gpu.uuid in held_back) for d in devices],
        },
    }
