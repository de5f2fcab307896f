"""Iluvatar (webhook-bind-plugin-vendors.md §7): one vendor per chip of the ``iluvatars:`` config list.

Each chip (MR-V100, MR-V50, BI-V150, BI-V100 in the chart) is its own vendor, keyed by its ``commonWord`` (CW):

* inventory: ``hami.io/node-<CW>-register`` in the legacy colon format (§0.3), handshake
  ``hami.io/node-handshake-<CW>``; allocation ``hami.io/<CW>-devices-to-allocate`` / ``-allocated``; the shared
  node lock ``hami.io/mutex.lock``;
* requests: ``iluvatar.ai/<chip>-vgpu`` (count), ``iluvatar.ai/<chip>.vMem`` (memory in **256 MiB units**),
  ``iluvatar.ai/<chip>.vCore`` (percent of one card; default **0**, i.e. no core reservation); without memory a
  card's whole memory is reserved; limits first, requests as the fallback;
* filters: ``hami.io/use-<CW>-uuid`` / ``hami.io/no-use-<CW>-uuid`` (comma lists of device ids);
* webhook: a count above 1 sets ``vCore`` to ``100 × count`` (whole cards), and every container that asks for
  the chip gets ``SOL_CONTINER_NAME=<container name>`` (HAMi's spelling, which Iluvatar's runtime reads)
  unless it already has that variable.

Deliberate differences from HAMi: values that are negative, fractional or beyond int32 are refused (HAMi drops
them or wraps), as are cores above 100 other than the webhook's own ``100 × count``; devices are tried in the
pod's GPU policy order like every vendor's (HAMi's Iluvatar Fit walks the policy-sorted list from the wrong end,
so ``binpack`` spread the pods), and the shared loop's health, cordon and ``mutex`` checks apply.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Final

from pydantic import AfterValidator, StrictStr, field_validator

from hami.devices.admission import Admitter, ContainerEdit, PodContext
from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    ContainerRequest,
    NodeInventory,
    ResourceNames,
    Selector,
)
from hami.devices.common import SharedDeviceVendor
from hami.devices.configmodel import ConfigModel
from hami.devices.family import ChartValues, Gate, VendorFamily
from hami.devices.resources import lookup_resource, whole_quantity
from hami.errors import QuantityError
from hami.protocol import keys
from hami.protocol.inventory import decode_inventory_legacy
from hami.protocol.objects import Container, Node, QuantityValue
from hami.protocol.quantity import INT32_MAX

__all__ = [
    "CONTAINER_NAME_ENV",
    "ILUVATAR_FAMILY",
    "MEMORY_UNIT_MIB",
    "IluvatarAdmitter",
    "IluvatarChipConfig",
    "IluvatarVendor",
    "default_iluvatar_chips",
    "iluvatar_keys",
]


_COMMON_WORD: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,41}[A-Za-z0-9])?")
"""A chip's ``commonWord`` names its annotation keys (``hami.io/<commonWord>-devices-to-allocate`` must stay within
the 63 characters of a key name)."""


class IluvatarChipConfig(ConfigModel):
    """One ``iluvatars:`` entry: a chip model and its resource names (vendor key = ``commonWord``)."""

    chip_name: StrictStr
    common_word: StrictStr
    resource_count_name: StrictStr
    resource_memory_name: StrictStr
    resource_core_name: StrictStr

    @field_validator("common_word")
    @classmethod
    def _annotation_safe(cls, value: str) -> str:
        if not _COMMON_WORD.fullmatch(value):
            raise ValueError(
                "must be 1 to 43 letters, digits, '-', '_' or '.', starting and ending with a letter or digit: it "
                "names the chip's annotation keys (hami.io/node-<commonWord>-register, …)"
            )
        return value


def default_iluvatar_chips() -> tuple[IluvatarChipConfig, ...]:
    """The four Iluvatar chips of HAMi's chart and built-in defaults."""
    return tuple(
        IluvatarChipConfig(
            chip_name=chip,
            common_word=chip,
            resource_count_name=f"iluvatar.ai/{chip}-vgpu",
            resource_memory_name=f"iluvatar.ai/{chip}.vMem",
            resource_core_name=f"iluvatar.ai/{chip}.vCore",
        )
        for chip in ("MR-V100", "MR-V50", "BI-V150", "BI-V100")
    )


def _distinct_chips(chips: tuple[IluvatarChipConfig, ...]) -> tuple[IluvatarChipConfig, ...]:
    seen: set[str] = set()
    for chip in chips:
        if chip.common_word in seen:
            raise ValueError(
                f"commonWord {chip.common_word!r} is given twice: each chip is its own vendor, keyed by it"
            )
        seen.add(chip.common_word)
    return chips


MEMORY_UNIT_MIB: Final = 256
"""One ``vMem`` unit, in MiB."""
CONTAINER_NAME_ENV: Final = "SOL_CONTINER_NAME"
"""HAMi's (misspelt) variable carrying the container name to Iluvatar's runtime; kept as the runtime reads it."""


