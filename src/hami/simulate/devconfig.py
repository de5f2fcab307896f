"""``--config device-config.yaml`` for the simulator: HAMi's device configuration, or the defaults; and which
device families to schedule (``--enable-ascend``, ``--enable-iluvatar``, ``--disable-devices``)."""

from __future__ import annotations

from dataclasses import dataclass

from hami.config import DeviceConfig, default_device_config, parse_device_config
from hami.config.settings import DEVICE_FAMILIES, GATED_FAMILIES
from hami.errors import InvalidInput

__all__ = ["Families", "device_config_from_text"]


def device_config_from_text(text: str | None, source: str) -> tuple[DeviceConfig, list[str]]:
    """The device configuration in ``text`` (None: the defaults) and the warnings it produced.

    Raises ``ConfigError`` for an invalid configuration.
    """
    if text is None:
        return default_device_config(), []
    loaded = parse_device_config(text, source)
    return loaded.config, [str(w) for w in loaded.warnings]


@dataclass(frozen=True, slots=True, init=False)
class Families:
    """Which device families to schedule, with ``hami scheduler``'s switches and a default install's defaults
    (the chart: the gated families off — ``devices.ascend.enabled``, ``devices.iluvatar.enabled`` false — every other
    family on). Built as ``Families(enable_ascend=True, disable_devices="nvidia")``: one keyword per gated family's
    switch (``VendorFamily.gate``, from the registry)."""

    switched_on: frozenset[str]
    """The gated families' switches given as on (``enable_ascend``)."""
    disable_devices: str
    """``--disable-devices``: families not to schedule, separated by commas (``nvidia,hygon``)."""

    def __init__(self, disable_devices: str = "", **switches: bool) -> None:
        unknown = sorted(set(switches) - set(GATED_FAMILIES.values()))
        if unknown:
            raise TypeError(f"no family has the switch {unknown[0]!r}; the switches: {sorted(GATED_FAMILIES.values())}")
        object.__setattr__(self, "switched_on", frozenset(name for name, on in switches.items() if on))
        object.__setattr__(self, "disable_devices", disable_devices)

    def enabled(self) -> frozenset[str]:
        """The families to schedule. Raises ``InvalidInput`` naming the flag for an unknown family, or for a gated
        family both switched on and disabled."""
        names = {n.strip() for n in self.disable_devices.split(",") if n.strip()}
        unknown = sorted(names - set(DEVICE_FAMILIES))
        if unknown:
            raise InvalidInput(
                "--disable-devices",
                self.disable_devices,
                f"unknown device family {unknown[0]!r}; use {', '.join(DEVICE_FAMILIES)}",
            )
        for family, switch in GATED_FAMILIES.items():
            if switch in self.switched_on and family in names:
                raise InvalidInput(
                    "--disable-devices",
                    self.disable_devices,
                    f"names {family}, which --{switch.replace('_', '-')} switches on: give one or the other",
                )
        gated_off = {family for family, switch in GATED_FAMILIES.items() if switch not in self.switched_on}
        return frozenset(DEVICE_FAMILIES) - gated_off - names
