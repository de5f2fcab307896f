"""What this node registers: the ``hami.io/node-nvidia-register`` and ``hami.io/node-nvidia-score`` values.

Pure functions from discovered GPUs and settings to HAMi's wire types (webhook-bind-plugin-vendors.md §6.1,
scheduler-core.md §2.2–§2.3); the encoders in ``hami.protocol`` make them byte-identical to HAMi's plugin.

Per GPU: ``count`` = split count; ``devmem`` = floor(total MiB × memory scaling) (unscaled in MIG mode);
``devcore`` = core scaling × 100 (100 in MIG mode); ``type`` = NVML name, prefixed ``NVIDIA-`` unless it already
starts with ``NVIDIA``; ``mode`` = the node's operating mode; ``health`` from the health tracker. GPUs named in
``filterdevices`` (by UUID or index) are not registered at all. The arithmetic is Go's float64 arithmetic,
which Python's float is, so the numbers match HAMi's to the MiB.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass
from typing import Final

from hami.deviceplugin.discovery import GpuInfo, Links
from hami.deviceplugin.nvml import GpuInstanceProfile, TopologyLevel
from hami.deviceplugin.settings import MigAllowEntry, NodeSettings
from hami.protocol.inventory import DeviceInfo, MigPlacement, MigProfile
from hami.protocol.scores import PairScore

__all__ = [
    "PCIE_SCORES",
    "Asymmetry",
    "card_type",
    "link_score",
    "mig_core",
    "model_matches",
    "node_devices",
    "pair_scores",
    "registered_gpus",
]

log = logging.getLogger(__name__)

PCIE_SCORES: Final = {
    TopologyLevel.SYSTEM: 10,  # cross-CPU
    TopologyLevel.NODE: 20,  # same CPU
    TopologyLevel.HOSTBRIDGE: 30,
    TopologyLevel.MULTIPLE: 40,  # several PCIe switches
    TopologyLevel.SINGLE: 50,  # one PCIe switch
    TopologyLevel.INTERNAL: 60,  # same board
}
NVLINK_SCORE: Final = 100  # per NVLink between the two GPUs


def card_type(nvml_name: str) -> str:
    """HAMi's card type: the NVML name, prefixed ``NVIDIA-`` unless it starts with ``NVIDIA``."""
    return nvml_name if nvml_name.startswith("NVIDIA") else f"NVIDIA-{nvml_name}"


def registered_gpus(gpus: Iterable[GpuInfo], settings: NodeSettings) -> list[GpuInfo]:
    """The GPUs this node offers: all discovered ones except those ``filterdevices`` names."""
    return [gpu for gpu in gpus if gpu.uuid not in settings.filter_uuids and gpu.index not in settings.filter_indexes]


def node_devices(gpus: Iterable[GpuInfo], settings: NodeSettings, unhealthy: Set[str]) -> list[DeviceInfo]:
    """The register annotation's devices, in NVML index order. GPUs that cannot be offered are logged and left
    out: memory unknown without ``preConfiguredDeviceMemory``, MIG mode that does not match the node's
    operating mode, or a MIG GPU with no allowed profile."""
    devices = []
    for gpu in registered_gpus(gpus, settings):
        device = _device(gpu, settings, healthy=gpu.uuid not in unhealthy)
        if device is not None:
            devices.append(device)
    return devices


