"""Configuration: HAMi's ``device-config.yaml`` and the scheduler's own settings, assembled from the vendor registry
(``hami.devices.REGISTRY``: each vendor declares its section and switch in its own module). Pure: text in, models
out.

* :func:`parse_device_config` / :func:`default_device_config` — the vendor sections (:class:`DeviceConfig`, one
  field per registered family); unknown keys come back as warnings in :class:`LoadedConfig`.
* :func:`load_settings` / :class:`SchedulerSettings` — HAMi's scheduler flags, from arguments and ``HAMI_*``.
* :func:`parse_go_duration` — ``5m``, ``1m30s``, ``300ms``.

Invalid values raise :class:`hami.errors.ConfigError` naming the key and the value.
"""

from __future__ import annotations

from hami.config.device import (
    DeviceConfig,
    DeviceSections,
    LoadedConfig,
    default_device_config,
    device_config_model,
    parse_device_config,
)
from hami.config.dra import DraConfig, DraDriverConfig
from hami.config.duration import parse_go_duration
from hami.config.settings import GPU_POLICY_TOKENS, NodeSchedulerPolicy, SchedulerSettings, load_settings

__all__ = [
    "GPU_POLICY_TOKENS",
    "DeviceConfig",
    "DeviceSections",
    "DraConfig",
    "DraDriverConfig",
    "LoadedConfig",
    "NodeSchedulerPolicy",
    "SchedulerSettings",
    "default_device_config",
    "device_config_model",
    "load_settings",
    "parse_device_config",
    "parse_go_duration",
]
