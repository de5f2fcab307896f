"""NVIDIA in DRA mode: a container's HAMi request and the pod's NVIDIA annotations as a claim asks for them.

The request is read exactly as in extender mode (``hami.devices.nvidia.request``: ``memoryFactor``,
``defaultMemory``, ``defaultCores``, HAMi's percentage rules), then:

* ``nvidia.com/gpu`` → ``count`` distinct devices; ``nvidia.com/gpumem`` (× ``memoryFactor``) → MiB per device;
  ``gpumem-percentage: 100`` or no memory at all → the device's default (the whole card); a percentage below 100
  → ``memory_percent``; ``nvidia.com/gpucores`` → ``cores``. No cores (0, as HAMi books it when ``gpucores`` is
  absent) → the opaque ``HAMiCoreConfig`` with ``smLimit: none``: HAMi sets no SM limit then, and hami's driver
  would otherwise write the smallest one.
* ``nvidia.com/use-gputype`` / ``nouse-gputype`` → CEL on the ``productName`` attribute, matched as hami matches
  card types in extender mode: whole words, case-insensitively, against the type hami's device plugin registers
  (``NVIDIA-<product name>`` unless the name starts with ``NVIDIA``), so ``A10`` never selects an ``A100``;
* ``nvidia.com/use-gpuuuid`` / ``nouse-gpuuuid`` → CEL ``uuid in [...]`` / ``!(uuid in [...])``;
* ``nvidia.com/vgpu-mode``: hami's driver offers only HAMi-core shares, so a mode list without ``hami-core``
  (``mig``, ``mps``) is refused;
* ``nvidia.com/numa-bind``: the driver publishes no NUMA attribute, so NUMA binding of several GPUs is refused;
  for one GPU it holds by itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from hami.devices.base import MEM_PERCENTAGE_UNSET, parse_bool, parse_type_list, parse_uuid_list
from hami.devices.dra import DraModeSettings, DraRefused, DraRequest, cel_string
from hami.devices.nvidia.config import NvidiaConfig
from hami.devices.nvidia.request import parse_nvidia_request
from hami.devices.resources import lookup_resource
from hami.protocol import keys
from hami.protocol.dra import hami_core_config
from hami.protocol.objects import Container

__all__ = ["ANNOTATIONS", "nvidia_dra_request", "nvidia_dra_resources", "type_selector", "uuid_selector"]

ANNOTATIONS: Final = (
    keys.NVIDIA_USE_GPUTYPE,
    keys.NVIDIA_NOUSE_GPUTYPE,
    keys.NVIDIA_USE_GPUUUID,
    keys.NVIDIA_NOUSE_GPUUUID,
    keys.NVIDIA_NUMA_BIND,
    keys.NVIDIA_VGPU_MODE,
)
"""The pod annotations an NVIDIA claim depends on (stored with the request)."""

DRA_MODE: Final = "hami-core"
"""The only device mode hami's DRA driver offers."""

_SEP: Final = "[^a-z0-9]"


def nvidia_dra_resources(cfg: NvidiaConfig) -> tuple[str, ...]:
    """The configured NVIDIA resource names (an unset one left out)."""
    names = (
        cfg.resource_count_name,
        cfg.resource_memory_name,
        cfg.resource_memory_percentage_name,
        cfg.resource_core_name,
        cfg.resource_priority_name,
    )
    return tuple(name for name in names if name)


def _attribute(settings: DraModeSettings, name: str) -> str:
    return f"device.attributes[{cel_string(settings.driver)}].{name}"


def type_selector(value: str, settings: DraModeSettings, *, negate: bool) -> str | None:
    """CEL for a ``use-gputype`` (or, ``negate``, ``nouse-gputype``) list: some item is a run of whole words of
    the card type, case-insensitively; ``None`` for a list with no item (no filter, as in extender mode)."""
    items = parse_type_list(value)
    if not items:
        return None
    runs = "|".join(sorted({(_SEP + "+").join(words) for words in items}))
    pattern = f"(^|{_SEP})({runs})($|{_SEP})"
    name = _attribute(settings, "productName")
    card_type = f'({name}.startsWith("NVIDIA") ? {name} : "NVIDIA-" + {name})'
    test = f"{card_type}.lowerAscii().matches({cel_string(pattern)})"
    return f"!{test}" if negate else test


