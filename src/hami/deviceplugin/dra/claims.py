"""What a claim's allocation means for its containers, and the CDI spec that tells the runtime (pure).

:func:`plan_claim` reads ``status.allocation.devices.results`` of a ResourceClaim: the results of this driver, for
this node's pool, each naming a published device and, with consumable capacity, its ``shareID`` and
``consumedCapacity``. :func:`claim_spec` turns the plan into one CDI spec per claim (dra.md §1 "NodePrepareResources"):

* kind ``k8s.hami-core-gpu.project-hami.io/claim``; one CDI device per card, ``<claimUID>-hami-gpu-<minor>``, with
  the card's ``/dev/nvidia<minor>``; the spec-wide edits add the control nodes;
* HAMi-core's environment as hami's device plugin gives it: ``NVIDIA_VISIBLE_DEVICES`` (the UUIDs),
  ``CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m`` and ``CUDA_DEVICE_SM_LIMIT_<i>`` per card, ``CUDA_DEVICE_SM_LIMIT`` (the
  first card's, for HAMi-core builds that read only that), ``CUDA_DEVICE_MEMORY_SHARED_CACHE``;
* mounts: ``<hook>/vgpu/claims/<claimUID>`` (the shared cache's directory, read-write, same path),
  ``<hook>/vgpu/libvgpu.so`` (read-only), ``/etc/ld.so.preload`` from ``<hook>/vgpu/ld.so.preload`` (read-only),
  ``/tmp/vgpulock`` (read-write).

Decisions (*where hami differs from HAMi*, whose driver gets these wrong):

* ``<i>`` counts the claim's cards in PCI bus order, the order NVML and CUDA (for cards of one model) number them
  inside the container, never Go map order.
* Two results on one card (a ``count: 2`` request, or two requests, landing on one shared device) are one CDI
  device whose limits are the sum of both bookings; kubelet gets both results, each with its ``shareID``.
* Limits are what the scheduler booked: a capacity missing from ``consumedCapacity`` (consumable capacity off)
  means the device's default, a whole card; there is no SM fallback. ``cores: 0`` books no compute, but HAMi-core
  reads ``CUDA_DEVICE_SM_LIMIT=0`` as "no limit"; hami writes ``1``, the smallest limit HAMi-core enforces —
  unless the claim says otherwise in an opaque configuration for this driver (``status.allocation.devices.config``):
  ``{apiVersion: hami.io/v1alpha1, kind: HAMiCoreConfig, smLimit: none}`` on a request means its cards get no SM
  limit (``CUDA_DEVICE_SM_LIMIT_<i>=0``), which is what HAMi does for a task that asked for no cores and what DRA
  mode's translation asks for then. ``smLimit: booked`` (or no configuration) keeps the booked limit. A
  configuration for this driver that is not one of these is refused, never ignored. Of several configurations
  for one request the last one counts (the class's come first, then the claim's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from hami.deviceplugin.dra.slices import DRIVER, MIB, SliceDevice
from hami.deviceplugin.response import HostFiles
from hami.errors import InvalidInput, QuantityError
from hami.protocol.dra import (
    HAMI_CORE_CONFIG_API_VERSION,
    HAMI_CORE_CONFIG_KIND,
    DeviceAllocationConfiguration,
    DeviceRequestAllocationResult,
    ResourceClaim,
)
from hami.protocol.quantity import parse_quantity

__all__ = [
    "CDI_CLASS",
    "CDI_KIND",
    "CDI_VENDOR",
    "CONTROL_NODES",
    "Card",
    "ClaimPlan",
    "PrepareRefused",
    "Share",
    "card_env",
    "cdi_device_id",
    "claim_env",
    "claim_spec",
    "plan_claim",
    "spec_file_name",
]

CDI_VENDOR: Final = f"k8s.{DRIVER}"
CDI_CLASS: Final = "claim"
CDI_KIND: Final = f"{CDI_VENDOR}/{CDI_CLASS}"
CDI_VERSION: Final = "0.6.0"
CONTROL_NODES: Final = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
MIN_SM_LIMIT: Final = 1
"""What ``cores: 0`` becomes: HAMi-core reads 0 as unset (no limit)."""


class PrepareRefused(InvalidInput):
    """A claim this plugin cannot prepare; the message names the claim and the reason (kubelet shows it)."""


@dataclass(frozen=True, slots=True)
class Share:
    """One allocation result of this driver: kubelet gets one ``Device`` per share."""

    requests: tuple[str, ...]
    device: str
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class Card:
    """One card the claim's containers see, with the limits of every share on it summed."""

    device: str
    uuid: str
    minor: int
    bus_id: str
    memory_mib: int
    cores: int
    no_sm_limit: bool = False


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    """Everything prepare writes for one claim."""

    uid: str
    namespace: str
    name: str
    pool: str
    cards: tuple[Card, ...]
    shares: tuple[Share, ...] = field(default=())


