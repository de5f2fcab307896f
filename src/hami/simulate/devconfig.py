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


@dataclass(frozen=True, slots=True)
class Families:
    """Which device families to schedule, with ``hami scheduler``'s switches and a default install's defaults
    (the chart: ``devices.ascend.enabled`` and ``devices.iluvatar.enabled`` false, every other family on)."""

    enable_ascend: bool = False
    enable_iluvatar: bool = False
    disable_devices: str = ""
    """``--disable-devices``: families not to schedule, separated by commas (``nvidia,hygon``)."""

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
        switches = {"enable_ascend": self.enable_ascend, "enable_iluvatar": self.enable_iluvatar}
        for family, switch in GATED_FAMILIES.items():
            if switches[switch] and family in names:
                raise InvalidInput(
                    "--disable-devices",
                    self.disable_devices,
                    f"names {family}, which --{switch.replace('_', '-')} switches on: give one or the other",
                )
        gated_off = {family for family, switch in GATED_FAMILIES.items() if not switches[switch]}
        return frozenset(DEVICE_FAMILIES) - gated_off - names
