"""The device plugin's effective settings for this node, and HAMi's per-node config file.

Sources, later ones winning (webhook-bind-plugin-vendors.md §6.2 end, scheduler-core.md §8.2):

1. built-in defaults (the chart's: split count 10, scalings 1, hami-core mode);
2. the ``nvidia:`` section of the scheduler's ``device-config.yaml`` (``deviceSplitCount``, …);
3. the entry of the node config file (``/config/config.json``) whose ``name`` is this node.

The node config file is HAMi's: ``{"nodeconfig": [{"name": "node-1", "devicememoryscaling": 1.5, …}]}``.
Keys are matched case-insensitively, as Go's ``encoding/json`` does, so ``deviceMemoryScaling`` also works.
Unknown keys are logged and ignored (HAMi ignores them silently).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from hami.errors import ConfigError, did_you_mean
from hami.protocol.inventory import MAX_DEVCORE, MAX_SLOTS

if TYPE_CHECKING:
    from hami.devices.nvidia.config import NvidiaConfig

__all__ = [
    "DEVICE_LIST_STRATEGIES",
    "OPERATING_MODES",
    "MigAllowEntry",
    "NodeSettings",
    "apply_node_config",
    "settings_from_device_config",
]

log = logging.getLogger(__name__)

OPERATING_MODES: Final = ("hami-core", "mig")
"""Modes hami's plugin can serve. *Difference from HAMi:* ``mps`` is refused at start-up (no MPS support)."""

DEVICE_LIST_STRATEGIES: Final = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
"""How a container is told its GPUs (HAMi's ``DEVICE_LIST_STRATEGY``; several may be combined)."""


@dataclass(frozen=True, slots=True)
class MigAllowEntry:
    """One ``migProfileAllowlist`` entry: these profiles may be offered on GPUs of these models."""

    models: tuple[str, ...]
    profiles: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """Everything that shapes this node's inventory and Allocate answers. Memory in MiB."""

    resource_name: str = "nvidia.com/gpu"
    split_count: int = 10
    memory_scaling: float = 1.0
    core_scaling: float = 1.0
    preconfigured_memory_mib: int = 0
    lib_cuda_log_level: int | None = None
    enable_numa_topology: bool = False
    disable_core_limit: bool = False
    operating_mode: str = "hami-core"
    mig_strategy: str = "none"
    filter_uuids: frozenset[str] = frozenset()
    filter_indexes: frozenset[int] = frozenset()
    preferred_allocation: bool = False
    mig_allowlist: tuple[MigAllowEntry, ...] = ()
    topology_score: bool = False  # env ENABLE_TOPOLOGY_SCORE=true: publish hami.io/node-nvidia-score
    hook_path: str = "/usr/local"  # env HOOK_PATH: where HAMi-core lives on the host (<hook>/vgpu/libvgpu.so)
    device_list_strategy: tuple[str, ...] = ("envvar",)  # env DEVICE_LIST_STRATEGY
    pass_device_specs: bool = False  # env PASS_DEVICE_SPECS: device nodes in Allocate's answer
    driver_root: str = "/"  # env NVIDIA_DRIVER_ROOT: where the driver's /dev and libraries are on the host
    cdi_hook_path: str = ""  # env NVIDIA_CDI_HOOK_PATH: nvidia-cdi-hook on the host, run by CDI specs
    cdi_annotation_prefix: str = "cdi.k8s.io/"  # env CDI_ANNOTATION_PREFIX
    cdi_spec_dir: str = "/var/run/cdi"  # env CDI_SPECS_DIR: where the generated CDI specs are written
    gdrcopy_enabled: bool = False  # env GDRCOPY_ENABLED
    gds_enabled: bool = False  # env GDS_ENABLED
    mofed_enabled: bool = False  # env MOFED_ENABLED
    imex_channel_ids: tuple[int, ...] = ()  # env IMEX_CHANNEL_IDS: IMEX channels every GPU container gets

    @property
    def uses_cdi(self) -> bool:
        return any(s.startswith("cdi-") for s in self.device_list_strategy)

    def validate(self, source: str) -> NodeSettings:
        """Return self, or raise ``ConfigError`` naming ``source`` and the bad key."""
        if not 1 <= self.split_count <= MAX_SLOTS:
            raise ConfigError(
                f"{source}: devicesplitcount",
                self.split_count,
                f"must be 1..{MAX_SLOTS} (the scheduler refuses a registration with more slots per device)",
            )
        if self.memory_scaling <= 0:
            raise ConfigError(f"{source}: devicememoryscaling", self.memory_scaling, "must be positive")
        if self.core_scaling <= 0:
            raise ConfigError(f"{source}: devicecorescaling", self.core_scaling, "must be positive")
        if self.core_scaling * 100 > MAX_DEVCORE:
            raise ConfigError(
                f"{source}: devicecorescaling",
                self.core_scaling,
                f"must be at most {MAX_DEVCORE // 100} (the scheduler refuses a device with more core units)",
            )
        if self.preconfigured_memory_mib < 0:
            raise ConfigError(f"{source}: preconfigureddevicememory", self.preconfigured_memory_mib, "negative")
        unknown = [s for s in self.device_list_strategy if s not in DEVICE_LIST_STRATEGIES]
        if unknown or not self.device_list_strategy:
            raise ConfigError(
                "DEVICE_LIST_STRATEGY",
                ",".join(self.device_list_strategy),
                f"each strategy must be one of {', '.join(DEVICE_LIST_STRATEGIES)}"
                + (did_you_mean(unknown[0], DEVICE_LIST_STRATEGIES) if unknown else ""),
            )
        if any(i < 0 for i in self.imex_channel_ids):
            raise ConfigError("IMEX_CHANNEL_IDS", self.imex_channel_ids, "channel ids are never negative")
        if self.operating_mode not in OPERATING_MODES:
            raise ConfigError(
                f"{source}: operatingmode",
                self.operating_mode,
                f"hami's device plugin supports {', '.join(OPERATING_MODES)} (mps is not implemented)",
            )
        return self


