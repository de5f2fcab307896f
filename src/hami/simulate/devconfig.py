"""``--config device-config.yaml`` for the simulator: HAMi's device configuration, or the defaults."""

from __future__ import annotations

from hami.config import DeviceConfig, default_device_config, parse_device_config

__all__ = ["device_config_from_text"]


def device_config_from_text(text: str | None, source: str) -> tuple[DeviceConfig, list[str]]:
    """The device configuration in ``text`` (None: the defaults) and the warnings it produced.

    Raises ``ConfigError`` for an invalid configuration.
    """
    if text is None:
        return default_device_config(), []
    loaded = parse_device_config(text, source)
    return loaded.config, [str(w) for w in loaded.warnings]
