"""The ``dra:`` section of ``device-config.yaml``: which DRA drivers hami counts, and how (issue 18).

hami is read-only towards Dynamic Resource Allocation: it reads the ResourceSlices and ResourceClaims of the drivers
listed here, maps each allocated device to the GPU of the same UUID in the node's hami registration and charges it
in its ledger (``hami.scheduling.dra``), so device-plugin pods never get capacity a DRA claim holds. HAMi v2.10 has
no such section (its DRA support is a separate project that cannot run beside device-plugin mode on the same GPUs).

Every unit is explicit:

* ``memoryCapacity`` names the device capacity that means memory; ``memoryUnit`` says what one unit of its value
  is (``bytes``, the Kubernetes convention and what NVIDIA's driver publishes: ``80Gi``; or ``KiB``/``MiB``/``GiB``
  for a driver that publishes plain counts). hami converts to MiB, rounding a claim's consumption **up**.
* ``coresCapacity`` names the capacity that means compute ("" when the driver publishes none); ``coresUnit`` is
  ``percent`` (100 = one whole card, hami's own unit) or ``share`` (the value is relative to the device's own
  capacity value, e.g. streaming multiprocessors). hami converts to the card's core units (``devcore``).

Default: on, with NVIDIA's DRA driver (``gpu.nvidia.com``) and HAMi's (``hami-core-gpu.project-hami.io``, which
``hami dra-plugin`` is too): both vendor ``NVIDIA``, attribute ``uuid``, capacity ``memory`` in bytes and a
``cores`` capacity in percent when a device publishes one. So a node that runs hami's DRA plugin beside the device
plugin has its claims counted on the device plugin's cards without any setting. ``vendor`` is a hami vendor
key (``NVIDIA``, ``DCU``, …, as in the node registrations); the ledger reports a key no vendor has.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from pydantic import Field, StrictBool, StrictStr, field_validator

from hami.devices.configmodel import ConfigModel

__all__ = [
    "DEFAULT_DRIVERS",
    "MEMORY_UNITS_MIB",
    "CoresUnit",
    "DraConfig",
    "DraDriverConfig",
    "MemoryUnit",
    "default_dra_drivers",
]

MemoryUnit = Literal["bytes", "KiB", "MiB", "GiB"]
CoresUnit = Literal["percent", "share"]

MEMORY_UNITS_MIB: Final[dict[str, tuple[int, int]]] = {
    "bytes": (1, 1 << 20),
    "KiB": (1, 1 << 10),
    "MiB": (1, 1),
    "GiB": (1 << 10, 1),
}
"""Each memory unit as a fraction of one MiB: (numerator, denominator)."""

_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME: Final = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _check_driver(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError("must be a DRA driver name: a lower-case DNS subdomain like gpu.nvidia.com")
    return value


def _check_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError("must be a device attribute or capacity name like uuid or gpu.nvidia.com/uuid")
    return value


class DraDriverConfig(ConfigModel):
    """One DRA driver whose allocations hami counts (see the module docstring for the units)."""

    driver: StrictStr
    vendor: StrictStr = "NVIDIA"
    uuid_attribute: StrictStr = "uuid"
    memory_capacity: StrictStr = "memory"
    memory_unit: MemoryUnit = "bytes"
    cores_capacity: StrictStr = "cores"
    cores_unit: CoresUnit = "percent"

    @field_validator("driver")
    @classmethod
    def _driver(cls, value: str) -> str:
        return _check_driver(value)

    @field_validator("vendor")
    @classmethod
    def _vendor(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name a hami vendor key (NVIDIA, DCU, …: the key of the node registrations)")
        return value

    @field_validator("uuid_attribute", "memory_capacity")
    @classmethod
    def _required_name(cls, value: str) -> str:
        return _check_name(value)

    @field_validator("cores_capacity")
    @classmethod
    def _optional_name(cls, value: str) -> str:
        return value if value == "" else _check_name(value)


DEFAULT_DRIVERS: Final = ("gpu.nvidia.com", "hami-core-gpu.project-hami.io")
"""NVIDIA's DRA driver and HAMi's (hami's own ``hami dra-plugin``): same names and units (module docstring)."""


def default_dra_drivers() -> tuple[DraDriverConfig, ...]:
    """The :data:`DEFAULT_DRIVERS` with their published names and units."""
    return tuple(DraDriverConfig(driver=name) for name in DEFAULT_DRIVERS)


class DraConfig(ConfigModel):
    """``dra:`` — ``enabled`` (default true) and the ``drivers`` to count (default: NVIDIA's and HAMi's)."""

    enabled: StrictBool = True
    drivers: tuple[DraDriverConfig, ...] = Field(default_factory=default_dra_drivers)

    @field_validator("drivers")
    @classmethod
    def _distinct(cls, drivers: tuple[DraDriverConfig, ...]) -> tuple[DraDriverConfig, ...]:
        seen: set[str] = set()
        for entry in drivers:
            if entry.driver in seen:
                raise ValueError(f"driver {entry.driver!r} is listed twice: each driver is mapped once")
            seen.add(entry.driver)
        return drivers

    def active(self) -> dict[str, DraDriverConfig]:
        """The drivers to count, by driver name (none when ``enabled`` is false)."""
        return {d.driver: d for d in self.drivers} if self.enabled else {}
