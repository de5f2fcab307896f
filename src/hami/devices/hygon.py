"""The Hygon DCU vendor (``DCU``): the second vendor, proving the interface (webhook-bind-plugin-vendors.md §7).

Inventory: ``hami.io/node-dcu-register`` in the legacy colon format. Requests: ``hygon.com/dcunum`` (count),
``hygon.com/dcumem`` (MiB per DCU, × memoryFactor), ``hygon.com/dcucores`` (percent of a DCU; HAMi's default
for DCU is 100, i.e. a whole card, when only a count is given). Without ``dcumem`` a DCU's whole memory is
reserved. Filters: ``hygon.com/use-dcutype``/``nouse-dcutype`` (whole words of the card type) and
``hygon.com/use-gpuuuid``/``nouse-gpuuuid``. Values that are negative, fractional, over int32 or cores over 100
are rejected (HAMi drops the request silently).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pydantic import StrictStr

from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    ContainerRequest,
    NodeInventory,
    Selector,
)
from hami.devices.common import SharedDeviceVendor
from hami.devices.configmodel import ConfigModel, Int32
from hami.devices.family import ChartValues, vendor_family
from hami.devices.resources import lookup_resource, mib_hint, whole_quantity
from hami.errors import QuantityError
from hami.protocol import keys
from hami.protocol.inventory import decode_inventory_legacy
from hami.protocol.objects import Container, Node, QuantityValue

__all__ = ["HYGON_FAMILY", "HYGON_KEYS", "HygonConfig", "HygonVendor"]


class HygonConfig(ConfigModel):
    """``hygon:`` — Hygon DCU (vendor key ``DCU``). ``dcumem`` is multiplied by ``memoryFactor`` (0 means 1)."""

    resource_count_name: StrictStr = "hygon.com/dcunum"
    resource_memory_name: StrictStr = "hygon.com/dcumem"
    resource_core_name: StrictStr = "hygon.com/dcucores"
    memory_factor: Int32 = 1


_INT32_MAX: Final = 2**31 - 1
HYGON_KEYS: Final = keys.VendorKeys(
    "DCU",
    register="hami.io/node-dcu-register",
    handshake="hami.io/node-handshake-dcu",
    to_allocate="hami.io/dcu-devices-to-allocate",
    allocated="hami.io/dcu-devices-allocated",
)
USE_TYPE: Final = "hygon.com/use-dcutype"
NOUSE_TYPE: Final = "hygon.com/nouse-dcutype"
USE_UUID: Final = "hygon.com/use-gpuuuid"
NOUSE_UUID: Final = "hygon.com/nouse-gpuuuid"


def _read(container: Container, name: str, field: str) -> tuple[int | None, QuantityValue | None, str]:
    found = lookup_resource(container, name)
    if found is None:
        return None, None, ""
    section, raw = found
    where = f"{field}.{section}[{name}]"
    return whole_quantity(where, raw, _INT32_MAX, "exceeds the int32 range HAMi's annotations can carry"), raw, where


class HygonVendor(SharedDeviceVendor):
    """HAMi's Hygon DCU backend, configured by the ``hygon:`` section of device-config.yaml."""

    screens = True  # the shared fit: screened from the capacity summary

    name = "DCU"
    keys = HYGON_KEYS

    def __init__(self, config: HygonConfig) -> None:
        super().__init__(config)
        self.config = config

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        count, _, _ = _read(container, self.config.resource_count_name, field)
        if not count:
            return None
        mem, raw_mem, mem_field = _read(container, self.config.resource_memory_name, field)
        cores, raw_cores, cores_field = _read(container, self.config.resource_core_name, field)
        factor = max(self.config.memory_factor, 1)
        memreq = 0
        if mem is not None:
            memreq = mem * factor
            if memreq > _INT32_MAX:
                hint = mib_hint(raw_mem) if raw_mem is not None else ""
                raise QuantityError(mem_field, raw_mem, f"× memoryFactor {factor} exceeds the int32 range{hint}")
        if cores is not None and cores > 100:
            raise QuantityError(cores_field, raw_cores, "cores are a percentage of one DCU and cannot exceed 100")
        return ContainerRequest(
            vendor=self.name,
            nums=count,
            memreq=memreq,
            mem_percentage=100 if memreq == 0 else MEM_PERCENTAGE_UNSET,
            coresreq=100 if cores is None else cores,
        )

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        raw = node.metadata.annotations.get(self.keys.register)
        if raw is None:
            return None
        return NodeInventory(tuple(decode_inventory_legacy(raw, self.keys.register)))

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return Selector.from_annotations(annotations, (USE_UUID, NOUSE_UUID), (USE_TYPE, NOUSE_TYPE))


HYGON_FAMILY: Final = vendor_family(
    "hygon",
    HygonConfig,
    HygonVendor,
    chart=ChartValues(
        {
            "resourceCountName": "dcuResourceName",
            "resourceMemoryName": "dcuResourceMem",
            "resourceCoreName": "dcuResourceCores",
            "memoryFactor": "devices.hygon.memoryFactor",
        },
        ("resourceCountName", "resourceMemoryName", "resourceCoreName"),
    ),
)
"""The registry entry: the ``hygon:`` section, one vendor."""
