"""Pod device allocation annotations (scheduler-core.md §2.5, §2.6, §6.9).

* ``decode_pod_devices`` / ``encode_pod_devices`` — ``hami.io/vgpu-devices-allocated`` and ``…-to-allocate``
  (and every other vendor's allocation keys): ``UUID,Type,mem,cores:`` per device, ``;`` after every
  container, init containers first. Empty containers are kept in place, because the device plugin maps entries
  to containers by position. HAMi writes ``;`` after *every* container, so the empty piece after the final
  ``;`` is a separator artifact, not a container: ``"a:;"`` is one container, ``";a:;"`` two, ``""`` none.
  Then ``encode_pod_devices(decode_pod_devices(x)) == x`` for every value HAMi writes — including the plugin's
  rewrites (``;B:;;``, ``;;;;``), which grow by one ``;`` per Allocate call.
  *Difference from HAMi:* HAMi's ``DecodePodDevices`` keeps that artifact as one extra trailing empty
  container; hami drops it so the container list has the pod's length.
* ``encode_container_devices_of_type`` — HAMi's ``EncodeContainerDeviceType`` (some vendors' env values).
* ``decode_mig_allocations`` / ``encode_mig_allocations`` — ``hami.io/vgpu-mig-allocations`` JSON with
  HAMi's validation (``DecodeMigAllocations``).
* ``split_legacy_mig_uuid`` — the ≤ v2.9 template-MIG UUID suffix ``GPU-x[7-9]``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

from hami.errors import AnnotationError, InvalidInput
from hami.protocol import _gojson, keys
from hami.protocol._gojson import GoInt, GoUint32
from hami.protocol._gostrconv import GoNumError, parse_int
from hami.protocol.inventory import MigPlacement

__all__ = [
    "MISSING_FIELDS",
    "ContainerDevice",
    "ContainerDevices",
    "MigAllocation",
    "PodDevices",
    "decode_mig_allocations",
    "decode_pod_devices",
    "encode_container_devices_of_type",
    "encode_mig_allocations",
    "encode_pod_devices",
    "split_legacy_mig_uuid",
]

MISSING_FIELDS: Final = "pod annotation format error, missing fields, do not use nodeName in task spec"
"""HAMi's text for a device entry with fewer than 4 comma fields."""


class ContainerDevice(msgspec.Struct, frozen=True, gc=False):
    """One device reserved for one container. ``type`` is the vendor key (``"NVIDIA"``), not the card model.

    ``usedmem`` is MiB, ``usedcores`` is core units (percent of a card).
    """

    uuid: str
    type: str
    usedmem: int
    usedcores: int


ContainerDevices = tuple[ContainerDevice, ...]
PodDevices = tuple[ContainerDevices, ...]


class MigAllocation(
    msgspec.Struct,
    frozen=True,
    omit_defaults=True,
    rename={
        "container_index": "containerIndex",
        "device_index": "deviceIndex",
        "gpu_uuid": "gpuUUID",
        "mig_uuid": "migUUID",
        "gpu_instance_id": "gpuInstanceID",
        "compute_instance_id": "computeInstanceID",
    },
):
    """One reserved MIG instance (``hami.io/vgpu-mig-allocations`` element).

    ``container_index`` counts init containers first; ``device_index`` is the position inside that container's
    device list. The runtime identity (``mig_uuid``, ``gpu_instance_id``, ``compute_instance_id``) is written by
    the device plugin: all three or none; 0 is a valid instance id, so absence is ``None``.
    """

    container_index: int
    device_index: int
    gpu_uuid: str
    profile: str
    placement: MigPlacement
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None

    @property
    def runtime_ready(self) -> bool:
        return self.mig_uuid is not None and self.gpu_instance_id is not None and self.compute_instance_id is not None


_INT32: Final = (-(1 << 31), (1 << 31) - 1)


# --- pod devices --------------------------------------------------------------------------------


def decode_pod_devices(value: str, field: str = keys.NVIDIA_KEYS.allocated) -> PodDevices:
    """Decode one vendor's allocation annotation into one device tuple per container (see the module doc).

    Inside a container, pieces without ``,`` are ignored (as HAMi does); a piece with fewer than 4 comma fields
    raises ``MISSING_FIELDS``; fields after the 4th are ignored; memory and cores are base-10 int32
    (``invalid memory field: …`` / ``invalid core field: …``). ``position`` is the character offset of the
    offending device entry or number. Any error rejects the whole value, as in HAMi.
    """
    if not value:
        return ()
    pieces = value.split(";")
    if pieces[-1] == "":
        pieces.pop()  # the separator after the last container
    containers = []
    offset = 0
    for piece in pieces:
        containers.append(_decode_container(piece, offset, field, value))
        offset += len(piece) + 1
    return tuple(containers)