def uuid_selector(value: str, settings: DraModeSettings, *, negate: bool, field: str) -> str | None:
    """CEL for a ``use-gpuuuid`` (or ``nouse-gpuuuid``) list; ``None`` for a blank list."""
    uuids = sorted(parse_uuid_list(value))
    if not uuids:
        return None
    listed = ", ".join(cel_string(u, field) for u in uuids)
    test = f"{_attribute(settings, 'uuid')} in [{listed}]"
    return f"!({test})" if negate else test


def _selectors(annotations: Mapping[str, str], settings: DraModeSettings, field: str) -> tuple[str, ...]:
    found = (
        type_selector(annotations.get(keys.NVIDIA_USE_GPUTYPE, ""), settings, negate=False),
        type_selector(annotations.get(keys.NVIDIA_NOUSE_GPUTYPE, ""), settings, negate=True),
        uuid_selector(
            annotations.get(keys.NVIDIA_USE_GPUUUID, ""),
            settings,
            negate=False,
            field=f"{field}: annotation {keys.NVIDIA_USE_GPUUUID}",
        ),
        uuid_selector(
            annotations.get(keys.NVIDIA_NOUSE_GPUUUID, ""),
            settings,
            negate=True,
            field=f"{field}: annotation {keys.NVIDIA_NOUSE_GPUUUID}",
        ),
    )
    return tuple(s for s in found if s is not None)


def _check_mode(annotations: Mapping[str, str], field: str) -> None:
    raw = annotations.get(keys.NVIDIA_VGPU_MODE)
    modes = {m.strip() for m in raw.split(",") if m.strip()} if raw else set()
    if modes and DRA_MODE not in modes:
        raise DraRefused(
            f"{field}: annotation {keys.NVIDIA_VGPU_MODE}",
            raw,
            f"DRA mode offers {DRA_MODE} shares only (hami's DRA driver has no MIG or MPS devices); "
            "run the pod in a namespace that uses the extender",
        )


def _check_numa(annotations: Mapping[str, str], count: int, field: str) -> None:
    raw = annotations.get(keys.NVIDIA_NUMA_BIND)
    where = f"{field}: annotation {keys.NVIDIA_NUMA_BIND}"
    if raw is None or not parse_bool(raw, where) or count == 1:
        return
    raise DraRefused(
        where,
        raw,
        f"binding {count} GPUs to one NUMA node cannot be expressed in a claim (hami's DRA driver publishes no "
        "NUMA attribute); ask for one GPU, drop the annotation, or run the pod in a namespace that uses the "
        "extender",
    )


def _refuse_percentage(container: Container, cfg: NvidiaConfig, field: str) -> None:
    name = cfg.resource_memory_percentage_name
    found = lookup_resource(container, name)
    where, value = (f"{field}.{found[0]}[{name}]", found[1]) if found else (field, None)
    raise DraRefused(
        where,
        value,
        "is a share of each card's memory, and a claim asks for an amount: DRA mode can translate it only when the "
        f"cluster's card memory sizes are configured; ask for {cfg.resource_memory_name} in MiB instead",
    )


def nvidia_dra_request(
    container: Container, cfg: NvidiaConfig, field: str, annotations: Mapping[str, str], settings: DraModeSettings
) -> DraRequest | None:
    """The container's NVIDIA request for a claim (module docstring); ``None`` when it asks for no GPU."""
    request = parse_nvidia_request(container, cfg, field)
    if request is None:
        return None
    _check_mode(annotations, field)
    _check_numa(annotations, request.nums, field)
    memory_mib: int | None = None
    percent: int | None = None
    if request.memreq > 0:
        memory_mib = request.memreq
    elif request.mem_percentage not in (MEM_PERCENTAGE_UNSET, 100):
        percent = request.mem_percentage
    if percent is not None and not settings.card_memory_mib:
        _refuse_percentage(container, cfg, field)
    resources = {}
    for name in nvidia_dra_resources(cfg):
        found = lookup_resource(container, name)
        if found is not None:
            resources[name] = str(found[1])
    return DraRequest(
        count=request.nums,
        cores=request.coresreq,
        memory_mib=memory_mib,
        memory_percent=percent,
        selectors=_selectors(annotations, settings, field),
        parameters=hami_core_config(sm_limit="none") if request.coresreq == 0 else None,
        resources=resources,
        annotations={k: annotations[k] for k in ANNOTATIONS if k in annotations},
    )