# node-config key (lower case) -> (NodeSettings field, converter)
_NODE_KEYS: Final = {
    "devicememoryscaling": "memory_scaling",
    "devicesplitcount": "split_count",
    "devicecorescaling": "core_scaling",
    "preconfigureddevicememory": "preconfigured_memory_mib",
    "libcudaloglevel": "lib_cuda_log_level",
    "enablenumatopology": "enable_numa_topology",
    "operatingmode": "operating_mode",
    "migstrategy": "mig_strategy",
    "enablegetpreferredallocation": "preferred_allocation",
}
_FLOATS: Final = {"memory_scaling", "core_scaling"}
_INTS: Final = {"split_count", "preconfigured_memory_mib", "lib_cuda_log_level"}
_BOOLS: Final = {"enable_numa_topology", "preferred_allocation"}


def apply_node_config(base: NodeSettings, text: str, node_name: str, source: str) -> NodeSettings:
    """Overlay the ``nodeconfig`` entry named ``node_name`` from the JSON ``text`` (read from ``source``).

    No entry for this node → ``base`` unchanged. Malformed JSON or a value of the wrong type raises
    ``ConfigError`` naming the file and key. When several entries name the node, the first wins (as in HAMi,
    which stops at the first match).
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(source, text, f"not valid JSON: {exc}") from exc
    entries = _lower_keys(document, source).get("nodeconfig") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: nodeconfig", entries, "must be a list")
    for position, raw in enumerate(entries):
        entry = _lower_keys(raw, f"{source}: nodeconfig[{position}]")
        if entry.get("name") == node_name:
            return _overlay(base, entry, f"{source}: nodeconfig[{position}]").validate(source)
    return base


def _overlay(base: NodeSettings, entry: Mapping[str, Any], where: str) -> NodeSettings:
    changes: dict[str, Any] = {}
    for key, value in entry.items():
        if key == "name":
            continue
        if key == "filterdevices":
            changes.update(_filter_devices(value, f"{where}.filterdevices"))
            continue
        target = _NODE_KEYS.get(key)
        if target is None:
            log.warning("%s: ignoring unknown node config key %r", where, key)
            continue
        changes[target] = _convert(target, value, f"{where}.{key}")
    return replace(base, **changes)


def _convert(target: str, value: Any, where: str) -> Any:
    if target in _FLOATS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(where, value, "must be a number")
        return float(value)
    if target in _INTS:
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise ConfigError(where, value, "must be a whole number")
        return int(value)
    if target in _BOOLS:
        if not isinstance(value, bool):
            raise ConfigError(where, value, "must be true or false")
        return value
    if not isinstance(value, str):
        raise ConfigError(where, value, "must be a string")
    return value


def _filter_devices(value: Any, where: str) -> dict[str, Any]:
    spec = _lower_keys(value, where)
    uuids = spec.get("uuid") or []
    indexes = spec.get("index") or []
    if not isinstance(uuids, list) or not all(isinstance(u, str) for u in uuids):
        raise ConfigError(f"{where}.uuid", uuids, "must be a list of GPU UUIDs")
    if not isinstance(indexes, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in indexes):
        raise ConfigError(f"{where}.index", indexes, "must be a list of GPU indexes")
    if any(i < 0 for i in indexes):
        raise ConfigError(f"{where}.index", indexes, "indexes are never negative")
    return {"filter_uuids": frozenset(uuids), "filter_indexes": frozenset(indexes)}


def _lower_keys(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(where, value, "must be a JSON object")
    lowered: dict[str, Any] = {}
    for key, item in value.items():
        lowered.setdefault(str(key).lower(), item)
    return lowered


def settings_from_device_config(nvidia: NvidiaConfig, base: NodeSettings = NodeSettings()) -> NodeSettings:
    """Overlay the plugin's keys of the scheduler's ``nvidia:`` device-config section (scheduler-core.md §8.2)."""
    return replace(
        base,
        resource_name=nvidia.resource_count_name,
        split_count=nvidia.device_split_count,
        memory_scaling=nvidia.device_memory_scaling,
        core_scaling=nvidia.device_core_scaling,
        preconfigured_memory_mib=nvidia.pre_configured_device_memory,
        lib_cuda_log_level=nvidia.lib_cuda_log_level,
        enable_numa_topology=nvidia.enable_numa_topology,
        disable_core_limit=nvidia.disable_core_limit,
        mig_allowlist=tuple(
            MigAllowEntry(models=tuple(e.models), profiles=tuple(e.profiles)) for e in nvidia.mig_profile_allowlist
        ),
    )
