"""The NVIDIA vendor: HAMi's ``NVIDIA`` backend (scheduler-core.md §3.2, §6).

Inventory comes from ``hami.io/node-nvidia-register`` (JSON, or the legacy colon format that HAMi ≤ v2.7
plugins wrote) plus the optional pair scores in ``hami.io/node-nvidia-score``; allocations go to
``hami.io/vgpu-devices-to-allocate`` / ``hami.io/vgpu-devices-allocated`` and, for MIG instances,
``hami.io/vgpu-mig-allocations``. The fit itself is the shared loop (``hami.devices.common``) with MIG as its
partition hook (``hami.devices.nvidia.mig.MigPartitions``); admission is ``hami.devices.nvidia.admission``.
Legacy MIG UUIDs in allocations (``GPU-x[7-9]``, HAMi ≤ v2.9) are charged to their physical GPU.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from hami.devices.admission import Admitter
from hami.devices.base import (
    AnnotationContext,
    ContainerRequest,
    NodeInventory,
    Selector,
    parse_bool,
)
from hami.devices.common import SharedDeviceVendor
from hami.devices.dra import DraModeSettings, DraRequest
from hami.devices.nvidia.admission import NvidiaAdmission, NvidiaAdmitter
from hami.devices.nvidia.config import NvidiaConfig
from hami.devices.nvidia.dra import nvidia_dra_request, nvidia_dra_resources
from hami.devices.nvidia.mig import MigPartitions, mig_allocations
from hami.devices.nvidia.request import parse_nvidia_request
from hami.protocol import keys
from hami.protocol.allocation import (
    ContainerDevice,
    PodDevices,
    decode_mig_allocations,
    encode_mig_allocations,
    split_legacy_mig_uuid,
)
from hami.protocol.inventory import DeviceInfo, decode_inventory_json, decode_inventory_legacy
from hami.protocol.objects import Container, Node
from hami.protocol.scores import decode_pair_scores, pair_score_table

__all__ = ["NvidiaVendor"]


class NvidiaVendor(SharedDeviceVendor):
    """HAMi's NVIDIA backend, configured by the ``nvidia:`` section of device-config.yaml."""

    screens = True  # the shared fit: screened from the capacity summary
    reads_slices = True  # MIG instances: the slices a pod holds are in its annotations

    name = "NVIDIA"
    keys = keys.NVIDIA_KEYS

    def __init__(self, config: NvidiaConfig) -> None:
        super().__init__(config)
        self.config = config
        self.partitions = MigPartitions()

    def admitter(self) -> Admitter:
        return NvidiaAdmitter(NvidiaAdmission.from_config(self.config))

    def dra_resources(self) -> tuple[str, ...]:
        """``DraTranslation``: the five NVIDIA resource names (``hami.devices.nvidia.dra``)."""
        return nvidia_dra_resources(self.config)

    def dra_request(
        self, container: Container, field: str, annotations: Mapping[str, str], settings: DraModeSettings
    ) -> DraRequest | None:
        """``DraTranslation``: the container's request as a claim asks for it (``hami.devices.nvidia.dra``)."""
        return nvidia_dra_request(container, self.config, field, annotations, settings)

    def numa_bind(self, annotations: Mapping[str, str]) -> bool:
        raw = annotations.get(keys.NVIDIA_NUMA_BIND)
        return parse_bool(raw, keys.NVIDIA_NUMA_BIND) if raw is not None else False

    def decode(self, value: str, field: str) -> PodDevices:
        devices = super().decode(value, field)
        return _strip_legacy(devices) if "[" in value else devices  # only a legacy MIG UUID holds a "["

    def extra_annotations(self, ctx: AnnotationContext) -> dict[str, str]:
        allocations = mig_allocations(ctx.slices)
        return {keys.NVIDIA_MIG_ALLOCATIONS: encode_mig_allocations(allocations)} if allocations else {}

    def decode_slices(self, annotations: Mapping[str, str]) -> tuple[tuple[str, Hashable], ...]:
        raw = annotations.get(keys.NVIDIA_MIG_ALLOCATIONS)
        if not raw:
            return ()
        return tuple((m.gpu_uuid, m.placement) for m in decode_mig_allocations(raw, keys.NVIDIA_MIG_ALLOCATIONS))

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        return parse_nvidia_request(container, self.config, field)

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        annotations = node.metadata.annotations
        raw = annotations.get(keys.NVIDIA_REGISTER)
        if raw is None:
            return None
        text = raw.strip()
        if text.startswith("["):
            devices = decode_inventory_json(text, keys.NVIDIA_REGISTER)
        else:  # HAMi <= v2.7 plugins wrote the colon format
            devices = decode_inventory_legacy(text, keys.NVIDIA_REGISTER)
        scores_raw = annotations.get(keys.NVIDIA_SCORE)
        scores = pair_score_table(decode_pair_scores(scores_raw, keys.NVIDIA_SCORE)) if scores_raw else {}
        return NodeInventory(tuple(devices), scores)

    def kubelet_units(self, devices: Sequence[DeviceInfo]) -> int:
        """``hami.devices.kubelet.KubeletUnits``: the plugin advertises ``count`` fake devices per card to kubelet
        (``<UUID>-<i>``), so a card counts its ``count``. A MIG-mode card counts one: hami's plugin advertises its
        largest instance count there, HAMi's its split count, which may be fewer than the registered ``count``."""
        return sum(1 if d.mode == "mig" else d.count for d in devices)

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        modes_raw = annotations.get(keys.NVIDIA_VGPU_MODE)
        # A blank value (only spaces or commas) restricts nothing, like an empty one and like the other filters;
        # an empty set here would refuse every device.
        modes = frozenset(m.strip() for m in modes_raw.split(",") if m.strip()) if modes_raw else None
        modes = modes or None
        return Selector.from_annotations(
            annotations,
            (keys.NVIDIA_USE_GPUUUID, keys.NVIDIA_NOUSE_GPUUUID),
            (keys.NVIDIA_USE_GPUTYPE, keys.NVIDIA_NOUSE_GPUTYPE),
            modes=modes,
        )


def _strip_legacy(devices: PodDevices) -> PodDevices:
    """Legacy template-MIG UUIDs (``GPU-x[7-9]``) name their physical GPU first: charge that GPU."""
    out = []
    for container in devices:
        fixed = []
        for dev in container:
            uuid, _ = split_legacy_mig_uuid(dev.uuid) if "[" in dev.uuid else (dev.uuid, None)
            fixed.append(dev if uuid == dev.uuid else ContainerDevice(uuid, dev.type, dev.usedmem, dev.usedcores))
        out.append(tuple(fixed))
    return tuple(out)