def _device(gpu: GpuInfo, settings: NodeSettings, healthy: bool) -> DeviceInfo | None:
    memory_mib = gpu.memory_mib
    if memory_mib is None:
        if settings.preconfigured_memory_mib <= 0:
            log.error(
                "GPU %s: NVML cannot report its memory and preConfiguredDeviceMemory is not set; not registered",
                gpu.uuid,
            )
            return None
        memory_mib = settings.preconfigured_memory_mib
    mig_mode = settings.operating_mode == "mig"
    if gpu.mig_enabled != mig_mode:
        state = "enabled" if gpu.mig_enabled else "disabled"
        log.error(
            "GPU %s: MIG is %s but the node's operating mode is %s; not registered",
            gpu.uuid,
            state,
            settings.operating_mode,
        )
        return None
    if not mig_mode:
        return DeviceInfo(
            id=gpu.uuid,
            index=gpu.index,
            count=settings.split_count,
            devmem=int(memory_mib * settings.memory_scaling),
            devcore=int(settings.core_scaling * 100),
            type=card_type(gpu.name),
            numa=gpu.numa,
            mode=settings.operating_mode,
            health=healthy,
        )
    profiles = _allowed_profiles(gpu, settings.mig_allowlist)
    if not profiles:
        log.error("GPU %s (%s): no MIG profile is allowed by migProfileAllowlist; not registered", gpu.uuid, gpu.name)
        return None
    max_slices = max(p.slice_count for p in gpu.mig_profiles)
    return DeviceInfo(
        id=gpu.uuid,
        index=gpu.index,
        count=max(p.instance_count for p in profiles),
        devmem=memory_mib,
        devcore=100,
        type=card_type(gpu.name),
        numa=gpu.numa,
        mode="mig",
        mig_profiles=tuple(
            MigProfile(
                name=p.name,
                memory_mb=p.memory_mib,
                core=mig_core(p.slice_count, max_slices),
                slice_count=p.slice_count,
                placements=tuple(MigPlacement(start=start, size=size) for start, size in p.placements),
            )
            for p in profiles
        ),
        health=healthy,
    )


def mig_core(slice_count: int, max_slices: int) -> int:
    """Core units of a MIG profile: its share of the GPU's slices, rounded up (1 of 7 slices → 15).

    HAMi registers the profile's compute share as ``core``; hami derives it from slice counts so it needs no
    extra NVML query.
    """
    return math.ceil(100 * slice_count / max_slices) if max_slices > 0 else 0


def _allowed_profiles(gpu: GpuInfo, allowlist: Sequence[MigAllowEntry]) -> list[GpuInstanceProfile]:
    allowed = {
        name for entry in allowlist if any(model_matches(m, gpu.name) for m in entry.models) for name in entry.profiles
    }
    return [p for p in gpu.mig_profiles if p.name in allowed]


def model_matches(model: str, card_name: str) -> bool:
    """Does an allowlist model name this card? Compared as whole words (split at spaces and hyphens),
    case-insensitively, ignoring a leading ``NVIDIA``: ``A100-SXM4-40GB`` and ``A100`` match
    ``NVIDIA A100-SXM4-40GB``, ``A10`` does not. *Difference from HAMi:* never a substring match (STYLE.md).
    """
    words = _words(card_name)
    wanted = _words(model)
    if not wanted:
        return False
    return any(words[i : i + len(wanted)] == wanted for i in range(len(words) - len(wanted) + 1))


def _words(text: str) -> list[str]:
    words = [w for w in re.split(r"[\s-]+", text.lower()) if w]
    return words[1:] if words[:1] == ["nvidia"] else words


# --- topology scores ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Asymmetry:
    """Two GPUs that describe the link between them differently; their pair scores 0."""

    a: str
    b: str
    a_to_b: Links
    b_to_a: Links


def link_score(links: Links) -> int:
    """Sum over the links between two GPUs: the PCIe path's score plus 100 per NVLink (§6.1 table)."""
    pcie = PCIE_SCORES.get(links.pcie, 0) if links.pcie is not None else 0
    return pcie + NVLINK_SCORE * links.nvlinks


def pair_scores(gpus: Sequence[GpuInfo]) -> tuple[list[PairScore], list[Asymmetry]]:
    """Every GPU's score towards every other GPU (both directions listed), and the asymmetric pairs found.

    *Difference from HAMi:* asymmetry means the two directions differ in any way (PCIe level or NVLink count),
    not only in how many links each lists; either way the pair scores 0.
    """
    scores = []
    asymmetric: list[Asymmetry] = []
    for gpu in gpus:
        row: dict[str, int] = {}
        for other in gpus:
            if other.uuid == gpu.uuid:
                continue
            there = gpu.links.get(other.uuid, Links())
            back = other.links.get(gpu.uuid, Links())
            if there != back:
                row[other.uuid] = 0
                if gpu.uuid < other.uuid:
                    asymmetric.append(Asymmetry(gpu.uuid, other.uuid, there, back))
                continue
            row[other.uuid] = link_score(there)
        scores.append(PairScore(uuid=gpu.uuid, scores=row))
    return scores, asymmetric
