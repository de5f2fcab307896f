"""Node device inventory: HAMi's JSON register format and the legacy colon format (scheduler-core.md §2.2).

* ``decode_inventory_json`` / ``encode_inventory_json`` — the current format (``hami.io/node-nvidia-register``
  and the other JSON vendors). Encoding is byte-identical to HAMi's ``MarshalNodeDevices`` (Go
  ``encoding/json``: struct key order, ``omitempty`` zero values left out, ``<``/``>``/``&`` escaped), so
  ``encode(decode(x)) == x`` for every value HAMi's device plugin writes.
* ``decode_inventory_legacy`` / ``encode_inventory_legacy`` — the colon format of HAMi ≤ v2.7 and of the Hygon
  and Iluvatar backends: ``ID,Count,Devmem,Devcore,Type,Numa,Health[,Index,Mode]:`` per device. Decoding applies
  HAMi's ``DecodeNodeDevices`` rules and check order exactly; encoding always writes 9 fields.

Decoders raise ``AnnotationError`` only; an empty inventory is not an error here (the vendor decides whether a
node without devices counts as registered: NVIDIA says ``no gpu found on node``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

from hami.errors import AnnotationError, InvalidInput
from hami.protocol import _gojson, keys
from hami.protocol._gojson import GoInt, GoInt32, GoUint, GoUint32
from hami.protocol._gostrconv import GoNumError, go_quote, parse_bool, parse_int

__all__ = [
    "LEGACY_DEFAULT_MODE",
    "DeviceInfo",
    "MigPlacement",
    "MigProfile",
    "decode_inventory_json",
    "decode_inventory_legacy",
    "encode_inventory_json",
    "encode_inventory_legacy",
]

LEGACY_DEFAULT_MODE: Final = "hami-core"
"""The mode a 7-field legacy record decodes to."""


class MigPlacement(msgspec.Struct, frozen=True):
    """A legal MIG placement: GPU slices ``[start, start + size)``. Go: two ``uint32``."""

    start: GoUint32 = 0
    size: GoUint32 = 0


class MigProfile(msgspec.Struct, frozen=True, rename={"memory_mb": "memoryMB", "slice_count": "sliceCount"}):
    """A MIG profile a GPU can host. JSON keys are not omitempty in HAMi, so every key is always written;
    a missing key decodes to its zero value, as in Go."""

    name: str = ""
    memory_mb: GoInt32 = 0
    core: GoInt32 = 0
    slice_count: GoUint32 = 0
    placements: tuple[MigPlacement, ...] = ()


class DeviceInfo(msgspec.Struct, frozen=True, omit_defaults=True, rename={"mig_profiles": "migProfiles"}):
    """One physical device as a node registers it. Field order is HAMi's JSON key order; zero values are
    omitted on encode (Go ``omitempty``), and an absent ``health`` decodes as ``False``.

    ``devmem`` is MiB, ``devcore`` is core units (100 = one whole card), ``count`` is the number of slots.
    Ranges are Go's: ``index`` uint, ``count``/``devmem``/``devcore`` int32, ``numa`` int.
    """

    id: str = ""
    index: GoUint = 0
    count: GoInt32 = 0
    devmem: GoInt32 = 0
    devcore: GoInt32 = 0
    type: str = ""
    numa: GoInt = 0
    mode: str = ""
    mig_profiles: tuple[MigProfile, ...] = ()
    health: bool = False


_JSON_DECODER: Final = msgspec.json.Decoder(list[DeviceInfo] | None)

_INT32: Final = (-(1 << 31), (1 << 31) - 1)
_UINT32: Final = (0, (1 << 32) - 1)
_INT64: Final = (-(1 << 63), (1 << 63) - 1)
_UINT64: Final = (0, (1 << 64) - 1)


# --- JSON ---------------------------------------------------------------------------------------


def decode_inventory_json(value: str, field: str = keys.NVIDIA_REGISTER) -> list[DeviceInfo]:
    """Decode a JSON register annotation. ``null`` and ``[]`` give ``[]`` (as Go's ``json.Unmarshal`` does).

    Errors: malformed JSON (``position`` = character offset), not an array, a field of the wrong type or out of
    its Go range (``position`` = the device's index in the array). Unknown keys (``devicevendor``,
    ``custominfo``, ``migtemplate``, ``instanceCount``) are ignored.
    """
    devices = _gojson.decode(value, _JSON_DECODER, field) or []
    for position, device in enumerate(devices):
        problem = _range_problem(device)
        if problem is not None:
            name, number, (low, high) = problem
            reason = f"invalid JSON value: {name} {number} is outside the Go range {low}..{high}"
            raise AnnotationError(field, value, reason, position)
    return devices


def encode_inventory_json(devices: Iterable[DeviceInfo]) -> str:
    """Encode as HAMi's ``MarshalNodeDevices`` does, byte for byte.

    Raises ``InvalidInput`` for a value Go could not hold (a number outside its Go type, a lone surrogate).
    """
    devices = list(devices)
    for position, device in enumerate(devices):
        _check_ranges(device, position)
    try:
        return _gojson.encode(devices)
    except UnicodeEncodeError as exc:
        raise InvalidInput("devices", exc.object, "text with a lone surrogate cannot be encoded") from None


# --- legacy colon format -------------------------------------------------------------------------


def decode_inventory_legacy(value: str, field: str) -> list[DeviceInfo]:
    """Decode the colon format with HAMi's ``DecodeNodeDevices`` rules, in its order (scheduler-core.md §2.2):

    1. no ``:`` anywhere → ``node annotation missing device separator`` (so ``""`` fails, ``":"`` is ``[]``);
    2. split on ``:``, skip empty segments; a segment without ``,`` → ``malformed node annotation segment``;
    3. 7 or 9 comma fields, else ``unexpected field count <n> in node annotation``;
    4. fields checked in the order count, memory, core (base-10 int32), health (Go ParseBool), numa (Atoi),
       index (Atoi, then ``index field must not be negative``); a 7-field record gets index 0, mode
       ``hami-core``.

    ``position`` is the character offset of the offending segment or field.
    """
    if ":" not in value:
        raise AnnotationError(field, value, "node annotation missing device separator")
    devices: list[DeviceInfo] = []
    offset = 0
    for segment in value.split(":"):
        start = offset
        offset += len(segment) + 1
        if not segment:
            continue
        if "," not in segment:
            raise AnnotationError(field, value, f"malformed node annotation segment: {go_quote(segment)}", start)
        items = segment.split(",")
        if len(items) not in (7, 9):
            raise AnnotationError(field, value, f"unexpected field count {len(items)} in node annotation", start)
        devices.append(_decode_legacy_record(items, _field_starts(items, start), field, value))
    return devices


def _field_starts(items: Sequence[str], start: int) -> list[int]:
    starts = []
    for item in items:
        starts.append(start)
        start += len(item) + 1
    return starts


def _decode_legacy_record(items: list[str], starts: list[int], field: str, value: str) -> DeviceInfo:
    def number(i: int, name: str, bits: int, func: str) -> int:
        try:
            return parse_int(items[i], bits, func)
        except GoNumError as exc:
            raise AnnotationError(field, value, f"invalid {name} field: {exc}", starts[i]) from None

    count = number(1, "count", 32, "ParseInt")
    devmem = number(2, "memory", 32, "ParseInt")
    devcore = number(3, "core", 32, "ParseInt")
    try:
        health = parse_bool(items[6])
    except GoNumError as exc:
        raise AnnotationError(field, value, f"invalid health field: {exc}", starts[6]) from None
    numa = number(5, "numa", 64, "Atoi")
    index, mode = 0, LEGACY_DEFAULT_MODE
    if len(items) == 9:
        index = number(7, "index", 64, "Atoi")
        if index < 0:
            raise AnnotationError(field, value, f"index field must not be negative: {index}", starts[7])
        mode = items[8]
    return DeviceInfo(
        id=items[0],
        index=index,
        count=count,
        devmem=devmem,
        devcore=devcore,
        type=items[4],
        numa=numa,
        mode=mode,
        health=health,
    )


def encode_inventory_legacy(devices: Iterable[DeviceInfo]) -> str:
    """Encode as HAMi's ``EncodeNodeDevices``: ``ID,Count,Devmem,Devcore,Type,Numa,Health,Index,Mode:`` each.

    MIG profiles have no place in this format and are left out (as in HAMi). No devices give ``""``, which the
    decoder rejects (as HAMi's does): a node without devices has no legacy inventory. Raises ``InvalidInput`` for a
    text field holding ``,`` or ``:`` or a number out of range — the result would not decode back.
    """
    parts = []
    for position, device in enumerate(devices):
        _check_ranges(device, position)
        for name in ("id", "type", "mode"):
            text = getattr(device, name)
            if "," in text or ":" in text:
                raise InvalidInput(f"devices[{position}].{name}", text, "holds a ',' or ':' separator")
        health = "true" if device.health else "false"
        parts.append(
            f"{device.id},{device.count},{device.devmem},{device.devcore},{device.type},"
            f"{device.numa},{health},{device.index},{device.mode}:"
        )
    return "".join(parts)


def _check_ranges(device: DeviceInfo, position: int) -> None:
    """Raise ``InvalidInput`` for a number Go's ``DeviceInfo`` could not hold."""
    problem = _range_problem(device)
    if problem is not None:
        name, number, (low, high) = problem
        raise InvalidInput(f"devices[{position}].{name}", number, f"outside the Go range {low}..{high}")


def _range_problem(device: DeviceInfo) -> tuple[str, int, tuple[int, int]] | None:
    """The first number Go's ``DeviceInfo`` could not hold: (field name, value, Go range), or ``None``."""
    checks: list[tuple[str, int, tuple[int, int]]] = [
        ("index", device.index, _UINT64),
        ("count", device.count, _INT32),
        ("devmem", device.devmem, _INT32),
        ("devcore", device.devcore, _INT32),
        ("numa", device.numa, _INT64),
    ]
    for p, profile in enumerate(device.mig_profiles):
        checks += [
            (f"migProfiles[{p}].memoryMB", profile.memory_mb, _INT32),
            (f"migProfiles[{p}].core", profile.core, _INT32),
            (f"migProfiles[{p}].sliceCount", profile.slice_count, _UINT32),
        ]
        for q, placement in enumerate(profile.placements):
            checks += [
                (f"migProfiles[{p}].placements[{q}].start", placement.start, _UINT32),
                (f"migProfiles[{p}].placements[{q}].size", placement.size, _UINT32),
            ]
    for name, number, bounds in checks:
        if not bounds[0] <= number <= bounds[1]:
            return name, number, bounds
    return None
