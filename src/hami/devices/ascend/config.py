"""The ``vnpus:`` section of ``device-config.yaml`` (Huawei Ascend): the soft-split switches and one entry per chip
model, each its own vendor keyed by ``commonWord``. Defaults are HAMi v2.10's chart (webhook-bind-plugin-vendors.md
§7 "Ascend details")."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictBool, StrictStr

from hami.devices.configmodel import ConfigModel, Int32, Int64, yaml_key
from hami.protocol.quantity import INT32_MAX

__all__ = ["VnpuChipConfig", "VnpuTemplate", "VnpusConfig", "default_vnpu_chips", "legacy_list", "newer_than_v210"]


class VnpuTemplate(ConfigModel):
    """One Ascend vNPU template: memory in MiB, AI cores and AI CPUs of the slice."""

    name: StrictStr
    memory: Int64
    ai_core: Int32 = 0
    ai_cpu: Annotated[int, Field(strict=True, ge=0, le=INT32_MAX), yaml_key("aiCPU")] = 0


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
    ai_cpu: Annotated[int, Field(strict=True, ge=0, le=INT32_MAX), yaml_key("aiCPU")] = 0
    runtime_class_name: StrictStr = ""
    overwrite_env: StrictBool = False
    super_pod: StrictBool = False
    templates: tuple[VnpuTemplate, ...] = ()


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


def legacy_list(section: object) -> tuple[object, tuple[str, ...]]:
    """HAMi < 2.9 wrote the chip list directly under ``vnpus:``; HAMi v2.10 still reads it, as ``vnpus.configs``."""
    if isinstance(section, list):
        return {"configs": section}, ("vnpus: legacy list form (HAMi < 2.9); read as vnpus.configs",)
    return section, ()


def newer_than_v210(config: VnpusConfig) -> list[str]:
    """Keys hami's model accepts that HAMi v2.10 does not read (vendors-appendix.md): set, they change nothing."""
    newer = (("hamiVnpuMode", config.hami_vnpu_mode), ("enpuPolicy", config.enpu_policy))
    return [
        f"vnpus.{key}: not read by HAMi v2.10 and ignored (soft split is vnpus.hamiVnpuCore, a node's hami-vnpu-core "
        "annotation and a pod's huawei.com/vnpu-mode: hami-core)"
        for key, value in newer
        if value
    ]
