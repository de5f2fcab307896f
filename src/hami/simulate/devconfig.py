"""``--config device-config.yaml`` for the simulator: HAMi's device configuration, or the defaults."""

from __future__ import annotations

import importlib
from typing import cast

from hami.config import DeviceConfig, default_device_config

__all__ = ["device_config_from_text"]


def device_config_from_text(text: str | None, source: str) -> tuple[DeviceConfig, list[str]]:
    """The device configuration in ``text`` (None: the defaults) and the warnings it produced.

    Raises ``ConfigError`` for an invalid configuration (once ``hami.config.parse_device_config`` exists).
    """
    if text is None:
        return default_device_config(), []
    # TODO(lead): switch to parse_device_config when config lands (import it directly, drop the fallback).
    config_module = importlib.import_module("hami.config")
    parse = getattr(config_module, "parse_device_config", None)
    if parse is None:
        return default_device_config(), [f"{source}: device-config parsing is not available yet; using the defaults"]
    loaded = parse(text, source)
    return cast(DeviceConfig, loaded.config), [str(w) for w in loaded.warnings]