def cdi_device_id(claim_uid: str, device: str) -> str:
    """The fully qualified CDI name kubelet hands the runtime: ``<CDI_KIND>=<claim uid>-<device>``."""
    return f"{CDI_KIND}={claim_uid}-{device}"


def spec_file_name(claim_uid: str) -> str:
    """CDI's transient spec name ``<vendor>-<class>_<id>`` (``/`` in the id becomes ``_``), as HAMi's driver uses."""
    return f"{CDI_VENDOR}-{CDI_CLASS}_{claim_uid.replace('/', '_')}.yaml"


def _booked(result: DeviceRequestAllocationResult, name: str, device: SliceDevice, where: str) -> Fraction:
    value = result.consumed_capacity.get(name)
    if value is None:  # no consumable capacity: the request policy's default, the whole card
        return Fraction(device.memory_bytes) if name == "memory" else Fraction(100)
    try:
        booked = parse_quantity(value, f"{where}.consumedCapacity.{name}")
    except QuantityError as exc:
        raise PrepareRefused(f"{where}.consumedCapacity.{name}", value, str(exc)) from None
    return max(booked, Fraction(0))


def _our_results(claim: ResourceClaim, node_pool: str) -> list[DeviceRequestAllocationResult]:
    where = f"ResourceClaim {claim.key}"
    allocation = claim.status.allocation
    if allocation is None:
        raise PrepareRefused(f"{where} status.allocation", None, "is not allocated yet")
    ours = [r for r in allocation.devices.results if r.driver == DRIVER]
    if not ours:
        raise PrepareRefused(f"{where} status.allocation.devices.results", [], f"has no device of driver {DRIVER}")
    for result in ours:
        if result.pool != node_pool:
            raise PrepareRefused(
                f"{where} result for {result.device}", result.pool, f"is not this node's pool {node_pool}"
            )
    return ours


_SM_LIMITS: Final = ("booked", "none")


def _sm_limit(config: DeviceAllocationConfiguration, where: str) -> str:
    """The ``smLimit`` of one of this driver's configurations; raises :class:`PrepareRefused` for anything else."""
    params = config.opaque.parameters if config.opaque is not None else None
    field = f"{where}.opaque.parameters"
    if not isinstance(params, Mapping):
        raise PrepareRefused(field, params, f"must be a {HAMI_CORE_CONFIG_KIND} object")
    if params.get("apiVersion") != HAMI_CORE_CONFIG_API_VERSION or params.get("kind") != HAMI_CORE_CONFIG_KIND:
        found = f"{params.get('apiVersion')}/{params.get('kind')}"
        raise PrepareRefused(field, found, f"is not {HAMI_CORE_CONFIG_API_VERSION}/{HAMI_CORE_CONFIG_KIND}")
    unknown = sorted(set(params) - {"apiVersion", "kind", "smLimit"})
    if unknown:
        raise PrepareRefused(field, unknown, "holds fields this driver does not know")
    limit = params.get("smLimit", "booked")
    if limit not in _SM_LIMITS:
        raise PrepareRefused(f"{field}.smLimit", limit, "must be booked or none")
    return str(limit)


def _unlimited_requests(claim: ResourceClaim, results: Sequence[DeviceRequestAllocationResult]) -> set[str]:
    """The requests (as the results name them) whose cards get no SM limit (module docstring)."""
    assert claim.status.allocation is not None
    configs = claim.status.allocation.devices.config
    unlimited: set[str] = set()
    for request in {r.request for r in results}:
        limit = "booked"
        for i, config in enumerate(configs):
            covered = not config.requests or request in config.requests or request.split("/")[0] in config.requests
            if covered and config.opaque is not None and config.opaque.driver == DRIVER:
                where = f"ResourceClaim {claim.key} status.allocation.devices.config[{i}]"
                limit = _sm_limit(config, where)
        if limit == "none":
            unlimited.add(request)
    return unlimited


