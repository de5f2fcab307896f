"""Node device inventory: HAMi's JSON register format and the legacy colon format (scheduler-core.md §2.2).

Codec functions (filled in by the protocol work):

* ``decode_inventory_json(value, field=NVIDIA_REGISTER) -> list[DeviceInfo]``
* ``encode_inventory_json(devices) -> str`` — byte-identical to HAMi's ``MarshalNodeDevices``
* ``decode_inventory_legacy(value, field) -> list[DeviceInfo]`` — 7 or 9 comma fields per ``:``-terminated device
* ``encode_inventory_legacy(devices) -> str`` — always 9 fields
"""

from __future__ import annotations

import msgspec

__all__ = ["DeviceInfo", "MigPlacement", "MigProfile"]


class MigPlacement(msgspec.Struct, frozen=True):
    """A legal MIG placement: GPU slices ``[start, start + size)``."""

    start: int
    size: int


class MigProfile(msgspec.Struct, frozen=True, rename={"memory_mb": "memoryMB", "slice_count": "sliceCount"}):
    """A MIG profile a GPU can host (JSON keys are not omitempty in HAMi)."""

    name: str
    memory_mb: int
    core: int
    slice_count: int
    placements: tuple[MigPlacement, ...]


class DeviceInfo(msgspec.Struct, frozen=True, omit_defaults=True, rename={"mig_profiles": "migProfiles"}):
    """One physical device as a node registers it. Field order is HAMi's JSON key order; zero values are
    omitted on encode (Go ``omitempty``), and an absent ``health`` decodes as ``False``.

    ``devmem`` is MiB, ``devcore`` is core units (100 = one whole card), ``count`` is the number of slots.
    """

    id: str = ""
    index: int = 0
    count: int = 0
    devmem: int = 0
    devcore: int = 0
    type: str = ""
    numa: int = 0
    mode: str = ""
    mig_profiles: tuple[MigProfile, ...] = ()
    health: bool = False
