"""Configuration: HAMi's ``device-config.yaml`` and the scheduler's own settings. Pure: text in, models out.

* :func:`parse_device_config` / :func:`default_device_config` — the vendor sections (:class:`DeviceConfig`,
  :class:`NvidiaConfig`, …); unknown keys come back as warnings in :class:`LoadedConfig`.
* :func:`load_settings` / :class:`SchedulerSettings` — HAMi's scheduler flags, from arguments and ``HAMI_*``.
* :func:`parse_go_duration` — ``5m``, ``1m30s``, ``300ms``.

Invalid values raise :class:`hami.errors.ConfigError` naming the key and the value.
"""

from __future__ import annotations

from hami.config.device import DeviceConfig, LoadedConfig, default_device_config, parse_device_config
from hami.config.dra import DraConfig, DraDriverConfig
from hami.config.duration import parse_go_duration
from hami.config.nvidia import GpuCorePolicy, MigProfileAllowlistEntry, NvidiaConfig
from hami.config.settings import GPU_POLICY_TOKENS, NodeSchedulerPolicy, SchedulerSettings, load_settings
from hami.config.vendors import (
    AmdConfig,
    AwsNeuronConfig,
    BirenConfig,
    CambriconConfig,
    EnflameConfig,
    HygonConfig,
    IluvatarChipConfig,
    KunlunConfig,
    MetaxConfig,
    MthreadsConfig,
    VastaiConfig,
    VnpuChipConfig,
    VnpusConfig,
    VnpuTemplate,
)

__all__ = [
    "GPU_POLICY_TOKENS",
    "AmdConfig",
    "AwsNeuronConfig",
    "BirenConfig",
    "CambriconConfig",
    "DeviceConfig",
    "DraConfig",
    "DraDriverConfig",
    "EnflameConfig",
    "GpuCorePolicy",
    "HygonConfig",
    "IluvatarChipConfig",
    "KunlunConfig",
    "LoadedConfig",
    "MetaxConfig",
    "MigProfileAllowlistEntry",
    "MthreadsConfig",
    "NodeSchedulerPolicy",
    "NvidiaConfig",
    "SchedulerSettings",
    "VastaiConfig",
    "VnpuChipConfig",
    "VnpuTemplate",
    "VnpusConfig",
    "default_device_config",
    "load_settings",
    "parse_device_config",
    "parse_go_duration",
]
