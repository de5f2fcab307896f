"""The ``nvidia:`` section of ``device-config.yaml`` (HAMi's ``NvidiaConfig``; scheduler-core.md §8.2).

Defaults are HAMi's built-in default set (``InitDefaultDevices``) and, for keys it leaves out, the Helm
chart's values — so a key that a file omits means what a standard HAMi installation means. HAMi itself
uses Go zero values for omitted keys (an omitted ``resourceMemoryName`` is ``""``, which turns
``nvidia.com/gpumem`` off; an omitted ``defaultGPUNum`` is 0). Writing ``""`` or ``0`` explicitly still gets
HAMi's behaviour. The chart always writes every key, so for chart-generated files both agree.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, BeforeValidator, Field, StrictBool, StrictStr, field_validator

from hami.devices.configmodel import ConfigModel
from hami.protocol.inventory import MAX_DEVCORE, MAX_SLOTS
from hami.protocol.quantity import INT32_MAX, INT64_MAX

__all__ = ["GpuCorePolicy", "MigProfileAllowlistEntry", "NvidiaConfig"]

GpuCorePolicy = Literal["default", "force", "disable"]
"""``gpuCorePolicy``: injected by the webhook as ``CUDA_CORE_LIMIT_SWITCH`` unless ``default``."""

_MIG_PROFILE_RE: Final = re.compile(r"[0-9]+g\..+")

Int32 = Annotated[int, Field(strict=True, ge=0, le=INT32_MAX)]
Int64 = Annotated[int, Field(strict=True, ge=0, le=INT64_MAX)]
PositiveFloat = Annotated[float, Field(strict=True, gt=0)]


def _check_mig_profile(profile: str) -> str:
    """A MIG profile name must look like ``<digits>g.<rest>`` (``1g.10gb``, ``3g.40gb``).

    HAMi's ``ValidateMigProfileAllowlist`` only asks for ``<at least 2 chars ending in g>.<anything>``, so it
    lets ``xg.5gb`` or ``1g.`` through; hami requires the digits and a non-empty rest (no real profile is
    spelled otherwise), so a typo fails at start-up instead of silently matching nothing.
    """
    if not _MIG_PROFILE_RE.fullmatch(profile):
        raise ValueError("must be a MIG profile name like 1g.10gb (<slices>g.<memory>)")
    return profile


def _check_model_name(model: str) -> str:
    if not model.strip():
        raise ValueError("must not be blank")
    return model


MigProfileName = Annotated[StrictStr, AfterValidator(_check_mig_profile)]
GpuModelName = Annotated[StrictStr, AfterValidator(_check_model_name)]


def _alias(key: str) -> object:
    """A field whose YAML key is not the camelCase of its Python name (``defaultGPUNum``)."""
    return Field(validation_alias=key, serialization_alias=key)


def _log_level(value: object) -> object:
    """``libCudaLogLevel`` is a string in HAMi (``"0"``…``"4"``) but the chart writes a bare number."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return value


class MigProfileAllowlistEntry(ConfigModel):
    """One ``migProfileAllowlist`` entry: the MIG profiles allowed on cards whose model is listed.

    Both lists must be non-empty (HAMi fails start-up otherwise: "MIG profile allowlist must define models
    and profiles"). The device plugin applies the list; the scheduler only validates it (§6.8).
    """

    models: Annotated[tuple[GpuModelName, ...], Field(min_length=1)]
    profiles: Annotated[tuple[MigProfileName, ...], Field(min_length=1)]


class NvidiaConfig(ConfigModel):
    """HAMi's ``nvidia:`` section. Units: memory in MiB, cores in percent of one GPU.

    Scheduler keys: the five resource names, ``defaultMemory``/``defaultCores`` (request parsing, §3.2),
    ``memoryFactor`` (a ``gpumem`` value is multiplied by it), ``defaultGPUNum``, ``overwriteEnv``,
    ``gpuCorePolicy`` and ``runtimeClassName`` (webhook). Node-level keys (``deviceSplitCount`` …
    ``enableNumaTopology``) are read by the device plugin only; per-node config may override them there.
    """

    resource_count_name: StrictStr = "nvidia.com/gpu"
    resource_memory_name: StrictStr = "nvidia.com/gpumem"
    resource_memory_percentage_name: StrictStr = "nvidia.com/gpumem-percentage"
    resource_core_name: StrictStr = "nvidia.com/gpucores"
    resource_priority_name: StrictStr = "nvidia.com/priority"
    overwrite_env: StrictBool = False
    """Webhook: containers without an NVIDIA request get ``NVIDIA_VISIBLE_DEVICES=none``."""
    default_memory: Int32 = 0
    """MiB per GPU for a request that gives neither memory nor percentage (0: the whole card). Not scaled by
    ``memoryFactor``, as in HAMi."""
    default_cores: Annotated[int, Field(strict=True, ge=0, le=100)] = 0
    """Percent of a GPU's cores for a request that gives no ``gpucores``."""
    default_gpu_num: Annotated[int, Field(strict=True, ge=0, le=INT32_MAX), _alias("defaultGPUNum")] = 1
    """Webhook: the GPU count added when a container asks for memory or cores but no count (0: add none)."""
    memory_factor: Int32 = 1
    """``gpumem`` is counted in units of this many MiB. 0 (the Go zero value) means 1, as in HAMi."""
    disable_core_limit: StrictBool = False
    """Present in HAMi's struct, read by nothing."""
    mig_profile_allowlist: tuple[MigProfileAllowlistEntry, ...] = ()
    gpu_core_policy: GpuCorePolicy = "default"
    runtime_class_name: StrictStr = ""
    """Webhook: set as ``spec.runtimeClassName`` of GPU pods that have none ("" = leave it)."""

    # Node-level keys (HAMi's inline NodeDefaultConfig), chart defaults. Device plugin only.
    device_split_count: Annotated[int, Field(strict=True, ge=1, le=MAX_SLOTS)] = 10
    """How many tasks may share one GPU (the ``Count`` a GPU registers with). At most 1024: the scheduler refuses a
    registration with more (``hami.protocol.inventory.MAX_SLOTS``)."""
    device_memory_scaling: PositiveFloat = 1.0
    """Registered memory = physical memory × this (> 1 oversubscribes)."""
    device_core_scaling: Annotated[float, Field(strict=True, gt=0, le=MAX_DEVCORE // 100)] = 1.0
    """Registered cores = 100 × this. At most 100: the scheduler refuses a device with more than 10,000 core units."""
    pre_configured_device_memory: Int64 = 0
    """MiB to register per GPU instead of the detected size (0: detect)."""
    lib_cuda_log_level: Annotated[int, BeforeValidator(_log_level), Field(strict=True, ge=0, le=4)] = 1
    """``LIBCUDA_LOG_LEVEL`` for HAMi-core: 0 errors … 4 debug (HAMi keeps it as a string)."""
    enable_numa_topology: StrictBool = False

    @field_validator("memory_factor")
    @classmethod
    def _zero_factor_means_one(cls, value: int) -> int:
        return value or 1

    @field_validator("gpu_core_policy", mode="before")
    @classmethod
    def _empty_policy_means_default(cls, value: object) -> object:
        return "default" if value == "" else value
