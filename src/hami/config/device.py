"""HAMi's ``device-config.yaml``: every vendor section, parsed from text, validated, unknown keys reported.

The sections are the vendors' own: each registry entry (``hami.devices.REGISTRY``, a ``VendorFamily`` declared in
its vendor's module) names its section key, model and default, and :func:`device_config_model` makes one field of
each (``DeviceConfig`` is the model of the registry). :func:`parse_device_config` is pure (YAML text in,
:class:`LoadedConfig` out); the shell reads the file.

* Invalid values raise :class:`~hami.errors.ConfigError` naming the key path and the value
  (``nvidia.defaultGPUNum: must be >= 0 (got -1)``). So do YAML syntax errors and duplicate keys
  (yaml.v2 refuses those too).
* Unknown keys, at any depth, come back as warnings (``nvidia.deviceSplitCont: unknown key, ignored``):
  HAMi's yaml.v2 drops them silently, so a misspelt key would otherwise go unnoticed.
* Keys and sections a file leaves out take the defaults documented on each model (HAMi's built-in
  default set and chart values, see :mod:`hami.devices.nvidia.config`).
* An empty file, or one whose sections are all empty, loads :func:`default_device_config` with a warning.
  HAMi refuses to start there ("all configurations are empty"); falling back to the standard resource
  names is what such a file can only have meant, and the warning keeps it visible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import yaml
from pydantic import Field, ValidationError, create_model

from hami.config.dra import DraConfig
from hami.devices import REGISTRY, Registry
from hami.devices.configmodel import ConfigModel, config_error, unknown_keys
from hami.errors import ConfigError

__all__ = [
    "DeviceConfig",
    "DeviceSections",
    "LoadedConfig",
    "default_device_config",
    "device_config_model",
    "parse_device_config",
]


class DeviceSections(ConfigModel):
    """What every ``DeviceConfig`` has besides its vendor sections: the ``dra:`` section and the registry the
    sections come from. ``device_config_model`` adds one field per registry entry, named by its section key."""

    registry: ClassVar[Registry] = ()

    dra: DraConfig = Field(default_factory=DraConfig)
    """Not a vendor: which DRA drivers' allocations hami counts (``hami.config.dra``; not in HAMi v2.10)."""


def device_config_model(registry: Registry) -> type[DeviceSections]:
    """The ``device-config.yaml`` model of ``registry``: one field per family, its section key typed and defaulted
    as the entry declares (``VendorFamily.model``, ``default``), then ``dra``."""
    fields: dict[str, Any] = {f.section: (f.model, Field(default_factory=f.default)) for f in registry}
    model = create_model("DeviceConfig", __base__=DeviceSections, __module__=__name__, **fields)
    model.registry = tuple(registry)
    return model


if TYPE_CHECKING:
    DeviceConfig = DeviceSections
else:
    DeviceConfig = device_config_model(REGISTRY)
    DeviceConfig.__doc__ = (
        "The whole ``device-config.yaml``: one typed section per registered family (``hami.devices.REGISTRY``; all "
        "always exist, as in HAMi), and ``dra``. Read a family's section with ``VendorFamily.section_of``."
    )


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A parsed device config and what the loader has to say about it (each warning names a key path)."""

    config: DeviceSections
    warnings: tuple[str, ...] = ()


def default_device_config(model: type[DeviceSections] = DeviceConfig) -> DeviceSections:
    """The configuration hami uses when the file says nothing: standard resource names, defaultGPUNum 1."""
    return model()


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


def _read_sections(document: dict[str, object], registry: Registry) -> tuple[dict[str, object], list[str]]:
    """The document's sections as the models read them: an empty section (``hygon:``) is left out, and each
    family's ``read`` hook turns an old form of its section into the current one, with a warning."""
    own = {f.section for f in registry}
    sections = {key: value for key, value in document.items() if not (key in (*own, "dra") and value is None)}
    warnings: list[str] = []
    for family in registry:
        if family.read is not None and family.section in sections:
            sections[family.section], said = family.read(sections[family.section])
            warnings.extend(said)
    return sections, warnings


def _notes(config: DeviceSections) -> list[str]:
    """Each family's warnings about its parsed section (``VendorFamily.notes``)."""
    return [note for f in config.registry if f.notes is not None for note in f.notes(f.section_of(config))]


def parse_device_config(text: str, source: str, model: type[DeviceSections] = DeviceConfig) -> LoadedConfig:
    """Parse the text of a ``device-config.yaml``; ``source`` names it in messages (a path or ConfigMap key).
    ``model`` is the registry's (``device_config_model``; the default: ``hami.devices.REGISTRY``'s).

    Raises :class:`~hami.errors.ConfigError` for invalid YAML, duplicate keys and invalid values.
    """
    document = _load_yaml(text, source)
    if document is None:
        return LoadedConfig(model(), (f"{source}: empty device config; using the built-in defaults",))
    if not isinstance(document, dict):
        raise ConfigError(source, document, "must be a mapping of vendor sections (nvidia:, hygon:, …)")
    for key in document:
        if not isinstance(key, str):
            raise ConfigError(source, key, "has a section name that is not a string")
    sections, warnings = _read_sections(document, model.registry)
    try:
        config = model.model_validate(sections, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise config_error(exc) from None
    warnings.extend(unknown_keys(config))
    warnings.extend(_notes(config))
    if all(_is_empty(document.get(f.section)) for f in model.registry):
        # HAMi: fatal "all configurations are empty". Explicitly empty sections ("iluvatars: []") are
        # overridden too: an all-empty file cannot mean "no vendor at all".
        warnings.append(f"{source}: every vendor section is empty; using the built-in defaults")
        config = model().model_copy(update={"dra": config.dra})  # dra: is no vendor section
    return LoadedConfig(config, tuple(warnings))
