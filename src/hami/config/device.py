"""HAMi's ``device-config.yaml``: every vendor section, parsed from text, validated, unknown keys reported.

:func:`parse_device_config` is pure (YAML text in, :class:`LoadedConfig` out); the shell reads the file.

* Invalid values raise :class:`~hami.errors.ConfigError` naming the key path and the value
  (``nvidia.defaultGPUNum: must be >= 0 (got -1)``). So do YAML syntax errors and duplicate keys
  (yaml.v2 refuses those too).
* Unknown keys, at any depth, come back as warnings (``nvidia.deviceSplitCont: unknown key, ignored``):
  HAMi's yaml.v2 drops them silently, so a misspelt key would otherwise go unnoticed.
* Keys and sections a file leaves out take the defaults documented on each model (HAMi's built-in
  default set and chart values, see :mod:`hami.config.nvidia`).
* An empty file, or one whose sections are all empty, loads :func:`default_device_config` with a warning.
  HAMi refuses to start there ("all configurations are empty"); falling back to the standard resource
  names is what such a file can only have meant, and the warning keeps it visible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import yaml
from pydantic import Field, ValidationError, field_validator

from hami.config._model import ConfigModel, config_error, unknown_keys
from hami.config.dra import DraConfig
from hami.config.nvidia import NvidiaConfig
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
    VnpusConfig,
    default_iluvatar_chips,
)
from hami.errors import ConfigError

__all__ = ["DeviceConfig", "LoadedConfig", "default_device_config", "parse_device_config"]

_SECTIONS: Final = (
    "nvidia",
    "cambricon",
    "hygon",
    "metax",
    "mthreads",
    "iluvatars",
    "enflame",
    "kunlun",
    "awsneuron",
    "amd",
    "vastai",
    "biren",
    "vnpus",
)


class DeviceConfig(ConfigModel):
    """The whole ``device-config.yaml``: one typed section per vendor (all backends always exist, as in HAMi)."""

    nvidia: NvidiaConfig = Field(default_factory=NvidiaConfig)
    cambricon: CambriconConfig = Field(default_factory=CambriconConfig)
    hygon: HygonConfig = Field(default_factory=HygonConfig)
    metax: MetaxConfig = Field(default_factory=MetaxConfig)
    mthreads: MthreadsConfig = Field(default_factory=MthreadsConfig)
    iluvatars: tuple[IluvatarChipConfig, ...] = Field(default_factory=default_iluvatar_chips)
    enflame: EnflameConfig = Field(default_factory=EnflameConfig)
    kunlun: KunlunConfig = Field(default_factory=KunlunConfig)
    awsneuron: AwsNeuronConfig = Field(default_factory=AwsNeuronConfig)
    amd: AmdConfig = Field(default_factory=AmdConfig)
    vastai: VastaiConfig = Field(default_factory=VastaiConfig)
    biren: BirenConfig = Field(default_factory=BirenConfig)
    vnpus: VnpusConfig = Field(default_factory=VnpusConfig)
    dra: DraConfig = Field(default_factory=DraConfig)
    """Not a vendor: which DRA drivers' allocations hami counts (``hami.config.dra``; not in HAMi v2.10)."""

    @field_validator("iluvatars")
    @classmethod
    def _distinct_chips(cls, chips: tuple[IluvatarChipConfig, ...]) -> tuple[IluvatarChipConfig, ...]:
        seen: set[str] = set()
        for chip in chips:
            if chip.common_word in seen:
                raise ValueError(
                    f"commonWord {chip.common_word!r} is given twice: each chip is its own vendor, keyed by it"
                )
            seen.add(chip.common_word)
        return chips


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A parsed device config and what the loader has to say about it (each warning names a key path)."""

    config: DeviceConfig
    warnings: tuple[str, ...] = ()


def default_device_config() -> DeviceConfig:
    """The configuration hami uses when the file says nothing: standard resource names, defaultGPUNum 1."""
    return DeviceConfig()


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate mapping keys as Go's yaml.v2 does."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _load_yaml(text: str, source: str) -> object:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        line = text.splitlines()[mark.line] if mark is not None and mark.line < len(text.splitlines()) else ""
        raise ConfigError(source, line, f"is not valid YAML: {problem}{where}") from None


def _is_empty(section: object) -> bool:
    return section is None or section in ({}, [])


def _newer_than_v210(config: DeviceConfig) -> list[str]:
    """Keys hami's models accept that HAMi v2.10 does not read (vendors-appendix.md): set, they change nothing."""
    vnpus = config.vnpus
    newer = (("hamiVnpuMode", vnpus.hami_vnpu_mode), ("enpuPolicy", vnpus.enpu_policy))
    return [
        f"vnpus.{key}: not read by HAMi v2.10 and ignored (soft split is vnpus.hamiVnpuCore, a node's hami-vnpu-core "
        "annotation and a pod's huawei.com/vnpu-mode: hami-core)"
        for key, value in newer
        if value
    ]


def parse_device_config(text: str, source: str) -> LoadedConfig:
    """Parse the text of a ``device-config.yaml``; ``source`` names it in messages (a path or ConfigMap key).

    Raises :class:`~hami.errors.ConfigError` for invalid YAML, duplicate keys and invalid values.
    """
    document = _load_yaml(text, source)
    warnings: list[str] = []
    if document is None:
        warnings.append(f"{source}: empty device config; using the built-in defaults")
        return LoadedConfig(default_device_config(), tuple(warnings))
    if not isinstance(document, dict):
        raise ConfigError(source, document, "must be a mapping of vendor sections (nvidia:, hygon:, …)")
    for key in document:
        if not isinstance(key, str):
            raise ConfigError(source, key, "has a section name that is not a string")
    sections = {key: value for key, value in document.items() if not (key in (*_SECTIONS, "dra") and value is None)}
    vnpus = sections.get("vnpus")
    if isinstance(vnpus, list):
        # HAMi < 2.9 wrote the chip list directly under vnpus:; HAMi v2.10 still reads it.
        sections["vnpus"] = {"configs": vnpus}
        warnings.append("vnpus: legacy list form (HAMi < 2.9); read as vnpus.configs")
    try:
        config = DeviceConfig.model_validate(sections, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise config_error(exc) from None
    warnings.extend(unknown_keys(config))
    warnings.extend(_newer_than_v210(config))
    if all(_is_empty(document.get(key)) for key in _SECTIONS):
        # HAMi: fatal "all configurations are empty". Explicitly empty sections ("iluvatars: []") are
        # overridden too: an all-empty file cannot mean "no vendor at all".
        warnings.append(f"{source}: every vendor section is empty; using the built-in defaults")
        config = default_device_config().model_copy(update={"dra": config.dra})  # dra: is no vendor section
    return LoadedConfig(config, tuple(warnings))
