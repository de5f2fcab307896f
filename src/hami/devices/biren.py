"""The Biren GPU vendor (``Biren``), as HAMi v2.10's ``pkg/device/biren`` schedules it (webhook-bind-plugin-vendors.md
§7).

Count-only time slicing: a container asks for ``birentech.com/gpu`` GPUs (limits, else requests) and each GPU takes
one of the ``count`` slots its registration declares; no memory or cores are requested or charged (the allocation
records ``<uuid>,Biren,0,0``). Inventory: ``hami.io/node-biren-register`` (JSON, §0.4) with every device's
``devcore`` forced to 100, as HAMi does for its usage score. Handshake ``hami.io/node-handshake-biren``; allocation
``hami.io/Biren-devices-to-allocate`` / ``-allocated`` (capital B: HAMi builds the keys from the vendor's name).
Filter: ``birentech.com/use-gpuuuid`` / ``nouse-gpuuuid`` (HAMi defines type keys but never reads them). The
webhook reports "found" when the count is in limits and writes nothing.

Where hami does better than the reference: unhealthy and cordoned devices are skipped (HAMi's Biren fit looks at
neither), a count that is negative, fractional or beyond int32 is refused with the container named (HAMi casts it),
and ``mutex`` counts wherever it appears in a policy chain, as for the other vendors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec
from pydantic import StrictStr

from hami.devices.base import ContainerRequest, NodeInventory, Selector
from hami.devices.common import SharedDeviceVendor
from hami.devices.configmodel import ConfigModel
from hami.devices.countonly import CountOnlyResources, count_request
from hami.devices.family import ChartValues, vendor_family
from hami.protocol import keys
from hami.protocol.inventory import decode_inventory_json
from hami.protocol.objects import Container, Node

__all__ = ["BIREN", "BIREN_FAMILY", "BIREN_KEYS", "BirenConfig", "BirenVendor"]


class BirenConfig(ConfigModel):
    """``biren:`` — count-only time slicing."""

    resource_count_name: StrictStr = "birentech.com/gpu"


BIREN: Final = "Biren"
BIREN_KEYS: Final = keys.VendorKeys(
    BIREN,
    register="hami.io/node-biren-register",
    handshake="hami.io/node-handshake-biren",
    to_allocate="hami.io/Biren-devices-to-allocate",
    allocated="hami.io/Biren-devices-allocated",
)
USE_UUID: Final = "birentech.com/use-gpuuuid"
NOUSE_UUID: Final = "birentech.com/nouse-gpuuuid"


class BirenVendor(SharedDeviceVendor):
    """HAMi's Biren backend, configured by the ``biren:`` section of device-config.yaml."""

    screens = True  # the shared fit: screened from the capacity summary

    name = BIREN
    keys = BIREN_KEYS

    def __init__(self, config: BirenConfig) -> None:
        super().__init__(CountOnlyResources(config.resource_count_name))
        self.config = config

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        return count_request(BIREN, self.config.resource_count_name, container, field)

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        raw = node.metadata.annotations.get(self.keys.register)
        if raw is None:
            return None
        devices = decode_inventory_json(raw, self.keys.register)
        return NodeInventory(tuple(msgspec.structs.replace(d, devcore=100) for d in devices))

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return Selector.from_annotations(annotations, (USE_UUID, NOUSE_UUID))


BIREN_FAMILY: Final = vendor_family(
    "biren",
    BirenConfig,
    BirenVendor,
    chart=ChartValues({"resourceCountName": "birenResourceName"}, ("resourceCountName",)),
)
"""The registry entry: the ``biren:`` section, one vendor."""
