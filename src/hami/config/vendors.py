"""The other vendors' sections of ``device-config.yaml``, kept as typed data (webhook-bind-plugin-vendors.md §7, §8).

Each section carries the keys HAMi v2.10 reads, so that a chart-generated file loads without "unknown key"
warnings; each vendor module (``hami.devices.<vendor>``) builds its vendor from its section. Defaults are the Helm
chart's values (HAMi's built-in default set where the chart has none), as for the ``nvidia:`` section; an explicit
``""`` or ``[]`` in the file still turns a resource or a list off.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import Field, StrictBool, StrictStr, field_validator

from hami.config._model import ConfigModel
from hami.protocol.quantity import INT32_MAX, INT64_MAX

__all__ = [
    "AmdConfig",
    "AwsNeuronConfig",
    "BirenConfig",
    "CambriconConfig",
    "EnflameConfig",
    "HygonConfig",
    "IluvatarChipConfig",
    "KunlunConfig",
    "MetaxConfig",
    "MthreadsConfig",
    "VastaiConfig",
    "VnpuChipConfig",
    "VnpuTemplate",
    "VnpusConfig",
    "default_iluvatar_chips",
    "default_vnpu_chips",
]

Int32 = Annotated[int, Field(strict=True, ge=0, le=INT32_MAX)]
Int64 = Annotated[int, Field(strict=True, ge=0, le=INT64_MAX)]


def _alias(key: str) -> object:
    """A field whose YAML key is not the camelCase of its Python name (``resourceNameGCU``)."""
    return Field(validation_alias=key, serialization_alias=key)


class CambriconConfig(ConfigModel):
    """``cambricon:`` — MLU (vendor key ``MLU``); memory counts 256 MiB units."""

    resource_count_name: StrictStr = "cambricon.com/vmlu"
    resource_memory_name: StrictStr = "cambricon.com/mlu.smlu.vmemory"
    resource_core_name: StrictStr = "cambricon.com/mlu.smlu.vcore"


class HygonConfig(ConfigModel):
    """``hygon:`` — Hygon DCU (vendor key ``DCU``). ``dcumem`` is multiplied by ``memoryFactor`` (0 means 1)."""

    resource_count_name: StrictStr = "hygon.com/dcunum"
    resource_memory_name: StrictStr = "hygon.com/dcumem"
    resource_core_name: StrictStr = "hygon.com/dcucores"
    memory_factor: Int32 = 1


class MetaxConfig(ConfigModel):
    """``metax:`` — whole GPUs (``resourceCountName``) and sGPU slices (the ``resourceV*`` names)."""

    resource_count_name: StrictStr = "metax-tech.com/gpu"
    resource_v_count_name: StrictStr = "metax-tech.com/sgpu"
    resource_v_memory_name: StrictStr = "metax-tech.com/vmemory"
    resource_v_core_name: StrictStr = "metax-tech.com/vcore"
    sgpu_topology_aware: StrictBool = False


class MthreadsConfig(ConfigModel):
    """``mthreads:`` — Moore Threads sGPU; memory counts 512 MiB units."""

    resource_count_name: StrictStr = "mthreads.com/vgpu"
    resource_memory_name: StrictStr = "mthreads.com/sgpu-memory"
    resource_core_name: StrictStr = "mthreads.com/sgpu-core"
    memory_per_card: tuple[Annotated[int, Field(strict=True, ge=1, le=INT32_MAX)], ...] = (96,)
    """Per-card memory capacities in 512 MiB units (the chart's ``memoryPerCard``)."""


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


class EnflameConfig(ConfigModel):
    """``enflame:`` — whole GCUs, DRS hard partitions, and the legacy shared-GCU names."""

    resource_name_gcu: Annotated[StrictStr, _alias("resourceNameGCU")] = "enflame.com/gcu"
    resource_name_drs_gcu: Annotated[StrictStr, _alias("resourceNameDRSGCU")] = "enflame.com/drs-gcu"
    resource_name_gcu_memory: Annotated[StrictStr, _alias("resourceNameGCUMemory")] = "enflame.com/gcu-memory"
    resource_name_gcu_core: Annotated[StrictStr, _alias("resourceNameGCUCore")] = "enflame.com/gcu-core"
    resource_name_vgcu: Annotated[StrictStr, _alias("resourceNameVGCU")] = ""
    resource_name_vgcu_percentage: Annotated[StrictStr, _alias("resourceNameVGCUPercentage")] = ""


class KunlunConfig(ConfigModel):
    """``kunlun:`` — whole XPUs (``kunlun``) and vXPU slices (vendor key ``XPU``)."""

    resource_count_name: StrictStr = "kunlunxin.com/xpu"
    resource_v_count_name: StrictStr = "kunlunxin.com/vxpu"
    resource_v_memory_name: StrictStr = "kunlunxin.com/vxpu-memory"


class AwsNeuronConfig(ConfigModel):
    """``awsneuron:`` — Neuron devices and cores."""

    resource_count_name: StrictStr = "aws.amazon.com/neuron"
    resource_core_name: StrictStr = "aws.amazon.com/neuroncore"


class AmdConfig(ConfigModel):
    """``amd:`` — AMD GPUs; ``gpucores`` is a percentage converted to compute units."""

    resource_count_name: StrictStr = "amd.com/gpu"
    resource_memory_name: StrictStr = "amd.com/gpumem"
    resource_core_name: StrictStr = "amd.com/gpucores"


class VastaiConfig(ConfigModel):
    """``vastai:`` — count-only time slicing."""

    resource_count_name: StrictStr = "vastaitech.com/va"


class BirenConfig(ConfigModel):
    """``biren:`` — count-only time slicing."""

    resource_count_name: StrictStr = "birentech.com/gpu"


class VnpuTemplate(ConfigModel):
    """One Ascend vNPU template: memory in MiB, AI cores and AI CPUs of the slice."""

    name: StrictStr
    memory: Int64
    ai_core: Int32 = 0
    ai_cpu: Annotated[int, Field(strict=True, ge=0, le=INT32_MAX), _alias("aiCPU")] = 0


class VnpuChipConfig(ConfigModel):
    """One ``vnpus.configs`` entry: an Ascend chip model (vendor key = ``commonWord``)."""

    chip_name: StrictStr
    common_word: StrictStr
    resource_name: StrictStr
    resource_memory_name: StrictStr
    resource_core_name: StrictStr = ""
    memory_allocatable: Int64 = 0
    memory_capacity: Int64 = 0
    memory_factor: Int32 = 0
    ai_core: Int32 = 0
    ai_cpu: Annotated[int, Field(strict=True, ge=0, le=INT32_MAX), _alias("aiCPU")] = 0
    runtime_class_name: StrictStr = ""
    overwrite_env: StrictBool = False
    super_pod: StrictBool = False
    templates: tuple[VnpuTemplate, ...] = ()


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


def _chip(
    chip: str,
    word: str,
    memory: tuple[int, int],
    cores: tuple[int, int],
    templates: tuple[tuple[str, int, int, int], ...],
    *,
    super_pod: bool = False,
) -> VnpuChipConfig:
    return VnpuChipConfig(
        chip_name=chip,
        common_word=word,
        resource_name=f"huawei.com/{word}",
        resource_memory_name=f"huawei.com/{word}-memory",
        resource_core_name=f"huawei.com/{word}-core",
        memory_allocatable=memory[0],
        memory_capacity=memory[1],
        memory_factor=0 if super_pod else 1,
        ai_core=cores[0],
        ai_cpu=cores[1],
        super_pod=super_pod,
        templates=tuple(VnpuTemplate(name=n, memory=m, ai_core=c, ai_cpu=p) for n, m, c, p in templates),
    )


def default_vnpu_chips() -> tuple[VnpuChipConfig, ...]:
    """The Ascend chips of HAMi v2.10's chart (910A, 910B2/B3/B4-1/B4, 310P, 910C super pod)."""
    b3_templates = (("vir05_1c_16g", 16384, 5, 1), ("vir10_3c_32g", 32768, 10, 3))
    return (
        _chip(
            "910A",
            "Ascend910A",
            (32768, 32768),
            (30, 0),
            (("vir02", 2184, 2, 0), ("vir04", 4369, 4, 0), ("vir08", 8738, 8, 0), ("vir16", 17476, 16, 0)),
        ),
        _chip(
            "910B2",
            "Ascend910B2",
            (65536, 65536),
            (24, 6),
            (("vir03_1c_8g", 8192, 3, 1), ("vir06_1c_16g", 16384, 6, 1), ("vir12_3c_32g", 32768, 12, 3)),
        ),
        _chip("910B3", "Ascend910B3", (65536, 65536), (20, 7), b3_templates),
        _chip("910B4-1", "Ascend910B4-1", (65536, 65536), (20, 7), b3_templates),
        _chip(
            "910B4",
            "Ascend910B4",
            (32768, 32768),
            (20, 7),
            (("vir05_1c_8g", 8192, 5, 1), ("vir10_3c_16g", 16384, 10, 3)),
        ),
        _chip(
            "310P3",
            "Ascend310P",
            (21527, 24576),
            (8, 7),
            (("vir01", 3072, 1, 1), ("vir02", 6144, 2, 2), ("vir04", 12288, 4, 4)),
        ),
        _chip("Ascend910", "Ascend910C", (65536, 65536), (20, 7), b3_templates, super_pod=True),
    )


class VnpusConfig(ConfigModel):
    """``vnpus:`` — Ascend. HAMi < 2.9 wrote a bare list of chips here; the loader still reads that form."""

    hami_vnpu_core: StrictBool = False
    """Deprecated in HAMi v2.10 in favour of ``hamiVnpuMode``; applies only when that is empty."""
    hami_vnpu_mode: StrictStr = ""
    """``template`` (default), ``hami-core`` or ``enpu``."""
    enpu_policy: StrictStr = ""
    overwrite_env: StrictBool = False
    runtime_class_name: StrictStr = ""
    configs: tuple[VnpuChipConfig, ...] = Field(default_factory=default_vnpu_chips)
