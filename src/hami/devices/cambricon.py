"""The Cambricon MLU vendor (``MLU``): HAMi's ``pkg/device/cambricon`` (webhook-bind-plugin-vendors.md §7).

* Inventory: no registration annotation and no handshake. The cards come from ``node.status.capacity``
  (``hami.devices.capacity``): ``ceil(vcore / 100)`` cards of 100 slots and 100 core units each, memory
  ``vmemory × 256 × 100 // vcore`` MiB, ids ``<node>-cambricon-mlu-<i>``, always healthy.
* Requests: ``cambricon.com/vmlu`` (count), ``cambricon.com/mlu.smlu.vmemory`` (256 MiB units per card; none means
  the whole card), ``cambricon.com/mlu.smlu.vcore`` (percent of a card, 100 when absent) — limits first, requests
  as the fallback. Quota keys are the same names; the memory quota counts 256 MiB units too.
* Admission: HAMi's default (the container uses MLUs iff the count is in its limits), no edits.
* Fit: the shared loop (quota-aware: ``FitContext.quota``), filters ``cambricon.com/use-gpuuuid`` /
  ``nouse-gpuuuid`` (HAMi defines type filters for MLU but never reads them; neither does hami).
* Allocation: ``hami.io/cambricon-mlu-devices-to-allocate`` and ``-allocated`` (the same value), and the pod
  annotations the dynamic-sMLU device plugin reads: ``CAMBRICON_DSMLU_ASSIGNED="false"`` and
  ``CAMBRICON_DSMLU_PROFILE="<index>_<cores>_<memory units>"`` of the first device of the first container that
  has one.
* Lock: Cambricon's own ``cambricon.com/dsmlu.lock`` (expires after 2 minutes), not ``hami.io/mutex.lock``.

Deliberate differences from HAMi: a count, memory or core value that is negative, fractional, beyond int32 once
converted, or cores above 100 (HAMi clamps them to 100) is refused with the container, the resource and the value;
memory written in bytes (``16Gi``) is refused with the number of units it probably meant (HAMi multiplies the bytes
by 256 and the int32 wraps); the memory quota ``limits.cambricon.com/mlu.smlu.vmemory`` is read in 256 MiB units,
as the request is (HAMi compares the limit in units with usage in MiB).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pydantic import StrictStr

from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    AnnotationContext,
    ContainerRequest,
    NodeInventory,
    ResourceNames,
    Selector,
)
from hami.devices.capacity import CapacityLayout, synthesized_index, unit_memory
from hami.devices.common import SharedDeviceVendor
from hami.devices.configmodel import ConfigModel
from hami.devices.family import ChartValues, vendor_family
from hami.devices.resources import INT32_TOO_LARGE, read_int32
from hami.errors import QuantityError
from hami.protocol import keys
from hami.protocol.objects import Container, Node

__all__ = [
    "CAMBRICON_FAMILY",
    "CAMBRICON_KEYS",
    "DSMLU_ASSIGNED",
    "DSMLU_LOCK",
    "DSMLU_PROFILE",
    "MLU",
    "MLU_UNIT_MIB",
    "CambriconConfig",
    "CambriconVendor",
]


class CambriconConfig(ConfigModel):
    """``cambricon:`` — MLU (vendor key ``MLU``); memory counts 256 MiB units."""

    resource_count_name: StrictStr = "cambricon.com/vmlu"
    resource_memory_name: StrictStr = "cambricon.com/mlu.smlu.vmemory"
    resource_core_name: StrictStr = "cambricon.com/mlu.smlu.vcore"


MLU: Final = "MLU"
MLU_UNIT_MIB: Final = 256
"""MiB in one ``vmemory`` unit, in requests and in the node's capacity."""
MLU_SUFFIX: Final = "cambricon-mlu"
DSMLU_ASSIGNED: Final = "CAMBRICON_DSMLU_ASSIGNED"
DSMLU_PROFILE: Final = "CAMBRICON_DSMLU_PROFILE"
DSMLU_LOCK: Final = "cambricon.com/dsmlu.lock"
DSMLU_LOCK_EXPIRY_S: Final = 120.0
USE_UUID: Final = "cambricon.com/use-gpuuuid"
NOUSE_UUID: Final = "cambricon.com/nouse-gpuuuid"