def iluvatar_keys(common_word: str) -> keys.VendorKeys:
    """The annotation keys of one Iluvatar chip."""
    return keys.VendorKeys(
        common_word,
        register=f"hami.io/node-{common_word}-register",
        handshake=f"hami.io/node-handshake-{common_word}",
        to_allocate=f"hami.io/{common_word}-devices-to-allocate",
        allocated=f"hami.io/{common_word}-devices-allocated",
    )


def _read(container: Container, name: str, field: str) -> tuple[int | None, QuantityValue | None, str]:
    found = lookup_resource(container, name)
    if found is None:
        return None, None, ""
    section, raw = found
    where = f"{field}.{section}[{name}]"
    return whole_quantity(where, raw, INT32_MAX, "exceeds the int32 range HAMi's annotations can carry"), raw, where


@dataclass(frozen=True, slots=True)
class IluvatarAdmitter:
    """HAMi's Iluvatar ``MutateAdmission``: found iff the count is in limits; whole cores for several cards; the
    container name in ``SOL_CONTINER_NAME``."""

    count: str
    core: str
    runtime_class_name: str = ""

    def admit(self, container: Container, field: str, edit: ContainerEdit, pod: PodContext) -> bool:
        raw = edit.limits.get(self.count, container.resources.limits.get(self.count))
        if raw is None:
            return False
        where = f"{field}.limits[{self.count}]"
        count = whole_quantity(where, raw, INT32_MAX, "exceeds the int32 range HAMi's annotations can carry")
        if count > 1 and self.core:
            edit.limits[self.core] = str(100 * count)
        has_env = any(env.name == CONTAINER_NAME_ENV for env in container.env) or CONTAINER_NAME_ENV in edit.env
        if not has_env and container.name:
            edit.env[CONTAINER_NAME_ENV] = container.name
        return True


class IluvatarVendor(SharedDeviceVendor):
    """One Iluvatar chip, configured by one entry of ``iluvatars:`` in device-config.yaml."""

    screens = True  # the shared fit: screened from the capacity summary

    def __init__(self, chip: IluvatarChipConfig) -> None:
        self.chip = chip
        self.name = chip.common_word
        self.keys = iluvatar_keys(chip.common_word)
        # A vMem quota counts vMem units, as the requests do (HAMi declares no factor and compares the quota's
        # units with MiB, so a quota of 64 units allowed 64 MiB).
        self.resources = ResourceNames(
            count=chip.resource_count_name,
            memory=chip.resource_memory_name or None,
            core=chip.resource_core_name or None,
            memory_factor=MEMORY_UNIT_MIB,
        )
        self.use_uuid = f"hami.io/use-{chip.common_word}-uuid"
        self.nouse_uuid = f"hami.io/no-use-{chip.common_word}-uuid"

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        count, _, _ = _read(container, self.chip.resource_count_name, field)
        if not count:
            return None
        mem, raw_mem, mem_field = _read(container, self.chip.resource_memory_name, field)
        cores, raw_cores, cores_field = _read(container, self.chip.resource_core_name, field)
        memreq = 0
        if mem:
            memreq = mem * MEMORY_UNIT_MIB
            if memreq > INT32_MAX:
                raise QuantityError(mem_field, raw_mem, f"× {MEMORY_UNIT_MIB} MiB exceeds the int32 range")
        coresreq = cores or 0
        if coresreq > 100:
            # The webhook writes 100 × count for several cards: a whole card each. Anything else above 100 is
            # refused (HAMi clamps it to 100 silently).
            if count > 1 and coresreq == 100 * count:
                coresreq = 100
            else:
                reason = "cores are a percentage of one card and cannot exceed 100"
                raise QuantityError(cores_field, raw_cores, f"{reason} (or be 100 × the card count)")
        return ContainerRequest(
            vendor=self.name,
            nums=count,
            memreq=memreq,
            mem_percentage=100 if memreq == 0 else MEM_PERCENTAGE_UNSET,
            coresreq=coresreq,
        )

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        raw = node.metadata.annotations.get(self.keys.register)
        if raw is None:
            return None
        return NodeInventory(tuple(decode_inventory_legacy(raw, self.keys.register)))

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        return Selector.from_annotations(annotations, (self.use_uuid, self.nouse_uuid))

    def admitter(self) -> Admitter:
        return IluvatarAdmitter(self.chip.resource_count_name, self.chip.resource_core_name)


ILUVATAR_FAMILY: Final = VendorFamily[tuple[IluvatarChipConfig, ...]](
    family="iluvatar",
    section="iluvatars",
    model=Annotated[tuple[IluvatarChipConfig, ...], AfterValidator(_distinct_chips)],
    default=default_iluvatar_chips,
    build=lambda chips: tuple(IluvatarVendor(chip) for chip in chips),
    gate=Gate("enable_iluvatar", "Schedule Iluvatar GPUs"),
    chart=ChartValues(
        {
            "chipName": "devices.iluvatar.chips",
            "commonWord": "devices.iluvatar.chips",
            "resourceCountName": None,
            "resourceMemoryName": None,
            "resourceCoreName": None,
        },
        ("resourceCountName", "resourceMemoryName", "resourceCoreName"),
    ),
)
"""The registry entry: the ``iluvatars:`` list, one vendor per chip (keyed by ``commonWord``), off unless
``--enable-iluvatar``."""
