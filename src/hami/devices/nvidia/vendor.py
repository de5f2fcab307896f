"""The NVIDIA vendor: HAMi's ``NVIDIA`` backend (scheduler-core.md §3.2, §6).

Inventory comes from ``hami.io/node-nvidia-register`` (JSON, or the legacy colon format that HAMi ≤ v2.7
plugins wrote) plus the optional pair scores in ``hami.io/node-nvidia-score``; allocations go to
``hami.io/vgpu-devices-to-allocate`` / ``hami.io/vgpu-devices-allocated`` and, for MIG instances,
``hami.io/vgpu-mig-allocations``. The fit itself is the shared loop (``hami.devices.common``).
"""

from __future__ import annotations

from collections.abc import Mapping

from hami.config import NvidiaConfig
from hami.devices.base import (
    ContainerRequest,
    NodeInventory,
    Selector,
    parse_type_list,
    parse_uuid_list,
)
from hami.devices.common import SharedDeviceVendor
from hami.devices.nvidia.request import parse_nvidia_request
from hami.protocol import keys
from hami.protocol.inventory import decode_inventory_json, decode_inventory_legacy
from hami.protocol.objects import Container, Node
from hami.protocol.scores import decode_pair_scores, pair_score_table

__all__ = ["NvidiaVendor"]


class NvidiaVendor(SharedDeviceVendor):
    """HAMi's NVIDIA backend, configured by the ``nvidia:`` section of device-config.yaml."""

    name = "NVIDIA"
    keys = keys.NVIDIA_KEYS

    def __init__(self, config: NvidiaConfig) -> None:
        super().__init__(config)
        self.config = config

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

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        modes_raw = annotations.get(keys.NVIDIA_VGPU_MODE)
        # A blank value (only spaces or commas) restricts nothing, like an empty one and like the other filters;
        # an empty set here would refuse every device.
        modes = frozenset(m.strip() for m in modes_raw.split(",") if m.strip()) if modes_raw else None
        modes = modes or None
        return Selector(
            use_types=parse_type_list(annotations.get(keys.NVIDIA_USE_GPUTYPE)),
            nouse_types=parse_type_list(annotations.get(keys.NVIDIA_NOUSE_GPUTYPE)),
            use_uuids=parse_uuid_list(annotations.get(keys.NVIDIA_USE_GPUUUID)),
            nouse_uuids=parse_uuid_list(annotations.get(keys.NVIDIA_NOUSE_GPUUUID)),
            modes=modes,
        )