_SHARED_INTS: dict[int, int] = {}
"""Memory amounts decoded so far, one int object each (the ledger keeps one per placed pod; a few thousand distinct
amounts at most are kept here)."""


def _decode_container(piece: str, offset: int, field: str, value: str) -> ContainerDevices:
    devices = []
    for entry in piece.split(":"):
        start = offset
        offset += len(entry) + 1
        if "," not in entry:
            continue
        parts = entry.split(",")
        if len(parts) < 4:
            raise AnnotationError(field, value, MISSING_FIELDS, start)
        mem_at = start + len(parts[0]) + len(parts[1]) + 2
        usedmem = _int32(parts[2], "memory", field, value, mem_at)
        usedmem = _SHARED_INTS.setdefault(usedmem, usedmem) if len(_SHARED_INTS) < 4096 else usedmem
        usedcores = _int32(parts[3], "core", field, value, mem_at + len(parts[2]) + 1)
        # Interned: the ledger keeps every placed pod's devices, and many pods name the same device and vendor.
        uuid, kind = sys.intern(parts[0]), sys.intern(parts[1])
        devices.append(ContainerDevice(uuid, kind, usedmem, usedcores))
    return tuple(devices)


def _int32(text: str, name: str, field: str, value: str, position: int) -> int:
    if len(text) <= 9 and text.isascii() and text.isdigit():  # plain digits below 2**31: what ParseInt gives
        return int(text)
    try:
        return parse_int(text, 32)
    except GoNumError as exc:
        raise AnnotationError(field, value, f"invalid {name} field: {exc}", position) from None


def encode_pod_devices(devices: Sequence[Sequence[ContainerDevice]]) -> str:
    """HAMi's ``EncodePodSingleDevice``: ``uuid,type,mem,cores:`` per device, ``;`` after every container.

    Raises ``InvalidInput`` for a uuid or type holding ``,`` ``:`` or ``;``, or numbers outside int32.
    """
    out = []
    for c, container in enumerate(devices):
        for d, device in enumerate(container):
            _check_device(device, f"containers[{c}][{d}]")
            out.append(_device_text(device) + ":")
        out.append(";")
    return "".join(out)


def encode_container_devices_of_type(devices: Iterable[ContainerDevice], vendor: str) -> str:
    """HAMi's ``EncodeContainerDeviceType``: the devices whose ``type`` is ``vendor``, joined by ``:``, with no
    trailing separator (``GPU-a,NVIDIA,1000,10:GPU-c,NVIDIA,3000,30``)."""
    return ":".join(_device_text(device) for device in devices if device.type == vendor)


def _device_text(device: ContainerDevice) -> str:
    return f"{device.uuid},{device.type},{device.usedmem},{device.usedcores}"


def _check_device(device: ContainerDevice, where: str) -> None:
    for name in ("uuid", "type"):
        text = getattr(device, name)
        if any(sep in text for sep in ",:;"):
            raise InvalidInput(f"{where}.{name}", text, "holds a ',', ':' or ';' separator")
    for name in ("usedmem", "usedcores"):
        number = getattr(device, name)
        if not _INT32[0] <= number <= _INT32[1]:
            raise InvalidInput(f"{where}.{name}", number, "outside the int32 range")


# --- MIG allocations ----------------------------------------------------------------------------


class _MigAllocationWire(
    msgspec.Struct,
    rename={
        "container_index": "containerIndex",
        "device_index": "deviceIndex",
        "gpu_uuid": "gpuUUID",
        "mig_uuid": "migUUID",
        "gpu_instance_id": "gpuInstanceID",
        "compute_instance_id": "computeInstanceID",
    },
):
    """What Go's ``json.Unmarshal`` accepts: every key optional, ``null`` = the zero value / nil pointer."""

    container_index: GoInt | None = None
    device_index: GoInt | None = None
    gpu_uuid: str | None = None
    profile: str | None = None
    placement: MigPlacement | None = None
    mig_uuid: str | None = None
    gpu_instance_id: GoUint32 | None = None
    compute_instance_id: GoUint32 | None = None


_MIG_DECODER: Final = msgspec.json.Decoder(list[_MigAllocationWire] | None)