def plan_claim(claim: ResourceClaim, node_pool: str, devices: Mapping[str, SliceDevice]) -> ClaimPlan:
    """The plan for ``claim`` on this node (``devices`` by name). Raises :class:`PrepareRefused` naming the field."""
    results = _our_results(claim, node_pool)
    unlimited = _unlimited_requests(claim, results)
    memory: dict[str, Fraction] = {}
    cores: dict[str, Fraction] = {}
    shares: list[Share] = []
    for i, result in enumerate(results):
        where = f"ResourceClaim {claim.key} status.allocation.devices.results[{i}]"
        device = devices.get(result.device)
        if device is None:
            raise PrepareRefused(f"{where}.device", result.device, "is not a device this node publishes")
        memory[result.device] = memory.get(result.device, Fraction(0)) + _booked(result, "memory", device, where)
        cores[result.device] = cores.get(result.device, Fraction(0)) + _booked(result, "cores", device, where)
        shares.append(Share(requests=(result.request,), device=result.device, share_id=result.share_id))
    cards = [
        Card(
            device=name,
            uuid=devices[name].gpu.uuid,
            minor=devices[name].minor,
            bus_id=devices[name].gpu.bus_id,
            memory_mib=int(min(memory[name], Fraction(devices[name].memory_bytes)) // MIB),
            cores=int(min(cores[name], Fraction(100))),
            no_sm_limit=any(r.device == name and r.request in unlimited for r in results),
        )
        for name in memory
    ]
    cards.sort(key=lambda c: (c.bus_id.lower(), c.minor))
    return ClaimPlan(
        uid=claim.metadata.uid,
        namespace=claim.metadata.namespace,
        name=claim.metadata.name,
        pool=node_pool,
        cards=tuple(cards),
        shares=tuple(shares),
    )


def claim_dir(host: HostFiles, claim_uid: str) -> str:
    """``<hook>/vgpu/claims/<claimUID>``: the claim's HAMi-core shared cache lives here."""
    return f"{host.vgpu_dir}/claims/{claim_uid}"


def card_env(index: int, card: Card) -> list[str]:
    """The card's limits as the container's ``index``-th GPU (in its CDI device's edits: never empty, as CDI
    requires, even without device nodes)."""
    return [f"CUDA_DEVICE_MEMORY_LIMIT_{index}={card.memory_mib}m", f"CUDA_DEVICE_SM_LIMIT_{index}={_sm(card)}"]


def _sm(card: Card) -> int:
    return 0 if card.no_sm_limit else max(card.cores, MIN_SM_LIMIT)


def claim_env(
    plan: ClaimPlan, host: HostFiles, cache_name: str, *, log_level: int | None = None, no_core_limit: bool = False
) -> list[str]:
    """The claim-wide part of HAMi-core's environment (module docstring), ``KEY=VALUE`` in a fixed order."""
    env = [f"NVIDIA_VISIBLE_DEVICES={','.join(c.uuid for c in plan.cards)}"]
    if plan.cards:
        env.append(f"CUDA_DEVICE_SM_LIMIT={_sm(plan.cards[0])}")
    env.append(f"CUDA_DEVICE_MEMORY_SHARED_CACHE={claim_dir(host, plan.uid)}/{cache_name}")
    if log_level is not None:
        env.append(f"LIBCUDA_LOG_LEVEL={log_level}")
    if no_core_limit:
        env.append("GPU_CORE_UTILIZATION_POLICY=disable")
    return env


def _mount(host_path: str, container_path: str, *, writable: bool) -> dict[str, Any]:
    return {
        "hostPath": host_path,
        "containerPath": container_path,
        "type": "bind",
        "options": ["rw" if writable else "ro", "nosuid", "nodev", "bind"],
    }


def claim_spec(
    plan: ClaimPlan,
    host: HostFiles,
    cache_name: str,
    *,
    device_nodes: bool = True,
    env: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The claim's CDI spec. ``device_nodes=False`` leaves ``/dev`` nodes out (a fake NVML's GPUs have none)."""
    devices = [
        {
            "name": f"{plan.uid}-{card.device}",
            "containerEdits": {
                "env": card_env(i, card),
                **({"deviceNodes": [{"path": f"/dev/nvidia{card.minor}"}]} if device_nodes else {}),
            },
        }
        for i, card in enumerate(plan.cards)
    ]
    directory = claim_dir(host, plan.uid)
    edits: dict[str, Any] = {
        "env": list(env if env is not None else claim_env(plan, host, cache_name)),
        "mounts": [
            _mount(directory, directory, writable=True),
            _mount(host.library(), f"{host.vgpu_dir}/libvgpu.so", writable=False),
            _mount(f"{host.vgpu_dir}/ld.so.preload", "/etc/ld.so.preload", writable=False),
            _mount("/tmp/vgpulock", "/tmp/vgpulock", writable=True),
        ],
    }
    if device_nodes:
        edits["deviceNodes"] = [{"path": path} for path in CONTROL_NODES]
    return {"cdiVersion": CDI_VERSION, "kind": CDI_KIND, "devices": devices, "containerEdits": edits}
