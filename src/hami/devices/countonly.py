"""What the count-only vendors (Biren, Vastai) share: a config section with only a count resource, and the request
such a resource makes — HAMi's ``Nums`` GPUs taking one time slot each, with no memory and no cores."""

from __future__ import annotations

from typing import Final

from hami.devices.base import MEM_PERCENTAGE_UNSET, ContainerRequest
from hami.devices.resources import lookup_resource, whole_quantity
from hami.protocol.objects import Container

__all__ = ["CountOnlyResources", "count_request"]

_INT32_MAX: Final = 2**31 - 1


class CountOnlyResources:
    """A count-only config section as ``SharedDeviceVendor`` reads resource names (no memory, no cores)."""

    resource_memory_name = ""
    resource_core_name = ""
    memory_factor = 1

    def __init__(self, count: str) -> None:
        self.resource_count_name = count


def count_request(vendor: str, count_name: str, container: Container, field: str) -> ContainerRequest | None:
    """The container's request: ``count_name`` from limits, else requests (as HAMi reads it); None for none or 0.

    Raises ``QuantityError`` naming the container and resource for a count that is negative, fractional or beyond
    int32 (HAMi casts such a value to int32)."""
    found = lookup_resource(container, count_name)
    if found is None:
        return None
    section, raw = found
    too_large = "exceeds the int32 range HAMi's annotations can carry"
    nums = whole_quantity(f"{field}.{section}[{count_name}]", raw, _INT32_MAX, too_large)
    if nums == 0:
        return None
    return ContainerRequest(vendor=vendor, nums=nums, memreq=0, mem_percentage=MEM_PERCENTAGE_UNSET, coresreq=0)