def decode_mig_allocations(value: str, field: str = keys.NVIDIA_MIG_ALLOCATIONS) -> list[MigAllocation]:
    """Decode with HAMi's ``DecodeMigAllocations`` rules. ``""``, ``null`` and ``[]`` give ``[]``.

    Rejected, with ``position`` = the element index: a negative index, an empty ``gpuUUID`` or ``profile``, or
    ``placement.size == 0`` (``MIG allocation <i> is incomplete``); one or two of the three runtime fields
    (``MIG allocation <i> has partial runtime identity``; an empty ``migUUID`` counts as absent, as Go's
    ``omitempty`` does); a repeated (container, device) pair (``duplicate MIG allocation for container c
    device d``).
    """
    if not value:
        return []
    wires = _gojson.decode(value, _MIG_DECODER, field) or []
    allocations = [
        MigAllocation(
            container_index=wire.container_index or 0,
            device_index=wire.device_index or 0,
            gpu_uuid=wire.gpu_uuid or "",
            profile=wire.profile or "",
            placement=wire.placement or MigPlacement(),
            mig_uuid=wire.mig_uuid or None,
            gpu_instance_id=wire.gpu_instance_id,
            compute_instance_id=wire.compute_instance_id,
        )
        for wire in wires
    ]
    problem = _mig_problem(allocations)
    if problem is not None:
        raise AnnotationError(field, value, problem[1], problem[0])
    return allocations


def encode_mig_allocations(allocations: Sequence[MigAllocation]) -> str:
    """Compact JSON in HAMi's key order, runtime fields left out when ``None``.

    No allocations give ``""``: HAMi writes the annotation only when there are reservations, so callers skip
    the key for an empty result. Raises ``InvalidInput`` for what ``decode_mig_allocations`` would reject.
    """
    if not allocations:
        return ""
    normalized = [
        msgspec.structs.replace(allocation, mig_uuid=None) if allocation.mig_uuid == "" else allocation
        for allocation in allocations
    ]
    problem = _mig_problem(normalized)
    if problem is not None:
        raise InvalidInput(f"allocations[{problem[0]}]", allocations[problem[0]], problem[1])
    for position, allocation in enumerate(normalized):
        for name in ("gpu_instance_id", "compute_instance_id"):
            number = getattr(allocation, name)
            if number is not None and not 0 <= number < 1 << 32:
                raise InvalidInput(f"allocations[{position}].{name}", number, "outside the uint32 range")
        placement = allocation.placement
        if not (0 <= placement.start < 1 << 32 and 0 <= placement.size < 1 << 32):
            raise InvalidInput(f"allocations[{position}].placement", allocation.placement, "outside uint32")
    try:
        return _gojson.encode(normalized)
    except UnicodeEncodeError as exc:
        raise InvalidInput("allocations", exc.object, "text with a lone surrogate cannot be encoded") from None


def _mig_problem(allocations: Sequence[MigAllocation]) -> tuple[int, str] | None:
    """HAMi's checks, in its order: the first failing (index, message), or ``None``."""
    seen: set[tuple[int, int]] = set()
    for i, allocation in enumerate(allocations):
        if (
            allocation.container_index < 0
            or allocation.device_index < 0
            or not allocation.gpu_uuid
            or not allocation.profile
            or allocation.placement.size == 0
        ):
            return i, f"MIG allocation {i} is incomplete"
        runtime = (allocation.mig_uuid, allocation.gpu_instance_id, allocation.compute_instance_id)
        if sum(part is not None for part in runtime) not in (0, 3):
            return i, f"MIG allocation {i} has partial runtime identity"
        key = (allocation.container_index, allocation.device_index)
        if key in seen:
            return i, f"duplicate MIG allocation for container {key[0]} device {key[1]}"
        seen.add(key)
    return None


# --- legacy template MIG (≤ v2.9) ---------------------------------------------------------------


def split_legacy_mig_uuid(uuid: str, field: str = keys.NVIDIA_KEYS.allocated) -> tuple[str, tuple[int, int] | None]:
    """Split a legacy template-MIG device UUID (scheduler-core.md §6.9).

    ``"GPU-x[7-9]"`` → ``("GPU-x", (7, 9))`` (geometry index, instance index); a UUID without ``[`` →
    ``(uuid, None)``. As HAMi's ``ExtractMigTemplatesFromUUID``: the indexes are the text between the first
    ``[`` and the first ``]``, split on ``-`` into exactly two Go ``Atoi`` integers; anything after ``]`` is
    ignored. A malformed suffix raises ``AnnotationError`` at the ``[``.
    """
    left = uuid.find("[")
    if left < 0:
        return uuid, None
    right = uuid.find("]")
    if right <= left:
        raise AnnotationError(field, uuid, "invalid legacy MIG UUID: no ']' after '['", left)
    parts = uuid[left + 1 : right].split("-")
    if len(parts) != 2:
        raise AnnotationError(field, uuid, "invalid legacy MIG UUID: expected [<geometry>-<instance>]", left)
    try:
        geometry, instance = [parse_int(part, 64, "Atoi") for part in parts]
    except GoNumError as exc:
        raise AnnotationError(field, uuid, f"invalid legacy MIG UUID: {exc}", left) from None
    return uuid[:left], (geometry, instance)