CAMBRICON_KEYS: Final = keys.VendorKeys(
    MLU,
    register="",
    handshake=None,
    to_allocate="hami.io/cambricon-mlu-devices-to-allocate",
    allocated="hami.io/cambricon-mlu-devices-allocated",
    extra=(DSMLU_ASSIGNED, DSMLU_PROFILE),
    lock=DSMLU_LOCK,
    lock_expiry_s=DSMLU_LOCK_EXPIRY_S,
)

_TOO_LARGE: Final = INT32_TOO_LARGE


_read = read_int32


class CambriconVendor(SharedDeviceVendor):
    """HAMi's Cambricon MLU backend, configured by the ``cambricon:`` section of device-config.yaml."""

    screens = True  # the shared fit: screened from the capacity summary

    name = MLU
    keys = CAMBRICON_KEYS

    def __init__(self, config: CambriconConfig) -> None:
        self.config = config
        self.resources = ResourceNames(
            count=config.resource_count_name,
            memory=config.resource_memory_name or None,
            core=config.resource_core_name or None,
            memory_factor=MLU_UNIT_MIB,
        )
        self.layout = CapacityLayout(
            core_resource=config.resource_core_name,
            memory_resource=config.resource_memory_name,
            suffix=MLU_SUFFIX,
            device_type=MLU,
            cores_per_card=100,
            unit_mib=MLU_UNIT_MIB,
        )

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        count = _read(container, self.config.resource_count_name, field)
        if count is None or count[0] == 0:
            return None
        memreq = self._memory(container, field)
        cores = _read(container, self.config.resource_core_name, field)
        if cores is not None and cores[0] > 100:
            raise QuantityError(cores[2], cores[1], "cores are a percentage of one MLU and cannot exceed 100")
        return ContainerRequest(
            vendor=MLU,
            nums=count[0],
            memreq=memreq,
            mem_percentage=100 if memreq == 0 else MEM_PERCENTAGE_UNSET,
            coresreq=100 if cores is None else cores[0],
        )

    def _memory(self, container: Container, field: str) -> int:
        """MiB per card: 256 MiB units × 256; 0 when absent (the whole card)."""
        return unit_memory(container, field, self.config.resource_memory_name, MLU_UNIT_MIB)

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        devices = self.layout.devices(node)
        return None if devices is None else NodeInventory(devices)

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return Selector.from_annotations(annotations, (USE_UUID, NOUSE_UUID))

    def extra_annotations(self, ctx: AnnotationContext) -> dict[str, str]:
        """The dynamic-sMLU profile of the first device of the first container that has one (HAMi skips leading
        containers without MLUs)."""
        first = next((slot[0] for slot in ctx.devices if slot), None)
        if first is None:
            return {}
        index = synthesized_index(ctx.node, MLU_SUFFIX, first.uuid)
        return {
            DSMLU_ASSIGNED: "false",
            DSMLU_PROFILE: f"{index}_{first.usedcores}_{first.usedmem // MLU_UNIT_MIB}",
        }


CAMBRICON_FAMILY: Final = vendor_family(
    "cambricon",
    CambriconConfig,
    CambriconVendor,
    chart=ChartValues(
        {
            "resourceCountName": "mluResourceName",
            "resourceMemoryName": "mluResourceMem",
            "resourceCoreName": "mluResourceCores",
        },
        ("resourceCountName", "resourceMemoryName", "resourceCoreName"),
    ),
)
"""The registry entry: the ``cambricon:`` section, one vendor."""
